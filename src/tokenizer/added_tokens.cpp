#include "added_tokens.hpp"

#include <algorithm>

#include "normalizer.hpp"
#include "utf8.hpp"

namespace meshrun::tokenizer_detail {
namespace {

bool is_word_char(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

// The code point ending just before `pos` (text is valid UTF-8).
char32_t code_point_before(std::string_view text, size_t pos, size_t& start) {
  start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  const size_t length = utf8_sequence_length(text, start);
  return length ? decode_utf8_at(text, start, length) : U'\uFFFD';
}

char32_t code_point_at(std::string_view text, size_t pos, size_t& length) {
  length = utf8_sequence_length(text, pos);
  if (length == 0) {
    length = 1;
    return U'\uFFFD';
  }
  return decode_utf8_at(text, pos, length);
}

// The node among `children` whose label starts with `byte`, or 0 (the root, no one's child).
uint32_t child(const std::vector<std::pair<unsigned char, uint32_t>>& children, unsigned char byte) {
  const auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, uint32_t{0}));
  return it != children.end() && it->first == byte ? it->second : 0;
}

}  // namespace

void AddedTokenMatcher::insert(Trie& trie, size_t token) {
  const std::string_view text = match_text_[token];
  uint32_t node = 0;
  size_t matched = 0;  // text[0, matched) is the path to `node`
  while (matched < text.size()) {
    const auto byte = static_cast<unsigned char>(text[matched]);
    uint32_t next = child(trie.nodes[node].children, byte);
    if (next == 0) {  // the rest of the text is a new leaf's edge
      next = static_cast<uint32_t>(trie.nodes.size());
      auto& children = trie.nodes[node].children;
      children.insert(std::lower_bound(children.begin(), children.end(), std::make_pair(byte, uint32_t{0})),
                      {byte, next});
      TrieNode leaf;
      leaf.label_token = token;
      leaf.label_begin = matched;
      leaf.label_size = text.size() - matched;
      trie.nodes.push_back(std::move(leaf));  // after the insert: it may move `children`
      node = next;
      break;
    }
    const std::string_view edge = label(trie.nodes[next]);
    size_t common = 1;
    while (common < edge.size() && matched + common < text.size() && edge[common] == text[matched + common])
      ++common;
    if (common < edge.size()) {  // the text leaves the edge midway: a node there takes its first part
      const auto middle = static_cast<uint32_t>(trie.nodes.size());
      TrieNode split;
      split.label_token = trie.nodes[next].label_token;
      split.label_begin = trie.nodes[next].label_begin;
      split.label_size = common;
      split.children.push_back({static_cast<unsigned char>(edge[common]), next});
      trie.nodes[next].label_begin += common;
      trie.nodes[next].label_size -= common;
      for (auto& entry : trie.nodes[node].children)
        if (entry.second == next) entry.second = middle;
      trie.nodes.push_back(std::move(split));
      next = middle;
    }
    node = next;
    matched += common;
  }
  TrieNode& end = trie.nodes[node];
  if (end.first < 0) end.first = static_cast<int64_t>(token);
  if (end.first_plain < 0 && !tokens_[token].single_word) end.first_plain = static_cast<int64_t>(token);
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, const Normalizer& normalizer)
    : tokens_(std::move(tokens)) {
  match_text_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const bool normalized = matched_after_normalizing(tokens_[i]);
    match_text_.push_back(normalized ? normalizer.apply(tokens_[i].content) : tokens_[i].content);
  }
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!match_text_[i].empty()) insert(matched_after_normalizing(tokens_[i]) ? normalized_index_ : raw_index_, i);
}

const AddedToken* AddedTokenMatcher::longest_match(const Trie& trie, std::string_view text, size_t pos,
                                                   size_t& end) const {
  // A single_word token matches only where neither neighbour is a word character.
  const auto stands_alone = [&](size_t match_end) {
    size_t start = 0, length = 0;
    const bool word_before = pos > 0 && is_word_char(code_point_before(text, pos, start));
    const bool word_after = match_end < text.size() && is_word_char(code_point_at(text, match_end, length));
    return !word_before && !word_after;
  };
  const AddedToken* found = nullptr;
  uint32_t node = 0;
  size_t matched = pos;  // text[pos, matched) is the path to `node`
  while (matched < text.size()) {
    node = child(trie.nodes[node].children, static_cast<unsigned char>(text[matched]));
    if (node == 0) break;
    const TrieNode& here = trie.nodes[node];
    if (text.compare(matched, here.label_size, label(here)) != 0) break;
    matched += here.label_size;
    if (here.first < 0) continue;
    // Longer matches found further down replace this one.
    const AddedToken& first = tokens_[static_cast<size_t>(here.first)];
    if (!first.single_word || stands_alone(matched)) {
      found = &first;
    } else if (here.first_plain >= 0) {
      found = &tokens_[static_cast<size_t>(here.first_plain)];
    } else {
      continue;
    }
    end = matched;
  }
  return found;
}

std::vector<TextSegment> AddedTokenMatcher::split(const Trie& trie, std::string_view text) const {
  std::vector<TextSegment> out;
  size_t emitted = 0;  // text before this offset is already in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    size_t found_end = 0;
    const AddedToken* found = longest_match(trie, text, pos, found_end);
    if (!found) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = found_end;
    if (found->lstrip) {
      while (begin > emitted) {
        size_t start = 0;
        if (!is_unicode_whitespace(code_point_before(text, begin, start))) break;
        begin = start;
      }
    }
    if (found->rstrip) {
      while (end < text.size()) {
        size_t length = 0;
        if (!is_unicode_whitespace(code_point_at(text, end, length))) break;
        end += length;
      }
    }
    if (begin > emitted) out.push_back({text.substr(emitted, begin - emitted), -1});
    out.push_back({text.substr(begin, end - begin), found->id});
    emitted = pos = end;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
  return out;
}

}  // namespace meshrun::tokenizer_detail
