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

TEST_CASE("empty prompts, prompts without room for max_new_tokens and ids outside the vocabulary are refused") {
  Generator generator(make_model(), nullptr, 2, 12);
  SamplingOptions options;
  options.max_new_tokens = 8;
  CHECK_THROWS_WITH_AS(generator.generate({{1, 2}, {}}, options), doctest::Contains("prompt 1 is empty"),
                       std::logic_error);
  CHECK_THROWS_WITH_AS(generator.generate({{1, 2, 3, 4, 5}}, options),
                       doctest::Contains("prompt 0 has 5 tokens; with max_new_tokens = 8 it needs 13 but the engine holds 12"),
                       std::logic_error);
  // Ids are checked on the host (a GPU's forward_paged does not read them back).
  CHECK_THROWS_WITH_AS(generator.generate({{1, 2}, {3, 48}}, options),
                       doctest::Contains("prompt 1 holds token id 48, outside the vocabulary [0, 48)"), ModelInputError);
  CHECK_THROWS_AS(generator.generate({{-1}}, options), ModelInputError);
  CHECK(generator.kv_pool().free_blocks() == generator.kv_pool().total_blocks());
}

namespace {

// `groups` prompts each repeated `n` times, as a GRPO step asks for them.
std::vector<std::vector<int32_t>> grouped(const std::vector<std::vector<int32_t>>& prompts, int n) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& prompt : prompts)
    for (int i = 0; i < n; ++i) out.push_back(prompt);
  return out;
}

}  // namespace

TEST_CASE("a sample's tokens do not depend on max_batch, its slot or what else is live") {
  SamplingOptions options;
  options.max_new_tokens = 12;
  options.seed = 77;
  options.top_k = 20;
  const auto prompts = grouped(kPrompts, 3);
  // A stop token that ends some samples early, so that slots refill mid-run.
  Generator probe(make_model(), nullptr, 64, 40);
  options.stop_ids = {probe.generate(prompts, options)[0].response[1]};
  std::vector<std::vector<GeneratedSample>> runs;
  for (int64_t max_batch : {1, 4, 64}) {
    Generator generator(make_model(), nullptr, max_batch, 40);
    runs.push_back(generator.generate(prompts, options));
    CAPTURE(max_batch);
    const GenerationStats& stats = generator.stats();
    int64_t tokens = 0;
    for (const auto& sample : runs.back()) tokens += static_cast<int64_t>(sample.response.size());
    // Every decode step samples exactly one token for each live slot.
    CHECK(stats.busy_slot_steps == tokens);
    CHECK(stats.slot_utilization() <= 1.0);
  }
  int stopped = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    CHECK(runs[0][i].response == runs[1][i].response);
    CHECK(runs[0][i].response == runs[2][i].response);
    REQUIRE(runs[0][i].log_probs.size() == runs[2][i].log_probs.size());
    for (size_t t = 0; t < runs[0][i].log_probs.size(); ++t)
      CHECK(runs[0][i].log_probs[t] == doctest::Approx(runs[2][i].log_probs[t]).epsilon(1e-5));
    stopped += runs[0][i].stopped_at_eos ? 1 : 0;
  }
  CHECK(stopped > 0);
  CHECK(stopped < static_cast<int>(prompts.size()));
  // The samples of one group differ: each has its own stream.
  CHECK(runs[0][0].response != runs[0][1].response);
}

TEST_CASE("a sample's stream is its id: a later call's first_sample continues the numbering") {
  SamplingOptions options;
  options.max_new_tokens = 8;
  options.seed = 5;
  Generator generator(make_model(), nullptr, 4, 40);
  const auto whole = generator.generate(kPrompts, options);
  options.first_sample = 2;
  const std::vector<std::vector<int32_t>> tail(kPrompts.begin() + 2, kPrompts.end());
  const auto part = generator.generate(tail, options);
  for (size_t i = 0; i < tail.size(); ++i) CHECK(part[i].response == whole[i + 2].response);
  CHECK(sample_uniform(5, 2, 0) != sample_uniform(5, 3, 0));
  CHECK(sample_uniform(5, 2, 0) != sample_uniform(5, 2, 1));
  CHECK(sample_uniform(5, 2, 0) == sample_uniform(5, 2, 0));
  for (uint64_t token = 0; token < 1000; ++token) {
    const double u = sample_uniform(11, 7, token);
    CHECK((u >= 0.0 && u < 1.0));
  }
}

TEST_CASE("a group's samples share one prefill of their prompt and give the tokens of unshared prefills") {
  SamplingOptions options;
  options.max_new_tokens = 10;
  options.seed = 3;
  const auto prompts = grouped(kPrompts, 4);
  Generator shared(make_model(), nullptr, 8, 40);
  const auto with_sharing = shared.generate(prompts, options);
  int64_t expected_shared = 0;
  // Slots free up one by one once the first eight are running, so later
  // groups may be admitted in parts; at least the first two groups share.
  expected_shared += 3 * static_cast<int64_t>(kPrompts[0].size() + kPrompts[1].size());
  CHECK(shared.stats().prefix_shared_tokens >= expected_shared);
  CHECK(shared.stats().prefilled_tokens + shared.stats().prefix_shared_tokens ==
        4 * static_cast<int64_t>(3 + 7 + 1 + 2 + 4));
  // One slot: every sample prefills its own prompt.
  Generator alone(make_model(), nullptr, 1, 40);
  const auto without_sharing = alone.generate(prompts, options);
  CHECK(alone.stats().prefix_shared_tokens == 0);
  CHECK(responses(with_sharing) == responses(without_sharing));
}

TEST_CASE("slots are refilled as sequences stop: ten thousand short sequences through four slots") {
  // max_new_tokens 1: every sequence stops after its first token, freeing
  // its slot for the next; a slot that leaked would stall the run.
  SamplingOptions options;
  options.max_new_tokens = 1;
  options.seed = 1;
  Generator generator(make_model(), nullptr, 4, 16);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 10000; ++i) prompts.push_back({static_cast<int32_t>(1 + i % 40), static_cast<int32_t>(2 + i % 7)});
  const auto samples = generator.generate(prompts, options);
  REQUIRE(samples.size() == prompts.size());
  for (const auto& sample : samples) CHECK(sample.response.size() == 1);
  CHECK(generator.stats().decode_steps == 2500);
  CHECK(generator.stats().slot_utilization() == doctest::Approx(1.0));
}

TEST_CASE("early stops leave no slot idle while prompts are pending") {
  // Greedy, with a stop id that ends prompt 1 at its third token: its slot
  // takes the next prompt at once, so two slots run five prompts in fewer
  // decode steps than two static batches would.
  Generator probe(make_model(), nullptr, 8, 40);
  SamplingOptions options;
  options.temperature = 0;
  options.max_new_tokens = 8;
  const int32_t eos = probe.generate(kPrompts, options)[1].response[2];
  options.stop_ids = {eos};
  Generator generator(make_model(), nullptr, 2, 40);
  const auto samples = generator.generate(kPrompts, options);
  int64_t tokens = 0;
  for (const auto& sample : samples) tokens += static_cast<int64_t>(sample.response.size());
  CHECK(generator.stats().busy_slot_steps == tokens);
  // Busy the whole time but for the tail: at most one decode step per token
  // pair, plus the last sequence running alone.
  CHECK(generator.stats().decode_steps <= (tokens + 1) / 2 + 8);
  CHECK(generator.stats().slot_utilization() > 0.5);
}

TEST_CASE("the paged pool: block size, pool size and preemption change no token, and every block comes back") {
  SamplingOptions options;
  options.max_new_tokens = 14;
  options.seed = 21;
  options.top_k = 25;
  const auto prompts = grouped(kPrompts, 3);
  Generator roomy(make_model(), nullptr, 16, 40);
  const auto reference = roomy.generate(prompts, options);
  CHECK(roomy.stats().preemptions == 0);
  CHECK(roomy.stats().kv_blocks == 16 * 3);  // 16 sequences of 40 tokens in blocks of 16
  CHECK(roomy.stats().kv_peak_blocks > 0);
  CHECK(roomy.stats().kv_peak_blocks <= roomy.stats().kv_blocks);
  CHECK(roomy.kv_pool().free_blocks() == roomy.kv_pool().total_blocks());
  for (int64_t block_size : {1, 3, 16}) {
    // 24 tokens: one sequence of the longest prompt (7) and 14 new tokens
    // fits, a few do not, so sequences are preempted and resumed.
    Generator tight(make_model(), nullptr, 16, 40, 24, block_size);
    CAPTURE(block_size);
    const auto samples = tight.generate(prompts, options);
    CHECK(tight.stats().preemptions > 0);
    CHECK(tight.kv_pool().free_blocks() == tight.kv_pool().total_blocks());
    CHECK(tight.stats().kv_peak_blocks <= tight.stats().kv_blocks);
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      CHECK(samples[i].response == reference[i].response);
      REQUIRE(samples[i].log_probs.size() == reference[i].log_probs.size());
      for (size_t t = 0; t < samples[i].log_probs.size(); ++t)
        CHECK(samples[i].log_probs[t] == doctest::Approx(reference[i].log_probs[t]).epsilon(1e-5));
    }
  }
}

TEST_CASE("shared prefixes hold fewer blocks than a prefill per sample") {
  SamplingOptions options;
  options.temperature = 0;
  options.max_new_tokens = 2;
  // One prompt of 33 tokens, 8 samples: shared, its two full blocks of 16
  // are held once and each sample copies only the last token's block.
  std::vector<int32_t> prompt;
  for (int32_t t = 0; t < 33; ++t) prompt.push_back(1 + t % 40);
  const std::vector<std::vector<int32_t>> prompts(8, prompt);
  Generator shared(make_model(), nullptr, 8, 40);
  const auto with_sharing = shared.generate(prompts, options);
  CHECK(shared.stats().prefix_shared_tokens == 7 * 33);
  CHECK(shared.stats().kv_peak_blocks == 2 + 8);
  Generator apart(make_model(), nullptr, 8, 40);
  std::vector<std::vector<int32_t>> distinct = prompts;
  for (size_t i = 0; i < distinct.size(); ++i) distinct[i][0] = static_cast<int32_t>(41 + i % 7);
  apart.generate(distinct, options);
  CHECK(apart.stats().kv_peak_blocks == 8 * 3);
}

TEST_CASE("a pool too small for one sequence is refused before anything runs") {
  Generator generator(make_model(), nullptr, 4, 40, 20, 8);  // 3 blocks of 8: 24 tokens
  SamplingOptions options;
  options.max_new_tokens = 20;
  CHECK_THROWS_WITH_AS(generator.generate({{1, 2, 3, 4, 5}}, options),
                       doctest::Contains("needs 25 tokens but the KV pool holds 24"), std::logic_error);
  options.max_new_tokens = 19;
  CHECK(generator.generate({{1, 2, 3, 4, 5}}, options).front().response.size() == 19);
  CHECK_THROWS_AS(Generator(make_model(), nullptr, 0, 40), std::logic_error);
}

TEST_CASE("chunked prefill: a long prompt goes through in chunks beside the decodes, and changes no token") {
  SamplingOptions options;
  options.max_new_tokens = 12;
  options.seed = 8;
  std::vector<int32_t> long_prompt;
  for (int32_t t = 0; t < 30; ++t) long_prompt.push_back(1 + (t * 7) % 40);
  const std::vector<std::vector<int32_t>> prompts = {{5, 6, 7}, long_prompt, {9, 10}, {9, 10}};
  Generator whole(make_model(), nullptr, 4, 48, 0, 16, 0);
  const auto reference = whole.generate(prompts, options);
  CHECK(whole.stats().prefill_chunks == 3);  // one per distinct prompt run
  for (int64_t chunk : {1, 4, 7}) {
    CAPTURE(chunk);
    Generator chunked(make_model(), nullptr, 4, 48, 0, 16, chunk);
    const auto samples = chunked.generate(prompts, options);
    CHECK(chunked.stats().prefilled_tokens == 3 + 30 + 2);
    CHECK(chunked.stats().prefix_shared_tokens == 2);
    CHECK(chunked.stats().prefill_chunks > 3);
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      CHECK(samples[i].response == reference[i].response);
      for (size_t t = 0; t < samples[i].log_probs.size(); ++t)
        CHECK(samples[i].log_probs[t] == doctest::Approx(reference[i].log_probs[t]).epsilon(1e-5));
    }
  }
  // Chunk 4 with the budget shared: step 1 prefills prompt 0 (3) and one
  // token of the long prompt; then each step has 4 - 1 live = 3 tokens for
  // it, so its 29 others take 10 chunks while prompt 0 decodes beside them.
  Generator four(make_model(), nullptr, 2, 48, 0, 16, 4);
  four.generate({{5, 6, 7}, long_prompt}, options);
  CHECK(four.stats().prefill_chunks == 1 + 1 + 10);
}

TEST_CASE("the between-steps hook runs before every step and changes no token") {
  SamplingOptions options;
  options.max_new_tokens = 10;
  options.seed = 4;
  Generator plain(make_model(), nullptr, 2, 40);
  Generator hooked(make_model(), nullptr, 2, 40);
  int calls = 0;
  hooked.set_between_steps([&calls] { ++calls; });
  const auto expected = responses(plain.generate(kPrompts, options));
  CHECK(responses(hooked.generate(kPrompts, options)) == expected);
  // Two slots for five prompts of 10 tokens each: at least 25 decode steps.
  CHECK(calls >= 25);
  CHECK(calls <= 1000);
}
