// The Rollouts stage: this rank's rollout engines, the prompt sampler, the
// on_rollout hook and dynamic sampling; it produces a step's trajectories
// (identical on every rank) and takes the actor's new weights after each
// update, counting them as the policy version its trajectories carry.
// Rewards are not its business: dynamic sampling asks the caller to score
// each round (Scoring::score_rewards). Internal to src/rl.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "meshrun/data/prompts.hpp"
#include "meshrun/data/sampler.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/hooks/env.hpp"
#include "meshrun/metrics/metrics.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/rl/trajectory.hpp"
#include "meshrun/train/storage_sleep.hpp"
#include "rl_internal.hpp"

namespace meshrun::ppo_detail {

class RoleSlots;

// What dynamic sampling did in one step.
struct SamplingStats {
  int rounds = 1;
  int64_t dropped_groups = 0;  // prompt groups whose rewards were all equal
  int64_t kept_groups = 0;     // informative groups trained on
};

// Whole prompt groups picked from the rounds of a step (DAPO's dynamic
// sampling): informative groups (kept trajectories with different total
// rewards) are trained on; the others are kept aside to fill the step's
// places, marked not kept. Pure, so the stage's rule is tested alone.
class GroupPicker {
 public:
  GroupPicker(int64_t group_size, int64_t wanted) : group_size_(group_size), wanted_(wanted) {}
  // Sorts the groups of a scored round.
  void add_round(const TrajectoryBatch& round);
  bool full() const { return static_cast<int64_t>(picked_.size()) >= wanted_ * group_size_; }
  // wanted groups: the informative ones first, then fillers.
  std::vector<Trajectory> take();
  const SamplingStats& stats() const { return stats_; }

 private:
  int64_t group_size_, wanted_;
  std::vector<Trajectory> picked_, spare_;
  SamplingStats stats_{0, 0, 0};
};

// What a round's trajectories are scored with before dynamic sampling
// judges them: fills model_reward and hook_reward.
using ScoreRound = std::function<void(TrajectoryBatch& round)>;

// What this rank's engines did over a step's rounds (counted on each
// engine's tp rank 0, so a sum over the world counts every engine once):
// the rollout metrics' slot occupancy and shared prefixes.
struct EngineTotals {
  int64_t decode_steps = 0;
  int64_t busy_slot_steps = 0;
  int64_t slot_steps = 0;  // Σ decode steps × the engine's slots
  int64_t prefix_shared_tokens = 0;
  int64_t kv_peak_blocks = 0;  // the most KV blocks one engine held at once
  int64_t preemptions = 0;
  int64_t env_calls = 0;       // multi-turn episodes: reset and step calls
  double env_seconds = 0;      // and the seconds they took
};

// How the stages report to the run: the phase entered (for [colocate]
// sleep) and the time spent in each.
struct StepTrace {
  PhaseTimers& phases;
  std::function<void(StepPhase)> enter;
  int64_t generated_tokens = 0;
  // Asynchronous rollouts: the seconds the engines spent generating the
  // step's first round during the previous step's update.
  double generated_ahead_seconds = 0;
};

// Asynchronous rollouts ([rollout] max_staleness ≥ 1): a step's first
// round, generated while the previous step trained and already exchanged.
struct Prefetched {
  std::vector<int64_t> prompt_rows;
  TrajectoryBatch round;
  EngineTotals totals;    // what the engines did for it
  int64_t generated_tokens = 0;
  double seconds = 0;     // the engines' generation time (the slowest rank's)
};

// The staleness bound: a trajectory whose policy version is more than
// max_staleness updates behind `trainer_version` is not trained (kept
// false). Returns how many were dropped; fills the figures.
struct StalenessStats {
  double mean = 0;
  int64_t max = 0;
  int64_t dropped = 0;
  int64_t partial = 0;  // trajectories whose tokens came from more than one version
};
StalenessStats enforce_staleness(TrajectoryBatch& batch, int64_t trainer_version, int64_t max_staleness);

// Partial rollouts ([rollout] partial): the update's weights, arriving
// while this rank's engines generate the next round. `arrived` is a flag
// collective every rank of the world starts, the engines' ranks before
// they generate and the others when their update is done, so it completes
// as the last update ends; load() waits for it and copies the weights in
// (`copy`, a world collective every rank then joins), once.
class MidRoundWeights {
 public:
  MidRoundWeights(torch::Tensor flag, PendingCollective arrived, std::function<void()> copy, int64_t next_version)
      : flag_(std::move(flag)), arrived_(std::move(arrived)), copy_(std::move(copy)), next_version_(next_version) {}
  bool arrived() const { return loaded_ || arrived_.ready(); }
  void load();
  bool loaded() const { return loaded_; }
  // The policy version the engines hold.
  int64_t version() const { return loaded_ ? next_version_ : next_version_ - 1; }

 private:
  torch::Tensor flag_;  // the collective's buffer, alive until it is waited for
  PendingCollective arrived_;
  std::function<void()> copy_;
  int64_t next_version_;
  bool loaded_ = false;
};

class Rollouts {
 public:
  // The shared, read-only resources: the prompts, the tokenizer, the
  // hooks' view and the on_rollout function's name (empty: none), the
  // token ids that end a response.
  struct Resources {
    const PromptDataset* prompts = nullptr;
    const Tokenizer* tokenizer = nullptr;
    HookResources hooks;
    std::string on_rollout;
    std::vector<int64_t> stop_ids;
    // The [env] script of multi-turn episodes; null: single-turn.
    EnvScript* env = nullptr;
    // The prompt sampler over the whole run (prompt_sampler).
    std::unique_ptr<DistributedSampler> sampler;
  };

  // The run's prompt sampler over `prompts`; throws too_few_items's
  // ConfigError when the file holds fewer prompts than a step takes.
  static std::unique_ptr<DistributedSampler> prompt_sampler(const Plan& plan, const PromptDataset& prompts);

  Rollouts(const Plan& plan, Group& world, torch::Device device, Resources resources);

  // The steps the prompt sampler gives (before the max_steps cap).
  int64_t sampler_steps() const;
  // This rank's engines, each holding the actor's initial weights.
  void build_engines(Runtime& runtime);

  // The step's trajectories: one round, or with dynamic sampling as many
  // as it takes; nullopt once the prompts are exhausted. `first`: the
  // first round, generated ahead (asynchronous rollouts).
  std::optional<TrajectoryBatch> collect(int64_t step, const ScoreRound& score, StepTrace& trace,
                                         SamplingStats& stats, std::optional<Prefetched> first = std::nullopt);

  // One round: each engine generates its slice of the prompts' groups; the
  // exchange gives every rank every trajectory, which then packs them.
  TrajectoryBatch generate(const std::vector<int64_t>& prompt_rows, int64_t step, int round,
                           int64_t& generated_tokens);

  // The two halves of generate(), for asynchronous rollouts: the next
  // step's prompts (every rank draws them; nullopt once exhausted), this
  // rank's engines generating their slices (no collective; an
  // environment's error is thrown to the caller, who agrees on it with the
  // world), and the exchange that makes the trajectories of the version
  // the engines held. With `weights` (partial rollouts) the engines load
  // them the moment they arrive and their samples record each token's
  // version.
  std::optional<std::vector<int64_t>> next_prompts();
  std::vector<ProducedSlice> produce(const std::vector<int64_t>& prompt_rows, int64_t step, int round,
                                     EngineTotals& totals, MidRoundWeights* weights = nullptr);
  TrajectoryBatch exchange(const std::vector<ProducedSlice>& produced, const std::vector<int64_t>& prompt_rows,
                           int64_t version, int64_t& generated_tokens);
  // on_rollout on rank 0; its rewrites and drops reach every rank.
  void apply_on_rollout(TrajectoryBatch& batch, int64_t step);

  // The actor's weights (its engines' full weights where this rank holds
  // it) into the engines, which then generate as policy `version`.
  void sync_weights(RoleSlots& roles, const DeviceMesh& actor_mesh, int64_t version);
  int64_t policy_version() const { return policy_version_; }
  // This rank's engines over the last collect()'s rounds.
  const EngineTotals& engine_totals() const { return engine_totals_; }

  SamplerState sampler_state() const;
  void restore_sampler(const SamplerState& state);
  std::vector<StorageSleep*> sleepers();

 private:
  // Routing replay's shape of the exchanged routes (none when off).
  RouteShape route_shape() const;
  SamplingOptions sampling_options(int64_t step, int round, int64_t first_sample) const;
  ParameterShapes parameter_list(RoleSlots& roles);

  struct Engine {
    int index = 0;
    Group* group = nullptr;
    std::unique_ptr<Generator> generator;
    std::unique_ptr<StorageSleep> sleeper;
  };

  const Plan& plan_;
  Group& world_;
  torch::Device device_;
  Resources resources_;
  EngineTotals engine_totals_;
  std::unique_ptr<DistributedSampler> sampler_;
  std::vector<Engine> engines_;
  int64_t policy_version_ = 0;
  ParameterShapes parameter_list_;
};

}  // namespace meshrun::ppo_detail
