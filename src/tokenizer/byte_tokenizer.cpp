// The byte-level tokenizer: every byte is its own id, then three specials.
// It needs no files, so tests and the builtin: model presets use it.
#include <array>

#include "tokenizer_internal.hpp"

namespace meshrun {
namespace {

constexpr int32_t kBos = 256, kEos = 257, kPad = 258, kVocab = 259;
constexpr std::array<std::string_view, 3> kSpecialNames{"<|bos|>", "<|eos|>", "<|pad|>"};

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size() + 1);
    if (add_special) ids.push_back(kBos);
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string text;
    text.reserve(ids.size());
    for (int32_t id : ids) {
      if (id >= 0 && id < 256) {
        text += static_cast<char>(id);
      } else if (id >= kBos && id < kVocab) {
        if (!skip_special) text += kSpecialNames[static_cast<size_t>(id - kBos)];
      } else {
        throw TokenizerError("builtin:bytes: unknown token id " + std::to_string(id) + " (ids are 0.." +
                             std::to_string(kVocab - 1) + ")");
      }
    }
    return text;
  }

  int32_t vocab_size() const override { return kVocab; }
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::optional<int32_t> eos_id() const override { return kEos; }
  std::optional<int32_t> pad_id() const override { return kPad; }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    for (size_t i = 0; i < kSpecialNames.size(); ++i)
      if (token == kSpecialNames[i]) return kBos + static_cast<int32_t>(i);
    if (token.size() == 1) return static_cast<unsigned char>(token[0]);
    return std::nullopt;
  }

  std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) const override {
    return tokenizer_detail::builtin_chat_format(messages, add_generation_prompt);
  }

  std::string render_chat(const nlohmann::ordered_json& conversation, bool add_generation_prompt) const override {
    return tokenizer_detail::builtin_chat_format(conversation, add_generation_prompt);
  }

  std::string description() const override { return "builtin:bytes"; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace meshrun
