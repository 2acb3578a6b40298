// The pre-tokenizer of a Hugging Face tokenizer.json: cuts text into the
// pieces BPE runs on. Supported: Split (a regex or a literal, with its
// behavior and invert flag), ByteLevel (with use_regex, GPT-2's pattern;
// add_prefix_space), Digits, and a Sequence of those. Regexes run through
// PCRE2 in UTF + UCP mode, JIT-compiled when available.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace meshrun::tokenizer_detail {

class PreTokenizerStep;

class PreTokenizer {
 public:
  // `config` is tokenizer.json's "pre_tokenizer" (may be null); `origin`
  // names the file in errors. Throws TokenizerError.
  PreTokenizer(const nlohmann::json& config, const std::string& origin);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;

  // Appends the pieces of `text` (valid UTF-8) to `pieces`.
  void split(std::string_view text, std::vector<std::string>& pieces) const;
  // Whether a ByteLevel step is present (the vocabulary is byte-level).
  bool byte_level() const { return byte_level_; }

 private:
  std::vector<std::unique_ptr<PreTokenizerStep>> steps_;
  bool byte_level_ = false;
};

// A compiled PCRE2 pattern that finds all matches in a subject.
class Regex {
 public:
  // `what` names the pattern in a compile or match error ("tokenizer.json
  // at P: the pre-tokenizer regex"). A match that backtracks past
  // kMatchLimit steps (a pattern like (a|aa)+$ on a long run) throws
  // TokenizerError rather than taking seconds per piece of text.
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Byte ranges [begin, end) of the non-empty matches, left to right.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view subject) const;
  // Every match, empty ones included except one that starts where the
  // previous match ended (Rust's find_iter, which tokenizers' Replace uses).
  std::vector<std::pair<size_t, size_t>> find_all_with_empty(std::string_view subject) const;

 private:
  static constexpr uint32_t kMatchLimit = 1'000'000;
  void* code_ = nullptr;     // pcre2_code_8
  void* context_ = nullptr;  // pcre2_match_context_8 with kMatchLimit
  bool jit_ = false;
  std::string what_;
};

// A pattern matching `text` literally.
std::string escape_literal(const std::string& text);

// GPT-2's pattern, used by ByteLevel(use_regex = true).
extern const char* const kGpt2SplitPattern;

}  // namespace meshrun::tokenizer_detail
