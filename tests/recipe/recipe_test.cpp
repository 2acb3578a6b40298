// Tests of src/recipe/recipe.cpp: role lookup and key locations of a Recipe.
#include <doctest/doctest.h>

#include <tuple>

#include "diagnostic_matchers.hpp"

namespace meshrun {
namespace {

Recipe sample() {
  Recipe recipe;
  recipe.file = "r.toml";
  for (auto [name, nodes, procs_per_node] : {std::tuple{"actor", 2, 4}, std::tuple{"ref", 1, 3}}) {
    RoleConfig& role = recipe.roles.emplace_back();
    role.role = role_named(name).value();
    role.model = "m";
    role.nodes = nodes;
    role.procs_per_node = procs_per_node;
  }
  recipe.locations["launch"] = {"r.toml", 3, 2};
  recipe.locations["launch.nodes"] = {"r.toml", 4, 1};
  recipe.locations["roles"] = {"r.toml", 7, 2};
  recipe.locations["roles.actor"] = {"r.toml", 7, 8};
  recipe.locations["roles.actor.model"] = {"base.toml", 2, 1};
  return recipe;
}

TEST_CASE("role and has_role find roles by their row") {
  const Recipe recipe = sample();
  REQUIRE(recipe.role(Role::ref));
  CHECK(recipe.role(Role::ref)->name() == "ref");
  CHECK(recipe.role(Role::ref) == &recipe.roles[1]);
  CHECK(recipe.has_role(Role::actor));
  CHECK_FALSE(recipe.has_role(Role::critic));
  CHECK(recipe.role(Role::critic) == nullptr);
  CHECK(recipe.role(Role::rollout) == nullptr);  // the engines are [rollout], never a role section
}

TEST_CASE("RoleConfig::processes is nodes × procs_per_node") {
  const Recipe recipe = sample();
  CHECK(recipe.role(Role::actor)->processes() == 8);
  CHECK(recipe.role(Role::ref)->processes() == 3);
  CHECK(RoleConfig{}.processes() == 0);  // not resolved yet
}

TEST_CASE("where: the key, else the nearest enclosing table, else the file") {
  const Recipe recipe = sample();
  CHECK(recipe.where("launch.nodes") == SourceLocation{"r.toml", 4, 1});
  CHECK(recipe.where("roles.actor.model") == SourceLocation{"base.toml", 2, 1});
  CHECK(recipe.where("launch.procs_per_node") == SourceLocation{"r.toml", 3, 2});
  CHECK(recipe.where("roles.actor.mesh.tp") == SourceLocation{"r.toml", 7, 8});
  CHECK(recipe.where("roles.critic.model") == SourceLocation{"r.toml", 7, 2});
  CHECK(recipe.where("batch.train") == SourceLocation{"r.toml", 0, 0});
  CHECK(recipe.where("") == SourceLocation{"r.toml", 0, 0});
}

TEST_CASE("is_set: keys and tables that were written, not defaults") {
  const Recipe recipe = sample();
  CHECK(recipe.is_set("launch.nodes"));
  CHECK(recipe.is_set("launch"));
  CHECK_FALSE(recipe.is_set("launch.procs_per_node"));
  CHECK_FALSE(recipe.is_set("launch.node"));  // no prefix matching
  CHECK_FALSE(recipe.is_set("batch"));
}

}  // namespace
}  // namespace meshrun
