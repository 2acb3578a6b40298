// meshrun's own CUDA kernels for the training step's element-wise work
// (issue #39): SwiGLU's silu(gate) × up forward and backward, the rotary
// embedding applied to q or k in place, and the residual add fused with the
// RMSNorm that follows it, forward and backward. Each replaces several
// LibTorch kernels (one pass over the activations each) by one pass; each has
// the LibTorch computation as its reference (layers.hpp's swiglu,
// apply_rotary, rms_norm_of), which the CPU runs and the gpu suite compares
// the kernels against.
//
// This header names no CUDA or LibTorch type, so that the kernels
// (cuda/fused_kernels.cu, compiled by nvcc without LibTorch's headers) and
// their callers share it. Pointers are device pointers, `stream` a
// cudaStream_t. A launcher returns nullptr, or the CUDA error's text (the
// caller throws it). A build without the CUDA toolkit (meson
// -Dgpu_kernels=disabled, or no nvcc found) links fused_kernels_absent.cpp
// instead: built() is false there and the callers keep LibTorch's path.
#pragma once

#include <cstdint>

namespace meshrun::model_detail::fused_cuda {

enum class Element : int { f32 = 0, bf16 = 1, f16 = 2 };

// True when this binary holds the kernels.
bool built();
// The architectures the kernels were compiled for ("sm_80 sm_90"), or "".
const char* architectures();

// Whether the model's CUDA paths use the kernels: built() and not turned off
// by MESHRUN_CUDA_KERNELS=0 (read once; for A/B benchmarks and as an escape
// hatch); set_enabled overrides it (tests).
bool enabled();
void set_enabled(bool use);

// out = silu(gate) × up over n elements; fp32 inside.
const char* swiglu_forward(Element type, const void* gate, const void* up, void* out, int64_t n, void* stream);
// d gate = d out × up × silu'(gate), d up = d out × silu(gate).
const char* swiglu_backward(Element type, const void* grad, const void* gate, const void* up, void* grad_gate,
                            void* grad_up, int64_t n, void* stream);

// The shape and strides (in elements) of a [batch, seq, heads, head_dim]
// operand whose last dimension is contiguous.
struct HeadsLayout {
  int64_t batch_stride, seq_stride, head_stride;
};

// Rotates pairs (i, i + half) of every head: out = (x1·cos − x2·sin,
// x2·cos + x1·sin), with sin negated when `inverse` (the backward). `in`
// and `out` may be the same storage with the same layout (in place: each
// pair is read before it is written, by one thread). cos and sin are
// [batch or 1, seq, half] with the given strides (batch stride 0 when
// broadcast), last dimension contiguous, of the same element type.
const char* rotary(Element type, const void* in, HeadsLayout in_layout, void* out, HeadsLayout out_layout,
                   const void* cos, const void* sin, int64_t table_batch_stride, int64_t table_seq_stride,
                   int64_t batch, int64_t seq, int64_t heads, int64_t half, bool inverse, void* stream);

// sum = x + delta (rounded to the element type), then y = RMSNorm(sum) ×
// weight as rms_norm_of computes it (Llama: the normalised value rounded
// before the weight; plus_one, Gemma: × (1 + w) in fp32); inverse_rms gets
// each row's 1/rms in fp32. rows × n, contiguous.
const char* add_rms_norm_forward(Element type, const void* x, const void* delta, const void* weight, void* sum,
                                 void* y, float* inverse_rms, int64_t rows, int64_t n, float eps, bool plus_one,
                                 void* stream);
// The row count of weight-gradient partials add_rms_norm_backward writes
// (its grid); the caller sums them.
int64_t add_rms_norm_partials(int64_t rows, int device);
// From d y and d sum (grad_sum may be null: sum unused downstream): d x
// (= d delta) and per-block weight-gradient partials [partials, n] in fp32.
const char* add_rms_norm_backward(Element type, const void* grad_y, const void* grad_sum, const void* sum,
                                  const void* weight, const float* inverse_rms, void* grad_x,
                                  float* weight_partials, int64_t partials, int64_t rows, int64_t n,
                                  bool plus_one, void* stream);

}  // namespace meshrun::model_detail::fused_cuda
