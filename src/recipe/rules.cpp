// Cross-field rules of a loaded recipe: everything a user of OpenRLHF or
// torchtitan would otherwise only learn when the job fails at run time.
// Each rule's id and summary is catalogued in rules_catalog.cpp.
#include <algorithm>
#include <limits>
#include <set>
#include <sstream>

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/recipe/colocation.hpp"
#include "meshrun/recipe/step_arithmetic.hpp"
#include "meshrun/recipe/lora_targets.hpp"
#include "suggest.hpp"

namespace meshrun {
namespace {

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

// Saturating products and sums of recipe counts (step_arithmetic.hpp).
using step_arithmetic::plus;
using step_arithmetic::times;

class RuleChecker {
 public:
  RuleChecker(const Recipe& recipe, Diagnostics& diagnostics) : r_(recipe), d_(diagnostics) {}

  void run() {
    check_launch();
    check_roles();
    check_colocation();
    for (const RoleConfig* role : placed_roles(r_)) check_mesh(*role);
    check_batch();
    check_rollout();
    check_data();
    check_hook_names();
    check_reinforcement();
    check_preference();
    check_lora();
  }

 private:
  // LoRA settings: on the actor of an algorithm that trains adapters, on
  // projections that exist (the rank against the layers is the plan's).
  void check_lora() {
    for (const RoleConfig& role : r_.roles) {
      if (role.lora_rank == 0) continue;
      const std::string key = "roles." + role.name() + ".lora_rank";
      const AlgorithmRow& algorithm = row_of(r_.algorithm);
      if (role.role != Role::actor) {
        d_.error(r_.where(key), "lora.unsupported",
                 role.name() + " is not trained; only the actor's training takes LoRA adapters",
                 "remove " + key);
      } else if (!algorithm.lora) {
        d_.error(r_.where(key), "lora.unsupported",
                 "algorithm " + in_quotes(algorithm.name) + " does not train LoRA adapters (sft, dpo and ppo do)",
                 "remove " + key + " to train the whole model");
      }
      const std::string targets_key = "roles." + role.name() + ".lora_targets";
      if (role.lora_targets.empty())
        d_.error(r_.where(targets_key), "lora.target", "lora_rank = " + std::to_string(role.lora_rank) +
                                                           " but lora_targets names no projection",
                 "name some of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
      std::vector<std::string> known(std::begin(kLoraTargets), std::end(kLoraTargets));
      std::set<std::string> seen;
      for (const std::string& target : role.lora_targets) {
        if (!seen.insert(target).second) {
          d_.error(r_.where(targets_key), "lora.target", in_quotes(target) + " is listed twice",
                   "name each projection once");
          continue;
        }
        if (is_lora_target(target)) continue;
        const auto close = closest_match(target, known);
        d_.error(r_.where(targets_key), "lora.target",
                 in_quotes(target) + " names no projection of a Llama-style decoder layer",
                 close ? "did you mean " + in_quotes(*close) + "?"
                       : "use q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj or down_proj");
      }
    }
  }

  void check_launch() {
    const auto& launch = r_.launch;
    if (launch.device == "cpu" && launch.backend == "nccl") {
      d_.error(r_.where("launch.backend"), "launch.backend-device",
               "backend \"nccl\" needs device \"cuda\", but launch.device is \"cpu\" (" +
                   r_.where("launch.device").str() + ")",
               "use backend = \"gloo\" or \"auto\" on cpu");
    }
    if (launch.type == "local" && launch.nodes > 1) {
      d_.error(r_.where("launch.type"), "launch.local-nodes",
               "the local launcher starts processes on this machine only, but launch.nodes = " +
                   std::to_string(launch.nodes),
               "use type \"slurm\", \"mpi\" or \"torchrun\" for several nodes");
    }
  }

  void check_roles() {
    const AlgorithmRow& algorithm = row_of(r_.algorithm);
    if (!r_.has_role(Role::actor)) {
      d_.error(r_.where("algorithm"), "roles.actor-required",
               "algorithm " + in_quotes(algorithm.name) + " trains an actor, but the recipe has no [roles.actor]",
               "add a [roles.actor] table with a model");
    }
    for (const auto& role : r_.roles) {
      const std::string table = "roles." + role.name();
      if (!role.hook.empty() && role.role != Role::reward) {
        d_.error(r_.where(table + ".hook"), "roles.hook-reward-only",
                 "only the reward role can be computed by a hook, not " + role.name());
      }
      if (role.role == Role::reward && !role.hook.empty() && !role.model.empty()) {
        d_.error(r_.where(table + ".hook"), "roles.model-required",
                 "the reward role names both a model and a hook",
                 "keep model and shape its reward with [hooks] reward, or keep only the hook");
      } else if (role.model.empty() && (role.role != Role::reward || role.hook.empty())) {
        d_.error(r_.where(table), "roles.model-required",
                 "role " + role.name() + " names no model" + (role.role == Role::reward ? " or hook" : ""),
                 "set model = a model directory, a public model name or \"builtin:tiny\"");
      }
      if (!algorithm_uses(algorithm, role.role)) {
        d_.warning(r_.where(table), "roles.unused",
                   "role " + role.name() + " is not used by algorithm " + in_quotes(algorithm.name));
      }
      if (takes_processes(r_, role)) {
        if (role.nodes > r_.launch.nodes) {
          d_.error(r_.where(table + ".nodes"), "roles.placement",
                   "role " + role.name() + " wants " + std::to_string(role.nodes) + " nodes, but launch.nodes = " +
                       std::to_string(r_.launch.nodes));
        }
        if (role.procs_per_node > r_.launch.procs_per_node) {
          d_.error(r_.where(table + ".procs_per_node"), "roles.placement",
                   "role " + role.name() + " wants " + std::to_string(role.procs_per_node) +
                       " processes per node, but launch.procs_per_node = " +
                       std::to_string(r_.launch.procs_per_node));
        }
      }
    }
    if (algorithm.reinforcement) {
      const AdvantageRow& advantage = row_of(r_.ppo.advantage);
      SourceLocation advantage_at = r_.is_set("ppo.advantage") ? r_.where("ppo.advantage") : r_.where("algorithm");
      if (advantage.needs_critic && !r_.has_role(Role::critic)) {
        d_.error(advantage_at, "roles.critic-required",
                 "advantage " + in_quotes(advantage.name) + " needs a critic, but the recipe has no [roles.critic]",
                 "add [roles.critic], or use an advantage without a critic: " + estimators_where(false));
      }
      if (!advantage.needs_critic && r_.has_role(Role::critic)) {
        d_.warning(r_.where("roles.critic"), "roles.critic-unused",
                   "advantage " + in_quotes(advantage.name) + " does not use the critic");
      }
    }
    const RoleConfig* reward = r_.role(Role::reward);
    bool reward_source = (reward && (!reward->model.empty() || !reward->hook.empty())) || !r_.hooks.script.empty();
    if (algorithm.needs_reward && !reward_source) {
      d_.error(r_.where("algorithm"), "roles.reward-required",
               "algorithm " + in_quotes(algorithm.name) + " needs a reward: the recipe has no [roles.reward] model or hook and no [hooks] script",
               "add [roles.reward] with a model, or a [hooks] script defining reward(batch)");
    }
  }

  void check_colocation() {
    const auto& colocate = r_.colocate;
    if (colocate.all && !colocate.group_names.empty()) {
      d_.error(r_.where("colocate.groups"), "colocate.conflict",
               "colocate.all = true already puts every role together; colocate.groups is ambiguous beside it");
    }
    std::set<Role> seen;
    std::set<std::string> seen_unknown;
    // Every row's name: the roles and the engines' "rollout".
    std::vector<std::string> known;
    for (const RoleRow& row : kRoles) known.emplace_back(row.name);
    // The names as written: a name no row has is left out of the resolved
    // groups, so it is reported from here.
    for (const auto& group : colocate.group_names) {
      for (const auto& name : group) {
        const std::optional<Role> role = role_named(name);
        if (!role) {
          auto close = closest_match(name, known);
          d_.error(r_.where("colocate.groups"), "colocate.unknown-role",
                   "colocation group names unknown role " + in_quotes(name),
                   close ? "did you mean " + in_quotes(*close) + "?" : "roles are actor, critic, reward, ref and rollout");
        } else if (*role != Role::rollout && !r_.has_role(*role)) {
          d_.error(r_.where("colocate.groups"), "colocate.unknown-role",
                   "colocation group names " + name + ", but the recipe has no [roles." + name + "]");
        }
        if (role ? !seen.insert(*role).second : !seen_unknown.insert(name).second) {
          d_.error(r_.where("colocate.groups"), "colocate.duplicate", name + " is in more than one colocation group");
        }
      }
    }
    SourceLocation where = colocate.all ? r_.where("colocate.all") : r_.where("colocate.groups");
    for (const auto& unit : placement_units(r_)) {
      const RoleConfig* first = unit.roles.empty() ? nullptr : unit.roles.front();
      for (const RoleConfig* role : unit.roles) {
        if (role->nodes != first->nodes || role->procs_per_node != first->procs_per_node) {
          d_.error(where, "colocate.equal-placement",
                   "colocated roles " + first->name() + " and " + role->name() + " differ in placement: " +
                       shape(*first) + " vs " + shape(*role),
                   "give colocated roles the same nodes and procs_per_node");
        }
      }
      if (first && unit.with_engines && unit.processes(r_) != engine_processes(r_)) {
        const int64_t processes = unit.processes(r_);
        const int tp = r_.rollout.tensor_parallel;
        // engines = processes / tp only works when tp divides the processes.
        std::string suggestion = processes % tp == 0
                                     ? "set engines = " + std::to_string(processes / tp) + " or change tensor_parallel"
                                     : "make engines × tensor_parallel = " + std::to_string(processes) +
                                           ", e.g. engines = " + std::to_string(processes) + " and tensor_parallel = 1";
        d_.error(where, "colocate.engines",
                 "engines colocated with " + first->name() + " need exactly its " + std::to_string(processes) +
                     (processes == 1 ? " process" : " processes") + ", but rollout.engines × tensor_parallel = " +
                     std::to_string(r_.rollout.engines) + " × " + std::to_string(tp) + " = " +
                     std::to_string(engine_processes(r_)),
                 suggestion);
      }
    }
    check_fit();
  }

  void check_fit() {
    int64_t needed = 0;
    std::string parts;
    for (const auto& unit : placement_units(r_)) {
      needed = plus(needed, unit.processes(r_));
      // "actor 4", "actor+ref 8", and "engines 2×4 = 8" for engines alone.
      parts += (parts.empty() ? "" : ", ") + unit.describe(r_) + (unit.roles.empty() ? " = " : " ") +
               std::to_string(unit.processes(r_));
    }
    const int64_t world = times(r_.launch.nodes, r_.launch.procs_per_node);
    if (needed > world) {
      d_.error(r_.where("launch.nodes"), "roles.fit",
               "roles and engines need " + std::to_string(needed) + " processes (" + parts +
                   "), but the cluster has launch.nodes × procs_per_node = " + std::to_string(r_.launch.nodes) +
                   " × " + std::to_string(r_.launch.procs_per_node) + " = " + std::to_string(world),
               "add nodes, give roles fewer processes, or colocate roles ([colocate] groups or all)");
    }
  }

  SourceLocation mesh_key(const RoleConfig& role, const std::string& key) const {
    std::string own = "roles." + role.name() + ".mesh." + key;
    return r_.is_set(own) ? r_.where(own) : r_.where("mesh." + key);
  }

  // Names of the advantage estimators that do (or do not) need a critic.
  static std::string estimators_where(bool needs_critic) {
    std::string out;
    for (const AdvantageRow& row : kAdvantageEstimators)
      if (row.needs_critic == needs_critic) out += (out.empty() ? "" : ", ") + in_quotes(std::string(row.name));
    return out;
  }

  void check_mesh(const RoleConfig& role) {
    const MeshConfig& mesh = role.mesh;
    const int64_t n = role.processes();
    const int64_t tp_sp = times(mesh.tp, mesh.sp);
    const std::string who = "role " + role.name() + " (" + shape(role) + ")";
    const AlgorithmRow& algorithm = row_of(r_.algorithm);
    if (mesh.sp > 1 && !algorithm.sequence_parallel) {
      d_.error(mesh_key(role, "sp"), "mesh.sp-unsupported",
               "sp = " + std::to_string(mesh.sp) + " for " + who + ", but algorithm " + in_quotes(algorithm.name) +
                   " does not support sequence parallelism yet",
               "use sp = 1 and spread the processes over dp and tp");
    } else if (mesh.sp > 1) {
      const bool rollout = algorithm.rollout_engines;
      const int64_t length = step_arithmetic::sequence_length(r_);
      if (length < 2LL * mesh.sp)
        d_.error(mesh_key(role, "sp"), "mesh.sp-sequence",
                 "sp = " + std::to_string(mesh.sp) + " cuts each sequence into 2 × sp = " +
                     std::to_string(2 * int64_t{mesh.sp}) + " chunks, but " +
                     (rollout ? "rollout.max_prompt_len + rollout.max_new_tokens" : "data.max_len") + " is " +
                     std::to_string(length),
                 "use sp ≤ " + std::to_string(std::max<int64_t>(1, length / 2)));
    }
    if (mesh.tp > role.procs_per_node) {
      d_.error(mesh_key(role, "tp"), "mesh.tp-node",
               "tp = " + std::to_string(mesh.tp) + " spans nodes: " + who + " has " +
                   processes_text(role.procs_per_node) + " per node",
               "keep tp ≤ procs_per_node; tensor parallelism needs the fast links within a node");
    }
    if (mesh.dp == -1) {
      if (n % tp_sp != 0) {
        // Point at what the user wrote: dp = -1 itself, else the degree
        // that does not divide.
        bool dp_written = r_.is_set("roles." + role.name() + ".mesh.dp") || r_.is_set("mesh.dp");
        const char* culprit = dp_written ? "dp" : (n % mesh.tp != 0 || mesh.sp == 1 ? "tp" : "sp");
        d_.error(mesh_key(role, culprit), "mesh.infer",
                 "cannot infer dp: " + who + " has " + processes_text(n) + ", not divisible by tp × sp = " +
                     std::to_string(mesh.tp) + " × " + std::to_string(mesh.sp));
      }
    } else if (times(tp_sp, mesh.dp) != n) {
      std::string suggestion = "set dp = -1 to infer it";
      if (n % tp_sp == 0) suggestion = "set dp = " + std::to_string(n / tp_sp) + ", or -1 to infer it";
      d_.error(mesh_key(role, "dp"), "mesh.product",
               "tp × sp × dp = " + std::to_string(mesh.tp) + " × " + std::to_string(mesh.sp) + " × " +
                   std::to_string(mesh.dp) + " = " + std::to_string(times(tp_sp, mesh.dp)) + ", but " + who +
                   " has " + processes_text(n),
               suggestion);
    }
  }

  void check_batch() {
    const auto& batch = r_.batch;
    for (const RoleConfig* role : trained_roles(r_)) {
      auto dp = effective_dp(*role);
      if (!dp) continue;
      const int64_t per_step = step_arithmetic::items_per_pass(batch.micro_train, *dp);
      if (!step_arithmetic::splits_into_passes(batch.train, batch.micro_train, *dp)) {
        const int64_t lower = std::max(per_step, batch.train / per_step * per_step);
        d_.error(r_.where("batch.train"), "batch.train-divisible",
                 "train = " + std::to_string(batch.train) + " is not a multiple of micro_train × dp = " +
                     std::to_string(batch.micro_train) + " × " + std::to_string(*dp) + " = " +
                     std::to_string(per_step) + " (role " + role->name() + ")",
                 "use train = " + std::to_string(lower) + " or " + std::to_string(plus(lower, per_step)));
      }
    }
    if (!row_of(r_.algorithm).rollout_engines) return;
    const int64_t samples = step_arithmetic::rollout_samples(batch);
    if (samples < batch.train) {
      d_.error(r_.where("batch.train"), "batch.train-samples",
               "train = " + std::to_string(batch.train) + " is more than the " + std::to_string(samples) +
                   " samples of a step (rollout × n_samples_per_prompt): no optimizer step would run",
               "use train ≤ " + std::to_string(samples) + ", a divisor of it");
    } else if (const int64_t leftover = step_arithmetic::leftover_samples(samples, batch.train); leftover != 0) {
      d_.warning(r_.where("batch.train"), "batch.train-samples",
                 "rollout × n_samples_per_prompt = " + std::to_string(samples) + " samples per step are not a multiple "
                     "of train = " + std::to_string(batch.train) + ": the last " + std::to_string(leftover) +
                     " of each pass are not trained on",
                 "make train divide " + std::to_string(samples));
    }
    const std::string samples_text = "rollout × n_samples_per_prompt = " + std::to_string(batch.rollout) + " × " +
                                     std::to_string(batch.n_samples_per_prompt) + " = " + std::to_string(samples);
    if (samples % batch.micro_rollout != 0) {
      d_.error(r_.where("batch.micro_rollout"), "batch.rollout-divisible",
               samples_text + " is not divisible by micro_rollout = " + std::to_string(batch.micro_rollout));
    }
    if (const RoleConfig* actor = r_.role(Role::actor)) {
      if (auto dp = effective_dp(*actor); dp && samples % *dp != 0) {
        d_.error(r_.where("batch.rollout"), "batch.rollout-divisible",
                 samples_text + " is not divisible by the actor's dp = " + std::to_string(*dp));
      }
    }
    const AdvantageRow& advantage = row_of(r_.ppo.advantage);
    if (row_of(r_.algorithm).reinforcement && advantage.needs_groups && batch.n_samples_per_prompt < 2) {
      d_.error(r_.is_set("batch.n_samples_per_prompt") ? r_.where("batch.n_samples_per_prompt") : r_.where("ppo.advantage"),
               "batch.group-samples",
               "advantage " + in_quotes(advantage.name) + " compares the samples of each prompt, but n_samples_per_prompt = " +
                   std::to_string(batch.n_samples_per_prompt),
               "set n_samples_per_prompt ≥ 2");
    }
  }

  void check_rollout() {
    if (!row_of(r_.algorithm).rollout_engines) return;
    if (r_.rollout.tensor_parallel > r_.launch.procs_per_node) {
      d_.error(r_.where("rollout.tensor_parallel"), "rollout.tp-node",
               "an engine's tensor_parallel = " + std::to_string(r_.rollout.tensor_parallel) +
                   " processes must share one node, but launch.procs_per_node = " +
                   std::to_string(r_.launch.procs_per_node));
    }
  }

  // What the files themselves must hold is lint's (src/lint/path_lint.cpp).
  void check_data() {
    const std::string& path = r_.data.path;
    if (path.empty()) {
      d_.error(r_.is_set("data") ? r_.where("data") : r_.where("algorithm"), "data.required",
               "algorithm " + in_quotes(name_of(r_.algorithm)) + " reads a dataset, but data.path is not set",
               "set [data] path to a JSONL file");
      return;
    }
    if (!r_.data.eval_path.empty() && !row_of(r_.algorithm).evaluates)
      d_.error(r_.where("data.eval_path"), "data.eval-unsupported",
               "algorithm " + in_quotes(name_of(r_.algorithm)) + " does not evaluate on a held-out set",
               "remove data.eval_path");
  }

  void check_hook_names() {
    if (!r_.hooks.script.empty()) return;
    // A name equal to the default is harmless without a script (a resolved
    // recipe writes every default out).
    const HooksConfig defaults;
    const std::pair<const char*, bool> named[] = {{"reward", r_.hooks.reward != defaults.reward},
                                                  {"on_rollout", r_.hooks.on_rollout != defaults.on_rollout},
                                                  {"on_step", r_.hooks.on_step != defaults.on_step}};
    for (const auto& [point, renamed] : named) {
      std::string key = std::string("hooks.") + point;
      if (r_.is_set(key) && renamed)
        d_.error(r_.where(key), "hooks.needs-script", key + " names a hook function, but [hooks] script is not set");
    }
    if (const RoleConfig* reward = r_.role(Role::reward); reward && !reward->hook.empty()) {
      d_.error(r_.where("roles.reward.hook"), "hooks.needs-script",
               "roles.reward.hook names a hook function, but [hooks] script is not set");
    }
  }

  // [ppo] settings that only make sense together.
  void check_reinforcement() {
    const AlgorithmRow& algorithm = row_of(r_.algorithm);
    // The resolved form writes every default out, so only a choice other
    // than the default is the user's.
    if (algorithm.data != DataShape::prompt_response && r_.data.loss_turns != LossTurns::all)
      d_.warning(r_.where("data.loss_turns"), "data.loss-turns-unused",
                 "algorithm " + in_quotes(algorithm.name) + " does not train on chat samples' assistant turns; "
                     "data.loss_turns = " + in_quotes(name_of(r_.data.loss_turns)) + " is ignored");
    if (!algorithm.reinforcement) {
      if (!r_.data.label_key.empty())
        d_.warning(r_.where("data.label_key"), "data.label-unused",
                   "algorithm " + in_quotes(algorithm.name) + " does not read labels; data.label_key is ignored");
      return;
    }
    const PpoConfig& ppo = r_.ppo;
    if (r_.is_set("ppo.eps_clip_high") && ppo.eps_clip_high < ppo.eps_clip) {
      d_.error(r_.where("ppo.eps_clip_high"), "ppo.clip-high",
               "eps_clip_high = " + number(ppo.eps_clip_high) + " is below eps_clip = " + number(ppo.eps_clip) +
                   " (" + r_.where("ppo.eps_clip").str() + ")",
               "clip-higher widens the upper bound: use eps_clip_high ≥ eps_clip");
    }
    if (ppo.dual_clip != 0 && ppo.dual_clip <= 1) {
      d_.error(r_.where("ppo.dual_clip"), "ppo.dual-clip",
               "dual_clip = " + number(ppo.dual_clip) + " would bound the loss below the clipped surrogate",
               "use 0 to turn dual clip off, or a value > 1 (3 is common)");
    }
    const RoleConfig* ref = r_.role(Role::ref);
    if (ppo.kl_mode == KlMode::loss && (!ref || ref->model.empty())) {
      d_.error(r_.where("ppo.kl_mode"), "ppo.kl-needs-ref",
               "kl_mode \"loss\" adds the KL to a reference model to the actor's loss, but the recipe has no "
               "[roles.ref] model",
               "add [roles.ref] with the actor's starting model, or use kl_mode = \"reward\"");
    }
    if (ppo.dynamic_sampling && r_.batch.n_samples_per_prompt < 2) {
      d_.error(r_.is_set("batch.n_samples_per_prompt") ? r_.where("batch.n_samples_per_prompt")
                                                       : r_.where("ppo.dynamic_sampling"),
               "ppo.dynamic-sampling-groups",
               "dynamic_sampling drops prompts whose samples all got the same reward, but n_samples_per_prompt = " +
                   std::to_string(r_.batch.n_samples_per_prompt) + " gives one sample per prompt",
               "set n_samples_per_prompt ≥ 2, or turn dynamic_sampling off");
    }
    if (ppo.overlong_buffer > 0 && ppo.overlong_buffer >= r_.rollout.max_new_tokens) {
      d_.error(r_.where("ppo.overlong_buffer"), "ppo.overlong-buffer",
               "overlong_buffer = " + std::to_string(ppo.overlong_buffer) + " is not below rollout.max_new_tokens = " +
                   std::to_string(r_.rollout.max_new_tokens) + ": every response would be penalised",
               "use a buffer smaller than max_new_tokens, e.g. max_new_tokens / 4");
    }
  }

  // [dpo] settings that only make sense together.
  void check_preference() {
    if (row_of(r_.algorithm).data != DataShape::preference) return;
    if (r_.algorithm == Algorithm::dpo && r_.dpo.label_smoothing > 0 && r_.dpo.loss != DpoLoss::sigmoid) {
      d_.error(r_.where("dpo.label_smoothing"), "dpo.label-smoothing",
               "label_smoothing = " + number(r_.dpo.label_smoothing) + " applies to the sigmoid loss, not " +
                   in_quotes(name_of(r_.dpo.loss)),
               "use loss = \"sigmoid\", or label_smoothing = 0");
    }
    if (r_.data.chosen_key == r_.data.rejected_key) {
      d_.error(r_.where("data.rejected_key"), "dpo.pair-keys",
               "data.chosen_key and data.rejected_key are both " + in_quotes(r_.data.chosen_key),
               "name the two responses of a pair by different keys");
    }
    if (r_.data.packing) {
      d_.error(r_.where("data.packing"), "dpo.packing",
               "algorithm " + in_quotes(name_of(r_.algorithm)) + " trains each pair's two sequences as rows of "
               "one micro-batch; data.packing does not apply",
               "set data.packing = false");
    }
  }

  static std::string number(double value) {
    std::ostringstream out;
    out << value;
    return out.str();
  }

  static std::string processes_text(int64_t n) { return std::to_string(n) + (n == 1 ? " process" : " processes"); }

  static std::string shape(const RoleConfig& role) {
    return std::to_string(role.nodes) + (role.nodes == 1 ? " node" : " nodes") + " × " +
           std::to_string(role.procs_per_node);
  }

  static std::optional<int64_t> effective_dp(const RoleConfig& role) {
    return step_arithmetic::data_parallel_degree(role.processes(), role.mesh);
  }

  const Recipe& r_;
  Diagnostics& d_;
};

}  // namespace

void validate_recipe(const Recipe& recipe, Diagnostics& diagnostics) {
  RuleChecker(recipe, diagnostics).run();
}

}  // namespace meshrun
