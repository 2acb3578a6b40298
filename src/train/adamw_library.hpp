// The accelerators' AdamW step (LibTorch's _fused_adamw_ over the shard's
// decay runs), callable on any device so that the CPU tests check what
// adamw_step hands that kernel (lists, decay, step count, the gradient's
// divisor) against the hand-written CPU step. adamw_step itself chooses
// by device; nothing else should call this.
#pragma once

#include <cstdint>

#include "meshrun/train/optimizer.hpp"

namespace meshrun::train_detail {

void adamw_library_step(AdamWShard& shard, const torch::Tensor& grad, const AdamWOptions& options, double lr,
                        std::int64_t step, double grad_multiplier);

}  // namespace meshrun::train_detail
