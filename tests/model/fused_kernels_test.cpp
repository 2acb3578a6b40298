// The autograd nodes around meshrun's CUDA kernels (src/model/fused_kernels.hpp)
// on the CPU: the in-place rotary node (the CUDA kernel's node, with a CPU
// body) against the copying one, values and gradients, through a projection
// whose output it overwrites; the residual add + norm of the decoder layer
// against the add and the norm; attention on the strided heads the in-place
// node leaves (the CUDA layout, forced on the CPU); the switch that turns
// the kernels off. The
// kernels themselves run in the gpu suite (tests/gpu/gpu_unit_test.cpp).
#include "tests/dist/torch_doctest.hpp"

#include <optional>

#include "meshrun/model/model.hpp"
#include "src/model/fused_kernels.hpp"
#include "src/model/layers.hpp"
#include "tests/model/model_fixtures.hpp"

using namespace meshrun;
using namespace meshrun::model_detail;

namespace {

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("the in-place rotary node gives the copying node's values and gradients, through a projection it overwrites") {
  torch::manual_seed(5);
  const int64_t batch = 3, seq = 11, heads = 4, head_dim = 16;
  for (const bool broadcast_batch : {true, false}) {
    CAPTURE(broadcast_batch);
    const torch::Tensor input = torch::randn({batch, seq, 24});
    const torch::Tensor weight_values = torch::randn({heads * head_dim, 24}) * 0.2;
    const torch::Tensor angles = torch::rand({broadcast_batch ? 1 : batch, 1, seq, head_dim / 2}) * 6;
    const torch::Tensor cos = angles.cos(), sin = angles.sin();
    const torch::Tensor grad_out = torch::randn({batch, heads, seq, head_dim});

    const auto run = [&](bool in_place) {
      const torch::Tensor weight = weight_values.clone().requires_grad_(true);
      const torch::Tensor x = input.clone().requires_grad_(true);
      // A view of the projection's output, as the attention passes it.
      const torch::Tensor heads_view = at::linear(x, weight).view({batch, seq, heads, head_dim});
      const torch::Tensor out = in_place ? apply_rotary_in_place(heads_view, cos, sin) : apply_rotary(heads_view, cos, sin);
      const auto grads = torch::autograd::grad({out}, {x, weight}, {grad_out});
      return std::tuple{out.detach().contiguous(), grads[0], grads[1], heads_view};
    };
    const auto [copied, copied_dx, copied_dw, untouched] = run(false);
    const auto [rotated, rotated_dx, rotated_dw, overwritten] = run(true);
    CHECK(max_difference(rotated, copied) < 1e-5);
    CHECK(max_difference(rotated_dx, copied_dx) < 1e-5);
    CHECK(max_difference(rotated_dw, copied_dw) < 1e-5);
    // In place: the projection's output now holds the rotation ([b, s, h, d]
    // order); the copying node left its input as it was.
    CHECK(max_difference(overwritten.detach().transpose(1, 2), copied) < 1e-5);
    CHECK(max_difference(untouched.detach().transpose(1, 2), copied) > 1e-2);
  }
}

TEST_CASE("the in-place rotary node inverts: rotating back by the negated sine gives the input") {
  torch::manual_seed(6);
  const torch::Tensor x = torch::randn({2, 5, 3, 8});
  const torch::Tensor angles = torch::rand({2, 1, 5, 4}) * 6;
  torch::Tensor work = x.clone();
  apply_rotary_in_place(work, angles.cos(), angles.sin());
  CHECK(max_difference(work, x) > 1e-2);
  apply_rotary_in_place(work, angles.cos(), -angles.sin());
  CHECK(max_difference(work, x) < 1e-5);
}

TEST_CASE("the residual add + norm gives the add and the norm, Llama's and Gemma's (plus one), with gradients") {
  torch::manual_seed(7);
  const torch::Tensor x_values = torch::randn({2, 9, 32}), delta_values = torch::randn({2, 9, 32});
  const torch::Tensor weight_values = torch::rand({32}) + 0.5;
  const torch::Tensor grad_normed = torch::randn({2, 9, 32}), grad_sum = torch::randn({2, 9, 32});
  for (const bool plus_one : {false, true}) {
    CAPTURE(plus_one);
    const auto leaves = [&] {
      return std::tuple{x_values.clone().requires_grad_(true), delta_values.clone().requires_grad_(true),
                        weight_values.clone().requires_grad_(true)};
    };
    const auto [x, delta, weight] = leaves();
    const AddedNorm fused = add_rms_norm_of(x, delta, weight, 1e-6, plus_one);
    const auto fused_grads = torch::autograd::grad({fused.normed, fused.sum}, {x, delta, weight}, {grad_normed, grad_sum});
    const auto [x2, delta2, weight2] = leaves();
    const torch::Tensor sum = x2 + delta2;
    const torch::Tensor normed = rms_norm_of(sum, weight2, 1e-6, plus_one);
    const auto grads = torch::autograd::grad({normed, sum}, {x2, delta2, weight2}, {grad_normed, grad_sum});
    CHECK(max_difference(fused.sum, sum) == 0);
    CHECK(max_difference(fused.normed, normed) == 0);
    for (int i = 0; i < 3; ++i) CHECK(max_difference(fused_grads[i], grads[i]) == 0);
  }
}

TEST_CASE("the CUDA kernels' switch: set_enabled turns them off and on, never on where they were not built") {
  const bool before = fused_cuda::enabled();
  fused_cuda::set_enabled(false);
  CHECK_FALSE(fused_cuda::enabled());
  fused_cuda::set_enabled(true);
  CHECK(fused_cuda::enabled() == fused_cuda::built());
  CHECK(std::string(fused_cuda::architectures()).empty() == !fused_cuda::built());
  fused_cuda::set_enabled(before);
  // CPU tensors never take the kernels, enabled or not: swiglu's CPU node.
  const torch::Tensor gate = torch::randn({4, 8}), up = torch::randn({4, 8});
  CHECK(max_difference(swiglu(gate, up), at::silu(gate) * up) < 1e-6);
}

namespace strided_heads_test {

// The whole model's logits and every parameter's gradient for one batch.
std::pair<torch::Tensor, std::vector<torch::Tensor>> logits_and_grads(const ModelConfig& config, bool in_place) {
  torch::manual_seed(11);
  ModelOptions options;
  options.config = config;
  LlamaModel model(options);
  const torch::Tensor ids = torch::randint(config.vocab, {3, 7}, torch::kInt64);
  const torch::Tensor weights = torch::randn({3, 7, config.vocab});
  std::optional<InPlaceRotaryScope> scope;
  if (in_place) scope.emplace();
  const torch::Tensor logits = model->forward({ids, {}, {}, {}});
  (logits * weights).sum().backward();
  std::vector<torch::Tensor> grads;
  for (const auto& parameter : model->parameters()) grads.push_back(parameter.grad().clone());
  return {logits.detach(), grads};
}

}  // namespace strided_heads_test

TEST_CASE("attention takes the in-place rotary's strided heads (the CUDA kernel's layout): same logits and gradients") {
  // Batch 3 and 7 positions: the strided [b, h, s, d] view does not merge
  // batch and heads without a copy (a view() there fails on CUDA).
  for (const auto& [name, config] : model_test::paged_attention_configs()) {
    CAPTURE(name);
    const auto [logits, grads] = strided_heads_test::logits_and_grads(config, false);
    const auto [strided_logits, strided_grads] = strided_heads_test::logits_and_grads(config, true);
    CHECK(max_difference(strided_logits, logits) < 1e-5);
    REQUIRE(strided_grads.size() == grads.size());
    for (size_t i = 0; i < grads.size(); ++i) CHECK(max_difference(strided_grads[i], grads[i]) < 1e-5);
  }
}
