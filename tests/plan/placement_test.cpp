// Placement of roles and rollout engines on slots.
#include <doctest/doctest.h>

#include "plan_fixtures.hpp"

using namespace meshrun;
using namespace plan_test;

namespace {

using Owners = std::vector<std::string>;

Plan plan_for(const Recipe& recipe, Diagnostics& diagnostics) {
  return make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
}

}  // namespace

TEST_CASE("SFT on 1x2 places only the actor") {
  Recipe recipe = sft_recipe("builtin:tiny", 2);
  recipe.roles.push_back(role("critic", "builtin:tiny", 1, 2));  // ignored by SFT
  Diagnostics diagnostics;
  Plan plan = plan_for(recipe, diagnostics);
  CHECK(diagnostics.empty());
  REQUIRE(plan.slots.size() == 2);
  CHECK(plan.slots[1].rank == 1);
  CHECK(plan.slots[1].node == 0);
  CHECK(plan.slots[1].local == 1);
  CHECK(plan.slots[0].owners == Owners{"actor"});
  CHECK(plan.slots[1].owners == Owners{"actor"});
  REQUIRE(plan.roles.size() == 1);
  CHECK(plan.roles[0].ranks == std::vector<int>{0, 1});
  CHECK(plan.engines.empty());
}

TEST_CASE("PPO on 4x8: one node per role, two tp4 engines colocated with the actor") {
  Recipe recipe = small_ppo_recipe(4, 8, 1);
  recipe.colocate.groups = {{Role::actor, Role::rollout}};
  recipe.rollout.engines = 2;
  recipe.rollout.tensor_parallel = 4;
  Diagnostics diagnostics;
  Plan plan = plan_for(recipe, diagnostics);
  CHECK(diagnostics.empty());

  // kRoleNames order: actor, critic, reward, ref.
  CHECK(plan.role(Role::actor)->ranks == iota_ranks(0, 8));
  CHECK(plan.role(Role::critic)->ranks == iota_ranks(8, 8));
  CHECK(plan.role(Role::reward)->ranks == iota_ranks(16, 8));
  CHECK(plan.role(Role::ref)->ranks == iota_ranks(24, 8));
  REQUIRE(plan.engines.size() == 2);
  CHECK(plan.engines[0].ranks == iota_ranks(0, 4));
  CHECK(plan.engines[1].ranks == iota_ranks(4, 4));
  CHECK(plan.slots[3].owners == Owners{"actor", "engine 0"});
  CHECK(plan.slots[4].owners == Owners{"actor", "engine 1"});
  CHECK(plan.slots[31].owners == Owners{"ref"});
}

TEST_CASE("colocate.all on 2x8 with four tp4 engines") {
  Recipe recipe = small_ppo_recipe(2, 8, 2);
  recipe.colocate.all = true;
  recipe.rollout.engines = 4;
  recipe.rollout.tensor_parallel = 4;
  Diagnostics diagnostics;
  Plan plan = plan_for(recipe, diagnostics);
  CHECK(diagnostics.empty());
  for (Role role : {Role::actor, Role::critic, Role::reward, Role::ref}) CHECK(plan.role(role)->ranks == iota_ranks(0, 16));
  REQUIRE(plan.engines.size() == 4);
  for (int e = 0; e < 4; ++e) CHECK(plan.engines[e].ranks == iota_ranks(4 * e, 4));
  CHECK(plan.slots[0].owners == Owners{"actor", "critic", "reward", "ref", "engine 0"});
  CHECK(plan.slots[15].owners == Owners{"actor", "critic", "reward", "ref", "engine 3"});
}

TEST_CASE("a reward hook takes no slots") {
  Recipe recipe = small_ppo_recipe(1, 8, 1);
  recipe.colocate.all = true;
  role_of(recipe, "reward").model.clear();
  role_of(recipe, "reward").hook = "score";
  recipe.rollout.engines = 2;
  recipe.rollout.tensor_parallel = 4;
  Diagnostics diagnostics;
  Plan plan = plan_for(recipe, diagnostics);
  CHECK(diagnostics.empty());
  CHECK(plan.role(Role::reward) == nullptr);
  CHECK(plan.slots[0].owners == Owners{"actor", "critic", "ref", "engine 0"});
}

TEST_CASE("a group is placed by its first role and standalone engines take the first node with room") {
  // The ref/actor group comes first (actor), then the critic; reward is a hook.
  Recipe recipe = small_ppo_recipe(2, 8, 1);
  for (auto& r : recipe.roles) r.procs_per_node = 4;
  role_of(recipe, "reward").model.clear();
  role_of(recipe, "reward").hook = "score";
  recipe.colocate.groups = {{Role::ref, Role::actor}};
  recipe.rollout.engines = 2;
  recipe.rollout.tensor_parallel = 4;
  Diagnostics diagnostics;
  Plan plan = plan_for(recipe, diagnostics);
  CHECK(diagnostics.empty());
  CHECK(plan.role(Role::actor)->ranks == iota_ranks(0, 4));
  CHECK(plan.role(Role::ref)->ranks == iota_ranks(0, 4));
  CHECK(plan.role(Role::critic)->ranks == iota_ranks(4, 4));
  REQUIRE(plan.engines.size() == 2);
  CHECK(plan.engines[0].ranks == iota_ranks(8, 4));
  CHECK(plan.engines[1].ranks == iota_ranks(12, 4));
  CHECK(plan.slots[0].owners == Owners{"actor", "ref"});  // kRoleNames order within the group
}

TEST_CASE("\"rollout\" alone in a group places the engines standalone; a second mention is ignored") {
  Recipe recipe = small_ppo_recipe(2, 8, 1);
  recipe.roles.resize(1);  // the actor alone
  recipe.rollout.engines = 2;
  recipe.rollout.tensor_parallel = 4;
  Diagnostics diagnostics;

  recipe.colocate.groups = {{Role::rollout}};
  Plan standalone = plan_for(recipe, diagnostics);
  CHECK(standalone.engines[0].ranks == iota_ranks(8, 4));

  recipe.colocate.groups = {{Role::actor, Role::rollout}, {Role::rollout}};
  Plan colocated = plan_for(recipe, diagnostics);
  REQUIRE(colocated.engines.size() == 2);
  CHECK(colocated.engines[1].ranks == iota_ranks(4, 4));
  CHECK(diagnostics.empty());
}

TEST_CASE("placement failures name the unit, what it needed and what was free") {
  Diagnostics diagnostics;
  SUBCASE("roles that do not fit side by side") {
    Recipe recipe = small_ppo_recipe(1, 8, 1);
    recipe.colocate.groups = {{Role::actor, Role::rollout}};
    recipe.rollout.engines = 8;
    Plan plan = plan_for(recipe, diagnostics);
    const Diagnostic* d = find_rule(diagnostics, "plan.placement");
    REQUIRE(d);
    CHECK(d->severity == Severity::error);
    CHECK(d->where == recipe.where("roles.critic.nodes"));
    CHECK(d->message.find("cannot place critic") != std::string::npos);
    CHECK(d->message.find("1 node(s) with 8 free slots") != std::string::npos);
    CHECK(d->message.find("free slots per node: 0") != std::string::npos);
    CHECK(plan.role(Role::critic)->ranks.empty());
    CHECK(plan.role(Role::actor)->ranks == iota_ranks(0, 8));
  }
  SUBCASE("a role larger than the cluster given with --cluster") {
    Recipe recipe = sft_recipe("builtin:tiny", 8);
    recipe.roles[0].nodes = 2;
    std::string error;
    Plan plan = make_plan(recipe, *ClusterShape::parse("1x8", error), diagnostics);
    const Diagnostic* d = find_rule(diagnostics, "plan.placement");
    REQUIRE(d);
    CHECK(d->where == recipe.where("roles.actor.nodes"));
    CHECK(d->message.find("needs 2 nodes but the cluster has 1") != std::string::npos);
  }
  SUBCASE("procs_per_node larger than the cluster's") {
    Recipe recipe = sft_recipe("builtin:tiny", 8);
    std::string error;
    plan_for(recipe, diagnostics);
    CHECK(diagnostics.empty());
    make_plan(recipe, *ClusterShape::parse("4x4", error), diagnostics);
    const Diagnostic* d = find_rule(diagnostics, "plan.placement");
    REQUIRE(d);
    CHECK(d->where == recipe.where("roles.actor.procs_per_node"));
  }
  SUBCASE("standalone engines that find no node") {
    Recipe recipe = small_ppo_recipe(2, 8, 1);
    recipe.colocate.groups = {{Role::actor, Role::critic, Role::reward, Role::ref}};
    recipe.rollout.engines = 3;
    recipe.rollout.tensor_parallel = 4;
    Plan plan = plan_for(recipe, diagnostics);
    const Diagnostic* d = find_rule(diagnostics, "plan.placement");
    REQUIRE(d);
    CHECK(d->where == recipe.where("rollout.engines"));
    CHECK(d->message.find("cannot place engine 2 of 3") != std::string::npos);
    CHECK(plan.engines.size() == 2);
  }
  SUBCASE("colocated engines whose count does not match the group") {
    Recipe recipe = small_ppo_recipe(1, 8, 1);
    recipe.colocate.all = true;
    recipe.rollout.engines = 3;
    recipe.rollout.tensor_parallel = 2;
    Plan plan = plan_for(recipe, diagnostics);
    const Diagnostic* d = find_rule(diagnostics, "plan.placement");
    REQUIRE(d);
    CHECK(d->where == recipe.where("rollout.engines"));
    CHECK(d->message.find("need 6 slots") != std::string::npos);
    CHECK(plan.engines.empty());
  }
  SUBCASE("colocated roles of different shapes") {
    Recipe recipe = small_ppo_recipe(2, 8, 1);
    recipe.colocate.groups = {{Role::actor, Role::ref}, {Role::critic, Role::reward}};
    role_of(recipe, "ref").nodes = 2;
    recipe.rollout.engines = 2;
    recipe.rollout.tensor_parallel = 4;
    Plan plan = plan_for(recipe, diagnostics);
    const Diagnostic* d = find_rule(diagnostics, "plan.placement");
    REQUIRE(d);
    CHECK(d->where == recipe.where("colocate.groups"));
    CHECK(plan.role(Role::ref)->ranks.empty());
  }
}

TEST_CASE("1024 nodes × 8: every slot has an owner and ranks are node-major") {
  Recipe recipe = small_ppo_recipe(1024, 8, 256);
  recipe.colocate.groups = {{Role::actor, Role::rollout}};
  recipe.rollout.engines = 1024;
  recipe.rollout.tensor_parallel = 2;
  Diagnostics diagnostics;
  Plan plan = plan_for(recipe, diagnostics);
  CHECK(diagnostics.empty());
  CHECK(plan.role(Role::ref)->ranks.front() == 768 * 8);
  CHECK(plan.engines[1023].ranks == std::vector<int>{2046, 2047});
  for (const auto& slot : plan.slots) {
    REQUIRE(!slot.owners.empty());
    REQUIRE(slot.rank == slot.node * 8 + slot.local);
  }
}
