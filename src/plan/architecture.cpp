// Architecture resolution: a role's `model` is a preset, a local model
// directory (its config.json is authoritative), or a public name we know the
// shape of. The directory wins over the table so that a fine-tuned copy with a
// changed vocabulary is planned as it really is.
#include <filesystem>
#include <fstream>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "architecture_table.hpp"
#include "meshrun/architecture.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t layer_parameters(const Architecture& a) {
  const int64_t h = a.hidden;
  const int64_t kv = a.kv_dim();
  int64_t attention = h * h        // q
                      + 2 * h * kv  // k, v
                      + h * h;      // o
  if (a.qkv_bias) attention += h + 2 * kv;
  const int64_t mlp = 3 * h * a.intermediate;  // gate, up, down
  const int64_t norms = 2 * h;                 // input and post-attention RMSNorm weights
  return attention + mlp + norms;
}

// Parameters shared by both heads: embedding, the layers and the final norm.
int64_t body_parameters(const Architecture& a) {
  return a.vocab * a.hidden + a.layers * layer_parameters(a) + a.hidden;
}

std::string known_names_text() {
  std::string text;
  for (const auto& name : known_architecture_names()) {
    if (!text.empty()) text += ", ";
    text += name;
  }
  return text;
}

// Reads an integer key; records `key` in `missing` when absent or not an integer.
int64_t integer_key(const json& config, const char* key, std::vector<std::string>& missing) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_number_integer()) {
    missing.emplace_back(key);
    return 0;
  }
  return it->get<int64_t>();
}

// A key that may be absent (or null); a value of the wrong type counts as absent
// rather than failing, since configs of compatible models vary.
template <typename T>
T optional_key(const json& config, const char* key, T fallback) {
  auto it = config.find(key);
  if (it == config.end()) return fallback;
  if constexpr (std::is_same_v<T, bool>) return it->is_boolean() ? it->get<bool>() : fallback;
  else if constexpr (std::is_integral_v<T>) return it->is_number_integer() ? it->get<T>() : fallback;
  else return it->is_number() ? it->get<T>() : fallback;
}

bool is_qwen2(const json& config) {
  if (auto type = config.find("model_type"); type != config.end() && *type == "qwen2") return true;
  auto architectures = config.find("architectures");
  if (architectures == config.end() || !architectures->is_array()) return false;
  for (const auto& name : *architectures)
    if (name.is_string() && name.get<std::string>().rfind("Qwen2", 0) == 0) return true;
  return false;
}

}  // namespace

int64_t Architecture::parameters() const {
  return body_parameters(*this) + (tied_embeddings ? 0 : vocab * hidden);
}

int64_t Architecture::parameters_with_value_head() const {
  return body_parameters(*this) + hidden;  // hidden × 1 scalar head, no bias
}

std::vector<std::string> known_architecture_names() {
  return plan_detail::builtin_architecture_names();
}

std::optional<Architecture> architecture_from_config_json(const std::string& path,
                                                          std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = "cannot read " + path;
    return std::nullopt;
  }
  json config = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    error = path + " is not a JSON object";
    return std::nullopt;
  }

  std::vector<std::string> missing;
  Architecture a;
  a.hidden = integer_key(config, "hidden_size", missing);
  a.layers = integer_key(config, "num_hidden_layers", missing);
  a.heads = integer_key(config, "num_attention_heads", missing);
  a.intermediate = integer_key(config, "intermediate_size", missing);
  a.vocab = integer_key(config, "vocab_size", missing);
  if (!missing.empty()) {
    error = path + " lacks integer key(s):";
    for (const auto& key : missing) error += " " + key;
    return std::nullopt;
  }
  // Optional keys, with the defaults the Llama/Qwen2/Mistral configs use.
  a.kv_heads = optional_key<int64_t>(config, "num_key_value_heads", a.heads);
  a.max_position = optional_key<int64_t>(config, "max_position_embeddings", 0);  // 0: unknown
  a.tied_embeddings = optional_key<bool>(config, "tie_word_embeddings", false);
  a.qkv_bias = is_qwen2(config) || optional_key<bool>(config, "attention_bias", false);
  a.rope_theta = optional_key<double>(config, "rope_theta", 10000.0);

  if (a.hidden <= 0 || a.layers <= 0 || a.heads <= 0 || a.kv_heads <= 0 || a.intermediate <= 0 ||
      a.vocab <= 0 || a.max_position < 0) {
    error = path + " has a non-positive size";
    return std::nullopt;
  }
  // The memory formulas assume head_dim = hidden / heads and grouped-query attention.
  if (a.hidden % a.heads != 0 || a.heads % a.kv_heads != 0) {
    error = path + ": hidden_size " + std::to_string(a.hidden) + ", num_attention_heads " +
            std::to_string(a.heads) + " and num_key_value_heads " + std::to_string(a.kv_heads) +
            " do not describe a supported attention layout";
    return std::nullopt;
  }

  fs::path directory = fs::path(path).parent_path();
  a.name = directory.filename().string();
  if (a.name.empty()) a.name = directory.string();
  a.source = "config.json at " + path;
  return a;
}

std::optional<Architecture> resolve_architecture(const std::string& model, std::string& error) {
  if (model.empty()) {
    error = "no model given";
    return std::nullopt;
  }
  if (model.rfind(plan_detail::kPresetPrefix, 0) == 0) {
    if (auto preset = plan_detail::builtin_preset(model)) return preset;
    error = "unknown preset \"" + model + "\" (known: " + known_names_text() + ")";
    return std::nullopt;
  }

  std::error_code ec;
  if (fs::is_directory(model, ec)) {
    fs::path config = fs::path(model) / "config.json";
    if (!fs::is_regular_file(config, ec)) {
      error = "model directory " + model + " has no readable config.json";
      return std::nullopt;
    }
    return architecture_from_config_json(config.string(), error);
  }
  if (fs::is_regular_file(model, ec)) return architecture_from_config_json(model, error);

  if (auto known = plan_detail::builtin_public_architecture(model)) return known;
  error = "unknown model \"" + model +
          "\": not a local directory with config.json, a built-in preset or a known public model "
          "(known: " + known_names_text() + ")";
  return std::nullopt;
}

}  // namespace meshrun
