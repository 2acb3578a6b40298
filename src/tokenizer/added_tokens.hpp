// The added tokens of a tokenizer.json (Llama 3's <|begin_of_text|> and its
// reserved tokens, Qwen2's <|im_start|>, ...): found before
// pre-tokenization, leftmost first and longest at one position, with their
// lstrip, rstrip and single_word options. As in Hugging Face, tokens not
// subject to normalization are found in the raw text; the others, by their
// normalized content, in the normalized text between those.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
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
  // A radix tree of the match texts of one set (raw or normalized): a byte
  // trie whose chains of single children are one edge, labelled by a range
  // of one token's match text. Walking it from a text position finds every
  // token that matches there in at most the longest token's length of byte
  // comparisons, however many tokens share a prefix (Llama 3's 250 reserved
  // tokens; a tokenizer.json may hold 50,000), and it has at most two nodes
  // per token however long they are (a node per byte would be 60 bytes per
  // byte of a tokenizer.json's added tokens).
  //
  // Hand-written: Debian's tries (libdatrie, libmarisa) would be a new
  // dependency for a short walk, and keep one value per key where a match
  // text needs two (below). Aho-Corasick would not help: the scan restarts
  // after each match and needs the longest token at a position that passes
  // its single_word test, not every occurrence.
  struct TrieNode {
    // The edge into this node: match_text_[label_token], from label_begin, label_size bytes.
    size_t label_token = 0, label_begin = 0, label_size = 0;
    std::vector<std::pair<unsigned char, uint32_t>> children;  // by their label's first byte
    // The tokens whose match text ends here, as indices into tokens_ (-1:
    // none). `first` wins; when it is single_word and fails that test, every
    // single_word token of the same text fails it too, so `first_plain`, the
    // first that is not single_word, is the only other candidate.
    int64_t first = -1, first_plain = -1;
  };
  struct Trie {
    std::vector<TrieNode> nodes = std::vector<TrieNode>(1);  // nodes[0] is the root
  };
  void insert(Trie& trie, size_t token);
  std::string_view label(const TrieNode& node) const {
    return std::string_view(match_text_[node.label_token]).substr(node.label_begin, node.label_size);
  }
  std::vector<TextSegment> split(const Trie& trie, std::string_view text) const;
  // The token that matches at `pos` (its match text is text[pos, end)), or nullptr.
  const AddedToken* longest_match(const Trie& trie, std::string_view text, size_t pos, size_t& end) const;

  std::vector<AddedToken> tokens_;
  std::vector<std::string> match_text_;  // per token: its content, normalized if it is matched so
  Trie raw_index_, normalized_index_;
};

}  // namespace meshrun::tokenizer_detail
