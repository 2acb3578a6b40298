// Tests of src/recipe/colocation.cpp: which roles take processes and how they
// group into placement units.
#include <doctest/doctest.h>

#include "diagnostic_matchers.hpp"
#include "meshrun/recipe/colocation.hpp"

namespace meshrun {
namespace {

// A PPO recipe with all four roles: actor 1 × 4, critic 1 × 2, reward and ref
// 1 × 1; 2 engines of 2 processes; `extra` lines are appended.
Recipe ppo_recipe(const std::string& extra = "") {
  auto loaded = test::load_text(R"(algorithm = "ppo"
[launch]
procs_per_node = 8
[roles.actor]
model = "a"
procs_per_node = 4
[roles.critic]
model = "c"
procs_per_node = 2
[roles.reward]
model = "r"
procs_per_node = 1
[roles.ref]
model = "f"
procs_per_node = 1
[rollout]
engines = 2
tensor_parallel = 2
)" + extra);
  INFO(loaded.diagnostics.format());
  REQUIRE(loaded.recipe);
  return *loaded.recipe;
}

std::vector<std::string> describe_all(const Recipe& recipe) {
  std::vector<std::string> out;
  for (const auto& unit : placement_units(recipe)) out.push_back(unit.describe(recipe));
  return out;
}

std::vector<std::string> names(const std::vector<const RoleConfig*>& roles) {
  std::vector<std::string> out;
  for (const RoleConfig* role : roles) out.push_back(role->name());
  return out;
}

TEST_CASE("PPO without colocation: each role alone, then the engines") {
  const Recipe recipe = ppo_recipe();
  auto units = placement_units(recipe);
  REQUIRE(units.size() == 5);
  CHECK(describe_all(recipe) == std::vector<std::string>{"actor", "critic", "reward", "ref", "engines 2×2"});
  CHECK(units[0].processes(recipe) == 4);
  CHECK(units[1].processes(recipe) == 2);
  CHECK(units[2].processes(recipe) == 1);
  CHECK(units[4].processes(recipe) == 4);  // 2 engines × 2
  CHECK_FALSE(units[0].with_engines);
  CHECK(units[4].roles.empty());
  CHECK(units[4].with_engines);
  CHECK(units[0].nodes() == 1);
  CHECK(units[0].procs_per_node() == 4);
  CHECK(units[4].nodes() == 0);
  CHECK(units[4].procs_per_node() == 0);
}

TEST_CASE("colocate.all puts every placed role and the engines in one unit") {
  const Recipe recipe = ppo_recipe("[colocate]\nall = true\n");
  auto units = placement_units(recipe);
  REQUIRE(units.size() == 1);
  CHECK(names(units[0].roles) == std::vector<std::string>{"actor", "critic", "reward", "ref"});
  CHECK(units[0].with_engines);
  CHECK(units[0].describe(recipe) == "actor+critic+reward+ref+engines");
  CHECK(units[0].processes(recipe) == 4);  // the first role's

  SUBCASE("a reward hook takes no slot") {
    Recipe edited = ppo_recipe("[colocate]\nall = true\n");
    for (auto& role : edited.roles)
      if (role.role == Role::reward) {
        role.model.clear();
        role.hook = "score";
      }
    auto hook_units = placement_units(edited);
    REQUIRE(hook_units.size() == 1);
    CHECK(names(hook_units[0].roles) == std::vector<std::string>{"actor", "critic", "ref"});
  }
}

TEST_CASE("colocate.groups: a unit per group at its first member, roles alone elsewhere") {
  const Recipe recipe = ppo_recipe("[colocate]\ngroups = [[\"ref\", \"actor\"], [\"reward\", \"critic\"]]\n");
  auto units = placement_units(recipe);
  REQUIRE(units.size() == 3);
  // Members in role order, whatever the order in the group.
  CHECK(names(units[0].roles) == std::vector<std::string>{"actor", "ref"});
  CHECK(names(units[1].roles) == std::vector<std::string>{"critic", "reward"});
  CHECK(units[2].roles.empty());
  CHECK(describe_all(recipe) == std::vector<std::string>{"actor+ref", "critic+reward", "engines 2×2"});
  CHECK(units[0].processes(recipe) == 4);
  CHECK(units[1].processes(recipe) == 2);

  SUBCASE("a role in no group stays alone, in role order") {
    const Recipe partial = ppo_recipe("[colocate]\ngroups = [[\"critic\", \"ref\"]]\n");
    CHECK(describe_all(partial) == std::vector<std::string>{"actor", "critic+ref", "reward", "engines 2×2"});
  }
  SUBCASE("names that are not roles of the recipe are skipped") {
    Recipe missing = ppo_recipe("[colocate]\ngroups = [[\"actor\", \"ghost\"], [\"critic\"]]\n");
    CHECK(describe_all(missing) == std::vector<std::string>{"actor", "critic", "reward", "ref", "engines 2×2"});
  }
}

TEST_CASE("a group with rollout carries the engines, and no separate engine unit is made") {
  const Recipe recipe = ppo_recipe("[colocate]\ngroups = [[\"actor\", \"rollout\"], [\"critic\", \"ref\"]]\n");
  auto units = placement_units(recipe);
  REQUIRE(units.size() == 3);
  CHECK(describe_all(recipe) == std::vector<std::string>{"actor+engines", "critic+ref", "reward"});
  CHECK(units[0].with_engines);
  CHECK_FALSE(units[1].with_engines);
  CHECK(units[0].processes(recipe) == 4);
}

TEST_CASE("SFT places the actor only, with no engines") {
  auto loaded = test::load_text(R"(algorithm = "sft"
[launch]
procs_per_node = 4
[roles.actor]
model = "a"
[roles.critic]
model = "c"
[rollout]
engines = 3
[colocate]
all = true
)");
  REQUIRE(loaded.recipe);
  const Recipe& recipe = *loaded.recipe;
  CHECK_FALSE(uses_engines(recipe));
  CHECK(names(placed_roles(recipe)) == std::vector<std::string>{"actor"});
  CHECK(names(trained_roles(recipe)) == std::vector<std::string>{"actor"});
  auto units = placement_units(recipe);
  REQUIRE(units.size() == 1);
  CHECK(names(units[0].roles) == std::vector<std::string>{"actor"});
  CHECK_FALSE(units[0].with_engines);
  CHECK(units[0].describe(recipe) == "actor");

  SUBCASE("without colocation too") {
    Recipe plain = recipe;
    plain.colocate.all = false;
    CHECK(describe_all(plain) == std::vector<std::string>{"actor"});
  }
}

TEST_CASE("takes_processes, placed_roles and trained_roles") {
  Recipe recipe = ppo_recipe();
  CHECK(uses_engines(recipe));
  CHECK(engine_processes(recipe) == 4);
  CHECK(names(placed_roles(recipe)) == std::vector<std::string>{"actor", "critic", "reward", "ref"});
  CHECK(names(trained_roles(recipe)) == std::vector<std::string>{"actor", "critic"});
  for (auto& role : recipe.roles) {
    if (role.role != Role::reward) continue;
    CHECK(takes_processes(recipe, role));
    role.hook = "score";  // a model and a hook: the model still takes slots
    CHECK(takes_processes(recipe, role));
    role.model.clear();  // a hook alone takes none
    CHECK_FALSE(takes_processes(recipe, role));
  }
  CHECK(names(placed_roles(recipe)) == std::vector<std::string>{"actor", "critic", "ref"});
}

TEST_CASE("engines alone when no role is placed under colocate.all") {
  Recipe recipe = ppo_recipe("[colocate]\nall = true\n");
  recipe.roles.clear();
  auto units = placement_units(recipe);
  REQUIRE(units.size() == 1);
  CHECK(units[0].roles.empty());
  CHECK(units[0].with_engines);
  CHECK(units[0].describe(recipe) == "engines 2×2");
  CHECK(units[0].processes(recipe) == 4);
}

}  // namespace
}  // namespace meshrun
