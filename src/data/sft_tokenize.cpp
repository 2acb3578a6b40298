// Turning one SFT record into token ids with a loss mask on the response.
#include <algorithm>
#include <stdexcept>

#include "meshrun/data/dataset.hpp"

namespace meshrun {

namespace {

// The first position where `prefix` and `ids` differ, or prefix.size().
std::size_t common_prefix(const std::vector<int32_t>& prefix, const std::vector<int32_t>& ids) {
  const std::size_t n = std::min(prefix.size(), ids.size());
  return static_cast<std::size_t>(std::mismatch(prefix.begin(), prefix.begin() + n, ids.begin()).first -
                                  prefix.begin());
}

struct Encoded {
  std::vector<int32_t> ids;
  std::size_t prompt_len = 0;
};

Encoded encode_prompt_response(const SftRecord& record, const Tokenizer& tokenizer) {
  Encoded out;
  std::vector<int32_t> prompt = tokenizer.encode(record.input, true);
  out.ids = tokenizer.encode(record.input + record.output, true);
  if (common_prefix(prompt, out.ids) != prompt.size()) {
    // Joint encoding merged tokens across the boundary: keep the boundary.
    std::vector<int32_t> response = tokenizer.encode(record.output, false);
    out.ids = prompt;
    out.ids.insert(out.ids.end(), response.begin(), response.end());
  }
  out.prompt_len = prompt.size();
  if (const auto eos = tokenizer.eos_id()) out.ids.push_back(*eos);
  return out;
}

Encoded encode_chat(const SftRecord& record, const Tokenizer& tokenizer, const std::string& file) {
  const std::vector<ChatMessage> head(record.messages.begin(), record.messages.end() - 1);
  Encoded out;
  out.ids = tokenizer.encode(tokenizer.apply_chat_template(record.messages, false), false);
  const std::vector<int32_t> prompt = tokenizer.encode(tokenizer.apply_chat_template(head, true), false);
  const std::size_t same = common_prefix(prompt, out.ids);
  if (same != prompt.size()) {
    throw DataError({DataProblem{file, record.line, "",
                                 "the chat template's prompt (all messages but the last, with the generation "
                                 "prompt: " + std::to_string(prompt.size()) +
                                     " tokens) is not a prefix of the full conversation (" +
                                     std::to_string(out.ids.size()) + " tokens); they differ at token " +
                                     std::to_string(same) + " (" + tokenizer.description() +
                                     "): the loss mask cannot be placed on the assistant's reply"}},
                    1);
  }
  out.prompt_len = prompt.size();
  // Templates that end a turn with eos (<|im_end|>, <|eot_id|>) teach the
  // model to stop; for one that does not, eos is appended so it still learns.
  const auto eos = tokenizer.eos_id();
  if (eos && std::find(out.ids.begin() + static_cast<std::ptrdiff_t>(out.prompt_len), out.ids.end(), *eos) ==
                 out.ids.end()) {
    out.ids.push_back(*eos);
  }
  return out;
}

}  // namespace

int SftSample::loss_tokens() const {
  return static_cast<int>(std::count(loss_mask.begin(), loss_mask.end(), uint8_t{1}));
}

SftSample tokenize_sft_record(const SftRecord& record, const Tokenizer& tokenizer, const std::string& file) {
  Encoded encoded;
  try {
    encoded = record.is_chat ? encode_chat(record, tokenizer, file) : encode_prompt_response(record, tokenizer);
  } catch (const TokenizerError& error) {
    throw DataError({DataProblem{file, record.line, "", std::string("tokenizer: ") + error.what()}}, 1);
  }
  SftSample sample;
  sample.line = record.line;
  sample.prompt_len = static_cast<int>(encoded.prompt_len);
  sample.input_ids = std::move(encoded.ids);
  sample.loss_mask.assign(sample.input_ids.size(), 0);
  std::fill(sample.loss_mask.begin() + sample.prompt_len, sample.loss_mask.end(), uint8_t{1});
  // The first token has nothing before it in its sample to be predicted from.
  if (!sample.loss_mask.empty()) sample.loss_mask[0] = 0;
  return sample;
}

bool truncate_sample(SftSample& sample, int max_len) {
  if (max_len < 1) throw std::invalid_argument("data.max_len must be at least 1, got " + std::to_string(max_len));
  if (sample.size() > max_len) {
    sample.input_ids.resize(static_cast<std::size_t>(max_len));
    sample.loss_mask.resize(static_cast<std::size_t>(max_len));
    sample.prompt_len = std::min(sample.prompt_len, max_len);
  }
  return sample.loss_tokens() > 0;
}

}  // namespace meshrun
