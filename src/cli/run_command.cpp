// `meshrun run RECIPE` (and `meshrun RECIPE`): checks and plans the recipe,
// then runs it. The distributed runtime and trainers are not built yet, so a
// valid recipe ends after planning, saying so.
#include <cstdio>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "meshrun/lint.hpp"

namespace meshrun::cli {

int run_command(const std::string& recipe_path, const CommonOptions& common) {
  LintReport report;
  if (!lint_for_command(recipe_path, common, "nothing was started", report)) return kFailed;
  std::fputs(format_plan_text(*report.plan).c_str(), stdout);
  spdlog::info("{} is valid and planned for {} processes.", recipe_path, report.plan->cluster.world_size());
  spdlog::warn("this build of meshrun does not train yet (the distributed runtime and the {} trainer are "
               "still to come); nothing was started.",
               report.recipe->algorithm);
  return kOk;
}

}  // namespace meshrun::cli
