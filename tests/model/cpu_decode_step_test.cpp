// The fused CPU decode layers (src/model/cpu_decode_step.hpp): a decode
// step through them gives the unfused layers' bits, logits and pool alike,
// at every row count the projections dispatch differently for, over shared
// prompt blocks; the layouts they do not compute take the unfused layers;
// a table naming a block outside the pool is refused.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/model/model.hpp"
#include "meshrun/model/paged_kv_cache.hpp"
#include "model_fixtures.hpp"
#include "src/model/cpu_decode_step.hpp"

using namespace meshrun;

// A named namespace: the test sources build in unity files.
namespace fused_decode_test {

LlamaModel make_model(const ModelConfig& config, bool lora = false) {
  ModelOptions options;
  options.config = config;
  if (lora) {
    options.lora.rank = 4;
    options.lora.alpha = 8;
    options.lora.targets = {"q_proj", "v_proj", "down_proj"};
  }
  torch::manual_seed(41);
  LlamaModel model(options);
  if (lora) {
    torch::NoGradGuard no_grad;
    // lora_B starts at zero: make the adapters' term count.
    for (auto& parameter : model->named_parameters())
      if (parameter.key().find("lora_B") != std::string::npos) parameter.value().normal_(0, 0.2);
  }
  return model;
}

void copy_pool(PagedKvCache& to, PagedKvCache& from) {
  for (int64_t layer = 0; layer < from.layers(); ++layer) {
    to.keys(layer).copy_(from.keys(layer));
    to.values(layer).copy_(from.values(layer));
  }
}

bool pools_equal(PagedKvCache& a, PagedKvCache& b) {
  for (int64_t layer = 0; layer < a.layers(); ++layer)
    if (!a.keys(layer).equal(b.keys(layer)) || !a.values(layer).equal(b.values(layer))) return false;
  return true;
}

// `rows` sequences in blocks of 4: pairs of rows share an 8-token prompt's
// two blocks (prefilled once, as a GRPO group's samples do), the others
// have their own prompts of 1-9 tokens; then four decode steps through the
// fused layers and, on a copy of the pool, through the unfused ones.
void check_fused_equals_unfused(const ModelConfig& config, int64_t rows, bool lora = false) {
  torch::NoGradGuard no_grad;
  LlamaModel model = make_model(config, lora);
  const int64_t block = 4, steps = 4, width = 4;  // 9 + 4 tokens fit 4 blocks
  PagedKvCache fused(*model, rows * width + 2, block), unfused(*model, rows * width + 2, block);
  torch::manual_seed(rows);
  std::vector<int64_t> lengths(static_cast<size_t>(rows));
  torch::Tensor tables = torch::zeros({rows, width}, torch::kInt64);
  int64_t next_block = 0;
  const torch::Tensor shared_prompt = torch::randint(1, config.vocab, {1, 8}, torch::kInt64);
  const int64_t shared_first = next_block;
  next_block += 2;
  model->forward_paged(shared_prompt, {0}, torch::tensor({shared_first, shared_first + 1}, torch::kInt64).view({1, 2}),
                       fused);
  for (int64_t r = 0; r < rows; ++r) {
    const bool shares = r % 3 == 0;
    lengths[static_cast<size_t>(r)] = shares ? 8 : 1 + r % 9;
    int64_t first_own = 0;
    if (shares) {
      tables[r][0] = shared_first;
      tables[r][1] = shared_first + 1;
      first_own = 2;
    }
    for (int64_t i = first_own; i < width; ++i) tables[r][i] = next_block++;
    if (!shares)
      model->forward_paged(torch::randint(1, config.vocab, {1, lengths[static_cast<size_t>(r)]}, torch::kInt64), {0},
                           tables[r].unsqueeze(0), fused);
  }
  copy_pool(unfused, fused);
  for (int64_t step = 0; step < steps; ++step) {
    CAPTURE(step);
    const torch::Tensor tokens = torch::randint(0, config.vocab, {rows, 1}, torch::kInt64);
    const torch::Tensor got = model->forward_paged(tokens, lengths, tables, fused);
    torch::Tensor want;
    {
      const model_detail::UnfusedDecodeScope unfused_layers;
      want = model->forward_paged(tokens, lengths, tables, unfused);
    }
    REQUIRE(got.sizes() == want.sizes());
    CHECK_MESSAGE(got.equal(want), "largest difference " << (got - want).abs().max().item<double>());
    CHECK(pools_equal(fused, unfused));
    for (int64_t& length : lengths) ++length;
  }
}

}  // namespace fused_decode_test

using namespace fused_decode_test;

TEST_CASE("the fused CPU decode layers give the unfused layers' bits: logits and pool, 1 to 40 rows, shared blocks") {
  // 1, a few and 12 rows: the few-row product; 13 and 40: the many-row one
  // (or at::linear where it is not chosen); the layers around them alike.
  for (const auto& [name, config] : model_test::paged_attention_configs()) {
    if (name != "llama" && name != "qwen2") continue;  // the layouts the fused layers compute
    CAPTURE(name);
    {
      torch::NoGradGuard no_grad;
      REQUIRE(make_model(config)->decode_layers_fuse());
    }
    for (const int64_t rows : {1, 5, 12, 13, 40}) {
      CAPTURE(rows);
      check_fused_equals_unfused(config, rows);
    }
  }
}

TEST_CASE("the fused CPU decode layers keep LoRA adapters' term and an odd head size's bits") {
  check_fused_equals_unfused(model_test::small_config(), 6, /*lora=*/true);
  ModelConfig config = model_test::small_config();
  config.hidden = 40;  // head size 10: the portable attention rows
  config.intermediate = 44;  // down's inner size 44: at::linear
  check_fused_equals_unfused(config, 7);
}

TEST_CASE("layouts the fused decode layers do not compute, bf16 and autograd take the unfused layers") {
  {
    torch::NoGradGuard no_grad;
    for (const auto& [name, config] : model_test::paged_attention_configs()) {
      CAPTURE(name);
      CHECK(make_model(config)->decode_layers_fuse() == (name == "llama" || name == "qwen2"));
    }
    ModelConfig gemma = model_test::small_config();  // 1 + w sandwich norms
    gemma.family = ModelFamily::gemma2;
    gemma.norm_plus_one = true;
    gemma.sandwich_norms = true;
    CHECK_FALSE(make_model(gemma)->decode_layers_fuse());
    ModelConfig olmo = model_test::small_config();  // norms after attention and MLP
    olmo.family = ModelFamily::olmo2;
    olmo.post_norms = true;
    CHECK_FALSE(make_model(olmo)->decode_layers_fuse());
    ModelOptions options;
    options.config = model_test::small_config();
    options.dtype = torch::kBFloat16;
    CHECK_FALSE(LlamaModel(options)->decode_layers_fuse());
  }
  CHECK_FALSE(make_model(model_test::small_config())->decode_layers_fuse());  // autograd on
}

TEST_CASE("a fused decode step refuses a block table naming a block outside the pool") {
  torch::NoGradGuard no_grad;
  LlamaModel model = make_model(model_test::small_config());
  PagedKvCache cache(*model, 4, 2);
  model->forward_paged(torch::ones({1, 3}, torch::kInt64), {0}, torch::tensor({0, 1}, torch::kInt64).view({1, 2}), cache);
  REQUIRE(model->decode_layers_fuse());
  CHECK_THROWS_WITH_AS(
      model->forward_paged(torch::ones({1, 1}, torch::kInt64), {3}, torch::tensor({0, 4}, torch::kInt64).view({1, 2}), cache),
      doctest::Contains("names block 4 outside the pool of 4"), std::logic_error);
}
