// The row kernels (row_kernels.hpp), written so that GCC vectorises them:
// eight explicit lanes for the reductions, selects instead of branches, no
// libm calls. The file is compiled at -O3 without math errno or trapping
// (the pragma, so the project's flags stay as they are), and each exported
// kernel is cloned for x86-64-v4 (AVX-512), v3 (AVX2 + FMA) and the
// baseline, the loader picking one per process by the CPU it finds (GCC's
// target_clones): the project builds for the baseline, where these loops
// would run at SSE2's four lanes. The helpers are always_inline so that
// each clone compiles them for its own instruction set.
// push/pop: in a unity build (meson.build) other files share this
// translation unit, and the options must end with this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3", "no-math-errno", "no-trapping-math")
#endif

#include "row_kernels.hpp"

#include <cstring>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define MESHRUN_ROW_KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MESHRUN_ROW_KERNEL
#endif
#define MESHRUN_ROW_HELPER static inline __attribute__((always_inline))
// A lambda handed to a helper, inlined like the helpers.
#define MESHRUN_ROW_TERM __attribute__((always_inline))

namespace meshrun::model_detail {
namespace {

// e^v for one value: a degree-6 polynomial of the remainder after taking
// out powers of two; 0 below −87.
MESHRUN_ROW_HELPER float exp_of(float v) {
  float c = v < -88.0f ? -88.0f : v;
  c = c > 88.0f ? 88.0f : c;
  const float t = c * 1.44269504f;                               // c / ln 2
  const float nf = (t + 12582912.0f) - 12582912.0f;              // rounded to the nearest integer
  const float r = c - nf * 0.693359375f + nf * 2.12194440e-4f;  // c − n ln 2, ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(nf) + 127) * 8388608;  // 2^n
  float power;
  std::memcpy(&power, &bits, sizeof power);
  return v < -87.0f ? 0.0f : p * power;
}

// 1 / (1 + e^−v); e^−v saturates at e^88 below v = −88, where the
// sigmoid is below 10^−38 either way.
MESHRUN_ROW_HELPER float sigmoid_of(float v) { return 1.0f / (1.0f + exp_of(-v)); }

MESHRUN_ROW_HELPER void exp_shifted_impl(float* y, const float* x, float shift, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_of(x[i] - shift);
}

MESHRUN_ROW_HELPER float max_impl(const float* x, int64_t n) {
  float lanes[8];
  for (float& lane : lanes) lane = -3.4028235e38f;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lanes[j] = lanes[j] > x[i + j] ? lanes[j] : x[i + j];
  float best = lanes[0];
  for (int j = 1; j < 8; ++j) best = best > lanes[j] ? best : lanes[j];
  for (; i < n; ++i) best = best > x[i] ? best : x[i];
  return best;
}

// The sum of term(k) for k < n, accumulated in eight lanes (lane j takes
// every eighth term), then the lanes in order, then the tail: the order GCC
// vectorises, and the one every result's bits depend on, so each reduction
// here goes through it.
template <class Term>
MESHRUN_ROW_HELPER float lane_sum(int64_t n, Term term) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lanes[j] += term(i + j);
  float sum = 0;
  for (float lane : lanes) sum += lane;
  for (; i < n; ++i) sum += term(i);
  return sum;
}

MESHRUN_ROW_HELPER float sum_impl(const float* x, int64_t n) {
  return lane_sum(n, [x](int64_t k) MESHRUN_ROW_TERM { return x[k]; });
}

MESHRUN_ROW_HELPER void softmax_impl(float* scores, const float* mask, int64_t n) {
  for (int64_t i = 0; i < n; ++i) scores[i] += mask[i];
  exp_shifted_impl(scores, scores, max_impl(scores, n), n);
  const float inverse = 1.0f / sum_impl(scores, n);
  for (int64_t i = 0; i < n; ++i) scores[i] *= inverse;
}

MESHRUN_ROW_HELPER float dot_impl(const float* x, const float* y, int64_t n) {
  return lane_sum(n, [x, y](int64_t k) MESHRUN_ROW_TERM { return x[k] * y[k]; });
}

}  // namespace

MESHRUN_ROW_KERNEL float exp_shifted_sum(const float* x, float shift, int64_t n) {
  return lane_sum(n, [x, shift](int64_t k) MESHRUN_ROW_TERM { return exp_of(x[k] - shift); });
}

MESHRUN_ROW_KERNEL void exp_shifted_scaled_to(float* y, const float* x, float shift, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = factor * exp_of(x[i] - shift);
}

MESHRUN_ROW_KERNEL float row_max(const float* x, int64_t n) { return max_impl(x, n); }

MESHRUN_ROW_KERNEL float dot(const float* x, const float* y, int64_t n) { return dot_impl(x, y, n); }

MESHRUN_ROW_KERNEL void softmax_row(float* scores, const float* mask, int64_t n) { softmax_impl(scores, mask, n); }

MESHRUN_ROW_KERNEL void softmax_backward_row(float* dp, const float* p, int64_t n) {
  const float projection = dot_impl(p, dp, n);
  for (int64_t i = 0; i < n; ++i) dp[i] = p[i] * (dp[i] - projection);
}

MESHRUN_ROW_KERNEL void swiglu_to(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] * sigmoid_of(gate[i]) * up[i];
}

MESHRUN_ROW_KERNEL void swiglu_backward_to(float* grad_gate, float* grad_up, const float* grad_out, const float* gate,
                                           const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], s = sigmoid_of(g), d = grad_out[i];
    grad_up[i] = d * g * s;
    grad_gate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
  }
}

MESHRUN_ROW_KERNEL void rms_norm_row(float* y, const float* x, const float* weight, float inverse_rms, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inverse_rms * weight[i];
}

MESHRUN_ROW_KERNEL void rms_norm_backward_row(float* dx, float* weight_grad, const float* g, const float* x,
                                              const float* weight, float inverse_rms, int64_t n) {
  const float projection =
      lane_sum(n, [g, weight, x](int64_t k) MESHRUN_ROW_TERM { return g[k] * weight[k] * x[k]; });
  const float correction = projection * inverse_rms * inverse_rms * inverse_rms / static_cast<float>(n);
  for (int64_t k = 0; k < n; ++k) {
    dx[k] = inverse_rms * g[k] * weight[k] - x[k] * correction;
    weight_grad[k] += g[k] * x[k] * inverse_rms;
  }
}

MESHRUN_ROW_KERNEL void paged_decode_rows(float* out, const float* q, int64_t rows, const float* mask,
                                          const float* const* keys, const float* const* values, int64_t n, int64_t d,
                                          float* scores) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < rows; ++r) scores[r * n + j] = dot_impl(q + r * d, keys[j], d);
  for (int64_t r = 0; r < rows; ++r) softmax_impl(scores + r * n, mask, n);
  for (int64_t i = 0; i < rows * d; ++i) out[i] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float* value = values[j];
    for (int64_t r = 0; r < rows; ++r) {
      const float weight = scores[r * n + j];
      float* target = out + r * d;
      for (int64_t i = 0; i < d; ++i) target[i] += weight * value[i];
    }
  }
}

}  // namespace meshrun::model_detail

#undef MESHRUN_ROW_KERNEL
#undef MESHRUN_ROW_HELPER
#undef MESHRUN_ROW_TERM
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
