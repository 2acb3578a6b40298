// DeviceMesh: the plan's layout plus this rank's place in it; see mesh.hpp.
#include "meshrun/dist/mesh.hpp"

#include <algorithm>
#include <stdexcept>

namespace meshrun {
namespace {

size_t axis_index(MeshAxis axis) { return static_cast<size_t>(axis); }

}  // namespace

std::string_view axis_name(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::dp: return "dp";
    case MeshAxis::sp: return "sp";
    case MeshAxis::tp: return "tp";
  }
  return "?";
}

DeviceMesh::DeviceMesh(std::string role, MeshPlan plan, int global_rank)
    : role_(std::move(role)), plan_(std::move(plan)), global_rank_(global_rank) {
  member_ = contains(global_rank);
  if (!member_) return;
  coordinate_ = coordinate_of(global_rank);
  for (MeshAxis axis : kMeshAxes) {
    const auto& groups = axis_groups(axis);
    for (size_t i = 0; i < groups.size(); ++i)
      if (std::find(groups[i].begin(), groups[i].end(), global_rank) != groups[i].end())
        axis_group_index_[axis_index(axis)] = static_cast<int>(i);
    if (axis_group_index_[axis_index(axis)] < 0)
      throw DistError("mesh of role " + role_ + ": rank " + std::to_string(global_rank) +
                      " is in the mesh but in none of its " + std::string(axis_name(axis)) +
                      " groups (an inconsistent plan)");
  }
}

int DeviceMesh::size(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::dp: return plan_.dp;
    case MeshAxis::sp: return plan_.sp;
    case MeshAxis::tp: return plan_.tp;
  }
  return 1;
}

bool DeviceMesh::contains(int global_rank) const {
  return std::find(plan_.ranks.begin(), plan_.ranks.end(), global_rank) != plan_.ranks.end();
}

MeshPlan::Coordinate DeviceMesh::coordinate() const {
  if (!member_)
    throw DistError("rank " + std::to_string(global_rank_) + " is not in the mesh of role " + role_);
  return coordinate_;
}

int DeviceMesh::coordinate(MeshAxis axis) const {
  const MeshPlan::Coordinate c = coordinate();
  switch (axis) {
    case MeshAxis::dp: return c.dp;
    case MeshAxis::sp: return c.sp;
    case MeshAxis::tp: return c.tp;
  }
  return 0;
}

MeshPlan::Coordinate DeviceMesh::coordinate_of(int global_rank) const {
  try {
    return plan_.coordinate_of(global_rank);
  } catch (const std::logic_error& error) {  // a rank or coordinate outside the plan's mesh
    throw DistError("mesh of role " + role_ + ": " + error.what());
  }
}

int DeviceMesh::rank_at(MeshPlan::Coordinate coordinate) const {
  try {
    return plan_.rank_at(coordinate);
  } catch (const std::logic_error& error) {  // a rank or coordinate outside the plan's mesh
    throw DistError("mesh of role " + role_ + ": " + error.what());
  }
}

const std::vector<std::vector<int>>& DeviceMesh::axis_groups(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::dp: return plan_.dp_groups;
    case MeshAxis::sp: return plan_.sp_groups;
    case MeshAxis::tp: return plan_.tp_groups;
  }
  return plan_.tp_groups;
}

int DeviceMesh::axis_group_index(MeshAxis axis) const {
  coordinate();  // throws for a non-member
  return axis_group_index_[axis_index(axis)];
}

const std::vector<int>& DeviceMesh::axis_ranks(MeshAxis axis) const {
  return axis_groups(axis)[static_cast<size_t>(axis_group_index(axis))];
}

std::string DeviceMesh::group_name(MeshAxis axis) const { return role_ + "/" + std::string(axis_name(axis)); }

Group& DeviceMesh::group(MeshAxis axis) {
  coordinate();
  auto& group = groups_[axis_index(axis)];
  if (!group)
    throw DistError("the " + group_name(axis) + " group does not exist yet: call Runtime::build_groups first");
  return *group;
}

Group& DeviceMesh::role_group() {
  coordinate();
  if (!role_group_)
    throw DistError("the " + role_ + " group does not exist yet: call Runtime::build_groups first");
  return *role_group_;
}

void DeviceMesh::attach(MeshAxis axis, Group group) { groups_[axis_index(axis)] = std::move(group); }

void DeviceMesh::attach_role_group(Group group) { role_group_ = std::move(group); }

std::vector<int> DeviceMesh::replica_ranks() const {
  const int tp = coordinate().tp;
  std::vector<int> ranks;
  ranks.reserve(static_cast<size_t>(plan_.dp) * static_cast<size_t>(plan_.sp));
  for (int d = 0; d < plan_.dp; ++d)
    for (int s = 0; s < plan_.sp; ++s) ranks.push_back(rank_at({d, s, tp}));
  return ranks;
}

Group& DeviceMesh::replica_group() {
  if (plan_.sp == 1) return group(MeshAxis::dp);
  coordinate();
  if (!replica_group_)
    throw DistError("the " + role_ + "/dp*sp group does not exist yet: call Runtime::build_groups first");
  return *replica_group_;
}

void DeviceMesh::attach_replica_group(Group group) { replica_group_ = std::move(group); }

int DeviceMesh::ep_rank() const { return coordinate().dp % plan_.ep; }

std::vector<int> DeviceMesh::expert_parallel_ranks() const {
  const MeshPlan::Coordinate me = coordinate();
  const int first = me.dp - me.dp % plan_.ep;
  std::vector<int> ranks;
  for (int e = 0; e < plan_.ep; ++e) ranks.push_back(rank_at({first + e, me.sp, me.tp}));
  return ranks;
}

std::vector<int> DeviceMesh::expert_replica_ranks() const {
  const MeshPlan::Coordinate me = coordinate();
  std::vector<int> ranks;
  for (int d = me.dp % plan_.ep; d < plan_.dp; d += plan_.ep)
    for (int s = 0; s < plan_.sp; ++s) ranks.push_back(rank_at({d, s, me.tp}));
  return ranks;
}

Group* DeviceMesh::expert_parallel_group() {
  if (plan_.ep <= 1) return nullptr;
  coordinate();
  if (!expert_parallel_group_)
    throw DistError("the " + role_ + "/ep group does not exist yet: call Runtime::build_groups first");
  return &*expert_parallel_group_;
}

Group* DeviceMesh::expert_replica_group() {
  if (plan_.ep <= 1) return nullptr;
  coordinate();
  if (!expert_replica_group_)
    throw DistError("the " + role_ + "/experts group does not exist yet: call Runtime::build_groups first");
  return &*expert_replica_group_;
}

void DeviceMesh::attach_expert_groups(Group expert_parallel, Group expert_replica) {
  expert_parallel_group_ = std::move(expert_parallel);
  expert_replica_group_ = std::move(expert_replica);
}

}  // namespace meshrun
