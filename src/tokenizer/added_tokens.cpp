#include "added_tokens.hpp"

#include <algorithm>

#include "utf8.hpp"

namespace meshrun::tokenizer_detail {
namespace {

bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

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

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    Index& index = tokens_[i].normalized && !tokens_[i].special ? normalized_index_ : raw_index_;
    index[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
  for (Index* index : {&raw_index_, &normalized_index_})
    for (auto& bucket : *index)
      std::stable_sort(bucket.begin(), bucket.end(),
                       [&](size_t a, size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

std::vector<TextSegment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<TextSegment> segments{{text, -1}};
  if (tokens_.empty()) return segments;
  split_with(raw_index_, segments);
  split_with(normalized_index_, segments);
  return segments;
}

void AddedTokenMatcher::split_with(const Index& index, std::vector<TextSegment>& segments) const {
  std::vector<TextSegment> out;
  for (const TextSegment& segment : segments) {
    if (segment.added_id >= 0) {
      out.push_back(segment);
      continue;
    }
    const std::string_view text = segment.text;
    size_t emitted = 0;  // text before this offset is already in `out`
    size_t pos = 0;
    while (pos < text.size()) {
      const AddedToken* found = nullptr;
      for (size_t i : index[static_cast<unsigned char>(text[pos])]) {
        const AddedToken& token = tokens_[i];
        if (text.compare(pos, token.content.size(), token.content) != 0) continue;
        if (token.single_word) {
          size_t start = 0, length = 0;
          const bool word_before = pos > 0 && is_word_char(code_point_before(text, pos, start));
          const size_t end = pos + token.content.size();
          const bool word_after = end < text.size() && is_word_char(code_point_at(text, end, length));
          if (word_before || word_after) continue;
        }
        found = &token;
        break;
      }
      if (!found) {
        ++pos;
        continue;
      }
      size_t begin = pos, end = pos + found->content.size();
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
  }
  segments = std::move(out);
}

}  // namespace meshrun::tokenizer_detail
