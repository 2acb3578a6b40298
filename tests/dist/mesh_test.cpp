// DeviceMesh: the plan's layout from one rank's point of view (no groups).
#include <doctest/doctest.h>

#include <string>

#include "meshrun/dist/mesh.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun {
namespace {

Plan plan_of(const std::string& text) {
  Diagnostics diagnostics;
  auto recipe = load_recipe_text(text, "mesh-test.toml", {}, diagnostics);
  REQUIRE_MESSAGE(recipe, diagnostics.format());
  Diagnostics plan_diagnostics;
  Plan plan = make_plan(*recipe, ClusterShape::from_recipe(*recipe), plan_diagnostics);
  REQUIRE_MESSAGE(!plan_diagnostics.has_errors(), plan_diagnostics.format());
  return plan;
}

const std::string kFourRanksTp2 = R"(algorithm = "sft"
[launch]
procs_per_node = 4
device = "cpu"
backend = "gloo"
[mesh]
tp = 2
[batch]
micro_train = 1
train = 8
[roles.actor]
model = "builtin:tiny"
dtype = "fp32"
)";

TEST_CASE("a dp=2 tp=2 mesh gives each rank its coordinates and axis groups") {
  const Plan plan = plan_of(kFourRanksTp2);
  const RolePlan* actor = plan.role(Role::actor);
  REQUIRE(actor);
  DeviceMesh mesh("actor", actor->mesh, 3);
  CHECK(mesh.dp() == 2);
  CHECK(mesh.sp() == 1);
  CHECK(mesh.tp() == 2);
  CHECK(mesh.size() == 4);
  CHECK(mesh.holds_this_rank());
  CHECK(mesh.coordinate().dp == 1);
  CHECK(mesh.coordinate().tp == 1);
  CHECK(mesh.coordinate(MeshAxis::sp) == 0);
  CHECK(mesh.axis_ranks(MeshAxis::tp) == std::vector<int>{2, 3});
  CHECK(mesh.axis_ranks(MeshAxis::dp) == std::vector<int>{1, 3});
  CHECK(mesh.axis_ranks(MeshAxis::sp) == std::vector<int>{3});
  CHECK(mesh.axis_group_index(MeshAxis::dp) == 1);
  CHECK(mesh.axis_group_index(MeshAxis::tp) == 1);
  CHECK(mesh.group_name(MeshAxis::dp) == "actor/dp");
  CHECK(mesh.rank_at({0, 0, 1}) == 1);
  CHECK(mesh.coordinate_of(2).dp == 1);
  CHECK(mesh.coordinate_of(2).tp == 0);

  DeviceMesh first("actor", actor->mesh, 0);
  CHECK(first.axis_ranks(MeshAxis::tp) == std::vector<int>{0, 1});
  CHECK(first.axis_ranks(MeshAxis::dp) == std::vector<int>{0, 2});
}

TEST_CASE("every rank of the mesh is in exactly one group per axis") {
  const Plan plan = plan_of(kFourRanksTp2);
  const MeshPlan& layout = plan.role(Role::actor)->mesh;
  for (int rank = 0; rank < 4; ++rank) {
    DeviceMesh mesh("actor", layout, rank);
    for (MeshAxis axis : kMeshAxes) {
      int groups_holding = 0;
      for (const auto& group : mesh.axis_groups(axis))
        groups_holding += static_cast<int>(std::count(group.begin(), group.end(), rank));
      CHECK(groups_holding == 1);
      CHECK(static_cast<int>(mesh.axis_ranks(axis).size()) == mesh.size(axis));
      // Moving along an axis changes that coordinate only.
      const auto& along = mesh.axis_ranks(axis);
      for (size_t i = 0; i < along.size(); ++i) {
        const auto c = mesh.coordinate_of(along[i]);
        const int varying = axis == MeshAxis::dp ? c.dp : axis == MeshAxis::sp ? c.sp : c.tp;
        CHECK(varying == static_cast<int>(i));
      }
    }
  }
}

TEST_CASE("a rank outside the mesh knows the layout but has no coordinates or groups") {
  MeshPlan layout;
  layout.dp = 1;
  layout.sp = 2;
  layout.tp = 1;
  layout.ranks = {4, 5};
  layout.dp_groups = {{4}, {5}};
  layout.sp_groups = {{4, 5}};
  layout.tp_groups = {{4}, {5}};
  DeviceMesh mesh("critic", layout, 0);
  CHECK_FALSE(mesh.holds_this_rank());
  CHECK(mesh.contains(5));
  CHECK(mesh.coordinate_of(5).sp == 1);
  CHECK_THROWS_WITH_AS(mesh.coordinate(), "rank 0 is not in the mesh of role critic", DistError);
  CHECK_THROWS_AS(mesh.axis_ranks(MeshAxis::sp), DistError);
  CHECK_THROWS_AS(mesh.group(MeshAxis::sp), DistError);
  CHECK_THROWS_AS(mesh.coordinate_of(7), DistError);
  CHECK_THROWS_AS(mesh.rank_at({0, 2, 0}), DistError);

  DeviceMesh member("critic", layout, 5);
  CHECK(member.axis_ranks(MeshAxis::sp) == std::vector<int>{4, 5});
  CHECK_THROWS_WITH_AS(member.group(MeshAxis::sp),
                       "the critic/sp group does not exist yet: call Runtime::build_groups first", DistError);
}

}  // namespace
}  // namespace meshrun
