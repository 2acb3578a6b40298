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

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, const Normalizer& normalizer)
    : tokens_(std::move(tokens)) {
  match_text_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const bool normalized = matched_after_normalizing(tokens_[i]);
    match_text_.push_back(normalized ? normalizer.apply(tokens_[i].content) : tokens_[i].content);
    if (match_text_[i].empty()) continue;
    Index& index = normalized ? normalized_index_ : raw_index_;
    index[static_cast<unsigned char>(match_text_[i][0])].push_back(i);
  }
  for (Index* index : {&raw_index_, &normalized_index_})
    for (auto& bucket : *index)
      std::stable_sort(bucket.begin(), bucket.end(),
                       [&](size_t a, size_t b) { return match_text_[a].size() > match_text_[b].size(); });
}

std::vector<TextSegment> AddedTokenMatcher::split(const Index& index, std::string_view text) const {
  std::vector<TextSegment> out;
  size_t emitted = 0;  // text before this offset is already in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* found = nullptr;
    size_t found_size = 0;
    for (size_t i : index[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& token = tokens_[i];
      const std::string& match = match_text_[i];
      if (text.compare(pos, match.size(), match) != 0) continue;
      if (token.single_word) {
        size_t start = 0, length = 0;
        const bool word_before = pos > 0 && is_word_char(code_point_before(text, pos, start));
        const size_t end = pos + match.size();
        const bool word_after = end < text.size() && is_word_char(code_point_at(text, end, length));
        if (word_before || word_after) continue;
      }
      found = &token;
      found_size = match.size();
      break;
    }
    if (!found) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + found_size;
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
