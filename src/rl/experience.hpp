// The Experience stage: scored trajectories → the training targets of a
// step (masks, rewards, KL, advantages, returns). Pure: tensors in, tensors
// out, the same on every rank; the only state it touches is the reward
// normaliser's running moments, which the caller owns and checkpoints.
// Internal to src/rl.
#pragma once

#include <torch/torch.h>

#include "meshrun/plan/plan.hpp"
#include "meshrun/rl/math.hpp"
#include "meshrun/rl/trajectory.hpp"

namespace meshrun::ppo_detail {

// What the roles computed for every trajectory of the step (Scoring's
// output), [N, R] on the training device.
struct Scores {
  torch::Tensor old_log_probs;  // actor, before the update (zeros with old_log_probs_from_training)
  torch::Tensor ref_log_probs;  // zeros without a ref role
  torch::Tensor values;         // critic; zeros without one
};

// The training targets of one step, identical on every rank.
struct Experience {
  torch::Tensor response_mask;  // [N, R] float: the policy's tokens of kept trajectories
  torch::Tensor advantages;     // [N, R]
  torch::Tensor returns;        // [N, R]
  torch::Tensor rewards;        // [N] scalar rewards as scored (before normalisation)
  double kl = 0;                // mean per token, of the recipe's estimator
  double kl_sum_per_sample = 0; // mean over kept samples of the summed KL
  double model_reward_mean = 0; // the reward model's part, over kept samples
  double hook_reward_mean = 0;  // the reward hook's part, over kept samples
  double env_reward_mean = 0;   // the environment's part (multi-turn episodes)
  double overlong_penalty_mean = 0;  // DAPO's overlong penalty (≤ 0), over kept samples
};

struct ExperienceOptions {
  AdvantageEstimator advantage = AdvantageEstimator::gae;
  int64_t group_size = 1;
  double kl_coef_in_reward = 0;  // 0 with kl_mode "loss"
  KlEstimator kl_estimator = KlEstimator::k1;
  double gamma = 1, lambd = 0.95;
  double reward_clip = 0;
  bool has_ref = false;
  int64_t max_new_tokens = 0;
  int64_t overlong_buffer = 0;  // 0: no overlong penalty
  double overlong_penalty = 1;

  // The plan's values with the KL controller's current coefficient.
  static ExperienceOptions of(const RlPlan& rl, const StepPlan& step, double kl_coef);
};

// Per-token rewards: the scalar reward (model + hook, with DAPO's overlong
// penalty, normalised by `reward_moments` when given, clipped, less the
// estimator's group baseline) on the last token, the trajectories' own
// per-token rewards, and -kl_coef × KL on every token; then advantages and
// returns by the estimator's row.
Experience make_experience(const TrajectoryBatch& batch, const Scores& scores, const ExperienceOptions& options,
                           RunningMoments* reward_moments);

// Rollout/trainer agreement: |behaviour − actor| log-prob of each sampled
// token under the same weights, before the update, over the kept
// trajectories whose behaviour log-probs are known.
struct Parity {
  double max = 0, mean = 0;
  int64_t tokens = 0;
};
Parity logprob_parity(const TrajectoryBatch& batch, const torch::Tensor& actor_log_probs);

}  // namespace meshrun::ppo_detail
