// The added tokens of a tokenizer.json (Llama 3's <|begin_of_text|> and its
// reserved tokens, Qwen2's <|im_start|>, ...): found in the raw text before
// pre-tokenization, leftmost first and longest at one position, tokens not
// subject to normalization before the others, with their lstrip, rstrip and
// single_word options.
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

// A piece of text: either plain text to pre-tokenize, or one added token.
struct TextSegment {
  std::string_view text;
  int32_t added_id = -1;  // >= 0: this segment is that added token
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);
  std::vector<TextSegment> split(std::string_view text) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Indices into tokens_ by first byte, longest first; one table for the
  // tokens matched on raw text and one for those matched after normalizing.
  using Index = std::array<std::vector<size_t>, 256>;
  void split_with(const Index& index, std::vector<TextSegment>& segments) const;

  std::vector<AddedToken> tokens_;
  Index raw_index_, normalized_index_;
};

}  // namespace meshrun::tokenizer_detail
