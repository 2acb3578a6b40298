// Hugging Face model directories: config.json plus safetensors weights
// (meshrun/model/safetensors.hpp), loaded into and saved from a LlamaModel, and
// the full (unsplit) state of a tensor-parallel model, gathered or scattered
// by ParameterSpec.
//
// Invariants:
// - A directory saved by save_hf_model loads in transformers unchanged:
//   tensor names are Hugging Face's, a tied model has no lm_head.weight,
//   config.json names the architecture, model_type, torch_dtype and every
//   shape key. A Phi-3 model's files hold its q/k/v and gate/up parameters
//   fused, as transformers' Phi3 does (self_attn.qkv_proj: rows q, k, v;
//   mlp.gate_up_proj: gate, up); the model and every state map in meshrun
//   (gather_full_state, checkpoints) keep them apart under the unfused names.
// - With tp > 1, load_hf_model reads on every rank only that rank's slice;
//   save_hf_model and gather_full_state are collectives over the tp group
//   (every tp rank must call them), and only tp rank 0 writes. With expert
//   parallelism they are collectives over the ep group too (every expert
//   is gathered), and only ep rank 0 of tp rank 0 writes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "meshrun/model/model.hpp"
#include "meshrun/model/safetensors.hpp"
#include "meshrun/error.hpp"

namespace meshrun {

class ModelLoadError : public KindError<ErrorKind::model> {
 public:
  using KindError::KindError;
};

// `source`: a model directory (config.json + model.safetensors or a sharded
// index) or a preset ("builtin:tiny"; random weights from torch's default
// generator, as ModelOptions::initialize). options.config is replaced by the
// source's config; weights are converted to options.dtype. A value head
// missing from the weights ("score.weight", e.g. a critic made from a
// language model) is initialised as ModelOptions::initialize would. Throws
// ModelLoadError / SafetensorsError / ModelConfigError naming the file and
// tensor.
LlamaModel load_hf_model(const std::string& source, ModelOptions options);

struct SaveModelOptions {
  // Stored dtype; nullopt: the tensors' own (config.json's torch_dtype follows).
  std::optional<torch::Dtype> dtype;
  int64_t max_shard_bytes = int64_t{5} << 30;  // transformers' default 5 GB
};

// Gathers the tp shards and writes config.json and the weights into
// `directory` (created if needed) on tp rank 0.
void save_hf_model(const std::string& directory, LlamaModel& model, const SaveModelOptions& options = {});
// Writes full tensors (e.g. from a checkpoint) under their Hugging Face
// names; `tensors` must hold exactly the parameters of `config` and `head`
// (lm_head.weight omitted when tied).
void save_hf_model(const std::string& directory, const ModelConfig& config, ModelHead head,
                   const std::map<std::string, torch::Tensor>& tensors, const SaveModelOptions& options = {});

// Every parameter at its full shape, on every tp rank (a collective).
std::map<std::string, torch::Tensor> gather_full_state(LlamaModel& model);
// The whole tensors `local` (the model's parameter of `spec`) stands for,
// into `into` by name: gathered over tp when split and, for an expert's
// parameter under expert parallelism, every ep rank's expert at its place
// (collectives of the model's tp and ep groups).
void gather_whole_parameter(LlamaModel& model, const ParameterSpec& spec, const torch::Tensor& local,
                            std::map<std::string, torch::Tensor>& into);
// Copies this rank's slice of each full tensor into the model; every
// parameter must be present with its full shape.
void scatter_full_state(LlamaModel& model, const std::map<std::string, torch::Tensor>& full);
// This rank's slice of a full tensor, by its spec.
torch::Tensor shard_of(const ParameterSpec& spec, const torch::Tensor& full, int tp_rank, int tp_size);

// "float32", "bfloat16", "float16" (config.json's torch_dtype) <-> torch.
std::string torch_dtype_name(torch::Dtype dtype);
torch::Dtype dtype_from_name(const std::string& name);  // throws ModelLoadError

}  // namespace meshrun
