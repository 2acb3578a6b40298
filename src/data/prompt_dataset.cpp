// Prompt JSONL → token ids (include/meshrun/prompts.hpp).
#include <algorithm>

#include "jsonl_reader.hpp"
#include "meshrun/prompts.hpp"

namespace meshrun {
namespace {

using nlohmann::json;

bool keep_last(std::vector<int32_t>& ids, int max_prompt_len) {
  if (static_cast<int>(ids.size()) <= max_prompt_len) return false;
  ids.erase(ids.begin(), ids.end() - max_prompt_len);
  return true;
}

// The messages of a chat prompt, or a problem naming the bad item.
bool read_messages(const json& list, const std::string& key, long long line, data::ProblemList& problems,
                   std::vector<ChatMessage>& messages) {
  if (!list.is_array() || list.empty()) {
    problems.add(line, key, "must be a non-empty list of {\"role\", \"content\"} objects, got " +
                                (list.is_array() ? std::string("an empty list") : data::json_type_name(list)));
    return false;
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string item = key + "[" + std::to_string(i) + "]";
    const json& message = list[i];
    const bool ok = message.is_object() && message.contains("role") && message["role"].is_string() &&
                    message.contains("content") && message["content"].is_string();
    if (!ok) {
      problems.add(line, item, "must be an object with string \"role\" and \"content\"");
      return false;
    }
    messages.push_back(ChatMessage{message["role"].get<std::string>(), message["content"].get<std::string>()});
  }
  return true;
}

}  // namespace

std::vector<int32_t> encode_prompt(const std::string& text, const Tokenizer& tokenizer, int max_prompt_len) {
  std::vector<int32_t> ids = tokenizer.encode(text, true);
  keep_last(ids, max_prompt_len);
  return ids;
}

PromptDataset load_prompt_dataset(const DataConfig& config, const Tokenizer& tokenizer, int max_prompt_len,
                                  int max_errors) {
  data::ProblemList problems(config.path, max_errors);
  PromptDataset dataset;
  dataset.path = config.path;
  data::read_jsonl(config.path, problems, [&](long long line, const json& object) {
    std::vector<int32_t> ids;
    if (const auto messages = object.find(config.messages_key); messages != object.end()) {
      std::vector<ChatMessage> chat;
      if (!read_messages(*messages, config.messages_key, line, problems, chat)) return;
      try {
        ids = tokenizer.encode(tokenizer.apply_chat_template(chat, true), false);
      } catch (const TokenizerError& error) {
        problems.add(line, config.messages_key, error.what());
        return;
      }
    } else if (const auto input = object.find(config.input_key); input != object.end()) {
      if (!input->is_string()) {
        problems.add(line, config.input_key, "must be a string, got " + data::json_type_name(*input));
        return;
      }
      ids = tokenizer.encode(input->get<std::string>(), true);
    } else {
      problems.add(line, config.input_key, "missing (a prompt needs \"" + config.input_key + "\" or \"" +
                                               config.messages_key + "\")");
      return;
    }
    if (ids.empty()) {
      problems.add(line, config.input_key, "the prompt encodes to no token");
      return;
    }
    if (keep_last(ids, max_prompt_len)) ++dataset.truncated;
    dataset.prompts.push_back(Prompt{line, std::move(ids)});
  });
  problems.throw_if_any();
  if (dataset.prompts.empty())
    throw DataError({DataProblem{config.path, 0, "", "holds no prompt"}}, 1);
  return dataset;
}

}  // namespace meshrun
