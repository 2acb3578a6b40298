// The run shell: the lifecycle every algorithm shares. An algorithm (SFT,
// PPO, and later ones) supplies setup, one step, and its state; the shell
// owns everything around the steps, the same way for each:
//   setup → log_dir/resolved.toml (the resolved recipe; one from another
//   recipe is kept as resolved-<fingerprint>.toml) → resume (the newest
//   checkpoint by the plan's resume policy, warning with the keys that
//   differ when the checkpoint was written under another recipe; the
//   algorithm restores its state, metrics.jsonl is cut back to the
//   checkpoint's step) → steps (metrics rows, stamped with `time` in Unix
//   seconds and with [logging] tensorboard also TensorBoard scalars, and the
//   progress line (metrics/console.hpp: drawn in place on a terminal, a
//   timestamped line elsewhere) at the logging cadence and at the last step;
//   the evaluation set scored at its cadence and after the last step (that
//   step's row is then written whatever the logging cadence);
//   a checkpoint at the save cadence
//   and after the last step; an async save committed by the first poll
//   after every rank wrote it) → finish pending saves → the final model.
//
// Invariants: a checkpoint of step k is saved after step k's metrics row is
// written, so a checkpoint implies its metrics; when the data runs out
// before the planned steps, the last step done is still logged and
// checkpointed (resume then finds nothing left and ends at once); every
// call into the algorithm that talks to other ranks (setup, restore, step,
// checkpoint, write_output) is made on every rank in the same order.
// Internal to src/train.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <stdexcept>
#include <string_view>

#include <nlohmann/json.hpp>

#include "meshrun/metrics/metrics.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/train/run.hpp"
#include "meshrun/train/training_checkpoint.hpp"

namespace meshrun::train_detail {

// What one step reports.
struct StepOutcome {
  MetricsRecord record{0};  // every metric of the step; the shell writes it at the logging cadence
  double headline = 0;      // the value of the algorithm's headline metric
  std::string console;      // the step's metrics for the console line ("loss 1.2345 lr 1e-05 ...")
  // When set, what reads the step's figures back from the device (a sync)
  // and adds them to record, headline and console. The shell calls it, on
  // every rank alike, only for a step it logs, evaluates or checkpoints, the
  // first and the last: the steps between wait for nothing. It may throw
  // (NonFiniteGradientsError seen late).
  std::function<void(StepOutcome&)> finish;
};

// What a checkpoint of the algorithm holds: this rank's file, the
// trainer's JSON (the shell adds its own keys under "run"), and files
// added to the checkpoint directory (the HF export). write_extra may run in
// a background thread: it must own what it uses.
struct CheckpointContent {
  RankState state;
  nlohmann::json trainer = nlohmann::json::object();
  std::function<void(const std::string& directory)> write_extra;
};

class RunAlgorithm {
 public:
  virtual ~RunAlgorithm() = default;
  // The metric the summary follows ("loss", "reward_mean").
  virtual std::string_view headline() const = 0;
  // Collective. Builds roles, data and hooks; returns the number of steps
  // the data gives (the shell caps it by max_steps).
  virtual int64_t setup() = 0;
  // After setup: the layout the rank files depend on ("world 2; actor dp 2 ...").
  virtual std::string layout() const = 0;
  // Collective. Once, before the first step, when a checkpoint was found.
  virtual void restore(const ResumePoint& point) = 0;
  // Collective. Step `step` (1-based) of `total`; nullopt when the data ran
  // out before it could start.
  virtual std::optional<StepOutcome> step(int64_t step, int64_t total) = 0;
  // Collective. Scores the evaluation set ([data] eval_path) with the
  // current weights into `record` (eval_* metrics). Called after a step at
  // the evaluation cadence and after the last; only algorithms whose row
  // says they evaluate are asked.
  virtual void evaluate(MetricsRecord& record) {
    (void)record;
    throw std::logic_error("this algorithm does not evaluate");
  }
  // Collective. The state after `step`.
  virtual CheckpointContent checkpoint(int64_t step) = 0;
  // Collective. The final model into `directory`.
  virtual void write_output(const std::string& directory) = 0;
};

// The steps a run plans: what its data gives, capped by train.max_steps.
// Algorithms size their schedules with it; the shell caps setup()'s answer
// with it again, so an algorithm that does not is still bounded.
inline int64_t capped_steps(int64_t data_steps, const RunPlan& run) {
  return run.max_steps > 0 ? std::min(data_steps, run.max_steps) : data_steps;
}

// Runs `algorithm` under `run`'s policy on every rank of `world`. `clock`
// times the console's elapsed time and ETA.
RunSummary run_shell(RunAlgorithm& algorithm, const RunPlan& run, Group& world,
                     const Clock& clock = steady_clock());

// "1m05s", "2h03m", "7s": a duration for the console.
std::string duration_text(double seconds);

}  // namespace meshrun::train_detail
