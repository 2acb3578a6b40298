// LlamaModel in one process: parameter specs, unit hooks, gradient
// checkpointing, the cross-entropy and log-probs against LibTorch's, masks,
// input errors, presets.
#include "tests/dist/torch_doctest.hpp"

#include <string>
#include <vector>

#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/model.hpp"
#include "model_fixtures.hpp"

using namespace meshrun;

namespace {

// ModelInputs with input ids only (the other tensors undefined: positions
// 0..seq-1, no packing, no padding).
ModelInputs inputs_of_ids(torch::Tensor ids) {
  ModelInputs inputs;
  inputs.input_ids = std::move(ids);
  return inputs;
}

LlamaModel make_model(const ModelConfig& config, uint64_t seed = 7, bool checkpointing = false) {
  torch::manual_seed(seed);
  ModelOptions options;
  options.config = config;
  options.gradient_checkpointing = checkpointing;
  return LlamaModel(options);
}

torch::Tensor random_ids(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed = 3) {
  torch::manual_seed(seed);
  return torch::randint(vocab, {batch, seq}, torch::kInt64);
}

class RecordingHooks : public ModelUnitHooks {
 public:
  void before_unit(int unit) override { events.push_back("before " + std::to_string(unit)); }
  torch::Tensor after_unit(int unit, torch::Tensor output) override {
    events.push_back("after " + std::to_string(unit));
    return output;
  }
  std::vector<std::string> events;
};

std::map<std::string, torch::Tensor> gradients(LlamaModel& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model->named_parameters()) out[item.key()] = item.value().grad().clone();
  return out;
}

}  // namespace

TEST_CASE("parameter specs: Hugging Face names in named_parameters order, units, splits and decay") {
  ModelConfig config = model_test::small_config();
  config.qkv_bias = true;
  LlamaModel model = make_model(config);
  const auto& specs = model->parameter_specs();
  const auto named = model->named_parameters();
  REQUIRE(specs.size() == named.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    CAPTURE(specs[i].name);
    CHECK(specs[i].name == named[i].key());
    CHECK(specs[i].full_shape == named[i].value().sizes().vec());
    if (i > 0) CHECK(specs[i].unit >= specs[i - 1].unit);
  }
  auto find = [&](const std::string& name) -> const ParameterSpec& {
    for (const auto& spec : specs)
      if (spec.name == name) return spec;
    FAIL("no spec " << name);
    throw;
  };
  CHECK(find("model.embed_tokens.weight").unit == 0);
  CHECK(find("model.embed_tokens.weight").split_dim == 0);
  CHECK(find("model.embed_tokens.weight").also_used_by_unit == -1);
  CHECK(find("model.layers.0.self_attn.q_proj.weight").unit == 1);
  CHECK(find("model.layers.0.self_attn.q_proj.weight").split_dim == 0);
  CHECK(find("model.layers.0.self_attn.k_proj.bias").split_dim == 0);
  CHECK_FALSE(find("model.layers.0.self_attn.k_proj.bias").decays);
  CHECK(find("model.layers.1.self_attn.o_proj.weight").split_dim == 1);
  CHECK(find("model.layers.1.self_attn.o_proj.weight").unit == 2);
  CHECK(find("model.layers.1.mlp.down_proj.weight").split_dim == 1);
  CHECK(find("model.layers.1.mlp.up_proj.weight").full_shape == std::vector<int64_t>{48, 32});
  CHECK(find("model.layers.1.input_layernorm.weight").split_dim == -1);
  CHECK_FALSE(find("model.layers.1.input_layernorm.weight").decays);
  CHECK(find("model.norm.weight").unit == 3);
  CHECK(find("lm_head.weight").unit == 3);
  CHECK(find("lm_head.weight").split_dim == 0);
  CHECK(find("lm_head.weight").decays);
  CHECK(model->num_units() == 4);
  // Parameter count agrees with the planner's formula.
  int64_t total = 0;
  for (const auto& spec : specs) total += c10::multiply_integers(spec.full_shape);
  CHECK(total == config.parameters());

  config.tied_embeddings = true;
  LlamaModel tied = make_model(config);
  CHECK(tied->parameter_specs().front().also_used_by_unit == 3);
  CHECK(tied->parameter_specs().back().name == "model.norm.weight");
}

TEST_CASE("the same seed gives the same initial weights; norms start at one, biases at zero") {
  ModelConfig config = model_test::small_config();
  config.qkv_bias = true;
  LlamaModel a = make_model(config, 11), b = make_model(config, 11), c = make_model(config, 12);
  const auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  CHECK(torch::equal(pa["model.layers.0.self_attn.q_proj.weight"], pb["model.layers.0.self_attn.q_proj.weight"]));
  CHECK_FALSE(torch::equal(pa["model.layers.0.self_attn.q_proj.weight"], pc["model.layers.0.self_attn.q_proj.weight"]));
  CHECK(torch::equal(pa["model.norm.weight"], torch::ones({32})));
  CHECK(torch::equal(pa["model.layers.0.self_attn.q_proj.bias"], torch::zeros({32})));
  CHECK(torch::equal(pa["model.layers.0.self_attn.k_proj.bias"], torch::zeros({16})));
  const double std = pa["model.embed_tokens.weight"].std().item<double>();
  CHECK(std == doctest::Approx(0.02).epsilon(0.2));
}

TEST_CASE("unit hooks run around every unit, and again before each checkpointed layer's recomputation") {
  const ModelConfig config = model_test::small_config();
  const torch::Tensor ids = random_ids(2, 6, config.vocab);
  LlamaModel plain = make_model(config);
  LlamaModel checkpointed = make_model(config, 7, /*checkpointing=*/true);
  RecordingHooks plain_hooks, checkpoint_hooks;
  plain->set_unit_hooks(&plain_hooks);
  checkpointed->set_unit_hooks(&checkpoint_hooks);

  const torch::Tensor labels = random_ids(2, 6, config.vocab, 5);
  const torch::Tensor loss = vocab_parallel_cross_entropy(plain->forward(inputs_of_ids(ids)), labels, nullptr).mean();
  const torch::Tensor checkpoint_loss =
      vocab_parallel_cross_entropy(checkpointed->forward(inputs_of_ids(ids)), labels, nullptr).mean();
  const std::vector<std::string> forward_events{"before 0", "after 0", "before 1", "after 1",
                                                "before 2", "after 2", "before 3", "after 3"};
  CHECK(plain_hooks.events == forward_events);
  CHECK(checkpoint_hooks.events == forward_events);
  CHECK(loss.item<double>() == checkpoint_loss.item<double>());

  loss.backward();
  checkpoint_loss.backward();
  CHECK(plain_hooks.events == forward_events);
  std::vector<std::string> with_recomputation = forward_events;
  with_recomputation.push_back("before 2");
  with_recomputation.push_back("before 1");
  CHECK(checkpoint_hooks.events == with_recomputation);

  const auto expected = gradients(plain), got = gradients(checkpointed);
  for (const auto& [name, grad] : expected) {
    CAPTURE(name);
    CHECK((grad - got.at(name)).abs().max().item<double>() < 1e-6);
  }
  CHECK(expected.at("model.embed_tokens.weight").abs().sum().item<double>() > 0);
}

TEST_CASE("cross-entropy, log-probs and entropy equal LibTorch's on the full logits, gradients included") {
  torch::manual_seed(1);
  const torch::Tensor logits = (torch::randn({3, 5, 17}) * 4).requires_grad_(true);
  torch::Tensor labels = torch::randint(17, {3, 5}, torch::kInt64);
  labels[0][1] = -100;
  labels[2][4] = -100;
  const torch::Tensor weights = torch::rand({3, 5});

  const torch::Tensor loss = vocab_parallel_cross_entropy(logits, labels, nullptr);
  const torch::Tensor expected = torch::nn::functional::cross_entropy(
      logits.reshape({-1, 17}), labels.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kNone));
  CHECK((loss - expected.view({3, 5})).abs().max().item<double>() < 1e-6);
  CHECK(loss[0][1].item<double>() == 0);
  const torch::Tensor grad = torch::autograd::grad({(loss * weights).sum()}, {logits})[0];
  const torch::Tensor expected_grad = torch::autograd::grad({(expected.view({3, 5}) * weights).sum()}, {logits})[0];
  CHECK((grad - expected_grad).abs().max().item<double>() < 1e-6);
  CHECK(grad[0][1].abs().sum().item<double>() == 0);

  const torch::Tensor valid = labels.clamp_min(0);
  const torch::Tensor log_probs = vocab_parallel_log_probs(logits, valid, nullptr);
  const torch::Tensor reference = torch::log_softmax(logits, -1).gather(-1, valid.unsqueeze(-1)).squeeze(-1);
  CHECK((log_probs - reference).abs().max().item<double>() < 1e-6);
  const torch::Tensor lp_grad = torch::autograd::grad({(log_probs * weights).sum()}, {logits})[0];
  const torch::Tensor ref_grad = torch::autograd::grad({(reference * weights).sum()}, {logits})[0];
  CHECK((lp_grad - ref_grad).abs().max().item<double>() < 1e-6);

  const torch::Tensor entropy = vocab_parallel_entropy(logits, nullptr);
  const torch::Tensor reference_entropy = -(torch::softmax(logits, -1) * torch::log_softmax(logits, -1)).sum(-1);
  CHECK((entropy - reference_entropy).abs().max().item<double>() < 1e-5);
  const torch::Tensor entropy_grad = torch::autograd::grad({(entropy * weights).sum()}, {logits})[0];
  const torch::Tensor reference_entropy_grad = torch::autograd::grad({(reference_entropy * weights).sum()}, {logits})[0];
  CHECK((entropy_grad - reference_entropy_grad).abs().max().item<double>() < 1e-5);

  // Both ways of computing it: the CPU's fused rows (contiguous float
  // logits, as above) and the tensor-op form (here a strided view), on a
  // vocabulary that is not a multiple of the kernels' eight lanes, with
  // rows of extreme logits.
  torch::Tensor wide = torch::randn({4, 3, 1027}) * 8;
  wide[1][2][5] = 1e4;
  wide[2][0] = -1e4;
  wide[2][0][3] = 50;
  torch::Tensor wide_labels = torch::randint(1027, {4, 3}, torch::kInt64);
  wide_labels[3][1] = -100;
  const torch::Tensor wide_weights = torch::rand({4, 3});
  const torch::Tensor contiguous = wide.clone().requires_grad_(true);
  const torch::Tensor strided = wide.transpose(0, 1).contiguous().transpose(0, 1).requires_grad_(true);
  REQUIRE_FALSE(strided.is_contiguous());
  const torch::Tensor wide_expected = torch::nn::functional::cross_entropy(
      wide.reshape({-1, 1027}).requires_grad_(true), wide_labels.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kNone));
  for (const torch::Tensor& input : {contiguous, strided}) {
    CAPTURE(input.is_contiguous());
    const torch::Tensor wide_loss = vocab_parallel_cross_entropy(input, wide_labels, nullptr);
    CHECK((wide_loss - wide_expected.view({4, 3})).abs().max().item<double>() < 1e-3);
    CHECK(wide_loss[1][2].item<double>() >= 0);
    const torch::Tensor wide_grad = torch::autograd::grad({(wide_loss * wide_weights).sum()}, {input})[0];
    const torch::Tensor reference_logits = wide.clone().requires_grad_(true);
    const torch::Tensor reference_loss = torch::nn::functional::cross_entropy(
        reference_logits.reshape({-1, 1027}), wide_labels.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kNone));
    const torch::Tensor reference_grad =
        torch::autograd::grad({(reference_loss.view({4, 3}) * wide_weights).sum()}, {reference_logits})[0];
    CHECK((wide_grad - reference_grad).abs().max().item<double>() < 1e-6);
    CHECK(wide_grad[3][1].abs().sum().item<double>() == 0);
  }

  // bf16 logits: computed in fp32, the gradient comes back in bf16.
  const torch::Tensor half = logits.detach().to(torch::kBFloat16).requires_grad_(true);
  const torch::Tensor half_loss = vocab_parallel_cross_entropy(half, labels, nullptr);
  CHECK((half_loss.scalar_type() == torch::kFloat));
  CHECK((torch::autograd::grad({half_loss.sum()}, {half})[0].scalar_type() == torch::kBFloat16));

  CHECK_THROWS_WITH_AS(vocab_parallel_cross_entropy(logits, torch::full({3, 5}, 17, torch::kInt64), nullptr),
                       doctest::Contains("outside the vocabulary [0, 17)"), ModelInputError);
  CHECK_THROWS_WITH_AS(vocab_parallel_log_probs(logits, torch::zeros({3, 4}, torch::kInt64), nullptr),
                       doctest::Contains("do not match logits"), std::logic_error);
}

TEST_CASE("a sliding window hides tokens further back than the window") {
  ModelConfig config = model_test::small_config();
  config.layers = 1;  // one layer: position i sees exactly tokens (i - window, i]
  config.sliding_window = 2;
  LlamaModel windowed = make_model(config);
  config.sliding_window = 0;
  LlamaModel full = make_model(config);
  torch::NoGradGuard no_grad;
  torch::Tensor ids = random_ids(1, 6, config.vocab);
  torch::Tensor changed = ids.clone();
  changed[0][0] = (ids[0][0].item<int64_t>() + 1) % config.vocab;
  const torch::Tensor difference_windowed = (windowed->forward(inputs_of_ids(ids)) - windowed->forward(inputs_of_ids(changed))).abs().amax(-1)[0];
  const torch::Tensor difference_full = (full->forward(inputs_of_ids(ids)) - full->forward(inputs_of_ids(changed))).abs().amax(-1)[0];
  CHECK(difference_windowed[1].item<double>() > 1e-4);  // within the window
  CHECK(difference_windowed.slice(0, 2).max().item<double>() == 0);
  CHECK(difference_full.slice(0, 2).min().item<double>() > 1e-6);
}

TEST_CASE("inputs outside the vocabulary or of the wrong shape are errors") {
  LlamaModel model = make_model(model_test::small_config());
  torch::NoGradGuard no_grad;
  CHECK_THROWS_WITH_AS(model->forward(inputs_of_ids(torch::full({1, 3}, 48, torch::kInt64))),
                       doctest::Contains("input id 48 is outside the vocabulary [0, 48)"), ModelInputError);
  CHECK_THROWS_WITH_AS(model->forward(inputs_of_ids(torch::zeros({3}, torch::kInt64))), doctest::Contains("[batch, seq]"),
                       std::logic_error);
  ModelInputs wrong;
  wrong.input_ids = torch::zeros({2, 3}, torch::kInt64);
  wrong.sequence_ids = torch::zeros({2, 4}, torch::kInt64);
  CHECK_THROWS_WITH_AS(model->forward(wrong), doctest::Contains("must have the shape of input_ids"),
                       std::logic_error);
  ModelOptions unsupported;
  unsupported.config = model_test::small_config();
  unsupported.config.hidden_act = "gelu";
  CHECK_THROWS_WITH_AS(LlamaModel{unsupported}, doctest::Contains("hidden_act \"gelu\" is not supported"),
                       ModelConfigError);
}

TEST_CASE("builtin:tiny learns: a few Adam steps on one batch lower its loss, in fp32 and bf16") {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    CAPTURE(dtype);
    torch::manual_seed(3);
    ModelOptions options;
    options.dtype = dtype;
    LlamaModel model = load_hf_model("builtin:tiny", options);
    CHECK(model->config().vocab == 264);
    const torch::Tensor ids = random_ids(2, 16, 259);
    const torch::Tensor labels = torch::roll(ids, -1, 1);
    torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
    double first = 0, last = 0;
    for (int step = 0; step < 8; ++step) {
      optimizer.zero_grad();
      const torch::Tensor loss = vocab_parallel_cross_entropy(model->forward(inputs_of_ids(ids)), labels, nullptr).mean();
      loss.backward();
      optimizer.step();
      (step == 0 ? first : last) = loss.item<double>();
    }
    CHECK(first == doctest::Approx(std::log(264.0)).epsilon(0.05));
    CHECK(last < first - 0.5);
  }
}

TEST_CASE("the full state gathered from one model and scattered into another gives the same model") {
  const ModelConfig config = model_test::small_config();
  LlamaModel source = make_model(config, 1), target = make_model(config, 2);
  const auto state = gather_full_state(source);
  CHECK(state.size() == source->parameter_specs().size());
  scatter_full_state(target, state);
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = random_ids(2, 5, config.vocab);
  CHECK(torch::equal(source->forward(inputs_of_ids(ids)), target->forward(inputs_of_ids(ids))));

  auto wrong = state;
  wrong["model.norm.weight"] = torch::ones({33});
  CHECK_THROWS_WITH_AS(scatter_full_state(target, wrong),
                       doctest::Contains("\"model.norm.weight\" has shape [33], the model needs [32]"), ModelLoadError);
  wrong.erase("model.norm.weight");
  CHECK_THROWS_WITH_AS(scatter_full_state(target, wrong), doctest::Contains("lacks tensor \"model.norm.weight\""),
                       ModelLoadError);
  // shard_of: this rank's rows (split dim 0) or columns (split dim 1) of a full tensor.
  const ParameterSpec& down = target->parameter_specs()[9];
  REQUIRE(down.name == "model.layers.0.mlp.down_proj.weight");
  const torch::Tensor full = state.at(down.name);
  CHECK(torch::equal(shard_of(down, full, 1, 2), full.narrow(1, 24, 24)));
}
