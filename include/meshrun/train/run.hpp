// What a finished training run reports, whatever its algorithm: the run
// shell (meshrun/train/run_shell.hpp) fills it for SFT, PPO and every later
// algorithm, so the CLI prints one line for all of them.
#pragma once

#include <cstdint>
#include <string>

namespace meshrun {

struct RunSummary {
  std::string algorithm;  // "sft", "ppo"
  std::string headline;   // the metric followed from first to last step: "loss", "reward_mean"
  std::int64_t steps = 0;  // the last step done (counting a resumed run's earlier steps)
  std::int64_t planned_steps = 0;  // the steps the run set out to take
  double first = 0;  // the headline metric of step 1
  double last = 0;   // ... of the last step
  bool data_exhausted = false;  // the data ran out before planned_steps
  std::string output_dir;   // where the final model was written
  std::string metrics_path; // rank 0's metrics.jsonl
};

}  // namespace meshrun
