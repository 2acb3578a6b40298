// A role's device mesh: its ranks laid out as dp × sp × tp with tp varying
// fastest, so each tensor-parallel group is a run of consecutive ranks (and,
// since a role takes whole runs of slots on each node, one node when tp
// divides procs_per_node). Sequence-parallel groups come next, so they stay
// as close as possible too; data parallelism, which communicates least often,
// spans the farthest ranks.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "meshrun/recipe/step_arithmetic.hpp"
#include "plan_internal.hpp"

namespace meshrun {

MeshPlan::Coordinate MeshPlan::coordinate_of(int global_rank) const {
  // Plans keep ranks ascending, so search; a hand-built mesh may not.
  auto it = std::lower_bound(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end() || *it != global_rank) it = std::find(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end() || tp <= 0 || sp <= 0)
    throw std::logic_error("rank " + std::to_string(global_rank) + " is not in this mesh");
  const int index = static_cast<int>(it - ranks.begin());
  return Coordinate{index / (tp * sp), (index / tp) % sp, index % tp};
}

int MeshPlan::rank_at(Coordinate c) const {
  if (c.dp < 0 || c.dp >= dp || c.sp < 0 || c.sp >= sp || c.tp < 0 || c.tp >= tp)
    throw std::logic_error("mesh coordinate (dp " + std::to_string(c.dp) + ", sp " +
                           std::to_string(c.sp) + ", tp " + std::to_string(c.tp) +
                           ") is outside dp=" + std::to_string(dp) + " sp=" + std::to_string(sp) +
                           " tp=" + std::to_string(tp));
  const size_t index = (static_cast<size_t>(c.dp) * sp + c.sp) * tp + c.tp;
  if (index >= ranks.size()) throw std::logic_error("mesh has fewer ranks than dp × sp × tp");
  return ranks[index];
}

namespace plan_detail {

std::optional<MeshPlan> build_mesh(const std::vector<int>& ranks, int tp, int sp, int dp, int ep) {
  const int n = static_cast<int>(ranks.size());
  if (tp <= 0 || sp <= 0 || ep <= 0) return std::nullopt;
  const std::optional<int64_t> degree = step_arithmetic::data_parallel_degree(n, MeshConfig{tp, sp, dp});
  if (!degree || *degree <= 0 || *degree % ep != 0) return std::nullopt;
  dp = static_cast<int>(*degree);

  MeshPlan mesh;
  mesh.dp = dp;
  mesh.ep = ep;
  mesh.sp = sp;
  mesh.tp = tp;
  mesh.ranks = ranks;
  auto at = [&](int d, int s, int t) { return ranks[(static_cast<size_t>(d) * sp + s) * tp + t]; };

  mesh.tp_groups.reserve(static_cast<size_t>(dp) * sp);
  for (int d = 0; d < dp; ++d)
    for (int s = 0; s < sp; ++s) {
      auto& group = mesh.tp_groups.emplace_back();
      group.reserve(tp);
      for (int t = 0; t < tp; ++t) group.push_back(at(d, s, t));
    }
  mesh.sp_groups.reserve(static_cast<size_t>(dp) * tp);
  for (int d = 0; d < dp; ++d)
    for (int t = 0; t < tp; ++t) {
      auto& group = mesh.sp_groups.emplace_back();
      group.reserve(sp);
      for (int s = 0; s < sp; ++s) group.push_back(at(d, s, t));
    }
  mesh.dp_groups.reserve(static_cast<size_t>(sp) * tp);
  for (int s = 0; s < sp; ++s)
    for (int t = 0; t < tp; ++t) {
      auto& group = mesh.dp_groups.emplace_back();
      group.reserve(dp);
      for (int d = 0; d < dp; ++d) group.push_back(at(d, s, t));
    }
  // Expert groups are runs of neighbouring dp coordinates: the all-to-all
  // of every sparse layer travels the shortest way the dp axis offers.
  if (ep > 1)
    for (int t = 0; t < tp; ++t) {
      for (int s = 0; s < sp; ++s)
        for (int g = 0; g < dp / ep; ++g) {
          auto& group = mesh.ep_groups.emplace_back();
          for (int e = 0; e < ep; ++e) group.push_back(at(g * ep + e, s, t));
        }
      for (int e = 0; e < ep; ++e) {
        auto& group = mesh.expert_replica_groups.emplace_back();
        for (int g = 0; g < dp / ep; ++g)
          for (int s = 0; s < sp; ++s) group.push_back(at(g * ep + e, s, t));
      }
    }
  return mesh;
}

}  // namespace plan_detail
}  // namespace meshrun
