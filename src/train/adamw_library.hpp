// The accelerators' AdamW step (LibTorch's _fused_adamw_ over the shard's
// decay runs), callable on any device so that the CPU tests check what
// adamw_step hands that kernel (lists, decay, step count, the gradient's
// divisor) against the hand-written CPU step. adamw_step itself chooses
// by device; nothing else should call this. And the device-decided step
// (its figures as device tensors) the engine runs off the CPU.
#pragma once

#include <cstdint>

#include "meshrun/train/optimizer.hpp"

namespace meshrun::train_detail {

void adamw_library_step(AdamWShard& shard, const torch::Tensor& grad, const AdamWOptions& options, double lr,
                        std::int64_t step, double grad_multiplier);

// A step decided on the device (engine_step.cpp): every figure a float32
// device scalar of the shard's device, read by the kernel, never by the
// host. `step` is the 1-based step the update would be; `grad_divisor` the
// gradient's divisor (loss scale × dp over the clipping factor); a nonzero
// `found_inf` leaves everything as it was.
struct DeviceStepScalars {
  torch::Tensor lr, step, grad_divisor, found_inf;
  torch::Tensor multiplier;  // the CPU form's: the gradient's multiplier (float64)
};
// On the CPU the same decision runs through adamw_step (the values read;
// lr, step and multiplier float64 there).
void adamw_device_step(AdamWShard& shard, const torch::Tensor& grad, const AdamWOptions& options,
                       const DeviceStepScalars& scalars);

}  // namespace meshrun::train_detail
