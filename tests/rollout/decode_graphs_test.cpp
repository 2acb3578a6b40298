// DecodeGraphs off CUDA: the buckets and widths, fixed-shape decode steps
// (padding rows, wider key widths) giving forward_paged's logits across the
// model families, writes only to the rows' slots and the scratch block, and
// the engine with fixed-shape steps giving the tokens of eager steps through
// preemption, shared prefixes and a sleep. The capture and replay
// themselves run in the gpu suite (tests/gpu/gpu_unit_test.cpp).
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/model/model.hpp"
#include "meshrun/model/paged_kv_cache.hpp"
#include "meshrun/rollout/generation.hpp"
#include "meshrun/train/storage_sleep.hpp"
#include "src/rollout/decode_graphs.hpp"
#include "tests/model/model_fixtures.hpp"

using namespace meshrun;
using namespace meshrun::rollout_detail;

namespace {

LlamaModel graph_model(const ModelConfig& config, uint64_t seed = 21) {
  ModelOptions options;
  options.config = config;
  options.config.initializer_range = 0.3;  // peaked: sampled tokens are not near-uniform
  torch::manual_seed(seed);
  return LlamaModel(options);
}

KvBlockTable table_of(std::vector<int32_t> blocks, int64_t tokens) {
  KvBlockTable table;
  table.blocks = std::move(blocks);
  table.tokens = tokens;
  return table;
}

torch::Tensor padded_tables(const std::vector<const KvBlockTable*>& tables, int64_t width) {
  torch::Tensor out = torch::zeros({static_cast<int64_t>(tables.size()), width}, torch::kInt64);
  for (size_t row = 0; row < tables.size(); ++row)
    for (size_t column = 0; column < tables[row]->blocks.size(); ++column)
      out[static_cast<int64_t>(row)][static_cast<int64_t>(column)] = tables[row]->blocks[column];
  return out;
}

// Three sequences (7, 4 and 1 tokens) prefilled into scattered blocks of 2
// of a pool of 9 (block 9 is the scratch block), then decode steps of all
// three (a batch bucket of 4: one padding row) and of the shortest alone
// (two blocks wide): the fixed-shape step's logits are forward_paged's, and it
// writes nothing but the rows' own slots and the scratch block.
void check_fixed_shape_steps(const ModelConfig& config) {
  torch::NoGradGuard no_grad;
  LlamaModel model = graph_model(config);
  torch::manual_seed(6);
  const std::vector<int64_t> lengths = {7, 4, 1};
  std::vector<torch::Tensor> prompts;
  for (const int64_t length : lengths) prompts.push_back(torch::randint(1, 40, {1, length}, torch::kInt64));
  PagedKvCache cache(*model, 10, 2);
  std::vector<KvBlockTable> tables = {table_of({5, 1, 6, 3}, 8), table_of({2, 7, 8}, 5), table_of({4}, 2)};
  for (size_t i = 0; i < prompts.size(); ++i)
    model->forward_paged(prompts[i], {0}, padded_tables({&tables[i]}, 4), cache);
  DecodeGraphs graphs(5, 4, 9);
  const auto close = [](const torch::Tensor& got, const torch::Tensor& want) {
    REQUIRE(got.sizes() == want.sizes());
    const double difference = (got - want).abs().max().item<double>();
    CHECK_MESSAGE(difference < 1e-5, "largest difference " << difference);
  };
  const std::vector<int64_t> tokens = {11, 12, 13};
  const std::vector<int64_t> positions = {7, 4, 1};
  const std::vector<const KvBlockTable*> all = {&tables[0], &tables[1], &tables[2]};
  const torch::Tensor unused_before = cache.keys(0).narrow(0, 0, 2).clone();  // block 0: nobody's slot at these positions
  const torch::Tensor fixed = graphs.step(*model, cache, tokens, positions, all);
  CHECK(torch::equal(cache.keys(0).narrow(0, 0, 2), unused_before));
  const torch::Tensor eager = model->forward_paged(torch::tensor(tokens, torch::kInt64).unsqueeze(1), positions,
                                                   padded_tables(all, 4), cache);
  close(fixed, eager);
  CHECK(graphs.steps_by_batch().at(4) == 1);  // three rows ran as four
  // The shortest alone: its next position, 2, needs a second block.
  tables[2].blocks.push_back(0);
  const torch::Tensor alone =
      graphs.step(*model, cache, {14}, {2}, {&tables[2]});
  close(alone, model->forward_paged(torch::tensor({int64_t{14}}).view({1, 1}), {2}, padded_tables({&tables[2]}, 4), cache));
  CHECK(graphs.steps_by_batch().at(1) == 1);
  CHECK(graphs.graphs() == 0);  // nothing captured off CUDA
}

std::vector<std::vector<int32_t>> groups_of(int n) {
  const std::vector<std::vector<int32_t>> prompts = {{5, 6, 7}, {8, 9, 10, 11, 12, 13, 14}, {1}, {2, 3}, {40, 41, 42, 43}};
  std::vector<std::vector<int32_t>> out;
  for (const auto& prompt : prompts)
    for (int i = 0; i < n; ++i) out.push_back(prompt);
  return out;
}

void check_same_samples(const std::vector<GeneratedSample>& got, const std::vector<GeneratedSample>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].response == want[i].response);
    REQUIRE(got[i].log_probs.size() == want[i].log_probs.size());
    for (size_t t = 0; t < got[i].log_probs.size(); ++t)
      CHECK(got[i].log_probs[t] == doctest::Approx(want[i].log_probs[t]).epsilon(1e-4));
  }
}

}  // namespace

TEST_CASE("decode batch buckets: 1, 2, 4, 8, multiples of 8, then max_batch; widths are powers of two of blocks") {
  CHECK(decode_batch_buckets(1) == std::vector<int64_t>{1});
  CHECK(decode_batch_buckets(3) == std::vector<int64_t>{1, 2, 3});
  CHECK(decode_batch_buckets(8) == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(decode_batch_buckets(20) == std::vector<int64_t>{1, 2, 4, 8, 16, 20});
  CHECK(decode_batch_buckets(64) == std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64});
  CHECK_THROWS_AS(decode_batch_buckets(0), std::logic_error);
  CHECK(decode_width_blocks(1, 16) == 1);
  CHECK(decode_width_blocks(3, 16) == 4);
  CHECK(decode_width_blocks(9, 16) == 16);
  CHECK(decode_width_blocks(9, 12) == 12);
  CHECK(decode_width_blocks(12, 12) == 12);
  CHECK_THROWS_AS(decode_width_blocks(0, 16), std::logic_error);
  CHECK_THROWS_AS(decode_width_blocks(17, 16), std::logic_error);
}

TEST_CASE("a fixed-shape decode step gives forward_paged's logits: Llama, Qwen2, Mistral, Qwen3, Phi-3, Gemma") {
  for (const auto& [name, config] : model_test::paged_attention_configs()) {
    CAPTURE(name);
    check_fixed_shape_steps(config);
  }
}

TEST_CASE("a decode step refuses rows beyond max_batch and positions outside their blocks") {
  torch::NoGradGuard no_grad;
  LlamaModel model = graph_model(model_test::small_config());
  PagedKvCache cache(*model, 5, 2);
  DecodeGraphs graphs(2, 2, 4);
  const KvBlockTable table = table_of({1, 2}, 3);
  CHECK_THROWS_AS(graphs.step(*model, cache, {1, 2, 3}, {0, 0, 0}, {&table, &table, &table}), std::logic_error);
  CHECK_THROWS_AS(graphs.step(*model, cache, {1}, {4}, {&table}), std::logic_error);
  CHECK_THROWS_AS(graphs.step(*model, cache, {}, {}, {}), std::logic_error);
}

TEST_CASE("the engine with fixed-shape decode steps samples the tokens of eager ones: preemption, shared prefixes, sleep") {
  const auto prompts = groups_of(3);
  for (const double temperature : {0.0, 1.0}) {
    CAPTURE(temperature);
    SamplingOptions options;
    options.temperature = temperature;
    options.top_k = 25;
    options.max_new_tokens = 14;
    options.seed = 21;
    Generator eager(graph_model(model_test::small_config(), 31), nullptr, 6, 40);
    const auto reference = eager.generate(prompts, options);
    // A tight pool (preemption) of blocks of 3, six live: buckets 1, 2, 4, 6.
    Generator fixed(graph_model(model_test::small_config(), 31), nullptr, 6, 40, 30, 3,
                    Generator::kDefaultPrefillChunk, true);
    const auto samples = fixed.generate(prompts, options);
    check_same_samples(samples, reference);
    const GenerationStats& stats = fixed.stats();
    CHECK(stats.preemptions > 0);
    // Every decode forward ran on fixed shapes: each sampling step follows one, or prompts completing.
    CHECK(stats.graph_steps >= stats.decode_steps - stats.prefill_chunks);
    CHECK(stats.graph_steps > 0);
    CHECK(fixed.kv_pool().free_blocks() == fixed.kv_pool().total_blocks());
    CHECK(fixed.kv_pool().total_blocks() == 10);  // the scratch block is the cache's, not the pool's
    REQUIRE(fixed.decode_graphs() != nullptr);
    int64_t steps = 0;
    for (const auto& [batch, count] : fixed.decode_graphs()->steps_by_batch()) {
      CHECK((batch == 1 || batch == 2 || batch == 4 || batch == 6));
      steps += count;
    }
    CHECK(steps == stats.graph_steps);
    CHECK(fixed.decode_graphs()->steps_by_batch().size() >= 2);
    // The engine's colocate sleep lets the graphs go first and moves the
    // weights and cache; the next call rebinds and samples the same.
    StorageSleep sleeper;
    sleeper.add(fixed.memory());
    sleeper.before_sleep([&] { fixed.release_decode_graphs(); });
    sleeper.sleep();
    sleeper.wake();
    check_same_samples(fixed.generate(prompts, options), reference);
  }
}

TEST_CASE("decode graphs serve dense models on one rank with position-independent rope; the engine refuses the others") {
  ModelConfig config = model_test::small_config();
  CHECK(decode_graph_blocker(config, 1).empty());
  CHECK(decode_graph_blocker(config, 2).find("tensor parallelism") != std::string::npos);
  config.rope_scaling.type = RopeScaling::Type::dynamic;
  config.rope_scaling.factor = 2;
  CHECK(decode_graph_blocker(config, 1).find("dynamic") != std::string::npos);
  config = model_test::small_config();
  config.window_rope_theta = 100;
  config.window_rope_scaling.type = RopeScaling::Type::longrope;
  CHECK(decode_graph_blocker(config, 1).find("longrope") != std::string::npos);
  config = model_test::small_config();
  config.family = ModelFamily::qwen3_moe;
  apply_family_layout(config);
  config.experts = 4;
  config.experts_per_token = 2;
  config.expert_intermediate = 16;
  CHECK(decode_graph_blocker(config, 1).find("experts") != std::string::npos);
  CHECK_THROWS_AS(Generator(graph_model(config), nullptr, 4, 40, 0, 16, 512, true), std::logic_error);
  torch::NoGradGuard no_grad;
  LlamaModel moe = graph_model(config);
  PagedKvCache cache(*moe, 2, 2);
  const torch::Tensor one = torch::zeros({1, 1}, torch::kInt64);
  CHECK_THROWS_AS(moe->forward_paged_decode(one, one, one, cache), std::logic_error);
}
