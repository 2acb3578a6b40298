// Internal to the PPO trainer (src/rl/*.cpp): the step's rollout as
// every rank holds it, the scores of the roles, and the world exchanges
// that move them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "meshrun/dist/dist.hpp"
#include "meshrun/rollout/generation.hpp"
#include "meshrun/hooks/hooks.hpp"
#include "meshrun/data/prompts.hpp"
#include "meshrun/rl/math.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "meshrun/train/train_engine.hpp"

namespace meshrun::ppo_detail {

// The whole step's samples, identical on every rank after the exchange.
struct Rollout {
  std::vector<GeneratedSample> samples;  // prompt i's n samples are consecutive
  SequenceBatch batch;                   // on the training device
  torch::Tensor keep;                    // [N] float, 0 for samples on_rollout dropped
  std::vector<int64_t> prompt_rows;      // [N] each sample's prompt: its index in the dataset
};

// Rows [begin, end) of `count` split as evenly as possible over `parts`.
struct RowRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
RowRange slice_of(int64_t count, int parts, int part);

// Gives every rank every engine's samples: each engine's first rank
// contributes `local` (its slice, sample rows [begin, begin + local.size())),
// everyone else nothing; widths are bounded by the recipe's max lengths.
std::vector<GeneratedSample> share_samples(const std::vector<std::pair<int64_t, std::vector<GeneratedSample>>>& local,
                                           int64_t total, int64_t max_prompt, int64_t max_response, Group& world);

// Sums a float tensor over the world in place (producers fill their rows,
// the others leave zeros).
void share_sum(torch::Tensor& tensor, Group& world);

// (name, full shape) of every parameter of a model, in an order every rank
// knows.
using ParameterShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// The actor's new weights into this rank's engine models. `full`: the
// actor's full weights on its ranks (empty elsewhere). When every engine
// rank holds the actor (colocated), each engine takes its shards from its
// own copy; otherwise every tensor of `shapes` is broadcast over `world`
// from global rank `source` (every rank of the world must call this).
void send_weights_to_engines(NamedTensors full, const ParameterShapes& shapes, bool engines_hold_actor, int source,
                             const std::vector<LlamaModel*>& engines, Group& world);

// Runs `call` on rank 0 and tells every rank whether it failed: on failure
// every rank throws std::runtime_error with rank 0's message.
void on_rank0_or_fail_everywhere(Group& world, const std::string& hook_point, const std::function<void()>& call);

// Runs `call` on every rank and tells every rank whether any failed: then
// every rank throws std::runtime_error with the first failing rank's message.
void on_every_rank_or_fail_everywhere(Group& world, const std::string& hook_point, const std::function<void()>& call);

}  // namespace meshrun::ppo_detail

namespace meshrun::ppo_detail {

// What dynamic sampling did in one step.
struct SamplingStats {
  int rounds = 1;
  int64_t dropped_groups = 0;  // prompt groups whose rewards were all equal
  int64_t kept_groups = 0;     // informative groups trained on
};

// The two sources of scalar reward, per sample [N] on the CPU.
struct SampleRewards {
  torch::Tensor model;  // the reward model (zeros without one)
  torch::Tensor hook;   // the reward hook (zeros without one)
};

// What the roles computed for every sample of the step.
struct Scores {
  torch::Tensor old_log_probs;  // [N, R] actor, at rollout time
  torch::Tensor ref_log_probs;  // [N, R] (zeros without a ref role)
  torch::Tensor values;         // [N, R] critic (zeros without one)
  torch::Tensor model_rewards;  // [N] reward model (zeros without one)
  torch::Tensor hook_rewards;   // [N] reward hook (zeros without one)
};

// The training targets of one step, identical on every rank.
struct Experience {
  torch::Tensor response_mask;  // [N, R] float, dropped samples all 0
  torch::Tensor advantages;     // [N, R]
  torch::Tensor returns;        // [N, R]
  torch::Tensor rewards;        // [N] scalar rewards as scored (before normalisation)
  double kl = 0;                // mean per token, of the recipe's estimator
  double kl_sum_per_sample = 0; // mean over kept samples of the summed KL
  double model_reward_mean = 0; // the reward model's part, over kept samples
  double hook_reward_mean = 0;  // the reward hook's part, over kept samples
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
};


Experience make_experience(const Rollout& rollout, const Scores& scores, const ExperienceOptions& options,
                           RunningMoments* reward_moments);

// Rollout/trainer agreement: |engine − actor| log-prob of each sampled token
// under the same weights, before the update, over the kept samples whose
// tokens are the engine's own (an on_rollout rewrite clears a sample's
// engine log-probs).
struct Parity {
  double max = 0, mean = 0;
  int64_t tokens = 0;
};
Parity logprob_parity(const Rollout& rollout, const torch::Tensor& actor_log_probs);

// The hook points, called on rank 0 with the step's tensors as views.
struct HookContext {
  HookScript* script = nullptr;
  const Tokenizer* tokenizer = nullptr;
  int64_t step = 0;
  int64_t n_samples_per_prompt = 1;
  // Labels: each sample's prompt row in `prompts` (batch:label(i)); either
  // null: no labels.
  const PromptDataset* prompts = nullptr;
  const std::vector<int64_t>* prompt_rows = nullptr;
  // The samples the hook sees: rows [begin, end) of the step's ([hooks]
  // parallel gives each rank its share); sample i of the batch is row begin + i.
  RowRange rows;
};
// on_rollout: may rewrite response tokens and drop samples; returns whether
// anything changed (then `rollout.samples` and `keep` hold the new state).
void call_on_rollout(const HookContext& context, const std::string& function, std::vector<GeneratedSample>& samples,
                     std::vector<uint8_t>& keep);
// reward over context.rows of the step's samples; one value per row.
std::vector<double> call_reward(const HookContext& context, const std::string& function,
                                const std::vector<GeneratedSample>& samples, const torch::Tensor& model_rewards);

}  // namespace meshrun::ppo_detail
