// Fit: what each slot holds at its peak, and whether every role and engine
// fits the device. Colocated owners add up unless colocate.sleep parks the
// idle ones in CPU memory, in which case only the largest is resident. An
// owner is judged by what is resident while it runs: the whole slot without
// sleep, only itself with sleep (so a large actor does not fail the engine
// that merely shares its slots).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "meshrun/recipe/step_arithmetic.hpp"
#include "plan_internal.hpp"
#include "units.hpp"

namespace meshrun::plan_detail {
namespace {

bool has_estimate(const RolePlan& role) {
  return !role.architecture.name.empty() && !role.mesh.ranks.empty();
}

std::string breakdown_text(const MemoryEstimate& m) {
  std::string text = "parameters " + gib_text(m.parameters);
  if (m.gradients) text += ", gradients " + gib_text(m.gradients);
  if (m.optimizer) text += ", optimizer " + gib_text(m.optimizer);
  if (m.activations) text += ", activations " + gib_text(m.activations);
  if (m.logits) text += ", logits " + gib_text(m.logits);
  if (m.kv_cache) text += ", KV cache " + gib_text(m.kv_cache);
  if (m.reference) text += ", reference " + gib_text(m.reference);
  text += ", overhead " + gib_text(m.overhead) + " GiB";
  if (m.optimizer_host) text += " (+" + gib_text(m.optimizer_host) + " GiB of optimizer states in CPU memory)";
  if (m.checkpoint_host) text += " (+" + gib_text(m.checkpoint_host) + " GiB of checkpoint snapshot in CPU memory)";
  if (m.reference_host) text += " (+" + gib_text(m.reference_host) + " GiB of reference weights in CPU memory)";
  return text;
}

// The other owners of the slots `ranks`, for "its slots also hold ..." messages.
std::string co_owners(const Plan& plan, const std::vector<int>& ranks, const std::string& self) {
  std::vector<std::string> others;
  for (const auto& owner : plan.slots[ranks.front()].owners)
    if (owner != self) others.push_back(owner);
  std::string text;
  for (const auto& other : others) text += (text.empty() ? "" : ", ") + other;
  return text;
}

std::string fmt_utilization(const Recipe& recipe) {
  return fmt::format("{:.2f}", recipe.rollout.memory_utilization);
}

int64_t worst_slot(const Plan& plan, const std::vector<int>& ranks) {
  int64_t worst = 0;
  for (int rank : ranks) worst = std::max(worst, plan.slots[rank].peak_bytes);
  return worst;
}

int64_t resident_peak(const Plan& plan, const std::vector<int>& ranks, int64_t own_total) {
  return plan.sleep ? own_total : worst_slot(plan, ranks);
}

std::string over_text(const FitVerdict& v) {
  return gib_text(v.peak_bytes) + " GiB per process on " + gib_text(v.capacity_bytes) +
         " GiB devices (" + gib_text(-v.margin_bytes()) + " GiB over)";
}

std::string role_suggestion(const Recipe& recipe, const RolePlan& role, bool shares_slots) {
  const std::string key = "roles." + role.name + ".";
  std::vector<std::string> ideas;
  if (role.trained && !role.offload && role.memory.optimizer > 0)
    ideas.push_back("set " + key + "offload = true to keep the " + gib_text(role.memory.optimizer) +
                    " GiB of optimizer states in CPU memory");
  if (role.zero_stage < 3)
    ideas.push_back("raise " + key + "zero_stage (3 shards parameters, gradients and optimizer "
                    "states over dp × sp)");
  if (role.trained && !role.gradient_checkpointing)
    ideas.push_back("enable " + key + "gradient_checkpointing");
  if (shares_slots && !recipe.colocate.sleep)
    ideas.push_back("set colocate.sleep = true so idle colocated roles leave the device");
  ideas.push_back("give " + role.name + " more processes (larger dp or tp) or lower batch." +
                  (role.trained ? "micro_train" : "micro_rollout"));
  std::string text;
  for (const auto& idea : ideas) text += (text.empty() ? "" : "; ") + idea;
  return text;
}

void judge_role(const Recipe& recipe, const RolePlan& role, int64_t capacity, Plan& plan,
                Diagnostics& diagnostics) {
  FitVerdict verdict{role.name, true, resident_peak(plan, role.ranks, role.memory.total()), capacity, {}};
  verdict.fits = capacity == 0 || verdict.peak_bytes <= capacity;
  if (!verdict.fits) {
    const std::string others = plan.sleep ? std::string() : co_owners(plan, role.ranks, role.name);
    std::string message = role.name + " needs ";
    if (others.empty()) {
      message += over_text(verdict) + ": " + breakdown_text(role.memory);
    } else {
      message += gib_text(role.memory.total()) + " GiB per process (" + breakdown_text(role.memory) +
                 "); with " + others + " on the same slots the peak is " + over_text(verdict);
    }
    verdict.reason = gib_text(-verdict.margin_bytes()) + " GiB over " + gib_text(capacity) + " GiB";
    diagnostics.error(recipe.where("roles." + role.name), "plan.memory", message,
                      role_suggestion(recipe, role, !others.empty()));
  }
  plan.verdicts.push_back(std::move(verdict));
}

// Engines are identical, so one diagnostic speaks for all that fail.
void judge_engines(const Recipe& recipe, int64_t capacity, Plan& plan, Diagnostics& diagnostics) {
  const int64_t sequence = step_arithmetic::sequence_length(recipe);
  int failed = 0;
  std::string first_message, first_suggestion;
  for (const EnginePlan& engine : plan.engines) {
    const std::string name = engine_name(engine.index);
    FitVerdict verdict{name, true, resident_peak(plan, engine.ranks, engine.memory.total()), capacity, {}};
    const int64_t minimum = engine.memory.parameters + engine.memory.overhead + engine.kv_bytes_per_token * sequence;
    const bool within_budget = capacity == 0 || engine.budget_bytes >= minimum;
    const bool within_device = capacity == 0 || verdict.peak_bytes <= capacity;
    verdict.fits = within_budget && within_device;
    if (!within_budget) {
      verdict.reason = "weights, overhead and one sequence's KV cache need " + gib_text(minimum) +
                       " GiB; memory_utilization leaves " + gib_text(engine.budget_bytes) + " GiB";
      if (!failed++) {
        first_message = name + " needs " + gib_text(minimum) + " GiB per process (weights " +
                        gib_text(engine.memory.parameters) + ", overhead " + gib_text(engine.memory.overhead) +
                        ", KV cache of one " + std::to_string(sequence) + "-token sequence " +
                        gib_text(engine.kv_bytes_per_token * sequence) + " GiB) but rollout.memory_utilization " +
                        fmt_utilization(recipe) + " of " + gib_text(capacity) + " GiB leaves " +
                        gib_text(engine.budget_bytes) + " GiB";
        first_suggestion = "raise rollout.memory_utilization, raise rollout.tensor_parallel, or shorten " +
                           std::string(step_arithmetic::sequence_length_keys(recipe));
      }
    } else if (!within_device) {
      verdict.reason = gib_text(-verdict.margin_bytes()) + " GiB over " + gib_text(capacity) + " GiB";
      if (!failed++) {
        const std::string others = plan.sleep ? std::string() : co_owners(plan, engine.ranks, name);
        first_message = name + " reserves " + gib_text(engine.memory.total()) + " GiB (rollout.memory_utilization " +
                        fmt_utilization(recipe) + " of the device)" +
                        (others.empty() ? "" : "; with " + others + " on the same slots") + " the peak is " +
                        over_text(verdict);
        first_suggestion = recipe.colocate.sleep
                               ? "lower rollout.memory_utilization so the engine and the largest colocated "
                                 "role fit together"
                               : "set colocate.sleep = true, or lower rollout.memory_utilization to leave "
                                 "room for the colocated roles";
      }
    }
    plan.verdicts.push_back(std::move(verdict));
  }
  if (failed) {
    if (failed > 1) first_message += " (likewise " + std::to_string(failed - 1) + " more engine(s))";
    diagnostics.error(recipe.where("rollout"), "plan.memory", first_message, first_suggestion);
  }
  // A pool the recipe sized that cannot hold one sequence would refuse
  // every prompt; the budget's own pool is judged above.
  if (!plan.engines.empty() && recipe.rollout.kv_cache_mb > 0) {
    const EnginePlan& engine = plan.engines.front();
    const int64_t needed = ceil_div(sequence, engine.kv_block_size);
    if (engine.kv_bytes_per_token > 0 && engine.kv_pool_blocks < needed)
      diagnostics.error(
          recipe.where("rollout.kv_cache_mb"), "rollout.kv-pool",
          "rollout.kv_cache_mb = " + std::to_string(recipe.rollout.kv_cache_mb) + " holds " +
              std::to_string(engine.kv_pool_tokens()) + " tokens (" + std::to_string(engine.kv_pool_blocks) +
              " blocks of " + std::to_string(engine.kv_block_size) + ", " +
              std::to_string(engine.kv_bytes_per_token) + " bytes per token per process); one sequence of " +
              step_arithmetic::sequence_length_keys(recipe) + " = " + std::to_string(sequence) + " tokens needs " +
              std::to_string(needed) + " blocks (" +
              std::to_string((needed * engine.kv_block_size * engine.kv_bytes_per_token + 1024 * 1024 - 1) /
                             (1024 * 1024)) +
              " MB)",
          "raise rollout.kv_cache_mb, or shorten " + std::string(step_arithmetic::sequence_length_keys(recipe)));
  }
}

}  // namespace

void assess_fit(const Recipe& recipe, Plan& plan, Diagnostics& diagnostics) {
  std::vector<int64_t> sum(plan.slots.size(), 0), largest(plan.slots.size(), 0);
  auto occupy = [&](const std::vector<int>& ranks, int64_t bytes) {
    for (int rank : ranks) {
      sum[rank] += bytes;
      largest[rank] = std::max(largest[rank], bytes);
    }
  };
  for (const RolePlan& role : plan.roles)
    if (has_estimate(role)) occupy(role.ranks, role.memory.total());
  for (const EnginePlan& engine : plan.engines) occupy(engine.ranks, engine.memory.total());
  for (size_t rank = 0; rank < plan.slots.size(); ++rank)
    plan.slots[rank].peak_bytes = plan.sleep ? largest[rank] : sum[rank];

  const int64_t capacity = capacity_bytes(plan.cluster);
  for (const RolePlan& role : plan.roles)
    if (has_estimate(role)) judge_role(recipe, role, capacity, plan, diagnostics);
  const RolePlan* actor = plan.role(Role::actor);
  if (actor && !actor->architecture.name.empty()) judge_engines(recipe, capacity, plan, diagnostics);
}

}  // namespace meshrun::plan_detail
