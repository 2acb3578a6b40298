#!/usr/bin/env bash
# runners_read_plans_test.sh SOURCE_DIR: the runners read only resolved
# values (issue #35). The algorithm runners (src/rl, src/sft,
# src/preference and their public headers) take the Plan that make_plan()
# resolved from the recipe: none includes meshrun/recipe/recipe.hpp, names
# the raw `Recipe` or its `RoleConfig`, so a rule of the recipe is applied
# once, in the plan, and `meshrun plan` shows what the runtime uses.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../integration/lib/common.sh
source "$here/../integration/lib/common.sh"
SOURCE=$(cd "${1:?usage: runners_read_plans_test.sh SOURCE_DIR}" && pwd)
RUNNERS=(src/rl src/sft src/preference include/meshrun/rl include/meshrun/sft include/meshrun/preference)

mr_init runners_read_plans

# raw_recipe_uses ROOT: "path:line: text" of each include of the recipe
# header and each use of the Recipe or RoleConfig types under ROOT's runner
# folders, leaving out // comments.
raw_recipe_uses() {
  local root=$1 folder hits=""
  for folder in "${RUNNERS[@]}"; do
    [[ -d $root/$folder ]] || continue
    hits+=$(cd "$root" && grep -rnE --include='*.cpp' --include='*.hpp' --include='*.h' \
      '#include[[:space:]]*"meshrun/recipe/recipe\.hpp"|\b(Recipe|RoleConfig)\b' "$folder") || true
    hits+=$'\n'
  done
  awk 'NF {
    text = $0
    sub(/^[^:]*:[^:]*:/, "", text)
    code = text
    sub(/\/\/.*/, "", code)
    if (code ~ /#include[ \t]*"meshrun\/recipe\/recipe\.hpp"/ || code ~ /(^|[^A-Za-z0-9_])(Recipe|RoleConfig)([^A-Za-z0-9_]|$)/) print
  }' <<<"$hits"
}

case_source_tree() {
  local uses
  uses=$(raw_recipe_uses "$SOURCE")
  [[ -z $uses ]] || fail "$(printf '\n%s' "$uses" "runners take the Plan (include/meshrun/plan/plan.hpp): resolve the value there")"
}

# The check itself: a tree whose runner includes the recipe header, takes a
# Recipe and mentions RoleConfig in a comment only.
case_check_finds_raw_recipe() {
  local root=$MR_TMP/fake out
  mkdir -p "$root/src/sft" "$root/src/data"
  printf '%s\n' '#include "meshrun/recipe/recipe.hpp"' 'int run(const Recipe& recipe);' \
    '// a RoleConfig in a comment is fine' 'int RecipeBook = 1;' >"$root/src/sft/runner.cpp"
  printf '%s\n' 'int load(const Recipe& recipe);' >"$root/src/data/loader.cpp"
  out=$(raw_recipe_uses "$root")
  assert_contains "$out" "src/sft/runner.cpp:1:" "the report"
  assert_contains "$out" "src/sft/runner.cpp:2:" "the report"
  assert_not_contains "$out" "src/sft/runner.cpp:3:" "the report"
  assert_not_contains "$out" "src/sft/runner.cpp:4:" "the report"
  assert_not_contains "$out" "src/data/" "the report (only runners are checked)"
}

run_case "the runners (src/rl, src/sft, src/preference) read the Plan, never the raw Recipe" case_source_tree
run_case "the check names an include of the recipe header and a Recipe parameter, not comments or other names" \
  case_check_finds_raw_recipe
mr_finish
