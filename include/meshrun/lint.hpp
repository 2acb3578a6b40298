// Lint: everything meshrun can check about a recipe before a process starts.
//
// lint_recipe() loads the recipe (schema), applies the cross-field rules,
// loads the hook script in its sandbox to check the named functions, and
// builds the plan for the recipe's cluster (or the one given), whose
// placement and memory problems become diagnostics too. `meshrun lint`,
// `meshrun plan` and `meshrun run` all start here, so they cannot disagree.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshrun/diagnostics.hpp"
#include "meshrun/plan.hpp"
#include "meshrun/recipe.hpp"

namespace meshrun {

struct LintOptions {
  std::optional<ClusterShape> cluster;  // default: ClusterShape::from_recipe
  // The memory of the GPU this process sees, for a cuda recipe that states
  // no launch.memory_gb. Only `meshrun plan` and `meshrun lint` pass it:
  // runs keep the recipe's figure so every rank computes the same plan
  // whatever device it sees.
  double visible_memory_gb = 0;
};

struct LintReport {
  std::optional<Recipe> recipe;  // absent when the schema rejected the file
  std::optional<Plan> plan;      // absent when a rule failed before planning
  Diagnostics diagnostics;
  bool ok() const { return !diagnostics.has_errors(); }
};

LintReport lint_recipe(const std::string& path, const std::vector<Override>& overrides,
                       const LintOptions& options = {});

// The hooks part of lint: the script loads in its sandbox, every explicitly
// named function exists, and PPO without a reward model has a reward hook.
void check_hooks(const Recipe& recipe, Diagnostics& diagnostics);

}  // namespace meshrun
