// The recipe's step arithmetic, each formula once: the tokens of a
// sequence, a role's data-parallel degree (dp = -1 inferred), the items of
// a dp pass (micro × dp) and the gradient accumulation they give, an RL
// step's samples, its optimizer steps and the samples left out of them.
// Lint's rules, the planner and the runners' samplers all call these, so
// what lint accepts is what the plan lays out and the run does. Pure,
// torch-free, on the ground floor (recipe/).
//
// Invariants: products and sums of recipe counts are taken in 64 bits and
// saturate at INT64_MAX rather than overflow (every count fits an int, but
// tp × sp × dp or micro_train × dp of large ones need not fit anything;
// fuzz/recipe_fuzz.cpp); a saturated value only ever fails the comparison
// it feeds.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "meshrun/recipe/recipe.hpp"

namespace meshrun::step_arithmetic {

constexpr int64_t times(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? std::numeric_limits<int64_t>::max() : out;
}
constexpr int64_t plus(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? std::numeric_limits<int64_t>::max() : out;
}

// Tokens of a multi-turn episode: env.max_episode_tokens, or when 0
// max_prompt_len + max_turns × (max_new_tokens + max_observation_tokens).
inline int64_t episode_tokens(const Recipe& recipe) {
  const EnvConfig& env = recipe.env;
  if (env.max_episode_tokens > 0) return env.max_episode_tokens;
  return plus(recipe.rollout.max_prompt_len,
              times(env.max_turns, plus(recipe.rollout.max_new_tokens, env.max_observation_tokens)));
}

// Tokens a sequence of the job may hold: an RL sample's prompt and
// response (rollout.max_prompt_len + max_new_tokens; a multi-turn
// episode's episode_tokens), else data.max_len.
inline int64_t sequence_length(const Recipe& recipe) {
  if (!row_of(recipe.algorithm).rollout_engines) return recipe.data.max_len;
  if (has_env(recipe)) return episode_tokens(recipe);
  return static_cast<int64_t>(recipe.rollout.max_prompt_len) + recipe.rollout.max_new_tokens;
}

// The phrase messages use for sequence_length's source.
inline const char* sequence_length_keys(const Recipe& recipe) {
  if (!row_of(recipe.algorithm).rollout_engines) return "data.max_len";
  return has_env(recipe) ? "env.max_episode_tokens" : "rollout.max_prompt_len + rollout.max_new_tokens";
}

// The dp degree of `processes` laid out as `mesh` (dp = -1: processes /
// (tp × sp)); nullopt when tp × sp × dp cannot equal the processes.
constexpr std::optional<int64_t> data_parallel_degree(int64_t processes, const MeshConfig& mesh) {
  const int64_t tp_sp = times(mesh.tp, mesh.sp);
  if (tp_sp <= 0 || processes <= 0) return std::nullopt;
  if (mesh.dp == -1) {
    if (processes % tp_sp != 0) return std::nullopt;
    return processes / tp_sp;
  }
  if (times(tp_sp, mesh.dp) != processes) return std::nullopt;
  return mesh.dp;
}

// Items one micro-step takes over all dp ranks: micro × dp.
constexpr int64_t items_per_pass(int64_t micro, int64_t dp) { return times(micro, dp); }

// Whether a global batch of `global` items splits into whole micro-steps
// on every dp rank: global % (micro × dp) == 0.
constexpr bool splits_into_passes(int64_t global, int64_t micro, int64_t dp) {
  const int64_t pass = items_per_pass(micro, dp);
  return pass > 0 && global % pass == 0;
}

// Micro-steps per optimizer step on each rank: global / (micro × dp), at
// least 1 (lint refuses a global batch that does not split).
constexpr int64_t gradient_accumulation(int64_t global, int64_t micro, int64_t dp) {
  const int64_t pass = items_per_pass(micro, dp);
  return pass > 0 && global >= pass ? global / pass : 1;
}

// An RL step's samples: rollout prompts × n_samples_per_prompt.
constexpr int64_t rollout_samples(const BatchConfig& batch) { return times(batch.rollout, batch.n_samples_per_prompt); }

// Optimizer steps an RL step takes: ⌊samples / train⌋ per pass × epochs
// (0: lint's error, batch.train above the samples).
constexpr int64_t optimizer_steps(int64_t samples, int64_t train, int64_t epochs) {
  return train > 0 ? times(samples / train, epochs) : 0;
}

// Samples of an RL step left out of every pass: samples % train.
constexpr int64_t leftover_samples(int64_t samples, int64_t train) { return train > 0 ? samples % train : 0; }

}  // namespace meshrun::step_arithmetic
