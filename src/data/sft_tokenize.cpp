// Turning one SFT record into token ids with a loss mask on the response
// (or, for chat samples, on the assistant turns data.loss_turns names).
#include <algorithm>
#include <optional>
#include <utility>
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

// A sample's token ids and the [begin, end) token ranges its loss covers.
struct Encoded {
  std::vector<int32_t> ids;
  std::vector<std::pair<std::size_t, std::size_t>> trained;
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
  if (const auto eos = tokenizer.eos_id()) out.ids.push_back(*eos);
  out.trained.emplace_back(prompt.size(), out.ids.size());
  return out;
}

DataError chat_error(const SftRecord& record, const std::string& file, const std::string& message) {
  return DataError({DataProblem{file, record.line, "", message}}, 1);
}

// The bound on a record's re-encoded prefixes, beside kMaxChatMessages
// (meshrun/data/dataset.hpp) and for the same reason.
constexpr std::size_t kMaxPrefixBytesPerRecord = std::size_t{128} << 20;

// The bytes of conversation prefixes one record re-encodes, against
// kMaxPrefixBytesPerRecord.
class PrefixBudget {
 public:
  PrefixBudget(const SftRecord& record, const std::string& file) : record_(record), file_(file) {}
  void charge(std::size_t bytes) {
    used_ += bytes;
    if (used_ > kMaxPrefixBytesPerRecord)
      throw chat_error(record_, file_,
                       "placing the loss on each assistant turn would re-encode more than " +
                           std::to_string(kMaxPrefixBytesPerRecord >> 20) + " MiB of conversation prefixes (" +
                           std::to_string(record_.messages.size()) +
                           " messages); split the conversation, or set data.loss_turns = \"last\"");
  }

 private:
  const SftRecord& record_;
  const std::string& file_;
  std::size_t used_ = 0;
};

std::string turn_name(const SftRecord& record, std::size_t index) {
  return record.messages.size() > 2 ? " (message " + std::to_string(index + 1) + ")" : "";
}

// Token ranges by rendering the conversation prefix by prefix: assistant
// turn i starts where messages[:i] with the generation prompt ends and
// ends where messages[:i+1] ends (the final turn: where the text ends), so
// what the template writes after an assistant message (its end-of-turn
// token) is trained too. Each prefix must encode to a prefix of the whole.
void place_turns_by_prefix(const SftRecord& record, const Tokenizer& tokenizer, const std::string& file,
                           LossTurns turns, Encoded& out) {
  const std::vector<ChatMessage>& messages = record.messages;
  PrefixBudget budget(record, file);
  auto encode_prefix = [&](const std::vector<ChatMessage>& head, bool add_generation_prompt) {
    const std::string text = tokenizer.apply_chat_template(head, add_generation_prompt);
    budget.charge(text.size());
    return tokenizer.encode(text, false);
  };
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const bool final_turn = i + 1 == messages.size();
    if (messages[i].role != "assistant" || (turns == LossTurns::last && !final_turn)) continue;
    const std::vector<ChatMessage> head(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i));
    const std::vector<int32_t> prompt = encode_prefix(head, true);
    const std::size_t same = common_prefix(prompt, out.ids);
    if (same != prompt.size()) {
      throw chat_error(record, file,
                       "the chat template's prompt (the messages before the assistant's" + turn_name(record, i) +
                           ", with the generation prompt: " + std::to_string(prompt.size()) +
                           " tokens) is not a prefix of the full conversation (" + std::to_string(out.ids.size()) +
                           " tokens); they differ at token " + std::to_string(same) + " (" + tokenizer.description() +
                           "): the loss mask cannot be placed on the assistant's reply" +
                           (turns == LossTurns::all ? "; data.loss_turns = \"last\" trains the final reply only" : ""));
    }
    std::size_t end = out.ids.size();
    if (!final_turn) {
      const std::vector<ChatMessage> upto(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      const std::vector<int32_t> through = encode_prefix(upto, false);
      const std::size_t shared = common_prefix(through, out.ids);
      if (shared != through.size()) {
        throw chat_error(record, file,
                         "the chat template renders the conversation up to the assistant's message" +
                             turn_name(record, i) + " (" + std::to_string(through.size()) +
                             " tokens) differently from the full conversation (they differ at token " +
                             std::to_string(shared) + ", " + tokenizer.description() +
                             "): the loss mask cannot be placed on each assistant turn; use a template with "
                             "{% generation %} blocks, or data.loss_turns = \"last\"");
      }
      end = through.size();
    }
    if (end > prompt.size()) out.trained.emplace_back(prompt.size(), end);
  }
}

// The tokens text[0, pos) covers within `ids`: those that encoding the
// prefix alone gives and the whole shares. A token that straddles `pos`
// (merged across it) counts as after it, unless `straddling_before`.
std::size_t tokens_before(const Tokenizer& tokenizer, const std::string& text, std::size_t pos,
                          const std::vector<int32_t>& ids, bool straddling_before, PrefixBudget& budget) {
  budget.charge(pos);
  const std::vector<int32_t> prefix = tokenizer.encode(std::string_view(text).substr(0, pos), false);
  const std::size_t same = common_prefix(prefix, ids);
  return same < prefix.size() && straddling_before ? std::min(same + 1, ids.size()) : same;
}

// Token ranges from the template's {% generation %} blocks (Hugging Face's
// assistant mask): every block, or the last one.
void place_turns_by_markers(const SftRecord& record, const Tokenizer& tokenizer, const std::string& file,
                            LossTurns turns, const MarkedChat& marked, Encoded& out) {
  if (marked.generation.empty()) {
    throw chat_error(record, file,
                     "the chat template's {% generation %} blocks marked none of this conversation's text (" +
                         tokenizer.description() + "): nothing to train on");
  }
  std::size_t first = turns == LossTurns::last ? marked.generation.size() - 1 : 0;
  PrefixBudget budget(record, file);
  for (std::size_t k = first; k < marked.generation.size(); ++k) {
    const auto [begin_char, end_char] = marked.generation[k];
    const std::size_t begin = tokens_before(tokenizer, marked.text, begin_char, out.ids, false, budget);
    const std::size_t end = tokens_before(tokenizer, marked.text, end_char, out.ids, true, budget);
    if (end > begin) out.trained.emplace_back(begin, end);
  }
}

Encoded encode_chat(const SftRecord& record, const Tokenizer& tokenizer, const std::string& file, LossTurns turns) {
  Encoded out;
  if (record.messages.size() > kMaxChatMessages)
    throw chat_error(record, file, chat_too_long(record.messages.size()));
  const std::optional<MarkedChat> marked = tokenizer.render_chat_marked(record.messages);
  const std::string text = marked ? marked->text : tokenizer.apply_chat_template(record.messages, false);
  out.ids = tokenizer.encode(text, false);
  if (marked) place_turns_by_markers(record, tokenizer, file, turns, *marked, out);
  else place_turns_by_prefix(record, tokenizer, file, turns, out);
  // Templates that end a turn with eos (<|im_end|>, <|eot_id|>) teach the
  // model to stop; for one that does not, eos is appended (and trained) so
  // it still learns.
  const auto eos = tokenizer.eos_id();
  const std::size_t last_begin = out.trained.empty() ? out.ids.size() : out.trained.back().first;
  if (eos && std::find(out.ids.begin() + static_cast<std::ptrdiff_t>(last_begin), out.ids.end(), *eos) ==
                 out.ids.end()) {
    out.ids.push_back(*eos);
    out.trained.emplace_back(out.ids.size() - 1, out.ids.size());
  }
  return out;
}

}  // namespace

int SftSample::loss_tokens() const {
  return static_cast<int>(std::count(loss_mask.begin(), loss_mask.end(), uint8_t{1}));
}

SftSample tokenize_sft_record(const SftRecord& record, const Tokenizer& tokenizer, const std::string& file,
                              LossTurns turns) {
  Encoded encoded;
  try {
    encoded = record.is_chat ? encode_chat(record, tokenizer, file, turns) : encode_prompt_response(record, tokenizer);
  } catch (const TokenizerError& error) {
    throw DataError({DataProblem{file, record.line, "", std::string("tokenizer: ") + error.what()}}, 1);
  }
  SftSample sample;
  sample.line = record.line;
  sample.input_ids = std::move(encoded.ids);
  sample.loss_mask.assign(sample.input_ids.size(), 0);
  for (const auto& [begin, end] : encoded.trained)
    std::fill(sample.loss_mask.begin() + static_cast<std::ptrdiff_t>(begin),
              sample.loss_mask.begin() + static_cast<std::ptrdiff_t>(end), uint8_t{1});
  sample.prompt_len = encoded.trained.empty() ? sample.size() : static_cast<int>(encoded.trained.front().first);
  // The first token has nothing before it in its sample to be predicted from.
  if (!sample.loss_mask.empty()) sample.loss_mask[0] = 0;
  return sample;
}

bool truncate_sample(SftSample& sample, int max_len) {
  if (max_len < 1)
    throw ConfigError("data.max_len must be at least 1, got " + std::to_string(max_len), "data.max_len",
                      "schema.range");
  if (sample.size() > max_len) {
    sample.input_ids.resize(static_cast<std::size_t>(max_len));
    sample.loss_mask.resize(static_cast<std::size_t>(max_len));
    sample.prompt_len = std::min(sample.prompt_len, max_len);
  }
  return sample.loss_tokens() > 0;
}

}  // namespace meshrun
