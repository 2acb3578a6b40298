#include "nfc.hpp"

#include <algorithm>

#include "utf8.hpp"

namespace meshrun::tokenizer_detail {
namespace {

constexpr char32_t kHangulBase = 0xAC00, kLeadBase = 0x1100, kVowelBase = 0x1161, kTrailBase = 0x11A7;
constexpr char32_t kVowelCount = 21, kTrailCount = 28, kSyllableCount = 11172;

uint8_t combining_class(char32_t c) {
  if (c < 0x300) return 0;
  const auto* end = kCombiningClasses + kCombiningClassCount;
  const auto* it = std::lower_bound(kCombiningClasses, end, c,
                                    [](const CombiningClass& entry, char32_t value) { return entry.code_point < value; });
  return it != end && it->code_point == c ? it->combining_class : 0;
}

void decompose(char32_t c, std::u32string& out) {
  if (c >= kHangulBase && c < kHangulBase + kSyllableCount) {
    const char32_t index = c - kHangulBase;
    out += kLeadBase + index / (kVowelCount * kTrailCount);
    out += kVowelBase + (index % (kVowelCount * kTrailCount)) / kTrailCount;
    if (index % kTrailCount) out += kTrailBase + index % kTrailCount;
    return;
  }
  if (c >= 0xC0) {
    const auto* end = kDecompositions + kDecompositionCount;
    const auto* it = std::lower_bound(kDecompositions, end, c,
                                      [](const Decomposition& entry, char32_t value) { return entry.code_point < value; });
    if (it != end && it->code_point == c) {
      for (char32_t part : it->parts)
        if (part) out += part;
      return;
    }
  }
  out += c;
}

// The primary composite of `first` + `second`, or 0.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLeadBase && first < kLeadBase + 19 && second >= kVowelBase && second < kVowelBase + kVowelCount)
    return kHangulBase + ((first - kLeadBase) * kVowelCount + (second - kVowelBase)) * kTrailCount;
  if (first >= kHangulBase && first < kHangulBase + kSyllableCount && (first - kHangulBase) % kTrailCount == 0 &&
      second > kTrailBase && second < kTrailBase + kTrailCount)
    return first + (second - kTrailBase);
  const auto* end = kComposites + kCompositeCount;
  const auto* it = std::lower_bound(kComposites, end, std::pair(first, second), [](const Composite& entry, auto key) {
    return entry.first != key.first ? entry.first < key.first : entry.second < key.second;
  });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

}  // namespace

std::string to_nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);
  std::u32string decomposed;
  decomposed.reserve(text.size());
  for (char32_t c : to_code_points(text)) decompose(c, decomposed);
  // Canonical ordering: stable sort of each run of non-starters by class.
  for (size_t i = 0; i < decomposed.size();) {
    if (combining_class(decomposed[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < decomposed.size() && combining_class(decomposed[end]) != 0) ++end;
    std::stable_sort(decomposed.begin() + static_cast<long>(i), decomposed.begin() + static_cast<long>(end),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }
  // Canonical composition: each character joins the last starter unless a
  // character in between has the same or a higher class (it is blocked).
  std::u32string composed;
  composed.reserve(decomposed.size());
  size_t starter = std::u32string::npos;
  int last_class = -1;
  for (char32_t c : decomposed) {
    const int cls = combining_class(c);
    if (starter != std::u32string::npos && (last_class < cls || (last_class == 0 && composed.size() == starter + 1))) {
      if (char32_t joined = compose(composed[starter], c)) {
        composed[starter] = joined;
        continue;
      }
    }
    if (cls == 0) {
      starter = composed.size();
      last_class = 0;
    } else {
      last_class = cls;
    }
    composed += c;
  }
  return from_code_points(composed);
}

}  // namespace meshrun::tokenizer_detail
