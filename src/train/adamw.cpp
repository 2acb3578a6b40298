// AdamW on flat fp32 shards (include/meshrun/train/optimizer.hpp).
#include "meshrun/train/optimizer.hpp"
#include "adamw_library.hpp"

#include <ATen/ops/_fused_adamw.h>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "meshrun/ckpt/checkpoint.hpp"

namespace meshrun {

AdamWShard AdamWShard::for_params(torch::Tensor params, ElementRanges decay_ranges) {
  if (!params.defined() || params.dim() != 1 || !params.is_contiguous() || params.scalar_type() != torch::kFloat32)
    throw std::logic_error("AdamW shard: parameters must be a 1-D contiguous float32 tensor");
  for (const auto& [begin, end] : decay_ranges)
    if (begin < 0 || end < begin || end > params.numel())
      throw std::logic_error("AdamW shard: decay range [" + std::to_string(begin) + ", " + std::to_string(end) +
                             ") outside a shard of " + std::to_string(params.numel()) + " elements");
  AdamWShard shard;
  shard.exp_avg = torch::zeros_like(params);
  shard.exp_avg_sq = torch::zeros_like(params);
  shard.params = std::move(params);
  shard.decay_ranges = std::move(decay_ranges);
  return shard;
}

namespace {

// The constants of one update, in the kernel's float arithmetic.
struct AdamWUpdate {
  float keep;         // 1 - lr × weight decay, for decaying elements
  float grad_multiplier;
  float m_weight;     // 1 - beta1
  float beta2, v_weight;  // beta2, 1 - beta2
  float eps;          // eps × sqrt(1 - beta2^t)
  float step_size;    // -lr × sqrt(1 - beta2^t) / (1 - beta1^t)
};

// One pass over [begin, end) of a CPU shard: each element's weight, moments
// and gradient are read once and written once, where the whole-tensor form
// makes seven passes over the shard. Four lanes at a time with SSE (every
// x86-64 has it: GCC does not vectorise sqrt without -fno-math-errno for
// the whole file), the same arithmetic one element at a time elsewhere.
// Hand-written rather than LibTorch's CPU _fused_adamw_ (as fast here):
// that kernel's vector body computes in float and its tail in double, so
// an element's result would depend on where a thread's chunk or a ZeRO
// shard ends, and resuming on another layout would not be bitwise exact.
void update_elements(float* __restrict params, const float* __restrict grads, float* __restrict exp_avg,
                     float* __restrict exp_avg_sq, int64_t begin, int64_t end, bool decays, const AdamWUpdate& u) {
  const float keep = decays ? u.keep : 1.0f;
  int64_t i = begin;
#if defined(__SSE2__)
  const __m128 keep4 = _mm_set1_ps(keep), m_weight = _mm_set1_ps(u.m_weight), beta2 = _mm_set1_ps(u.beta2);
  const __m128 v_weight = _mm_set1_ps(u.v_weight), eps = _mm_set1_ps(u.eps), step_size = _mm_set1_ps(u.step_size);
  const __m128 multiplier = _mm_set1_ps(u.grad_multiplier);
  for (; i + 4 <= end; i += 4) {
    const __m128 g = _mm_mul_ps(_mm_loadu_ps(grads + i), multiplier), m_old = _mm_loadu_ps(exp_avg + i);
    const __m128 m = _mm_add_ps(m_old, _mm_mul_ps(m_weight, _mm_sub_ps(g, m_old)));
    const __m128 v = _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(exp_avg_sq + i), beta2), _mm_mul_ps(_mm_mul_ps(v_weight, g), g));
    _mm_storeu_ps(exp_avg + i, m);
    _mm_storeu_ps(exp_avg_sq + i, v);
    const __m128 update = _mm_div_ps(_mm_mul_ps(step_size, m), _mm_add_ps(_mm_sqrt_ps(v), eps));
    _mm_storeu_ps(params + i, _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(params + i), keep4), update));
  }
#endif
  for (; i < end; ++i) {
    const float g = grads[i] * u.grad_multiplier;
    const float m = exp_avg[i] + u.m_weight * (g - exp_avg[i]);  // lerp, as torch computes it for weight < 0.5
    const float v = exp_avg_sq[i] * u.beta2 + u.v_weight * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    params[i] = params[i] * keep + u.step_size * m / (std::sqrt(v) + u.eps);
  }
}

// The shard cut where decay switches on or off: (end, decays) runs in order.
std::vector<std::pair<int64_t, bool>> decay_runs(const ElementRanges& ranges, int64_t numel) {
  ElementRanges sorted = ranges;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<int64_t, bool>> runs;
  int64_t at = 0;
  for (const auto& [begin, end] : sorted) {
    if (end <= at) continue;
    if (begin > at) runs.emplace_back(begin, false);
    runs.emplace_back(end, true);
    at = end;
  }
  if (at < numel) runs.emplace_back(numel, false);
  return runs;
}

void fused_cpu_step(AdamWShard& shard, const torch::Tensor& grad, const AdamWUpdate& update) {
  RECORD_FUNCTION("meshrun::adamw_step", std::vector<c10::IValue>());
  const torch::Tensor g = grad.contiguous();
  float* params = shard.params.data_ptr<float>();
  const float* grads = g.data_ptr<float>();
  float* exp_avg = shard.exp_avg.data_ptr<float>();
  float* exp_avg_sq = shard.exp_avg_sq.data_ptr<float>();
  int64_t begin = 0;
  for (const auto& [end, decays] : decay_runs(shard.decay_ranges, shard.params.numel())) {
    constexpr int64_t kGrain = 1 << 15;
    at::parallel_for(begin, end, kGrain, [&, decays = decays](int64_t from, int64_t to) {
      update_elements(params, grads, exp_avg, exp_avg_sq, from, to, decays, update);
    });
    begin = end;
  }
}

// The shard's decay runs as the fused kernel's tensor lists: [0] the runs
// without decay, [1] those with. Every list's step is `step_count`.
struct FusedLists {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
};

std::array<FusedLists, 2> fused_lists(AdamWShard& shard, const torch::Tensor& grad, const torch::Tensor& step_count) {
  std::array<FusedLists, 2> lists;
  int64_t begin = 0;
  for (const auto& [end, decays] : decay_runs(shard.decay_ranges, shard.params.numel())) {
    if (end == begin) continue;  // an empty range
    FusedLists& list = lists[decays ? 1 : 0];
    list.params.push_back(shard.params.narrow(0, begin, end - begin));
    list.grads.push_back(grad.narrow(0, begin, end - begin));
    list.exp_avgs.push_back(shard.exp_avg.narrow(0, begin, end - begin));
    list.exp_avg_sqs.push_back(shard.exp_avg_sq.narrow(0, begin, end - begin));
    list.steps.push_back(step_count);
    begin = end;
  }
  return lists;
}

// A device scalar of the shard's, made at its first use (and again when the
// shard moved device).
torch::Tensor& shard_scalar(torch::Tensor& slot, const AdamWShard& shard) {
  if (!slot.defined() || slot.device() != shard.params.device()) slot = torch::empty({}, shard.params.options());
  return slot;
}

// Off the CPU: LibTorch's fused AdamW (one kernel per call over a list of
// tensors), once for the decaying runs of the shard and once for the rest.
// Its per-element arithmetic does not depend on where a run is cut.
void library_step(AdamWShard& shard, const torch::Tensor& grad, const AdamWOptions& options, double lr,
                  std::int64_t step, double grad_multiplier) {
  // Device scalars, refilled per step: fill_ launches a kernel where a new
  // tensor from the host would wait for a copy.
  shard_scalar(shard.step_count, shard).fill_(static_cast<double>(step));
  std::optional<torch::Tensor> grad_scale;
  if (grad_multiplier != 1.0) {
    shard_scalar(shard.grad_divisor, shard).fill_(1.0 / grad_multiplier);
    grad_scale = shard.grad_divisor;
  }
  const auto lists = fused_lists(shard, grad, shard.step_count);
  for (int decays = 0; decays < 2; ++decays) {
    const FusedLists& list = lists[decays];
    if (list.params.empty()) continue;
    at::_fused_adamw_(list.params, list.grads, list.exp_avgs, list.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, list.steps,
                      lr, options.beta1, options.beta2, decays ? options.weight_decay : 0.0, options.eps,
                      /*amsgrad=*/false, /*maximize=*/false, grad_scale, /*found_inf=*/std::nullopt);
  }
}

}  // namespace

namespace train_detail {
void adamw_library_step(AdamWShard& shard, const torch::Tensor& grad, const AdamWOptions& options, double lr,
                        std::int64_t step, double grad_multiplier) {
  torch::NoGradGuard no_grad;
  library_step(shard, grad, options, lr, step, grad_multiplier);
}
void adamw_device_step(AdamWShard& shard, const torch::Tensor& grad, const AdamWOptions& options,
                       const DeviceStepScalars& scalars) {
  torch::NoGradGuard no_grad;
  if (shard.params.device().is_cpu()) {
    // The CPU's own kernel (a read here costs nothing): the host step's
    // arithmetic, so the device path's decisions are testable against it.
    if (scalars.found_inf.item<float>() != 0) return;
    adamw_step(shard, grad, options, scalars.lr.item<double>(), static_cast<std::int64_t>(scalars.step.item<double>()),
               scalars.multiplier.item<double>());
    return;
  }
  const auto lists = fused_lists(shard, grad, scalars.step);
  for (int decays = 0; decays < 2; ++decays) {
    const FusedLists& list = lists[decays];
    if (list.params.empty()) continue;
    at::_fused_adamw_(list.params, list.grads, list.exp_avgs, list.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, list.steps,
                      scalars.lr, options.beta1, options.beta2, decays ? options.weight_decay : 0.0, options.eps,
                      /*amsgrad=*/false, /*maximize=*/false, scalars.grad_divisor, scalars.found_inf);
  }
}

}  // namespace train_detail

void adamw_step(AdamWShard& shard, const torch::Tensor& grad, const AdamWOptions& options, double lr,
                std::int64_t step, double grad_multiplier) {
  if (step < 1) throw std::logic_error("AdamW: steps count from 1, got " + std::to_string(step));
  if (!grad.defined() || !grad.sizes().equals(shard.params.sizes()) || grad.scalar_type() != torch::kFloat32 ||
      grad.device() != shard.params.device())
    throw std::logic_error("AdamW: the gradient must match the shard (" + std::to_string(shard.params.numel()) +
                           " float32 elements on " + shard.params.device().str() + ")");
  if (!std::isfinite(grad_multiplier))
    throw std::logic_error("AdamW: the gradient multiplier must be finite, got " + std::to_string(grad_multiplier));
  torch::NoGradGuard no_grad;
  if (!shard.params.device().is_cpu()) {
    library_step(shard, grad, options, lr, step, grad_multiplier);
    return;
  }
  const double bias_correction1 = 1.0 - std::pow(options.beta1, static_cast<double>(step));
  const double root_correction2 = std::sqrt(1.0 - std::pow(options.beta2, static_cast<double>(step)));
  AdamWUpdate update;
  update.grad_multiplier = static_cast<float>(grad_multiplier);
  update.keep = static_cast<float>(1.0 - lr * options.weight_decay);
  update.m_weight = static_cast<float>(1.0 - options.beta1);
  update.beta2 = static_cast<float>(options.beta2);
  update.v_weight = static_cast<float>(1.0 - options.beta2);
  update.eps = static_cast<float>(options.eps * root_correction2);
  update.step_size = static_cast<float>(-lr * root_correction2 / bias_correction1);
  fused_cpu_step(shard, grad, update);
}

double clip_coefficient(double total_norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(total_norm)) return 1.0;
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

LossScaler::LossScaler(bool enabled, LossScalerOptions options)
    : enabled_(enabled), options_(options), scale_(enabled ? options.initial_scale : 1.0) {
  if (enabled && !(options.initial_scale > 0 && options.growth_factor >= 1 && options.backoff_factor > 0 &&
                   options.backoff_factor < 1 && options.growth_interval >= 1 && options.min_scale > 0))
    throw std::logic_error("loss scaler: scale and growth factor must be positive, backoff in (0, 1)");
}

void LossScaler::update(bool found_non_finite) {
  if (found_non_finite) {
    ++skipped_;
    good_steps_ = 0;
    if (enabled_ && scale_ > options_.min_scale)
      scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    else
      ++skips_without_backoff_;
    return;
  }
  skips_without_backoff_ = 0;
  ++good_steps_;
  if (enabled_ && good_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
}

void LossScaler::restore(double scale, std::int64_t finite_steps_in_a_row, std::int64_t skipped_steps) {
  if (!(scale > 0)) throw CheckpointError("loss scaler: restored scale must be positive");
  scale_ = enabled_ ? scale : 1.0;
  good_steps_ = finite_steps_in_a_row;
  skipped_ = skipped_steps;
  skips_without_backoff_ = 0;
}

void LossScaler::set_state(double scale, std::int64_t finite_steps_in_a_row, std::int64_t skipped_steps,
                           std::int64_t skips_without_backoff_in_a_row) {
  scale_ = enabled_ ? scale : 1.0;
  good_steps_ = finite_steps_in_a_row;
  skipped_ = skipped_steps;
  skips_without_backoff_ = skips_without_backoff_in_a_row;
}

}  // namespace meshrun
