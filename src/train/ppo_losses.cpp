// Clipped policy and value losses, and running reward moments
// (include/meshrun/ppo_math.hpp).
#include <cmath>

#include "meshrun/ppo_math.hpp"

namespace meshrun {

PolicyLoss clipped_policy_loss(const torch::Tensor& log_probs, const torch::Tensor& old_log_probs,
                               const torch::Tensor& advantages, const torch::Tensor& response_mask, double eps_clip) {
  const torch::Tensor mask = response_mask.to(torch::kFloat);
  PolicyLoss out;
  out.ratio = (log_probs.to(torch::kFloat) - old_log_probs.to(torch::kFloat)).exp();
  const torch::Tensor unclipped = out.ratio * advantages;
  const torch::Tensor clipped = out.ratio.clamp(1.0 - eps_clip, 1.0 + eps_clip) * advantages;
  out.loss = -torch::minimum(unclipped, clipped) * mask;
  out.clipped = clipped.lt(unclipped).to(torch::kFloat).detach() * mask;
  return out;
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
