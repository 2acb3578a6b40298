// Tests of include/meshrun/recipe/step_arithmetic.hpp: the step formulas
// lint, the plan and the samplers share.
#include <doctest/doctest.h>

#include <limits>

#include "meshrun/recipe/step_arithmetic.hpp"

namespace meshrun {
namespace {

using namespace step_arithmetic;

TEST_CASE("dp: given, inferred from tp × sp, or impossible") {
  CHECK(data_parallel_degree(8, MeshConfig{2, 1, -1}) == 4);
  CHECK(data_parallel_degree(8, MeshConfig{2, 2, -1}) == 2);
  CHECK(data_parallel_degree(8, MeshConfig{2, 2, 2}) == 2);
  CHECK_FALSE(data_parallel_degree(8, MeshConfig{3, 1, -1}));
  CHECK_FALSE(data_parallel_degree(8, MeshConfig{2, 1, 3}));
  CHECK_FALSE(data_parallel_degree(0, MeshConfig{1, 1, -1}));
  // Saturating: a product past 64 bits fails the comparison, never wraps.
  const int big = std::numeric_limits<int>::max();
  CHECK_FALSE(data_parallel_degree(8, MeshConfig{big, big, big}));
}

TEST_CASE("passes and gradient accumulation: train / (micro × dp)") {
  CHECK(items_per_pass(2, 4) == 8);
  CHECK(splits_into_passes(16, 2, 4));
  CHECK_FALSE(splits_into_passes(12, 2, 4));
  CHECK(gradient_accumulation(16, 2, 4) == 2);
  CHECK(gradient_accumulation(4, 2, 4) == 1);  // short of one pass: lint's error, never 0
  CHECK(items_per_pass(std::numeric_limits<int64_t>::max(), 2) == std::numeric_limits<int64_t>::max());
}

TEST_CASE("an RL step: samples, optimizer steps and the samples left out") {
  BatchConfig batch;
  batch.rollout = 6;
  batch.n_samples_per_prompt = 4;
  CHECK(rollout_samples(batch) == 24);
  CHECK(optimizer_steps(24, 8, 2) == 6);
  CHECK(optimizer_steps(24, 10, 1) == 2);
  CHECK(leftover_samples(24, 10) == 4);
  CHECK(optimizer_steps(24, 32, 1) == 0);
  CHECK(optimizer_steps(std::numeric_limits<int64_t>::max(), 1, 3) == std::numeric_limits<int64_t>::max());
}

TEST_CASE("sequence length: prompt + response for RL, data.max_len otherwise") {
  Recipe recipe;
  recipe.algorithm = Algorithm::sft;
  recipe.data.max_len = 512;
  recipe.rollout.max_prompt_len = 100;
  recipe.rollout.max_new_tokens = 60;
  CHECK(sequence_length(recipe) == 512);
  recipe.algorithm = Algorithm::ppo;
  CHECK(sequence_length(recipe) == 160);
}

}  // namespace
}  // namespace meshrun
