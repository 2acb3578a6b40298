// Tests of src/data/sampler.cpp and sampler_state.cpp: shares of the global
// batch, epochs, determinism, and resuming at any step.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/data/sampler.hpp"
#include "meshrun/error.hpp"

namespace meshrun {
namespace {

SamplerConfig config_of(int64_t items, int global_batch, int micro, int dp, int rank, int epochs = 2,
                        ShardLayout layout = ShardLayout::strided) {
  SamplerConfig config;
  config.num_items = items;
  config.global_batch = global_batch;
  config.micro_batch = micro;
  config.dp_size = dp;
  config.dp_rank = rank;
  config.seed = 1234;
  config.epochs = epochs;
  config.layout = layout;
  return config;
}

// A state with only the position, as an older checkpoint might hold.
SamplerState at(int64_t epoch, int64_t position) {
  SamplerState state;
  state.epoch = epoch;
  state.position = position;
  return state;
}

std::vector<SamplerStep> drain(DistributedSampler& sampler) {
  std::vector<SamplerStep> steps;
  while (auto step = sampler.next()) steps.push_back(*step);
  return steps;
}

std::vector<int64_t> flatten(const SamplerStep& step) {
  std::vector<int64_t> items;
  for (const auto& micro : step.micro_batches) items.insert(items.end(), micro.begin(), micro.end());
  return items;
}

bool same_steps(const std::vector<SamplerStep>& a, const std::vector<SamplerStep>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].epoch != b[i].epoch || a[i].global_step != b[i].global_step ||
        a[i].step_in_epoch != b[i].step_in_epoch || a[i].micro_batches != b[i].micro_batches) {
      return false;
    }
  }
  return true;
}

TEST_CASE("counts: steps per epoch, gradient accumulation, the dropped remainder") {
  DistributedSampler sampler(config_of(103, 12, 2, 3, 0, 2));
  CHECK(sampler.grad_accum() == 2);
  CHECK(sampler.steps_per_epoch() == 8);
  CHECK(sampler.total_steps() == 16);
  CHECK(sampler.dropped_per_epoch() == 7);
  const auto steps = drain(sampler);
  CHECK(steps.size() == 16);
  CHECK(sampler.done());
  CHECK_FALSE(sampler.next());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    CHECK(steps[i].global_step == static_cast<int64_t>(i));
    CHECK(steps[i].epoch == static_cast<int64_t>(i / 8));
    CHECK(steps[i].step_in_epoch == static_cast<int64_t>(i % 8));
    REQUIRE(steps[i].micro_batches.size() == 2);
    CHECK(steps[i].micro_batches[0].size() == 2);
  }
}

TEST_CASE("ranks take disjoint strided or contiguous shares that make up the global batch") {
  for (const ShardLayout layout : {ShardLayout::strided, ShardLayout::contiguous}) {
    const int dp = 4;
    std::vector<std::vector<SamplerStep>> per_rank;
    for (int rank = 0; rank < dp; ++rank) {
      DistributedSampler sampler(config_of(50, 16, 2, dp, rank, 2, layout));
      per_rank.push_back(drain(sampler));
    }
    DistributedSampler whole(config_of(50, 16, 2, dp, 0, 2, layout));
    REQUIRE(per_rank[0].size() == 6);
    for (std::size_t s = 0; s < per_rank[0].size(); ++s) {
      const auto batch = whole.global_batch(per_rank[0][s].epoch, per_rank[0][s].step_in_epoch);
      for (int rank = 0; rank < dp; ++rank) {
        std::vector<int64_t> expected;
        for (int i = 0; i < 4; ++i) {
          expected.push_back(batch[layout == ShardLayout::strided ? rank + i * dp : rank * 4 + i]);
        }
        CHECK(flatten(per_rank[rank][s]) == expected);
      }
    }
  }
}

TEST_CASE("an epoch visits distinct items; epochs differ; dataset order without shuffle") {
  DistributedSampler sampler(config_of(40, 8, 8, 1, 0, 3));
  const auto steps = drain(sampler);
  REQUIRE(steps.size() == 15);
  std::vector<std::vector<int64_t>> epochs(3);
  for (const auto& step : steps) {
    const auto items = flatten(step);
    epochs[static_cast<std::size_t>(step.epoch)].insert(epochs[static_cast<std::size_t>(step.epoch)].end(),
                                                        items.begin(), items.end());
  }
  for (const auto& epoch : epochs) {
    CHECK(std::set<int64_t>(epoch.begin(), epoch.end()).size() == 40);
    CHECK(epoch == epoch_permutation(40, 1234, &epoch - epochs.data()));
  }
  CHECK(epochs[0] != epochs[1]);

  SamplerConfig ordered = config_of(10, 4, 2, 2, 1, 1);
  ordered.shuffle = false;
  DistributedSampler in_order(ordered);
  const auto plain = drain(in_order);
  REQUIRE(plain.size() == 2);
  CHECK(plain[0].micro_batches == std::vector<std::vector<int64_t>>{{1, 3}});
  CHECK(plain[1].micro_batches == std::vector<std::vector<int64_t>>{{5, 7}});
}

TEST_CASE("two samplers with the same configuration agree; another seed does not") {
  DistributedSampler a(config_of(64, 8, 2, 2, 1));
  DistributedSampler b(config_of(64, 8, 2, 2, 1));
  SamplerConfig other = config_of(64, 8, 2, 2, 1);
  other.seed = 1235;
  DistributedSampler c(other);
  const auto steps_a = drain(a);
  CHECK(same_steps(steps_a, drain(b)));
  CHECK_FALSE(same_steps(steps_a, drain(c)));
}

TEST_CASE("resuming at any global step gives exactly the batches of an uninterrupted run") {
  for (const int rank : {0, 2}) {
    const SamplerConfig config = config_of(37, 6, 1, 3, rank, 3);
    DistributedSampler uninterrupted(config);
    const auto all = drain(uninterrupted);
    REQUIRE(all.size() == 18);
    for (std::size_t k = 0; k <= all.size(); ++k) {
      DistributedSampler first(config);
      for (std::size_t i = 0; i < k; ++i) first.next();
      const std::string saved = first.state().to_json();
      DistributedSampler resumed(config);
      resumed.restore(SamplerState::from_json(saved));
      CHECK(resumed.global_step() == static_cast<int64_t>(k));
      const auto rest = drain(resumed);
      CHECK(same_steps(rest, std::vector<SamplerStep>(all.begin() + static_cast<std::ptrdiff_t>(k), all.end())));
    }
  }
}

TEST_CASE("a state saved on 2 ranks resumes on 4: the global batches continue unchanged") {
  std::vector<std::vector<int64_t>> global_batches;
  {
    DistributedSampler whole(config_of(40, 8, 1, 1, 0, 2));
    for (const auto& step : drain(whole)) global_batches.push_back(flatten(step));
  }
  DistributedSampler two(config_of(40, 8, 2, 2, 0, 2));
  for (int i = 0; i < 3; ++i) two.next();
  const SamplerState state = two.state();
  std::vector<std::vector<std::vector<int64_t>>> by_rank;
  for (int rank = 0; rank < 4; ++rank) {
    DistributedSampler four(config_of(40, 8, 1, 4, rank, 2));
    four.restore(state);
    std::vector<std::vector<int64_t>> steps;
    for (const auto& step : drain(four)) steps.push_back(flatten(step));
    by_rank.push_back(steps);
  }
  REQUIRE(by_rank[0].size() == global_batches.size() - 3);
  for (std::size_t s = 0; s < by_rank[0].size(); ++s) {
    std::vector<int64_t> combined;
    for (int i = 0; i < 2; ++i) {
      for (int rank = 0; rank < 4; ++rank) combined.push_back(by_rank[rank][s][i]);
    }
    CHECK(combined == global_batches[s + 3]);
  }
}

TEST_CASE("the state after the last step of an epoch is the start of the next") {
  DistributedSampler sampler(config_of(20, 5, 5, 1, 0, 2));
  for (int i = 0; i < 4; ++i) sampler.next();
  CHECK(sampler.state().epoch == 1);
  CHECK(sampler.state().position == 0);
  DistributedSampler restored(config_of(20, 5, 5, 1, 0, 2));
  restored.restore(at(0, 20));  // the same point, written the other way
  CHECK(restored.state() == sampler.state());
  restored.restore(at(2, 0));
  CHECK(restored.done());
  CHECK_FALSE(restored.next());
}

TEST_CASE("state JSON: exact text, round trip, and refused input") {
  const SamplerState state{3, 48, 1000, 16, 42};
  CHECK(state.to_json() == R"({"epoch":3,"position":48,"num_items":1000,"global_batch":16,"seed":42})");
  CHECK(SamplerState::from_json(state.to_json()) == state);
  const SamplerState bare = SamplerState::from_json(R"({"position": 8, "epoch": 1})");
  CHECK(bare == at(1, 8));
  CHECK(bare.to_json() == R"({"epoch":1,"position":8})");
  CHECK_THROWS_WITH_AS(SamplerState::from_json("{\"epoch\": 1}"), "sampler state: missing key \"position\"",
                       CheckpointError);
  CHECK_THROWS_WITH_AS(SamplerState::from_json("{\"epoch\": 1.5, \"position\": 0}"),
                       "sampler state: key \"epoch\" must be an integer, got 1.5", CheckpointError);
  CHECK_THROWS_AS(SamplerState::from_json("[1, 2]"), CheckpointError);
  CHECK_THROWS_AS(SamplerState::from_json("{epoch"), CheckpointError);
  CHECK_THROWS_AS(SamplerState::from_json(R"({"epoch": -1, "position": 0})"), CheckpointError);
}

TEST_CASE("restoring a state that does not fit is refused with the reason") {
  DistributedSampler sampler(config_of(40, 8, 2, 2, 0, 2));
  CHECK_THROWS_WITH_AS(sampler.restore(SamplerState{0, 8, 39, 8, 1234}),
                       doctest::Contains("saved state is for 39 sequences, this dataset has 40"), CheckpointError);
  CHECK_THROWS_WITH_AS(sampler.restore(SamplerState{0, 8, 40, 16, 1234}),
                       doctest::Contains("batch.train = 16, this run has 8"), ConfigError);
  CHECK_THROWS_WITH_AS(sampler.restore(SamplerState{0, 8, 40, 8, 7}), doctest::Contains("seed 7"),
                       ConfigError);
  try {
    sampler.restore(SamplerState{0, 8, 40, 16, 1234});
  } catch (const ConfigError& error) {
    CHECK(error.recipe_key() == "batch.train");
  }
  CHECK_THROWS_WITH_AS(sampler.restore(at(0, 4)), doctest::Contains("not a multiple of batch.train"),
                       CheckpointError);
  CHECK_THROWS_AS(sampler.restore(at(0, 48)), CheckpointError);
  CHECK_THROWS_AS(sampler.restore(at(3, 0)), CheckpointError);
  CHECK_THROWS_WITH_AS(sampler.restore(at(2, 8)), doctest::Contains("past the last epoch"),
                       CheckpointError);
  CHECK(sampler.global_step() == 0);  // nothing half-applied
}

TEST_CASE("impossible configurations are refused with the numbers") {
  CHECK_THROWS_WITH_AS(DistributedSampler(config_of(100, 10, 4, 1, 0)),
                       "sampler: batch.train (10) must be a multiple of batch.micro_train × dp (4 × 1 = 4)",
                       ConfigError);
  CHECK_THROWS_WITH_AS(DistributedSampler(config_of(7, 8, 1, 1, 0)),
                       "the dataset has 7 sequences, fewer than one global batch (batch.train = 8)",
                       ConfigError);
  try {
    DistributedSampler refused(config_of(100, 10, 4, 1, 0));
  } catch (const ConfigError& error) {
    CHECK(error.recipe_key() == "batch.train");
    CHECK(error.rule() == "batch.train-divisible");
  }
  CHECK_THROWS_AS(DistributedSampler(config_of(100, 8, 1, 2, 2)), std::logic_error);
  CHECK_THROWS_AS(DistributedSampler(config_of(100, 8, 1, 0, 0)), std::logic_error);
  CHECK_THROWS_AS(DistributedSampler(config_of(100, 8, 0, 1, 0)), ConfigError);
  CHECK_THROWS_AS(DistributedSampler(config_of(100, 8, 1, 1, 0, 0)), ConfigError);
  DistributedSampler sampler(config_of(16, 8, 1, 1, 0));
  CHECK_THROWS_AS(sampler.global_batch(0, 2), std::logic_error);
}

}  // namespace
}  // namespace meshrun
