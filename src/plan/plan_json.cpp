// The machine-readable plan: everything format_plan_text() shows, unabridged,
// with sizes as integer bytes. Keys keep their insertion order so the output
// is stable and diffable.
#include <nlohmann/json.hpp>

#include "plan_internal.hpp"

namespace meshrun {
namespace {

using json = nlohmann::ordered_json;

json memory_json(const MemoryEstimate& m) {
  return json{{"parameters", m.parameters}, {"gradients", m.gradients},   {"optimizer", m.optimizer},
              {"optimizer_host", m.optimizer_host}, {"checkpoint_host", m.checkpoint_host},
              {"activations", m.activations}, {"logits", m.logits},
              {"kv_cache", m.kv_cache},     {"overhead", m.overhead},     {"reference", m.reference},
              {"reference_host", m.reference_host}, {"total", m.total()}};
}

json architecture_json(const Architecture& a) {
  if (a.name.empty()) return nullptr;
  return json{{"name", a.name},
              {"source", a.source},
              {"model_type", a.model_type()},
              {"hidden", a.hidden},
              {"layers", a.layers},
              {"heads", a.heads},
              {"kv_heads", a.kv_heads},
              {"head_dim", a.head_dim()},
              {"intermediate", a.intermediate},
              {"vocab", a.vocab},
              {"max_position", a.max_position},
              {"tied_embeddings", a.tied_embeddings},
              {"qkv_bias", a.qkv_bias},
              {"qk_norm", a.qk_norm},
              {"rope_theta", a.rope_theta},
              {"experts", a.experts},
              {"experts_per_token", a.experts_per_token},
              {"expert_intermediate", a.expert_intermediate},
              {"sparse_layers", a.sparse_layers()},
              {"active_parameters", a.active_parameters()}};
}

json mesh_json(const MeshPlan& mesh) {
  if (mesh.ranks.empty()) return nullptr;
  return json{{"dp", mesh.dp},
              {"sp", mesh.sp},
              {"tp", mesh.tp},
              {"ep", mesh.ep},
              {"ranks", mesh.ranks},
              {"dp_groups", mesh.dp_groups},
              {"sp_groups", mesh.sp_groups},
              {"tp_groups", mesh.tp_groups},
              {"ep_groups", mesh.ep_groups},
              {"expert_replica_groups", mesh.expert_replica_groups}};
}

json role_json(const RolePlan& role) {
  json out{{"name", role.name},
           {"model", role.model},
           {"trained", role.trained},
           {"ranks", role.ranks},
           {"mesh", mesh_json(role.mesh)},
           {"gradient_accumulation", role.trained ? json(role.gradient_accumulation) : json(nullptr)},
           {"zero_stage", role.zero_stage},
           {"dtype", setting_name(role.dtype)},
           {"offload", role.offload},
           {"gradient_checkpointing", role.gradient_checkpointing},
           {"micro_batch", role.micro_batch},
           {"sequence_length", role.sequence_length},
           {"parameter_count", role.parameter_count},
           {"lora", json{{"rank", role.lora.rank},
                         {"alpha", role.lora.alpha},
                         {"dropout", role.lora.dropout},
                         {"targets", role.lora.targets},
                         {"adapter_parameter_count", role.adapter_parameter_count}}},
           {"architecture", architecture_json(role.architecture)}};
  if (!role.reference_model.empty())
    out["reference"] = json{{"model", role.reference_model},
                            {"named", role.reference_named},
                            {"shares_base", role.reference_shares_base},
                            {"parameter_count", role.reference_parameter_count},
                            {"architecture", architecture_json(role.reference_architecture)}};
  if (role.trained) {
    const OptimizerPlan& o = role.optimizer;
    out["optimizer"] = json{{"learning_rate", o.learning_rate}, {"lr_scheduler", setting_name(o.lr_scheduler)},
                            {"warmup_ratio", o.warmup_ratio},   {"min_lr_ratio", o.min_lr_ratio},
                            {"weight_decay", o.weight_decay},   {"adam_beta1", o.adam_beta1},
                            {"adam_beta2", o.adam_beta2},       {"adam_eps", o.adam_eps},
                            {"max_norm", o.max_norm},           {"bucket_mb", o.bucket_mb},
                            {"max_skipped_steps", o.max_skipped_steps}};
  }
  const bool estimated = !role.architecture.name.empty() && !role.mesh.ranks.empty();
  out["memory"] = estimated ? memory_json(role.memory) : json(nullptr);
  if (estimated && role.trained)
    out["activations_by_checkpointing"] = json{{"with", role.activations_checkpointed},
                                               {"without", role.activations_not_checkpointed}};
  return out;
}

json engine_json(const EnginePlan& engine, int procs_per_node) {
  return json{{"index", engine.index},
              {"name", plan_detail::engine_name(engine.index)},
              {"node", engine.ranks.empty() ? -1 : engine.ranks.front() / procs_per_node},
              {"ranks", engine.ranks},
              {"kv_cache_tokens", engine.kv_cache_tokens},
              {"kv_cache_sequences", engine.kv_cache_sequences},
              {"max_batch", engine.max_batch},
              {"kv_block_size", engine.kv_block_size},
              {"kv_pool_blocks", engine.kv_pool_blocks},
              {"prefill_chunk", engine.prefill_chunk},
              {"decode_graphs", engine.decode_graphs},
              {"eager_reason", engine.eager_reason},
              {"kv_pool_tokens", engine.kv_pool_tokens()},
              {"kv_bytes_per_token", engine.kv_bytes_per_token},
              {"budget_bytes", engine.budget_bytes},
              {"memory", memory_json(engine.memory)}};
}

}  // namespace

std::string format_plan_json(const Plan& plan) {
  const ClusterShape& c = plan.cluster;
  json out;
  out["cluster"] = json{{"nodes", c.nodes},
                        {"procs_per_node", c.procs_per_node},
                        {"device", setting_name(c.device)},
                        {"memory_gb", c.memory_gb},
                        {"capacity_bytes", plan_detail::capacity_bytes(c)},
                        {"world_size", c.world_size()}};
  out["algorithm"] = name_of(plan.algorithm);
  out["step"] = json{{"prompts", plan.step.prompts},
                     {"group_size", plan.step.group_size},
                     {"samples", plan.step.samples},
                     {"train_batch", plan.step.train_batch},
                     {"epochs", plan.step.epochs},
                     {"optimizer_steps", plan.step.optimizer_steps},
                     {"untrained", plan.step.untrained},
                     {"micro_scoring", plan.step.micro_scoring},
                     {"micro_batch", plan.step.micro_batch},
                     {"data_epochs", plan.step.data_epochs}};
  if (plan.rl.enabled) {
    const RlPlan& rl = plan.rl;
    const SamplingPlan& s = rl.sampling;
    out["rl"] = json{{"advantage", name_of(rl.advantage)},
                     {"gamma", rl.gamma},
                     {"lambd", rl.lambd},
                     {"policy_loss", name_of(rl.policy_loss)},
                     {"clip_low", rl.clip_low},
                     {"clip_high", rl.clip_high},
                     {"dual_clip", rl.dual_clip},
                     {"loss_agg", name_of(rl.loss_agg)},
                     {"rollout_correction", name_of(rl.rollout_correction)},
                     {"rollout_is_cap", rl.rollout_is_cap},
                     {"rollout_is_low", rl.rollout_is_low},
                     {"rollout_is_high", rl.rollout_is_high},
                     {"routing_replay", rl.routing_replay},
                     {"kl_mode", name_of(rl.kl_mode)},
                     {"kl_estimator", name_of(rl.kl_estimator)},
                     {"init_kl_coef", rl.init_kl_coef},
                     {"kl_target", rl.kl_target},
                     {"kl_horizon", rl.kl_horizon},
                     {"has_ref", rl.has_ref},
                     {"has_critic", rl.has_critic},
                     {"has_reward_model", rl.has_reward_model},
                     {"old_log_probs_from_training", rl.old_log_probs_from_training},
                     {"reward_hook", rl.reward_hook},
                     {"hooks_parallel", rl.hooks_parallel},
                     {"entropy_coef", rl.entropy_coef},
                     {"value_clip", rl.value_clip},
                     {"reward_clip", rl.reward_clip},
                     {"normalize_reward", rl.normalize_reward},
                     {"overlong_buffer", rl.overlong_buffer},
                     {"overlong_penalty", rl.overlong_penalty},
                     {"dynamic_sampling", rl.dynamic_sampling},
                     {"max_sample_rounds", rl.max_sample_rounds},
                     {"num_episodes", rl.num_episodes},
                     {"max_staleness", rl.max_staleness},
                     {"partial", rl.partial},
                     {"sampling", json{{"temperature", s.temperature},
                                       {"top_p", s.top_p},
                                       {"top_k", s.top_k},
                                       {"max_prompt_len", s.max_prompt_len},
                                       {"max_new_tokens", s.max_new_tokens}}}};
    if (rl.env.enabled)
      out["rl"]["env"] = json{{"script", rl.env.script},
                              {"max_turns", rl.env.max_turns},
                              {"max_observation_tokens", rl.env.max_observation_tokens},
                              {"max_episode_tokens", rl.env.max_episode_tokens},
                              {"observation_role", rl.env.observation_role},
                              {"timeout_s", rl.env.timeout_s}};
  }
  const RunPlan& run = plan.run;
  out["run"] = json{{"seed", run.seed},
                    {"checkpoint_path", run.checkpoint_path},
                    {"save_every", run.save_every},
                    {"keep_last", run.keep_last},
                    {"max_checkpoint_bytes", run.max_checkpoint_bytes},
                    {"resume", resume_policy_name(run.resume)},
                    {"async_checkpoints", run.async_checkpoints},
                    {"save_hf", run.save_hf},
                    {"save_value_network", run.save_value_network},
                    {"output", run.output},
                    {"log_dir", run.log_dir},
                    {"log_every", run.log_every},
                    {"tensorboard", run.tensorboard},
                    {"max_steps", run.max_steps},
                    {"recipe_fingerprint", run.recipe_fingerprint}};
  out["sleep"] = plan.sleep;

  json slots = json::array();
  for (const SlotPlan& slot : plan.slots)
    slots.push_back(json{{"rank", slot.rank},
                         {"node", slot.node},
                         {"local", slot.local},
                         {"owners", slot.owners},
                         {"peak_bytes", slot.peak_bytes}});
  out["slots"] = std::move(slots);

  json roles = json::array();
  for (const RolePlan& role : plan.roles) roles.push_back(role_json(role));
  out["roles"] = std::move(roles);

  json engines = json::array();
  for (const EnginePlan& engine : plan.engines) engines.push_back(engine_json(engine, c.procs_per_node));
  out["engines"] = std::move(engines);

  json verdicts = json::array();
  for (const FitVerdict& v : plan.verdicts)
    verdicts.push_back(json{{"who", v.who},
                            {"fits", v.fits},
                            {"peak_bytes", v.peak_bytes},
                            {"capacity_bytes", v.capacity_bytes},
                            {"margin_bytes", v.capacity_bytes ? json(v.margin_bytes()) : json(nullptr)},
                            {"reason", v.reason}});
  out["verdicts"] = std::move(verdicts);
  return out.dump(2);  // no trailing newline: callers add their own
}

}  // namespace meshrun
