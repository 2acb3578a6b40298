// Hugging Face model directories in and out. Loading reads config.json,
// builds the model without random weights and fills every parameter with
// this rank's slice straight from the (mapped) safetensors; saving gathers
// full tensors and writes config.json and safetensors on tp rank 0. A
// family with fused projections (Phi-3) stores q/k/v and gate/up as row
// blocks of one tensor each: a parameter is then read from its rows of the
// fused tensor (this rank's slice of them), and the parts are concatenated
// back on saving.
#include <filesystem>
#include <map>
#include <string_view>

#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/arch/hub_cache.hpp"
#include "layers.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

struct NamedShape {
  std::string name;
  std::vector<int64_t> shape;
};

// The parameters of `config` with `head`, in the model's order.
std::vector<NamedShape> hf_parameters(const ModelConfig& c, ModelHead head) {
  const int64_t h = c.hidden, q = c.heads * c.head_dim(), kv = c.kv_dim(), i = c.intermediate;
  std::vector<NamedShape> out{{"model.embed_tokens.weight", {c.vocab, h}}};
  auto linear = [&](const std::string& prefix, int64_t in, int64_t outputs, bool bias) {
    out.push_back({prefix + ".weight", {outputs, in}});
    if (bias) out.push_back({prefix + ".bias", {outputs}});
  };
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    if (!c.post_norms) out.push_back({p + "input_layernorm.weight", {h}});
    linear(p + "self_attn.q_proj", h, q, c.qkv_bias);
    linear(p + "self_attn.k_proj", h, kv, c.qkv_bias);
    linear(p + "self_attn.v_proj", h, kv, c.qkv_bias);
    linear(p + "self_attn.o_proj", q, h, c.o_bias);
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.qk_norm_full_width ? q : c.head_dim()}});
      out.push_back({p + "self_attn.k_norm.weight", {c.qk_norm_full_width ? kv : c.head_dim()}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    if (c.sandwich_norms) out.push_back({p + "pre_feedforward_layernorm.weight", {h}});
    if (c.sparse_layer(layer)) {
      // The router, then each expert's projections (mlp.cpp's order).
      const std::string moe = p + model_detail::experts_module(c.family) + ".";
      const model_detail::MlpNames names = model_detail::expert_names(c.family);
      const int64_t width = c.expert_intermediate;
      linear(moe + "gate", h, c.experts, false);
      for (int64_t e = 0; e < c.experts; ++e) {
        const std::string expert = moe + "experts." + std::to_string(e) + ".";
        linear(expert + names.gate, h, width, false);
        linear(expert + names.up, h, width, false);
        linear(expert + names.down, width, h, false);
      }
    } else {
      linear(p + "mlp.gate_proj", h, i, c.mlp_bias);
      linear(p + "mlp.up_proj", h, i, c.mlp_bias);
      linear(p + "mlp.down_proj", i, h, c.mlp_bias);
    }
    if (c.post_norms || c.sandwich_norms) out.push_back({p + "post_feedforward_layernorm.weight", {h}});
  }
  out.push_back({"model.norm.weight", {h}});
  if (head == ModelHead::value) out.push_back({"score.weight", {1, h}});
  else if (!c.tied_embeddings) out.push_back({"lm_head.weight", {c.vocab, h}});
  return out;
}

// A tensor of the Hugging Face files: one parameter, or row blocks of
// several in order (`parts`, each a parameter of the model).
struct StoredTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<NamedShape> parts;  // empty: the parameter `name` itself
};

// Where a fused family's files put a parameter (transformers' Phi3: rows q,
// k, v of qkv_proj; gate then up of gate_up_proj, split by chunk(2)).
struct Fusion {
  std::string_view part, fused;
  bool first;  // the first row block of `fused`
};
constexpr Fusion kFusions[] = {{".self_attn.q_proj.weight", ".self_attn.qkv_proj.weight", true},
                               {".self_attn.k_proj.weight", ".self_attn.qkv_proj.weight", false},
                               {".self_attn.v_proj.weight", ".self_attn.qkv_proj.weight", false},
                               {".mlp.gate_proj.weight", ".mlp.gate_up_proj.weight", true},
                               {".mlp.up_proj.weight", ".mlp.gate_up_proj.weight", false}};

// The tensors of the files of `config` and `head`, in the order written.
std::vector<StoredTensor> stored_tensors(const ModelConfig& c, ModelHead head) {
  std::vector<StoredTensor> out;
  const bool fused = model_family_row(c.family).fused_projections;
  for (NamedShape& parameter : hf_parameters(c, head)) {
    const Fusion* fusion = nullptr;
    for (const Fusion& f : kFusions)
      if (fused && parameter.name.ends_with(f.part)) fusion = &f;
    if (!fusion) {
      out.push_back({parameter.name, parameter.shape, {}});
      continue;
    }
    // hf_parameters lists q, k, v and gate, up next to each other.
    if (fusion->first) {
      const std::string prefix = parameter.name.substr(0, parameter.name.size() - fusion->part.size());
      out.push_back({prefix + std::string(fusion->fused), {0, parameter.shape.at(1)}, {}});
    }
    StoredTensor& stored = out.back();
    stored.shape[0] += parameter.shape.at(0);
    stored.parts.push_back(std::move(parameter));
  }
  return out;
}

// "[64, 32] (q_proj [32, 32], k_proj [16, 32], v_proj [16, 32])" for a fused tensor.
std::string implied_shape(const StoredTensor& stored) {
  std::string text = c10::str(c10::IntArrayRef(stored.shape));
  if (stored.parts.empty()) return text;
  text += " (";
  for (size_t i = 0; i < stored.parts.size(); ++i) {
    const std::string& name = stored.parts[i].name;
    const size_t module_end = name.rfind('.');
    const size_t module_start = name.rfind('.', module_end - 1) + 1;
    text += (i ? ", " : "") + name.substr(module_start, module_end - module_start) + " " +
            c10::str(c10::IntArrayRef(stored.parts[i].shape));
  }
  return text + ")";
}

// The parameters (named as the model names them) as the files store them:
// fused families' parts concatenated, each part released once used so that
// the full state is not held twice.
TensorList to_stored(const std::string& directory, const ModelConfig& config, ModelHead head, TensorList tensors) {
  if (!model_family_row(config.family).fused_projections) return tensors;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < tensors.size(); ++i) index[tensors[i].first] = i;
  const auto take = [&](const std::string& name) {
    const auto it = index.find(name);
    if (it == index.end() || !tensors[it->second].second.defined())
      throw ModelLoadError(directory + ": tensor \"" + name + "\" is missing from the state to save");
    return std::move(tensors[it->second].second);
  };
  TensorList out;
  for (const StoredTensor& stored : stored_tensors(config, head)) {
    if (stored.parts.empty()) {
      out.emplace_back(stored.name, take(stored.name));
      continue;
    }
    std::vector<torch::Tensor> parts;
    for (const NamedShape& part : stored.parts) parts.push_back(take(part.name));
    out.emplace_back(stored.name, torch::cat(parts, 0));
  }
  for (const auto& [name, tensor] : tensors)
    if (tensor.defined())
      throw ModelLoadError(directory + ": tensor \"" + name + "\" is not a parameter of this model");
  return out;
}

// `tensors`: the parameters under the model's names.
void write_model_directory(const std::string& directory, const ModelConfig& config, ModelHead head,
                           TensorList tensors, const SaveModelOptions& options) {
  const torch::Dtype stored = options.dtype ? *options.dtype : tensors.front().second.scalar_type();
  const TensorList files = to_stored(directory, config, head, std::move(tensors));
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) throw ModelLoadError(directory + ": cannot create: " + ec.message());
  write_safetensors_directory(directory, files, options.max_shard_bytes, stored, {{"format", "pt"}});
  write_file_atomically((fs::path(directory) / "config.json").string(),
                        model_config_to_json(config, head, torch_dtype_name(stored)));
}

}  // namespace

std::string torch_dtype_name(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    case torch::kFloat64: return "float64";
    default: throw ModelLoadError(std::string("dtype ") + c10::toString(dtype) + " is not a model dtype");
  }
}

torch::Dtype dtype_from_name(const std::string& name) {
  if (name == "float32" || name == "fp32") return torch::kFloat32;
  if (name == "bfloat16" || name == "bf16") return torch::kBFloat16;
  if (name == "float16" || name == "fp16") return torch::kFloat16;
  if (name == "float64") return torch::kFloat64;
  throw ModelLoadError("unknown dtype \"" + name + "\" (float32, bfloat16, float16)");
}

LlamaModel load_hf_model(const std::string& name, ModelOptions options) {
  if (name.rfind(kBuiltinModelPrefix, 0) == 0) {
    auto preset = builtin_model_config(name);
    if (!preset) throw ModelLoadError("unknown preset \"" + name + "\"");
    options.config = *preset;
    options.initialize = true;
    return LlamaModel(options);
  }
  const SourceResolution resolved = resolve_source(name, HubRepoType::model);
  if (!resolved.error.empty()) throw ModelLoadError(resolved.error);
  const std::string& source = resolved.path;
  const fs::path directory(source);
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) throw ModelLoadError(source + ": not a model directory or a builtin: preset");
  options.config = read_model_config((directory / "config.json").string());
  options.initialize = false;
  const SafetensorsCheckpoint weights(source);
  // The model's tensors are sized by config.json alone, so every size it
  // implies is first held to the weights that are there: a config.json of
  // 4 096 layers beside a small model.safetensors is an error, not 64 GB
  // allocated before the first shape is compared.
  const std::vector<StoredTensor> stored = stored_tensors(options.config, options.head);
  // Each parameter's tensor in the files and its first row there (a fused
  // tensor's parts are split before tensor-parallel sharding).
  struct Location {
    const StoredTensor* tensor;
    int64_t first_row;
    std::vector<int64_t> shape;
  };
  std::map<std::string, Location> locations;
  for (const StoredTensor& tensor : stored) {
    if (!weights.contains(tensor.name)) {
      if (tensor.name == "score.weight") continue;  // drawn below for a critic made from a language model
      throw ModelLoadError(source + ": weights lack tensor \"" + tensor.name + "\" that config.json implies");
    }
    if (weights.entry(tensor.name).shape != tensor.shape)
      throw ModelLoadError(source + ": tensor \"" + tensor.name + "\" has shape " +
                           c10::str(c10::IntArrayRef(weights.entry(tensor.name).shape)) + ", config.json implies " +
                           implied_shape(tensor));
    if (tensor.parts.empty()) locations[tensor.name] = {&tensor, 0, tensor.shape};
    int64_t row = 0;
    for (const NamedShape& part : tensor.parts) {
      locations[part.name] = {&tensor, row, part.shape};
      row += part.shape.at(0);
    }
  }
  LlamaModel model(options);

  torch::NoGradGuard no_grad;
  auto parameters = model->named_parameters();
  for (const auto& spec : model->parameter_specs()) {
    if (spec.adapter) continue;  // drawn by the model (ModelOptions::lora)
    torch::Tensor& target = parameters[spec.name];
    const auto location = locations.find(spec.name);
    if (location == locations.end()) {
      if (spec.name == "score.weight") {  // a critic or reward model made from a language model
        target.copy_(torch::randn(spec.full_shape) * options.config.initializer_range);
        continue;
      }
      throw ModelLoadError(source + ": weights lack tensor \"" + spec.name + "\"");
    }
    const std::string& name = location->second.tensor->name;
    if (location->second.shape != spec.full_shape)
      throw ModelLoadError(source + ": tensor \"" + name + "\" has shape " +
                           c10::str(c10::IntArrayRef(location->second.shape)) + " for " + spec.name +
                           ", config.json implies " + c10::str(c10::IntArrayRef(spec.full_shape)));
    if (!location->second.tensor->parts.empty()) {
      // Row blocks of a fused tensor, split along rows like their unfused
      // counterparts (column-parallel) or not at all.
      if (spec.split_dim > 0) throw std::logic_error("a fused projection split along its input");
      const int64_t rows = target.size(0);
      const int64_t first = location->second.first_row + (spec.split_dim == 0 ? rows * model->tp_rank() : 0);
      target.copy_(weights.load_slice(name, 0, first, rows, options.dtype));
    } else if (spec.split_dim < 0 || model->tp_size() == 1) {
      target.copy_(weights.load(name, options.dtype));
    } else {
      const int64_t size = target.size(spec.split_dim);
      target.copy_(weights.load_slice(name, spec.split_dim, size * model->tp_rank(), size, options.dtype));
    }
  }
  return model;
}

void save_hf_model(const std::string& directory, LlamaModel& model, const SaveModelOptions& options) {
  std::map<std::string, torch::Tensor> full = gather_full_state(model);
  Group* experts = model->options().expert_parallel;
  if (model->tp_rank() == 0 && (!experts || experts->rank() == 0)) {
    TensorList ordered;
    // Moved: the list holds the only reference, which fusing releases part by part.
    const auto& specs = model->parameter_specs();
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].expert < 0) {
        ordered.emplace_back(specs[i].name, std::move(full.at(specs[i].name)));
        continue;
      }
      // A layer's experts, held here or (expert parallelism) gathered from
      // the other ranks: every expert in order, each like the first held.
      size_t end = i;
      while (end < specs.size() && specs[end].expert == specs[i].expert) ++end;
      for (int e = 0; e < specs[i].experts; ++e)
        for (size_t j = i; j < end; ++j) {
          const std::string name = expert_parameter_name(specs[j], e);
          ordered.emplace_back(name, std::move(full.at(name)));
        }
      while (end < specs.size() && specs[end].expert >= 0) ++end;
      i = end - 1;
    }
    write_model_directory(directory, model->config(), model->options().head, std::move(ordered), options);
  }
  // The files exist when any rank returns.
  if (Group* group = model->options().tensor_parallel) group->barrier();
  if (experts) experts->barrier();
}

void save_hf_model(const std::string& directory, const ModelConfig& config, ModelHead head,
                   const std::map<std::string, torch::Tensor>& tensors, const SaveModelOptions& options) {
  config.validate(directory + "/config.json");
  const std::vector<NamedShape> expected = hf_parameters(config, head);
  TensorList ordered;
  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw ModelLoadError(directory + ": tensor \"" + name + "\" is missing from the state to save");
    if (it->second.sizes().vec() != shape)
      throw ModelLoadError(directory + ": tensor \"" + name + "\" has shape " + c10::str(it->second.sizes()) +
                           ", the config needs " + c10::str(c10::IntArrayRef(shape)));
    ordered.emplace_back(name, it->second);
  }
  if (tensors.size() != expected.size()) {
    for (const auto& [name, tensor] : tensors) {
      bool known = false;
      for (const auto& e : expected) known = known || e.name == name;
      if (!known) throw ModelLoadError(directory + ": tensor \"" + name + "\" is not a parameter of this model");
    }
  }
  write_model_directory(directory, config, head, std::move(ordered), options);
}

}  // namespace meshrun
