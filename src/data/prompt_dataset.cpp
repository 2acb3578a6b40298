// Prompt JSONL → token ids (include/meshrun/data/prompts.hpp).
#include <algorithm>

#include "meshrun/data/jsonl_reader.hpp"
#include "meshrun/data/prompts.hpp"

namespace meshrun {
namespace {

using nlohmann::json;

bool keep_last(std::vector<int32_t>& ids, int max_prompt_len) {
  if (static_cast<int>(ids.size()) <= max_prompt_len) return false;
  ids.erase(ids.begin(), ids.end() - max_prompt_len);
  return true;
}

}  // namespace

std::vector<int32_t> encode_prompt(const std::string& text, const Tokenizer& tokenizer, int max_prompt_len) {
  std::vector<int32_t> ids = tokenizer.encode(text, true);
  keep_last(ids, max_prompt_len);
  return ids;
}

std::vector<PromptRecord> read_prompt_records(const DataConfig& given, int max_errors, DataReadLimit limit) {
  const DataConfig config = data::with_resolved_path(given);
  data::ProblemList problems(config.path, max_errors);
  std::vector<PromptRecord> records;
  data::read_jsonl(config.path, problems, [&](long long line, const json& object) {
    PromptRecord record;
    record.line = line;
    if (const json* messages = data::field(object, config.messages_key)) {
      record.is_chat = true;
      if (data::refuse_record_tools(object, line, problems)) return;
      if (!data::read_chat_messages(*messages, config.messages_key, line, problems, record.messages)) return;
    } else if (const json* input = data::field(object, config.input_key)) {
      if (!input->is_string()) {
        problems.add(line, config.input_key, "must be a string, got " + data::json_type_name(*input));
        return;
      }
      record.input = input->get<std::string>();
    } else {
      problems.add(line, config.input_key, "missing (a prompt needs \"" + config.input_key + "\" or \"" +
                                               config.messages_key + "\")");
      return;
    }
    if (!config.label_key.empty()) {
      const json* found = data::field(object, config.label_key);
      if (!found) {
        problems.add(line, config.label_key, "missing (data.label_key names the label every prompt carries)");
        return;
      }
      record.label = *found;
    }
    records.push_back(std::move(record));
  }, limit);
  problems.throw_if_any();
  if (records.empty()) throw DataError({DataProblem{config.path, 0, "", "holds no prompt"}}, 1);
  return records;
}

PromptDataset load_prompt_dataset(const DataConfig& given, const Tokenizer& tokenizer, int max_prompt_len,
                                  int max_errors, DataReadLimit limit) {
  const DataConfig config = data::with_resolved_path(given);
  std::vector<PromptRecord> records = read_prompt_records(config, max_errors, limit);
  data::ProblemList problems(config.path, max_errors);
  PromptDataset dataset;
  dataset.path = config.path;
  for (PromptRecord& record : records) {
    std::vector<int32_t> ids;
    try {
      ids = record.is_chat ? tokenizer.encode(tokenizer.apply_chat_template(record.messages, true), false)
                           : tokenizer.encode(record.input, true);
    } catch (const TokenizerError& error) {
      problems.add(record.line, record.is_chat ? config.messages_key : config.input_key, error.what());
      continue;
    }
    if (ids.empty()) {
      problems.add(record.line, config.input_key, "the prompt encodes to no token");
      continue;
    }
    if (keep_last(ids, max_prompt_len)) ++dataset.truncated;
    std::string text = std::move(record.input);
    if (record.is_chat)
      for (const ChatMessage& message : record.messages)
        if (message.role == "user") text = message.content;
    dataset.prompts.push_back(
        Prompt{record.line, std::move(ids), std::move(record.label), std::move(text), std::move(record.messages)});
  }
  problems.throw_if_any();
  return dataset;
}

}  // namespace meshrun
