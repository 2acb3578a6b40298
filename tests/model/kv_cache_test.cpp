// KvCache and forward_cached: token-by-token logits with the cache equal the
// full forward's, with left padding, GQA, Qwen2 biases, a sliding window and
// Phi-3's layout.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/model/kv_cache.hpp"
#include "meshrun/model/model.hpp"
#include "model_fixtures.hpp"

using namespace meshrun;

namespace {

LlamaModel make_cache_model(const ModelConfig& config) {
  ModelOptions options;
  options.config = config;
  torch::manual_seed(21);
  return LlamaModel(options);
}

// Left-padded batch: row 0 has 7 real tokens, row 1 has 4 after 3 pads.
struct PaddedBatch {
  torch::Tensor ids, mask;
};
PaddedBatch padded_batch() {
  torch::manual_seed(4);
  PaddedBatch batch;
  batch.ids = torch::randint(1, 40, {2, 7}, torch::kInt64);
  batch.mask = torch::ones({2, 7}, torch::kInt64);
  batch.mask[1].narrow(0, 0, 3).zero_();
  batch.ids[1].narrow(0, 0, 3).zero_();
  return batch;
}

// Feeds a prefix of `first` tokens, then one token at a time; returns the
// logits of every position, concatenated.
torch::Tensor cached_logits(LlamaModel& model, const PaddedBatch& batch, int64_t first, KvCache& cache) {
  std::vector<torch::Tensor> pieces;
  pieces.push_back(model->forward_cached({batch.ids.narrow(1, 0, first), {}, {}, batch.mask.narrow(1, 0, first)}, cache));
  for (int64_t t = first; t < batch.ids.size(1); ++t)
    pieces.push_back(model->forward_cached({batch.ids.narrow(1, t, 1), {}, {}, batch.mask.narrow(1, 0, t + 1)}, cache));
  return torch::cat(pieces, 1);
}

void check_cache_matches(const ModelConfig& config) {
  torch::NoGradGuard no_grad;
  LlamaModel model = make_cache_model(config);
  const PaddedBatch batch = padded_batch();
  const torch::Tensor expected = model->forward({batch.ids, {}, {}, batch.mask});
  KvCache cache(*model, 2, 16);
  const torch::Tensor got = cached_logits(model, batch, 3, cache);
  CHECK(cache.length() == 7);
  // Padding positions attend to nothing real in either path; compare the
  // real ones.
  const torch::Tensor real = batch.mask.to(torch::kBool).unsqueeze(-1).expand_as(expected);
  const double difference = (got - expected).masked_select(real).abs().max().item<double>();
  CHECK_MESSAGE(difference < 1e-5, "largest difference " << difference);
}

}  // namespace

TEST_CASE("forward_cached token by token equals the full forward (GQA, untied, left padding)") {
  check_cache_matches(model_test::small_config());
}

TEST_CASE("forward_cached equals the full forward with Qwen2 biases, tied embeddings and a sliding window") {
  ModelConfig config = model_test::small_config();
  config.family = ModelFamily::qwen2;
  config.qkv_bias = true;
  config.tied_embeddings = true;
  check_cache_matches(config);
  config = model_test::small_config();
  config.family = ModelFamily::mistral;
  config.sliding_window = 3;
  check_cache_matches(config);
}

TEST_CASE("forward_cached equals the full forward with Qwen3's q/k norms and heads wider than hidden / heads") {
  ModelConfig config = model_test::small_config();
  config.family = ModelFamily::qwen3;
  config.qk_norm = true;
  config.explicit_head_dim = 2 * config.head_dim();
  check_cache_matches(config);
}

TEST_CASE("forward_cached equals the full forward with Phi-3's layout: untied, a window on every layer") {
  ModelConfig config = model_test::small_config();
  config.family = ModelFamily::phi3;
  config.sliding_window = 2;  // shorter than the prefix of 3 the cache starts from
  check_cache_matches(config);
  // The preset's window as well (longer than these sequences: plain causal attention).
  check_cache_matches(*builtin_model_config("builtin:tiny-phi3"));
}

TEST_CASE("a KV cache is allocated once and refuses tokens beyond its capacity") {
  torch::NoGradGuard no_grad;
  LlamaModel model = make_cache_model(model_test::small_config());
  KvCache cache(*model, 2, 5);
  // 2 layers × keys and values × 2 sequences × 2 kv heads × 5 tokens × 8 dims × 4 bytes.
  CHECK(cache.bytes() == 2 * 2 * 2 * 2 * 5 * 8 * 4);
  CHECK(KvCache::bytes_per_token(*model) == 2 * 2 * 2 * 8 * 4);
  const torch::Tensor ids = torch::ones({2, 4}, torch::kInt64);
  model->forward_cached({ids, {}, {}, {}}, cache);
  CHECK_THROWS_WITH_AS(model->forward_cached({ids.narrow(1, 0, 2), {}, {}, {}}, cache),
                       doctest::Contains("4 are used and 2 more do not fit"), std::logic_error);
  cache.clear();
  CHECK(cache.length() == 0);
  // A smaller batch uses the first rows; a larger one is refused.
  CHECK(model->forward_cached({ids.narrow(0, 0, 1), {}, {}, {}}, cache).size(0) == 1);
  cache.clear();
  CHECK_THROWS_WITH_AS(model->forward_cached({torch::ones({3, 1}, torch::kInt64), {}, {}, {}}, cache),
                       doctest::Contains("the batch has 3 sequences but the KV cache holds 2"), std::logic_error);
  CHECK_THROWS_AS(model->forward_cached({ids, {}, {}, torch::ones({2, 3}, torch::kInt64)}, cache),
                  std::logic_error);
}
