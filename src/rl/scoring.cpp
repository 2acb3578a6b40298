// The Scoring stage (scoring.hpp).
#include "scoring.hpp"

#include "roles.hpp"

namespace meshrun::ppo_detail {

namespace {

// Where a per-token role's rows go in run_roles' [3, n, r] output.
int64_t per_token_index(Role role) {
  switch (role) {
    case Role::actor: return 0;
    case Role::ref: return 1;
    case Role::critic: return 2;
    case Role::reward:
    case Role::rollout: break;
  }
  throw std::logic_error("role " + std::string(role_name(role)) + " has no per-token output");
}

}  // namespace

Scoring::Scoring(const Plan& plan, RoleSlots& roles, Group& world, torch::Device device, HookResources hooks,
                 std::string reward_function)
    : plan_(plan),
      roles_(roles),
      world_(world),
      device_(device),
      hooks_(hooks),
      reward_function_(std::move(reward_function)) {}

// Each role `wanted` picks scores its dp slice in micro_rollout chunks into
// [3, n, r] per-token scores (actor, ref, critic log-probs / values) and [n]
// per-sample ones (the reward model's, at each sequence's last real token);
// one all-reduce gives everyone every row.
torch::Tensor Scoring::run_roles(const SequenceBatch& batch, bool (*wanted)(Role)) {
  const int64_t n = batch.sequences.size(0), r = batch.response_len;
  const double temperature = plan_.rl.sampling.temperature;
  torch::Tensor per_token = torch::zeros({3, n, r}, torch::kFloat);
  torch::Tensor per_sample = torch::zeros({n}, torch::kFloat);
  torch::NoGradGuard no_grad;
  for (auto& [role, slot] : roles_.all()) {
    if (!wanted(role)) continue;
    const RoleRow& row = row_of(role);
    const RowRange range = slot.rows(n);
    for (int64_t begin = range.begin; begin < range.end; begin += plan_.step.micro_scoring) {
      const int64_t end = std::min<int64_t>(range.end, begin + plan_.step.micro_scoring);
      const torch::Tensor rows = torch::arange(begin, end, torch::TensorOptions().dtype(torch::kInt64).device(device_));
      const ModelInputs inputs = inputs_for(batch, rows);
      // A trained role scores through its engine (its current weights).
      if (slot.engine) slot.engine->eval();
      const auto forward = [&] { return slot.engine ? slot.engine->forward(inputs) : (*slot.model)->forward(inputs); };
      torch::Tensor out;
      switch (row.output) {
        case RoleOutput::token_log_probs: out = response_head(slot, batch, rows, temperature, false).log_probs; break;
        case RoleOutput::token_values: out = response_columns(forward(), batch, slot); break;
        case RoleOutput::sample_score: {  // at each sequence's last real token
          const torch::Tensor last =
              (batch.prompt_len + batch.response_mask.index_select(0, rows).sum(1) - 1).unsqueeze(1);
          out = (*slot.model)->whole_rows(forward(), batch.sequences.size(1)).gather(1, last).squeeze(1);
          break;
        }
        case RoleOutput::samples: throw std::logic_error("rollout engines do not score");
      }
      if (!slot.produces()) continue;
      out = out.to(torch::kCPU, torch::kFloat);
      if (row.output == RoleOutput::sample_score) per_sample.narrow(0, begin, end - begin).copy_(out);
      else per_token[per_token_index(role)].narrow(0, begin, end - begin).copy_(out);
    }
  }
  torch::Tensor flat = torch::cat({per_token.view(-1), per_sample});
  share_sum(flat, world_);
  return flat;
}

void Scoring::score_rewards(TrajectoryBatch& batch, int64_t step) {
  const int64_t n = batch.size();
  torch::Tensor model = torch::zeros({n}, torch::kFloat);
  if (plan_.role(Role::reward)) {  // every rank takes part in the exchange
    const torch::Tensor flat = run_roles(batch.packed, [](Role role) { return role == Role::reward; });
    model = flat.narrow(0, flat.numel() - n, n).contiguous();
  }
  const float* model_values = model.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) batch.trajectories[static_cast<size_t>(i)].model_reward = model_values[i];
  if (reward_function_.empty()) return;
  torch::Tensor hook = torch::zeros({n}, torch::kFloat64);
  if (plan_.rl.hooks_parallel) {
    // Every rank scores its own share of the trajectories, whole prompt
    // groups (a hook may compare a prompt's samples); the sum gives all.
    const int64_t group = plan_.step.group_size;
    const RowRange groups = slice_of(n / group, world_.size(), world_.rank());
    const RowRange share{groups.begin * group, groups.end * group};
    on_every_rank_or_fail_everywhere(world_, reward_function_, [&] {
      if (share.size() == 0) return;
      const std::vector<double> values =
          call_reward(hooks_.context(step, share), reward_function_, batch.trajectories);
      std::copy(values.begin(), values.end(), hook.data_ptr<double>() + share.begin);
    });
    share_sum(hook, world_);
  } else {
    on_rank0_or_fail_everywhere(world_, reward_function_, [&] {
      const std::vector<double> values =
          call_reward(hooks_.context(step, RowRange{0, n}), reward_function_, batch.trajectories);
      std::copy(values.begin(), values.end(), hook.data_ptr<double>());
    });
    torch::Tensor shared = hook.to(world_.device());
    world_.broadcast(shared, 0);
    hook = shared.cpu();
  }
  // Rewards travel on as float, as they are trained on.
  const torch::Tensor rounded = hook.to(torch::kFloat).contiguous();
  const float* hook_values = rounded.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) batch.trajectories[static_cast<size_t>(i)].hook_reward = hook_values[i];
}

Scores Scoring::score(const TrajectoryBatch& batch) {
  const int64_t n = batch.packed.sequences.size(0), r = batch.packed.response_len;
  // With old_log_probs_from_training the actor's log-probs come from the
  // update's own forward (Updates): no actor pass here.
  const torch::Tensor flat =
      plan_.rl.old_log_probs_from_training
          ? run_roles(batch.packed, [](Role role) { return role != Role::reward && role != Role::actor; })
          : run_roles(batch.packed, [](Role role) { return role != Role::reward; });
  Scores scores;
  scores.old_log_probs = flat.narrow(0, 0, n * r).view({n, r}).to(device_);
  scores.ref_log_probs = flat.narrow(0, n * r, n * r).view({n, r}).to(device_);
  scores.values = flat.narrow(0, 2 * n * r, n * r).view({n, r}).to(device_);
  return scores;
}

}  // namespace meshrun::ppo_detail
