// PPO's state for the run shell: the layout checkpoints belong to, what a
// checkpoint holds, restoring it, and the final actor export.
#include "ppo_run.hpp"

namespace meshrun::ppo_detail {

std::string PpoRun::layout() const {
  std::string text = "world " + std::to_string(world_.size());
  for (const char* name : {"actor", "critic"}) {
    const RolePlan* role = plan_.role(name);
    if (!role || !role->trained) continue;
    const MeshPlan& mesh = role->mesh;
    text += std::string("; ") + name + " dp " + std::to_string(mesh.dp) +
            (mesh.sp > 1 ? " sp " + std::to_string(mesh.sp) : std::string()) + " tp " + std::to_string(mesh.tp) +
            " zero " + std::to_string(role->zero_stage) + " " + role->dtype +
            (role->lora.enabled() ? " lora r " + std::to_string(role->lora.rank) : std::string());
  }
  return text;
}

void PpoRun::restore(const ResumePoint& point) {
  enter(Phase::training);
  for (auto& [name, slot] : roles_)
    if (slot.engine) point.restore_engine(name, *slot.engine);
  point.restore_rng_states(device_);
  const nlohmann::json& trainer = point.trainer;
  sampler_->restore(SamplerState::from_json(trainer.at("sampler").dump()));
  kl_controller_.set_coef(trainer.at("kl_coef").get<double>());
  moments_.restore(trainer.at("reward_mean").get<double>(), trainer.at("reward_m2").get<double>(),
                   trainer.at("reward_count").get<int64_t>());
  enter(Phase::sync);
  sync_engines();
}

CheckpointContent PpoRun::checkpoint(int64_t) {
  enter(Phase::training);
  CheckpointContent content;
  train_detail::RankState& state = content.state;
  for (auto& [name, slot] : roles_)
    if (slot.engine)
      state.add_engine(name, *slot.engine, (*slot.model)->options().config, (*slot.model)->options().head,
                       slot.config->dtype);
  state.add_rng_states(device_);
  content.trainer = {{"sampler", nlohmann::json::parse(sampler_->state().to_json())},
                     {"kl_coef", kl_controller_.coef()},
                     {"reward_mean", moments_.mean()},
                     {"reward_m2", moments_.m2()},
                     {"reward_count", moments_.count()}};
  const RunPlan& run = plan_.run;
  // save_hf: the actor (and with save_value_network the critic) as
  // Hugging Face directories; gathering is collective on their ranks.
  NamedTensors actor_full, critic_full;
  auto actor = roles_.find("actor");
  auto critic = roles_.find("critic");
  if (run.save_hf && actor != roles_.end())
    actor_full = train_detail::merged_weights(*actor->second.engine, *actor->second.model, actor->second.config->model);
  if (run.save_hf && run.save_value_network && critic != roles_.end())
    critic_full = critic->second.engine->gather_full_parameters();
  // Written by each role's first rank, which holds the gathered weights;
  // everything the writer needs is copied in (with [checkpoint] async it
  // runs in the background).
  struct HfExport {
    std::string name;
    std::string base_model;
    ModelConfig config;
    ModelHead head;
    SaveModelOptions options;
    NamedTensors full;
  };
  std::vector<HfExport> exports;
  for (auto [name, full] : {std::pair<const char*, NamedTensors*>{"actor", &actor_full}, {"critic", &critic_full}}) {
    auto slot = roles_.find(name);
    if (slot == roles_.end() || full->empty() || world_.rank() != runtime_.mesh(name).ranks().front()) continue;
    const LlamaModel& model = *slot->second.model;
    SaveModelOptions options;
    options.dtype = dtype_from_recipe_name(slot->second.config->dtype);
    exports.push_back(
        {name, slot->second.config->model, model->options().config, model->options().head, options, std::move(*full)});
  }
  content.write_extra = [exports = std::move(exports), tokenizer_source = tokenizer_source_](const std::string& directory) {
    for (const HfExport& hf : exports) {
      const std::string folder = (std::filesystem::path(directory) / "hf" / hf.name).string();
      save_hf_model(folder, hf.config, hf.head, hf.full, hf.options);
      train_detail::complete_model_folder(hf.base_model, tokenizer_source, hf.config, folder);
    }
  };
  return content;
}

void PpoRun::write_output(const std::string& directory) {
  enter(Phase::training);
  auto actor = roles_.find("actor");
  NamedTensors full;
  LoraAdapter adapter;
  if (actor != roles_.end())
    full = train_detail::merged_weights(*actor->second.engine, *actor->second.model, actor->second.config->model,
                                        &adapter);
  if (world_.rank() == runtime_.mesh("actor").ranks().front()) {
    SaveModelOptions options;
    options.dtype = dtype_from_recipe_name(actor->second.config->dtype);
    const LlamaModel& model = *actor->second.model;
    save_hf_model(directory, model->options().config, model->options().head, full, options);
    train_detail::complete_model_folder(actor->second.config->model, tokenizer_source_, model->options().config,
                                        directory);
    train_detail::write_adapter_if_any(model, adapter, directory, "ppo: actor");
  }
  world_.barrier();
}

}  // namespace meshrun::ppo_detail
