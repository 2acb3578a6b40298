// The CPU row kernels and the fused nodes built on them against LibTorch's
// own operations: SwiGLU's activation (values and both gradients, extreme
// inputs, the fallback for inputs it does not fuse), RMSNorm, and the
// exponentials the attention and cross-entropy use.
#include "tests/dist/torch_doctest.hpp"

#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "src/model/layers.hpp"
#include "src/model/row_kernels.hpp"

using namespace meshrun::model_detail;

namespace {

double max_relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs() / (b.abs() + 1e-6)).max().item<double>();
}

}  // namespace

TEST_CASE("fused SwiGLU equals silu(gate) × up, gradients included, and falls back where it does not fuse") {
  torch::manual_seed(3);
  // 40 000 elements: several threads' chunks and a tail of odd length.
  torch::Tensor gate_values = torch::randn({5, 8000}) * 6;
  gate_values[0][0] = 100;
  gate_values[0][1] = -100;
  gate_values[0][2] = 0;
  gate_values[0][3] = -87.5;
  const torch::Tensor up_values = torch::randn({5, 8000});
  const torch::Tensor grad_out = torch::randn({5, 8000});

  const torch::Tensor reference_gate = gate_values.clone().requires_grad_(true);
  const torch::Tensor reference_up = up_values.clone().requires_grad_(true);
  const torch::Tensor reference = at::silu(reference_gate) * reference_up;
  const auto reference_grads = torch::autograd::grad({reference}, {reference_gate, reference_up}, {grad_out});

  SUBCASE("fused: contiguous float on the CPU") {
    const torch::Tensor gate = gate_values.clone().requires_grad_(true);
    const torch::Tensor up = up_values.clone().requires_grad_(true);
    const torch::Tensor out = swiglu(gate, up);
    CHECK(out.grad_fn()->name().find("Swiglu") != std::string::npos);
    CHECK((out - reference).abs().max().item<double>() < 1e-5);
    CHECK(max_relative_difference(out, reference) < 1e-4);
    const auto grads = torch::autograd::grad({out}, {gate, up}, {grad_out});
    CHECK((grads[0] - reference_grads[0]).abs().max().item<double>() < 1e-5);
    CHECK((grads[1] - reference_grads[1]).abs().max().item<double>() < 1e-5);
    CHECK(std::isfinite(grads[0].abs().max().item<double>()));
  }
  SUBCASE("not fused: a strided gate, or bf16") {
    const torch::Tensor gate = gate_values.t().contiguous().t().requires_grad_(true);
    const torch::Tensor up = up_values.clone().requires_grad_(true);
    REQUIRE_FALSE(gate.is_contiguous());
    const torch::Tensor out = swiglu(gate, up);
    CHECK(out.grad_fn()->name().find("Swiglu") == std::string::npos);
    CHECK((out - reference).abs().max().item<double>() < 1e-6);
    const auto grads = torch::autograd::grad({out}, {gate, up}, {grad_out});
    CHECK((grads[0] - reference_grads[0]).abs().max().item<double>() < 1e-6);
    const torch::Tensor half = swiglu(gate_values.to(torch::kBFloat16), up_values.to(torch::kBFloat16));
    CHECK((half.scalar_type() == torch::kBFloat16));
  }
}

TEST_CASE("row exponentials: e^(x − shift) within a few ulp, 0 below −87, sums and scaled rows agree") {
  std::vector<float> x;
  for (int i = -1000; i <= 1000; ++i) x.push_back(static_cast<float>(i) * 0.0877f);  // −87.7 … 87.7
  x.push_back(-200.0f);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size()), scaled(x.size());
  exp_shifted_scaled_to(y.data(), x.data(), 0.5f, 1.0f, n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i] - 0.5f);  // the difference as the kernel rounds it
    CAPTURE(v);
    if (v < -87.0) {
      CHECK(y[i] == 0.0f);
    } else {
      CHECK(std::abs(y[i] - std::exp(v)) <= 5e-7 * std::exp(v));
    }
  }
  // Shifted by the row's max, as the softmax and cross-entropy use them.
  const float max = row_max(x.data(), n);
  exp_shifted_scaled_to(y.data(), x.data(), max, 1.0f, n);
  double sum = 0;
  for (float value : y) sum += value;
  CHECK(std::abs(exp_shifted_sum(x.data(), max, n) - sum) <= 1e-5 * sum);
  exp_shifted_scaled_to(scaled.data(), x.data(), max, 0.25f, n);
  for (int64_t i = 0; i < n; ++i) CHECK(scaled[i] == doctest::Approx(0.25f * y[i]).epsilon(1e-6));
  CHECK(max == x[static_cast<size_t>(n - 2)]);
}

TEST_CASE("fused RMSNorm equals the tensor-op form, gradients of input and weight included") {
  torch::manual_seed(5);
  // 37 rows of 300: rows that do not divide among the threads, a width
  // that is not a multiple of eight lanes.
  const torch::Tensor x_values = torch::randn({37, 300}) * 3;
  const torch::Tensor weight_values = torch::rand({300}) + 0.5;
  const torch::Tensor grad_out = torch::randn({37, 300});
  // The reference: the strided input takes the tensor-op form.
  const torch::Tensor strided_x = x_values.t().contiguous().t().requires_grad_(true);
  const torch::Tensor reference_weight = weight_values.clone().requires_grad_(true);
  const torch::Tensor reference = rms_norm(strided_x, reference_weight, 1e-6);
  const auto reference_grads = torch::autograd::grad({reference}, {strided_x, reference_weight}, {grad_out});
  // Hugging Face's formula, written out.
  const torch::Tensor written_out = weight_values * (x_values * torch::rsqrt(x_values.square().mean(-1, true) + 1e-6));
  CHECK((reference - written_out).abs().max().item<double>() < 1e-5);

  for (int threads : {1, 2}) {
    CAPTURE(threads);
    const int before = at::get_num_threads();
    at::set_num_threads(threads);
    const torch::Tensor x = x_values.clone().requires_grad_(true);
    const torch::Tensor weight = weight_values.clone().requires_grad_(true);
    const torch::Tensor out = rms_norm(x, weight, 1e-6);
    const auto grads = torch::autograd::grad({out}, {x, weight}, {grad_out});
    at::set_num_threads(before);
    CHECK((out - reference).abs().max().item<double>() < 1e-5);
    CHECK((grads[0] - reference_grads[0]).abs().max().item<double>() < 1e-5);
    CHECK((grads[1] - reference_grads[1]).abs().max().item<double>() < 1e-4);
  }

  // A frozen weight (a LoRA base): the input's gradient alone.
  const torch::Tensor x = x_values.clone().requires_grad_(true);
  const torch::Tensor out = rms_norm(x, weight_values, 1e-6);
  const torch::Tensor grad_x = torch::autograd::grad({out}, {x}, {grad_out})[0];
  CHECK((grad_x - reference_grads[0]).abs().max().item<double>() < 1e-5);
}
