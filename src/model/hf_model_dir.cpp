// Hugging Face model directories in and out. Loading reads config.json,
// builds the model without random weights and fills every parameter with
// this rank's slice straight from the (mapped) safetensors; saving gathers
// full tensors and writes config.json and safetensors on tp rank 0.
#include <filesystem>

#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/hub_cache.hpp"

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
    out.push_back({p + "input_layernorm.weight", {h}});
    linear(p + "self_attn.q_proj", h, q, c.qkv_bias);
    linear(p + "self_attn.k_proj", h, kv, c.qkv_bias);
    linear(p + "self_attn.v_proj", h, kv, c.qkv_bias);
    linear(p + "self_attn.o_proj", q, h, c.o_bias);
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim()}});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim()}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    linear(p + "mlp.gate_proj", h, i, c.mlp_bias);
    linear(p + "mlp.up_proj", h, i, c.mlp_bias);
    linear(p + "mlp.down_proj", i, h, c.mlp_bias);
  }
  out.push_back({"model.norm.weight", {h}});
  if (head == ModelHead::value) out.push_back({"score.weight", {1, h}});
  else if (!c.tied_embeddings) out.push_back({"lm_head.weight", {c.vocab, h}});
  return out;
}

void write_model_directory(const std::string& directory, const ModelConfig& config, ModelHead head,
                           const TensorList& tensors, const SaveModelOptions& options) {
  const torch::Dtype stored = options.dtype ? *options.dtype : tensors.front().second.scalar_type();
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) throw ModelLoadError(directory + ": cannot create: " + ec.message());
  write_safetensors_directory(directory, tensors, options.max_shard_bytes, stored, {{"format", "pt"}});
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
  for (const auto& [name, shape] : hf_parameters(options.config, options.head)) {
    if (!weights.contains(name)) {
      if (name == "score.weight") continue;  // drawn below for a critic made from a language model
      throw ModelLoadError(source + ": weights lack tensor \"" + name + "\" that config.json implies");
    }
    if (weights.entry(name).shape != shape)
      throw ModelLoadError(source + ": tensor \"" + name + "\" has shape " +
                           c10::str(c10::IntArrayRef(weights.entry(name).shape)) + ", config.json implies " +
                           c10::str(c10::IntArrayRef(shape)));
  }
  LlamaModel model(options);

  torch::NoGradGuard no_grad;
  auto parameters = model->named_parameters();
  for (const auto& spec : model->parameter_specs()) {
    if (spec.adapter) continue;  // drawn by the model (ModelOptions::lora)
    torch::Tensor& target = parameters[spec.name];
    if (!weights.contains(spec.name)) {
      if (spec.name == "score.weight") {  // a critic or reward model made from a language model
        target.copy_(torch::randn(spec.full_shape) * options.config.initializer_range);
        continue;
      }
      throw ModelLoadError(source + ": weights lack tensor \"" + spec.name + "\"");
    }
    const SafetensorsEntry& entry = weights.entry(spec.name);
    if (entry.shape != spec.full_shape)
      throw ModelLoadError(source + ": tensor \"" + spec.name + "\" has shape " +
                           c10::str(c10::IntArrayRef(entry.shape)) + ", config.json implies " +
                           c10::str(c10::IntArrayRef(spec.full_shape)));
    if (spec.split_dim < 0 || model->tp_size() == 1) {
      target.copy_(weights.load(spec.name, options.dtype));
    } else {
      const int64_t size = target.size(spec.split_dim);
      target.copy_(weights.load_slice(spec.name, spec.split_dim, size * model->tp_rank(), size, options.dtype));
    }
  }
  return model;
}

void save_hf_model(const std::string& directory, LlamaModel& model, const SaveModelOptions& options) {
  std::map<std::string, torch::Tensor> full = gather_full_state(model);
  if (model->tp_rank() == 0) {
    TensorList ordered;
    for (const auto& spec : model->parameter_specs()) ordered.emplace_back(spec.name, full.at(spec.name));
    write_model_directory(directory, model->config(), model->options().head, ordered, options);
  }
  if (Group* group = model->options().tensor_parallel) group->barrier();  // the files exist when any rank returns
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
  write_model_directory(directory, config, head, ordered, options);
}

}  // namespace meshrun
