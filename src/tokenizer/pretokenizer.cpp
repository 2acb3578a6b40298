#include "pretokenizer.hpp"

#include <type_traits>

#include <nlohmann/json.hpp>

#include "meshrun/bounded_json.hpp"

#include "meshrun/tokenizer/tokenizer.hpp"

namespace meshrun::tokenizer_detail {

using json = nlohmann::json;

// One step of the pre-tokenizer: replaces each piece by its sub-pieces.
class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  virtual void apply(std::vector<std::string>& pieces) const = 0;
};

namespace {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Span {
  size_t begin, end;
  bool is_match;
};

// Hugging Face's SplitDelimiterBehavior applied to matches and gaps.
std::vector<Span> apply_behavior(const std::vector<Span>& spans, Behavior behavior) {
  std::vector<Span> out;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::Isolated:
      return spans;
    case Behavior::Removed:
      for (const Span& s : spans)
        if (!s.is_match) out.push_back(s);
      return out;
    case Behavior::MergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) out.back().end = s.end;
        else out.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      return out;
    case Behavior::MergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) out.back().begin = it->begin;
        else out.push_back({it->begin, it->end, false});
        previous_match = it->is_match;
      }
      return {out.rbegin(), out.rend()};
    case Behavior::Contiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty()) out.back().end = s.end;
        else out.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      return out;
  }
  return out;
}

// A pre_tokenizer's optional setting of the JSON type T: a wrong type is
// named with its key rather than reported as a bare JSON type error.
template <typename T>
T setting(const json& config, const char* key, T fallback, const std::string& origin) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  const bool right_type = std::is_same_v<T, bool> ? it->is_boolean() : it->is_string();
  if (!right_type)
    throw TokenizerError(origin + ": pre_tokenizer " + config["type"].get<std::string>() + " \"" + key + "\" is " +
                         json_excerpt(*it) + ", not " + (std::is_same_v<T, bool> ? "true or false" : "a string"));
  return it->get<T>();
}

Behavior parse_behavior(const json& config, const std::string& origin) {
  const std::string name = setting(config, "behavior", std::string("Isolated"), origin);
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  if (name == "Contiguous") return Behavior::Contiguous;
  throw TokenizerError(origin + ": unknown Split behavior \"" + name + "\"");
}

class SplitStep final : public PreTokenizerStep {
 public:
  SplitStep(const std::string& pattern, Behavior behavior, bool invert, const std::string& origin)
      : regex_(pattern, origin + ": the pre-tokenizer regex"), behavior_(behavior), invert_(invert) {}

  void apply(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size() * 2);
    for (const std::string& piece : pieces) {
      std::vector<Span> spans;
      size_t last = 0;
      for (auto [begin, end] : regex_.find_all(piece)) {
        if (begin > last) spans.push_back({last, begin, invert_});
        spans.push_back({begin, end, !invert_});
        last = end;
      }
      if (last < piece.size()) spans.push_back({last, piece.size(), invert_});
      for (const Span& s : apply_behavior(spans, behavior_))
        if (s.end > s.begin) out.emplace_back(piece, s.begin, s.end - s.begin);
    }
    pieces = std::move(out);
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

class PrefixSpaceStep final : public PreTokenizerStep {
 public:
  void apply(std::vector<std::string>& pieces) const override {
    for (std::string& piece : pieces)
      if (!piece.empty() && piece[0] != ' ') piece.insert(piece.begin(), ' ');
  }
};

class DigitsStep final : public PreTokenizerStep {
 public:
  explicit DigitsStep(bool individual) : individual_(individual) {}
  void apply(std::vector<std::string>& pieces) const override {
    std::vector<std::string> out;
    for (const std::string& piece : pieces) {
      size_t pos = 0;
      while (pos < piece.size()) {
        const bool digit = piece[pos] >= '0' && piece[pos] <= '9';
        size_t end = pos + 1;
        if (!(digit && individual_))
          while (end < piece.size() && (piece[end] >= '0' && piece[end] <= '9') == digit) ++end;
        out.emplace_back(piece, pos, end - pos);
        pos = end;
      }
    }
    pieces = std::move(out);
  }

 private:
  bool individual_;
};

void add_steps(const json& config, const std::string& origin, std::vector<std::unique_ptr<PreTokenizerStep>>& steps,
               bool& byte_level) {
  if (config.is_null()) return;
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string())
    throw TokenizerError(origin + ": pre_tokenizer is not an object with a \"type\"");
  const std::string type = config["type"].get<std::string>();
  if (type == "Sequence") {
    if (!config.contains("pretokenizers") || !config["pretokenizers"].is_array())
      throw TokenizerError(origin + ": Sequence pre_tokenizer without a \"pretokenizers\" array");
    for (const json& step : config["pretokenizers"]) add_steps(step, origin, steps, byte_level);
  } else if (type == "Split") {
    const json& pattern = config.contains("pattern") ? config["pattern"] : json();
    std::string regex;
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string())
      regex = pattern["Regex"].get<std::string>();
    else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string())
      regex = escape_literal(pattern["String"].get<std::string>());
    else
      throw TokenizerError(origin + ": Split pre_tokenizer without a pattern {\"Regex\": ...} or {\"String\": ...}");
    steps.push_back(std::make_unique<SplitStep>(regex, parse_behavior(config, origin),
                                                setting(config, "invert", false, origin), origin));
  } else if (type == "ByteLevel") {
    byte_level = true;
    if (setting(config, "add_prefix_space", false, origin)) steps.push_back(std::make_unique<PrefixSpaceStep>());
    if (setting(config, "use_regex", true, origin))
      steps.push_back(std::make_unique<SplitStep>(kGpt2SplitPattern, Behavior::Isolated, false, origin));
  } else if (type == "Digits") {
    steps.push_back(std::make_unique<DigitsStep>(setting(config, "individual_digits", false, origin)));
  } else {
    throw TokenizerError(origin + ": pre_tokenizer type \"" + type +
                         "\" is not supported (Split, ByteLevel, Digits and Sequence are)");
  }
}

}  // namespace

PreTokenizer::PreTokenizer(const json& config, const std::string& origin) {
  add_steps(config, origin, steps_, byte_level_);
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string>& pieces) const {
  std::vector<std::string> current{std::string(text)};
  for (const auto& step : steps_) step->apply(current);
  for (std::string& piece : current) pieces.push_back(std::move(piece));
}

}  // namespace meshrun::tokenizer_detail
