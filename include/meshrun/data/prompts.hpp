// Prompt datasets for rollouts (PPO) and `meshrun generate`: a JSONL file
// of prompts, tokenised the way the model will see them at generation.
//
// Each non-blank line is a JSON object with either the input key (a string,
// encoded with the tokenizer's special tokens) or the messages key (a list
// of {"role", "content"}, rendered by the chat template with the generation
// prompt and encoded without adding special tokens). A prompt longer than
// max_prompt_len keeps its last tokens (the end of a prompt is what the
// response follows) and is counted as truncated. With a label key, every
// line carries its label there (any JSON value: a verifiable reward's
// reference answer), kept with the prompt. Problems are collected over the
// whole file and thrown together as one DataError (file:line, key).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshrun/data/dataset.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"

namespace meshrun {

struct Prompt {
  long long line = 0;  // 1-based line of the file
  std::vector<int32_t> ids;
  std::optional<nlohmann::json> label;  // config.label_key's value; none without a label key
  // What the line said, for multi-turn episodes: the input text (chat form:
  // the last user message's content) and the chat messages (empty for the
  // input form).
  std::string text;
  std::vector<ChatMessage> messages;
};

struct PromptDataset {
  std::string path;
  std::vector<Prompt> prompts;
  long long truncated = 0;
};

// One line of a prompt file, checked but not tokenised: the input text or
// the chat messages, and the label.
struct PromptRecord {
  long long line = 0;
  bool is_chat = false;
  std::string input;                  // input-key form
  std::vector<ChatMessage> messages;  // chat form
  std::optional<nlohmann::json> label;
};

// Reads and checks the lines of config.path (input_key or messages_key,
// label_key). Throws DataError with every problem found (up to max_errors).
std::vector<PromptRecord> read_prompt_records(const DataConfig& config, int max_errors = kDefaultMaxDataErrors,
                                              DataReadLimit limit = {});

// read_prompt_records (over the part of the file `limit` allows), then
// each prompt tokenised. Throws DataError.
PromptDataset load_prompt_dataset(const DataConfig& config, const Tokenizer& tokenizer, int max_prompt_len,
                                  int max_errors = kDefaultMaxDataErrors, DataReadLimit limit = {});

// One prompt text as the dataset would tokenise it (input-key form).
std::vector<int32_t> encode_prompt(const std::string& text, const Tokenizer& tokenizer, int max_prompt_len);

}  // namespace meshrun
