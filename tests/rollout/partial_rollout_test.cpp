// Partial rollouts (Generator with WeightUpdates): new weights arriving
// mid-generation are loaded between steps; every token records the
// version that sampled it, its log-prob is that version's (teacher-forced
// over the whole sequence, so a resumed sequence's KV cache was rebuilt
// with the new weights), the interrupted sequences are counted and every
// KV block is free afterwards; with and without the cache, and in
// multi-turn episodes.
#include "tests/dist/torch_doctest.hpp"

#include <algorithm>

#include "meshrun/model/model.hpp"
#include "meshrun/rollout/generation.hpp"
#include "model/model_fixtures.hpp"

using namespace meshrun;

namespace {

LlamaModel partial_test_model(uint64_t seed) {
  ModelOptions options;
  options.config = model_test::small_config();
  options.config.vocab = 40;
  options.config.max_position = 128;
  options.config.initializer_range = 0.3;
  torch::manual_seed(seed);
  return LlamaModel(options);
}

// New weights (`next`'s) that arrive when the engine has asked `after`
// times, then are copied into `target` as version 1.
struct ScriptedUpdates : WeightUpdates {
  LlamaModel target, next;
  int64_t after = 0;
  int64_t asked = 0;
  int64_t current = 0;
  ScriptedUpdates(LlamaModel target_model, LlamaModel next_model, int64_t after_asks)
      : target(std::move(target_model)), next(std::move(next_model)), after(after_asks) {}
  bool waiting() override { return current == 0 && ++asked > after; }
  int64_t load() override {
    torch::NoGradGuard no_grad;
    auto source = next->named_parameters();
    for (auto& item : target->named_parameters()) item.value().copy_(source[item.key()]);
    return current = 1;
  }
  int64_t version() const override { return current; }
};

// log π(response token t) under `model`, teacher-forced over prompt + response.
std::vector<float> teacher_forced(LlamaModel& model, const GeneratedSample& sample) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> ids(sample.prompt.begin(), sample.prompt.end());
  ids.insert(ids.end(), sample.response.begin(), sample.response.end());
  const torch::Tensor logits = model->forward({torch::tensor(ids).unsqueeze(0), {}, {}, {}}).squeeze(0);
  const torch::Tensor log_probs = torch::log_softmax(logits.to(torch::kFloat), -1);
  std::vector<float> out;
  const auto prompt = static_cast<int64_t>(sample.prompt.size());
  for (size_t t = 0; t < sample.response.size(); ++t)
    out.push_back(log_probs[prompt - 1 + static_cast<int64_t>(t)][sample.response[t]].item<float>());
  return out;
}

const std::vector<std::vector<int32_t>> kPartialPrompts = {{5, 6, 7}, {5, 6, 7}, {8, 9, 10, 11}, {1}, {2, 3}, {20, 21}};

SamplingOptions partial_options() {
  SamplingOptions options;
  options.temperature = 1.0;
  options.max_new_tokens = 10;
  options.seed = 23;
  return options;
}

// Checks each sample's versions and log-probs against the two weights.
int64_t check_versions(const std::vector<GeneratedSample>& samples, LlamaModel& old_weights, LlamaModel& new_weights) {
  int64_t mixed = 0;
  for (const GeneratedSample& sample : samples) {
    REQUIRE(sample.versions.size() == sample.response.size());
    CHECK(std::is_sorted(sample.versions.begin(), sample.versions.end()));
    const std::vector<float> before = teacher_forced(old_weights, sample);
    const std::vector<float> after = teacher_forced(new_weights, sample);
    for (size_t t = 0; t < sample.response.size(); ++t) {
      REQUIRE((sample.versions[t] == 0 || sample.versions[t] == 1));
      const float expected = sample.versions[t] == 0 ? before[t] : after[t];
      CHECK(sample.log_probs[t] == doctest::Approx(expected).epsilon(1e-4));
    }
    mixed += sample.versions.front() != sample.versions.back() ? 1 : 0;
  }
  return mixed;
}

}  // namespace

TEST_CASE("partial rollouts: tokens record the weights that sampled them, resumed on rebuilt caches") {
  for (const int64_t max_batch : {2, 6}) {
    CAPTURE(max_batch);
    LlamaModel old_weights = partial_test_model(31), new_weights = partial_test_model(77);
    LlamaModel engine_model = partial_test_model(31);
    ScriptedUpdates updates(engine_model, new_weights, 4);
    Generator generator(engine_model, nullptr, max_batch, 32);
    const auto samples = generator.generate(kPartialPrompts, partial_options(), true, nullptr, &updates);
    const int64_t mixed = check_versions(samples, old_weights, new_weights);
    const GenerationStats& stats = generator.stats();
    CHECK(stats.weight_loads == 1);
    CHECK(mixed >= 1);
    CHECK(stats.interrupted == mixed);
    CHECK(generator.kv_pool().free_blocks() == generator.kv_pool().total_blocks());
    // Requests admitted after the load are the new weights' alone.
    if (max_batch == 2) CHECK(samples.back().versions.front() == 1);
  }
}

TEST_CASE("partial rollouts without the cache: the next token is the new weights'") {
  LlamaModel old_weights = partial_test_model(31), new_weights = partial_test_model(77);
  LlamaModel engine_model = partial_test_model(31);
  ScriptedUpdates updates(engine_model, new_weights, 15);
  Generator generator(engine_model, nullptr, 4, 32);
  const auto samples = generator.generate(kPartialPrompts, partial_options(), false, nullptr, &updates);
  CHECK(check_versions(samples, old_weights, new_weights) == 1);
  CHECK(generator.stats().weight_loads == 1);
  CHECK(generator.stats().interrupted == 1);
}

TEST_CASE("partial rollouts: no weights arriving changes no token, and versions are all the initial one") {
  LlamaModel engine_model = partial_test_model(31);
  ScriptedUpdates never(engine_model, partial_test_model(77), 1 << 30);
  Generator generator(engine_model, nullptr, 3, 32);
  const auto plain = generator.generate(kPartialPrompts, partial_options());
  const auto watched = generator.generate(kPartialPrompts, partial_options(), true, nullptr, &never);
  REQUIRE(plain.size() == watched.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    CHECK(plain[i].response == watched[i].response);
    CHECK(plain[i].versions.empty());
    CHECK(watched[i].versions == std::vector<int64_t>(watched[i].response.size(), 0));
  }
  CHECK(generator.stats().weight_loads == 0);
}

namespace {

// Two turns: after the first, a fixed observation {30, 31}.
struct TwoTurns : TurnHandler {
  TurnEnd end_turn(size_t, const GeneratedSample& sample, int64_t, int64_t room) override {
    TurnEnd end;
    if (sample.turns >= 2 || room <= 2) return end;
    end.finished = false;
    end.observation = {30, 31};
    return end;
  }
};

}  // namespace

TEST_CASE("partial rollouts in episodes: observations carry the version live when appended") {
  LlamaModel old_weights = partial_test_model(31), new_weights = partial_test_model(77);
  LlamaModel engine_model = partial_test_model(31);
  ScriptedUpdates updates(engine_model, new_weights, 12);
  TwoTurns turns;
  SamplingOptions options = partial_options();
  options.max_new_tokens = 5;
  Generator generator(engine_model, nullptr, 3, 32);
  const auto samples = generator.generate(kPartialPrompts, options, true, &turns, &updates);
  int64_t mixed = 0;
  for (const GeneratedSample& sample : samples) {
    REQUIRE(sample.versions.size() == sample.response.size());
    REQUIRE(sample.policy_mask.size() == sample.response.size());
    CHECK(std::is_sorted(sample.versions.begin(), sample.versions.end()));
    const std::vector<float> before = teacher_forced(old_weights, sample);
    const std::vector<float> after = teacher_forced(new_weights, sample);
    for (size_t t = 0; t < sample.response.size(); ++t) {
      if (!sample.policy_mask[t]) continue;
      CHECK(sample.log_probs[t] == doctest::Approx(sample.versions[t] == 0 ? before[t] : after[t]).epsilon(1e-4));
    }
    mixed += sample.versions.front() != sample.versions.back() ? 1 : 0;
  }
  CHECK(mixed >= 1);
  CHECK(generator.kv_pool().free_blocks() == generator.kv_pool().total_blocks());
}
