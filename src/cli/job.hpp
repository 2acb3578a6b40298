// Running a recipe as a job: either this process is one worker of a job that
// a launcher started (torchrun, SLURM, MPI, or meshrun's local launcher),
// or, with no launcher around and a local (or auto) recipe for more than one
// process, it becomes the local launcher and starts the workers itself,
// running the same subcommand.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "meshrun/launch/env.hpp"
#include "meshrun/lint/lint.hpp"

namespace meshrun::cli {

// `worker_args`: the arguments a spawned worker runs with (after the
// executable), e.g. {"check", "recipe.toml", "--set", "a.b=1"}. `work` runs
// in every worker and returns its exit code.
int run_as_job(const LintReport& report, const std::vector<std::string>& worker_args,
               const std::function<int(const LaunchInfo&)>& work);

// A worker's failure as the local launcher's [launch] max_restarts reads it:
// a failure whose kind a restart would repeat (the recipe, the data, a hook
// script, the model's files or numbers: an exact resume replays them) is
// recorded under the folder MESHRUN_FAILURE_RECORD names, and the launcher
// then does not restart the job. Does nothing outside the local launcher and
// meshrun's Ray job (whose entrypoint reads them the same way).
void record_worker_failure(const LaunchInfo& launch, const std::exception& error);

// Whether the launcher that started `launch` restarts its workers itself
// ([launch] max_restarts): meshrun's local launcher and its Ray job. Under
// the others the job ends and is resumed by running it again.
bool launcher_restarts_workers(const LaunchInfo& launch);

// The arguments that repeat a subcommand for a recipe with its overrides,
// plus the log level, so that spawned workers do what their parent was asked.
std::vector<std::string> worker_arguments(const std::string& subcommand, const std::string& recipe,
                                          const std::vector<std::string>& sets);

}  // namespace meshrun::cli
