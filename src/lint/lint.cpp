#include "meshrun/lint/lint.hpp"

namespace meshrun {

LintReport lint_recipe(const std::string& path, const std::vector<Override>& overrides,
                       const LintOptions& options) {
  LintReport report;
  report.recipe = load_recipe(path, overrides, report.diagnostics);
  if (!report.recipe) return report;
  const Recipe& recipe = *report.recipe;
  validate_recipe(recipe, report.diagnostics);    // recipe/'s pure rules
  run_rule_checks(lint_rules(), recipe, report.diagnostics);  // the probes: files, tokenizer, hooks, data lines
  // The planner trusts the rules above (mesh shapes, colocation); planning an
  // invalid recipe would only repeat its errors in other words.
  if (report.diagnostics.has_errors()) return report;
  ClusterShape cluster = options.cluster ? *options.cluster : ClusterShape::from_recipe(recipe, options.visible_memory_gb);
  report.plan = make_plan(recipe, cluster, report.diagnostics);
  return report;
}

}  // namespace meshrun
