// The normalizer of a Hugging Face tokenizer.json: what happens to text
// before pre-tokenization. Supported: the four Unicode normalization forms
// (NFC, NFD, NFKC, NFKD, through libutf8proc rather than generated tables),
// Lowercase, StripAccents, Strip, Replace (a literal or a regex), Prepend,
// and a Sequence of those; anything else is UnsupportedTokenizerJson.
// Each step behaves as its namesake in the `tokenizers` crate (which the
// suite checks against): Lowercase maps code point by code point with the
// full mappings (U+0130 becomes "i\u0307", no final-sigma context),
// StripAccents drops every mark (categories Mn, Mc, Me) without decomposing
// first, Strip removes White_Space, and a Replace regex skips an empty match
// right after the previous match, as Rust's iterators do.
// Invariant: input and output are valid UTF-8.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace meshrun::tokenizer_detail {

class NormalizerStep;

class Normalizer {
 public:
  // `config` is tokenizer.json's "normalizer"; null makes an empty
  // normalizer. `origin` names the file in errors. Throws TokenizerError
  // (UnsupportedTokenizerJson for a type meshrun does not implement).
  Normalizer(const nlohmann::json& config, const std::string& origin);
  Normalizer();  // no steps
  ~Normalizer();
  Normalizer(Normalizer&&) noexcept;
  Normalizer& operator=(Normalizer&&) noexcept;

  bool empty() const { return steps_.empty(); }
  // `text` after every step in order; `text` itself when there is none.
  // Real normalizers grow text by a bounded factor (a 3-byte "▁" for each
  // space; NFKD, the most, turns the 3 bytes of U+FDFA into 33); steps
  // that multiply it (a Sequence of Replaces of the empty match, each
  // doubling) throw TokenizerError once the text passes kMaxGrowth x its
  // size + kMaxGrowthSlack.
  std::string apply(std::string_view text) const;

  static constexpr size_t kMaxGrowth = 16;
  static constexpr size_t kMaxGrowthSlack = 1024;

 private:
  std::vector<std::unique_ptr<NormalizerStep>> steps_;
  std::string origin_;  // the file, for errors
};

enum class UnicodeForm { nfc, nfd, nfkc, nfkd };

// `text` (valid UTF-8) in that normalization form, through utf8proc.
std::string unicode_normalize(std::string_view text, UnicodeForm form);

}  // namespace meshrun::tokenizer_detail
