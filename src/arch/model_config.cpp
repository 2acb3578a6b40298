// config.json in and out. Reading is lenient where Llama, Qwen2, Qwen3,
// Mistral and Phi3 configs differ (optional keys take the transformers defaults, a value of
// the wrong type for an optional key counts as absent) and strict where a
// wrong guess would build a different model (sizes, rope_scaling).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshrun/bounded_json.hpp"
#include "meshrun/arch/hub_cache.hpp"
#include "meshrun/arch/model_config.hpp"

namespace meshrun {
namespace {

// Not `json`: plan_json.cpp aliases that to ordered_json, and unity builds
// compile the two in one translation unit.
using ConfigJson = nlohmann::json;

int64_t integer_key(const ConfigJson& config, const char* key, std::vector<std::string>& missing) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_number_integer()) {
    missing.emplace_back(key);
    return 0;
  }
  return it->get<int64_t>();
}

// A key present with a value of the wrong type; the caller names the file.
struct WrongType {
  std::string message;
};

ModelConfig config_from_object(const ConfigJson& config, const std::string& origin);

template <typename T>
T optional_key(const ConfigJson& config, const char* key, T fallback) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  const char* wanted = nullptr;
  if constexpr (std::is_same_v<T, bool>) {
    if (it->is_boolean()) return it->get<bool>();
    wanted = "true or false";
  } else if constexpr (std::is_integral_v<T>) {
    if (const std::optional<T> n = json_integer<T>(*it)) return *n;
    wanted = it->is_number_integer() ? "an integer in range" : "an integer";
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (it->is_string()) return it->get<T>();
    wanted = "a string";
  } else {
    if (it->is_number()) return it->get<T>();
    wanted = "a number";
  }
  // A value of the wrong type is not silently replaced by the default.
  throw WrongType{std::string("\"") + key + "\" is " + json_excerpt(*it, 40) + ", not " + wanted};
}

std::optional<int64_t> optional_id(const ConfigJson& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

// eos_token_id as one id or a list of them. Anything else is left out here:
// generation_stop_ids reads the same key and names the file when it is not
// token ids.
std::vector<int64_t> eos_ids(const ConfigJson& config) {
  constexpr std::size_t kMaxIds = 1024;  // models name one to a handful
  std::vector<int64_t> ids;
  auto it = config.find("eos_token_id");
  if (it == config.end()) return ids;
  if (it->is_number_integer()) return {it->get<int64_t>()};
  if (!it->is_array() || it->size() > kMaxIds) return ids;
  for (const ConfigJson& id : *it) {
    if (!id.is_number_integer()) return {};
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

bool architecture_starts_with(const ConfigJson& config, const std::string& prefix) {
  auto architectures = config.find("architectures");
  if (architectures == config.end() || !architectures->is_array()) return false;
  for (const auto& name : *architectures)
    if (name.is_string() && name.get<std::string>().rfind(prefix, 0) == 0) return true;
  return false;
}

// The family config.json names by model_type, else by its architectures
// (configs written before model_type existed), else Llama. A model_type
// meshrun does not build is an error here, so that lint and plan refuse it
// before a run does.
ModelFamily detect_family(const ConfigJson& config, const std::string& origin) {
  const std::string type = optional_key<std::string>(config, "model_type", "");
  std::string known;
  for (const ModelFamilyRow& row : kModelFamilies) known += (known.empty() ? "" : ", ") + std::string(row.model_type);
  if (type.empty()) {
    for (const ModelFamilyRow& row : kModelFamilies)
      if (architecture_starts_with(config, std::string(row.architecture))) return row.id;
    // Architectures that name another family (Phi3ForCausalLM) are not
    // Llama's because model_type is missing.
    const auto architectures = config.find("architectures");
    if (architectures != config.end() && architectures->is_array() && !architectures->empty())
      throw ModelConfigError(origin + ": architectures " + json_excerpt(*architectures, 60) +
                             " names no model family meshrun builds (" + known + ") and there is no model_type");
    return ModelFamily::llama;
  }
  for (const ModelFamilyRow& row : kModelFamilies)
    if (row.model_type == type) return row.id;
  throw ModelConfigError(origin + ": model_type " + json_excerpt(ConfigJson(type), 40) + " is not supported (" + known + ")");
}

double required_number(const ConfigJson& scaling, const char* key, const std::string& origin, const std::string& where,
                       const std::string& type) {
  auto it = scaling.find(key);
  if (it == scaling.end() || !it->is_number())
    throw ModelConfigError(origin + ": " + where + " of type " + type + " needs a number \"" + key + "\"");
  return it->get<double>();
}

// Where config.json keeps the rotary settings: transformers 5 writes one
// "rope_parameters" object (rope_theta inside, rope_type "default" for no
// scaling) in place of rope_theta and rope_scaling; a file that has it is
// read from it, since a config read with the old keys' defaults would build
// another model (rope_theta 10000 for Llama 3's 500000) without a word.
struct RopeSource {
  const ConfigJson* object = nullptr;  // null: no scaling (and rope_theta at the top level)
  const char* key = "rope_scaling";
  // Per layer type (families whose row has rope_per_layer_type): object is
  // full_attention's, window sliding_attention's (null: not given).
  const ConfigJson* window = nullptr;
};

RopeSource rope_source(const ConfigJson& config, const std::string& origin, bool per_layer_type) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (!it->is_object()) throw ModelConfigError(origin + ": " + key + " must be an object or null");
    // transformers 5 keys per-layer-type parameters by layer type
    // ({"full_attention": {...}, "sliding_attention": {...}}): models with
    // several attention kinds, which meshrun does not build.
    const bool by_type =
        !it->empty() && !it->contains("rope_type") && !it->contains("type") && !it->contains("rope_theta") &&
        it->begin()->is_object();
    if (by_type && per_layer_type) {
      RopeSource source;
      for (const auto& [type, value] : it->items()) {
        if (!value.is_object() || (type != "full_attention" && type != "sliding_attention"))
          throw ModelConfigError(origin + ": " + key + "." + type + " is not a layer type's rotary settings "
                                 "(full_attention, sliding_attention)");
        if (type == "full_attention") source.object = &value;
        else source.window = &value;
      }
      source.key = "rope_parameters.full_attention";
      return source;
    }
    if (by_type)
      throw ModelConfigError(origin + ": " + key + " per layer type (" + json_excerpt(ConfigJson(it->begin().key()), 40) +
                             ", ...) is not supported: meshrun builds one attention kind for every layer");
    return {&*it, key};
  }
  return {};
}

std::string rope_type_name(RopeScaling::Type type) {
  switch (type) {
    case RopeScaling::Type::linear: return "linear";
    case RopeScaling::Type::dynamic: return "dynamic";
    case RopeScaling::Type::llama3: return "llama3";
    case RopeScaling::Type::yarn: return "yarn";
    case RopeScaling::Type::longrope: return "longrope";
    case RopeScaling::Type::none: break;
  }
  return "default";
}

// A number rope_scaling may give; absent or null: nullopt.
std::optional<double> optional_number(const ConfigJson& scaling, const char* key, const std::string& origin,
                                      const std::string& where) {
  const auto it = scaling.find(key);
  if (it == scaling.end() || it->is_null()) return std::nullopt;
  if (!it->is_number())
    throw ModelConfigError(origin + ": " + where + "." + key + " is " + json_excerpt(*it, 40) + ", not a number");
  return it->get<double>();
}

// A context length (original_max_position_embeddings); checked before the
// cast, which is undefined for values past int64's range.
int64_t context_length(double value, const std::string& origin, const std::string& where) {
  if (!(value >= 1 && value <= 1e15))
    throw ModelConfigError(origin + ": " + (where.empty() ? "" : where + " ") + "original_max_position_embeddings " +
                           json_excerpt(ConfigJson(value)) + " is not a context length");
  return static_cast<int64_t>(value);
}

// longrope's short_factor / long_factor: a list of positive numbers (its
// length, head_dim / 2, is checked by validate). A list past 1 << 16
// entries describes no head.
std::vector<double> factor_list(const ConfigJson& scaling, const char* key, const std::string& origin,
                                const std::string& where) {
  constexpr std::size_t kMaxEntries = 1u << 16;
  const auto it = scaling.find(key);
  if (it == scaling.end() || !it->is_array() || it->empty() || it->size() > kMaxEntries)
    throw ModelConfigError(origin + ": " + where + " of type longrope needs a list of numbers \"" + key + "\"");
  std::vector<double> values;
  values.reserve(it->size());
  for (const ConfigJson& value : *it) {
    if (!value.is_number())
      throw ModelConfigError(origin + ": " + where + "." + key + " holds " + json_excerpt(value, 40) +
                             ", not a number");
    values.push_back(value.get<double>());
  }
  return values;
}

RopeScaling parse_rope_scaling(const ConfigJson& config, const RopeSource& source, const ModelFamilyRow& family,
                               const std::string& origin) {
  RopeScaling scaling;
  if (!source.object) return scaling;
  const ConfigJson& object = *source.object;
  const std::string where = source.key;
  std::string type = optional_key<std::string>(object, "rope_type", optional_key<std::string>(object, "type", ""));
  if (type == "default" || type.empty()) return scaling;
  if (type == "linear") scaling.type = RopeScaling::Type::linear;
  else if (type == "dynamic") scaling.type = RopeScaling::Type::dynamic;
  else if (type == "llama3") scaling.type = RopeScaling::Type::llama3;
  else if (type == "yarn") scaling.type = RopeScaling::Type::yarn;
  // "su": longrope's name in Phi-3's first config files.
  else if (type == "longrope" || type == "su") scaling.type = RopeScaling::Type::longrope;
  else
    throw ModelConfigError(origin + ": " + where + " type \"" + type +
                           "\" is not supported (linear, dynamic, llama3, yarn, longrope)");
  if (family.only_rope_scaling != RopeScaling::Type::none && scaling.type != family.only_rope_scaling)
    throw ModelConfigError(origin + ": " + where + " type \"" + type + "\" is not supported for " +
                           std::string(family.model_type) + " (its config takes " +
                           rope_type_name(family.only_rope_scaling) + " only)");
  if (scaling.type == RopeScaling::Type::longrope) {
    scaling.short_factor = factor_list(object, "short_factor", origin, where);
    scaling.long_factor = factor_list(object, "long_factor", origin, where);
    scaling.attention_factor = optional_number(object, "attention_factor", origin, where);
    // Phi3Config keeps original_max_position_embeddings at the top level
    // (default 4096), and then the factor is the context's growth.
    const auto top = config.find("original_max_position_embeddings");
    if (top != config.end() && !top->is_null()) {
      if (!top->is_number())
        throw ModelConfigError(origin + ": original_max_position_embeddings is " + json_excerpt(*top, 40) +
                               ", not a number");
      scaling.original_max_position = context_length(top->get<double>(), origin, "");
      scaling.original_at_top_level = true;
    } else if (const auto inside = optional_number(object, "original_max_position_embeddings", origin, where)) {
      scaling.original_max_position = context_length(*inside, origin, where);
    } else if (family.default_original_context > 0) {
      scaling.original_max_position = family.default_original_context;
      scaling.original_at_top_level = true;
    }
    const std::optional<double> factor = optional_number(object, "factor", origin, where);
    scaling.factor_given = factor.has_value() && !scaling.original_at_top_level;
    scaling.factor = factor.value_or(1.0);
    // Without a factor transformers takes the context's growth too
    // (_compute_longrope_parameters), wherever the original context is.
    const int64_t max_position = optional_key<int64_t>(config, "max_position_embeddings", 0);
    if ((scaling.original_at_top_level || !factor) && max_position > 0 && scaling.original_max_position > 0)
      scaling.factor = static_cast<double>(max_position) / static_cast<double>(scaling.original_max_position);
    return scaling;
  }
  scaling.factor = required_number(object, "factor", origin, where, type);
  if (scaling.type == RopeScaling::Type::llama3) {
    scaling.low_freq_factor = required_number(object, "low_freq_factor", origin, where, type);
    scaling.high_freq_factor = required_number(object, "high_freq_factor", origin, where, type);
    scaling.original_max_position =
        context_length(required_number(object, "original_max_position_embeddings", origin, where, type), origin, where);
  }
  if (scaling.type == RopeScaling::Type::yarn) {
    if (const auto original = optional_number(object, "original_max_position_embeddings", origin, where))
      scaling.original_max_position = context_length(*original, origin, where);
    // transformers reads `beta_fast or 32`: a 0 there is the default too.
    scaling.beta_fast = optional_number(object, "beta_fast", origin, where).value_or(0);
    scaling.beta_slow = optional_number(object, "beta_slow", origin, where).value_or(0);
    if (scaling.beta_fast == 0) scaling.beta_fast = 32;
    if (scaling.beta_slow == 0) scaling.beta_slow = 1;
    scaling.attention_factor = optional_number(object, "attention_factor", origin, where);
    scaling.mscale = optional_number(object, "mscale", origin, where);
    scaling.mscale_all_dim = optional_number(object, "mscale_all_dim", origin, where);
    scaling.truncate = optional_key<bool>(object, "truncate", true);
  }
  return scaling;
}


int64_t attention_parameters(const ModelConfig& c) {
  const int64_t h = c.hidden, kv = c.kv_dim(), q = c.heads * c.head_dim();
  int64_t attention = h * q + 2 * h * kv + q * h;
  if (c.qkv_bias) attention += q + 2 * kv;
  if (c.o_bias) attention += h;
  if (c.qk_norm) attention += c.qk_norm_full_width ? q + kv : 2 * c.head_dim();
  return attention;
}

// One decoder layer's parameters; `experts_counted`: how many of a sparse
// layer's experts (all of them, or the experts_per_token one token uses).
int64_t layer_parameters(const ModelConfig& c, int64_t layer, int64_t experts_counted) {
  const int64_t h = c.hidden;
  int64_t mlp = 3 * h * c.intermediate;
  if (c.mlp_bias) mlp += 2 * c.intermediate + h;
  if (c.sparse_layer(layer)) mlp = c.experts * h + experts_counted * 3 * h * c.expert_intermediate;
  return attention_parameters(c) + mlp + (c.sandwich_norms ? 4 : 2) * h;  // RMSNorm weights
}

int64_t body_parameters(const ModelConfig& c, bool active_only = false) {
  int64_t total = c.vocab * c.hidden + c.hidden;
  for (int64_t layer = 0; layer < c.layers; ++layer)
    total += layer_parameters(c, layer, active_only ? c.experts_per_token : c.experts);
  return total;
}

// Every layer windowed but each pattern-th (Gemma's config classes' default).
std::vector<bool> patterned_windows(int64_t layers, int64_t pattern) {
  std::vector<bool> windowed;
  for (int64_t layer = 0; layer < std::clamp<int64_t>(layers, 0, 4096); ++layer)
    windowed.push_back((layer + 1) % pattern != 0);
  return windowed;
}

}  // namespace

const ModelFamilyRow& model_family_row(ModelFamily family) {
  for (const ModelFamilyRow& row : kModelFamilies)
    if (row.id == family) return row;
  throw std::logic_error("model family without a row in kModelFamilies");
}

void apply_family_layout(ModelConfig& config) {
  const ModelFamilyRow& row = model_family_row(config.family);
  config.qk_norm = row.qk_norm;
  config.qk_norm_full_width = row.qk_norm_full_width;
  config.post_norms = row.post_norms;
  config.norm_plus_one = row.norm_plus_one;
  config.sandwich_norms = row.sandwich_norms;
  config.scaled_embedding = row.scaled_embedding;
}

void apply_family_defaults(ModelConfig& config) {
  const ModelFamilyRow& row = model_family_row(config.family);
  if (row.window == WindowRule::per_layer && config.windowed_layers.empty())
    config.windowed_layers = patterned_windows(config.layers, row.window_pattern);
  if (row.softcapping) {
    config.attn_softcap = row.default_attn_softcap;
    config.final_softcap = row.default_final_softcap;
    config.query_pre_attn_scalar = static_cast<double>(config.head_dim());
  }
  if (row.rope_per_layer_type && config.window_rope_theta == 0) config.window_rope_theta = 10000.0;
  if (row.activation_key == "hidden_activation") config.hidden_act = "gelu_pytorch_tanh";
}

bool ModelConfig::windowed(int64_t layer) const {
  if (sliding_window <= 0) return false;
  return windowed_layers.empty() || (layer >= 0 && layer < static_cast<int64_t>(windowed_layers.size()) &&
                                     windowed_layers[static_cast<size_t>(layer)]);
}

bool ModelConfig::mixed_windows() const {
  if (sliding_window <= 0 || windowed_layers.empty()) return false;
  return std::find(windowed_layers.begin(), windowed_layers.end(), false) != windowed_layers.end();
}

int64_t ModelConfig::parameters() const { return body_parameters(*this) + (tied_embeddings ? 0 : vocab * hidden); }

int64_t ModelConfig::decoder_layer_parameters(int64_t layer) const { return layer_parameters(*this, layer, experts); }

int64_t ModelConfig::parameters_with_value_head() const { return body_parameters(*this) + hidden; }

int64_t ModelConfig::active_parameters() const {
  return body_parameters(*this, /*active_only=*/true) + (tied_embeddings ? 0 : vocab * hidden);
}

bool ModelConfig::sparse_layer(int64_t layer) const {
  // As transformers' Qwen3MoeDecoderLayer decides it; the other families
  // leave mlp_only_layers empty and the step at 1.
  if (experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

int64_t ModelConfig::sparse_layers() const {
  int64_t count = 0;
  for (int64_t layer = 0; layer < layers; ++layer) count += sparse_layer(layer);
  return count;
}

namespace {

// The keys yarn and longrope add, beyond the factor every type checks.
void validate_rope_scaling(const ModelConfig& c, const std::string& origin) {
  const RopeScaling& s = c.rope_scaling;
  const auto finite_positive = [](double value) { return std::isfinite(value) && value > 0; };
  if (s.type == RopeScaling::Type::none) return;
  if (!finite_positive(s.factor)) throw ModelConfigError(origin + ": rope_scaling factor must be positive");
  if (s.attention_factor && !finite_positive(*s.attention_factor))
    throw ModelConfigError(origin + ": rope_scaling attention_factor must be positive");
  const bool needs_context = s.type == RopeScaling::Type::yarn || s.type == RopeScaling::Type::longrope;
  if (needs_context && c.rope_original_context() <= 0)
    throw ModelConfigError(origin + ": " + rope_type_name(s.type) +
                           " rope_scaling needs original_max_position_embeddings or max_position_embeddings");
  if (s.type == RopeScaling::Type::yarn) {
    // Its band edges divide by ln(rope_theta).
    if (c.rope_theta <= 1) throw ModelConfigError(origin + ": yarn rope_scaling needs rope_theta > 1");
    if (!finite_positive(s.beta_fast) || !finite_positive(s.beta_slow))
      throw ModelConfigError(origin + ": yarn rope_scaling needs positive beta_fast and beta_slow");
    for (const auto& m : {s.mscale, s.mscale_all_dim})
      if (m && !std::isfinite(*m)) throw ModelConfigError(origin + ": yarn rope_scaling mscale must be finite");
  }
  if (s.type == RopeScaling::Type::longrope) {
    const std::size_t half = static_cast<std::size_t>(c.head_dim() / 2);
    for (const auto* list : {&s.short_factor, &s.long_factor}) {
      const char* name = list == &s.short_factor ? "short_factor" : "long_factor";
      if (list->size() != half)
        throw ModelConfigError(origin + ": longrope rope_scaling " + name + " has " + std::to_string(list->size()) +
                               " entries; head_dim " + std::to_string(c.head_dim()) + " needs " +
                               std::to_string(half));
      for (double value : *list)
        if (!finite_positive(value))
          throw ModelConfigError(origin + ": longrope rope_scaling " + name + " holds " + json_excerpt(ConfigJson(value)) +
                                 ", not a positive number");
    }
  }
}

// A mixture of experts' keys: sizes as bounded as the dense ones, top-k
// within the experts, dense layers that exist.
void validate_experts(const ModelConfig& c, const ModelFamilyRow& row, const std::string& origin) {
  if (row.experts == ExpertNames::none) {
    if (c.experts != 0) throw ModelConfigError(origin + ": " + std::string(row.model_type) + " models have no experts");
    return;
  }
  const std::string experts_key(row.experts_key);
  if (c.experts < 0 || c.experts > 4096)
    throw ModelConfigError(origin + ": " + experts_key + " " + std::to_string(c.experts) +
                           " is not a number of experts meshrun builds (0 to 4096)");
  // Qwen3-MoE with no experts is a dense model; Mixtral and OLMoE always route.
  if (c.experts == 0 && !row.dense_layer_keys)
    throw ModelConfigError(origin + ": " + experts_key + " must be at least 1");
  if (c.experts == 0) return;
  if (c.experts_per_token < 1 || c.experts_per_token > c.experts)
    throw ModelConfigError(origin + ": num_experts_per_tok " + std::to_string(c.experts_per_token) +
                           " must be between 1 and " + experts_key + " (" + std::to_string(c.experts) + ")");
  if (c.expert_intermediate <= 0 || c.expert_intermediate > (int64_t{1} << 20))
    throw ModelConfigError(origin + ": " + std::string(row.expert_intermediate_key) + " " +
                           std::to_string(c.expert_intermediate) + " is not an expert width meshrun builds (1 to " +
                           std::to_string(int64_t{1} << 20) + ")");
  // Its files have one width for both (Mixtral, OLMoE: intermediate_size).
  if (row.expert_intermediate_key == "intermediate_size" && c.expert_intermediate != c.intermediate)
    throw ModelConfigError(origin + ": " + std::string(row.model_type) + " experts are intermediate_size wide (" +
                           std::to_string(c.intermediate) + "), not " + std::to_string(c.expert_intermediate));
  if (c.decoder_sparse_step < 1 || c.decoder_sparse_step > 4096)
    throw ModelConfigError(origin + ": decoder_sparse_step " + std::to_string(c.decoder_sparse_step) +
                           " must be between 1 and 4096");
  for (const int64_t layer : c.mlp_only_layers)
    if (layer < 0 || layer >= c.layers)
      throw ModelConfigError(origin + ": mlp_only_layers names layer " + std::to_string(layer) + " of a model of " +
                             std::to_string(c.layers) + " layers");
  if (!std::isfinite(c.router_aux_loss_coef) || c.router_aux_loss_coef < 0)
    throw ModelConfigError(origin + ": router_aux_loss_coef must be a non-negative number");
  if (!std::isfinite(c.clip_qkv) || c.clip_qkv < 0)
    throw ModelConfigError(origin + ": clip_qkv must be a positive number or null");
}

}  // namespace

void ModelConfig::validate(const std::string& origin) const {
  if (hidden <= 0 || layers <= 0 || heads <= 0 || kv_heads <= 0 || intermediate <= 0 || vocab <= 0 ||
      max_position < 0)
    throw ModelConfigError(origin + " has a non-positive size");
  // Far beyond any released model, and small enough that no size product
  // overflows: a config.json past them is a mistake, not something to
  // allocate.
  const std::pair<const char*, std::pair<int64_t, int64_t>> limits[] = {
      {"vocab_size", {vocab, int64_t{1} << 24}},           {"hidden_size", {hidden, int64_t{1} << 18}},
      {"intermediate_size", {intermediate, int64_t{1} << 20}}, {"num_hidden_layers", {layers, 4096}},
      {"num_attention_heads", {heads, 4096}},               {"num_key_value_heads", {kv_heads, 4096}},
      {"max_position_embeddings", {max_position, int64_t{1} << 31}}};
  for (const auto& [key, value] : limits)
    if (value.first > value.second)
      throw ModelConfigError(origin + ": " + key + " " + std::to_string(value.first) +
                             " is beyond any model meshrun builds (at most " + std::to_string(value.second) + ")");
  if (explicit_head_dim < 0 || explicit_head_dim > 4096)
    throw ModelConfigError(origin + ": head_dim " + std::to_string(explicit_head_dim) +
                           " is not a head size meshrun builds (1 to 4096)");
  if (explicit_head_dim > 0 && heads * explicit_head_dim > (int64_t{1} << 18))
    throw ModelConfigError(origin + ": num_attention_heads × head_dim " + std::to_string(heads * explicit_head_dim) +
                           " is beyond any model meshrun builds (at most " + std::to_string(int64_t{1} << 18) + ")");
  if ((explicit_head_dim == 0 && hidden % heads != 0) || heads % kv_heads != 0)
    throw ModelConfigError(origin + ": hidden_size " + std::to_string(hidden) + ", num_attention_heads " +
                           std::to_string(heads) + " and num_key_value_heads " + std::to_string(kv_heads) +
                           " do not describe a supported attention layout" +
                           (explicit_head_dim == 0 && hidden % heads != 0 ? " (without a head_dim)" : ""));
  if (head_dim() % 2 != 0) throw ModelConfigError(origin + ": rotary embeddings need an even head_dim");
  // Here, not only where the model is built: a converted checkpoint or a
  // plan would otherwise accept a config no run can load.
  if (hidden_act != "silu" && hidden_act != "gelu_pytorch_tanh")
    throw ModelConfigError(origin + ": " + std::string(model_family_row(family).activation_key) + " \"" + hidden_act +
                           "\" is not supported (silu: SwiGLU, gelu_pytorch_tanh: GeGLU)");
  for (const auto& [key, value] : {std::pair<const char*, double>{"attn_logit_softcapping", attn_softcap},
                                   {"final_logit_softcapping", final_softcap},
                                   {"query_pre_attn_scalar", query_pre_attn_scalar}})
    if (!std::isfinite(value) || value < 0)
      throw ModelConfigError(origin + ": " + key + " must be a positive number or null");
  if (!windowed_layers.empty() && static_cast<int64_t>(windowed_layers.size()) != layers)
    throw ModelConfigError(origin + ": layer_types has " + std::to_string(windowed_layers.size()) + " entries for " +
                           std::to_string(layers) + " layers");
  if (rope_theta <= 0 || rms_norm_eps <= 0) throw ModelConfigError(origin + ": rope_theta and rms_norm_eps must be positive");
  if (rope_scaling.type == RopeScaling::Type::llama3 &&
      (rope_scaling.original_max_position <= 0 || rope_scaling.high_freq_factor <= rope_scaling.low_freq_factor))
    throw ModelConfigError(origin + ": llama3 rope_scaling needs original_max_position_embeddings > 0 and "
                                    "high_freq_factor > low_freq_factor");
  // Neither the fused tensors nor Phi3Config have a place for these.
  const ModelFamilyRow& row = model_family_row(family);
  if (row.fused_projections && (qkv_bias || o_bias || mlp_bias))
    throw ModelConfigError(origin + ": " + std::string(row.model_type) + " models have no attention or MLP biases");
  if (row.only_rope_scaling != RopeScaling::Type::none && rope_scaling.type != RopeScaling::Type::none &&
      rope_scaling.type != row.only_rope_scaling)
    throw ModelConfigError(origin + ": rope_scaling type \"" + rope_type_name(rope_scaling.type) +
                           "\" is not supported for " + std::string(row.model_type) + " (its config takes " +
                           rope_type_name(row.only_rope_scaling) + " only)");
  validate_rope_scaling(*this, origin);
  validate_experts(*this, row, origin);
  if (window_rope_theta < 0 || !std::isfinite(window_rope_theta))
    throw ModelConfigError(origin + ": rope_local_base_freq must be positive");
  // Gemma3TextConfig's files (rope_local_base_freq) have no place for it.
  if (window_rope_scaling.type != RopeScaling::Type::none)
    throw ModelConfigError(origin + ": rope scaling on the windowed layers (rope_parameters.sliding_attention) is "
                                    "not supported");
}

int64_t ModelConfig::rope_original_context() const {
  return rope_scaling.original_max_position > 0 ? rope_scaling.original_max_position : max_position;
}

std::string decode_graph_blocker(const ModelConfig& config, int tensor_parallel) {
  if (config.mixture_of_experts())
    return "a mixture of experts sizes each expert's share of the tokens on the host";
  if (tensor_parallel > 1) return "tensor parallelism's collectives are not captured";
  for (const RopeScaling* scaling : {&config.rope_scaling, &config.window_rope_scaling})
    if (scaling->type == RopeScaling::Type::dynamic || scaling->type == RopeScaling::Type::longrope)
      return std::string("rope_scaling ") + (scaling->type == RopeScaling::Type::dynamic ? "dynamic" : "longrope") +
             " changes the frequencies with the longest position of each step";
  return {};
}

double ModelConfig::rope_attention_factor() const {
  const RopeScaling& s = rope_scaling;
  if (s.attention_factor) return *s.attention_factor;
  switch (s.type) {
    case RopeScaling::Type::yarn: {
      const auto mscale = [&](double m) { return s.factor <= 1 ? 1.0 : 0.1 * m * std::log(s.factor) + 1.0; };
      if (s.mscale && s.mscale_all_dim && *s.mscale != 0 && *s.mscale_all_dim != 0)
        return mscale(*s.mscale) / mscale(*s.mscale_all_dim);
      return mscale(1.0);
    }
    case RopeScaling::Type::longrope: {
      const double original = static_cast<double>(rope_original_context());
      if (s.factor <= 1 || original <= 1) return 1.0;
      return std::sqrt(1 + std::log(s.factor) / std::log(original));
    }
    case RopeScaling::Type::none:
    case RopeScaling::Type::linear:
    case RopeScaling::Type::dynamic:
    case RopeScaling::Type::llama3: break;
  }
  return 1.0;
}

ModelConfig model_config_from_json(std::string_view text, const std::string& origin) {
  ConfigJson config = parse_bounded_json(text, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) throw ModelConfigError(origin + " is not a JSON object");
  try {
    return config_from_object(config, origin);
  } catch (const WrongType& wrong) {
    throw ModelConfigError(origin + ": " + wrong.message);
  }
}

namespace {

// How many layers Qwen2/Qwen3's use_sliding_window puts a window on, as
// transformers decides it: the layers layer_types marks "sliding_attention",
// else those from max_window_layers (default 28) on. The model applies one
// window to every layer, so a config that windows only some is refused.
int64_t windowed_layers(const ConfigJson& config, const ModelConfig& c, const std::string& origin) {
  int64_t windowed = 0;
  const auto types = config.find("layer_types");
  if (types != config.end() && types->is_array()) {
    for (const auto& type : *types) windowed += type.is_string() && type.get<std::string>() == "sliding_attention";
  } else {
    const int64_t first = optional_key<int64_t>(config, "max_window_layers", 28);
    windowed = std::clamp<int64_t>(c.layers - std::max<int64_t>(first, 0), 0, c.layers);
  }
  if (windowed != 0 && windowed != c.layers)
    throw ModelConfigError(origin + ": use_sliding_window puts a window on " + std::to_string(windowed) + " of " +
                           std::to_string(c.layers) +
                           " layers (max_window_layers / layer_types); meshrun applies one attention pattern to "
                           "every layer, so a window on some layers only is not supported");
  return windowed;
}

// Which layers layer_types marks "sliding_attention" (the others
// "full_attention"); without it every other layer from the first, as Gemma
// 2's config class fills it in.
std::vector<bool> per_layer_windows(const ConfigJson& config, int64_t layers, int64_t pattern, const std::string& origin) {
  // Gemma 3's older files give the pattern, not the list.
  pattern = optional_key<int64_t>(config, "sliding_window_pattern", pattern);
  if (pattern < 1 || pattern > 4096)
    throw ModelConfigError(origin + ": sliding_window_pattern " + std::to_string(pattern) + " must be between 1 and 4096");
  std::vector<bool> windowed;
  const auto types = config.find("layer_types");
  if (types == config.end() || types->is_null()) return patterned_windows(layers, pattern);
  if (!types->is_array() || static_cast<int64_t>(types->size()) != layers)
    throw ModelConfigError(origin + ": layer_types must list one type per layer (" + std::to_string(layers) + "), not " +
                           json_excerpt(*types, 60));
  for (const ConfigJson& type : *types) {
    const std::string name = type.is_string() ? type.get<std::string>() : "";
    if (name != "sliding_attention" && name != "full_attention")
      throw ModelConfigError(origin + ": layer_types holds " + json_excerpt(type, 40) +
                             " (sliding_attention or full_attention)");
    windowed.push_back(name == "sliding_attention");
  }
  return windowed;
}

// Keys of layers the model does not have: a value other than 1.0 (rotary
// on part of each head, Phi-4-mini's 0.75) or 0 (dropout, which transformers
// applies in training) would train another model than the one described.
void refuse_unbuilt_keys(const ConfigJson& config, const RopeSource& rope, const std::string& origin) {
  const auto check = [&](const ConfigJson& object, const char* key, double built, const std::string& where) {
    const double value = optional_key<double>(object, key, built);
    if (value != built)
      throw ModelConfigError(origin + ": " + where + key + " " + json_excerpt(object.at(key), 40) +
                             " is not supported (meshrun builds " + json_excerpt(ConfigJson(built)) + ")");
  };
  check(config, "partial_rotary_factor", 1.0, "");
  if (rope.object) check(*rope.object, "partial_rotary_factor", 1.0, std::string(rope.key) + ".");
  for (const char* key : {"attention_dropout", "resid_pdrop", "embd_pdrop", "router_jitter_noise"})
    check(config, key, 0.0, "");
}

// mlp_only_layers: a list of layer indices (validate checks the range).
std::vector<int64_t> layer_list(const ConfigJson& config, const char* key, const std::string& origin) {
  constexpr std::size_t kMaxEntries = 4096;  // validate's most layers
  std::vector<int64_t> layers;
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return layers;
  if (!it->is_array() || it->size() > kMaxEntries)
    throw ModelConfigError(origin + ": " + key + " is " + json_excerpt(*it, 40) + ", not a list of layer indices");
  for (const ConfigJson& value : *it) {
    const std::optional<int64_t> layer = json_integer<int64_t>(value);
    if (!layer) throw ModelConfigError(origin + ": " + key + " holds " + json_excerpt(value, 40) + ", not a layer index");
    layers.push_back(*layer);
  }
  return layers;
}

// The mixture-of-experts keys of a family whose row has experts.
void read_experts(const ConfigJson& config, const ModelFamilyRow& family, ModelConfig& c, const std::string& origin) {
  if (family.experts == ExpertNames::none) return;
  const std::string key(family.experts_key);
  // transformers 5 writes Qwen3-MoE's num_experts as num_local_experts.
  const char* other = key == "num_experts" ? "num_local_experts" : "num_experts";
  if (config.contains(key)) c.experts = optional_key<int64_t>(config, key.c_str(), 0);
  else c.experts = optional_key<int64_t>(config, other, 0);
  if (!config.contains(key) && !config.contains(other))
    throw ModelConfigError(origin + ": a " + std::string(family.model_type) + " config needs " + key);
  if (c.experts == 0) return;
  const auto top_k = config.find("num_experts_per_tok");
  if (top_k == config.end() || !top_k->is_number_integer())
    throw ModelConfigError(origin + ": a mixture of experts needs an integer num_experts_per_tok");
  c.experts_per_token = optional_key<int64_t>(config, "num_experts_per_tok", 0);
  const std::string width(family.expert_intermediate_key);
  c.expert_intermediate = width == "intermediate_size" ? c.intermediate : optional_key<int64_t>(config, width.c_str(), 0);
  if (c.expert_intermediate == 0) throw ModelConfigError(origin + ": a " + std::string(family.model_type) + " config needs " + width);
  c.norm_topk_prob = family.always_norm_topk || optional_key<bool>(config, "norm_topk_prob", false);
  c.router_aux_loss_coef = optional_key<double>(config, "router_aux_loss_coef", family.default_aux_loss_coef);
  if (family.dense_layer_keys) {
    c.decoder_sparse_step = optional_key<int64_t>(config, "decoder_sparse_step", 1);
    c.mlp_only_layers = layer_list(config, "mlp_only_layers", origin);
  }
  if (family.clip_qkv) c.clip_qkv = optional_key<double>(config, "clip_qkv", 0.0);
}

// A key config.json sets: present and not null (null reads as absent).
bool written(const ConfigJson& config, const char* key) {
  const auto it = config.find(key);
  return it != config.end() && !it->is_null();
}

ModelConfig config_from_object(const ConfigJson& config, const std::string& origin) {
  std::vector<std::string> missing;
  ModelConfig c;
  c.hidden = integer_key(config, "hidden_size", missing);
  c.layers = integer_key(config, "num_hidden_layers", missing);
  c.heads = integer_key(config, "num_attention_heads", missing);
  c.intermediate = integer_key(config, "intermediate_size", missing);
  c.vocab = integer_key(config, "vocab_size", missing);
  if (!missing.empty()) {
    std::string error = origin + " lacks integer key(s):";
    for (const auto& key : missing) error += " " + key;
    throw ModelConfigError(error);
  }
  c.family = detect_family(config, origin);
  const ModelFamilyRow& family = model_family_row(c.family);
  c.kv_heads = optional_key<int64_t>(config, "num_key_value_heads", c.heads);
  c.max_position = optional_key<int64_t>(config, "max_position_embeddings", 0);
  // Absent (or null) is "unknown: no context check"; a written 0 or less
  // is a broken config, not a model without a context limit.
  if (written(config, "max_position_embeddings") && c.max_position <= 0)
    throw ModelConfigError(origin + ": max_position_embeddings " + std::to_string(c.max_position) +
                           " is not a context length (a positive integer, or absent)");
  c.tied_embeddings = optional_key<bool>(config, "tie_word_embeddings", false);
  // Phi3's layers have no biases whatever the keys say (its config has none).
  const bool attention_bias = !family.fused_projections && optional_key<bool>(config, "attention_bias", false);
  c.qkv_bias = family.qkv_bias_always || attention_bias;
  c.o_bias = attention_bias;
  c.mlp_bias = !family.fused_projections && optional_key<bool>(config, "mlp_bias", false);
  apply_family_layout(c);
  const RopeSource rope = rope_source(config, origin, family.rope_per_layer_type);
  refuse_unbuilt_keys(config, rope, origin);
  // Gemma 3's default bases: 1e6 for full attention, 1e4 for the windowed layers.
  c.rope_theta = optional_key<double>(config, "rope_theta", family.rope_per_layer_type ? 1e6 : 10000.0);
  if (rope.object && rope.object->contains("rope_theta")) c.rope_theta = optional_key<double>(*rope.object, "rope_theta", 10000.0);
  c.rms_norm_eps = optional_key<double>(config, "rms_norm_eps", 1e-6);
  c.initializer_range = optional_key<double>(config, "initializer_range", 0.02);
  const std::string activation_key(family.activation_key);
  c.hidden_act = optional_key<std::string>(config, activation_key.c_str(), family.activation_key == "hidden_act" ? "silu" : "gelu_pytorch_tanh");
  if (family.softcapping) {
    // Absent: its config class's; null: none.
    c.attn_softcap = config.contains("attn_logit_softcapping")
                         ? optional_key<double>(config, "attn_logit_softcapping", 0.0)
                         : family.default_attn_softcap;
    c.final_softcap = config.contains("final_logit_softcapping")
                          ? optional_key<double>(config, "final_logit_softcapping", 0.0)
                          : family.default_final_softcap;
    c.query_pre_attn_scalar = optional_key<double>(config, "query_pre_attn_scalar", 0.0);
  }
  c.torch_dtype = optional_key<std::string>(config, "torch_dtype", optional_key<std::string>(config, "dtype", ""));
  c.bos_token_id = optional_id(config, "bos_token_id");
  c.eos_token_ids = eos_ids(config);
  c.pad_token_id = optional_id(config, "pad_token_id");
  bool window_applies = false;
  switch (family.window) {
    case WindowRule::never: break;
    case WindowRule::always: window_applies = true; break;
    case WindowRule::when_enabled: window_applies = optional_key<bool>(config, "use_sliding_window", false); break;
    case WindowRule::per_layer:
      window_applies = true;
      c.windowed_layers = per_layer_windows(config, c.layers, family.window_pattern, origin);
      break;
  }
  if (window_applies) c.sliding_window = optional_key<int64_t>(config, "sliding_window", 0);
  if (family.window == WindowRule::when_enabled && c.sliding_window > 0)
    c.sliding_window = windowed_layers(config, c, origin) == 0 ? 0 : c.sliding_window;
  c.rope_scaling = parse_rope_scaling(config, rope, family, origin);
  if (family.rope_per_layer_type) {
    c.window_rope_theta = optional_key<double>(config, "rope_local_base_freq", 10000.0);
    if (rope.window) {
      if (rope.window->contains("rope_theta")) c.window_rope_theta = optional_key<double>(*rope.window, "rope_theta", 10000.0);
      c.window_rope_scaling =
          parse_rope_scaling(config, RopeSource{rope.window, "rope_parameters.sliding_attention"}, family, origin);
    }
  }
  read_experts(config, family, c, origin);
  // transformers' default head_dim is hidden / heads; a config.json that
  // names another (Qwen3, some Llama derivatives) sizes q/k/v by it.
  const int64_t head_dim = optional_key<int64_t>(config, "head_dim", 0);
  // transformers would size q/k/v by a written 0 and build nothing; absent
  // or null is the hidden / heads default, 0 or less is a mistake.
  if (written(config, "head_dim") && head_dim <= 0)
    throw ModelConfigError(origin + ": head_dim " + std::to_string(head_dim) +
                           " is not a head size meshrun builds (1 to 4096, or absent for hidden_size / num_attention_heads)");
  if (head_dim != 0 && !(c.heads > 0 && c.hidden % c.heads == 0 && head_dim == c.hidden / c.heads))
    c.explicit_head_dim = head_dim;
  c.validate(origin);
  return c;
}

}  // namespace

namespace {

// A model directory's small JSON file (config.json, generation_config.json:
// a few KB; past 16 MiB it is not one): its text, checked to be an object.
std::string read_json_object_text(const std::filesystem::path& path, ConfigJson* parsed = nullptr) {
  constexpr std::size_t kMaxBytes = 16u << 20;
  BoundedText read = read_bounded(path.string(), kMaxBytes);
  if (!read.ok()) throw ModelConfigError(path.string() + " " + read.problem(kMaxBytes));
  ConfigJson object = parse_bounded_json(read.text, /*allow_exceptions=*/false);
  if (object.is_discarded() || !object.is_object()) throw ModelConfigError(path.string() + " is not a JSON object");
  if (parsed) *parsed = std::move(object);
  return std::move(read.text);
}

// eos_token_id of one JSON file of a model directory, appended to `ids`.
void append_eos_ids(const std::filesystem::path& path, std::vector<int64_t>& ids) {
  if (!path_present(path.string())) return;
  ConfigJson config;
  read_json_object_text(path, &config);
  const auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return;
  constexpr std::size_t kMaxIds = 1024;  // models name one to a handful
  const auto add = [&](const ConfigJson& value) {
    const std::optional<int64_t> id = json_integer<int64_t>(value);
    if (!id || *id < 0 || *id >= (int64_t{1} << 24))
      throw ModelConfigError(path.string() + ": eos_token_id " + json_excerpt(*it, 60) +
                             " is not a token id or a list of token ids");
    if (std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
  };
  if (it->is_array()) {
    if (it->size() > kMaxIds)
      throw ModelConfigError(path.string() + ": eos_token_id lists " + std::to_string(it->size()) + " ids");
    for (const ConfigJson& value : *it) add(value);
  } else {
    add(*it);
  }
}

}  // namespace

std::vector<int64_t> generation_stop_ids(const std::string& model, std::optional<int64_t> eos) {
  std::vector<int64_t> ids;
  if (eos) ids.push_back(*eos);
  if (model.rfind(kBuiltinModelPrefix, 0) == 0) return ids;
  const SourceResolution resolved = resolve_source(model, HubRepoType::model);
  if (!resolved.error.empty()) throw ModelConfigError(resolved.error);
  const std::filesystem::path directory(resolved.path);
  append_eos_ids(directory / "config.json", ids);
  append_eos_ids(directory / "generation_config.json", ids);
  return ids;
}

std::string generation_config_json(const std::string& base_model, const ModelConfig& config) {
  if (!base_model.empty() && base_model.rfind(kBuiltinModelPrefix, 0) != 0) {
    const SourceResolution resolved = resolve_source(base_model, HubRepoType::model);
    const std::filesystem::path path = std::filesystem::path(resolved.path) / "generation_config.json";
    std::error_code error;
    if (resolved.error.empty() && std::filesystem::is_regular_file(path, error)) return read_json_object_text(path);
  }
  return derived_generation_config_json(config);
}

std::string derived_generation_config_json(const ModelConfig& config) {
  if (!config.bos_token_id && config.eos_token_ids.empty() && !config.pad_token_id) return "";
  // As transformers' GenerationConfig.from_model_config marks a derived file.
  nlohmann::ordered_json out;
  out["_from_model_config"] = true;
  if (config.bos_token_id) out["bos_token_id"] = *config.bos_token_id;
  if (config.eos_token_ids.size() == 1) out["eos_token_id"] = config.eos_token_ids.front();
  if (config.eos_token_ids.size() > 1) out["eos_token_id"] = config.eos_token_ids;
  if (config.pad_token_id) out["pad_token_id"] = *config.pad_token_id;
  return out.dump(2) + "\n";
}

ModelConfig read_model_config(const std::string& path) {
  // A config.json is a few KB; past 16 MiB it is not one (a device, a
  // wrong file).
  constexpr std::size_t kMaxBytes = 16u << 20;
  const BoundedText read = read_bounded(path, kMaxBytes);
  if (read.status == BoundedText::Status::unreadable) throw ModelConfigError("cannot read " + path);
  if (!read.ok()) throw ModelConfigError(path + " " + read.problem(kMaxBytes) + ": not a model config");
  return model_config_from_json(read.text, path);
}

namespace {

// config.json's rope_scaling: the keys each type's readers take, the
// optional ones only where the file gave them (an
// original_max_position_embeddings added to yarn's would change the factor
// transformers uses).
nlohmann::ordered_json rope_scaling_json(const RopeScaling& s) {
  if (s.type == RopeScaling::Type::none) return nullptr;
  nlohmann::ordered_json scaling;
  if (s.type == RopeScaling::Type::longrope) {
    // Phi3Config (transformers 4.4x) takes exactly type, short_factor and
    // long_factor: no rope_type beside type.
    scaling["type"] = "longrope";
    scaling["short_factor"] = s.short_factor;
    scaling["long_factor"] = s.long_factor;
    if (s.factor_given) scaling["factor"] = s.factor;
    if (!s.original_at_top_level && s.original_max_position > 0)
      scaling["original_max_position_embeddings"] = s.original_max_position;
    if (s.attention_factor) scaling["attention_factor"] = *s.attention_factor;
    return scaling;
  }
  scaling["rope_type"] = rope_type_name(s.type);
  scaling["type"] = rope_type_name(s.type);  // the key older transformers read
  scaling["factor"] = s.factor;
  switch (s.type) {
    case RopeScaling::Type::llama3:
      scaling["low_freq_factor"] = s.low_freq_factor;
      scaling["high_freq_factor"] = s.high_freq_factor;
      scaling["original_max_position_embeddings"] = s.original_max_position;
      break;
    case RopeScaling::Type::yarn:
      if (s.original_max_position > 0) scaling["original_max_position_embeddings"] = s.original_max_position;
      scaling["beta_fast"] = s.beta_fast;
      scaling["beta_slow"] = s.beta_slow;
      if (!s.truncate) scaling["truncate"] = false;
      if (s.mscale) scaling["mscale"] = *s.mscale;
      if (s.mscale_all_dim) scaling["mscale_all_dim"] = *s.mscale_all_dim;
      if (s.attention_factor) scaling["attention_factor"] = *s.attention_factor;
      break;
    case RopeScaling::Type::none:
    case RopeScaling::Type::linear:
    case RopeScaling::Type::dynamic:
    case RopeScaling::Type::longrope: break;
  }
  return scaling;
}

}  // namespace

std::string model_config_to_json(const ModelConfig& c, ModelHead head, const std::string& torch_dtype) {
  nlohmann::ordered_json out;
  const ModelFamilyRow& family = model_family_row(c.family);
  const std::string architecture(family.architecture);
  if (head == ModelHead::value) {
    out["architectures"] = {architecture + "ForSequenceClassification"};
    out["num_labels"] = 1;
    out["id2label"] = {{"0", "LABEL_0"}};
    out["label2id"] = {{"LABEL_0", 0}};
  } else {
    out["architectures"] = {architecture + "ForCausalLM"};
  }
  out["model_type"] = family.model_type;
  out["torch_dtype"] = torch_dtype;
  out["hidden_size"] = c.hidden;
  out["intermediate_size"] = c.intermediate;
  out["num_hidden_layers"] = c.layers;
  out["num_attention_heads"] = c.heads;
  out["num_key_value_heads"] = c.kv_heads;
  out["head_dim"] = c.head_dim();
  out["vocab_size"] = c.vocab;
  out["max_position_embeddings"] = c.max_position > 0 ? c.max_position : 2048;
  out[std::string(family.activation_key)] = c.hidden_act;
  out["rms_norm_eps"] = c.rms_norm_eps;
  out["rope_theta"] = c.rope_theta;
  out["rope_scaling"] = rope_scaling_json(c.rope_scaling);
  if (family.rope_per_layer_type) {
    // The keys Gemma3TextConfig turns into its per-layer-type parameters.
    out["rope_local_base_freq"] = c.window_rope_theta > 0 ? c.window_rope_theta : c.rope_theta;
  }
  if (c.rope_scaling.type == RopeScaling::Type::longrope && c.rope_scaling.original_at_top_level)
    out["original_max_position_embeddings"] = c.rope_scaling.original_max_position;
  out["tie_word_embeddings"] = c.tied_embeddings;
  if (family.writes_attention_bias) out["attention_bias"] = c.o_bias;
  if (family.writes_mlp_bias) out["mlp_bias"] = c.mlp_bias;
  switch (family.window) {
    case WindowRule::never: break;
    case WindowRule::when_enabled:
      out["use_sliding_window"] = c.sliding_window > 0;
      // transformers windows the layers from max_window_layers on; the model's window is on all of them.
      out["max_window_layers"] = c.sliding_window > 0 ? 0 : c.layers;
      [[fallthrough]];
    case WindowRule::always:
      out["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nlohmann::ordered_json();
      break;
    case WindowRule::per_layer: {
      out["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window) : nlohmann::ordered_json();
      nlohmann::ordered_json types = nlohmann::ordered_json::array();
      for (int64_t layer = 0; layer < c.layers; ++layer)
        types.push_back(c.sliding_window > 0 && c.windowed(layer) ? "sliding_attention" : "full_attention");
      out["layer_types"] = types;
      break;
    }
  }
  if (family.softcapping) {
    const auto positive_or_null = [](double value) {
      return value > 0 ? nlohmann::ordered_json(value) : nlohmann::ordered_json();
    };
    out["attn_logit_softcapping"] = positive_or_null(c.attn_softcap);
    out["final_logit_softcapping"] = positive_or_null(c.final_softcap);
    // Gemma2Config takes an integer.
    const double scalar = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(c.head_dim());
    if (scalar == std::floor(scalar) && scalar < 1e15) out["query_pre_attn_scalar"] = static_cast<int64_t>(scalar);
    else out["query_pre_attn_scalar"] = scalar;
  }
  out["attention_dropout"] = 0.0;
  if (family.experts != ExpertNames::none) {
    out[std::string(family.experts_key)] = c.experts;
    out["num_experts_per_tok"] = c.experts_per_token;
    if (family.expert_intermediate_key != "intermediate_size")
      out[std::string(family.expert_intermediate_key)] = c.expert_intermediate;
    if (!family.always_norm_topk) out["norm_topk_prob"] = c.norm_topk_prob;
    out["router_aux_loss_coef"] = c.router_aux_loss_coef;
    out["output_router_logits"] = false;
    if (family.dense_layer_keys) {
      out["decoder_sparse_step"] = c.decoder_sparse_step;
      out["mlp_only_layers"] = c.mlp_only_layers;
    }
    if (family.clip_qkv) out["clip_qkv"] = c.clip_qkv > 0 ? nlohmann::ordered_json(c.clip_qkv) : nlohmann::ordered_json();
    if (family.always_norm_topk) out["router_jitter_noise"] = 0.0;
  }
  if (c.family == ModelFamily::phi3) {
    out["resid_pdrop"] = 0.0;
    out["embd_pdrop"] = 0.0;
    out["partial_rotary_factor"] = 1.0;
  }
  out["initializer_range"] = c.initializer_range;
  out["use_cache"] = true;
  // Phi3Config's defaults (bos 1, eos and pad 32000) are Phi-3-mini's ids:
  // an id the config lacks is written as null, so that a smaller vocabulary
  // does not get a padding_idx past its end.
  const bool null_ids = c.family == ModelFamily::phi3;
  if (c.bos_token_id) out["bos_token_id"] = *c.bos_token_id;
  else if (null_ids) out["bos_token_id"] = nullptr;
  if (c.eos_token_ids.size() == 1) out["eos_token_id"] = c.eos_token_ids.front();
  if (c.eos_token_ids.size() > 1) out["eos_token_id"] = c.eos_token_ids;
  if (c.eos_token_ids.empty() && null_ids) out["eos_token_id"] = nullptr;
  if (c.pad_token_id) out["pad_token_id"] = *c.pad_token_id;
  else if (null_ids) out["pad_token_id"] = nullptr;
  return out.dump(2) + "\n";
}

}  // namespace meshrun
