// The added-token matcher: the same segments as the first implementation (a
// scan of every token sharing the text's next byte, kept below as the
// oracle) on random texts over a small alphabet built to collide, and a cost
// per text position bounded by the longest token, not by the token count.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <random>

#include "src/tokenizer/added_tokens.hpp"
#include "src/tokenizer/normalizer.hpp"
#include "src/tokenizer/utf8.hpp"

namespace meshrun {
namespace {

using tokenizer_detail::AddedToken;
using tokenizer_detail::AddedTokenMatcher;
using tokenizer_detail::Normalizer;
using tokenizer_detail::TextSegment;

struct Segment {
  size_t begin = 0, size = 0;
  int32_t added_id = -1;
  bool operator==(const Segment&) const = default;
};

std::vector<Segment> located(std::string_view text, const std::vector<TextSegment>& segments) {
  std::vector<Segment> out;
  for (const auto& s : segments)
    out.push_back({static_cast<size_t>(s.text.data() - text.data()), s.text.size(), s.added_id});
  return out;
}

bool is_word_char(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

// The code point that ends just before `pos` (and where it starts), and the
// one at `pos` (and its length); U+FFFD for bytes that are not UTF-8.
char32_t before(std::string_view text, size_t pos, size_t& start) {
  start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  const size_t length = tokenizer_detail::utf8_sequence_length(text, start);
  return length ? tokenizer_detail::decode_utf8_at(text, start, length) : U'\uFFFD';
}
char32_t at(std::string_view text, size_t pos, size_t& length) {
  length = tokenizer_detail::utf8_sequence_length(text, pos);
  if (length == 0) {
    length = 1;
    return U'\uFFFD';
  }
  return tokenizer_detail::decode_utf8_at(text, pos, length);
}

// The first implementation, for the tokens matched in raw text (the
// normalizer here is empty, so both sets match by their content): at each
// byte, the tokens starting with it, longest first and in file order among
// equals, the first that matches and passes its single_word test wins.
std::vector<Segment> oracle_split(const std::vector<AddedToken>& tokens, bool normalized_set, std::string_view text) {
  std::array<std::vector<size_t>, 256> index;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (!tokens[i].content.empty() && tokenizer_detail::matched_after_normalizing(tokens[i]) == normalized_set)
      index[static_cast<unsigned char>(tokens[i].content[0])].push_back(i);
  for (auto& bucket : index)
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](size_t a, size_t b) { return tokens[a].content.size() > tokens[b].content.size(); });
  std::vector<Segment> out;
  size_t emitted = 0, pos = 0;
  while (pos < text.size()) {
    const AddedToken* found = nullptr;
    for (size_t i : index[static_cast<unsigned char>(text[pos])]) {
      const std::string& match = tokens[i].content;
      if (text.compare(pos, match.size(), match) != 0) continue;
      if (tokens[i].single_word) {
        size_t start = 0, length = 0;
        const size_t end = pos + match.size();
        if ((pos > 0 && is_word_char(before(text, pos, start))) ||
            (end < text.size() && is_word_char(at(text, end, length))))
          continue;
      }
      found = &tokens[i];
      break;
    }
    if (!found) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + found->content.size();
    size_t start = 0, length = 0;
    if (found->lstrip)
      while (begin > emitted && tokenizer_detail::is_unicode_whitespace(before(text, begin, start))) begin = start;
    if (found->rstrip)
      while (end < text.size() && tokenizer_detail::is_unicode_whitespace(at(text, end, length))) end += length;
    if (begin > emitted) out.push_back({emitted, begin - emitted, -1});
    out.push_back({begin, end - begin, found->id});
    emitted = pos = end;
  }
  if (emitted < text.size()) out.push_back({emitted, text.size() - emitted, -1});
  return out;
}

TEST_CASE("added tokens split text exactly as the first implementation did, on overlapping tokens") {
  // Pieces that make tokens prefixes, suffixes and overlaps of each other,
  // word and non-word characters for single_word, whitespace (ASCII and
  // U+3000) for lstrip and rstrip, and multi-byte characters.
  const std::vector<std::string> pieces{"a", "b", "<", ">", " ", "_", "\xC3\xA9", "\xE3\x80\x80", "\n"};
  std::mt19937 random(20261127);
  const auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(random); };
  const Normalizer identity;
  size_t matched = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<AddedToken> tokens;
    const size_t count = 1 + pick(24);
    for (size_t i = 0; i < count; ++i) {
      AddedToken token;
      if (i > 0 && pick(6) == 0) {
        token.content = tokens[pick(i)].content;  // the same text again, perhaps with other options
      } else {
        for (size_t n = 1 + pick(4); n > 0; --n) token.content += pieces[pick(pieces.size())];
      }
      token.id = static_cast<int32_t>(100 + i);
      token.special = pick(2) == 0;
      token.normalized = pick(2) == 0;
      token.single_word = pick(3) == 0;
      token.lstrip = pick(3) == 0;
      token.rstrip = pick(3) == 0;
      tokens.push_back(token);
    }
    if (round % 7 == 0) tokens.push_back({"", 99, false, false, false, false, false});  // never matches
    const AddedTokenMatcher matcher(tokens, identity);
    for (int sample = 0; sample < 20; ++sample) {
      std::string text;
      for (size_t n = pick(40); n > 0; --n) text += pieces[pick(pieces.size())];
      if (pick(10) == 0 && !text.empty()) text.back() = '\xC3';  // a truncated sequence at the end
      CAPTURE(text);
      const auto raw = located(text, matcher.split_raw(text));
      CHECK(raw == oracle_split(tokens, false, text));
      CHECK(located(text, matcher.split_normalized(text)) == oracle_split(tokens, true, text));
      matched += std::count_if(raw.begin(), raw.end(), [](const Segment& s) { return s.added_id >= 0; });
    }
  }
  CHECK(matched > 1000);  // the alphabet is small enough for tokens to be found often
}

TEST_CASE("added tokens: a later token of the same text stands in when the first fails single_word") {
  const std::vector<AddedToken> tokens{
      {"<m>", 1, true, false, false, false, /*single_word=*/true},
      {"<m>", 2, true, false, false, false, false},
      {"<m>x", 3, true, false, false, false, /*single_word=*/true},
  };
  const AddedTokenMatcher matcher(tokens, Normalizer{});
  const auto ids = [&](std::string_view text) {
    std::vector<int32_t> out;
    for (const auto& segment : matcher.split_raw(text)) out.push_back(segment.added_id);
    return out;
  };
  CHECK(ids(" <m> ") == std::vector<int32_t>{-1, 1, -1});
  CHECK(ids("a<m>") == std::vector<int32_t>{-1, 2});
  CHECK(ids(" <m>x ") == std::vector<int32_t>{-1, 3, -1});
  CHECK(ids(" <m>xy") == std::vector<int32_t>{-1, 2, -1});  // "<m>x" is inside a word: the longest that fits
}

TEST_CASE("50,000 added tokens sharing a prefix cost each text position at most the longest token's length") {
  std::vector<AddedToken> tokens;
  constexpr int kTokens = 50000;
  for (int i = 0; i < kTokens; ++i)
    tokens.push_back({"<|reserved_special_token_" + std::to_string(i) + "|>", 1000 + i, true, false, false, false,
                      false});
  const AddedTokenMatcher matcher(tokens, Normalizer{});
  // 1 MiB of near misses (every one shares 25 bytes with each token) and a
  // real token every 64 KiB.
  std::string text;
  int planted = 0;
  while (text.size() < (1 << 20)) {
    text += "<|reserved_special_token_x ";
    if (text.size() % (64 << 10) < 27) text += tokens[planted++ * 997 % kTokens].content;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto segments = matcher.split_raw(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("1 MiB against 50,000 added tokens in " << seconds << " s");
  const auto found = std::count_if(segments.begin(), segments.end(), [](const auto& s) { return s.added_id >= 0; });
  CHECK(found == planted);
  CHECK(seconds < 1.0);  // about 0.01 s; scanning the 50,000 candidates at each '<' took minutes
}

}  // namespace
}  // namespace meshrun
