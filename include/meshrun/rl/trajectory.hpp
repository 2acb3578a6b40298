// Trajectory: the unit that flows between the stages of an RL step
//   Rollouts (engines, prompts, on_rollout, dynamic sampling) → Scoring
//   (rewards, ref and critic forward passes) → Experience (advantages,
//   returns, KL, masks) → Updates (actor and critic optimisation).
// A trajectory is one sampled response to one prompt: its token ids, the
// log-probs the generating policy gave them, which tokens the policy
// produced (the loss mask), the policy version that produced it, and its
// rewards. Multi-turn episodes and off-policy training extend this type;
// stages never reach into each other's state.
//
// Invariants: behaviour_log_probs is empty (unknown, e.g. a hook rewrote the
// tokens) or one per response token (0 where the policy did not sample the
// token); loss_mask and token_rewards are empty (every response token is
// the policy's; no per-token reward) or one per response token. In a
// multi-turn episode the response holds every turn and the observations
// between them, and loss_mask is the sample's policy_mask. A step's trajectories keep each prompt's group of
// n_samples_per_prompt consecutive, and every rank holds the same ones.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <torch/torch.h>

#include "meshrun/rollout/generation.hpp"

namespace meshrun {

// How a trajectory's episode ended: a single turn (no environment), by the
// environment (done, or no observation), or by a limit (max_turns,
// max_episode_tokens).
enum class EpisodeEnd : uint8_t { single_turn, done, truncated };

// What a multi-turn episode's environment gave it.
struct EpisodeRecord {
  double env_reward = 0;       // Σ of step()'s rewards
  EpisodeEnd end = EpisodeEnd::single_turn;
  int32_t observations = 0;    // observations appended
  int32_t observations_cut = 0;  // of them, cut to max_observation_tokens
};

struct Trajectory {
  GeneratedSample sample;    // prompt and response ids, behaviour log-probs, stopped_at_eos
  int64_t prompt_row = 0;    // the prompt's index in the prompt dataset (labels)
  // Weight syncs the generating engine had received (0 = the initial
  // actor); a partial rollout's is its oldest token's (sample.versions has
  // every token's).
  int64_t policy_version = 0;
  // Per response token, 1 where the policy produced it (in the loss); empty:
  // all of them.
  std::vector<uint8_t> loss_mask;
  // false: out of every loss and statistic (dropped by on_rollout, or a
  // dynamic-sampling filler group).
  bool kept = true;
  double model_reward = 0;  // the reward model's score (0 without one)
  double hook_reward = 0;   // the reward hook's (0 without one)
  EpisodeRecord episode;    // the environment's reward and how the episode ended
  // Per response token, added to the token rewards; empty: none.
  std::vector<float> token_rewards;

  const std::vector<float>& behaviour_log_probs() const { return sample.log_probs; }
  int64_t response_length() const { return static_cast<int64_t>(sample.response.size()); }
};

// A step's trajectories and their packed form on the training device.
struct TrajectoryBatch {
  std::vector<Trajectory> trajectories;
  SequenceBatch packed;  // pack() of the trajectories

  int64_t size() const { return static_cast<int64_t>(trajectories.size()); }
  // Packs the trajectories' samples (after a rewrite, again).
  void pack(int64_t pad_id, const torch::Device& device);
  // [N] float on the CPU: 1 for kept trajectories.
  torch::Tensor kept() const;
  // [N] float on the CPU.
  torch::Tensor model_rewards() const;
  torch::Tensor hook_rewards() const;
  torch::Tensor env_rewards() const;
  // model + hook + env rewards: the scalar reward each trajectory earned.
  torch::Tensor total_rewards() const;
  // [N, R] float on the packed device: the response tokens in the loss
  // (packed response mask × each loss_mask × kept).
  torch::Tensor loss_mask() const;
  // [N, R] float on the packed device, zeros where no trajectory has any.
  torch::Tensor token_rewards() const;
  bool has_token_rewards() const;
  // [N, R] float on the packed device: the engines' log-probs of the
  // response tokens (0 where unknown), and [N] float: 1 for the
  // trajectories whose engine log-probs are known (not rewritten).
  torch::Tensor behaviour_log_probs() const;
  torch::Tensor behaviour_known() const;
};

}  // namespace meshrun
