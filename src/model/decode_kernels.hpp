// Hand-written AVX2 kernels of the rollout engine's decode step on the CPU.
//
// x Wᵀ for the rows of a decode step: it multiplies the live sequences'
// rows (1 to max_batch) by every weight matrix. Why hand-written: the torch
// wheel's MKL runs these shapes at a third to a half of its large-matrix
// rate on this project's machines (a [3, 256] × [256, 4096] product took
// longer than a [4, 256] one; docs/benchmarks.md). Up to kSmallBatchRows
// rows the product is bound by streaming W once: each W row is read once
// for all the rows of x, which stay in L1. Past that, up to
// kDecodeLinearRows, x is packed transposed so that the lanes of each
// multiply-add are outputs (decode_kernels.cpp); past that MKL is as fast.
//
// Only inside a DecodeStepScope (forward_paged and forward_cached open
// one), so every other forward keeps at::linear's bits: a scoring forward
// without autograd equals the training forward exactly. And only where it
// applies (fp32, CPU, no autograd, AVX2 + FMA, at most kDecodeLinearRows
// rows, inner size a multiple of 8, both contiguous); linear_or_small_batch()
// falls back to at::linear everywhere else, so callers use it
// unconditionally.
//
// The attention of one (sequence, kv head) over a paged cache
// (row_kernels.hpp's paged_decode_rows, which serves where this does not):
// the portable loop takes one key at a time and sums each dot product's
// lanes serially; here eight keys' dot products run side by side and their
// lanes are summed together, and each output row accumulates in registers
// (399 → 150 ms of a profiled GRPO rollout, docs/benchmarks.md).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace meshrun::model_detail {

inline constexpr int64_t kSmallBatchRows = 12;
// Up to this many rows the many-row form serves (decode_kernels.cpp):
// past 64 rows MKL ran as fast or faster on this project's machines.
inline constexpr int64_t kDecodeLinearRows = 64;

// While one lives on this thread, small_batch_linear may serve.
class DecodeStepScope {
 public:
  DecodeStepScope();
  ~DecodeStepScope();
  DecodeStepScope(const DecodeStepScope&) = delete;
  DecodeStepScope& operator=(const DecodeStepScope&) = delete;

 private:
  bool outer_;
};

// True while a DecodeStepScope lives on this thread.
bool in_decode_step();

// The kernels can compute x · weightᵀ here (the conditions above).
bool small_batch_linear_applies(const torch::Tensor& x, const torch::Tensor& weight);
// ...and the decode step takes them over at::linear: applies(), and past
// kSmallBatchRows rows only on a CPU that is not an Intel one with
// AVX-512. MKL's AVX-512 kernels ran [13-64, 256-704] products at 1.1-2.5×
// the many-row form's AVX2 rate on such a machine, where on an AVX2-only
// one they ran at 0.5-0.9× of it (docs/benchmarks.md); up to
// kSmallBatchRows the kernels led on both.
bool small_batch_linear_chosen(const torch::Tensor& x, const torch::Tensor& weight);
// x [..., in] · weight [out, in]ᵀ → [..., out]; the caller checked applies().
torch::Tensor small_batch_linear(const torch::Tensor& x, const torch::Tensor& weight);
// x · weightᵢᵀ for several weights that share x (q, k and v; gate and
// up), each equal to small_batch_linear(x, weightᵢ): x is read, and packed,
// once, and the threads split all the products' rows together. The caller
// checked applies() for every weight.
std::vector<torch::Tensor> small_batch_linears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights);
// small_batch_linear where it is chosen, at::linear(x, weight, bias) otherwise.
torch::Tensor linear_or_small_batch(const torch::Tensor& x, const torch::Tensor& weight,
                                    const torch::Tensor& bias = {});

// True on a CPU with AVX2 and FMA for a head size that is a multiple of 8.
bool paged_decode_rows_avx2_applies(int64_t d);
// paged_decode_rows' contract exactly (row_kernels.hpp).
void paged_decode_rows_avx2(float* out, const float* q, int64_t rows, const float* mask, const float* const* keys,
                            const float* const* values, int64_t n, int64_t d, float* scores);

}  // namespace meshrun::model_detail
