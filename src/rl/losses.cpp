// Clipped policy and value losses, and running reward moments
// (include/meshrun/rl/math.hpp).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "meshrun/rl/math.hpp"

namespace meshrun {

PolicyLossTerms policy_loss(const torch::Tensor& log_probs, const torch::Tensor& old_log_probs,
                            const torch::Tensor& advantages, const torch::Tensor& response_mask,
                            const PolicyLossOptions& options) {
  const torch::Tensor mask = response_mask.to(torch::kFloat);
  const torch::Tensor log_ratio = (log_probs.to(torch::kFloat) - old_log_probs.to(torch::kFloat)) * mask;
  torch::Tensor log_r;
  switch (options.kind) {
    case PolicyLoss::ppo:
      log_r = log_ratio;
      break;
    case PolicyLoss::gspo: {
      // s_i = exp(mean_t log-ratio) as a value; the gradient of each token's
      // term flows through its own log-prob: log s_i,t = sg(log s_i) + lp_t - sg(lp_t).
      const torch::Tensor lengths = mask.sum(1, true).clamp_min(1);
      const torch::Tensor sequence = (log_ratio.sum(1, true) / lengths).detach();
      const torch::Tensor lp = log_probs.to(torch::kFloat);
      log_r = sequence + lp - lp.detach();
      break;
    }
  }
  PolicyLossTerms out;
  out.ratio = log_r.exp();
  const torch::Tensor a = advantages.to(torch::kFloat);
  const torch::Tensor unclipped = -out.ratio * a;
  const torch::Tensor clipped = -out.ratio.clamp(1.0 - options.clip_low, 1.0 + options.clip_high) * a;
  torch::Tensor loss = torch::maximum(unclipped, clipped);
  torch::Tensor decided_by_clip = clipped.gt(unclipped);
  if (options.dual_clip > 1) {
    const torch::Tensor cap = -options.dual_clip * a;
    const torch::Tensor capped = a.lt(0) & loss.gt(cap);
    loss = torch::where(capped, cap, loss);
    decided_by_clip = decided_by_clip | capped;
  }
  out.loss = loss * mask;
  out.clipped = decided_by_clip.to(torch::kFloat).detach() * mask;
  return out;
}

RolloutCorrectionTerms rollout_correction(const torch::Tensor& old_log_probs, const torch::Tensor& rollout_log_probs,
                                          const torch::Tensor& mask, const RolloutCorrectionOptions& options) {
  torch::NoGradGuard no_grad;
  const torch::Tensor judged = mask.to(torch::kFloat);
  const torch::Tensor log_r = (old_log_probs.to(torch::kFloat) - rollout_log_probs.to(torch::kFloat)) * judged;
  const torch::Tensor ratio = log_r.exp();  // 1 where not judged
  RolloutCorrectionTerms out;
  out.tokens = judged.sum().item<double>();
  out.ratio_sum = (ratio * judged).sum().item<double>();
  out.ratio_max = out.tokens > 0 ? ratio.masked_select(judged.gt(0)).max().item<double>() : 0.0;
  const RolloutCorrectionRow& row = row_of(options.kind);
  torch::Tensor factors = torch::ones_like(judged);
  if (row.weights) {
    factors = torch::where(judged.gt(0), ratio.clamp_max(options.cap), factors);
    out.clipped = (ratio.gt(options.cap).to(torch::kFloat) * judged).sum().item<double>();
  }
  if (row.masks_tokens) {
    const torch::Tensor outside = (ratio.lt(options.low) | ratio.gt(options.high)) & judged.gt(0);
    factors = factors * (~outside).to(torch::kFloat);
    out.masked = outside.to(torch::kFloat).sum().item<double>();
  }
  if (row.masks_sequences) {
    const torch::Tensor lengths = judged.sum(1, true);
    const torch::Tensor geometric = (log_r.sum(1, true) / lengths.clamp_min(1)).exp();
    const torch::Tensor outside = (geometric.lt(options.low) | geometric.gt(options.high)) & lengths.gt(0);
    factors = factors * (~outside).to(torch::kFloat);
    out.masked = (outside.to(torch::kFloat) * lengths).sum().item<double>();
  }
  out.factors = factors;
  return out;
}

torch::Tensor loss_weights(const torch::Tensor& response_mask, LossAggregation aggregation, int64_t max_new_tokens) {
  const torch::Tensor mask = response_mask.to(torch::kFloat);
  const torch::Tensor lengths = mask.sum(1, true);
  const double sequences = std::max(1.0, lengths.gt(0).sum().item<double>());
  switch (aggregation) {
    case LossAggregation::token_mean:
      return mask / std::max(1.0, mask.sum().item<double>());
    case LossAggregation::seq_mean_token_sum:
      return mask / sequences;
    case LossAggregation::seq_mean_token_mean:
      return mask / (lengths.clamp_min(1) * sequences);
    case LossAggregation::seq_mean_token_sum_norm:
      return mask / (static_cast<double>(std::max<int64_t>(1, max_new_tokens)) * sequences);
  }
  throw std::logic_error("unreachable loss aggregation");
}

torch::Tensor aggregate_loss(const torch::Tensor& terms, const torch::Tensor& response_mask, LossAggregation aggregation,
                             int64_t max_new_tokens) {
  return (terms.to(torch::kFloat) * loss_weights(response_mask, aggregation, max_new_tokens)).sum();
}

torch::Tensor clipped_value_loss(const torch::Tensor& values, const torch::Tensor& old_values,
                                 const torch::Tensor& returns, const torch::Tensor& response_mask, double value_clip) {
  const torch::Tensor mask = response_mask.to(torch::kFloat);
  const torch::Tensor v = values.to(torch::kFloat);
  const torch::Tensor plain = (v - returns).square();
  if (value_clip <= 0) return 0.5 * plain * mask;
  const torch::Tensor old = old_values.to(torch::kFloat);
  const torch::Tensor clipped = (old + (v - old).clamp(-value_clip, value_clip) - returns).square();
  return 0.5 * torch::maximum(plain, clipped) * mask;
}

void RunningMoments::update(const torch::Tensor& values) {
  const int64_t n = values.numel();
  if (n == 0) return;
  const torch::Tensor v = values.to(torch::kDouble);
  const double batch_mean = v.mean().item<double>();
  const double batch_m2 = (v - batch_mean).square().sum().item<double>();
  const int64_t total = count_ + n;
  const double delta = batch_mean - mean_;
  mean_ += delta * static_cast<double>(n) / static_cast<double>(total);
  m2_ += batch_m2 + delta * delta * static_cast<double>(count_) * static_cast<double>(n) / static_cast<double>(total);
  count_ = total;
}

double RunningMoments::std() const { return count_ > 1 ? std::sqrt(m2_ / static_cast<double>(count_)) : 1.0; }

void RunningMoments::restore(double mean, double m2, int64_t count) {
  mean_ = mean;
  m2_ = m2;
  count_ = count;
}

}  // namespace meshrun
