// DeviceMesh: one role's dp × sp × tp layout as seen by this process, like
// torch's DeviceMesh or torchtitan's ParallelDims.
//
// The layout (degrees, rank ↔ coordinate, the rank lists of every axis group)
// is the plan's MeshPlan and is known on every rank, member or not, so any
// rank can ask where e.g. the actor's (dp 1, tp 0) lives. The process groups
// exist only on members: group(axis) gives the group along that axis that
// holds this rank (varying that coordinate, the others fixed), and throws
// for a rank outside the mesh or before Runtime::build_groups attached them.
// Group names are "<role>/<axis>" ("actor/dp"); the role-wide group is
// "<role>".
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshrun/dist/dist.hpp"
#include "meshrun/plan/plan.hpp"

namespace meshrun {

enum class MeshAxis { dp, sp, tp };
inline constexpr std::array<MeshAxis, 3> kMeshAxes = {MeshAxis::dp, MeshAxis::sp, MeshAxis::tp};
std::string_view axis_name(MeshAxis axis);  // "dp", "sp", "tp"

class DeviceMesh {
 public:
  // `global_rank` is this process's rank; it need not be in the mesh.
  DeviceMesh(std::string role, MeshPlan plan, int global_rank);

  const std::string& role() const { return role_; }
  const MeshPlan& plan() const { return plan_; }
  int size(MeshAxis axis) const;
  int dp() const { return plan_.dp; }
  int sp() const { return plan_.sp; }
  int tp() const { return plan_.tp; }
  int size() const { return static_cast<int>(plan_.ranks.size()); }
  const std::vector<int>& ranks() const { return plan_.ranks; }

  bool contains(int global_rank) const;
  bool holds_this_rank() const { return member_; }
  int global_rank() const { return global_rank_; }

  // This rank's coordinate; throws DistError when it is not a member.
  MeshPlan::Coordinate coordinate() const;
  int coordinate(MeshAxis axis) const;
  // Any rank's; throws DistError for a rank outside the mesh.
  MeshPlan::Coordinate coordinate_of(int global_rank) const;
  int rank_at(MeshPlan::Coordinate coordinate) const;

  // The global ranks of this rank's group along `axis`, in axis order, and
  // that group's index in the plan's list for the axis.
  const std::vector<int>& axis_ranks(MeshAxis axis) const;
  int axis_group_index(MeshAxis axis) const;
  const std::vector<std::vector<int>>& axis_groups(MeshAxis axis) const;  // all of them
  std::string group_name(MeshAxis axis) const;  // "actor/dp"

  // The ranks holding the same parameter shards as this one (its tp
  // coordinate): dp × sp of them, in (dp, sp) order. Gradients are averaged
  // over them, and ZeRO shards over them.
  std::vector<int> replica_ranks() const;

  // The process groups (Runtime::build_groups attaches them).
  Group& group(MeshAxis axis);
  Group& role_group();
  // The replica ranks' group: the dp group when sp is 1, else "actor/dp*sp".
  Group& replica_group();
  bool has_groups() const { return role_group_.has_value(); }

  // Expert parallelism (MeshPlan::ep): the ep degree, this rank's place in
  // its ep group (dp coordinate mod ep), that group's ranks and the expert
  // replica group's ((dp / ep) × sp ranks holding the same experts). The
  // groups are null when ep is 1.
  int ep() const { return plan_.ep; }
  int ep_rank() const;
  std::vector<int> expert_parallel_ranks() const;
  std::vector<int> expert_replica_ranks() const;
  Group* expert_parallel_group();
  Group* expert_replica_group();
  void attach_expert_groups(Group expert_parallel, Group expert_replica);
  void attach(MeshAxis axis, Group group);
  void attach_role_group(Group group);
  void attach_replica_group(Group group);

 private:
  std::string role_;
  MeshPlan plan_;
  int global_rank_ = 0;
  bool member_ = false;
  MeshPlan::Coordinate coordinate_{};
  std::array<int, 3> axis_group_index_{-1, -1, -1};
  std::array<std::optional<Group>, 3> groups_;
  std::optional<Group> role_group_;
  std::optional<Group> replica_group_;  // only when sp > 1
  std::optional<Group> expert_parallel_group_, expert_replica_group_;  // only when ep > 1
};

}  // namespace meshrun
