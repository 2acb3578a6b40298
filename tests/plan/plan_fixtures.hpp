// Recipes for planner tests, built directly (no TOML) so that each test states
// exactly the fields it depends on. Every key a test may look a diagnostic up
// by gets a fake location on its own line, so `located_at` can tell them apart.
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "meshrun/plan/plan.hpp"
#include "support/temp_dir.hpp"

namespace plan_test {

// `name` is a kRoles row's ([roles.NAME]).
inline meshrun::RoleConfig role(std::string_view name, std::string model, int nodes, int procs_per_node) {
  meshrun::RoleConfig r;
  const std::optional<meshrun::Role> row = meshrun::role_named(name);
  if (!row) throw std::logic_error("no role row " + std::string(name));
  r.role = *row;
  r.model = std::move(model);
  r.nodes = nodes;
  r.procs_per_node = procs_per_node;
  return r;
}

inline void add_locations(meshrun::Recipe& recipe) {
  const char* keys[] = {"launch", "mesh.tp", "rollout", "rollout.engines", "rollout.tensor_parallel",
                        "rollout.max_new_tokens", "colocate.groups", "colocate.all"};
  int line = 1;
  for (const char* key : keys) recipe.locations[key] = {recipe.file, line++, 1};
  for (std::string_view name : meshrun::kRoleNames) {
    std::string base = "roles." + std::string(name);
    for (const char* suffix : {"", ".model", ".nodes", ".procs_per_node"})
      recipe.locations[base + suffix] = {recipe.file, line++, 1};
  }
}

// SFT of one actor on a single node.
inline meshrun::Recipe sft_recipe(std::string model, int procs) {
  meshrun::Recipe recipe;
  recipe.file = "recipe.toml";
  recipe.algorithm = meshrun::Algorithm::sft;
  recipe.launch.nodes = 1;
  recipe.launch.procs_per_node = procs;
  recipe.roles.push_back(role("actor", std::move(model), 1, procs));
  add_locations(recipe);
  return recipe;
}

// PPO with actor, critic, reward and ref of the same model, each `nodes` ×
// `procs_per_node`, on a launch cluster of `cluster_nodes` nodes.
inline meshrun::Recipe ppo_recipe(std::string model, int cluster_nodes, int procs_per_node,
                                  int role_nodes) {
  meshrun::Recipe recipe;
  recipe.file = "recipe.toml";
  recipe.algorithm = meshrun::Algorithm::ppo;
  recipe.launch.nodes = cluster_nodes;
  recipe.launch.procs_per_node = procs_per_node;
  for (std::string_view name : meshrun::kRoleNames)
    recipe.roles.push_back(role(std::string(name), model, role_nodes, procs_per_node));
  add_locations(recipe);
  return recipe;
}

// PPO on builtin:small (8 heads, 4 kv heads: tp 1, 2 and 4 all divide), with
// rollouts short enough for its 1024-token context.
inline meshrun::Recipe small_ppo_recipe(int cluster_nodes, int procs_per_node, int role_nodes) {
  meshrun::Recipe recipe = ppo_recipe("builtin:small", cluster_nodes, procs_per_node, role_nodes);
  recipe.rollout.max_prompt_len = 256;
  recipe.rollout.max_new_tokens = 256;
  return recipe;
}

inline meshrun::RoleConfig& role_of(meshrun::Recipe& recipe, std::string_view name) {
  for (auto& r : recipe.roles)
    if (r.name() == name) return r;
  throw std::logic_error("no role " + std::string(name));
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline bool has_rule(const meshrun::Diagnostics& diagnostics, std::string_view rule) {
  for (const auto& d : diagnostics.items())
    if (d.rule == rule) return true;
  return false;
}

inline const meshrun::Diagnostic* find_rule(const meshrun::Diagnostics& diagnostics, std::string_view rule) {
  for (const auto& d : diagnostics.items())
    if (d.rule == rule) return &d;
  return nullptr;
}

inline const meshrun::FitVerdict* verdict_of(const meshrun::Plan& plan, std::string_view who) {
  for (const auto& v : plan.verdicts)
    if (v.who == who) return &v;
  return nullptr;
}

inline std::vector<int> iota_ranks(int first, int count) {
  std::vector<int> ranks;
  for (int i = 0; i < count; ++i) ranks.push_back(first + i);
  return ranks;
}

using TempDir = meshrun::test::TempDir;

inline constexpr int64_t kGiB = int64_t{1} << 30;

}  // namespace plan_test
