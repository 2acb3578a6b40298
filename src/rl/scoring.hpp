// The Scoring stage: the reward model and the reward hook give each
// trajectory its scalar rewards; the actor (old log-probs), the ref
// (reference log-probs) and the critic (values) score every response
// token. Each role computes its dp slice and one exchange gives every rank
// every row. Internal to src/rl.
#pragma once

#include <string>

#include "experience.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/rl/trajectory.hpp"
#include "rl_internal.hpp"

namespace meshrun::ppo_detail {

class RoleSlots;

class Scoring {
 public:
  // `reward_function`: the Lua function of `hooks` that scores (empty: none).
  Scoring(const Plan& plan, RoleSlots& roles, Group& world, torch::Device device, HookResources hooks,
          std::string reward_function);

  const std::string& reward_function() const { return reward_function_; }
  // Writes model_reward and hook_reward into every trajectory.
  void score_rewards(TrajectoryBatch& batch, int64_t step);
  // The actor's, ref's and critic's per-token outputs.
  Scores score(const TrajectoryBatch& batch);

 private:
  // The roles `wanted` accepts score their dp slices into [3, n, r]
  // per-token and [n] per-sample outputs, flattened and shared.
  torch::Tensor run_roles(const SequenceBatch& batch, bool (*wanted)(Role));

  const Plan& plan_;
  RoleSlots& roles_;
  Group& world_;
  torch::Device device_;
  HookResources hooks_;
  std::string reward_function_;
};

}  // namespace meshrun::ppo_detail
