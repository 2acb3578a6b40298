// meshrun/model/lora_adapter.hpp: PEFT adapter directories and merging.
#include "meshrun/model/lora_adapter.hpp"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "meshrun/bounded_json.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/safetensors.hpp"

namespace meshrun {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPeftPrefix = "base_model.model.";
constexpr std::string_view kFactorA = ".lora_A.weight";
constexpr std::string_view kFactorB = ".lora_B.weight";

bool is_factor(const std::string& name) { return name.ends_with(kFactorA) || name.ends_with(kFactorB); }

// "model.layers.3.self_attn.q_proj.lora_A.weight" -> "model.layers.3.self_attn.q_proj".
std::string module_of(const std::string& name) { return name.substr(0, name.size() - kFactorA.size()); }

// The layer index and target of a module name, or nullopt when it is not
// "model.layers.N.(self_attn|mlp).<target>".
std::optional<std::pair<int64_t, std::string>> parse_module(const std::string& module) {
  constexpr std::string_view kLayers = "model.layers.";
  if (!module.starts_with(kLayers)) return std::nullopt;
  const std::size_t dot = module.find('.', kLayers.size());
  if (dot == std::string::npos || dot == kLayers.size() || dot - kLayers.size() > 6) return std::nullopt;
  int64_t layer = 0;
  for (std::size_t i = kLayers.size(); i < dot; ++i) {
    if (module[i] < '0' || module[i] > '9') return std::nullopt;
    layer = layer * 10 + (module[i] - '0');
  }
  const std::string rest = module.substr(dot + 1);
  for (const std::string_view target : kLoraTargets) {
    const bool attention = target == "q_proj" || target == "k_proj" || target == "v_proj" || target == "o_proj";
    if (rest == std::string(attention ? "self_attn." : "mlp.") + std::string(target))
      return std::make_pair(layer, std::string(target));
  }
  return std::nullopt;
}

std::string shape_text(c10::IntArrayRef shape) { return c10::str(shape); }

nlohmann::json read_config_json(const fs::path& path) {
  // An adapter_config.json is a few hundred bytes; 1 MiB bounds a wrong path.
  constexpr std::size_t kMaxBytes = 1u << 20;
  std::error_code error;
  if (!fs::exists(path, error)) throw LoraAdapterError(path.string() + ": no such file");
  const BoundedText read = read_bounded(path.string(), kMaxBytes);
  if (!read.ok()) throw LoraAdapterError(path.string() + ": " + read.problem(kMaxBytes) + "; not an adapter config");
  try {
    return parse_bounded_json(read.text);
  } catch (const nlohmann::json::exception& parse) {  // parse_error, or out_of_range for a number like 1e400
    throw LoraAdapterError(path.string() + ": not JSON: " + parse.what());
  }
}

template <class T>
T config_value(const nlohmann::json& config, const char* key, const std::string& where, T fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  try {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (const std::optional<T> n = json_integer<T>(config[key])) return *n;
      throw LoraAdapterError(where + ": \"" + key + "\" has the wrong type (" + json_excerpt(config[key]) +
                             "; an integer in range is wanted)");
    }
    return config[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw LoraAdapterError(where + ": \"" + key + "\" has the wrong type (" + json_excerpt(config[key]) + ")");
  }
}

}  // namespace

std::map<std::string, torch::Tensor> adapter_tensors(const std::map<std::string, torch::Tensor>& full) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, tensor] : full)
    if (is_factor(name)) out.emplace(name, tensor);
  return out;
}

void write_peft_adapter(const std::string& directory, const LoraAdapter& adapter, torch::Dtype dtype) {
  fs::create_directories(directory);
  nlohmann::ordered_json config;
  config["peft_type"] = "LORA";
  config["task_type"] = "CAUSAL_LM";
  config["base_model_name_or_path"] = adapter.base_model;
  config["r"] = adapter.settings.rank;
  config["lora_alpha"] = adapter.settings.alpha;
  config["lora_dropout"] = adapter.settings.dropout;
  config["target_modules"] = adapter.settings.targets;
  config["bias"] = "none";
  config["fan_in_fan_out"] = false;
  config["use_rslora"] = adapter.settings.rslora;
  config["inference_mode"] = true;
  const fs::path config_path = fs::path(directory) / "adapter_config.json";
  const fs::path temporary = config_path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << config.dump(2) << "\n";
    if (!out.flush()) throw LoraAdapterError(temporary.string() + ": cannot be written");
  }
  fs::rename(temporary, config_path);
  TensorList tensors;
  for (const auto& [name, tensor] : adapter.tensors) tensors.emplace_back(std::string(kPeftPrefix) + name, tensor);
  write_safetensors((fs::path(directory) / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}}, dtype);
}

LoraAdapter read_peft_adapter(const std::string& directory, const ModelConfig& model) {
  const fs::path config_path = fs::path(directory) / "adapter_config.json";
  const std::string where = config_path.string();
  const nlohmann::json config = read_config_json(config_path);
  if (!config.is_object()) throw LoraAdapterError(where + ": not a JSON object");
  const std::string type = config_value<std::string>(config, "peft_type", where, "");
  if (type != "LORA") throw LoraAdapterError(where + ": peft_type is \"" + type + "\"; only LORA adapters apply");
  LoraAdapter adapter;
  adapter.settings.rank = config_value<int>(config, "r", where, 0);
  adapter.settings.alpha = config_value<double>(config, "lora_alpha", where, 8);
  adapter.settings.dropout = config_value<double>(config, "lora_dropout", where, 0);
  adapter.settings.rslora = config_value<bool>(config, "use_rslora", where, false);
  adapter.base_model = config_value<std::string>(config, "base_model_name_or_path", where, "");
  if (adapter.settings.rank < 1) throw LoraAdapterError(where + ": \"r\" must be a positive integer");
  if (config_value<bool>(config, "fan_in_fan_out", where, false))
    throw LoraAdapterError(where + ": fan_in_fan_out adapters (GPT-2 style Conv1D) do not apply to Llama models");
  for (const char* pattern : {"rank_pattern", "alpha_pattern"})
    if (config.contains(pattern) && !config[pattern].is_null() && !config[pattern].empty())
      throw LoraAdapterError(where + ": per-module \"" + pattern + "\" is not supported");
  const std::string bias = config_value<std::string>(config, "bias", where, "none");
  if (bias != "none") throw LoraAdapterError(where + ": bias \"" + bias + "\" is not supported (only \"none\")");

  const fs::path weights_path = fs::path(directory) / "adapter_model.safetensors";
  std::error_code error;
  if (!fs::is_regular_file(weights_path, error))
    throw LoraAdapterError(weights_path.string() + ": no such file (adapter_model.bin is not read: save with "
                                                   "safe_serialization)");
  const SafetensorsFile file(weights_path.string());
  std::set<std::string> targets;
  for (const SafetensorsEntry& entry : file.entries()) {
    const std::string at = weights_path.string() + ": tensor \"" + entry.name + "\"";
    if (!entry.name.starts_with(kPeftPrefix) || !is_factor(entry.name))
      throw LoraAdapterError(at + " is not a LoRA factor (base_model.model.<module>.lora_A/B.weight)");
    const std::string name = entry.name.substr(kPeftPrefix.size());
    const std::string module = module_of(name);
    const auto parsed = parse_module(module);
    if (!parsed)
      throw LoraAdapterError(at + ": " + module + " is not a projection a LoRA adapter can target (" +
                             "model.layers.N.self_attn.q/k/v/o_proj, model.layers.N.mlp.gate/up/down_proj)");
    if (parsed->first >= model.layers)
      throw LoraAdapterError(at + ": layer " + std::to_string(parsed->first) + " but the model has " +
                             std::to_string(model.layers));
    const ProjectionShape shape = lora_projection_shape(model, parsed->second);
    const int64_t r = adapter.settings.rank;
    const std::vector<int64_t> expected =
        name.ends_with(kFactorA) ? std::vector<int64_t>{r, shape.in} : std::vector<int64_t>{shape.out, r};
    if (entry.shape != expected)
      throw LoraAdapterError(at + " has shape " + shape_text(entry.shape) + "; r = " + std::to_string(r) +
                             " on this model's " + parsed->second + " needs " + shape_text(expected));
    targets.insert(parsed->second);
    adapter.tensors.emplace(name, file.load(entry.name, torch::kFloat32));
  }
  if (adapter.tensors.empty()) throw LoraAdapterError(weights_path.string() + ": holds no LoRA factor");
  for (const auto& [name, tensor] : adapter.tensors) {
    const std::string partner = module_of(name) + std::string(name.ends_with(kFactorA) ? kFactorB : kFactorA);
    if (!adapter.tensors.count(partner))
      throw LoraAdapterError(weights_path.string() + ": \"" + std::string(kPeftPrefix) + name +
                             "\" has no partner \"" + std::string(kPeftPrefix) + partner + "\"");
  }
  adapter.settings.targets.assign(targets.begin(), targets.end());
  return adapter;
}

void merge_lora(std::map<std::string, torch::Tensor>& weights, const LoraAdapter& adapter) {
  torch::NoGradGuard no_grad;
  const double scale = adapter.settings.scale();
  for (const auto& [name, a] : adapter.tensors) {
    if (!name.ends_with(kFactorA)) continue;
    const std::string module = module_of(name);
    const torch::Tensor& b = adapter.tensors.at(module + std::string(kFactorB));
    auto it = weights.find(module + ".weight");
    if (it == weights.end()) throw LoraAdapterError("merging the adapter: the base has no \"" + module + ".weight\"");
    torch::Tensor& weight = it->second;
    const torch::Tensor delta = torch::matmul(b.to(torch::kFloat32), a.to(torch::kFloat32)) * scale;
    if (delta.sizes() != weight.sizes())
      throw LoraAdapterError("merging the adapter: B·A of " + module + " is " + shape_text(delta.sizes()) +
                             ", the weight " + shape_text(weight.sizes()));
    weight = (weight.to(torch::kFloat32) + delta.to(weight.device())).to(weight.scalar_type());
  }
  for (auto it = weights.begin(); it != weights.end();) it = is_factor(it->first) ? weights.erase(it) : std::next(it);
}

std::map<std::string, torch::Tensor> gather_frozen_parameters(LlamaModel& model) {
  std::map<std::string, torch::Tensor> full;
  auto parameters = model->named_parameters();
  for (const ParameterSpec& spec : model->parameter_specs())
    if (!spec.trainable) gather_whole_parameter(model, spec, parameters[spec.name].detach(), full);
  for (auto& [name, tensor] : full) tensor = tensor.to(torch::kCPU, torch::kFloat32);
  return full;
}

}  // namespace meshrun
