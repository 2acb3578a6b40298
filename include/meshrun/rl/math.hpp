// The arithmetic of PPO and its REINFORCE/GRPO family, as pure tensor
// functions: KL estimators, the KL controller, token rewards, group
// baselines, advantage estimators, the policy losses (PPO, clip-higher,
// dual clip, GSPO), loss aggregation, the value loss and DAPO's overlong
// penalty. The choices are the enums of recipe/algorithms.hpp.
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

#include "meshrun/recipe/algorithms.hpp"

namespace meshrun {

// Schulman's estimators of KL(policy ‖ ref) from samples of the policy, per
// token, with log_ratio = log_probs - ref_log_probs:
//   k1 = log_ratio, k2 = log_ratio² / 2, k3 = exp(-log_ratio) - 1 + log_ratio.
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
// Group mean baseline (REINFORCE++-baseline, Dr. GRPO): r_i - group mean.
torch::Tensor group_mean_rewards(const torch::Tensor& rewards, int64_t group_size, const torch::Tensor& weights);
// The baseline of an estimator's row applied to scalar rewards (none:
// the rewards as they are).
torch::Tensor apply_group_baseline(GroupBaseline baseline, const torch::Tensor& rewards, int64_t group_size,
                                   const torch::Tensor& weights);

// DAPO's soft overlong penalty per sample: 0 up to max_new_tokens - buffer
// response tokens, then falling linearly to -penalty at max_new_tokens
// (and below for longer ones). buffer 0: all zeros.
torch::Tensor overlong_penalty(const torch::Tensor& response_lengths, int64_t max_new_tokens, int64_t buffer,
                               double penalty);

// (x - mean) / (std + eps) over the masked elements.
torch::Tensor masked_whiten(const torch::Tensor& values, const torch::Tensor& mask, double eps = 1e-8);
torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask);

// Per-token policy losses (0 where masked); aggregate them with
// loss_weights().
struct PolicyLossTerms {
  torch::Tensor loss;     // [N, R]
  torch::Tensor clipped;  // 1 where a clip bound decided the loss (counts for clip_frac)
  torch::Tensor ratio;    // the importance ratio used: per token, or the sequence's on every token (GSPO)
};
struct PolicyLossOptions {
  PolicyLoss kind = PolicyLoss::ppo;
  double clip_low = 0.2;   // ratios below 1 - clip_low are clipped
  double clip_high = 0.2;  // ratios above 1 + clip_high are clipped (DAPO clip-higher when larger)
  double dual_clip = 0;    // > 1: for A < 0 the loss is at most dual_clip × |A|; 0 off
};
// ppo: l = max(-r A, -clip(r, 1 - low, 1 + high) A) with r the token ratio;
// dual clip then caps l at -dual_clip × A where A < 0.
// gspo: the same with r the sequence ratio s = exp(mean of the sequence's
// token log-ratios) on every token, its gradient flowing through each
// token's log-prob (s × ∇ log π_t) as in GSPO-token.
PolicyLossTerms policy_loss(const torch::Tensor& log_probs, const torch::Tensor& old_log_probs,
                            const torch::Tensor& advantages, const torch::Tensor& response_mask,
                            const PolicyLossOptions& options);

// Rollout correction (the rows of kRolloutCorrections): per policy token
// r_t = exp(old_t - rollout_t) of the trained policy's log-probs before the
// update and the engine's. `mask` [N, R]: 1 on the tokens the correction
// judges (policy tokens whose engine log-prob is known). `factors` [N, R]
// multiplies each token's policy loss (detached): 1 everywhere for "none"
// and where mask is 0; min(r_t, cap) for tis; 0 for the tokens (icepop) or
// whole sequences (seq-mask, the geometric mean exp(mean_t log r_t) over
// the sequence's judged tokens) outside [low, high]. The figures are sums
// over the judged tokens, for the step's metrics.
struct RolloutCorrectionOptions {
  RolloutCorrection kind = RolloutCorrection::none;
  double cap = 2.0, low = 0.5, high = 2.0;
};
struct RolloutCorrectionTerms {
  torch::Tensor factors;
  double tokens = 0;       // judged tokens
  double ratio_sum = 0;    // Σ r_t
  double ratio_max = 0;    // max r_t (0 without tokens)
  double clipped = 0;      // tis: tokens with r_t > cap
  double masked = 0;       // icepop, seq-mask: judged tokens left out of the loss
};
RolloutCorrectionTerms rollout_correction(const torch::Tensor& old_log_probs, const torch::Tensor& rollout_log_probs,
                                          const torch::Tensor& mask, const RolloutCorrectionOptions& options);

// Weights w [N, R] (0 where masked) that turn per-token terms l into the
// aggregated loss Σ w·l over a batch of sequences (an optimizer step's):
// token-mean 1/T (T tokens); seq-mean-token-sum 1/S (S sequences with a
// response token); seq-mean-token-mean 1/(S·len_i); seq-mean-token-sum-norm
// 1/(S·max_new_tokens). Rows may then be split into micro-batches: their
// partial sums add up to the batch's loss.
torch::Tensor loss_weights(const torch::Tensor& response_mask, LossAggregation aggregation, int64_t max_new_tokens);
// Σ loss_weights(mask) · terms.
torch::Tensor aggregate_loss(const torch::Tensor& terms, const torch::Tensor& response_mask, LossAggregation aggregation,
                             int64_t max_new_tokens);
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
