#include "hf_bpe_tokenizer.hpp"

#include <unordered_map>

#include "byte_level.hpp"
#include "utf8.hpp"

namespace meshrun::tokenizer_detail {
namespace {

class HfBpeTokenizer final : public Tokenizer {
 public:
  explicit HfBpeTokenizer(HfBpeParts parts) : parts_(std::move(parts)) {
    decoded_.reserve(parts_.tokens.size());
    for (size_t id = 0; id < parts_.tokens.size(); ++id) {
      decoded_.push_back(byte_level_decode_token(parts_.tokens[id]));
      if (parts_.known[id]) ids_.emplace(parts_.tokens[id], static_cast<int32_t>(id));
    }
    // Added tokens win over a model token of the same text.
    for (const AddedToken& token : parts_.added_tokens->tokens()) ids_.insert_or_assign(token.content, token.id);
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    const size_t invalid = first_invalid_utf8(text);
    if (invalid != std::string_view::npos)
      throw TokenizerError(parts_.origin + ": the text to encode is not valid UTF-8 (byte " + std::to_string(invalid) +
                           ")");
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    if (add_special) ids.insert(ids.end(), parts_.prefix.begin(), parts_.prefix.end());
    // As Hugging Face: the tokens not subject to normalization are found in
    // the raw text, the rest is normalized, and the normalized tokens are
    // found in that.
    std::vector<std::string> pieces;
    for (const TextSegment& raw : parts_.added_tokens->split_raw(text)) {
      if (raw.added_id >= 0) {
        ids.push_back(raw.added_id);
        continue;
      }
      const std::string normalized = parts_.normalizer.apply(raw.text);
      for (const TextSegment& segment : parts_.added_tokens->split_normalized(normalized)) {
        if (segment.added_id >= 0) {
          ids.push_back(segment.added_id);
          continue;
        }
        pieces.clear();
        parts_.pre_tokenizer->split(segment.text, pieces);
        for (const std::string& piece : pieces) parts_.model->encode(piece, ids);
      }
    }
    if (add_special) ids.insert(ids.end(), parts_.suffix.begin(), parts_.suffix.end());
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string bytes;
    bytes.reserve(ids.size() * 4);
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size() || !parts_.known[static_cast<size_t>(id)])
        throw TokenizerError(parts_.origin + ": unknown token id " + std::to_string(id) + " (vocabulary size " +
                             std::to_string(vocab_size()) + ")");
      if (skip_special && parts_.special[static_cast<size_t>(id)]) continue;
      bytes += decoded_[static_cast<size_t>(id)];
    }
    return utf8_lossy(bytes);
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(parts_.tokens.size()); }
  std::optional<int32_t> bos_id() const override { return parts_.bos; }
  std::optional<int32_t> eos_id() const override { return parts_.eos; }
  std::optional<int32_t> pad_id() const override { return parts_.pad ? parts_.pad : parts_.eos; }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    auto it = ids_.find(std::string(token));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }

  std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) const override {
    return parts_.chat.apply(messages, add_generation_prompt, parts_.bos_token, parts_.eos_token);
  }

  std::string render_chat(const nlohmann::ordered_json& conversation, bool add_generation_prompt) const override {
    return parts_.chat.render(conversation, add_generation_prompt, parts_.bos_token, parts_.eos_token);
  }

  void set_chat_template_variables(const nlohmann::ordered_json& variables) override {
    parts_.chat.set_variables(variables);
  }

  std::optional<MarkedChat> render_chat_marked(const std::vector<ChatMessage>& messages) const override {
    return parts_.chat.apply_marked(messages, parts_.bos_token, parts_.eos_token);
  }

  std::string description() const override { return parts_.origin; }

 private:
  HfBpeParts parts_;
  std::vector<std::string> decoded_;  // each id's bytes, per the ByteLevel decoder
  std::unordered_map<std::string, int32_t> ids_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_hf_bpe_tokenizer(HfBpeParts parts) {
  return std::make_unique<HfBpeTokenizer>(std::move(parts));
}

}  // namespace meshrun::tokenizer_detail
