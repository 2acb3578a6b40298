// Colocation: which roles take processes, and which of them share processes.
//
// A PlacementUnit is a set of roles that occupy the same slots (a [colocate]
// group, every role under colocate.all, or a role on its own), possibly with
// the rollout engines; or the rollout engines alone. The validator counts
// units against the cluster and the planner places them, in the order
// returned here, so both agree by construction. Only PPO places critic,
// reward, ref and engines; a reward role computed by a hook takes no slot.
#pragma once

#include <string>
#include <vector>

#include "meshrun/recipe/recipe.hpp"

namespace meshrun {

struct PlacementUnit {
  std::vector<const RoleConfig*> roles;  // empty: the rollout engines alone
  bool with_engines = false;             // engines occupy this unit's slots

  int nodes() const;           // of the first role; 0 for engines alone
  int procs_per_node() const;  // of the first role; 0 for engines alone
  int64_t processes(const Recipe& recipe) const;  // first role's, or engines × tensor_parallel
  std::string describe(const Recipe& recipe) const;  // "actor+ref", "engines 2×4", "actor+engines"
};

bool uses_engines(const Recipe& recipe);  // PPO
int64_t engine_processes(const Recipe& recipe);  // engines × tensor_parallel
bool takes_processes(const Recipe& recipe, const RoleConfig& role);
std::vector<const RoleConfig*> placed_roles(const Recipe& recipe);   // kRoleNames order
std::vector<const RoleConfig*> trained_roles(const Recipe& recipe);  // actor; critic in PPO
// Units in placement order: by first member in kRoleNames order, then the
// engines when they are not colocated. Group members that are not roles of
// the recipe are skipped (the validator reports them, and names no row has).
std::vector<PlacementUnit> placement_units(const Recipe& recipe);

}  // namespace meshrun
