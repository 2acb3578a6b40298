// Scores → experience: scalar rewards (model + hook, normalised and
// clipped), group baselines, the KL penalty per token, advantages and
// returns (src/train/ppo_internal.hpp).
#include "ppo_internal.hpp"

namespace meshrun::ppo_detail {

Experience make_experience(const Rollout& rollout, const Scores& scores, const ExperienceOptions& options,
                           RunningMoments* reward_moments) {
  Experience out;
  const torch::Tensor keep = rollout.keep.to(torch::kFloat);
  out.response_mask = rollout.batch.response_mask.to(torch::kFloat) * keep.unsqueeze(1).to(rollout.batch.response_mask.device());
  const torch::Tensor mask = out.response_mask;
  const torch::Device device = mask.device();

  out.rewards = (scores.model_rewards + scores.hook_rewards).to(device, torch::kFloat);
  const torch::Tensor kept_mask = keep.to(device);
  const double kept_count = std::max(1.0, kept_mask.sum().item<double>());
  out.model_reward_mean = (scores.model_rewards.to(device, torch::kFloat) * kept_mask).sum().item<double>() / kept_count;
  out.hook_reward_mean = (scores.hook_rewards.to(device, torch::kFloat) * kept_mask).sum().item<double>() / kept_count;
  torch::Tensor rewards = out.rewards;
  if (reward_moments) {
    const torch::Tensor kept = rewards.masked_select(keep.to(device).gt(0));
    reward_moments->update(kept.cpu());
    rewards = (rewards - reward_moments->mean()) / (reward_moments->std() + 1e-8);
  }
  if (options.reward_clip > 0) rewards = rewards.clamp(-options.reward_clip, options.reward_clip);
  const torch::Tensor weights = keep.to(device);
  if (options.advantage == "rloo") rewards = rloo_rewards(rewards, options.group_size, weights);
  if (options.advantage == "group_norm") rewards = group_normalized_rewards(rewards, options.group_size, weights);

  torch::Tensor kl = torch::zeros_like(mask);
  if (options.has_ref)
    kl = kl_penalty(scores.old_log_probs.to(device), scores.ref_log_probs.to(device),
                    kl_estimator_from_name(options.kl_estimator)) * mask;
  const double tokens = std::max(1.0, mask.sum().item<double>());
  const double kept_samples = std::max(1.0, weights.sum().item<double>());
  out.kl = kl.sum().item<double>() / tokens;
  out.kl_sum_per_sample = kl.sum().item<double>() / kept_samples;

  const torch::Tensor token_reward = token_rewards(rewards, kl, options.kl_coef, mask);
  Advantages advantages = options.advantage == "gae"
                              ? gae_advantages(token_reward, scores.values.to(device), mask, options.gamma, options.lambd)
                              : reinforce_advantages(token_reward, mask, options.gamma);
  // Group normalisation already puts rewards on a common scale; the others
  // are whitened over the batch, as OpenRLHF does.
  out.advantages = options.advantage == "group_norm" ? advantages.advantages
                                                     : masked_whiten(advantages.advantages, mask);
  out.returns = advantages.returns;
  return out;
}

}  // namespace meshrun::ppo_detail
