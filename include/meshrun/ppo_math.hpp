// The arithmetic of PPO and its REINFORCE-family variants, as pure tensor
// functions: KL estimators, the KL controller, token rewards, advantage
// estimators, and the clipped policy and value losses.
//
// Conventions: per-token tensors are [samples, response_len] and come with
// a response mask of the same shape (1 on response tokens; masked positions
// are ignored and come out 0). Per-sample tensors are [samples]. Samples of
// one prompt are consecutive (n_samples_per_prompt of them), as rollouts
// produce them. Every function is deterministic and runs on any device.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace meshrun {

// Schulman's estimators of KL(policy ‖ ref) from samples of the policy, per
// token, with log_ratio = log_probs - ref_log_probs:
//   k1 = log_ratio, k2 = log_ratio² / 2, k3 = exp(-log_ratio) - 1 + log_ratio.
enum class KlEstimator { k1, k2, k3 };
KlEstimator kl_estimator_from_name(const std::string& name);  // throws std::invalid_argument
torch::Tensor kl_penalty(const torch::Tensor& log_probs, const torch::Tensor& ref_log_probs, KlEstimator estimator);

// Fixed coefficient (kl_target = 0) or Ziegler et al.'s adaptive one: after
// each batch of `samples` with mean KL `kl`, the coefficient is multiplied
// by 1 + clip(kl / target - 1, -0.2, 0.2) × samples / horizon.
class KlController {
 public:
  KlController(double init_coef, double target, double horizon);
  double coef() const { return coef_; }
  void update(double kl, int64_t samples);
  void set_coef(double coef) { coef_ = coef; }  // resume

 private:
  double coef_, target_, horizon_;
};

// Per-token rewards: -kl_coef × kl on every response token, plus the
// sample's scalar reward on its last response token.
torch::Tensor token_rewards(const torch::Tensor& scalar_rewards, const torch::Tensor& kl, double kl_coef,
                            const torch::Tensor& response_mask);

struct Advantages {
  torch::Tensor advantages;  // [samples, response_len]
  torch::Tensor returns;     // targets of the value loss (gae); the discounted returns otherwise
};

// Generalised advantage estimation over token rewards and values (the value
// after the last response token is 0).
Advantages gae_advantages(const torch::Tensor& rewards, const torch::Tensor& values, const torch::Tensor& response_mask,
                          double gamma, double lambd);
// Discounted returns G_t = r_t + γ G_{t+1}, used as advantages (REINFORCE).
Advantages reinforce_advantages(const torch::Tensor& rewards, const torch::Tensor& response_mask, double gamma);

// Scalar-reward baselines over the samples of each prompt (groups of
// `group_size` consecutive samples; `weights` 0 leaves a sample out of its
// group's statistics, e.g. one dropped by on_rollout):
// RLOO: r_i minus the mean of the other samples of its group.
torch::Tensor rloo_rewards(const torch::Tensor& rewards, int64_t group_size, const torch::Tensor& weights);
// Group normalisation (GRPO): (r_i - group mean) / (group std + eps), std
// over the group (population form).
torch::Tensor group_normalized_rewards(const torch::Tensor& rewards, int64_t group_size, const torch::Tensor& weights,
                                       double eps = 1e-6);

// (x - mean) / (std + eps) over the masked elements.
torch::Tensor masked_whiten(const torch::Tensor& values, const torch::Tensor& mask, double eps = 1e-8);
torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask);

// Per-token losses (0 where masked); the caller sums and normalises.
struct PolicyLoss {
  torch::Tensor loss;     // -min(ratio × A, clip(ratio, 1 ± eps) × A)
  torch::Tensor clipped;  // 1 where the clipped term was the smaller (counts for clip_frac)
  torch::Tensor ratio;
};
PolicyLoss clipped_policy_loss(const torch::Tensor& log_probs, const torch::Tensor& old_log_probs,
                               const torch::Tensor& advantages, const torch::Tensor& response_mask, double eps_clip);
// 0.5 × max((v - R)², (v_clipped - R)²), v_clipped = old + clip(v - old, ±value_clip);
// value_clip <= 0: the unclipped squared error.
torch::Tensor clipped_value_loss(const torch::Tensor& values, const torch::Tensor& old_values,
                                 const torch::Tensor& returns, const torch::Tensor& response_mask, double value_clip);

// Running mean and variance of scalar rewards across batches (Chan et al.'s
// parallel update), for reward normalisation.
class RunningMoments {
 public:
  void update(const torch::Tensor& values);  // [n]
  double mean() const { return mean_; }
  double std() const;
  int64_t count() const { return count_; }
  void restore(double mean, double m2, int64_t count);
  double m2() const { return m2_; }

 private:
  double mean_ = 0, m2_ = 0;
  int64_t count_ = 0;
};

}  // namespace meshrun
