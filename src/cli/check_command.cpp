// `meshrun check RECIPE`: the job's distributed self-check. Every process
// meets the others, builds the world group and every mesh-axis and engine
// group of the plan, and checks all_reduce, all_gather and broadcast on each
// against the values its rank list implies; rank 0 prints the report.
#include <cstdio>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "job.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/lint/lint.hpp"

namespace meshrun::cli {

int check_command(const std::string& recipe_path, const CommonOptions& common) {
  LintReport report;
  if (!lint_for_command(recipe_path, common, "nothing was started", report)) return kFailed;
  return run_as_job(report, worker_arguments("check", recipe_path, common.sets), [&](const LaunchInfo& launch) {
    try {
      SelfCheckReport check = self_check(*report.recipe, *report.plan, launch, ProcessEnvironment());
      if (launch.rank == 0) std::fputs(format_self_check_report(check).c_str(), stdout);
      std::fflush(stdout);
      return static_cast<int>(kOk);
    } catch (const DistError& error) {
      spdlog::error("rank {}: {}", launch.rank, error.what());
      return static_cast<int>(kFailed);
    }
  });
}

}  // namespace meshrun::cli
