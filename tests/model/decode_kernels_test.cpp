// small_batch_linear(s) and paged_decode_rows_avx2 (src/model/decode_kernels.hpp): equal to
// at::linear for the counts of rows each form takes and every remainder of
// rows and output columns the micro-kernels split, and declining where they
// do not apply; the CPU rotation of a decode step against the autograd path.
#include "tests/dist/torch_doctest.hpp"

#include "src/model/decode_kernels.hpp"
#include "src/model/layers.hpp"
#include "src/model/row_kernels.hpp"

#include <limits>
#include <vector>

using namespace meshrun::model_detail;

TEST_CASE("small_batch_linear equals at::linear for 1 to kDecodeLinearRows rows and any number of outputs") {
  torch::NoGradGuard no_grad;
  const DecodeStepScope decode_step;
  torch::manual_seed(5);
  // Every row count of the few-row form; past it, each panel remainder
  // (16k + 1..8 ends in an 8-lane panel, 16k + 9..15 in a 16-lane one).
  std::vector<int64_t> row_counts;
  for (int64_t rows = 1; rows <= kDecodeLinearRows; ++rows)
    if (rows <= kSmallBatchRows + 6 || rows % 16 <= 1 || rows % 16 == 8 || rows % 16 == 9 || rows % 16 == 15 ||
        rows == kDecodeLinearRows)
      row_counts.push_back(rows);
  for (const int64_t inner : {8, 24, 256}) {
    // Every width of a 6-column block and of a chunk's last block; 2048: a
    // power-of-two output width, whose rows the tile keeps apart.
    for (const int64_t out : {1, 2, 3, 4, 5, 6, 7, 11, 49, 64, 100, 2048}) {
      const torch::Tensor weight = torch::randn({out, inner});
      for (const int64_t rows : row_counts) {
        if (out == 2048 && rows % 7 != 0) continue;  // a few of them are enough at that width
        const torch::Tensor x = torch::randn({rows, 1, inner});
        const torch::Tensor want = at::linear(x, weight);
        if (!small_batch_linear_applies(x, weight)) {
          // A CPU without AVX2 and FMA: the fallback is at::linear itself.
          CHECK(linear_or_small_batch(x, weight).equal(want));
          continue;
        }
        const torch::Tensor got = small_batch_linear(x, weight);
        REQUIRE(got.sizes() == want.sizes());
        const double difference = (got - want).abs().max().item<double>();
        CHECK_MESSAGE(difference < 1e-4, inner << " in, " << out << " out, " << rows << " rows: " << difference);
      }
    }
  }
  const torch::Tensor weight = torch::randn({5, 16}), bias = torch::randn({5}), x = torch::randn({3, 16});
  CHECK((linear_or_small_batch(x, weight, bias) - at::linear(x, weight, bias)).abs().max().item<double>() < 1e-5);
}

TEST_CASE("small_batch_linears gives each weight's product of the shared input") {
  torch::NoGradGuard no_grad;
  const DecodeStepScope decode_step;
  torch::manual_seed(6);
  const std::vector<torch::Tensor> weights = {torch::randn({64, 32}), torch::randn({13, 32}), torch::randn({32, 32})};
  for (const int64_t rows : std::vector<int64_t>{1, 5, kSmallBatchRows, kSmallBatchRows + 1, 30, kDecodeLinearRows}) {
    const torch::Tensor x = torch::randn({rows, 32});
    for (const torch::Tensor& weight : weights) REQUIRE(small_batch_linear_applies(x, weight) == small_batch_linear_applies(x, weights[0]));
    const std::vector<torch::Tensor> got = small_batch_linears(x, weights);
    REQUIRE(got.size() == weights.size());
    for (size_t i = 0; i < weights.size(); ++i) {
      const torch::Tensor want = at::linear(x, weights[i]);
      REQUIRE(got[i].sizes() == want.sizes());
      CHECK_MESSAGE((got[i] - want).abs().max().item<double>() < 1e-4, rows << " rows, weight " << i);
      if (small_batch_linear_applies(x, weights[i])) CHECK(got[i].equal(small_batch_linear(x, weights[i])));
    }
  }
}

TEST_CASE("small_batch_linear declines outside a decode step, more rows, autograd, other dtypes, strides and inner sizes") {
  const torch::Tensor weight = torch::randn({4, 16});
  {
    torch::NoGradGuard no_grad;
    CHECK_FALSE(small_batch_linear_applies(torch::randn({2, 16}), weight));  // no DecodeStepScope
  }
  const DecodeStepScope decode_step;
  {
    torch::NoGradGuard no_grad;
    CHECK_FALSE(small_batch_linear_applies(torch::randn({kDecodeLinearRows + 1, 16}), weight));
    CHECK_FALSE(small_batch_linear_applies(torch::randn({2, 16}).to(torch::kBFloat16), weight.to(torch::kBFloat16)));
    CHECK_FALSE(small_batch_linear_applies(torch::randn({16, 2}).t(), weight));
    CHECK_FALSE(small_batch_linear_applies(torch::randn({2, 12}), torch::randn({4, 12})));
    CHECK_FALSE(small_batch_linear_applies(torch::randn({0, 16}), weight));
  }
  // Training keeps at::linear (and its gradients).
  CHECK_FALSE(small_batch_linear_applies(torch::randn({2, 16}), weight));
  const torch::Tensor w = weight.clone().requires_grad_();
  linear_or_small_batch(torch::randn({2, 16}), w).sum().backward();
  CHECK(w.grad().defined());
}

TEST_CASE("the decode step chooses the kernels up to kSmallBatchRows rows, and past them only off Intel's AVX-512") {
  torch::NoGradGuard no_grad;
  const DecodeStepScope decode_step;
  const torch::Tensor weight = torch::randn({24, 16});
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_is("intel");
#else
  const bool avx512 = false;
#endif
  for (const int64_t rows : {int64_t{1}, kSmallBatchRows, kSmallBatchRows + 1, kDecodeLinearRows, kDecodeLinearRows + 1}) {
    CAPTURE(rows);
    const torch::Tensor x = torch::randn({rows, 16});
    const bool applies = small_batch_linear_applies(x, weight);
    CHECK(small_batch_linear_chosen(x, weight) == (applies && (rows <= kSmallBatchRows || !avx512)));
    // Whichever serves, linear_or_small_batch is the product.
    CHECK(torch::allclose(linear_or_small_batch(x, weight), at::linear(x, weight), 1e-5, 1e-5));
  }
}

TEST_CASE("paged_decode_rows_avx2 equals the portable paged_decode_rows") {
  torch::manual_seed(8);
  for (const int64_t d : {8, 64, 72, 128, 136}) {
    if (!paged_decode_rows_avx2_applies(d)) {
      CHECK_FALSE(paged_decode_rows_avx2_applies(d));  // a CPU without AVX2 and FMA
      continue;
    }
    for (const int64_t n : {1, 7, 8, 9, 33}) {
      for (const int64_t rows : {1, 2, 3}) {
        // Keys and values scattered in a pool of 128 slots, in reverse order.
        const torch::Tensor pool_k = torch::randn({128, d}), pool_v = torch::randn({128, d});
        std::vector<const float*> keys, values;
        for (int64_t j = 0; j < n; ++j) {
          keys.push_back(pool_k.data_ptr<float>() + (127 - 2 * j) * d);
          values.push_back(pool_v.data_ptr<float>() + (126 - j) * d);
        }
        const torch::Tensor q = torch::randn({rows, d}) * 0.3;
        torch::Tensor mask = torch::zeros({n});
        if (n > 2) mask.narrow(0, 0, n / 3).fill_(std::numeric_limits<float>::lowest());
        torch::Tensor want = torch::empty({rows, d}), got = torch::empty({rows, d});
        std::vector<float> scratch(static_cast<size_t>(rows * n));
        paged_decode_rows(want.data_ptr<float>(), q.data_ptr<float>(), rows, mask.data_ptr<float>(), keys.data(),
                          values.data(), n, d, scratch.data());
        paged_decode_rows_avx2(got.data_ptr<float>(), q.data_ptr<float>(), rows, mask.data_ptr<float>(), keys.data(),
                               values.data(), n, d, scratch.data());
        const double difference = (got - want).abs().max().item<double>();
        CHECK_MESSAGE(difference < 1e-5, "d " << d << ", " << n << " keys, " << rows << " rows: " << difference);
      }
    }
  }
  CHECK_FALSE(paged_decode_rows_avx2_applies(12));
}

TEST_CASE("a decode step's rotation on the CPU has the autograd path's bits, per-row and broadcast tables") {
  torch::manual_seed(9);
  for (const int64_t table_batch : {1, 3}) {
    const torch::Tensor x = torch::randn({3, 2, 4, 16});  // [b, s, h, d]
    const torch::Tensor angles = torch::randn({table_batch, 1, 2, 8});
    const torch::Tensor cos = angles.cos(), sin = angles.sin();
    const torch::Tensor want = apply_rotary(x, cos, sin);  // outside a decode step: the autograd node
    torch::NoGradGuard no_grad;
    const DecodeStepScope decode_step;
    const torch::Tensor got = apply_rotary(x, cos, sin);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(got.is_contiguous());
    CHECK(got.equal(want));
  }
  // Not served: a strided input keeps the general path, and stays right.
  torch::NoGradGuard no_grad;
  const DecodeStepScope decode_step;
  const torch::Tensor wide = torch::randn({2, 2, 4, 32});
  const torch::Tensor x = wide.narrow(3, 0, 16);
  const torch::Tensor angles = torch::randn({1, 1, 2, 8});
  CHECK(apply_rotary(x, angles.cos(), angles.sin()).equal(apply_rotary(x.contiguous(), angles.cos(), angles.sin())));
}
