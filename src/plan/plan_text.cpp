// The human-readable plan: cluster, slot table, one section per role, the
// rollout engines, and the verdicts. Long lists (rank lists, groups, runs of
// identical nodes or verdicts) are abbreviated so that a 1024-node plan stays
// readable; the JSON form always carries everything.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "plan_internal.hpp"
#include "units.hpp"

namespace meshrun {
namespace {

using namespace plan_detail;

constexpr size_t kGroupsShown = 16;
constexpr size_t kMembersShown = 32;

// Columns padded to their widest cell, two spaces apart.
std::string render_table(const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
  std::vector<size_t> widths;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      if (widths.size() <= c) widths.push_back(0);
      widths[c] = std::max(widths[c], row[c].size());
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(widths[c] - row[c].size() + 2, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

// "0-7, 16-23": ascending ranks as ranges.
std::string ranges_text(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    text += (text.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) text += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return text;
}

std::string group_text(const std::vector<int>& group) {
  std::string text = "[";
  for (size_t i = 0; i < group.size() && i < kMembersShown; ++i) text += (i ? " " : "") + std::to_string(group[i]);
  if (group.size() > kMembersShown) text += " ... (" + std::to_string(group.size()) + " ranks)";
  return text + "]";
}

std::string groups_text(const std::vector<std::vector<int>>& groups) {
  std::string text;
  for (size_t i = 0; i < groups.size() && i < kGroupsShown; ++i) text += (i ? " " : "") + group_text(groups[i]);
  if (groups.size() > kGroupsShown) text += " ... (" + std::to_string(groups.size()) + " groups)";
  return text;
}

std::string cell_text(const SlotPlan& slot) {
  if (slot.owners.empty()) return "-";
  std::string cell;
  for (std::string owner : slot.owners) {
    std::erase(owner, ' ');  // "engine 0" -> "engine0": cells stay one word
    cell += (cell.empty() ? "" : "+") + owner;
  }
  return cell;
}

std::string slots_section(const Plan& plan) {
  const int ppn = plan.cluster.procs_per_node;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{"node"};
  for (int local = 0; local < ppn; ++local) header.push_back(std::to_string(local));
  rows.push_back(header);
  // Runs of nodes with the same cells share one row, so idle tails of large clusters collapse.
  for (int node = 0; node < plan.cluster.nodes;) {
    auto cells = [&](int n) {
      std::vector<std::string> out;
      for (int local = 0; local < ppn; ++local) out.push_back(cell_text(plan.slots[n * ppn + local]));
      return out;
    };
    std::vector<std::string> row = cells(node);
    int last = node;
    while (last + 1 < plan.cluster.nodes && cells(last + 1) == row) ++last;
    row.insert(row.begin(), last > node ? std::to_string(node) + "-" + std::to_string(last) : std::to_string(node));
    rows.push_back(std::move(row));
    node = last + 1;
  }
  return "Slots (node × local index)\n" + render_table(rows, "  ");
}

std::string memory_rows(const MemoryEstimate& m, bool engine, const std::string& activations_note = {}) {
  std::vector<std::vector<std::string>> rows;
  auto add = [&](const std::string& label, int64_t bytes, const std::string& note = {}) {
    rows.push_back({label, fmt::format("{:>9} GiB", gib_text(bytes)), note});
  };
  add(engine ? "weights" : "parameters", m.parameters);
  if (!engine) {
    add("gradients", m.gradients);
    add("optimizer", m.optimizer,
        m.optimizer_host ? "(+" + gib_text(m.optimizer_host) + " GiB offloaded to CPU memory)" : "");
    add("activations", m.activations, activations_note);
    add("logits", m.logits);
    if (m.reference || m.reference_host)
      add("reference", m.reference,
          m.reference_host ? "(" + gib_text(m.reference_host) + " GiB of weights in CPU memory while training)" : "");
  } else {
    add("KV cache", m.kv_cache);
  }
  add("overhead", m.overhead);
  add("total", m.total(),
      m.checkpoint_host ? "(+" + gib_text(m.checkpoint_host) + " GiB checkpoint snapshot in CPU memory while saving)" : "");
  return render_table(rows, "    ");
}

// What the other gradient_checkpointing setting would need.
std::string activations_note(const RolePlan& role) {
  if (!role.trained) return "(one layer at a time: no backward pass)";
  return role.gradient_checkpointing
             ? "(" + gib_text(role.activations_not_checkpointed) + " GiB without gradient checkpointing)"
             : "(" + gib_text(role.activations_checkpointed) + " GiB with gradient checkpointing)";
}

std::string role_settings(const RolePlan& role) {
  std::string text = "ZeRO-" + std::to_string(role.zero_stage) + ", " + std::string(setting_name(role.dtype));
  if (role.trained) text += role.gradient_checkpointing ? ", gradient checkpointing" : ", no gradient checkpointing";
  if (role.trained && role.offload) text += ", optimizer offload";
  return text;
}

std::string role_section(const Plan& plan, const RolePlan& role) {
  std::string out = "Role " + role.name + (role.trained ? " (trained)" : " (inference)") + "\n";
  std::vector<std::vector<std::string>> rows;
  const Architecture& a = role.architecture;
  if (a.name.empty())
    rows.push_back({"model:", role.model + " (architecture unknown)"});
  else
    rows.push_back({"model:", role.model + " -> " + a.name + " (" + a.source + "), " +
                                  parameter_count_text(role.parameter_count) + " parameters"});
  if (!a.name.empty() && a.mixture_of_experts())
    rows.push_back({"experts:", std::to_string(a.experts_per_token) + " of " + std::to_string(a.experts) + " per token on " +
                                    std::to_string(a.sparse_layers()) + " of " + std::to_string(a.layers) + " layers (" +
                                    parameter_count_text(a.active_parameters()) + " active parameters)" +
                                    (role.trained ? fmt::format(", load-balancing loss × {:g}", role.router_aux_loss_coef)
                                                  : std::string())});
  if (!role.reference_model.empty()) {
    const Architecture& r = role.reference_architecture;
    rows.push_back({"reference:", role.reference_model +
                                      (r.name.empty()                ? std::string(" (architecture unknown)")
                                       : role.reference_shares_base ? " -> the base of " + role.name +
                                                                          " with its adapters off (no second copy)"
                                                                    : " -> " + r.name + ", " +
                                                                          parameter_count_text(role.reference_parameter_count) +
                                                                          " parameters, frozen, on these processes")});
  }
  if (role.lora.enabled()) {
    std::string targets;
    for (const std::string& target : role.lora.targets) targets += (targets.empty() ? "" : ", ") + target;
    rows.push_back({"lora:", "rank " + std::to_string(role.lora.rank) + ", alpha " + fmt::format("{:g}", role.lora.alpha) +
                                 " on " + targets + ": " + parameter_count_text(role.adapter_parameter_count) +
                                 " trained parameters, the base frozen"});
  }
  if (role.ranks.empty()) {
    rows.push_back({"ranks:", "not placed"});
    return out + render_table(rows, "  ");
  }
  const int first_node = role.ranks.front() / plan.cluster.procs_per_node;
  const int last_node = role.ranks.back() / plan.cluster.procs_per_node;
  const std::string nodes = first_node == last_node
                                ? "node " + std::to_string(first_node)
                                : "nodes " + std::to_string(first_node) + "-" + std::to_string(last_node);
  rows.push_back({"ranks:", ranges_text(role.ranks) + " (" + std::to_string(role.ranks.size()) + " processes, " +
                                nodes + ")"});
  const MeshPlan& mesh = role.mesh;
  if (mesh.ranks.empty()) {
    rows.push_back({"mesh:", "not formed: tp × sp × dp does not match " + std::to_string(role.ranks.size()) +
                                 " processes"});
    return out + render_table(rows, "  ");
  }
  rows.push_back({"mesh:", fmt::format("dp={} sp={} tp={}{}", mesh.dp, mesh.sp, mesh.tp,
                                       mesh.ep > 1 ? fmt::format(" ep={}", mesh.ep) : std::string())});
  rows.push_back({"dp groups:", groups_text(mesh.dp_groups)});
  rows.push_back({"sp groups:", groups_text(mesh.sp_groups)});
  rows.push_back({"tp groups:", groups_text(mesh.tp_groups)});
  if (mesh.ep > 1) {
    rows.push_back({"ep groups:", groups_text(mesh.ep_groups)});
    rows.push_back({"expert replicas:", groups_text(mesh.expert_replica_groups)});
  }
  if (role.trained) rows.push_back({"gradient accumulation:", std::to_string(role.gradient_accumulation)});
  rows.push_back({"settings:", role_settings(role)});
  if (role.trained) {
    const OptimizerPlan& o = role.optimizer;
    const std::string skip_limit = o.max_skipped_steps < 0
                                       ? std::string("never stops on skipped steps")
                                       : fmt::format("stops after {} skipped steps in a row", o.max_skipped_steps);
    rows.push_back({"optimizer:", fmt::format("AdamW lr {:g} ({}, warmup {:g}, min {:g}), betas {:g}/{:g}, eps {:g}, "
                                              "weight decay {:g}, clip {}, buckets {:g} MB, {}",
                                              o.learning_rate, setting_name(o.lr_scheduler), o.warmup_ratio, o.min_lr_ratio,
                                              o.adam_beta1, o.adam_beta2, o.adam_eps, o.weight_decay,
                                              o.max_norm > 0 ? fmt::format("{:g}", o.max_norm) : std::string("off"),
                                              o.bucket_mb, skip_limit)});
  }
  out += render_table(rows, "  ");
  if (!a.name.empty())
    out += fmt::format("  memory per process (micro-batch {} × {} tokens{}):\n", role.micro_batch,
                       role.sequence_length, mesh.sp > 1 ? fmt::format(", / sp {}", mesh.sp) : "") +
           memory_rows(role.memory, false, activations_note(role));
  return out;
}

std::string engines_section(const Plan& plan) {
  const RolePlan* actor = plan.role(Role::actor);
  const EnginePlan& first = plan.engines.front();
  std::string out = fmt::format("Rollout engines ({}, tensor_parallel {}", plan.engines.size(), first.ranks.size());
  if (actor && !actor->architecture.name.empty()) out += ", " + actor->architecture.name + " in " + std::string(setting_name(actor->dtype));
  out += ")\n";
  std::vector<std::vector<std::string>> rows;
  for (const EnginePlan& engine : plan.engines)
    rows.push_back({engine_name(engine.index) + ":", "ranks " + group_text(engine.ranks),
                    "node " + std::to_string(engine.ranks.front() / plan.cluster.procs_per_node)});
  out += render_table(rows, "  ");
  if (first.memory.parameters == 0) return out;  // actor architecture unknown
  out += "  memory per process (each engine):\n" + memory_rows(first.memory, true);
  if (first.budget_bytes > 0)
    out += fmt::format("  KV cache: {} tokens = {} sequences per engine ({} bytes per token per process)\n",
                       first.kv_cache_tokens, first.kv_cache_sequences, first.kv_bytes_per_token);
  else
    out += "  KV cache: device memory unknown, not sized by memory_utilization\n";
  if (first.kv_pool_blocks > 0) {
    const int64_t sequence = plan.rl.sequence_tokens();
    out += fmt::format("  KV pool: {} blocks of {} tokens = {} tokens = {} whole sequences of {}; up to {} live; {}\n",
                       first.kv_pool_blocks, first.kv_block_size, first.kv_pool_tokens(),
                       sequence > 0 ? first.kv_pool_tokens() / sequence : 0, sequence, first.max_batch,
                       first.prefill_chunk > 0 ? fmt::format("prefill chunks of {} tokens", first.prefill_chunk)
                                               : std::string("whole prompts prefilled"));
    out += first.decode_graphs ? "  decode steps: CUDA graphs, captured per batch size and key width on first use\n"
                               : fmt::format("  decode steps: eager ({})\n", first.eager_reason);
  }
  return out;
}

// Where the run writes and when: checkpoints, metrics, the final model.
// The resolved RL settings, two lines: what the stages compute with.
std::string rl_lines(const RlPlan& rl) {
  if (!rl.enabled) return {};
  const std::string kl =
      rl.has_ref ? fmt::format("kl {} {} coef {}{}", name_of(rl.kl_mode), name_of(rl.kl_estimator), rl.init_kl_coef,
                               rl.kl_target > 0 ? fmt::format(" (adaptive: target {}, horizon {})", rl.kl_target,
                                                              rl.kl_horizon)
                                                : std::string())
                 : std::string("no kl (no ref)");
  std::string out = fmt::format(
      "RL: advantage {} (gamma {}, lambda {}); policy loss {} clip [1 - {}, 1 + {}]{}; loss_agg {}; {}; "
      "entropy_coef {}; value_clip {}; reward_clip {}{}{}; old log-probs from {}\n",
      name_of(rl.advantage), rl.gamma, rl.lambd, name_of(rl.policy_loss), rl.clip_low, rl.clip_high,
      rl.dual_clip > 0 ? fmt::format(" dual {}", rl.dual_clip) : std::string(), name_of(rl.loss_agg), kl,
      rl.entropy_coef, rl.value_clip, rl.reward_clip, rl.normalize_reward ? "; rewards normalized" : "",
      rl.overlong_buffer > 0
          ? fmt::format("; overlong penalty {} over the last {} tokens", rl.overlong_penalty, rl.overlong_buffer)
          : std::string(),
      rl.old_log_probs_from_training ? "the training forward (one optimizer step per rollout)"
                                     : "a scoring forward before the update");
  if (rl.rollout_correction != RolloutCorrection::none) {
    const RolloutCorrectionRow& row = row_of(rl.rollout_correction);
    out += fmt::format("Rollout correction: {} ({})\n", row.name,
                       row.weights ? fmt::format("importance weights min(π_old/π_rollout, {})", rl.rollout_is_cap)
                                   : fmt::format("{} whose ratio leaves [{}, {}] masked",
                                                 row.masks_tokens ? "tokens" : "sequences", rl.rollout_is_low,
                                                 rl.rollout_is_high));
  }
  if (rl.routing_replay)
    out += "Routing replay: the engines' expert choices replayed in the actor's forwards (R3)\n";
  const SamplingPlan& s = rl.sampling;
  out += fmt::format("Rollout: temperature {} top_p {} top_k {}; prompts ≤ {} tokens, responses ≤ {} new tokens; "
                     "{} episode(s){}\n",
                     s.temperature, s.top_p, s.top_k, s.max_prompt_len, s.max_new_tokens, rl.num_episodes,
                     rl.dynamic_sampling
                         ? fmt::format("; dynamic sampling, up to {} rounds", rl.max_sample_rounds)
                         : std::string());
  if (rl.max_staleness > 0)
    out += fmt::format("Asynchronous: the engines generate each next step's samples while the trainer updates "
                       "(one update behind); {}; samples more than {} version(s) old are dropped\n",
                       rl.partial ? "the update's weights interrupt the sequences in flight (partial rollouts)"
                                  : "the round finishes on the weights it started with",
                       rl.max_staleness);
  if (rl.env.enabled) {
    const EnvPlan& env = rl.env;
    out += fmt::format("Episodes: {} (env.script); up to {} model turns of ≤ {} new tokens, observations cut to {} "
                       "tokens (chat role \"{}\"), ≤ {} tokens in all; env calls time out after {} s\n",
                       env.script, env.max_turns, s.max_new_tokens, env.max_observation_tokens, env.observation_role,
                       env.max_episode_tokens, env.timeout_s);
  }
  return out;
}

std::string run_line(const RunPlan& run) {
  std::string steps = run.max_steps > 0 ? fmt::format("at most {} steps; ", run.max_steps) : std::string();
  std::string cadence = run.save_every > 0 ? fmt::format("every {} steps and after the last", run.save_every)
                                           : std::string("after the last step");
  std::string kept = fmt::format("keep {}", run.keep_last);
  if (run.max_checkpoint_bytes > 0) kept += ", at most " + gib_text(run.max_checkpoint_bytes) + " GiB";
  return fmt::format("Run: {}checkpoints in {} {} ({}{}{}{}), resume {}; metrics every {} step(s) in {}{}; final "
                     "model to {}; resolved recipe {} in the metrics folder\n",
                     steps, run.checkpoint_path, cadence, kept, run.async_checkpoints ? ", async" : "",
                     run.save_hf ? ", with HF export" : "", run.save_hf && run.save_value_network ? " and the critic" : "",
                     resume_policy_name(run.resume), run.log_every, run.log_dir,
                     run.tensorboard ? " (and TensorBoard)" : "", run.output, run.recipe_fingerprint);
}

std::string verdict_text(const FitVerdict& v) {
  if (v.capacity_bytes == 0) return "needs " + gib_text(v.peak_bytes) + " GiB (device memory unknown: no verdict)";
  if (v.fits) return "fits (" + gib_text(v.margin_bytes()) + " GiB to spare)";
  return "does NOT fit (" + (v.reason.empty() ? gib_text(-v.margin_bytes()) + " GiB over" : v.reason) + ")";
}

std::string verdicts_section(const Plan& plan) {
  std::vector<std::vector<std::string>> rows;
  // Consecutive engines with the same verdict share a line.
  for (size_t i = 0; i < plan.verdicts.size();) {
    const FitVerdict& v = plan.verdicts[i];
    const std::string text = verdict_text(v);
    size_t j = i;
    const bool engine = v.who.rfind("engine ", 0) == 0;
    while (engine && j + 1 < plan.verdicts.size() && plan.verdicts[j + 1].who.rfind("engine ", 0) == 0 &&
           verdict_text(plan.verdicts[j + 1]) == text)
      ++j;
    std::string who = v.who;
    if (j > i) who = "engines " + v.who.substr(7) + "-" + plan.verdicts[j].who.substr(7);
    rows.push_back({who + ":", text});
    i = j + 1;
  }
  return "Verdict\n" + (rows.empty() ? std::string("  nothing to judge\n") : render_table(rows, "  "));
}

}  // namespace

std::string format_plan_text(const Plan& plan) {
  const ClusterShape& c = plan.cluster;
  std::string out = fmt::format("Plan for {} on {} node(s) × {} {} process(es) (world size {}), {}\n",
                                name_of(plan.algorithm), c.nodes, c.procs_per_node, setting_name(c.device), c.world_size(),
                                c.memory_gb > 0 ? gib_text(capacity_bytes(c)) + " GiB per device"
                                                : std::string("device memory unknown"));
  const StepPlan& step = plan.step;
  if (step.prompts > 0)
    out += fmt::format("Step: {} prompts × {} samples = {} samples; {} optimizer step(s) of {} per step ({} epoch(s)){}\n",
                       step.prompts, step.group_size, step.samples, step.optimizer_steps, step.train_batch, step.epochs,
                       step.untrained ? fmt::format("; {} samples left out of every pass", step.untrained) : "");
  else
    out += fmt::format("Step: {} {} per optimizer step, {} per micro-step per rank; {} epoch(s) over the data\n",
                       step.train_batch, row_of(plan.algorithm).data == DataShape::preference ? "pairs" : "sequences",
                       step.micro_batch, step.data_epochs);
  out += rl_lines(plan.rl);
  out += run_line(plan.run);
  if (plan.sleep) out += "colocate.sleep: idle colocated roles sleep in CPU memory (slot peak = largest owner)\n";
  if (!plan.slots.empty()) out += "\n" + slots_section(plan);
  for (const RolePlan& role : plan.roles) out += "\n" + role_section(plan, role);
  if (!plan.engines.empty()) out += "\n" + engines_section(plan);
  out += "\n" + verdicts_section(plan);
  return out;
}

}  // namespace meshrun
