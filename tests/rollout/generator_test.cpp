// Generator: the KV cache changes no token, padding and chunking change no
// token, greedy equals a hand-run argmax loop, seeds decide the samples, eos
// stops one sequence and not the others, and bad prompts are refused.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/rollout/generation.hpp"
#include "meshrun/model/model.hpp"

using namespace meshrun;

namespace {

ModelConfig config() {
  ModelConfig c;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.intermediate = 48;
  c.vocab = 48;
  c.max_position = 128;
  return c;
}

LlamaModel make_model() {
  ModelOptions options;
  options.config = config();
  torch::manual_seed(31);
  // A larger init makes the distribution peaked enough that greedy and
  // sampled runs are not trivially uniform.
  options.config.initializer_range = 0.3;
  return LlamaModel(options);
}

const std::vector<std::vector<int32_t>> kPrompts = {{5, 6, 7}, {8, 9, 10, 11, 12, 13, 14}, {1}, {2, 3}, {40, 41, 42, 43}};

std::vector<std::vector<int32_t>> responses(const std::vector<GeneratedSample>& samples) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& sample : samples) out.push_back(sample.response);
  return out;
}

}  // namespace

TEST_CASE("generation with the KV cache equals recomputing the prefix, token for token") {
  Generator generator(make_model(), nullptr, 8, 40);
  for (double temperature : {0.0, 1.0}) {
    SamplingOptions options;
    options.temperature = temperature;
    options.top_k = 30;
    options.top_p = 0.95;
    options.max_new_tokens = 20;
    options.seed = 9;
    const auto cached = generator.generate(kPrompts, options, true);
    const auto recomputed = generator.generate(kPrompts, options, false);
    CHECK(responses(cached) == responses(recomputed));
    for (const auto& sample : cached) CHECK(sample.response.size() == 20);
  }
}

TEST_CASE("greedy generation equals an argmax loop over each unpadded prompt alone") {
  Generator generator(make_model(), nullptr, 8, 40);
  SamplingOptions options;
  options.temperature = 0;
  options.max_new_tokens = 6;
  const auto samples = generator.generate(kPrompts, options);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    std::vector<int64_t> ids(kPrompts[i].begin(), kPrompts[i].end());
    for (int step = 0; step < 6; ++step) {
      const torch::Tensor logits = generator.model()->forward({torch::tensor(ids, torch::kInt64).unsqueeze(0), {}, {}, {}});
      ids.push_back(logits[0][-1].argmax().item<int64_t>());
    }
    const std::vector<int32_t> expected(ids.begin() + static_cast<long>(kPrompts[i].size()), ids.end());
    CHECK_MESSAGE(samples[i].prompt == kPrompts[i], "prompt " << i);
    CHECK_MESSAGE(samples[i].response == expected, "prompt " << i);
  }
}

TEST_CASE("chunking over a small cache and the seed decide the samples deterministically") {
  SamplingOptions options;
  options.max_new_tokens = 10;
  options.seed = 4;
  Generator one_chunk(make_model(), nullptr, 8, 40);
  Generator chunks_of_two(make_model(), nullptr, 2, 40);
  const auto a = responses(one_chunk.generate(kPrompts, options));
  CHECK(a == responses(one_chunk.generate(kPrompts, options)));
  // Greedy results do not depend on chunking at all.
  options.temperature = 0;
  CHECK(responses(one_chunk.generate(kPrompts, options)) == responses(chunks_of_two.generate(kPrompts, options)));
  options.temperature = 1;
  options.seed = 5;
  CHECK(a != responses(one_chunk.generate(kPrompts, options)));
}

TEST_CASE("a sequence stops at its eos token; the others go on") {
  Generator generator(make_model(), nullptr, 8, 40);
  SamplingOptions options;
  options.temperature = 0;
  options.max_new_tokens = 8;
  const auto free_run = generator.generate(kPrompts, options);
  // Make prompt 1's third greedy token the eos; a prompt whose greedy run
  // never produces it must keep all 8 tokens.
  const int32_t eos = free_run[1].response[2];
  options.stop_ids = {eos};
  const auto stopped = generator.generate(kPrompts, options);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const auto& full = free_run[i].response;
    const auto at = std::find(full.begin(), full.end(), eos);
    const std::vector<int32_t> expected(full.begin(), at == full.end() ? full.end() : at + 1);
    CHECK_MESSAGE(stopped[i].response == expected, "prompt " << i);
    CHECK(stopped[i].stopped_at_eos == (at != full.end()));
  }
  CHECK(stopped[1].response.size() <= 3);

  // Any of several stop ids ends a sequence (the tokenizer's eos and the model's eos_token_id).
  const int32_t other = free_run[0].response[1];
  options.stop_ids = {eos, other};
  const auto either = generator.generate(kPrompts, options);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const auto& full = free_run[i].response;
    const auto at = std::find_if(full.begin(), full.end(), [&](int32_t t) { return t == eos || t == other; });
    const std::vector<int32_t> expected(full.begin(), at == full.end() ? full.end() : at + 1);
    CHECK_MESSAGE(either[i].response == expected, "prompt " << i);
    CHECK(either[i].stopped_at_eos == (at != full.end()));
  }
  CHECK(either[0].response.size() <= 2);
}

TEST_CASE("empty prompts and prompts without room for max_new_tokens are refused") {
  Generator generator(make_model(), nullptr, 2, 12);
  SamplingOptions options;
  options.max_new_tokens = 8;
  CHECK_THROWS_WITH_AS(generator.generate({{1, 2}, {}}, options), doctest::Contains("prompt 1 is empty"),
                       std::logic_error);
  CHECK_THROWS_WITH_AS(generator.generate({{1, 2, 3, 4, 5}}, options),
                       doctest::Contains("prompt 0 has 5 tokens; with max_new_tokens = 8 it needs 13 but the engine holds 12"),
                       std::logic_error);
}
