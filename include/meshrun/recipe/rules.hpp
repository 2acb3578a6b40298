// Rules as rows: every rule id a diagnostic can name is one RuleRow, saying
// what it checks, the recipe keys it reads and the check that reports it.
// docs/recipes.md lists the rows (each key's "checks" column, and the rules
// at the end), tests walk them, and lint runs their checks in table order.
//
// The rows live in two tables of this type, split by what a check may touch:
//   - recipe_rules() (src/recipe/rules.cpp): the loader's schema rules (for
//     every key; reported while loading) and the pure rules, which read the
//     loaded Recipe and nothing else: no filesystem, tokenizer, model or
//     hook script. validate_recipe() runs them.
//   - lint_rules() (include/meshrun/lint/lint.hpp, src/lint/lint_rules.cpp):
//     the probes of what a recipe names on this machine (its dataset,
//     tokenizer, output folders, hook script, data lines), which
//     lint_recipe() runs after the pure rules, and the rules the planner and
//     the run report on their own course.
// rule_catalog() (lint.hpp) is both, recipe_rules() first.
//
// A check reports its row's id. Where reporting rule after rule would
// reorder the diagnostics at one location (the role rules, role by role;
// the mesh rules, role by role; colocation, name by name and unit by unit;
// the batch rules), one check reports the ids of several rows: those rows
// name the same check, stand together, and it runs once. validate_recipe()
// runs the pure rows pass by pass (RulePass: the order their diagnostics
// take where they share a location), in table order within a pass; the
// table itself is in the order docs/recipes.md lists the rules.
#pragma once

#include <string>
#include <vector>

#include "meshrun/recipe/diagnostics.hpp"

namespace meshrun {

struct Recipe;

// Who reports a rule.
enum class RuleStage {
  schema,  // the loader, for every key (load_recipe)
  recipe,  // a pure rule over the loaded Recipe (validate_recipe)
  probe,   // lint, looking at what the recipe names on this machine
  plan,    // the planner (make_plan): models, placement, memory
  run,     // the run, when it meets the data
};

// When a pure rule runs: pass by pass, in this order.
enum class RulePass { none, launch, roles, colocation, fit, mesh, batch, rollout, data, hooks, settings, pairs, lora };

using RuleCheck = void (*)(const Recipe& recipe, Diagnostics& diagnostics);

struct RuleRow {
  std::string id;       // "mesh.product": group.rule
  std::string summary;  // what it checks, one sentence
  std::vector<std::string> keys;  // dotted key paths it reads ("*" for the role name)
  RuleStage stage = RuleStage::recipe;
  RulePass pass = RulePass::none;  // pure rules; lint's probes run in table order
  // Reports the rule (recipe and probe rows); null where the stage reports
  // it on its own course (schema, plan and run rows).
  RuleCheck check = nullptr;
};

// recipe/'s rows: the schema's, then the pure rules.
const std::vector<RuleRow>& recipe_rules();

// Calls the checks of `rows` pass by pass, in table order within a pass, a
// check shared by adjacent rows once.
void run_rule_checks(const std::vector<RuleRow>& rows, const Recipe& recipe, Diagnostics& diagnostics);

}  // namespace meshrun
