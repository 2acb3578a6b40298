// The training engine's optimizer pieces, on flat fp32 buffers: AdamW
// (decoupled weight decay, bias correction, as torch.optim.AdamW), the
// clipping coefficient, and the dynamic loss scaler of fp16 training.
//
// AdamW works on one contiguous shard at a time (a ZeRO shard, or a whole
// gradient bucket), with the gradient's multiplier (clipping, loss-scale and
// dp-mean removal) folded in: on the CPU one pass that reads and writes each
// element once, split among the intra-op threads, with the same arithmetic
// for every element wherever the shard is cut; elsewhere LibTorch's fused
// AdamW kernel (_fused_adamw_), two launches a step. No allocation per step
// either way. Weight decay applies only to `decay_ranges`, the runs of
// elements whose parameter decays (ParameterSpec::decays).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace meshrun {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// [begin, end) element ranges, relative to the start of a shard.
using ElementRanges = std::vector<std::pair<std::int64_t, std::int64_t>>;

// One shard's fp32 master weights and moments. All four tensors are 1-D,
// contiguous, of the same length, dtype float32 and device.
struct AdamWShard {
  torch::Tensor params;      // updated in place (may be a view into a model's flat buffer)
  torch::Tensor exp_avg;     // first moment
  torch::Tensor exp_avg_sq;  // second moment
  ElementRanges decay_ranges;
  // Off the CPU only: the step count and the gradient's divisor as device
  // scalars, as the fused kernel reads them (made at the first step).
  torch::Tensor step_count, grad_divisor;

  // Zero moments for `params`; throws std::logic_error for a tensor that is
  // not 1-D contiguous float32, or a range outside it.
  static AdamWShard for_params(torch::Tensor params, ElementRanges decay_ranges);
};

// One AdamW update with rate `lr` at 1-based step `step`, gradient
// g = grad_multiplier × `grad` (same shape, dtype and device as
// shard.params; finite multiplier). `grad` is a workspace: off the CPU it
// holds g afterwards.
//   p -= lr * wd * p                      (decay_ranges only)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
void adamw_step(AdamWShard& shard, const torch::Tensor& grad, const AdamWOptions& options, double lr,
                std::int64_t step, double grad_multiplier = 1.0);

// The factor that scales gradients of global norm `total_norm` down to
// `max_norm` (torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6),
// capped at 1). max_norm <= 0 disables clipping (1). A non-finite norm gives 1
// (the step is skipped elsewhere).
double clip_coefficient(double total_norm, double max_norm);

struct LossScalerOptions {
  double initial_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 1000;  // finite steps in a row before growing
  double min_scale = 1.0;
};

// Dynamic loss scaling (fp16): the loss is multiplied by scale() before
// backward; a step whose gradients hold inf/nan is skipped and the scale
// backs off; growth_interval finite steps in a row grow it. Disabled, the
// scale stays 1 and update() only counts.
//
// A skip that lowers the scale is the scaler doing its job; one it can no
// longer answer (disabled, or already at min_scale) means the gradients
// are non-finite whatever the scale, so those are counted apart, for the
// engine's stop on a run that cannot recover (EngineOptions::max_skipped_steps).
class LossScaler {
 public:
  explicit LossScaler(bool enabled = false, LossScalerOptions options = {});
  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  // After each step: whether its gradients held inf/nan.
  void update(bool found_non_finite);
  std::int64_t finite_steps_in_a_row() const { return good_steps_; }
  std::int64_t skipped_steps() const { return skipped_; }
  // Skips in a row since the last finite step that could not lower the
  // scale: every skip when disabled, those taken at min_scale when enabled.
  std::int64_t skips_without_backoff_in_a_row() const { return skips_without_backoff_; }
  // For checkpoints (the run of skips starts over).
  void restore(double scale, std::int64_t finite_steps_in_a_row, std::int64_t skipped_steps);
  const LossScalerOptions& options() const { return options_; }
  // The whole state as a device-decided step left it (train_detail's
  // EngineCore mirrors its device counters here).
  void set_state(double scale, std::int64_t finite_steps_in_a_row, std::int64_t skipped_steps,
                 std::int64_t skips_without_backoff_in_a_row);

 private:
  bool enabled_;
  LossScalerOptions options_;
  double scale_;
  std::int64_t good_steps_ = 0;
  std::int64_t skipped_ = 0;
  std::int64_t skips_without_backoff_ = 0;
};

}  // namespace meshrun
