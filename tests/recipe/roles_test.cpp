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
    for (size_t i = 0; i < recipe->roles.size(); ++i) {
      const RoleConfig& role = recipe->roles[i];
      CAPTURE(role.name());
      CHECK(role.name() == kRoleNames[i]);  // the loader resolved [roles.NAME] to its row
      CHECK(role_named(role.name()) == role.role);
      CHECK(recipe->role(role.role) == &role);
      CHECK(recipe->has_role(role.role));
    }
    CHECK_FALSE(recipe->has_role(Role::rollout));  // the engines are [rollout], not a role section
  }
}

TEST_CASE("the role table: every Role is a row reachable by its name, and the name round-trips") {
  for (const Role role : {Role::actor, Role::critic, Role::reward, Role::ref, Role::rollout}) {
    const RoleRow& row = row_of(role);
    CAPTURE(row.name);
    CHECK(row.role == role);
    REQUIRE(role_named(role_name(role)).has_value());
    CHECK(*role_named(role_name(role)) == role);
    CHECK(role_name(*role_named(row.name)) == row.name);
    // Names are exact: no case folding, no prefixes.
    CHECK_FALSE(role_named(std::string(row.name) + "s").has_value());
    CHECK_FALSE(role_named(row.name.substr(0, row.name.size() - 1)).has_value());
  }
  CHECK_FALSE(role_named("").has_value());
  CHECK_FALSE(role_named("Actor").has_value());
}

TEST_CASE("the algorithm table: each algorithm's required and used roles are role rows") {
  for (const AlgorithmRow& algorithm : kAlgorithms) {
    CAPTURE(algorithm.name);
    CHECK(algorithm_requires(algorithm, Role::actor));  // every algorithm trains an actor
    CHECK(algorithm_requires(algorithm, Role::rollout) == algorithm.rollout_engines);
    std::string text = "algorithm = \"" + std::string(algorithm.name) + "\"\n";
    std::set<Role> sections;
    for (const RoleRow& row : kRoles) {
      CAPTURE(row.name);
      if (algorithm_requires(algorithm, row.role)) CHECK(algorithm_uses(algorithm, row.role));
      if (!algorithm_uses(algorithm, row.role)) continue;
      // A used role is a row, reachable by its name ...
      CHECK(&row_of(row.role) == &row);
      CHECK(role_named(row.name) == row.role);
      // ... and, but for the engines ([rollout]), a [roles.NAME] section.
      if (row.role == Role::rollout) continue;
      text += "[roles." + std::string(row.name) + "]\nmodel = \"builtin:tiny\"\n";
      sections.insert(row.role);
    }
    CHECK(sections.count(Role::actor) == 1);
    Diagnostics diagnostics;
    const auto recipe = load_recipe_text(text, "roles.toml", {}, diagnostics);
    REQUIRE_MESSAGE(recipe, diagnostics.format());
    CHECK(recipe->roles.size() == sections.size());
    for (const Role role : sections) CHECK(recipe->has_role(role));
    // The rules find no role of the recipe unused by the algorithm.
    validate_recipe(*recipe, diagnostics);
    for (const Diagnostic& d : diagnostics.items()) CHECK_MESSAGE(d.rule != "roles.unused", d.message);
  }
  // The uses are what the rows say: SFT and RM the actor alone, DPO its
  // reference too, PPO every row.
  CHECK_FALSE(algorithm_uses(row_of(Algorithm::sft), Role::ref));
  CHECK(algorithm_uses(row_of(Algorithm::dpo), Role::ref));
  CHECK_FALSE(algorithm_uses(row_of(Algorithm::dpo), Role::critic));
  CHECK_FALSE(algorithm_uses(row_of(Algorithm::rm), Role::reward));
  for (const RoleRow& row : kRoles) CHECK(algorithm_uses(row_of(Algorithm::ppo), row.role));
}
