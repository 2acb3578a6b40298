// `meshrun run RECIPE` (and `meshrun RECIPE`): checks and plans the recipe,
// then runs it. The distributed runtime and trainers are not built yet, so a
// valid recipe ends after planning, saying so.
#include <cstdio>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "meshrun/lint.hpp"

namespace meshrun::cli {

int run_command(const std::string& recipe_path, const CommonOptions& common) {
  LintReport report = lint_recipe(recipe_path, common.overrides());
  std::fputs(report.diagnostics.format().c_str(), stderr);
  if (!report.ok() || !report.plan) {
    spdlog::error("{} is not valid: {} error(s); nothing was started", recipe_path,
                  report.diagnostics.error_count());
    return kFailed;
  }
  std::fputs(format_plan_text(*report.plan).c_str(), stdout);
  spdlog::info("{} is valid and planned for {} processes.", recipe_path, report.plan->cluster.world_size());
  spdlog::warn("this build of meshrun does not train yet (the distributed runtime and the {} trainer are "
               "still to come); nothing was started.",
               report.recipe->algorithm);
  return kOk;
}

}  // namespace meshrun::cli
