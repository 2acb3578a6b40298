// Token rewards, advantage estimators and group baselines
// (include/meshrun/rl/math.hpp).
#include <stdexcept>
#include <string>

#include "meshrun/rl/math.hpp"

namespace meshrun {
namespace {

torch::Tensor float_mask(const torch::Tensor& mask) { return mask.to(torch::kFloat); }

// [groups, group_size] views of per-sample tensors.
void check_groups(const torch::Tensor& rewards, int64_t group_size) {
  if (group_size < 1 || rewards.dim() != 1 || rewards.size(0) % group_size != 0)
    throw std::logic_error("per-sample rewards [" + std::to_string(rewards.numel()) +
                           "] do not split into groups of " + std::to_string(group_size));
}

}  // namespace

torch::Tensor token_rewards(const torch::Tensor& scalar_rewards, const torch::Tensor& kl, double kl_coef,
                            const torch::Tensor& response_mask) {
  const torch::Tensor mask = float_mask(response_mask);
  torch::Tensor rewards = -kl_coef * kl.to(torch::kFloat) * mask;
  const torch::Tensor lengths = response_mask.to(torch::kInt64).sum(1);
  const torch::Tensor last = (lengths - 1).clamp_min(0).unsqueeze(1);
  const torch::Tensor scalar = (scalar_rewards.to(torch::kFloat) * lengths.gt(0).to(torch::kFloat)).unsqueeze(1);
  return rewards.scatter_add(1, last, scalar);
}

Advantages gae_advantages(const torch::Tensor& rewards, const torch::Tensor& values, const torch::Tensor& response_mask,
                          double gamma, double lambd) {
  const torch::Tensor mask = float_mask(response_mask);
  const torch::Tensor r = rewards.to(torch::kFloat) * mask;
  const torch::Tensor v = values.to(torch::kFloat) * mask;
  const int64_t length = r.size(1);
  std::vector<torch::Tensor> reversed;
  torch::Tensor running = torch::zeros({r.size(0)}, r.options());
  for (int64_t t = length - 1; t >= 0; --t) {
    const torch::Tensor next_value = t + 1 < length ? v.select(1, t + 1) : torch::zeros_like(running);
    const torch::Tensor delta = r.select(1, t) + gamma * next_value - v.select(1, t);
    running = delta + gamma * lambd * running;
    reversed.push_back(running);
  }
  std::reverse(reversed.begin(), reversed.end());
  Advantages out;
  out.advantages = (length > 0 ? torch::stack(reversed, 1) : torch::zeros_like(r)) * mask;
  out.returns = (out.advantages + v) * mask;
  return out;
}

Advantages reinforce_advantages(const torch::Tensor& rewards, const torch::Tensor& response_mask, double gamma) {
  const torch::Tensor mask = float_mask(response_mask);
  const torch::Tensor r = rewards.to(torch::kFloat) * mask;
  const int64_t length = r.size(1);
  std::vector<torch::Tensor> reversed;
  torch::Tensor running = torch::zeros({r.size(0)}, r.options());
  for (int64_t t = length - 1; t >= 0; --t) {
    running = r.select(1, t) + gamma * running;
    reversed.push_back(running);
  }
  std::reverse(reversed.begin(), reversed.end());
  Advantages out;
  out.returns = (length > 0 ? torch::stack(reversed, 1) : torch::zeros_like(r)) * mask;
  out.advantages = out.returns;
  return out;
}

torch::Tensor rloo_rewards(const torch::Tensor& rewards, int64_t group_size, const torch::Tensor& weights) {
  check_groups(rewards, group_size);
  const torch::Tensor r = rewards.to(torch::kFloat).view({-1, group_size});
  const torch::Tensor w = weights.to(torch::kFloat).view({-1, group_size});
  const torch::Tensor others_sum = (r * w).sum(1, true) - r * w;
  const torch::Tensor others_count = w.sum(1, true) - w;
  const torch::Tensor baseline = torch::where(others_count.gt(0), others_sum / others_count.clamp_min(1),
                                              torch::zeros_like(r));
  return ((r - baseline) * w).view(-1);
}

torch::Tensor group_normalized_rewards(const torch::Tensor& rewards, int64_t group_size, const torch::Tensor& weights,
                                       double eps) {
  check_groups(rewards, group_size);
  const torch::Tensor r = rewards.to(torch::kFloat).view({-1, group_size});
  const torch::Tensor w = weights.to(torch::kFloat).view({-1, group_size});
  const torch::Tensor count = w.sum(1, true).clamp_min(1);
  const torch::Tensor mean = (r * w).sum(1, true) / count;
  const torch::Tensor std = (((r - mean).square() * w).sum(1, true) / count).sqrt();
  return ((r - mean) / (std + eps) * w).view(-1);
}

torch::Tensor group_mean_rewards(const torch::Tensor& rewards, int64_t group_size, const torch::Tensor& weights) {
  check_groups(rewards, group_size);
  const torch::Tensor r = rewards.to(torch::kFloat).view({-1, group_size});
  const torch::Tensor w = weights.to(torch::kFloat).view({-1, group_size});
  const torch::Tensor mean = (r * w).sum(1, true) / w.sum(1, true).clamp_min(1);
  return ((r - mean) * w).view(-1);
}

torch::Tensor apply_group_baseline(GroupBaseline baseline, const torch::Tensor& rewards, int64_t group_size,
                                   const torch::Tensor& weights) {
  switch (baseline) {
    case GroupBaseline::none: return rewards;
    case GroupBaseline::leave_one_out: return rloo_rewards(rewards, group_size, weights);
    case GroupBaseline::mean_std: return group_normalized_rewards(rewards, group_size, weights);
    case GroupBaseline::mean: return group_mean_rewards(rewards, group_size, weights);
  }
  throw std::logic_error("unreachable group baseline");
}

torch::Tensor overlong_penalty(const torch::Tensor& response_lengths, int64_t max_new_tokens, int64_t buffer,
                               double penalty) {
  const torch::Tensor lengths = response_lengths.to(torch::kFloat);
  if (buffer <= 0) return torch::zeros_like(lengths);
  const double expected = static_cast<double>(max_new_tokens - buffer);
  return ((expected - lengths) / static_cast<double>(buffer) * penalty).clamp_max(0);
}

torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask) {
  return (values.to(torch::kFloat) * float_mask(mask)).sum();
}

torch::Tensor masked_whiten(const torch::Tensor& values, const torch::Tensor& mask, double eps) {
  const torch::Tensor m = float_mask(mask);
  const torch::Tensor count = m.sum().clamp_min(1);
  const torch::Tensor mean = (values * m).sum() / count;
  const torch::Tensor variance = ((values - mean).square() * m).sum() / count;
  return (values - mean) / (variance.sqrt() + eps) * m;
}

}  // namespace meshrun
