// The pure rules of a loaded recipe, as rows of one table
// (include/meshrun/recipe/rules.hpp): everything a user of OpenRLHF or
// torchtitan would otherwise only learn when the job fails at run time, read
// off the Recipe alone. Each row is a rule id, what it checks, the keys it
// reads and the check that reports it; recipe_rules() also holds the rows
// the loader reports. The rows that look at files, the tokenizer or the hook
// script, and the planner's, are lint's table (src/lint/lint_rules.cpp).
#include "meshrun/recipe/rules.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/recipe/colocation.hpp"
#include "meshrun/recipe/step_arithmetic.hpp"
#include "meshrun/recipe/lora_targets.hpp"
#include "meshrun/recipe/suggest.hpp"

namespace meshrun {
namespace {

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

// Saturating products and sums of recipe counts (step_arithmetic.hpp).
using step_arithmetic::plus;
using step_arithmetic::times;

std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string processes_text(int64_t n) { return std::to_string(n) + (n == 1 ? " process" : " processes"); }

std::string shape(const RoleConfig& role) {
  return std::to_string(role.nodes) + (role.nodes == 1 ? " node" : " nodes") + " × " +
         std::to_string(role.procs_per_node);
}

std::optional<int64_t> effective_dp(const RoleConfig& role) {
  return step_arithmetic::data_parallel_degree(role.processes(), role.mesh);
}

// Names of the advantage estimators that do (or do not) need a critic.
std::string estimators_where(bool needs_critic) {
  std::string out;
  for (const AdvantageRow& row : kAdvantageEstimators)
    if (row.needs_critic == needs_critic) out += (out.empty() ? "" : ", ") + in_quotes(std::string(row.name));
  return out;
}

// ---- launch -------------------------------------------------------------------

void check_backend_device(const Recipe& r, Diagnostics& d) {
  const auto& launch = r.launch;
  if (launch.device == "cpu" && launch.backend == "nccl") {
    d.error(r.where("launch.backend"), "launch.backend-device",
            "backend \"nccl\" needs device \"cuda\", but launch.device is \"cpu\" (" + r.where("launch.device").str() +
                ")",
            "use backend = \"gloo\" or \"auto\" on cpu");
  }
}

void check_local_nodes(const Recipe& r, Diagnostics& d) {
  const auto& launch = r.launch;
  if (launch.type == "local" && launch.nodes > 1) {
    d.error(r.where("launch.type"), "launch.local-nodes",
            "the local launcher starts processes on this machine only, but launch.nodes = " +
                std::to_string(launch.nodes),
            "use type \"slurm\", \"mpi\" or \"torchrun\" for several nodes");
  }
}

// `ray job submit --address` talks HTTP to the dashboard: a GCS address
// (host:6379) or a ray:// client address would fail only at submission.
void check_ray_address(const Recipe& r, Diagnostics& d) {
  const std::string& address = r.launch.address;
  if (address.empty()) return;
  std::string_view rest = address;
  const bool http = rest.starts_with("http://") || rest.starts_with("https://");
  if (http) rest.remove_prefix(rest.find("://") + 3);
  const bool blank = rest.empty() || rest.find_first_of(" \t\r\n") != std::string_view::npos;
  if (!http || blank) {
    d.error(r.where("launch.address"), "launch.ray-address",
            "launch.address = " + in_quotes(address) + " is not a Ray job server's address (http://host:port)",
            "give the dashboard's address, e.g. \"http://head:8265\"");
  }
}

// ---- roles --------------------------------------------------------------------

// roles.actor-required, roles.hook-reward-only, roles.model-required,
// roles.unused, roles.placement (role by role), roles.critic-required,
// roles.critic-unused and roles.reward-required.
void check_roles(const Recipe& r, Diagnostics& d) {
  const AlgorithmRow& algorithm = row_of(r.algorithm);
  if (!r.has_role(Role::actor)) {
    d.error(r.where("algorithm"), "roles.actor-required",
            "algorithm " + in_quotes(algorithm.name) + " trains an actor, but the recipe has no [roles.actor]",
            "add a [roles.actor] table with a model");
  }
  for (const auto& role : r.roles) {
    const std::string table = "roles." + role.name();
    if (!role.hook.empty() && role.role != Role::reward) {
      d.error(r.where(table + ".hook"), "roles.hook-reward-only",
              "only the reward role can be computed by a hook, not " + role.name());
    }
    if (role.role == Role::reward && !role.hook.empty() && !role.model.empty()) {
      d.error(r.where(table + ".hook"), "roles.model-required", "the reward role names both a model and a hook",
              "keep model and shape its reward with [hooks] reward, or keep only the hook");
    } else if (role.model.empty() && (role.role != Role::reward || role.hook.empty())) {
      d.error(r.where(table), "roles.model-required",
              "role " + role.name() + " names no model" + (role.role == Role::reward ? " or hook" : ""),
              "set model = a model directory, a public model name or \"builtin:tiny\"");
    }
    if (!algorithm_uses(algorithm, role.role)) {
      d.warning(r.where(table), "roles.unused",
                "role " + role.name() + " is not used by algorithm " + in_quotes(algorithm.name));
    }
    if (takes_processes(r, role)) {
      if (role.nodes > r.launch.nodes) {
        d.error(r.where(table + ".nodes"), "roles.placement",
                "role " + role.name() + " wants " + std::to_string(role.nodes) + " nodes, but launch.nodes = " +
                    std::to_string(r.launch.nodes));
      }
      if (role.procs_per_node > r.launch.procs_per_node) {
        d.error(r.where(table + ".procs_per_node"), "roles.placement",
                "role " + role.name() + " wants " + std::to_string(role.procs_per_node) +
                    " processes per node, but launch.procs_per_node = " + std::to_string(r.launch.procs_per_node));
      }
    }
  }
  if (algorithm.reinforcement) {
    const AdvantageRow& advantage = row_of(r.ppo.advantage);
    SourceLocation advantage_at = r.is_set("ppo.advantage") ? r.where("ppo.advantage") : r.where("algorithm");
    if (advantage.needs_critic && !r.has_role(Role::critic)) {
      d.error(advantage_at, "roles.critic-required",
              "advantage " + in_quotes(advantage.name) + " needs a critic, but the recipe has no [roles.critic]",
              "add [roles.critic], or use an advantage without a critic: " + estimators_where(false));
    }
    if (!advantage.needs_critic && r.has_role(Role::critic)) {
      d.warning(r.where("roles.critic"), "roles.critic-unused",
                "advantage " + in_quotes(advantage.name) + " does not use the critic");
    }
  }
  const RoleConfig* reward = r.role(Role::reward);
  // An [env] script's step rewards are a reward source of their own.
  bool reward_source = (reward && (!reward->model.empty() || !reward->hook.empty())) || !r.hooks.script.empty() ||
                       (has_env(r) && algorithm.rollout_engines);
  if (algorithm.needs_reward && !reward_source) {
    d.error(r.where("algorithm"), "roles.reward-required",
            "algorithm " + in_quotes(algorithm.name) +
                " needs a reward: the recipe has no [roles.reward] model or hook, no [hooks] script and no [env] script",
            "add [roles.reward] with a model, a [hooks] script defining reward(batch), or an [env] environment");
  }
}

// ---- colocation ---------------------------------------------------------------

// colocate.conflict, then colocate.unknown-role and colocate.duplicate name
// by name as written (a name no row has is left out of the resolved groups,
// so it is reported from here), then colocate.equal-placement and
// colocate.engines unit by unit.
void check_colocation(const Recipe& r, Diagnostics& d) {
  const auto& colocate = r.colocate;
  if (colocate.all && !colocate.group_names.empty()) {
    d.error(r.where("colocate.groups"), "colocate.conflict",
            "colocate.all = true already puts every role together; colocate.groups is ambiguous beside it");
  }
  std::set<Role> seen;
  std::set<std::string> seen_unknown;
  // Every row's name: the roles and the engines' "rollout".
  std::vector<std::string> known;
  for (const RoleRow& row : kRoles) known.emplace_back(row.name);
  for (const auto& group : colocate.group_names) {
    for (const auto& name : group) {
      const std::optional<Role> role = role_named(name);
      if (!role) {
        auto close = closest_match(name, known);
        d.error(r.where("colocate.groups"), "colocate.unknown-role",
                "colocation group names unknown role " + in_quotes(name),
                close ? "did you mean " + in_quotes(*close) + "?" : "roles are actor, critic, reward, ref and rollout");
      } else if (*role != Role::rollout && !r.has_role(*role)) {
        d.error(r.where("colocate.groups"), "colocate.unknown-role",
                "colocation group names " + name + ", but the recipe has no [roles." + name + "]");
      }
      if (role ? !seen.insert(*role).second : !seen_unknown.insert(name).second) {
        d.error(r.where("colocate.groups"), "colocate.duplicate", name + " is in more than one colocation group");
      }
    }
  }
  SourceLocation where = colocate.all ? r.where("colocate.all") : r.where("colocate.groups");
  for (const auto& unit : placement_units(r)) {
    const RoleConfig* first = unit.roles.empty() ? nullptr : unit.roles.front();
    for (const RoleConfig* role : unit.roles) {
      if (role->nodes != first->nodes || role->procs_per_node != first->procs_per_node) {
        d.error(where, "colocate.equal-placement",
                "colocated roles " + first->name() + " and " + role->name() + " differ in placement: " +
                    shape(*first) + " vs " + shape(*role),
                "give colocated roles the same nodes and procs_per_node");
      }
    }
    if (first && unit.with_engines && unit.processes(r) != engine_processes(r)) {
      const int64_t processes = unit.processes(r);
      const int tp = r.rollout.tensor_parallel;
      // engines = processes / tp only works when tp divides the processes.
      std::string suggestion = processes % tp == 0
                                   ? "set engines = " + std::to_string(processes / tp) + " or change tensor_parallel"
                                   : "make engines × tensor_parallel = " + std::to_string(processes) +
                                         ", e.g. engines = " + std::to_string(processes) + " and tensor_parallel = 1";
      d.error(where, "colocate.engines",
              "engines colocated with " + first->name() + " need exactly its " + std::to_string(processes) +
                  (processes == 1 ? " process" : " processes") + ", but rollout.engines × tensor_parallel = " +
                  std::to_string(r.rollout.engines) + " × " + std::to_string(tp) + " = " +
                  std::to_string(engine_processes(r)),
              suggestion);
    }
  }
}

void check_fit(const Recipe& r, Diagnostics& d) {
  int64_t needed = 0;
  std::string parts;
  for (const auto& unit : placement_units(r)) {
    needed = plus(needed, unit.processes(r));
    // "actor 4", "actor+ref 8", and "engines 2×4 = 8" for engines alone.
    parts += (parts.empty() ? "" : ", ") + unit.describe(r) + (unit.roles.empty() ? " = " : " ") +
             std::to_string(unit.processes(r));
  }
  const int64_t world = times(r.launch.nodes, r.launch.procs_per_node);
  if (needed > world) {
    d.error(r.where("launch.nodes"), "roles.fit",
            "roles and engines need " + std::to_string(needed) + " processes (" + parts +
                "), but the cluster has launch.nodes × procs_per_node = " + std::to_string(r.launch.nodes) + " × " +
                std::to_string(r.launch.procs_per_node) + " = " + std::to_string(world),
            "add nodes, give roles fewer processes, or colocate roles ([colocate] groups or all)");
  }
}

// ---- mesh ---------------------------------------------------------------------

SourceLocation mesh_key(const Recipe& r, const RoleConfig& role, const std::string& key) {
  std::string own = "roles." + role.name() + ".mesh." + key;
  return r.is_set(own) ? r.where(own) : r.where("mesh." + key);
}

// mesh.sp-unsupported, mesh.sp-sequence, mesh.tp-node, mesh.infer and
// mesh.product, role by role: roles without a [roles.NAME.mesh] of their own
// share the [mesh] keys these report at.
void check_mesh(const Recipe& r, const RoleConfig& role, Diagnostics& d) {
  const MeshConfig& mesh = role.mesh;
  const int64_t n = role.processes();
  const int64_t tp_sp = times(mesh.tp, mesh.sp);
  const std::string who = "role " + role.name() + " (" + shape(role) + ")";
  const AlgorithmRow& algorithm = row_of(r.algorithm);
  if (mesh.sp > 1 && !algorithm.sequence_parallel) {
    d.error(mesh_key(r, role, "sp"), "mesh.sp-unsupported",
            "sp = " + std::to_string(mesh.sp) + " for " + who + ", but algorithm " + in_quotes(algorithm.name) +
                " does not support sequence parallelism yet",
            "use sp = 1 and spread the processes over dp and tp");
  } else if (mesh.sp > 1) {
    const int64_t length = step_arithmetic::sequence_length(r);
    if (length < 2LL * mesh.sp)
      d.error(mesh_key(r, role, "sp"), "mesh.sp-sequence",
              "sp = " + std::to_string(mesh.sp) + " cuts each sequence into 2 × sp = " +
                  std::to_string(2 * int64_t{mesh.sp}) + " chunks, but " +
                  step_arithmetic::sequence_length_keys(r) + " is " +
                  std::to_string(length),
              "use sp ≤ " + std::to_string(std::max<int64_t>(1, length / 2)));
  }
  if (mesh.tp > role.procs_per_node) {
    d.error(mesh_key(r, role, "tp"), "mesh.tp-node",
            "tp = " + std::to_string(mesh.tp) + " spans nodes: " + who + " has " +
                processes_text(role.procs_per_node) + " per node",
            "keep tp ≤ procs_per_node; tensor parallelism needs the fast links within a node");
  }
  if (mesh.dp == -1) {
    if (n % tp_sp != 0) {
      // Point at what the user wrote: dp = -1 itself, else the degree
      // that does not divide.
      bool dp_written = r.is_set("roles." + role.name() + ".mesh.dp") || r.is_set("mesh.dp");
      const char* culprit = dp_written ? "dp" : (n % mesh.tp != 0 || mesh.sp == 1 ? "tp" : "sp");
      d.error(mesh_key(r, role, culprit), "mesh.infer",
              "cannot infer dp: " + who + " has " + processes_text(n) + ", not divisible by tp × sp = " +
                  std::to_string(mesh.tp) + " × " + std::to_string(mesh.sp));
    }
  } else if (times(tp_sp, mesh.dp) != n) {
    std::string suggestion = "set dp = -1 to infer it";
    if (n % tp_sp == 0) suggestion = "set dp = " + std::to_string(n / tp_sp) + ", or -1 to infer it";
    d.error(mesh_key(r, role, "dp"), "mesh.product",
            "tp × sp × dp = " + std::to_string(mesh.tp) + " × " + std::to_string(mesh.sp) + " × " +
                std::to_string(mesh.dp) + " = " + std::to_string(times(tp_sp, mesh.dp)) + ", but " + who + " has " +
                processes_text(n),
            suggestion);
  }
}

void check_meshes(const Recipe& r, Diagnostics& d) {
  for (const RoleConfig* role : placed_roles(r)) check_mesh(r, *role, d);
}

// ---- batch --------------------------------------------------------------------

// batch.train-divisible (trained role by role), then for RL
// batch.train-samples, batch.rollout-divisible and batch.group-samples.
void check_batch(const Recipe& r, Diagnostics& d) {
  const auto& batch = r.batch;
  for (const RoleConfig* role : trained_roles(r)) {
    auto dp = effective_dp(*role);
    if (!dp) continue;
    const int64_t per_step = step_arithmetic::items_per_pass(batch.micro_train, *dp);
    if (!step_arithmetic::splits_into_passes(batch.train, batch.micro_train, *dp)) {
      const int64_t lower = std::max(per_step, batch.train / per_step * per_step);
      d.error(r.where("batch.train"), "batch.train-divisible",
              "train = " + std::to_string(batch.train) + " is not a multiple of micro_train × dp = " +
                  std::to_string(batch.micro_train) + " × " + std::to_string(*dp) + " = " +
                  std::to_string(per_step) + " (role " + role->name() + ")",
              "use train = " + std::to_string(lower) + " or " + std::to_string(plus(lower, per_step)));
    }
  }
  if (!row_of(r.algorithm).rollout_engines) return;
  const int64_t samples = step_arithmetic::rollout_samples(batch);
  if (samples < batch.train) {
    d.error(r.where("batch.train"), "batch.train-samples",
            "train = " + std::to_string(batch.train) + " is more than the " + std::to_string(samples) +
                " samples of a step (rollout × n_samples_per_prompt): no optimizer step would run",
            "use train ≤ " + std::to_string(samples) + ", a divisor of it");
  } else if (const int64_t leftover = step_arithmetic::leftover_samples(samples, batch.train); leftover != 0) {
    d.warning(r.where("batch.train"), "batch.train-samples",
              "rollout × n_samples_per_prompt = " + std::to_string(samples) +
                  " samples per step are not a multiple "
                  "of train = " +
                  std::to_string(batch.train) + ": the last " + std::to_string(leftover) +
                  " of each pass are not trained on",
              "make train divide " + std::to_string(samples));
  }
  const std::string samples_text = "rollout × n_samples_per_prompt = " + std::to_string(batch.rollout) + " × " +
                                   std::to_string(batch.n_samples_per_prompt) + " = " + std::to_string(samples);
  if (samples % batch.micro_rollout != 0) {
    d.error(r.where("batch.micro_rollout"), "batch.rollout-divisible",
            samples_text + " is not divisible by micro_rollout = " + std::to_string(batch.micro_rollout));
  }
  if (const RoleConfig* actor = r.role(Role::actor)) {
    if (auto dp = effective_dp(*actor); dp && samples % *dp != 0) {
      d.error(r.where("batch.rollout"), "batch.rollout-divisible",
              samples_text + " is not divisible by the actor's dp = " + std::to_string(*dp));
    }
  }
  const AdvantageRow& advantage = row_of(r.ppo.advantage);
  if (row_of(r.algorithm).reinforcement && advantage.needs_groups && batch.n_samples_per_prompt < 2) {
    d.error(r.is_set("batch.n_samples_per_prompt") ? r.where("batch.n_samples_per_prompt") : r.where("ppo.advantage"),
            "batch.group-samples",
            "advantage " + in_quotes(advantage.name) +
                " compares the samples of each prompt, but n_samples_per_prompt = " +
                std::to_string(batch.n_samples_per_prompt),
            "set n_samples_per_prompt ≥ 2");
  }
}

// ---- rollout ------------------------------------------------------------------

void check_rollout_tp_node(const Recipe& r, Diagnostics& d) {
  if (!row_of(r.algorithm).rollout_engines) return;
  if (r.rollout.tensor_parallel > r.launch.procs_per_node) {
    d.error(r.where("rollout.tensor_parallel"), "rollout.tp-node",
            "an engine's tensor_parallel = " + std::to_string(r.rollout.tensor_parallel) +
                " processes must share one node, but launch.procs_per_node = " +
                std::to_string(r.launch.procs_per_node));
  }
}

// Asynchronous rollouts overlap generation with the update: the engines need
// processes of their own.
void check_async_engines(const Recipe& r, Diagnostics& d) {
  if (!row_of(r.algorithm).rollout_engines || r.rollout.max_staleness < 1) return;
  bool colocated = r.colocate.all;
  for (const auto& group : r.colocate.groups)
    for (Role role : group) colocated = colocated || role == Role::rollout;
  if (colocated)
    d.error(r.where("rollout.max_staleness"), "rollout.async-engines",
            "rollout.max_staleness = " + std::to_string(r.rollout.max_staleness) +
                " generates while the trainer updates, but the engines share processes with the roles (" +
                (r.colocate.all ? std::string("colocate.all") : std::string("colocate.groups")) + ")",
            "give the engines processes of their own (no colocation of \"rollout\"), or use max_staleness = 0");
}

// ---- data ---------------------------------------------------------------------
// What the files themselves hold is lint's (src/lint/lint_rules.cpp).

void check_data_required(const Recipe& r, Diagnostics& d) {
  if (!r.data.path.empty()) return;
  d.error(r.is_set("data") ? r.where("data") : r.where("algorithm"), "data.required",
          "algorithm " + in_quotes(name_of(r.algorithm)) + " reads a dataset, but data.path is not set",
          "set [data] path to a JSONL file");
}

void check_eval_supported(const Recipe& r, Diagnostics& d) {
  if (r.data.path.empty()) return;  // data.required's
  if (!r.data.eval_path.empty() && !row_of(r.algorithm).evaluates)
    d.error(r.where("data.eval_path"), "data.eval-unsupported",
            "algorithm " + in_quotes(name_of(r.algorithm)) + " does not evaluate on a held-out set",
            "remove data.eval_path");
}

// ---- hooks --------------------------------------------------------------------

void check_hooks_need_script(const Recipe& r, Diagnostics& d) {
  if (!r.hooks.script.empty()) return;
  // A name equal to the default is harmless without a script (a resolved
  // recipe writes every default out).
  const HooksConfig defaults;
  const std::pair<const char*, bool> named[] = {{"reward", r.hooks.reward != defaults.reward},
                                                {"on_rollout", r.hooks.on_rollout != defaults.on_rollout},
                                                {"on_step", r.hooks.on_step != defaults.on_step}};
  for (const auto& [point, renamed] : named) {
    std::string key = std::string("hooks.") + point;
    if (r.is_set(key) && renamed)
      d.error(r.where(key), "hooks.needs-script", key + " names a hook function, but [hooks] script is not set");
  }
  if (const RoleConfig* reward = r.role(Role::reward); reward && !reward->hook.empty()) {
    d.error(r.where("roles.reward.hook"), "hooks.needs-script",
            "roles.reward.hook names a hook function, but [hooks] script is not set");
  }
}

// ---- env ------------------------------------------------------------------------

void check_env(const Recipe& r, Diagnostics& d) {
  if (!has_env(r)) {
    // A default written out (a resolved recipe writes them all) is harmless.
    const EnvConfig defaults;
    const EnvConfig& env = r.env;
    const std::pair<const char*, bool> keys[] = {
        {"env.max_turns", env.max_turns != defaults.max_turns},
        {"env.max_observation_tokens", env.max_observation_tokens != defaults.max_observation_tokens},
        {"env.max_episode_tokens", env.max_episode_tokens != defaults.max_episode_tokens},
        {"env.observation_role", env.observation_role != defaults.observation_role},
        {"env.timeout_s", env.timeout_s != defaults.timeout_s}};
    for (const auto& [key, changed] : keys)
      if (changed && r.is_set(key))
        d.warning(r.where(key), "env.needs-script", std::string(key) + " is set, but [env] script is not: "
                                                                   "episodes stay single-turn");
    return;
  }
  const AlgorithmRow& algorithm = row_of(r.algorithm);
  if (!algorithm.rollout_engines) {
    d.error(r.where("env.script"), "env.needs-rollouts",
            "algorithm " + in_quotes(algorithm.name) + " generates nothing, so an environment has no turns to answer",
            "remove [env], or use algorithm = \"ppo\"");
    return;
  }
  if (r.rollout.tensor_parallel > 1)
    d.error(r.where("rollout.tensor_parallel"), "env.engine-tp",
            "multi-turn episodes run their environment beside a single-process engine, but "
            "rollout.tensor_parallel = " + std::to_string(r.rollout.tensor_parallel),
            "use rollout.tensor_parallel = 1 with [env] (more engines instead)");
  const int64_t first_turn = int64_t{r.rollout.max_prompt_len} + r.rollout.max_new_tokens;
  if (r.env.max_episode_tokens > 0 && r.env.max_episode_tokens < first_turn)
    d.error(r.where("env.max_episode_tokens"), "env.episode-length",
            "max_episode_tokens = " + std::to_string(r.env.max_episode_tokens) +
                " cannot hold a prompt and one turn: rollout.max_prompt_len + rollout.max_new_tokens = " +
                std::to_string(first_turn),
            "use max_episode_tokens ≥ " + std::to_string(first_turn) + ", or 0 for the default");
  if (r.ppo.overlong_buffer > 0 && r.env.max_turns > 1)
    d.error(r.where("ppo.overlong_buffer"), "env.overlong",
            "ppo.overlong_buffer penalises one response's length against max_new_tokens; a multi-turn episode "
            "(env.max_turns = " + std::to_string(r.env.max_turns) + ") has several",
            "remove ppo.overlong_buffer, or bound the episodes with env.max_episode_tokens");
}

// ---- settings that only make sense together -----------------------------------
// The resolved form writes every default out, so only a choice other than
// the default is the user's.

void check_loss_turns_used(const Recipe& r, Diagnostics& d) {
  const AlgorithmRow& algorithm = row_of(r.algorithm);
  if (algorithm.data != DataShape::prompt_response && r.data.loss_turns != LossTurns::all)
    d.warning(r.where("data.loss_turns"), "data.loss-turns-unused",
              "algorithm " + in_quotes(algorithm.name) +
                  " does not train on chat samples' assistant turns; "
                  "data.loss_turns = " +
                  in_quotes(name_of(r.data.loss_turns)) + " is ignored");
}

void check_label_used(const Recipe& r, Diagnostics& d) {
  const AlgorithmRow& algorithm = row_of(r.algorithm);
  if (!algorithm.reinforcement && !r.data.label_key.empty())
    d.warning(r.where("data.label_key"), "data.label-unused",
              "algorithm " + in_quotes(algorithm.name) + " does not read labels; data.label_key is ignored");
}

void check_clip_high(const Recipe& r, Diagnostics& d) {
  if (!row_of(r.algorithm).reinforcement) return;
  const PpoConfig& ppo = r.ppo;
  if (r.is_set("ppo.eps_clip_high") && ppo.eps_clip_high < ppo.eps_clip) {
    d.error(r.where("ppo.eps_clip_high"), "ppo.clip-high",
            "eps_clip_high = " + number(ppo.eps_clip_high) + " is below eps_clip = " + number(ppo.eps_clip) + " (" +
                r.where("ppo.eps_clip").str() + ")",
            "clip-higher widens the upper bound: use eps_clip_high ≥ eps_clip");
  }
}

void check_dual_clip(const Recipe& r, Diagnostics& d) {
  if (!row_of(r.algorithm).reinforcement) return;
  const PpoConfig& ppo = r.ppo;
  if (ppo.dual_clip != 0 && ppo.dual_clip <= 1) {
    d.error(r.where("ppo.dual_clip"), "ppo.dual-clip",
            "dual_clip = " + number(ppo.dual_clip) + " would bound the loss below the clipped surrogate",
            "use 0 to turn dual clip off, or a value > 1 (3 is common)");
  }
}

void check_kl_needs_ref(const Recipe& r, Diagnostics& d) {
  if (!row_of(r.algorithm).reinforcement) return;
  const RoleConfig* ref = r.role(Role::ref);
  if (r.ppo.kl_mode == KlMode::loss && (!ref || ref->model.empty())) {
    d.error(r.where("ppo.kl_mode"), "ppo.kl-needs-ref",
            "kl_mode \"loss\" adds the KL to a reference model to the actor's loss, but the recipe has no "
            "[roles.ref] model",
            "add [roles.ref] with the actor's starting model, or use kl_mode = \"reward\"");
  }
}

void check_dynamic_sampling_groups(const Recipe& r, Diagnostics& d) {
  if (!row_of(r.algorithm).reinforcement) return;
  if (r.ppo.dynamic_sampling && r.batch.n_samples_per_prompt < 2) {
    d.error(r.is_set("batch.n_samples_per_prompt") ? r.where("batch.n_samples_per_prompt")
                                                    : r.where("ppo.dynamic_sampling"),
            "ppo.dynamic-sampling-groups",
            "dynamic_sampling drops prompts whose samples all got the same reward, but n_samples_per_prompt = " +
                std::to_string(r.batch.n_samples_per_prompt) + " gives one sample per prompt",
            "set n_samples_per_prompt ≥ 2, or turn dynamic_sampling off");
  }
}

void check_overlong_buffer(const Recipe& r, Diagnostics& d) {
  if (!row_of(r.algorithm).reinforcement) return;
  const PpoConfig& ppo = r.ppo;
  if (ppo.overlong_buffer > 0 && ppo.overlong_buffer >= r.rollout.max_new_tokens) {
    d.error(r.where("ppo.overlong_buffer"), "ppo.overlong-buffer",
            "overlong_buffer = " + std::to_string(ppo.overlong_buffer) + " is not below rollout.max_new_tokens = " +
                std::to_string(r.rollout.max_new_tokens) + ": every response would be penalised",
            "use a buffer smaller than max_new_tokens, e.g. max_new_tokens / 4");
  }
}

void check_rollout_is_band(const Recipe& r, Diagnostics& d) {
  if (!row_of(r.algorithm).reinforcement) return;
  const PpoConfig& ppo = r.ppo;
  const RolloutCorrectionRow& row = row_of(ppo.rollout_correction);
  if ((row.masks_tokens || row.masks_sequences) && ppo.rollout_is_low >= ppo.rollout_is_high)
    d.error(r.where(r.is_set("ppo.rollout_is_high") ? "ppo.rollout_is_high" : "ppo.rollout_is_low"),
            "ppo.rollout-is-band",
            "rollout_is_low = " + number(ppo.rollout_is_low) + " is not below rollout_is_high = " +
                number(ppo.rollout_is_high) + ": rollout_correction " + in_quotes(row.name) +
                " would mask every token",
            "keep a band around 1, e.g. rollout_is_low = 0.5, rollout_is_high = 2");
}

void check_partial_async(const Recipe& r, Diagnostics& d) {
  if (!row_of(r.algorithm).rollout_engines || !r.rollout.partial || r.rollout.max_staleness >= 1) return;
  d.error(r.where("rollout.partial"), "rollout.partial-async",
          "rollout.partial = true interrupts the engines' sequences when an update ends, but rollout.max_staleness "
          "= 0 generates only between updates",
          "set rollout.max_staleness ≥ 1 (engines on processes of their own), or remove rollout.partial");
}

void check_rollout_correction_async(const Recipe& r, Diagnostics& d) {
  if (!row_of(r.algorithm).reinforcement) return;
  const RolloutCorrectionRow& row = row_of(r.ppo.rollout_correction);
  if (row.needs_async && r.rollout.max_staleness < 1)
    d.error(r.where("ppo.rollout_correction"), "ppo.rollout-correction-async",
            "rollout_correction " + in_quotes(row.name) +
                " corrects for the engines' lag behind the trainer, but rollout.max_staleness = 0 runs "
                "synchronously",
            "set rollout.max_staleness ≥ 1 (engines on processes of their own), or use rollout_correction = "
            "\"tis\"");
}

// [dpo] settings, and the pairs' keys.
bool trains_on_pairs(const Recipe& r) { return row_of(r.algorithm).data == DataShape::preference; }

void check_label_smoothing(const Recipe& r, Diagnostics& d) {
  if (!trains_on_pairs(r)) return;
  if (r.algorithm == Algorithm::dpo && r.dpo.label_smoothing > 0 && r.dpo.loss != DpoLoss::sigmoid) {
    d.error(r.where("dpo.label_smoothing"), "dpo.label-smoothing",
            "label_smoothing = " + number(r.dpo.label_smoothing) + " applies to the sigmoid loss, not " +
                in_quotes(name_of(r.dpo.loss)),
            "use loss = \"sigmoid\", or label_smoothing = 0");
  }
}

void check_pair_keys(const Recipe& r, Diagnostics& d) {
  if (!trains_on_pairs(r)) return;
  if (r.data.chosen_key == r.data.rejected_key) {
    d.error(r.where("data.rejected_key"), "dpo.pair-keys",
            "data.chosen_key and data.rejected_key are both " + in_quotes(r.data.chosen_key),
            "name the two responses of a pair by different keys");
  }
}

void check_pair_packing(const Recipe& r, Diagnostics& d) {
  if (!trains_on_pairs(r)) return;
  if (r.data.packing) {
    d.error(r.where("data.packing"), "dpo.packing",
            "algorithm " + in_quotes(name_of(r.algorithm)) +
                " trains each pair's two sequences as rows of "
                "one micro-batch; data.packing does not apply",
            "set data.packing = false");
  }
}

// ---- LoRA ---------------------------------------------------------------------
// On the actor of an algorithm that trains adapters, on projections that
// exist (the rank against the layers is the plan's).

void check_lora_supported(const Recipe& r, Diagnostics& d) {
  const AlgorithmRow& algorithm = row_of(r.algorithm);
  for (const RoleConfig& role : r.roles) {
    if (role.lora_rank == 0) continue;
    const std::string key = "roles." + role.name() + ".lora_rank";
    if (role.role != Role::actor) {
      d.error(r.where(key), "lora.unsupported",
              role.name() + " is not trained; only the actor's training takes LoRA adapters", "remove " + key);
    } else if (!algorithm.lora) {
      d.error(r.where(key), "lora.unsupported",
              "algorithm " + in_quotes(algorithm.name) + " does not train LoRA adapters (sft, dpo and ppo do)",
              "remove " + key + " to train the whole model");
    }
  }
}

void check_lora_targets(const Recipe& r, Diagnostics& d) {
  for (const RoleConfig& role : r.roles) {
    if (role.lora_rank == 0) continue;
    const std::string targets_key = "roles." + role.name() + ".lora_targets";
    if (role.lora_targets.empty())
      d.error(r.where(targets_key), "lora.target",
              "lora_rank = " + std::to_string(role.lora_rank) + " but lora_targets names no projection",
              "name some of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
    std::vector<std::string> known(std::begin(kLoraTargets), std::end(kLoraTargets));
    std::set<std::string> seen;
    for (const std::string& target : role.lora_targets) {
      if (!seen.insert(target).second) {
        d.error(r.where(targets_key), "lora.target", in_quotes(target) + " is listed twice",
                "name each projection once");
        continue;
      }
      if (is_lora_target(target)) continue;
      const auto close = closest_match(target, known);
      d.error(r.where(targets_key), "lora.target",
              in_quotes(target) + " names no projection of a Llama-style decoder layer",
              close ? "did you mean " + in_quotes(*close) + "?"
                    : "use q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj or down_proj");
    }
  }
}

}  // namespace

const std::vector<RuleRow>& recipe_rules() {
  using enum RuleStage;
  using enum RulePass;
  static const std::vector<RuleRow> rows = {
      // The loader's, for every key (load_recipe).
      {"schema.syntax", "The file is valid TOML, its keys nesting at most 32 levels deep.", {}, schema},
      {"schema.unknown-key", "Every key and table is one the schema knows (with a suggestion).", {}, schema},
      {"schema.type", "Every value has the key's type.", {}, schema},
      {"schema.range", "Numbers lie in the key's range.", {}, schema},
      {"schema.choice", "Strings are one of the key's values (with a suggestion).", {}, schema},
      {"schema.reserved",
       "Chat template variables do not set the names the renderer sets itself (messages, add_generation_prompt, "
       "bos_token, eos_token).",
       {"data.chat_template_kwargs"}, schema},
      {"schema.required", "Required keys are present.", {"algorithm"}, schema},
      {"schema.file", "The recipe file exists and can be read.", {}, schema},
      {"schema.include", "Included files exist, parse, include no cycle, and number at most 64 reads in all.",
       {"include"}, schema},
      {"schema.override", "A --set override has the form section.key=value.", {}, schema},

      // The pure rules (validate_recipe).
      {"launch.backend-device", "device \"cpu\" needs backend \"gloo\" or \"auto\".",
       {"launch.device", "launch.backend"}, recipe, launch, check_backend_device},
      {"launch.local-nodes", "The local launcher runs on one node: launch.type \"local\" needs nodes = 1.",
       {"launch.type", "launch.nodes"}, recipe, launch, check_local_nodes},
      {"launch.ray-address", "launch.address is a Ray job server's http:// or https:// address.",
       {"launch.address"}, recipe, launch, check_ray_address},

      {"mesh.product", "tp × sp × dp equals the role's process count.",
       {"mesh.tp", "mesh.sp", "mesh.dp", "roles.*.mesh.tp", "roles.*.mesh.sp", "roles.*.mesh.dp", "roles.*.nodes",
        "roles.*.procs_per_node"},
       recipe, mesh, check_meshes},
      {"mesh.infer", "With dp = -1, tp × sp divides the role's process count.",
       {"mesh.tp", "mesh.sp", "mesh.dp", "roles.*.mesh.tp", "roles.*.mesh.sp", "roles.*.mesh.dp"}, recipe, mesh,
       check_meshes},
      {"mesh.tp-node", "A tensor-parallel group stays on one node: tp ≤ the role's procs_per_node.",
       {"mesh.tp", "roles.*.mesh.tp", "roles.*.procs_per_node"}, recipe, mesh, check_meshes},
      {"mesh.sp-unsupported",
       "sp > 1 only where the algorithm supports sequence parallelism (its row in the algorithm table says so).",
       {"mesh.sp", "roles.*.mesh.sp", "algorithm"}, recipe, mesh, check_meshes},
      {"mesh.sp-sequence",
       "Sequence parallelism cuts each sequence into 2 × sp chunks: the longest sequence holds at least that many "
       "tokens.",
       {"mesh.sp", "roles.*.mesh.sp", "data.max_len", "rollout.max_prompt_len", "rollout.max_new_tokens"}, recipe,
       mesh, check_meshes},

      {"batch.train-divisible",
       "train is a multiple of micro_train × dp of every trained role (gradient accumulation ≥ 1).",
       {"batch.train", "batch.micro_train", "mesh.dp", "roles.*.mesh.dp"}, recipe, batch, check_batch},
      {"batch.rollout-divisible", "rollout × n_samples_per_prompt is divisible by micro_rollout and by the actor's dp.",
       {"batch.rollout", "batch.n_samples_per_prompt", "batch.micro_rollout"}, recipe, batch, check_batch},
      {"batch.train-samples",
       "RL: train is at most rollout × n_samples_per_prompt (error), and divides it, or the rest of each pass goes "
       "untrained (warning).",
       {"batch.train", "batch.rollout", "batch.n_samples_per_prompt"}, recipe, batch, check_batch},
      {"batch.group-samples", "Advantage estimators that compare a prompt's samples need n_samples_per_prompt > 1.",
       {"ppo.advantage", "batch.n_samples_per_prompt"}, recipe, batch, check_batch},

      {"roles.actor-required", "Every algorithm trains an actor.", {"roles.*"}, recipe, roles, check_roles},
      {"roles.critic-required", "An advantage estimator that needs a critic (gae) has [roles.critic].",
       {"ppo.advantage", "roles.*"}, recipe, roles, check_roles},
      {"roles.critic-unused", "A critic is only used by an advantage estimator that needs one (warning).",
       {"ppo.advantage", "roles.*"}, recipe, roles, check_roles},
      {"roles.reward-required", "PPO needs a reward model, a reward hook, or both.",
       {"roles.*.model", "roles.*.hook", "hooks.reward"}, recipe, roles, check_roles},
      {"roles.model-required", "Every role names a model (the reward role may name a hook instead, not both).",
       {"roles.*.model", "roles.*.hook"}, recipe, roles, check_roles},
      {"roles.hook-reward-only", "Only the reward role can be a hook.", {"roles.*.hook"}, recipe, roles,
       check_roles},
      {"roles.unused", "Roles other than the actor are unused by SFT (warning).", {"algorithm", "roles.*"}, recipe,
       roles, check_roles},
      {"roles.placement", "A role's nodes and procs_per_node fit the cluster's.",
       {"roles.*.nodes", "roles.*.procs_per_node", "launch.nodes", "launch.procs_per_node"}, recipe, roles,
       check_roles},
      {"roles.fit",
       "The processes of all non-colocated roles plus rollout engines × tensor_parallel fit in "
       "nodes × procs_per_node.",
       {"roles.*.nodes", "roles.*.procs_per_node", "rollout.engines", "rollout.tensor_parallel", "launch.nodes",
        "launch.procs_per_node"},
       recipe, fit, check_fit},

      {"rollout.tp-node", "An engine stays on one node: tensor_parallel ≤ procs_per_node.",
       {"rollout.tensor_parallel", "launch.procs_per_node"}, recipe, rollout, check_rollout_tp_node},

      {"rollout.async-engines",
       "rollout.max_staleness ≥ 1 (asynchronous rollouts) needs engines on processes of their own, colocated with "
       "no role.",
       {"rollout.max_staleness", "colocate.all", "colocate.groups"}, recipe, rollout, check_async_engines},
      {"rollout.partial-async", "rollout.partial (interrupting sequences for new weights) needs max_staleness ≥ 1.",
       {"rollout.partial", "rollout.max_staleness"}, recipe, rollout, check_partial_async},

      {"colocate.unknown-role", "Colocation groups name roles of the recipe (or \"rollout\").", {"colocate.groups"},
       recipe, colocation, check_colocation},
      {"colocate.duplicate", "A role is in at most one colocation group.", {"colocate.groups"}, recipe, colocation,
       check_colocation},
      {"colocate.conflict", "Use colocate.all or colocate.groups, not both.", {"colocate.all", "colocate.groups"},
       recipe, colocation, check_colocation},
      {"colocate.equal-placement", "Colocated roles have the same nodes and procs_per_node.",
       {"colocate.groups", "colocate.all", "roles.*.nodes", "roles.*.procs_per_node"}, recipe, colocation,
       check_colocation},
      {"colocate.engines",
       "Engines colocated with roles (colocate.all, or \"rollout\" in a group) have exactly the "
       "group's processes: engines × tensor_parallel.",
       {"colocate.all", "colocate.groups", "rollout.engines", "rollout.tensor_parallel"}, recipe, colocation,
       check_colocation},

      {"ppo.clip-high", "eps_clip_high ≥ eps_clip.", {"ppo.eps_clip_high", "ppo.eps_clip"}, recipe, settings,
       check_clip_high},
      {"ppo.dual-clip", "dual_clip is 0 (off) or > 1.", {"ppo.dual_clip"}, recipe, settings, check_dual_clip},
      {"dpo.label-smoothing", "label_smoothing (cDPO) only with the sigmoid loss.",
       {"dpo.label_smoothing", "dpo.loss"}, recipe, pairs, check_label_smoothing},
      {"dpo.pair-keys", "A preference pair's chosen and rejected responses have different keys.",
       {"data.chosen_key", "data.rejected_key"}, recipe, pairs, check_pair_keys},
      {"dpo.packing", "Preference pairs are not packed.", {"data.packing", "algorithm"}, recipe, pairs,
       check_pair_packing},
      {"ppo.kl-needs-ref", "kl_mode \"loss\" needs a [roles.ref] model.", {"ppo.kl_mode", "roles.*"}, recipe,
       settings, check_kl_needs_ref},
      {"ppo.dynamic-sampling-groups", "dynamic_sampling needs n_samples_per_prompt ≥ 2.",
       {"ppo.dynamic_sampling", "batch.n_samples_per_prompt"}, recipe, settings, check_dynamic_sampling_groups},
      {"ppo.rollout-is-band", "rollout_is_low < rollout_is_high when rollout_correction masks by the band.",
       {"ppo.rollout_is_low", "ppo.rollout_is_high", "ppo.rollout_correction"}, recipe, settings,
       check_rollout_is_band},
      {"ppo.rollout-correction-async",
       "A rollout correction for asynchronous rollouts (decoupled) needs rollout.max_staleness ≥ 1.",
       {"ppo.rollout_correction", "rollout.max_staleness"}, recipe, settings, check_rollout_correction_async},
      {"ppo.overlong-buffer", "overlong_buffer < rollout.max_new_tokens.",
       {"ppo.overlong_buffer", "rollout.max_new_tokens"}, recipe, settings, check_overlong_buffer},
      {"data.label-unused", "data.label_key is only read by reinforcement algorithms (warning).",
       {"data.label_key", "algorithm"}, recipe, settings, check_label_used},
      {"data.loss-turns-unused", "data.loss_turns applies to SFT's chat samples only (warning).",
       {"data.loss_turns", "algorithm"}, recipe, settings, check_loss_turns_used},
      {"data.required", "SFT and PPO read a dataset: data.path is set.", {"data.path"}, recipe, data,
       check_data_required},
      {"data.eval-unsupported", "data.eval_path only where the algorithm evaluates (sft, dpo, rm).",
       {"data.eval_path", "algorithm"}, recipe, data, check_eval_supported},

      {"lora.unsupported",
       "LoRA adapters only on the actor of an algorithm that trains them (sft, dpo, ppo), of a model whose "
       "projections are unfused (not Phi-3's qkv_proj / gate_up_proj).",
       {"roles.*.lora_rank", "algorithm", "roles.*.model"}, recipe, lora, check_lora_supported},
      {"lora.target", "lora_targets names each adapted projection once, each a projection of the decoder layer.",
       {"roles.*.lora_targets", "roles.*.lora_rank"}, recipe, lora, check_lora_targets},

      {"env.needs-script", "[env] keys without env.script change nothing (warning).",
       {"env.script", "env.max_turns", "env.max_observation_tokens", "env.max_episode_tokens",
        "env.observation_role", "env.timeout_s"},
       recipe, hooks, check_env},
      {"env.needs-rollouts", "An [env] script needs an algorithm that generates (ppo).", {"env.script", "algorithm"},
       recipe, hooks, check_env},
      {"env.engine-tp", "Multi-turn episodes need rollout.tensor_parallel = 1.",
       {"env.script", "rollout.tensor_parallel"}, recipe, hooks, check_env},
      {"env.episode-length",
       "env.max_episode_tokens (when set) holds at least rollout.max_prompt_len + rollout.max_new_tokens.",
       {"env.max_episode_tokens", "rollout.max_prompt_len", "rollout.max_new_tokens"}, recipe, hooks, check_env},
      {"env.overlong", "ppo.overlong_buffer only with single-turn episodes (env.max_turns = 1).",
       {"ppo.overlong_buffer", "env.max_turns"}, recipe, hooks, check_env},
      {"hooks.needs-script", "Naming a hook function needs hooks.script.",
       {"hooks.script", "roles.*.hook", "hooks.reward", "hooks.on_rollout", "hooks.on_step"}, recipe, hooks,
       check_hooks_need_script},
  };
  return rows;
}

void run_rule_checks(const std::vector<RuleRow>& rows, const Recipe& recipe, Diagnostics& diagnostics) {
  std::vector<const RuleRow*> order;
  for (const RuleRow& row : rows)
    if (row.check) order.push_back(&row);
  std::stable_sort(order.begin(), order.end(),
                   [](const RuleRow* a, const RuleRow* b) { return a->pass < b->pass; });
  RuleCheck last = nullptr;
  for (const RuleRow* row : order) {
    // Rows checked together share a check and stand together: it runs once.
    if (row->check != last) row->check(recipe, diagnostics);
    last = row->check;
  }
}

void validate_recipe(const Recipe& recipe, Diagnostics& diagnostics) {
  run_rule_checks(recipe_rules(), recipe, diagnostics);
}

}  // namespace meshrun
