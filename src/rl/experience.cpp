// The Experience stage (experience.hpp): scalar rewards (model + hook,
// normalised and clipped), group baselines, the KL penalty per token,
// advantages and returns.
#include "experience.hpp"

#include <algorithm>
#include <cmath>

namespace meshrun::ppo_detail {

ExperienceOptions ExperienceOptions::of(const RlPlan& rl, const StepPlan& step, double kl_coef) {
  ExperienceOptions options;
  options.advantage = rl.advantage;
  options.group_size = step.group_size;
  options.kl_coef_in_reward = rl.kl_mode == KlMode::reward ? kl_coef : 0.0;
  options.kl_estimator = rl.kl_estimator;
  options.max_new_tokens = rl.sampling.max_new_tokens;
  options.overlong_buffer = rl.overlong_buffer;
  options.overlong_penalty = rl.overlong_penalty;
  options.gamma = rl.gamma;
  options.lambd = rl.lambd;
  options.reward_clip = rl.reward_clip;
  options.has_ref = rl.has_ref;
  return options;
}

Experience make_experience(const TrajectoryBatch& batch, const Scores& scores, const ExperienceOptions& options,
                           RunningMoments* reward_moments) {
  Experience out;
  const torch::Tensor keep = batch.kept();
  // The loss covers the policy's tokens (`mask`); returns flow back over
  // every response token of a kept trajectory (`span`), so that a reward
  // after tokens the policy did not write (a tool's output) still reaches
  // the policy's earlier tokens. Without such tokens the two are equal.
  out.response_mask = batch.loss_mask();
  const torch::Tensor mask = out.response_mask;
  const torch::Device device = mask.device();
  const torch::Tensor span =
      batch.packed.response_mask.to(torch::kFloat) * keep.unsqueeze(1).to(batch.packed.response_mask.device());
  const torch::Tensor model_rewards = batch.model_rewards(), hook_rewards = batch.hook_rewards();

  const torch::Tensor env_rewards = batch.env_rewards();
  out.rewards = (model_rewards + hook_rewards + env_rewards).to(device, torch::kFloat);
  const torch::Tensor kept_mask = keep.to(device);
  const double kept_count = std::max(1.0, kept_mask.sum().item<double>());
  if (options.overlong_buffer > 0) {
    const torch::Tensor penalty = overlong_penalty(batch.packed.response_mask.to(torch::kFloat).sum(1).to(device),
                                                   options.max_new_tokens, options.overlong_buffer,
                                                   options.overlong_penalty) * kept_mask;
    out.overlong_penalty_mean = penalty.sum().item<double>() / kept_count;
    out.rewards = out.rewards + penalty;
  }
  out.model_reward_mean = (model_rewards.to(device, torch::kFloat) * kept_mask).sum().item<double>() / kept_count;
  out.hook_reward_mean = (hook_rewards.to(device, torch::kFloat) * kept_mask).sum().item<double>() / kept_count;
  out.env_reward_mean = (env_rewards.to(device, torch::kFloat) * kept_mask).sum().item<double>() / kept_count;
  torch::Tensor rewards = out.rewards;
  if (reward_moments) {
    const torch::Tensor kept = rewards.masked_select(keep.to(device).gt(0));
    reward_moments->update(kept.cpu());
    rewards = (rewards - reward_moments->mean()) / (reward_moments->std() + 1e-8);
  }
  if (options.reward_clip > 0) rewards = rewards.clamp(-options.reward_clip, options.reward_clip);
  const torch::Tensor weights = keep.to(device);
  const AdvantageRow& estimator = row_of(options.advantage);
  rewards = apply_group_baseline(estimator.baseline, rewards, options.group_size, weights);

  torch::Tensor kl = torch::zeros_like(mask);
  if (options.has_ref)
    kl = kl_penalty(scores.old_log_probs.to(device), scores.ref_log_probs.to(device), options.kl_estimator) * mask;
  const double tokens = std::max(1.0, mask.sum().item<double>());
  const double kept_samples = std::max(1.0, weights.sum().item<double>());
  out.kl = kl.sum().item<double>() / tokens;
  out.kl_sum_per_sample = kl.sum().item<double>() / kept_samples;

  torch::Tensor token_reward = token_rewards(rewards, kl, options.kl_coef_in_reward, span);
  if (batch.has_token_rewards()) token_reward = token_reward + batch.token_rewards().to(device) * span;
  Advantages advantages = estimator.needs_critic
                              ? gae_advantages(token_reward, scores.values.to(device), span, options.gamma, options.lambd)
                              : reinforce_advantages(token_reward, span, options.gamma);
  const torch::Tensor policy_advantages = advantages.advantages * mask;
  out.advantages = estimator.whiten ? masked_whiten(policy_advantages, mask) : policy_advantages;
  out.returns = advantages.returns;
  return out;
}

Parity logprob_parity(const TrajectoryBatch& batch, const torch::Tensor& actor_log_probs) {
  const torch::Tensor actor = actor_log_probs.to(torch::kCPU, torch::kFloat).contiguous();
  auto view = actor.accessor<float, 2>();
  Parity out;
  double sum = 0;
  for (size_t row = 0; row < batch.trajectories.size(); ++row) {
    if (!batch.trajectories[row].kept) continue;
    const GeneratedSample& sample = batch.trajectories[row].sample;
    const std::vector<uint8_t>& policy = batch.trajectories[row].loss_mask;
    const size_t length = std::min({sample.log_probs.size(), sample.response.size(), static_cast<size_t>(actor.size(1))});
    for (size_t t = 0; t < length; ++t) {
      if (t < policy.size() && policy[t] == 0) continue;  // an observation's token: no behaviour log-prob
      const double difference = std::abs(static_cast<double>(sample.log_probs[t]) - view[static_cast<int64_t>(row)][static_cast<int64_t>(t)]);
      out.max = std::max(out.max, difference);
      sum += difference;
      ++out.tokens;
    }
  }
  out.mean = out.tokens ? sum / static_cast<double>(out.tokens) : 0.0;
  return out;
}

}  // namespace meshrun::ppo_detail
