// PpoRun: one rank's part of a PPO-family job (include/meshrun/rl/ppo.hpp)
// as a run-shell algorithm (meshrun/train/run_shell.hpp). It owns the step's
// stages and shared resources and runs them in order:
//   Rollouts → Scoring → Experience → Updates → weights to the engines
// passing TrajectoryBatch, Scores and Experience between them; its own
// state is what checkpoints hold beyond the engines: the prompt sampler's
// position, the policy version, the adaptive KL coefficient and the reward
// normaliser's moments. It reads only the plan and the recipe's [data]
// and [hooks] sections. Internal to src/rl.
#pragma once

#include <memory>
#include <optional>

#include "experience.hpp"
#include "meshrun/data/prompts.hpp"
#include "meshrun/hooks/hooks.hpp"
#include "meshrun/metrics/metrics.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/rl/ppo.hpp"
#include "roles.hpp"
#include "meshrun/hooks/env.hpp"
#include "rollouts.hpp"
#include "scoring.hpp"
#include "meshrun/train/run_shell.hpp"
#include "updates.hpp"

namespace meshrun::ppo_detail {

using train_detail::CheckpointContent;
using train_detail::ResumePoint;
using train_detail::RunAlgorithm;
using train_detail::StepOutcome;

// The numeric metrics of a record (booleans as 0/1), for on_step.
std::vector<std::pair<std::string, double>> numbers_of(const MetricsRecord& record);

class PpoRun final : public RunAlgorithm {
 public:
  PpoRun(const Plan& plan, Runtime& runtime, torch::Device device)
      : plan_(plan), runtime_(runtime), world_(runtime.world()), device_(device) {}

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
  // With [colocate] sleep, the roles and engines idle in `phase` (by their
  // rows) move their memory to the CPU (first, so the peak stays low) and
  // the working ones come back.
  void enter(StepPhase phase);
  // The actor's weights into the engines as policy `version`.
  void sync_engines(int64_t version);
  // Asynchronous rollouts: `train` on the trained roles' ranks while the
  // engines' ranks generate the next step's first round into prefetched_.
  void train_while_generating(int64_t step, const std::function<void()>& train);

  // The step's metrics (after the on_step hook's additions) and console line.
  StepOutcome step_outcome(int64_t step, const TrajectoryBatch& batch, const Experience& experience,
                           const Parity& parity, const SamplingStats& sampling, const TrainSums& sums,
                           int64_t generated, double rollout_seconds, const PhaseTimers& phases);

  const Plan& plan_;
  Runtime& runtime_;
  Group& world_;
  torch::Device device_;
  bool reported_sleep_ = false;  // the first colocate-sleep release is logged at info
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string tokenizer_source_;
  PromptDataset prompts_;
  std::unique_ptr<HookScript> hooks_;
  std::unique_ptr<EnvScript> env_;  // [env]: multi-turn episodes' environment
  RoleSlots roles_;
  std::unique_ptr<Rollouts> rollouts_;
  std::unique_ptr<Scoring> scoring_;
  std::unique_ptr<Updates> updates_;
  KlController kl_controller_{0, 0, 1};
  // Asynchronous rollouts: the next step's first round, generated during
  // this step's update (also in checkpoints), and this step's figures.
  std::optional<Prefetched> prefetched_;
  struct AsyncFigures {
    StalenessStats staleness;
    double trainer_wait_s = 0, engine_wait_s = 0, generate_ahead_s = 0;
  } async_;
  RunningMoments moments_;
};

}  // namespace meshrun::ppo_detail
