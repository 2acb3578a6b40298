// AdamW on flat fp32 shards (include/meshrun/optimizer.hpp).
#include "meshrun/optimizer.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace meshrun {

AdamWShard AdamWShard::for_params(torch::Tensor params, ElementRanges decay_ranges) {
  if (!params.defined() || params.dim() != 1 || !params.is_contiguous() || params.scalar_type() != torch::kFloat32)
    throw std::invalid_argument("AdamW shard: parameters must be a 1-D contiguous float32 tensor");
  for (const auto& [begin, end] : decay_ranges)
    if (begin < 0 || end < begin || end > params.numel())
      throw std::invalid_argument("AdamW shard: decay range [" + std::to_string(begin) + ", " + std::to_string(end) +
                                  ") outside a shard of " + std::to_string(params.numel()) + " elements");
  AdamWShard shard;
  shard.exp_avg = torch::zeros_like(params);
  shard.exp_avg_sq = torch::zeros_like(params);
  shard.scratch = torch::empty_like(params);
  shard.params = std::move(params);
  shard.decay_ranges = std::move(decay_ranges);
  return shard;
}

void adamw_step(AdamWShard& shard, const torch::Tensor& grad, const AdamWOptions& options, double lr,
                std::int64_t step) {
  if (step < 1) throw std::invalid_argument("AdamW: steps count from 1, got " + std::to_string(step));
  if (!grad.defined() || !grad.sizes().equals(shard.params.sizes()) || grad.scalar_type() != torch::kFloat32 ||
      grad.device() != shard.params.device())
    throw std::invalid_argument("AdamW: the gradient must match the shard (" + std::to_string(shard.params.numel()) +
                                " float32 elements on " + shard.params.device().str() + ")");
  torch::NoGradGuard no_grad;
  if (options.weight_decay != 0 && lr != 0) {
    const double keep = 1.0 - lr * options.weight_decay;
    if (shard.decay_ranges.size() == 1 && shard.decay_ranges[0].first == 0 &&
        shard.decay_ranges[0].second == shard.params.numel()) {
      shard.params.mul_(keep);
    } else {
      for (const auto& [begin, end] : shard.decay_ranges) shard.params.narrow(0, begin, end - begin).mul_(keep);
    }
  }
  const double bias_correction1 = 1.0 - std::pow(options.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(options.beta2, static_cast<double>(step));
  shard.exp_avg.lerp_(grad, 1.0 - options.beta1);
  shard.exp_avg_sq.mul_(options.beta2).addcmul_(grad, grad, 1.0 - options.beta2);
  // m / (sqrt(v) / s + eps) == s * m / (sqrt(v) + eps * s) with s = sqrt(bc2):
  // one pass fewer than torch's form.
  const double root_correction2 = std::sqrt(bias_correction2);
  at::sqrt_out(shard.scratch, shard.exp_avg_sq);
  shard.scratch.add_(options.eps * root_correction2);
  shard.params.addcdiv_(shard.exp_avg, shard.scratch, -lr * root_correction2 / bias_correction1);
}

double clip_coefficient(double total_norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(total_norm)) return 1.0;
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

LossScaler::LossScaler(bool enabled, LossScalerOptions options)
    : enabled_(enabled), options_(options), scale_(enabled ? options.initial_scale : 1.0) {
  if (enabled && !(options.initial_scale > 0 && options.growth_factor >= 1 && options.backoff_factor > 0 &&
                   options.backoff_factor < 1 && options.growth_interval >= 1 && options.min_scale > 0))
    throw std::invalid_argument("loss scaler: scale and growth factor must be positive, backoff in (0, 1)");
}

void LossScaler::update(bool found_non_finite) {
  if (found_non_finite) {
    ++skipped_;
    good_steps_ = 0;
    if (enabled_) scale_ = std::max(options_.min_scale, scale_ * options_.backoff_factor);
    return;
  }
  ++good_steps_;
  if (enabled_ && good_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
}

void LossScaler::restore(double scale, std::int64_t finite_steps_in_a_row, std::int64_t skipped_steps) {
  if (!(scale > 0)) throw std::invalid_argument("loss scaler: restored scale must be positive");
  scale_ = enabled_ ? scale : 1.0;
  good_steps_ = finite_steps_in_a_row;
  skipped_ = skipped_steps;
}

}  // namespace meshrun
