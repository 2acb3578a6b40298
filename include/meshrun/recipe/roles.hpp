// Roles as rows: the models of a job (actor, critic, reward, ref) and the
// rollout engines, each one entry of kRoles saying what it is: trained or
// frozen, the head its model carries, what it computes for a sample, and
// the phases of an RL step it works in (with [colocate] sleep the others
// move their memory to the host). Schema, plan and runtime switch on
// `Role`; a role's name is read or written only here.
//
// Invariants: kRoles is indexed by Role (kRoles[i].role == Role(i)); every
// recipe role name maps to exactly one row.
#pragma once

#include <array>
#include <optional>
#include <string_view>

#include "meshrun/recipe/algorithms.hpp"

namespace meshrun {

enum class Role { actor, critic, reward, ref, rollout };

// The phases of an RL step, in order.
enum class StepPhase { rollout, scoring, training, sync };

// The head a role's model carries.
enum class RoleHead { language_model, value };

// What a role computes for each sample of a step.
enum class RoleOutput {
  token_log_probs,  // log π of each response token (actor, ref)
  token_values,     // V at each response position (critic)
  sample_score,     // one score per sample, at its last real token (reward model)
  samples,          // generated responses (rollout engines)
};

struct RoleRow {
  Role role;
  std::string_view name;  // the recipe's [roles.NAME]; "rollout" for the engines ([rollout], colocate groups)
  bool trained;           // holds an optimizer (an engine of its own)
  RoleHead head;
  RoleOutput output;
  // StepPhase bits: 1 << StepPhase.
  unsigned phases;
  std::string_view summary;

  bool works_in(StepPhase phase) const { return (phases >> static_cast<unsigned>(phase)) & 1U; }
};

namespace role_detail {
constexpr unsigned bit(StepPhase phase) { return 1U << static_cast<unsigned>(phase); }
}  // namespace role_detail

inline constexpr std::array<RoleRow, 5> kRoles{{
    {Role::actor, "actor", true, RoleHead::language_model, RoleOutput::token_log_probs,
     role_detail::bit(StepPhase::scoring) | role_detail::bit(StepPhase::training) | role_detail::bit(StepPhase::sync),
     "the trained policy: its log-probs at scoring time are the update's old log-probs"},
    {Role::critic, "critic", true, RoleHead::value, RoleOutput::token_values,
     role_detail::bit(StepPhase::scoring) | role_detail::bit(StepPhase::training),
     "the trained value model of GAE"},
    {Role::reward, "reward", false, RoleHead::value, RoleOutput::sample_score, role_detail::bit(StepPhase::scoring),
     "a frozen reward model (or, with only `hook`, a Lua reward function)"},
    {Role::ref, "ref", false, RoleHead::language_model, RoleOutput::token_log_probs, role_detail::bit(StepPhase::scoring),
     "the frozen reference policy of the KL term"},
    {Role::rollout, "rollout", false, RoleHead::language_model, RoleOutput::samples,
     role_detail::bit(StepPhase::rollout) | role_detail::bit(StepPhase::sync),
     "the rollout engines: the actor's weights, generating"},
}};

constexpr const RoleRow& row_of(Role role) { return kRoles[static_cast<size_t>(role)]; }
constexpr std::string_view role_name(Role role) { return row_of(role).name; }

// The row named `name`; nullopt for a name no row has.
constexpr std::optional<Role> role_named(std::string_view name) {
  for (const RoleRow& row : kRoles)
    if (row.name == name) return row.role;
  return std::nullopt;
}

// The rows an algorithm works with, read off its kAlgorithms row: the actor
// always; critic, reward and ref where it uses side roles; the reference it
// computes on the actor's processes (ref_with_actor); the rollout engines
// where it generates. A [roles.NAME] of a row it does not use is lint's
// roles.unused warning.
constexpr bool algorithm_uses(const AlgorithmRow& algorithm, Role role) {
  switch (role) {
    case Role::actor: return true;
    case Role::critic:
    case Role::reward: return algorithm.uses_side_roles;
    case Role::ref: return algorithm.uses_side_roles || algorithm.ref_with_actor;
    case Role::rollout: return algorithm.rollout_engines;
  }
  return false;
}

// The rows it cannot run without: the actor, and the engines where it
// generates. (A reward source and a critic depend on other settings: the
// row's needs_reward, the advantage estimator's needs_critic.)
constexpr bool algorithm_requires(const AlgorithmRow& algorithm, Role role) {
  return role == Role::actor || (role == Role::rollout && algorithm.rollout_engines);
}

constexpr std::string_view step_phase_name(StepPhase phase) {
  switch (phase) {
    case StepPhase::rollout: return "rollout";
    case StepPhase::scoring: return "scoring";
    case StepPhase::training: return "training";
    case StepPhase::sync: return "sync";
  }
  return "?";
}

}  // namespace meshrun
