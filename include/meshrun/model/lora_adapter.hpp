// LoRA adapters as files and as weights: the PEFT directory format that
// `checkpoint.output/adapter/` holds and `meshrun generate --adapter` reads,
// and merging an adapter into its base model's weights.
//
// PEFT format: adapter_config.json ({"peft_type": "LORA", "r",
// "lora_alpha", "lora_dropout", "target_modules", "base_model_name_or_path",
// "bias": "none", "task_type": "CAUSAL_LM", ...}) and
// adapter_model.safetensors with "base_model.model.<module>.lora_A.weight"
// [r, in] and "base_model.model.<module>.lora_B.weight" [out, r] for every
// adapted module (module = "model.layers.N.self_attn.q_proj").
//
// Invariants: merging adds (lora_alpha / r)·B·A to "<module>.weight" in fp32
// and stores the result in the weight's dtype; reading checks every name,
// shape and setting against the base model's config before anything is
// merged, and errors name the file and the tensor or key.
#pragma once

#include <map>
#include <string>

#include <torch/torch.h>

#include "meshrun/error.hpp"
#include "meshrun/arch/lora.hpp"
#include "meshrun/model/model.hpp"

namespace meshrun {

class LoraAdapterError : public KindError<ErrorKind::io> {
 public:
  using KindError::KindError;
};

struct LoraAdapter {
  LoraSettings settings;
  std::string base_model;  // base_model_name_or_path
  // meshrun's names ("model.layers.0.self_attn.q_proj.lora_A.weight"), full
  // (unsplit) tensors.
  std::map<std::string, torch::Tensor> tensors;
};

// The adapter factors among a model's full state (names with .lora_A. or .lora_B.).
std::map<std::string, torch::Tensor> adapter_tensors(const std::map<std::string, torch::Tensor>& full);

// Writes adapter_config.json and adapter_model.safetensors into `directory`
// (created), the weights in `dtype`.
void write_peft_adapter(const std::string& directory, const LoraAdapter& adapter, torch::Dtype dtype);

// Reads a PEFT LoRA directory written for a model of `config`. Throws
// LoraAdapterError naming the file and what is wrong (missing file, not
// LORA, a module that is not a target of this model, a layer past the
// model's, a shape that does not fit, a factor without its partner).
LoraAdapter read_peft_adapter(const std::string& directory, const ModelConfig& config);

// weights["<module>.weight"] += scale · B · A for every adapted module;
// the factors are removed from `weights` if present. Throws
// LoraAdapterError when a module's weight is missing or shapes disagree.
void merge_lora(std::map<std::string, torch::Tensor>& weights, const LoraAdapter& adapter);

// Collective over the model's tp group: the full tensors of its frozen
// (non-trainable) parameters, on CPU, in fp32.
std::map<std::string, torch::Tensor> gather_frozen_parameters(LlamaModel& model);

}  // namespace meshrun
