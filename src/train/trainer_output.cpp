// meshrun/train/trainer_output.hpp.
#include "meshrun/train/trainer_output.hpp"

#include <filesystem>
#include <spdlog/spdlog.h>

#include "meshrun/dist/dist.hpp"
#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/hub_cache.hpp"

namespace meshrun::train_detail {

ModelOptions model_options_for(const RolePlan& role, DeviceMesh& mesh, torch::Device device) {
  ModelOptions options;
  options.tensor_parallel = mesh.tp() > 1 ? &mesh.group(MeshAxis::tp) : nullptr;
  options.sequence_parallel = mesh.sp() > 1 ? &mesh.group(MeshAxis::sp) : nullptr;
  options.expert_parallel = mesh.expert_parallel_group();
  options.dtype = torch_dtype_of(role.dtype);
  options.device = device;
  options.gradient_checkpointing = role.gradient_checkpointing;
  if (role.trained) options.lora = role.lora;  // lint: adapters only on trained roles
  return options;
}

torch::Device device_for(const Plan& plan) {
  if (plan.cluster.device == DeviceKind::cuda) return torch::Device(torch::kCUDA, static_cast<int8_t>(dist::local_rank()));
  return torch::Device(torch::kCPU);
}

void complete_model_folder(const std::string& base_model, const std::string& tokenizer_source,
                           const ModelConfig& config, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code error;
  const SourceResolution tokenizer = resolve_source(tokenizer_source, HubRepoType::model);
  if (!tokenizer_source.empty() && tokenizer.error.empty() && fs::is_directory(tokenizer.path, error)) {
    // What transformers' save_pretrained writes for a tokenizer, fast or slow.
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                             "chat_template.jinja", "added_tokens.json", "vocab.json", "merges.txt"}) {
      const fs::path from = fs::path(tokenizer.path) / name;
      if (fs::is_regular_file(from, error))
        fs::copy_file(from, fs::path(output) / name, fs::copy_options::overwrite_existing);
    }
  }
  std::string generation_config;
  try {
    generation_config = generation_config_json(base_model, config);
  } catch (const ModelConfigError& error) {
    // Lint checked the file; one broken since must not fail a finished run.
    spdlog::warn("{}; {} gets a generation_config.json derived from its config.json", error.what(), output);
    generation_config = derived_generation_config_json(config);
  }
  if (!generation_config.empty())
    write_file_atomically((fs::path(output) / "generation_config.json").string(), generation_config);
}

std::string actor_layout(const ActorRun& actor, int world_size) {
  const DeviceMesh& mesh = actor.mesh;
  return "world " + std::to_string(world_size) + "; actor dp " + std::to_string(mesh.dp()) +
         (mesh.sp() > 1 ? " sp " + std::to_string(mesh.sp()) : std::string()) +
         (mesh.ep() > 1 ? " ep " + std::to_string(mesh.ep()) : std::string()) + " tp " + std::to_string(mesh.tp()) +
         " zero " + std::to_string(actor.engine.options().zero_stage) + " " + std::string(setting_name(actor.dtype)) +
         (actor.model->options().lora.enabled() ? " lora r " + std::to_string(actor.model->options().lora.rank)
                                                : std::string());
}

NamedTensors actor_weights(const ActorRun& actor, LoraAdapter* adapter) {
  return merged_weights(actor.engine, actor.model, actor.base_model, adapter);
}

void write_adapter_if_any(const LlamaModel& model, const LoraAdapter& adapter, const std::string& directory,
                          std::string_view who) {
  if (!model->options().lora.enabled()) {
    spdlog::info("{}: model written to {}", who, directory);
    return;
  }
  write_peft_adapter((std::filesystem::path(directory) / "adapter").string(), adapter, model->options().dtype);
  spdlog::info("{}: merged model written to {}, the LoRA adapter to {}/adapter", who, directory, directory);
}

NamedTensors merged_weights(TrainEngine& engine, const LlamaModel& trained_model, const std::string& base_model,
                            LoraAdapter* adapter) {
  NamedTensors trained = engine.gather_full_parameters();  // collective
  const LoraSettings& lora = trained_model->options().lora;
  if (!lora.enabled()) return trained;
  LlamaModel model = trained_model;
  NamedTensors full = gather_frozen_parameters(model);  // collective over tp
  LoraAdapter merged;
  merged.settings = lora;
  merged.base_model = base_model;
  merged.tensors = adapter_tensors(trained);
  for (auto& [name, tensor] : trained)
    if (!merged.tensors.count(name)) full[name] = tensor;  // trainable non-adapters (none today)
  merge_lora(full, merged);
  if (adapter) *adapter = std::move(merged);
  return full;
}

CheckpointContent actor_checkpoint(const ActorRun& actor, const SamplerState& sampler, bool save_hf) {
  CheckpointContent content;
  const ModelOptions& model = actor.model->options();
  content.state.add_engine(std::string(role_name(Role::actor)), actor.engine, model.config, model.head, actor.dtype);
  content.state.add_rng_states(actor.device);
  content.trainer["sampler"] = nlohmann::json::parse(sampler.to_json());
  NamedTensors full;
  if (save_hf) full = actor_weights(actor);  // collective
  // By value: with [checkpoint] async this runs in the background.
  const bool write_hf = save_hf && dist::rank() == 0;
  content.write_extra = [write_hf, dtype = model.dtype, config = model.config, head = model.head,
                         full = std::move(full), base_model = actor.base_model,
                         tokenizer_source = actor.tokenizer_source](const std::string& directory) {
    if (!write_hf) return;
    SaveModelOptions options;
    options.dtype = dtype;
    const std::string folder = (std::filesystem::path(directory) / "hf" / role_name(Role::actor)).string();
    save_hf_model(folder, config, head, full, options);
    complete_model_folder(base_model, tokenizer_source, config, folder);
  };
  return content;
}

SamplerState restore_actor(const ActorRun& actor, const ResumePoint& point) {
  point.restore_engine(std::string(role_name(Role::actor)), actor.engine);
  point.restore_rng_states(actor.device);
  return SamplerState::from_json(point.trainer_field("sampler").dump());
}

void write_actor_output(const ActorRun& actor, const std::string& directory, std::string_view algorithm) {
  LoraAdapter adapter;
  NamedTensors full = actor_weights(actor, &adapter);  // collective: every rank
  if (dist::rank() == 0) {
    const ModelOptions& model = actor.model->options();
    SaveModelOptions options;
    options.dtype = model.dtype;
    save_hf_model(directory, model.config, model.head, full, options);
    complete_model_folder(actor.base_model, actor.tokenizer_source, model.config, directory);
    write_adapter_if_any(actor.model, adapter, directory, algorithm);
  }
  dist::barrier();
}

}  // namespace meshrun::train_detail
