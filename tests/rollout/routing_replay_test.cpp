// Routing replay (R3): the engine records every fed token's experts, in
// both generation paths, with shared prompts and preemption; packed, they
// make a training forward of the same weights give the engine's log-probs;
// and when the trainer's router drifts so that its own choices flip, the
// replayed routes keep the log-probs near the engine's while routing anew
// moves them, and the flips are counted.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/arch/model_config.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/rollout/generation.hpp"
#include "../model/model_fixtures.hpp"

using namespace meshrun;

namespace {

ModelConfig moe_config() {
  ModelConfig c = model_test::small_config();
  c.family = ModelFamily::qwen3_moe;
  apply_family_layout(c);
  c.layers = 3;
  c.experts = 6;
  c.experts_per_token = 2;
  c.expert_intermediate = 16;
  c.norm_topk_prob = true;
  c.mlp_only_layers = {1};  // layers 0 and 2 sparse
  return c;
}

LlamaModel replay_model() {
  ModelOptions options;
  options.config = moe_config();
  torch::manual_seed(3);
  LlamaModel model(options);
  model->eval();
  return model;
}

// Two samples of one prompt (a shared prefix) and another prompt.
const std::vector<std::vector<int32_t>> kReplayPrompts = {{5, 9, 11, 3}, {5, 9, 11, 3}, {7, 2, 30, 31, 8, 1}};

SamplingOptions sampling() {
  SamplingOptions options;
  options.max_new_tokens = 9;
  options.seed = 4;
  options.record_routes = true;
  return options;
}

// The log-probs of each sample's response under `model`, with or without
// its recorded routes.
torch::Tensor response_log_probs(LlamaModel& model, const std::vector<GeneratedSample>& samples, bool replay) {
  const SequenceBatch batch = pack_samples(samples, 0);
  ModelInputs inputs{batch.sequences, {}, {}, batch.attention_mask};
  if (replay) inputs.routes = batch.routes;
  torch::NoGradGuard no_grad;
  const torch::Tensor labels = batch.sequences.narrow(1, batch.prompt_len, batch.response_len);
  return model->forward_log_probs(inputs, labels, {}, batch.prompt_len - 1).log_probs * batch.response_mask;
}

torch::Tensor engine_log_probs(const std::vector<GeneratedSample>& samples) {
  const SequenceBatch batch = pack_samples(samples, 0);
  torch::Tensor out = torch::zeros({static_cast<int64_t>(samples.size()), batch.response_len});
  for (size_t i = 0; i < samples.size(); ++i)
    for (size_t t = 0; t < samples[i].log_probs.size(); ++t)
      out[static_cast<int64_t>(i)][static_cast<int64_t>(t)] = samples[i].log_probs[t];
  return out;
}

}  // namespace

TEST_CASE("routing replay: the engine records each fed token's experts, the same in both generation paths") {
  Generator generator(replay_model(), nullptr, 8, 40, 0, 4, 3);  // blocks of 4, prefill chunks of 3
  const auto cached = generator.generate(kReplayPrompts, sampling(), true);
  const auto recomputed = generator.generate(kReplayPrompts, sampling(), false);
  for (size_t i = 0; i < cached.size(); ++i) {
    CAPTURE(i);
    const GeneratedSample& sample = cached[i];
    CHECK(sample.route_layers == 2);
    CHECK(sample.route_k == 2);
    // Every token but the last was fed.
    CHECK(sample.routed_positions() == static_cast<int64_t>(sample.prompt.size() + sample.response.size()) - 1);
    for (const int16_t expert : sample.routes) {
      CHECK(expert >= 0);
      CHECK(expert < 6);
    }
    CHECK(sample.routes == recomputed[i].routes);
  }
  // The group's second sample shares the first's prompt routes.
  const size_t prompt = kReplayPrompts[0].size() * 2 * 2;
  CHECK(std::equal(cached[0].routes.begin(), cached[0].routes.begin() + static_cast<std::ptrdiff_t>(prompt),
                   cached[1].routes.begin()));
  // Without the option, nothing is recorded.
  const auto plain = generator.generate(kReplayPrompts, SamplingOptions{}, true);
  CHECK(plain[0].routes.empty());
  CHECK(plain[0].route_layers == 0);
  // Packed at their columns (prompts left-padded), -1 elsewhere.
  const SequenceBatch batch = pack_samples(cached, 0);
  REQUIRE(batch.routes.defined());
  CHECK(batch.routes.sizes() == torch::IntArrayRef({3, batch.prompt_len + batch.response_len, 2, 2}));
  const int64_t offset = batch.prompt_len - static_cast<int64_t>(kReplayPrompts[0].size());
  CHECK(batch.routes[0][offset][0][0].item<int64_t>() == cached[0].routes[0]);
  if (offset > 0) CHECK(batch.routes[0][offset - 1][0][0].item<int64_t>() == -1);
}

TEST_CASE("routing replay: with the engine's routes the trainer's log-probs are the engine's; a drifted router flips routes that replay holds") {
  Generator generator(replay_model(), nullptr, 8, 40);
  const auto samples = generator.generate(kReplayPrompts, sampling(), true);
  const torch::Tensor engine = engine_log_probs(samples);

  // The same weights: replayed or not, the engine's log-probs.
  LlamaModel trainer = replay_model();
  CHECK(response_log_probs(trainer, samples, true).sub(engine).abs().max().item<double>() < 1e-5);
  CHECK(response_log_probs(trainer, samples, false).sub(engine).abs().max().item<double>() < 1e-5);

  // The trainer's routers drift (as another kernel's rounding would move
  // near-tied router logits): routing anew flips experts, which moves the
  // log-probs; replayed, only the weights of the same experts move.
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(11);
    for (auto& item : trainer->named_parameters())
      if (item.key().ends_with("mlp.gate.weight")) item.value().add_(torch::randn_like(item.value()) * 0.05);
  }
  const double anew = response_log_probs(trainer, samples, false).sub(engine).abs().max().item<double>();
  const double replayed = response_log_probs(trainer, samples, true).sub(engine).abs().max().item<double>();
  MESSAGE("largest log-prob gap to the engine: routing anew " << anew << ", replayed " << replayed);
  CHECK(replayed < anew / 2);

  // The training forward counts the flips it replayed over.
  const SequenceBatch batch = pack_samples(samples, 0);
  ModelInputs inputs{batch.sequences, {}, {}, batch.attention_mask};
  inputs.routes = batch.routes;
  const torch::Tensor logits = trainer->forward(inputs);
  const RouterStats stats = trainer->router_stats();
  REQUIRE(stats.replayed_routes.defined());
  const double given = stats.replayed_routes[0].item<double>(), flipped = stats.replayed_routes[1].item<double>();
  CHECK(given == static_cast<double>(2 * (samples[0].routed_positions() + samples[1].routed_positions() +
                                          samples[2].routed_positions())));
  CHECK(flipped > 0);
  CHECK(flipped < given);

  // A route naming an expert the model lacks is refused; a misshapen one too.
  inputs.routes = batch.routes.clone();
  inputs.routes[0][batch.prompt_len][0][0] = 6;
  CHECK_THROWS_WITH_AS(trainer->forward(inputs), doctest::Contains("names expert 6"), ModelInputError);
  inputs.routes = batch.routes.narrow(2, 0, 1);
  CHECK_THROWS_AS(trainer->forward(inputs), std::logic_error);
}
