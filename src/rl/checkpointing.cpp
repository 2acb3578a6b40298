// PPO's state for the run shell: the layout checkpoints belong to, what a
// checkpoint holds, restoring it, and the final actor export.
#include "ppo_run.hpp"

#include "meshrun/model/hf_model.hpp"
#include "meshrun/train/trainer_output.hpp"

namespace meshrun::ppo_detail {

std::string PpoRun::layout() const {
  std::string text = "world " + std::to_string(world_.size());
  for (Role trained : {Role::actor, Role::critic}) {
    const RolePlan* role = plan_.role(trained);
    if (!role || !role->trained) continue;
    const std::string_view name = role_name(trained);
    const MeshPlan& mesh = role->mesh;
    text += "; " + std::string(name) + " dp " + std::to_string(mesh.dp) +
            (mesh.sp > 1 ? " sp " + std::to_string(mesh.sp) : std::string()) + " tp " + std::to_string(mesh.tp) +
            " zero " + std::to_string(role->zero_stage) + " " + std::string(setting_name(role->dtype)) +
            (role->lora.enabled() ? " lora r " + std::to_string(role->lora.rank) : std::string());
  }
  return text;
}

void PpoRun::restore(const ResumePoint& point) {
  enter(StepPhase::training);
  for (auto& [role, slot] : roles_.all())
    if (slot.engine) point.restore_engine(std::string(role_name(role)), *slot.engine);
  point.restore_rng_states(device_);
  const nlohmann::json& trainer = point.trainer;
  rollouts_->restore_sampler(SamplerState::from_json(trainer.at("sampler").dump()));
  kl_controller_.set_coef(trainer.at("kl_coef").get<double>());
  moments_.restore(trainer.at("reward_mean").get<double>(), trainer.at("reward_m2").get<double>(),
                   trainer.at("reward_count").get<int64_t>());
  enter(StepPhase::sync);
  // The restored weights reach the engines as the version they were saved
  // at (checkpoints from before versions were kept: one sync per step).
  sync_engines(trainer.contains("policy_version") ? trainer.at("policy_version").get<int64_t>() : point.step);
}

CheckpointContent PpoRun::checkpoint(int64_t) {
  enter(StepPhase::training);
  CheckpointContent content;
  train_detail::RankState& state = content.state;
  for (auto& [role, slot] : roles_.all())
    if (slot.engine)
      state.add_engine(std::string(role_name(role)), *slot.engine, (*slot.model)->options().config, (*slot.model)->options().head,
                       slot.config->dtype);
  state.add_rng_states(device_);
  content.trainer = {{"sampler", nlohmann::json::parse(rollouts_->sampler_state().to_json())},
                     {"policy_version", rollouts_->policy_version()},
                     {"kl_coef", kl_controller_.coef()},
                     {"reward_mean", moments_.mean()},
                     {"reward_m2", moments_.m2()},
                     {"reward_count", moments_.count()}};
  const RunPlan& run = plan_.run;
  // save_hf: the actor (and with save_value_network the critic) as
  // Hugging Face directories; gathering is collective on their ranks.
  NamedTensors actor_full, critic_full;
  RoleSlot* actor = roles_.find(Role::actor);
  RoleSlot* critic = roles_.find(Role::critic);
  if (run.save_hf && actor) actor_full = train_detail::merged_weights(*actor->engine, *actor->model, actor->config->model);
  if (run.save_hf && run.save_value_network && critic) critic_full = critic->engine->gather_full_parameters();
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
  for (auto [role, full] : {std::pair<Role, NamedTensors*>{Role::actor, &actor_full}, {Role::critic, &critic_full}}) {
    const RoleSlot* slot = roles_.find(role);
    const std::string name(role_name(role));
    if (!slot || full->empty() || world_.rank() != runtime_.mesh(role).ranks().front()) continue;
    const LlamaModel& model = *slot->model;
    SaveModelOptions options;
    options.dtype = torch_dtype_of(slot->config->dtype);
    exports.push_back({name, slot->config->model, model->options().config, model->options().head, options, std::move(*full)});
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
  enter(StepPhase::training);
  RoleSlot* actor = roles_.find(Role::actor);
  NamedTensors full;
  LoraAdapter adapter;
  if (actor) full = train_detail::merged_weights(*actor->engine, *actor->model, actor->config->model, &adapter);
  if (world_.rank() == runtime_.mesh(Role::actor).ranks().front()) {
    SaveModelOptions options;
    options.dtype = torch_dtype_of(actor->config->dtype);
    const LlamaModel& model = *actor->model;
    save_hf_model(directory, model->options().config, model->options().head, full, options);
    train_detail::complete_model_folder(actor->config->model, tokenizer_source_, model->options().config, directory);
    train_detail::write_adapter_if_any(model, adapter, directory, "ppo: actor");
  }
  world_.barrier();
}

}  // namespace meshrun::ppo_detail
