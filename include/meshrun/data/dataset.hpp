// SFT dataset: a JSONL file turned into tokenised samples with a loss mask.
//
// Each non-blank line is one JSON object, in one of two forms:
// - prompt/response: {"<input_key>": "...", "<output_key>": "..."}. The
//   prompt is the input text encoded with the tokenizer's special tokens
//   (add_special = true, so bos where the tokenizer adds one); the response
//   is the output text followed by the eos token. The two are encoded
//   together (input + output) so that the tokens are the ones the model sees
//   at inference; when joint encoding merges tokens across the boundary (the
//   prompt's ids are then not a prefix), the prompt and the output are
//   encoded separately and concatenated instead.
// - chat: {"<messages_key>": [{"role": ..., "content": ...}, ...]}, the last
//   message the assistant's. The full conversation is
//   apply_chat_template(messages, false), encoded with add_special = false
//   (the template writes its own special tokens, as Hugging Face's
//   apply_chat_template(tokenize=True) does). The loss covers every
//   assistant turn (LossTurns::all) or the final one (last): where the
//   template has {% generation %} blocks, the text they wrote (Hugging
//   Face's assistant mask); otherwise turn i runs from the end of
//   apply_chat_template(messages[:i], true) to the end of
//   apply_chat_template(messages[:i+1], false) (the final turn: to the end),
//   and each of those prefixes must encode to a prefix of the full ids; a
//   template for which one does not is an error naming the line.
// A line with the messages key is chat; any other needs both the input and
// the output key.
//
// Invariants of every SftSample: 1 <= size() <= max_len; loss_mask[i] is 1
// exactly for response (trained assistant) tokens (the targets the loss covers; the next-token
// shift is the trainer's job), and loss_mask[0] is always 0 — the first
// token of a sample is never a target, so in a packed sequence no token is
// predicted across samples; at least one loss token. Truncation keeps the
// start (the prompt) and cuts the end; a sample whose prompt alone fills
// max_len has no loss token and is dropped and counted, never trained on.
//
// Errors (missing file, a line that is not JSON, a missing key, a wrong
// type, a template whose prompt is not a prefix) are collected over the
// whole file and thrown together as one DataError naming file:line and the
// key, up to `max_errors` of them (then a count of the rest). A file with
// no sample, or whose every sample was dropped, is a DataError too.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "meshrun/error.hpp"

namespace meshrun {

// One problem in a data file. line 0: the file as a whole. key may be empty.
struct DataProblem {
  std::string file;
  long long line = 0;
  std::string key;
  std::string message;

  // "file:line: key \"k\": message", "file:line: message" or "file: message".
  std::string str() const;
};

class DataError : public KindError<ErrorKind::data> {
 public:
  // `total` counts every problem found, `problems` holds the first ones.
  DataError(std::vector<DataProblem> problems, long long total);

  const std::vector<DataProblem>& problems() const { return problems_; }
  long long total() const { return total_; }

 private:
  std::vector<DataProblem> problems_;
  long long total_;
};

// Placing the loss on each assistant turn renders and encodes a prefix of
// the conversation per turn, so a record's cost grows with turns × length.
// Real conversations have tens of turns; this bound is far above them and
// keeps one hostile record (a 64 MiB line of a million one-character turns)
// from taking hours. The reader refuses a longer conversation (so lint
// does too), the encoder again for records made elsewhere.
inline constexpr std::size_t kMaxChatMessages = 4096;
inline std::string chat_too_long(std::size_t messages) {
  return "a conversation of " + std::to_string(messages) + " messages; at most " + std::to_string(kMaxChatMessages) +
         " are accepted (split it into several records)";
}

// A chat message or a prompt/response pair, as read from one line.
struct SftRecord {
  long long line = 0;
  bool is_chat = false;
  std::string input;                  // prompt/response form
  std::string output;                 // prompt/response form
  std::vector<ChatMessage> messages;  // chat form; the last is the assistant's
};

struct SftSample {
  long long line = 0;  // 1-based line of the JSONL file it came from
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> loss_mask;  // 1: a response token, a target of the loss
  int prompt_len = 0;              // tokens before the first trained one (after truncation: <= size())

  int size() const { return static_cast<int>(input_ids.size()); }
  int loss_tokens() const;
};

struct DatasetStats {
  long long lines = 0;              // non-blank lines read
  long long samples = 0;            // kept
  long long dropped_prompt_fills_max_len = 0;
  long long dropped_no_response_token = 0;  // empty output and no eos token
  long long truncated = 0;          // kept, but cut to max_len
  long long tokens = 0;             // of kept samples
  long long loss_tokens = 0;        // of kept samples

  long long dropped() const { return dropped_prompt_fills_max_len + dropped_no_response_token; }
  // One line for the log: "1000 samples from 1002 lines (2 dropped: ...)".
  std::string summary() const;
};

struct SftDataset {
  std::string path;
  std::vector<SftSample> samples;
  DatasetStats stats;
};

inline constexpr int kDefaultMaxDataErrors = 20;

// How much of a data file to read: 0 is all of it; otherwise reading stops
// before the first line that starts at or beyond max_bytes, or (max_lines)
// after that many non-blank lines, and `truncated` (when given) says
// whether anything was left unread. Lint reads a prefix by bytes, `meshrun
// data` its first samples by lines.
struct DataReadLimit {
  long long max_bytes = 0;
  bool* truncated = nullptr;
  long long max_lines = 0;
};

// Reads and checks every line of `config.path` (keys from `config`). Throws
// DataError with every problem found (up to max_errors).
std::vector<SftRecord> read_sft_records(const DataConfig& config,
                                        int max_errors = kDefaultMaxDataErrors, DataReadLimit limit = {});

// Tokenises one record without truncation; `turns` chooses a chat
// sample's trained assistant turns (preference pairs: last). Throws
// DataError (naming `file` and the record's line) when a chat template's
// prompt is not a prefix of its full conversation, or the tokenizer fails.
SftSample tokenize_sft_record(const SftRecord& record, const Tokenizer& tokenizer, const std::string& file,
                              LossTurns turns);

// Cuts a sample to max_len tokens, keeping the start. Returns false when no
// loss token is left (the caller drops the sample).
bool truncate_sample(SftSample& sample, int max_len);

// read_sft_records + tokenize_sft_record + truncate_sample over the file,
// or over the part of it `limit` allows (then, when the read stopped short
// and every sample read was dropped, the dataset is empty rather than an
// error: the rest of the file may hold samples).
SftDataset load_sft_dataset(const DataConfig& config, const Tokenizer& tokenizer,
                            int max_errors = kDefaultMaxDataErrors, DataReadLimit limit = {});

}  // namespace meshrun
