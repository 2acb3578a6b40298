// Reading SFT records (prompt/response or chat) out of a JSONL file, with
// every missing key and wrong type reported by line.
#include <optional>

#include "meshrun/data/jsonl_reader.hpp"
#include "meshrun/data/dataset.hpp"

namespace meshrun {

namespace {

using nlohmann::json;

// The string at `key`, or a problem naming it.
std::optional<std::string> string_at(const json& object, const std::string& key, long long line,
                                     const std::string& shown_key, data::ProblemList& problems) {
  const json* found = data::field(object, key);
  if (!found) {
    problems.add(line, shown_key, "missing");
    return std::nullopt;
  }
  if (!found->is_string()) {
    problems.add(line, shown_key, "must be a string, got " + data::json_type_name(*found));
    return std::nullopt;
  }
  return found->get<std::string>();
}

std::optional<std::vector<ChatMessage>> read_messages(const json& list, const std::string& key, long long line,
                                                     data::ProblemList& problems) {
  if (!list.is_array()) {
    problems.add(line, key, "must be a list of {\"role\", \"content\"} objects, got " + data::json_type_name(list));
    return std::nullopt;
  }
  if (list.empty()) {
    problems.add(line, key, "is empty; the last message must be the assistant's");
    return std::nullopt;
  }
  if (list.size() > kMaxChatMessages) {
    problems.add(line, key, chat_too_long(list.size()));
    return std::nullopt;
  }
  std::vector<ChatMessage> messages;
  bool ok = true;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string item_key = key + "[" + std::to_string(i) + "]";
    if (!list[i].is_object()) {
      problems.add(line, item_key, "must be an object with \"role\" and \"content\", got " +
                                       data::json_type_name(list[i]));
      ok = false;
      continue;
    }
    auto role = string_at(list[i], "role", line, item_key + ".role", problems);
    auto content = string_at(list[i], "content", line, item_key + ".content", problems);
    if (!role || !content) {
      ok = false;
      continue;
    }
    messages.push_back(ChatMessage{std::move(*role), std::move(*content), data::extra_message_fields(list[i])});
  }
  if (!ok) return std::nullopt;
  if (messages.back().role != "assistant") {
    problems.add(line, key + "[" + std::to_string(messages.size() - 1) + "].role",
                 "the last message must be the assistant's (the response trained on), got \"" +
                     messages.back().role + "\"");
    return std::nullopt;
  }
  return messages;
}

}  // namespace

std::vector<SftRecord> read_sft_records(const DataConfig& given, int max_errors, DataReadLimit limit) {
  const DataConfig config = data::with_resolved_path(given);
  data::ProblemList problems(config.path, max_errors);
  std::vector<SftRecord> records;
  data::read_jsonl(config.path, problems, [&](long long line, const json& object) {
    if (const json* messages = data::field(object, config.messages_key)) {
      if (data::refuse_record_tools(object, line, problems)) return;
      auto parsed = read_messages(*messages, config.messages_key, line, problems);
      if (parsed) records.push_back(SftRecord{line, true, {}, {}, std::move(*parsed)});
      return;
    }
    const bool has_input = data::field(object, config.input_key) != nullptr;
    const bool has_output = data::field(object, config.output_key) != nullptr;
    if (!has_input && !has_output) {
      problems.add(line, "", "neither \"" + config.input_key + "\" and \"" + config.output_key + "\" nor \"" +
                                 config.messages_key + "\" (set data.input_key / data.output_key / "
                                 "data.messages_key to this file's keys)");
      return;
    }
    auto input = string_at(object, config.input_key, line, config.input_key, problems);
    auto output = string_at(object, config.output_key, line, config.output_key, problems);
    if (input && output) records.push_back(SftRecord{line, false, std::move(*input), std::move(*output), {}});
  }, limit);
  problems.throw_if_any();
  if (records.empty()) {
    throw DataError({DataProblem{config.path, 0, "", "the dataset is empty: no non-blank line"}}, 1);
  }
  return records;
}

}  // namespace meshrun
