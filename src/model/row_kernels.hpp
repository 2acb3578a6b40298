// Float row kernels for the CPU paths that work on raw rows: the blocked
// attention (cpu_attention.cpp) and the cross-entropy (vocab_parallel.cpp).
// Each reads and writes exactly n floats through its pointers and allocates
// nothing; x and y may be the same row where both appear.
//
// Hand-written (row_kernels.cpp says how) because a dispatched tensor op per
// row costs more than the row's arithmetic at these sizes, and ATen's
// vectorised exp is compiled for the wheel's own CPU dispatch and not
// exported to callers.
#pragma once

#include <cmath>
#include <cstdint>

namespace meshrun::model_detail {

// y[i] ← factor · e^(x[i] − shift), the exponential to about 2 ulp and
// exactly 0 where x[i] − shift < −87 (where masked scores land: masked
// keys must weigh nothing, as they do in the whole-square softmax).
void exp_shifted_scaled_to(float* y, const float* x, float shift, float factor, int64_t n);
// Σ e^(x[i] − shift), the same exponentials, never stored.
float exp_shifted_sum(const float* x, float shift, int64_t n);

float row_max(const float* x, int64_t n);
float dot(const float* x, const float* y, int64_t n);

// scores ← softmax(scores + mask) over one row of n keys.
void softmax_row(float* scores, const float* mask, int64_t n);
// dp ← p ∘ (dp − p·dp) over one row: the softmax's backward.
void softmax_backward_row(float* dp, const float* p, int64_t n);

// SwiGLU's activation, element by element: out ← silu(gate) · up; and its
// backward from grad_out: grad_gate ← grad_out · up · silu′(gate),
// grad_up ← grad_out · silu(gate).
void swiglu_to(float* out, const float* gate, const float* up, int64_t n);
void swiglu_backward_to(float* grad_gate, float* grad_up, const float* grad_out, const float* gate, const float* up,
                        int64_t n);

// RMSNorm's rows (rms_norm.cpp), with r = inverse_rms = 1 / rms(x):
// y ← x · r · weight; and backward, dx ← r · g · weight − x · r³ ·
// Σ(g · weight · x) / n, weight_grad[i] += g[i] · x[i] · r.
void rms_norm_row(float* y, const float* x, const float* weight, float inverse_rms, int64_t n);
// 1 / rms(x) of one row as RMSNorm's forward computes it (one definition,
// so the decode step's fused layer gets the norm's bits).
inline float inverse_rms_of(const float* x, int64_t n, float epsilon) {
  return 1.0f / std::sqrt(dot(x, x, n) / static_cast<float>(n) + epsilon);
}
void rms_norm_backward_row(float* dx, float* weight_grad, const float* g, const float* x, const float* weight,
                           float inverse_rms, int64_t n);

// One (sequence, kv head) of a decode step's attention over a paged KV
// cache (cpu_paged_decode_attention): `rows` query rows of d floats at q
// (the kv head's group of query heads, one new token each) against n keys
// and values whose rows lie wherever their blocks are (keys[j], values[j]:
// d floats each), with the additive mask row `mask` [n]:
// out[r] ← Σ_j softmax_j(q[r]·keys[j] + mask[j]) · values[j]. scores: rows
// × n floats of scratch. Each key and value row is read once for the group.
void paged_decode_rows(float* out, const float* q, int64_t rows, const float* mask, const float* const* keys,
                       const float* const* values, int64_t n, int64_t d, float* scores);

}  // namespace meshrun::model_detail
