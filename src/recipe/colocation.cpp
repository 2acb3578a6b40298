#include "meshrun/recipe/colocation.hpp"

#include <algorithm>

namespace meshrun {

int PlacementUnit::nodes() const { return roles.empty() ? 0 : roles.front()->nodes; }
int PlacementUnit::procs_per_node() const { return roles.empty() ? 0 : roles.front()->procs_per_node; }

int64_t PlacementUnit::processes(const Recipe& recipe) const {
  return roles.empty() ? engine_processes(recipe) : roles.front()->processes();
}

std::string PlacementUnit::describe(const Recipe& recipe) const {
  if (roles.empty())
    return "engines " + std::to_string(recipe.rollout.engines) + "×" + std::to_string(recipe.rollout.tensor_parallel);
  std::string out;
  for (const RoleConfig* role : roles) out += (out.empty() ? "" : "+") + role->name();
  if (with_engines) out += "+engines";
  return out;
}

bool uses_engines(const Recipe& recipe) { return row_of(recipe.algorithm).rollout_engines; }

int64_t engine_processes(const Recipe& recipe) {
  return int64_t{recipe.rollout.engines} * recipe.rollout.tensor_parallel;
}

bool takes_processes(const Recipe& recipe, const RoleConfig& role) {
  if (role.role == Role::actor) return true;
  if (!row_of(recipe.algorithm).uses_side_roles) return false;
  // A reward computed by a Lua hook alone needs no process.
  return !(role.role == Role::reward && role.model.empty() && !role.hook.empty());
}

std::vector<const RoleConfig*> placed_roles(const Recipe& recipe) {
  std::vector<const RoleConfig*> out;
  for (const auto& role : recipe.roles)
    if (takes_processes(recipe, role)) out.push_back(&role);
  return out;
}

std::vector<const RoleConfig*> trained_roles(const Recipe& recipe) {
  std::vector<const RoleConfig*> out;
  for (const RoleConfig* role : placed_roles(recipe))
    if (row_of(role->role).trained) out.push_back(role);
  return out;
}

std::vector<PlacementUnit> placement_units(const Recipe& recipe) {
  const auto roles = placed_roles(recipe);
  const bool engines = uses_engines(recipe);
  std::vector<PlacementUnit> units;
  if (recipe.colocate.all) {
    if (!roles.empty()) units.push_back(PlacementUnit{roles, engines});
    else if (engines) units.push_back(PlacementUnit{{}, true});
    return units;
  }
  // The first group holding `member` (a role, or the engines' row).
  auto group_of = [&](Role member) -> const std::vector<Role>* {
    for (const auto& group : recipe.colocate.groups)
      if (std::find(group.begin(), group.end(), member) != group.end()) return &group;
    return nullptr;
  };
  std::vector<const std::vector<Role>*> placed_groups;
  bool engines_placed = false;
  for (const RoleConfig* role : roles) {
    const auto* group = group_of(role->role);
    if (!group) {
      units.push_back(PlacementUnit{{role}, false});
      continue;
    }
    if (std::find(placed_groups.begin(), placed_groups.end(), group) != placed_groups.end()) continue;
    placed_groups.push_back(group);
    // A role (or "rollout") named in two groups is the validator's error;
    // it stays in the first group so nothing is placed twice.
    PlacementUnit unit;
    for (const RoleConfig* member : roles)
      if (group_of(member->role) == group) unit.roles.push_back(member);
    unit.with_engines = engines && !engines_placed && group_of(Role::rollout) == group;
    engines_placed = engines_placed || unit.with_engines;
    units.push_back(std::move(unit));
  }
  if (engines && !engines_placed) units.push_back(PlacementUnit{{}, true});
  return units;
}

}  // namespace meshrun
