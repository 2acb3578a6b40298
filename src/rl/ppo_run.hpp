// PpoRun: one rank's part of a PPO job (include/meshrun/rl/ppo.hpp), its
// methods split by phase over src/train/ppo_{trainer,rollout_phase,
// scoring,training,checkpointing,metrics}.cpp. Internal to src/train.
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <spdlog/spdlog.h>

#include "meshrun/model/hf_model.hpp"
#include "meshrun/hooks/hook_batch.hpp"
#include "meshrun/dist/mesh.hpp"
#include "meshrun/metrics/metrics.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/rl/ppo.hpp"
#include "meshrun/data/prompts.hpp"
#include "meshrun/data/sampler.hpp"
#include "meshrun/train/storage_sleep.hpp"
#include "meshrun/train/train_engine.hpp"
#include "rl_internal.hpp"
#include "src/train/run_shell.hpp"
#include "src/train/train_threads.hpp"
#include "src/train/trainer_output.hpp"
#include "src/train/training_checkpoint.hpp"

namespace meshrun::ppo_detail {

using train_detail::CheckpointContent;
using train_detail::ResumePoint;
using train_detail::RunAlgorithm;
using train_detail::StepOutcome;

using train_detail::device_for;
// The numeric metrics of a record (booleans as 0/1), for on_step.
std::vector<std::pair<std::string, double>> numbers_of(const MetricsRecord& record);

// A role's model on this rank: trained (engine) or frozen (model only).
struct RoleSlot {
  const RolePlan* config = nullptr;  // resolved by the plan
  DeviceMesh* mesh = nullptr;
  Group* dp = nullptr;
  Group* tp = nullptr;
  Group* sp = nullptr;  // null: sp 1; otherwise the model computes its share of every row's columns
  std::optional<LlamaModel> model;
  std::unique_ptr<TrainEngine> engine;
  StorageSleep sleeper;  // [colocate] sleep
  // This rank writes the role's results for its dp slice (first tp and sp rank).
  bool produces() const { return mesh->coordinate(MeshAxis::tp) == 0 && mesh->coordinate(MeshAxis::sp) == 0; }
  RowRange rows(int64_t count) const { return slice_of(count, dp->size(), dp->rank()); }
};

struct RolloutEngine {
  int index = 0;
  Group* group = nullptr;
  std::unique_ptr<Generator> generator;
  std::unique_ptr<StorageSleep> sleeper;
};

// Who works in each phase; with [colocate] sleep everyone else sleeps.
enum class Phase { rollout, scoring, training, sync };

inline const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::rollout: return "rollout";
    case Phase::scoring: return "scoring";
    case Phase::training: return "training";
    case Phase::sync: return "sync";
  }
  return "?";
}

// PPO as a run-shell algorithm (src/train/run_shell.hpp): its state is the
// trained roles' engines, the random state, the prompt sampler's position,
// the adaptive KL coefficient and the reward normalizer's moments.
class PpoRun final : public RunAlgorithm {
 public:
  PpoRun(const Recipe& recipe, const Plan& plan, Runtime& runtime)
      : recipe_(recipe),
        plan_(plan),
        runtime_(runtime),
        world_(runtime.world()),
        device_(device_for(recipe)) {}

  std::string_view headline() const override { return "reward_mean"; }
  int64_t setup() override;
  // What the rank files of a checkpoint depend on: every trained role's
  // mesh and ZeRO stage.
  std::string layout() const override;
  // Restores the trained roles and the loop's state; the engines then get
  // the restored actor's weights.
  void restore(const ResumePoint& point) override;
  std::optional<StepOutcome> step(int64_t step, int64_t total) override;
  CheckpointContent checkpoint(int64_t step) override;
  void write_output(const std::string& directory) override;

 private:
  struct TrainSums {
    double policy_loss = 0;  // Σ of each actor optimizer step's aggregated policy loss
    double kl_loss = 0;      // the same for the KL term (kl_mode "loss")
    double actor_steps = 0;  // actor optimizer steps (counted on one rank)
    double clip = 0, entropy = 0, tokens_policy = 0, value_loss = 0, tokens_value = 0;
    long long tokens = 0;  // processed in training, this rank's actor share (for throughput)
  };

  void setup_role(const std::string& name);

  void setup_engines();

  // With [colocate] sleep, the roles and engines idle in `phase` move their
  // memory to the CPU (first, so the peak stays low) and the working ones
  // come back.
  void enter(Phase phase);

  // Engine `engine`'s sampling in round `round` of `step` (dynamic sampling
  // draws more rounds).
  SamplingOptions sampling_options(int64_t step, int round, int engine) const;

  // Engine e generates the samples of its slice of the step's prompts; the
  // exchange gives every rank all of them.
  Rollout generate(const std::vector<int64_t>& prompt_indices, int64_t step, int round, int64_t& generated);

  // One round of a step: generate, on_rollout, rewards.
  struct Round {
    Rollout rollout;
    SampleRewards rewards;
  };
  Round sample_round(const std::vector<int64_t>& prompts, int64_t step, int round, PhaseTimers& phases,
                     int64_t& generated);

  // The step's samples and their rewards: one round, or with
  // [ppo] dynamic_sampling as many as it takes (loop.cpp).
  struct Collected {
    Rollout rollout;
    SampleRewards rewards;
    SamplingStats stats;
  };
  Collected collect(int64_t step, std::vector<int64_t> prompts, PhaseTimers& phases, int64_t& generated);

  void apply_on_rollout(Rollout& rollout, int64_t step);

  // The hook points' view of the step: `rows` of the rollout's samples.
  HookContext hook_context(int64_t step, const Rollout& rollout, RowRange rows) const;

  // The log-probs [rows, R] of the sampled response tokens (the token at
  // prompt_len + t is predicted at prompt_len + t - 1) from `logits`, the
  // slot's model's output for `rows`: this rank's vocab shard and, with
  // sp, its columns (then the whole rows' log-probs are gathered, so every
  // sp rank holds them).
  torch::Tensor response_log_probs(const torch::Tensor& logits, const SequenceBatch& batch, const torch::Tensor& rows,
                                   const RoleSlot& slot) const;
  // The entropy [rows, R] of the predictions of the response tokens, the
  // same way.
  torch::Tensor response_entropy(const torch::Tensor& logits, const SequenceBatch& batch, const RoleSlot& slot) const;
  // The response columns [rows, R] of a per-position output [rows, columns]
  // of the slot's model (values, or per-position terms of all its columns).
  torch::Tensor response_columns(const torch::Tensor& out, const SequenceBatch& batch, const RoleSlot& slot) const;

  ModelInputs inputs_for(const SequenceBatch& batch, const torch::Tensor& rows) const;

  // The roles `wanted` accepts score their dp slices; see scoring.cpp.
  torch::Tensor run_roles(const Rollout& rollout, const std::function<bool(const std::string&)>& wanted);

  // The reward model's and the reward hook's scores of every sample.
  SampleRewards score_rewards(const Rollout& rollout, int64_t step);

  // Actor and ref log-probs and critic values of every sample, with `rewards`.
  Scores score(const Rollout& rollout, const SampleRewards& rewards);

  ExperienceOptions experience_options() const;

  // max_epochs passes; each takes batch.train samples per optimizer step in
  // an order shuffled from (seed, step, epoch), the same on every rank.
  TrainSums train(const Rollout& rollout, const Scores& scores, const Experience& experience, int64_t step);

  // `weights`: the rows' aggregation weights (loss_weights() of the
  // optimizer step's batch).
  void train_actor_micro(RoleSlot& slot, const SequenceBatch& batch, const Scores& scores, const Experience& experience,
                         const torch::Tensor& rows, const torch::Tensor& weights, bool last, TrainSums& sums);

  void train_critic_micro(RoleSlot& slot, const SequenceBatch& batch, const Scores& scores, const Experience& experience,
                          const torch::Tensor& rows, double tokens, bool last, TrainSums& sums);

  // The actor's new weights into every engine: gathered on the actor ranks;
  // an engine whose ranks all hold the actor copies its shards locally,
  // others receive them by broadcast from the actor's first rank.
  void sync_engines();

  // (name, full shape) of every actor parameter, from the plan's model
  // config, in a fixed order known to every rank.
  ParameterShapes parameter_list();

  ModelConfig actor_config();

  // The step's metrics (after the on_step hook's additions) and console line.
  StepOutcome step_outcome(int64_t step, const Rollout& rollout, const Experience& experience, const Parity& parity,
                           const SamplingStats& sampling, TrainSums sums, int64_t generated, double rollout_seconds,
                           const PhaseTimers& phases);

  const Recipe& recipe_;
  const Plan& plan_;
  Runtime& runtime_;
  Group& world_;
  torch::Device device_;
  bool reported_sleep_ = false;  // the first colocate-sleep release is logged at info
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int64_t> stop_ids_;  // generation_stop_ids() of the actor's model
  std::string tokenizer_source_;
  PromptDataset prompts_;
  std::unique_ptr<DistributedSampler> sampler_;
  int64_t total_steps_ = 0;
  std::unique_ptr<HookScript> hooks_;
  std::string reward_function_;
  std::map<std::string, RoleSlot> roles_;
  std::vector<RolloutEngine> engines_;
  KlController kl_controller_{0, 0, 1};
  RunningMoments moments_;
  ParameterShapes parameter_list_;
};

}  // namespace meshrun::ppo_detail
