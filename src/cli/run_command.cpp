// `meshrun run RECIPE` (and `meshrun RECIPE`): checks and plans the recipe,
// then runs it as a job (every worker meets the others, builds the plan's
// groups and trains with the recipe's algorithm: SFT or PPO).
#include <cstdio>
#include <exception>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "job.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/lint/lint.hpp"
#include "meshrun/preference/preference.hpp"
#include "meshrun/rl/ppo.hpp"
#include "meshrun/sft/sft.hpp"

namespace meshrun::cli {
namespace {

int train_on_this_rank(const LintReport& report, const LaunchInfo& launch) {
  std::unique_ptr<Runtime> runtime;
  try {
    runtime = Runtime::init(launch, dist_options_from(*report.recipe, launch, ProcessEnvironment()));
    runtime->build_groups(*report.plan);
    RunSummary summary;
    switch (report.recipe->algorithm) {
      case Algorithm::ppo: summary = run_ppo(*report.plan, *runtime); break;
      case Algorithm::sft: summary = run_sft(*report.plan, *runtime); break;
      case Algorithm::dpo: summary = run_dpo(*report.plan, *runtime); break;
      case Algorithm::rm: summary = run_rm(*report.plan, *runtime); break;
    }
    if (launch.rank == 0)
      spdlog::info("{} finished: {} steps{}, {} {:.4f} → {:.4f}; model in {}, metrics in {}", summary.algorithm,
                   summary.steps,
                   summary.data_exhausted ? fmt::format(" of {} (the data ran out)", summary.planned_steps) : "",
                   summary.headline, summary.first, summary.last, summary.output_dir, summary.metrics_path);
    runtime->shutdown("finished");
    return kOk;
  } catch (const std::exception& error) {
    spdlog::error("rank {}: {}", launch.rank, describe_failure(error, &*report.recipe));
    record_worker_failure(launch, error);
    // Under an outside launcher nothing restarts the job here: say how.
    if (launch.rank == 0 && !launcher_restarts_workers(launch) && report.recipe->checkpoint.load != "never")
      spdlog::error("to resume, run the job again unchanged: it continues from the newest complete checkpoint in {} "
                    "([checkpoint] load = \"{}\")",
                    report.recipe->checkpoint.path, report.recipe->checkpoint.load);
    if (runtime) runtime->shutdown(std::string("failed: ") + error.what());
    return kFailed;
  }
}

}  // namespace

int run_command(const std::string& recipe_path, const CommonOptions& common) {
  LintReport report;
  if (!lint_for_command(recipe_path, common, "nothing was started", report)) return kFailed;
  return run_as_job(report, worker_arguments("run", recipe_path, common.sets),
                    [&](const LaunchInfo& launch) { return train_on_this_rank(report, launch); });
}

}  // namespace meshrun::cli
