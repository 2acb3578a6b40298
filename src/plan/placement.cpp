// Placement: which slots each role and rollout engine occupies.
//
// Units are placed in a fixed order (colocation groups and standalone roles by
// their first member in kRoleNames order, then standalone engines), each
// taking the lowest free slots that fit its shape. Slots are never freed, so
// a node's free slots are always a suffix [used, procs_per_node): one counter
// per node is the whole state, and every unit costs one scan of the nodes.
#include <algorithm>
#include <string>
#include <vector>

#include "meshrun/recipe/colocation.hpp"
#include "plan_internal.hpp"

namespace meshrun::plan_detail {
namespace {

// A colocation unit (meshrun::placement_units) bound to this plan's roles.
struct PlacementUnit {
  std::vector<RolePlan*> members;  // kRoleNames order
  bool with_engines = false;       // the engines share the unit's slots
  int nodes = 0, procs_per_node = 0;
};

std::string unit_label(const PlacementUnit& unit) {
  std::string label;
  for (const RolePlan* member : unit.members) label += (label.empty() ? "" : "+") + member->name;
  return label;
}

// The recipe's units, in placement order; engines alone are placed after
// every role, so they are left out here.
std::vector<PlacementUnit> placement_units_of(const Recipe& recipe, Plan& plan) {
  std::vector<PlacementUnit> units;
  for (const meshrun::PlacementUnit& unit : meshrun::placement_units(recipe)) {
    PlacementUnit bound;
    bound.with_engines = unit.with_engines;
    for (const RoleConfig* role : unit.roles)
      for (RolePlan& planned : plan.roles)
        if (planned.role == role->role) bound.members.push_back(&planned);
    if (!bound.members.empty()) units.push_back(std::move(bound));
  }
  return units;
}

class SlotAllocator {
 public:
  SlotAllocator(const ClusterShape& cluster, Plan& plan)
      : procs_per_node_(cluster.procs_per_node), used_(cluster.nodes, 0), plan_(plan) {}

  // The first `nodes` nodes with `per_node` free slots; empty if there are not enough.
  std::vector<int> take_nodes(int nodes, int per_node) {
    std::vector<int> chosen;
    for (int node = 0; node < static_cast<int>(used_.size()) && static_cast<int>(chosen.size()) < nodes; ++node)
      if (free_on(node) >= per_node) chosen.push_back(node);
    if (static_cast<int>(chosen.size()) < nodes) return {};
    std::vector<int> ranks;
    ranks.reserve(static_cast<size_t>(nodes) * per_node);
    for (int node : chosen) append_ranks(node, per_node, ranks);
    return ranks;
  }

  // `count` slots on the first node that has them. Engines all ask for the
  // same count, so the first fitting node never moves backwards.
  std::vector<int> take_on_one_node(int count) {
    while (first_fit_ < static_cast<int>(used_.size()) && free_on(first_fit_) < count) ++first_fit_;
    if (first_fit_ == static_cast<int>(used_.size())) return {};
    std::vector<int> ranks;
    append_ranks(first_fit_, count, ranks);
    return ranks;
  }

  void own(const std::vector<int>& ranks, const std::string& owner) {
    for (int rank : ranks) plan_.slots[rank].owners.push_back(owner);
  }

  // "free slots per node: 0, 8, 4, 8" (abridged on large clusters).
  std::string describe_free() const {
    constexpr int kShown = 16;
    std::string text = "free slots per node:";
    int total = 0;
    for (int node = 0; node < static_cast<int>(used_.size()); ++node) {
      total += free_on(node);
      if (node < kShown) text += (node ? ", " : " ") + std::to_string(free_on(node));
    }
    if (static_cast<int>(used_.size()) > kShown)
      text += ", ... (" + std::to_string(total) + " free in all)";
    return text;
  }

  int nodes_with(int per_node) const {
    int count = 0;
    for (int node = 0; node < static_cast<int>(used_.size()); ++node) count += free_on(node) >= per_node;
    return count;
  }

 private:
  int free_on(int node) const { return procs_per_node_ - used_[node]; }
  void append_ranks(int node, int count, std::vector<int>& ranks) {
    for (int local = used_[node]; local < used_[node] + count; ++local)
      ranks.push_back(node * procs_per_node_ + local);
    used_[node] += count;
  }

  int procs_per_node_;
  std::vector<int> used_;
  int first_fit_ = 0;
  Plan& plan_;
};

// Checks the unit's shape against its members and the cluster; removes the
// members that cannot take part. Returns false when nothing can be placed.
bool settle_unit_shape(const Recipe& recipe, const ClusterShape& cluster, PlacementUnit& unit,
                       Diagnostics& diagnostics) {
  const RoleConfig* first = recipe.role(unit.members.front()->role);
  unit.nodes = first->nodes;
  unit.procs_per_node = first->procs_per_node;
  const std::string where_group = recipe.colocate.all ? "colocate.all" : "colocate.groups";
  std::erase_if(unit.members, [&](const RolePlan* member) {
    const RoleConfig* config = recipe.role(member->role);
    if (config->nodes == unit.nodes && config->procs_per_node == unit.procs_per_node) return false;
    diagnostics.error(recipe.where(where_group), "plan.placement",
                      member->name + " (" + std::to_string(config->nodes) + " nodes × " +
                          std::to_string(config->procs_per_node) + " processes) cannot share slots with " +
                          first->name() + " (" + std::to_string(unit.nodes) + " × " +
                          std::to_string(unit.procs_per_node) + "); it is left unplaced",
                      "give colocated roles the same nodes and procs_per_node");
    return true;
  });

  const std::string key = "roles." + first->name();
  if (unit.nodes > cluster.nodes) {
    diagnostics.error(recipe.where(key + ".nodes"), "plan.placement",
                      unit_label(unit) + " needs " + std::to_string(unit.nodes) +
                          " nodes but the cluster has " + std::to_string(cluster.nodes),
                      "lower roles." + first->name() + ".nodes or plan for a larger cluster");
    return false;
  }
  if (unit.procs_per_node > cluster.procs_per_node) {
    diagnostics.error(recipe.where(key + ".procs_per_node"), "plan.placement",
                      unit_label(unit) + " needs " + std::to_string(unit.procs_per_node) +
                          " processes per node but the cluster's nodes have " +
                          std::to_string(cluster.procs_per_node) + " slots",
                      "lower roles." + first->name() + ".procs_per_node or plan for larger nodes");
    return false;
  }
  return true;
}

EnginePlan new_engine(int index, std::vector<int> ranks) {
  EnginePlan engine;
  engine.index = index;
  engine.ranks = std::move(ranks);
  return engine;
}

void place_colocated_engines(const Recipe& recipe, const PlacementUnit& unit, int engine_count,
                             SlotAllocator& slots, Plan& plan, Diagnostics& diagnostics) {
  const std::vector<int>& group = unit.members.front()->ranks;
  const int tp = recipe.rollout.tensor_parallel;
  const int ppn = plan.cluster.procs_per_node;
  if (static_cast<int64_t>(engine_count) * tp != static_cast<int64_t>(group.size())) {
    diagnostics.error(recipe.where("rollout.engines"), "plan.placement",
                      std::to_string(engine_count) + " engines × tensor_parallel " + std::to_string(tp) +
                          " need " + std::to_string(static_cast<int64_t>(engine_count) * tp) +
                          " slots, but the colocated group " + unit_label(unit) + " has " +
                          std::to_string(group.size()),
                      "make rollout.engines × rollout.tensor_parallel equal the group's processes");
    return;
  }
  for (int e = 0; e < engine_count; ++e) {
    std::vector<int> ranks(group.begin() + static_cast<ptrdiff_t>(e) * tp,
                           group.begin() + static_cast<ptrdiff_t>(e + 1) * tp);
    if (ranks.front() / ppn != ranks.back() / ppn) {
      diagnostics.error(recipe.where("rollout.tensor_parallel"), "plan.placement",
                        engine_name(e) + " would span nodes " + std::to_string(ranks.front() / ppn) +
                            " and " + std::to_string(ranks.back() / ppn) + " of group " +
                            unit_label(unit) + ": tensor_parallel " + std::to_string(tp) +
                            " does not divide its " + std::to_string(unit.procs_per_node) +
                            " processes per node",
                        "choose a tensor_parallel that divides the group's procs_per_node");
      plan.engines.clear();
      return;
    }
    plan.engines.push_back(new_engine(e, std::move(ranks)));
  }
  for (const auto& engine : plan.engines) slots.own(engine.ranks, engine_name(engine.index));
}

void place_standalone_engines(const Recipe& recipe, int engine_count, SlotAllocator& slots,
                              Plan& plan, Diagnostics& diagnostics) {
  const int tp = recipe.rollout.tensor_parallel;
  for (int e = 0; e < engine_count; ++e) {
    std::vector<int> ranks = tp <= plan.cluster.procs_per_node ? slots.take_on_one_node(tp)
                                                               : std::vector<int>{};
    if (ranks.empty()) {
      diagnostics.error(recipe.where("rollout.engines"), "plan.placement",
                        "cannot place " + engine_name(e) + " of " + std::to_string(engine_count) +
                            ": it needs " + std::to_string(tp) +
                            " free slots on one node (tensor_parallel) and no node has them; " +
                            slots.describe_free(),
                        "use fewer engines or a smaller tensor_parallel, colocate the engines "
                        "with the actor, or plan for a larger cluster");
      return;
    }
    slots.own(ranks, engine_name(e));
    plan.engines.push_back(new_engine(e, std::move(ranks)));
  }
}

}  // namespace

std::string engine_name(int index) { return "engine " + std::to_string(index); }

void place_processes(const Recipe& recipe, int engine_count, Plan& plan, Diagnostics& diagnostics) {
  const ClusterShape& cluster = plan.cluster;
  plan.slots.assign(static_cast<size_t>(cluster.world_size()), SlotPlan{});
  for (int rank = 0; rank < cluster.world_size(); ++rank)
    plan.slots[rank] = SlotPlan{rank, rank / cluster.procs_per_node, rank % cluster.procs_per_node, {}, 0};

  SlotAllocator slots(cluster, plan);
  bool engines_colocated = false;
  for (PlacementUnit& unit : placement_units_of(recipe, plan)) {
    engines_colocated = engines_colocated || unit.with_engines;
    if (!settle_unit_shape(recipe, cluster, unit, diagnostics)) continue;
    std::vector<int> ranks = slots.take_nodes(unit.nodes, unit.procs_per_node);
    if (ranks.empty()) {
      diagnostics.error(recipe.where("roles." + unit.members.front()->name + ".nodes"), "plan.placement",
                        "cannot place " + unit_label(unit) + ": it needs " + std::to_string(unit.nodes) +
                            " node(s) with " + std::to_string(unit.procs_per_node) +
                            " free slots each, and " + std::to_string(slots.nodes_with(unit.procs_per_node)) +
                            " node(s) have them; " + slots.describe_free(),
                        "colocate roles, give them fewer processes, or plan for a larger cluster");
      continue;
    }
    for (RolePlan* member : unit.members) {
      member->ranks = ranks;
      slots.own(ranks, member->name);
    }
    if (unit.with_engines) place_colocated_engines(recipe, unit, engine_count, slots, plan, diagnostics);
  }
  if (!engines_colocated) place_standalone_engines(recipe, engine_count, slots, plan, diagnostics);
}

}  // namespace meshrun::plan_detail
