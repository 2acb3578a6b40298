// KvCache and forward_cached, PagedKvCache and forward_paged: token-by-token
// logits with the cache equal the full forward's, with left padding (static
// cache) or scattered blocks and chunked prefill (paged), GQA, Qwen2 biases,
// a sliding window, Qwen3's q/k norms and Phi-3's layout.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/model/kv_cache.hpp"
#include "meshrun/model/paged_kv_cache.hpp"
#include "meshrun/model/model.hpp"
#include "model_fixtures.hpp"
#include "src/model/cpu_attention.hpp"

#include <limits>

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

// forward_paged over scattered blocks of 2 tokens: row A (7 tokens) and row
// B (4) are prefilled alone in chunks, then decoded together a token at a
// time (B finishes first); every returned next-token logit row equals the
// full forward's at that position.
void check_paged_matches(const ModelConfig& config) {
  torch::NoGradGuard no_grad;
  LlamaModel model = make_cache_model(config);
  torch::manual_seed(6);
  const torch::Tensor a = torch::randint(1, 40, {1, 7}, torch::kInt64), b = torch::randint(1, 40, {1, 4}, torch::kInt64);
  const torch::Tensor expected_a = model->forward({a, {}, {}, {}})[0], expected_b = model->forward({b, {}, {}, {}})[0];
  PagedKvCache cache(*model, 8, 2);
  const torch::Tensor table_a = torch::tensor({5, 1, 6, 3}, torch::kInt64).view({1, 4});
  const torch::Tensor table_b = torch::tensor({2, 7, 0, 0}, torch::kInt64).view({1, 4});
  const auto close = [](const torch::Tensor& got, const torch::Tensor& want) {
    const double difference = (got - want).abs().max().item<double>();
    CHECK_MESSAGE(difference < 1e-5, "largest difference " << difference);
  };
  // Prefill in chunks: A's first 3 as 2 + 1, B's first 2 at once.
  model->forward_paged(a.narrow(1, 0, 2), {0}, table_a, cache);
  close(model->forward_paged(a.narrow(1, 2, 1), {2}, table_a, cache)[0], expected_a[2]);
  close(model->forward_paged(b.narrow(1, 0, 2), {0}, table_b, cache)[0], expected_b[1]);
  // Decode together, then A alone.
  const torch::Tensor both = torch::cat({table_a, table_b});
  for (int64_t t = 0; t < 2; ++t) {
    const torch::Tensor tokens = torch::cat({a.narrow(1, 3 + t, 1), b.narrow(1, 2 + t, 1)});
    const torch::Tensor logits = model->forward_paged(tokens, {3 + t, 2 + t}, both, cache);
    close(logits[0], expected_a[3 + t]);
    close(logits[1], expected_b[2 + t]);
  }
  for (int64_t t = 5; t < 7; ++t) close(model->forward_paged(a.narrow(1, t, 1), {t}, table_a, cache)[0], expected_a[t]);
}

}  // namespace

TEST_CASE("forward_cached token by token equals the full forward (GQA, untied, left padding)") {
  check_cache_matches(model_test::small_config());
}

TEST_CASE("forward_paged through scattered blocks equals the full forward: Llama, Qwen2, Mistral's window, Qwen3, Phi-3, Gemma") {
  // The mixed windows' soft-capped scores leave the host decode kernel to
  // the gathering path.
  for (const auto& [name, config] : model_test::paged_attention_configs()) {
    CAPTURE(name);
    check_paged_matches(config);
  }
}

TEST_CASE("cpu_paged_decode_attention equals softmax(q kᵀ + mask) v over each row's gathered keys") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  // 3 rows at positions 4, 0 and 6 (5, 1 and 7 keys), 4 query heads over 2
  // kv heads, d 8, blocks of 2 scattered over a pool of 8 blocks.
  const int64_t heads = 4, kv_heads = 2, d = 8, block = 2;
  const torch::Tensor keys = torch::randn({16, kv_heads, d}), values = torch::randn({16, kv_heads, d});
  const torch::Tensor q = torch::randn({3, heads, 1, d});
  const torch::Tensor rows = torch::tensor({3, 0, 2, 7, 6, 1, 5, 4, 1, 5, 6, 0}, torch::kInt64).view({3, 4});
  const torch::Tensor positions = torch::tensor({4, 0, 6}, torch::kInt64);
  // A window of 3 on row 2 (keys 4..6), plain causal on the others; the
  // columns past each row's position hold garbage the kernel must not read.
  torch::Tensor mask = torch::full({3, 1, 1, 8}, 12345.0f);
  for (int64_t r = 0; r < 3; ++r) mask[r].narrow(-1, 0, positions[r].item<int64_t>() + 1).zero_();
  mask[2].narrow(-1, 0, 4).fill_(std::numeric_limits<float>::lowest());
  const torch::Tensor got = model_detail::cpu_paged_decode_attention(q, keys, values, rows, positions, mask, block);
  for (int64_t r = 0; r < 3; ++r) {
    const int64_t n = positions[r].item<int64_t>() + 1;
    const torch::Tensor slots = rows[r].repeat_interleave(block).narrow(0, 0, n) * block +
                                torch::arange(n, torch::kInt64).remainder(block);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv = h / (heads / kv_heads);
      const torch::Tensor k = keys.index_select(0, slots).select(1, kv), v = values.index_select(0, slots).select(1, kv);
      const torch::Tensor scores = torch::mv(k, q[r][h][0]) + mask[r][0][0].narrow(0, 0, n);
      const torch::Tensor want = torch::mv(v.t(), torch::softmax(scores, 0));
      const double difference = (got[r][h][0] - want).abs().max().item<double>();
      CHECK_MESSAGE(difference < 1e-5, "row " << r << " head " << h << ": largest difference " << difference);
    }
  }
  // A table entry outside the pool, a position past the mask, the wrong dtype.
  torch::Tensor bad = rows.clone();
  bad[2][3] = 8;
  CHECK_THROWS_WITH_AS(model_detail::cpu_paged_decode_attention(q, keys, values, bad, positions, mask, block),
                       doctest::Contains("names block 8 of a pool of 8"), std::logic_error);
  CHECK_THROWS_WITH_AS(model_detail::cpu_paged_decode_attention(q, keys, values, rows, positions + 2, mask, block),
                       doctest::Contains("row 2 at position 8"), std::logic_error);
  CHECK_FALSE(model_detail::cpu_paged_decode_attention_applies(q.to(torch::kBFloat16)));
  CHECK_FALSE(model_detail::cpu_paged_decode_attention_applies(torch::randn({3, heads, 2, d})));
}

TEST_CASE("forward_paged refuses block tables that name blocks outside the pool or cover too few tokens") {
  torch::NoGradGuard no_grad;
  LlamaModel model = make_cache_model(model_test::small_config());
  PagedKvCache cache(*model, 4, 2);
  CHECK(cache.bytes() == 2 * 2 * 4 * 2 * 2 * 8 * 4);  // layers × K/V × blocks × block × kv heads × dims × bytes
  const torch::Tensor ids = torch::ones({1, 3}, torch::kInt64);
  CHECK_THROWS_WITH_AS(model->forward_paged(ids, {0}, torch::tensor({0, 4}, torch::kInt64).view({1, 2}), cache),
                       doctest::Contains("outside the pool of 4"), std::logic_error);
  CHECK_THROWS_WITH_AS(model->forward_paged(ids, {0}, torch::tensor({0}, torch::kInt64).view({1, 1}), cache),
                       doctest::Contains("3 tokens but the block tables cover 2"), std::logic_error);
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
