// Reads a JSONL file line by line, or a file of one JSON array of records
// element by element, and collects located problems, so a data file's
// errors are reported all at once instead of one per run.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshrun/data/dataset.hpp"

namespace meshrun::data {

// Problems found while reading one file: keeps the first `limit`, counts all.
class ProblemList {
 public:
  ProblemList(std::string file, int limit) : file_(std::move(file)), limit_(limit) {}

  void add(long long line, std::string key, std::string message);
  void add(DataProblem problem);
  bool empty() const { return total_ == 0; }
  long long total() const { return total_; }
  const std::string& file() const { return file_; }
  // Throws DataError when there is any problem.
  void throw_if_any() const;

 private:
  std::string file_;
  int limit_;
  long long total_ = 0;
  std::vector<DataProblem> kept_;
};

// The longest line read_jsonl accepts: a longer one is a problem, skipped
// without being held in memory.
inline constexpr long long kMaxJsonlLineBytes = 64LL << 20;

// The most arrays, objects and strings (keys included) one line may hold; a
// line with more is a problem, refused before it is parsed. Each is a heap
// allocation of up to about 100 bytes once parsed, so this keeps a line's
// parsed form under about 100 MB beside its text, where 64 MiB of "{}," made
// 2 GB. Real records are far below it: a chat message is five, a chat of
// 5,000 messages 25,000; a list of token ids is one, however long.
inline constexpr std::size_t kMaxJsonlLineValues = 1'000'000;

// Calls `on_object(line, object)` for every non-blank line that is a JSON
// object; a line that is not JSON, or JSON but not an object, goes to
// `problems`. A file whose first character (after a byte order mark and
// blank space) is [, unless that [ closes on a first line followed by more
// text (JSON Lines of arrays), is one JSON array instead: each element is a record,
// located at the line it starts on and bounded like a line. A file that
// cannot be opened or read, or that is Parquet, Arrow or compressed (told
// by its first bytes), throws DataError. Returns the number of non-blank
// lines (records).
long long read_jsonl(const std::string& path, ProblemList& problems,
                     const std::function<void(long long line, const nlohmann::json& object)>& on_object,
                     DataReadLimit limit = {});

// The value a data key names in a record: the member of that name, else,
// for a key with dots that is not itself a member, the path through nested
// objects (`reward_model.ground_truth`, where veRL's data keeps a prompt's
// answer). Null when neither exists.
const nlohmann::json* field(const nlohmann::json& object, const std::string& key);

// "string", "number", "array", ... for messages about wrong types.
std::string json_type_name(const nlohmann::json& value);

// A non-empty JSON list of {"role", "content"} strings appended to
// `messages`; otherwise false with a problem naming `key` or the bad item.
// A chat message object's keys other than role and content (tool_calls,
// name, reasoning_content, ...), for ChatMessage::fields; null when it has
// none.
std::shared_ptr<const nlohmann::ordered_json> extra_message_fields(const nlohmann::json& message);

// A record's "tools" (the tool definitions transformers' apply_chat_template
// takes beside the messages) do not reach meshrun's chat template: a record
// that has them is a problem at its line, not tools silently left out.
bool refuse_record_tools(const nlohmann::json& record, long long line, ProblemList& problems);

bool read_chat_messages(const nlohmann::json& list, const std::string& key, long long line, ProblemList& problems,
                        std::vector<ChatMessage>& messages);

// `config` with data.path resolved: a Hugging Face dataset name to its
// file in the local hub cache (include/meshrun/model/hub_cache.hpp); a local
// path as it is. Throws DataError naming where it looked.
DataConfig with_resolved_path(const DataConfig& config);

}  // namespace meshrun::data
