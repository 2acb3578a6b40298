// The added tokens of a tokenizer.json (Llama 3's <|begin_of_text|> and its
// reserved tokens, Qwen2's <|im_start|>, ...): found before
// pre-tokenization, leftmost first and longest at one position, with their
// lstrip, rstrip and single_word options. As in Hugging Face, tokens not
// subject to normalization are found in the raw text; the others, by their
// normalized content, in the normalized text between those.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshrun::tokenizer_detail {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false, rstrip = false, normalized = false, single_word = false;
};

// Whether the token is found in normalized text (by its normalized
// content, which is then also what its id decodes to, as in Hugging Face).
inline bool matched_after_normalizing(const AddedToken& token) { return token.normalized && !token.special; }

// A piece of text: either plain text to pre-tokenize, or one added token.
struct TextSegment {
  std::string_view text;
  int32_t added_id = -1;  // >= 0: this segment is that added token
};

class Normalizer;

class AddedTokenMatcher {
 public:
  // `normalizer` gives the normalized tokens the text they are matched by.
  AddedTokenMatcher(std::vector<AddedToken> tokens, const Normalizer& normalizer);
  // Segments point into `text`.
  std::vector<TextSegment> split_raw(std::string_view text) const { return split(raw_index_, text); }
  std::vector<TextSegment> split_normalized(std::string_view text) const { return split(normalized_index_, text); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Indices into tokens_ by first byte of their match text, longest first;
  // one table for the tokens matched on raw text and one for those matched
  // after normalizing.
  using Index = std::array<std::vector<size_t>, 256>;
  std::vector<TextSegment> split(const Index& index, std::string_view text) const;

  std::vector<AddedToken> tokens_;
  std::vector<std::string> match_text_;  // per token: its content, normalized if it is matched so
  Index raw_index_, normalized_index_;
};

}  // namespace meshrun::tokenizer_detail
