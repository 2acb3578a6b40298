#include "normalizer.hpp"

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "pretokenizer.hpp"
#include "tokenizer_internal.hpp"
#include "utf8.hpp"

namespace meshrun::tokenizer_detail {

using json = nlohmann::json;

class NormalizerStep {
 public:
  virtual ~NormalizerStep() = default;
  virtual std::string apply(std::string_view text) const = 0;
};

namespace {

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// Calls `each(code_point)` for every code point of `text`. Text is valid
// UTF-8 by invariant; should a byte break it, that byte is U+FFFD and the
// walk still advances (a loop that stays in place would never end).
template <typename Each>
void for_each_code_point(std::string_view text, Each&& each) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8_sequence_length(text, pos);
    if (length == 0) {
      each(char32_t{0xFFFD});
      ++pos;
      continue;
    }
    each(decode_utf8_at(text, pos, length));
    pos += length;
  }
}

class UnicodeFormStep final : public NormalizerStep {
 public:
  explicit UnicodeFormStep(UnicodeForm form) : form_(form) {}
  std::string apply(std::string_view text) const override { return unicode_normalize(text, form_); }

 private:
  UnicodeForm form_;
};

class LowercaseStep final : public NormalizerStep {
 public:
  std::string apply(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    if (is_ascii(text)) {
      for (char c : text) out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
      return out;
    }
    for_each_code_point(text, [&](char32_t c) {
      // utf8proc has the simple mappings; U+0130 is the one code point whose
      // full (SpecialCasing.txt, unconditional) lowercase is longer.
      if (c == 0x130) {
        out += "i\xCC\x87";
        return;
      }
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    });
    return out;
  }
};

class StripAccentsStep final : public NormalizerStep {
 public:
  std::string apply(std::string_view text) const override {
    if (is_ascii(text)) return std::string(text);
    std::string out;
    out.reserve(text.size());
    for_each_code_point(text, [&](char32_t c) {
      const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      if (category != UTF8PROC_CATEGORY_MN && category != UTF8PROC_CATEGORY_MC && category != UTF8PROC_CATEGORY_ME)
        append_utf8(out, c);
    });
    return out;
  }
};

class StripStep final : public NormalizerStep {
 public:
  StripStep(bool left, bool right) : left_(left), right_(right) {}
  std::string apply(std::string_view text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        const size_t length = utf8_sequence_length(text, begin);
        if (length == 0 || !is_unicode_whitespace(decode_utf8_at(text, begin, length))) break;
        begin += length;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        if (utf8_sequence_length(text, start) != end - start ||
            !is_unicode_whitespace(decode_utf8_at(text, start, end - start)))
          break;
        end = start;
      }
    }
    return std::string(text.substr(begin, end - begin));
  }

 private:
  bool left_, right_;
};

class ReplaceStep final : public NormalizerStep {
 public:
  ReplaceStep(const std::string& pattern, std::string content, const std::string& what)
      : regex_(pattern, what), content_(std::move(content)) {}
  std::string apply(std::string_view text) const override {
    std::string out;
    size_t last = 0;
    for (auto [begin, end] : regex_.find_all_with_empty(text)) {
      out.append(text.substr(last, begin - last));
      out += content_;
      last = end;
    }
    out.append(text.substr(last));
    return out;
  }

 private:
  Regex regex_;
  std::string content_;
};

class PrependStep final : public NormalizerStep {
 public:
  explicit PrependStep(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string apply(std::string_view text) const override {
    return text.empty() ? std::string() : prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

const json& field(const json& config, const char* key) {
  static const json null_value;
  auto it = config.find(key);
  return it == config.end() ? null_value : *it;
}

std::string string_field(const json& config, const char* key, const std::string& type, const std::string& origin) {
  const json& value = field(config, key);
  if (!value.is_string())
    throw TokenizerError(origin + ": normalizer " + type + " without a string \"" + key + "\"");
  std::string text = value.get<std::string>();
  if (first_invalid_utf8(text) != std::string::npos)
    throw TokenizerError(origin + ": normalizer " + type + "'s \"" + key + "\" is not valid UTF-8");
  return text;
}

// Sequences nest; a file nesting them deeper than this is not a tokenizer.
constexpr int kMaxSequenceDepth = 16;

void add_steps(const json& config, const std::string& origin, int depth,
               std::vector<std::unique_ptr<NormalizerStep>>& steps) {
  if (config.is_null()) return;
  if (!config.is_object() || !field(config, "type").is_string())
    throw TokenizerError(origin + ": a normalizer without a string \"type\"");
  const std::string type = config["type"].get<std::string>();
  if (type == "Sequence") {
    if (depth >= kMaxSequenceDepth)
      throw TokenizerError(origin + ": normalizer Sequences nested deeper than " + std::to_string(kMaxSequenceDepth));
    const json& list = field(config, "normalizers");
    if (!list.is_array()) throw TokenizerError(origin + ": normalizer Sequence without a \"normalizers\" array");
    for (const json& step : list) add_steps(step, origin, depth + 1, steps);
  } else if (type == "NFC") {
    steps.push_back(std::make_unique<UnicodeFormStep>(UnicodeForm::nfc));
  } else if (type == "NFD") {
    steps.push_back(std::make_unique<UnicodeFormStep>(UnicodeForm::nfd));
  } else if (type == "NFKC") {
    steps.push_back(std::make_unique<UnicodeFormStep>(UnicodeForm::nfkc));
  } else if (type == "NFKD") {
    steps.push_back(std::make_unique<UnicodeFormStep>(UnicodeForm::nfkd));
  } else if (type == "Lowercase") {
    steps.push_back(std::make_unique<LowercaseStep>());
  } else if (type == "StripAccents") {
    steps.push_back(std::make_unique<StripAccentsStep>());
  } else if (type == "Strip") {
    steps.push_back(std::make_unique<StripStep>(config.value("strip_left", true), config.value("strip_right", true)));
  } else if (type == "Replace") {
    const json& pattern = field(config, "pattern");
    std::string regex;
    if (pattern.is_object() && field(pattern, "Regex").is_string())
      regex = pattern["Regex"].get<std::string>();
    else if (pattern.is_object() && field(pattern, "String").is_string())
      regex = escape_literal(pattern["String"].get<std::string>());
    else
      throw TokenizerError(origin + ": normalizer Replace without a pattern {\"Regex\": ...} or {\"String\": ...}");
    steps.push_back(std::make_unique<ReplaceStep>(regex, string_field(config, "content", type, origin),
                                                  origin + ": the normalizer Replace regex"));
  } else if (type == "Prepend") {
    steps.push_back(std::make_unique<PrependStep>(string_field(config, "prepend", type, origin)));
  } else {
    throw UnsupportedTokenizerJson(origin + ": normalizer \"" + type +
                                   "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, "
                                   "Strip, Replace, Prepend and a Sequence of those)");
  }
}

}  // namespace

Normalizer::Normalizer(const json& config, const std::string& origin) : origin_(origin) {
  add_steps(config, origin, 0, steps_);
}
Normalizer::Normalizer() = default;
Normalizer::~Normalizer() = default;
Normalizer::Normalizer(Normalizer&&) noexcept = default;
Normalizer& Normalizer::operator=(Normalizer&&) noexcept = default;

std::string Normalizer::apply(std::string_view text) const {
  std::string out(text);
  const size_t bound = kMaxGrowth * text.size() + kMaxGrowthSlack;
  for (const auto& step : steps_) {
    out = step->apply(out);
    if (out.size() > bound)
      throw TokenizerError(origin_ + ": the normalizer turns " + std::to_string(text.size()) + " bytes into more than " +
                           std::to_string(bound) + " (at most " + std::to_string(kMaxGrowth) + " x the text + " +
                           std::to_string(kMaxGrowthSlack) + " bytes); its Replace or Prepend steps grow text without "
                           "bound");
  }
  return out;
}

std::string unicode_normalize(std::string_view text, UnicodeForm form) {
  if (is_ascii(text)) return std::string(text);  // ASCII is invariant under all four forms
  int options = UTF8PROC_STABLE;
  switch (form) {
    case UnicodeForm::nfc: options |= UTF8PROC_COMPOSE; break;
    case UnicodeForm::nfd: options |= UTF8PROC_DECOMPOSE; break;
    case UnicodeForm::nfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case UnicodeForm::nfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* mapped = nullptr;
  // With an explicit length (no UTF8PROC_NULLTERM) a NUL is a character.
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &mapped, static_cast<utf8proc_option_t>(options));
  if (length < 0) throw TokenizerError(std::string("Unicode normalization failed: ") + utf8proc_errmsg(length));
  std::string out(reinterpret_cast<const char*>(mapped), static_cast<size_t>(length));
  std::free(mapped);
  return out;
}

}  // namespace meshrun::tokenizer_detail
