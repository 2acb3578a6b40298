// PCRE2 behind the Regex class of pretokenizer.hpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "meshrun/tokenizer/tokenizer.hpp"
#include "pretokenizer.hpp"

namespace meshrun::tokenizer_detail {

const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

pcre2_code* as_code(void* code) { return static_cast<pcre2_code*>(code); }

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

struct MatchData {
  explicit MatchData(pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(data); }
  pcre2_match_data* data;
};

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& what) : what_(what) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // \C would match one byte of a multi-byte character and split it: every
  // step after a match relies on whole characters, so it is refused.
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &error, &offset, nullptr);
  if (!code_)
    throw TokenizerError(what + " does not compile at offset " + std::to_string(offset) +
                         ": " + pcre2_message(error) + " (pattern " + pattern + ")");
  jit_ = pcre2_jit_compile(as_code(code_), PCRE2_JIT_COMPLETE) == 0;
  auto* context = pcre2_match_context_create(nullptr);
  if (!context) {
    pcre2_code_free(as_code(code_));
    throw std::bad_alloc();
  }
  pcre2_set_match_limit(context, kMatchLimit);
  context_ = context;
}

Regex::~Regex() {
  pcre2_match_context_free(static_cast<pcre2_match_context*>(context_));
  pcre2_code_free(as_code(code_));
}

std::string escape_literal(const std::string& text) {
  // \Q...\E quotes everything up to the next \E, so one in the text must
  // be closed and reopened around it.
  std::string out = "\\Q";
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (text.compare(pos, 2, "\\E") == 0) {
      out += "\\E\\\\E\\Q";
      ++pos;
    } else {
      out += text[pos];
    }
  }
  return out + "\\E";
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view subject) const {
  auto matches = find_all_with_empty(subject);
  std::erase_if(matches, [](const auto& match) { return match.second == match.first; });
  return matches;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all_with_empty(std::string_view subject) const {
  std::vector<std::pair<size_t, size_t>> matches;
  MatchData match(as_code(code_));
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t start = 0;
  // The subject was validated once by the caller; PCRE2 need not check it
  // again at every start offset (that would make splitting quadratic).
  uint32_t options = PCRE2_NO_UTF_CHECK;
  while (start <= subject.size()) {
    auto* context = static_cast<pcre2_match_context*>(context_);
    const int rc = jit_ ? pcre2_jit_match(as_code(code_), data, subject.size(), start, options, match.data, context)
                        : pcre2_match(as_code(code_), data, subject.size(), start, options, match.data, context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
        rc == PCRE2_ERROR_HEAPLIMIT)
      throw TokenizerError(what_ + " backtracks past its limits on a piece of text (" + pcre2_message(rc) +
                           "; a pattern with nested or overlapping repeats?)");
    if (rc < 0) throw TokenizerError(what_ + " failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      start = end;
      continue;
    }
    if (matches.empty() || matches.back().second != begin) matches.emplace_back(begin, end);
    // An empty match: step over one character.
    if (begin >= subject.size()) break;
    start = begin + 1;
    while (start < subject.size() && (static_cast<unsigned char>(subject[start]) & 0xC0) == 0x80) ++start;
  }
  return matches;
}

}  // namespace meshrun::tokenizer_detail
