// The role table (include/meshrun/recipe/roles.hpp): every Role has its row
// at its index, every recipe role name maps to a row and back, and the
// phases each row works in are the ones [colocate] sleep relies on.
#include <doctest/doctest.h>

#include <set>

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/recipe/roles.hpp"

using namespace meshrun;

TEST_CASE("every role has one row, at its index, found by its name") {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kRoles.size(); ++i) {
    const RoleRow& row = kRoles[i];
    CAPTURE(row.name);
    CHECK(static_cast<size_t>(row.role) == i);
    CHECK(&row_of(row.role) == &row);
    CHECK(role_named(row.name) == row.role);
    CHECK(names.insert(row.name).second);
    CHECK(row.summary.size() > 10);
    CHECK(row.phases != 0);  // every role works in some phase
  }
  CHECK(kRoles.size() == static_cast<size_t>(Role::rollout) + 1);
  CHECK_FALSE(role_named("policy").has_value());
  // The recipe's role sections are rows.
  for (std::string_view name : kRoleNames) CHECK(role_named(name).has_value());
}

TEST_CASE("rows say what each role is and when it works") {
  CHECK(row_of(Role::actor).trained);
  CHECK(row_of(Role::critic).trained);
  CHECK_FALSE(row_of(Role::ref).trained);
  CHECK_FALSE(row_of(Role::reward).trained);
  CHECK(row_of(Role::critic).head == RoleHead::value);
  CHECK(row_of(Role::reward).output == RoleOutput::sample_score);
  // Only the engines generate; every model role scores.
  for (const RoleRow& row : kRoles) {
    CAPTURE(row.name);
    CHECK(row.works_in(StepPhase::rollout) == (row.role == Role::rollout));
    CHECK(row.works_in(StepPhase::scoring) == (row.role != Role::rollout));
    CHECK(row.works_in(StepPhase::training) == row.trained);
  }
  // The sync phase moves the actor's weights into the engines.
  CHECK(row_of(Role::actor).works_in(StepPhase::sync));
  CHECK(row_of(Role::rollout).works_in(StepPhase::sync));
  CHECK_FALSE(row_of(Role::ref).works_in(StepPhase::sync));
  CHECK(step_phase_name(StepPhase::training) == "training");
}

TEST_CASE("kRoleNames is every row but the engines', in placement order") {
  REQUIRE(kRoleNames.size() + 1 == kRoles.size());
  size_t next = 0;
  for (const RoleRow& row : kRoles)
    if (row.role != Role::rollout) CHECK(kRoleNames[next++] == row.name);
}

TEST_CASE("every role row is reachable from a recipe: [roles.NAME] loads as its row, found by its Role") {
  for (const AlgorithmRow& algorithm : kAlgorithms) {
    CAPTURE(algorithm.name);
    std::string text = "algorithm = \"" + std::string(algorithm.name) + "\"\n";
    for (std::string_view name : kRoleNames) text += "[roles." + std::string(name) + "]\nmodel = \"builtin:tiny\"\n";
    Diagnostics diagnostics;
    const auto recipe = load_recipe_text(text, "roles.toml", {}, diagnostics);
    REQUIRE_MESSAGE(recipe, diagnostics.format());
    REQUIRE(recipe->roles.size() == kRoleNames.size());
    for (const RoleConfig& role : recipe->roles) {
      CAPTURE(role.name);
      CHECK(role_name(role.id()) == role.name);
      CHECK(recipe->role(role.id()) == &role);
      CHECK(recipe->has_role(role.id()));
    }
    CHECK_FALSE(recipe->has_role(Role::rollout));  // the engines are [rollout], not a role section
  }
  RoleConfig stray;
  stray.name = "policy";
  CHECK_THROWS_AS(stray.id(), std::logic_error);
}
