// What the trainers share about where they run and what they leave
// behind; and, for runs whose one trained role is the actor on every rank
// (SFT, DPO, reward models), its layout, checkpoint, restore and final
// model. Internal to src/train.
#pragma once

#include <string>

#include <torch/torch.h>

#include "meshrun/data/sampler.hpp"
#include "meshrun/dist/mesh.hpp"
#include "meshrun/model/lora_adapter.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/train/train_engine.hpp"
#include "meshrun/train/run_shell.hpp"

namespace meshrun::train_detail {

// cuda:<local rank> for launch.device = "cuda", else the CPU.
torch::Device device_for(const Plan& plan);

// What a role's model is built with: its mesh's tp and sp groups, its dtype,
// `device`, activation checkpointing, and LoRA adapters when it is trained.
// The head is the caller's (a value head for critics and reward models).
ModelOptions model_options_for(const RolePlan& role, DeviceMesh& mesh, torch::Device device);

// What makes `output` a complete model beside the weights and config.json
// (for `meshrun generate`, transformers, vLLM or another run): the
// tokenizer's own files when it came from a directory or the local hub
// cache (chat_template.jinja included), and generation_config.json from
// `base_model` (see generation_config_json). Either may be empty (not
// known: no tokenizer files, a derived generation_config.json). Rank 0 of
// the writers.
void complete_model_folder(const std::string& base_model, const std::string& tokenizer_source,
                           const ModelConfig& config, const std::string& output);

// The trained actor of an actor-only run.
struct ActorRun {
  TrainEngine& engine;
  const LlamaModel& model;
  const DeviceMesh& mesh;
  Precision dtype;
  torch::Device device;
  const std::string& base_model;  // roles.actor.model as the recipe names it (a LoRA adapter's base)
  const std::string& tokenizer_source;  // what the data was tokenized with (load_data_tokenizer)
};

// Collective over the model's ranks. A trained model's whole weights by
// Hugging Face name (full, CPU): the engine's, or with LoRA adapters the
// frozen base with the adapters merged in (then `adapter`, when given,
// receives them, with `base_model` as their base).
NamedTensors merged_weights(TrainEngine& engine, const LlamaModel& model, const std::string& base_model,
                            LoraAdapter* adapter = nullptr);
NamedTensors actor_weights(const ActorRun& actor, LoraAdapter* adapter = nullptr);

// Rank 0 of a role: `adapter` in PEFT format under directory/adapter when
// the model trains LoRA adapters, and a log line saying what was written.
void write_adapter_if_any(const LlamaModel& model, const LoraAdapter& adapter, const std::string& directory,
                          std::string_view who);

// "world 2; actor dp 2 tp 1 zero 1 bf16" ("dp 2 sp 2 tp 1" with sequence
// parallelism, "... bf16 lora r 8" with adapters): what the rank files of a
// checkpoint depend on.
std::string actor_layout(const ActorRun& actor, int world_size);

// Collective. The engine's state, the random state and the sampler's
// position; with `save_hf` the actor as a complete Hugging Face directory
// under hf/actor (complete_model_folder; written by rank 0, possibly in the
// background).
CheckpointContent actor_checkpoint(const ActorRun& actor, const SamplerState& sampler, bool save_hf);

// Restores what actor_checkpoint saved; returns the sampler's position.
SamplerState restore_actor(const ActorRun& actor, const ResumePoint& point);

// Collective. The final actor into `directory` (rank 0 writes it, with the
// tokenizer's files; with LoRA the merged model and the adapter in PEFT
// format under adapter/), every rank waiting for it.
void write_actor_output(const ActorRun& actor, const std::string& directory, std::string_view algorithm);

}  // namespace meshrun::train_detail
