// Backward: gradient-ready hooks launch bucket reductions in a fixed order
// while autograd goes on; ZeRO-3 gathers each unit before its forward and
// its backward and releases it after (engine_core.hpp).
#include <stdexcept>

#include "engine_core.hpp"

namespace meshrun::train_detail {

void EngineCore::backward(const torch::Tensor& loss, bool last_micro_step) {
  if (!loss.defined() || loss.numel() != 1)
    throw std::logic_error("training engine: backward needs a scalar loss");
  if (!loss.requires_grad())
    throw std::logic_error("training engine: the loss does not require grad (computed under no_grad or eval?)");
  if (gradients_ready_)
    throw std::logic_error("training engine: backward after the last micro-step without step() in between");
  attach_gradient_views();
  last_micro_step_ = last_micro_step;
  reducing_ = last_micro_step;
  for (auto& bucket : buckets_) {
    bucket.pending = static_cast<int>(bucket.layout.entries.size());
    bucket.ready = false;
    bucket.launched = false;
    reducing_ = reducing_ || bucket.reduces_every_micro_step;
    // ZeRO-1/2 freed the gradient after the last reduction; autograd
    // accumulates into it again (ZeRO-3 restores it unit by unit).
    if (options.zero_stage != 3 && !has_storage(bucket.grads)) {
      torch::NoGradGuard no_grad;
      restore_storage(bucket.grads);
      bucket.grads.zero_();
    }
  }
  next_launch_ = 0;
  in_flight_.clear();
  in_backward_ = true;
  try {
    if (scaler.enabled())
      scaled_loss(loss).backward();
    else
      loss.backward();
  } catch (...) {
    in_backward_ = false;
    for (auto& bucket : buckets_) bucket.work.wait();
    in_flight_.clear();
    throw;
  }
  in_backward_ = false;
  finish_backward(last_micro_step);
}

void EngineCore::gradient_ready(int parameter) {
  if (!in_backward_) return;
  const int b = bucket_of_parameter_[parameter];
  if (--buckets_[b].pending == 0) bucket_ready(b);
}

void EngineCore::bucket_ready(int b) {
  auto& bucket = buckets_[b];
  bucket.ready = true;
  // Every use of the unit's parameters has finished its backward.
  if (options.zero_stage == 3) release(bucket);
  if (reducing_) launch_in_order();
}

// Buckets become ready in the same order on every rank, but launching them
// strictly in index order makes the collective sequence identical even if
// autograd reorders independent branches.
void EngineCore::launch_in_order() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready) launch(buckets_[next_launch_++]);
}

void EngineCore::launch(Bucket& bucket) {
  torch::NoGradGuard no_grad;
  if (options.zero_stage == 3 && !has_storage(bucket.grads)) {
    // No gradient reached this bucket (unused parameters): it is zero.
    restore_storage(bucket.grads);
    bucket.grads.zero_();
  }
  if (bucket.upcast_in_chunks || (!last_micro_step_ && !bucket.reduces_every_micro_step)) {
    // Nothing to reduce or copy: the step reads the gradient where it is,
    // or later micro-steps accumulate more into it first.
    bucket.launched = true;
    return;
  }
  if (bucket.sharded_reduce) {
    // The oldest reduction ends before this bucket's fp32 copy exists: at
    // most kReductionsInFlight copies at a time (what the planner counts).
    while (in_flight_.size() >= kReductionsInFlight) {
      finish_reduction(buckets_[in_flight_.front()]);
      in_flight_.erase(in_flight_.begin());
    }
  }
  if (!fp32_model_) {
    restore_storage(bucket.reduce_input);
    bucket.reduce_input.copy_(bucket.grads);
  }
  if (bucket.sharded_reduce) {
    torch::Tensor target = bucket.reduced_grad;
    if (bucket.accumulated) {
      restore_storage(bucket.reduce_output);
      target = bucket.reduce_output;
    }
    if (bucket.group)
      bucket.work = bucket.group->reduce_scatter_async(bucket.reduce_input, target);
    else
      target.copy_(bucket.reduce_input.narrow(0, bucket.owned_begin, bucket.owned_numel));
    // Its copy in reduce_input is what the reduction reads.
    if (!fp32_model_) release_storage(bucket.grads);
    bucket.launched = true;
    in_flight_.push_back(static_cast<std::size_t>(&bucket - buckets_.data()));
    return;
  }
  // reduced_grad is a view of reduce_input: reduced in place.
  if (bucket.group) bucket.work = bucket.group->all_reduce_async(bucket.reduce_input);
  bucket.launched = true;
}

void EngineCore::finish_reduction(Bucket& bucket) {
  bucket.work.wait();
  torch::NoGradGuard no_grad;
  if (bucket.accumulated) {
    bucket.reduced_grad.add_(bucket.reduce_output);
    release_storage(bucket.reduce_output);
  }
  bucket.accumulated = true;
  // The reduced shard is all that is kept of the gradient (on fp32 models
  // reduce_input is grads).
  release_storage(bucket.reduce_input);
}

void EngineCore::finish_backward(bool last_micro_step) {
  if (reducing_) {
    // Buckets no gradient reached (unused parameters) are reduced too.
    for (auto& bucket : buckets_) bucket.ready = true;
    launch_in_order();
    // Every sharded_reduce bucket is launched now: those not yet folded in
    // are the ones in flight.
    for (const std::size_t b : in_flight_) finish_reduction(buckets_[b]);
    in_flight_.clear();
    for (auto& bucket : buckets_) bucket.work.wait();  // the in-place all-reduces (a second wait does nothing)
  }
  if (last_micro_step) gradients_ready_ = true;
  if (options.zero_stage == 3)
    for (auto& bucket : buckets_) release(bucket);
}

void EngineCore::gather(Bucket& bucket) {
  if (bucket.gathered) return;
  gather_into(bucket.group, bucket.params, bucket.param_shard);
  bucket.gathered = true;
}

void EngineCore::release(Bucket& bucket) {
  if (!bucket.gathered) return;
  release_storage(bucket.params);
  bucket.gathered = false;
}

void EngineCore::before_unit(int unit) {
  if (options.zero_stage != 3 || unit < 0 || static_cast<size_t>(unit) >= buckets_of_unit_.size()) return;
  for (const int b : buckets_of_unit_[unit]) gather(buckets_[b]);
}

torch::Tensor EngineCore::after_unit(int unit, torch::Tensor output) {
  if (options.zero_stage != 3 || unit < 0 || static_cast<size_t>(unit) >= buckets_of_unit_.size()) return output;
  // A checkpointed unit recomputing inside backward keeps its parameters
  // until its gradients are complete (bucket_ready releases them).
  if (buckets_of_unit_[unit].empty() || in_backward_) return output;
  if (output.requires_grad() && torch::GradMode::is_enabled()) {
    output.register_hook([this, unit, alive = std::weak_ptr<bool>(alive_)](const torch::Tensor& grad) {
      if (auto still = alive.lock(); still && *still) before_unit_backward(unit);
      return grad;
    });
  }
  for (const int b : buckets_of_unit_[unit]) release(buckets_[b]);
  return output;
}

void EngineCore::before_unit_backward(int unit) {
  for (const int b : buckets_of_unit_[unit]) {
    auto& bucket = buckets_[b];
    gather(bucket);
    if (!has_storage(bucket.grads)) {
      torch::NoGradGuard no_grad;
      restore_storage(bucket.grads);
      bucket.grads.zero_();
    }
  }
}

}  // namespace meshrun::train_detail
