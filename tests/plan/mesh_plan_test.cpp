// Role meshes: coordinates (tp fastest, then sp, then dp) and the groups.
#include <doctest/doctest.h>

#include <stdexcept>

#include "plan_fixtures.hpp"

using namespace meshrun;
using namespace plan_test;

namespace {

Plan sft_plan(int procs, MeshConfig mesh, Diagnostics& diagnostics) {
  Recipe recipe = sft_recipe("builtin:tiny", procs);
  recipe.roles[0].mesh = mesh;
  return make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
}

}  // namespace

TEST_CASE("8 ranks as dp 2 × sp 2 × tp 2") {
  Diagnostics diagnostics;
  Plan plan = sft_plan(8, {2, 2, 2}, diagnostics);
  CHECK(diagnostics.empty());
  const MeshPlan& mesh = plan.role(Role::actor)->mesh;
  CHECK(mesh.dp == 2);
  CHECK(mesh.sp == 2);
  CHECK(mesh.tp == 2);
  CHECK(mesh.ranks == iota_ranks(0, 8));
  using G = std::vector<std::vector<int>>;
  CHECK(mesh.tp_groups == G{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(mesh.sp_groups == G{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(mesh.dp_groups == G{{0, 4}, {1, 5}, {2, 6}, {3, 7}});

  MeshPlan::Coordinate c = mesh.coordinate_of(5);
  CHECK(c.dp == 1);
  CHECK(c.sp == 0);
  CHECK(c.tp == 1);
  c = mesh.coordinate_of(6);
  CHECK(c.dp == 1);
  CHECK(c.sp == 1);
  CHECK(c.tp == 0);
  for (int rank = 0; rank < 8; ++rank) CHECK(mesh.rank_at(mesh.coordinate_of(rank)) == rank);
  CHECK(mesh.rank_at({0, 1, 1}) == 3);
  CHECK_THROWS_AS(mesh.coordinate_of(8), std::logic_error);
  CHECK_THROWS_AS(mesh.rank_at({2, 0, 0}), std::logic_error);
  CHECK_THROWS_AS(mesh.rank_at({0, 0, -1}), std::logic_error);
}

TEST_CASE("dp = -1 is inferred; pure tp and pure dp") {
  Diagnostics diagnostics;
  const MeshPlan tp2 = sft_plan(8, {2, 1, -1}, diagnostics).role(Role::actor)->mesh;
  CHECK(tp2.dp == 4);
  CHECK(tp2.tp_groups.size() == 4);
  CHECK(tp2.dp_groups == std::vector<std::vector<int>>{{0, 2, 4, 6}, {1, 3, 5, 7}});
  CHECK(tp2.sp_groups.size() == 8);

  const MeshPlan dp_only = sft_plan(4, {1, 1, -1}, diagnostics).role(Role::actor)->mesh;
  CHECK(dp_only.dp == 4);
  CHECK(dp_only.dp_groups == std::vector<std::vector<int>>{{0, 1, 2, 3}});
  CHECK(dp_only.tp_groups == std::vector<std::vector<int>>{{0}, {1}, {2}, {3}});
}

TEST_CASE("sp groups across a role on two nodes use global ranks") {
  Recipe recipe = small_ppo_recipe(2, 4, 1);
  recipe.roles.resize(2);  // actor and critic: the critic lands on node 1
  role_of(recipe, "critic").mesh = {1, 4, -1};
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const MeshPlan& mesh = plan.role(Role::critic)->mesh;
  CHECK(mesh.ranks == iota_ranks(4, 4));
  CHECK(mesh.sp_groups == std::vector<std::vector<int>>{{4, 5, 6, 7}});
  CHECK(mesh.coordinate_of(6).sp == 2);
  CHECK_THROWS_AS(mesh.coordinate_of(0), std::logic_error);
}

TEST_CASE("a mesh that does not match the process count is not formed") {
  Diagnostics diagnostics;
  SUBCASE("tp × sp does not divide") {
    Plan plan = sft_plan(6, {4, 1, -1}, diagnostics);
    CHECK(plan.role(Role::actor)->mesh.ranks.empty());
  }
  SUBCASE("explicit dp does not multiply out") {
    Plan plan = sft_plan(8, {2, 1, 3}, diagnostics);
    CHECK(plan.role(Role::actor)->mesh.ranks.empty());
    CHECK(plan.verdicts.empty());  // nothing to estimate without a mesh
  }
}

TEST_CASE("a hand-built mesh with ranks out of order still finds coordinates") {
  MeshPlan mesh;
  mesh.dp = 2;
  mesh.tp = 2;
  mesh.ranks = {7, 3, 5, 1};
  CHECK(mesh.coordinate_of(5).dp == 1);
  CHECK(mesh.coordinate_of(5).tp == 0);
  CHECK(mesh.rank_at({1, 0, 1}) == 1);
}
