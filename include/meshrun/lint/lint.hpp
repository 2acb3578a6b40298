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

#include "meshrun/recipe/diagnostics.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/recipe/rules.hpp"

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

// The data part of lint: a local JSONL data file is read (streaming, at most
// its first max_bytes) with the checks the run's loader applies for the
// algorithm's data shape (JSON objects, the input/output/messages keys and
// their types, the label key); each bad line is an error "data.line" at
// FILE:LINE, the first kDefaultMaxDataErrors of them, then one with the
// count of the rest. A data path that is not a local file is left to run
// time (data.path's own rule reports a missing file).
inline constexpr long long kDataLintBytes = 256LL << 20;
void check_data_file(const Recipe& recipe, Diagnostics& diagnostics, long long max_bytes = kDataLintBytes);

// The paths part of lint: the dataset and evaluation files a path names
// exist (data.path), the tokenizer source loads (data.tokenizer), and the
// folders the run writes into can be folders and are writable
// (plan.output-folder). recipe/'s rules never touch the filesystem; these do.
void check_recipe_paths(const Recipe& recipe, Diagnostics& diagnostics);

// The hooks part of lint: the script loads in its sandbox, every explicitly
// named function exists, and PPO without a reward model has a reward hook.
void check_hooks(const Recipe& recipe, Diagnostics& diagnostics);
// The [env] script loads (same sandbox and limits as the run) and defines
// reset and step.
void check_env_script(const Recipe& recipe, Diagnostics& diagnostics);

// lint's rows of the rule table (recipe/rules.hpp): the probes above, which
// lint_recipe() runs in table order after recipe/'s pure rules, then the
// rules the planner and the run report.
const std::vector<RuleRow>& lint_rules();
// Every rule: recipe_rules(), then lint_rules(). docs/recipes.md lists them.
const std::vector<const RuleRow*>& rule_catalog();
// The catalog's row of `id`; null for an id no row has.
const RuleRow* find_rule(std::string_view id);

}  // namespace meshrun
