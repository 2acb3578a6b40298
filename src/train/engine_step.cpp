// The optimizer step: global gradient norm over dp and tp shards, loss-scale
// removal and clipping folded into one multiplier, AdamW per bucket shard,
// weights back to the model (engine_core.hpp).
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "engine_core.hpp"

namespace meshrun::train_detail {

namespace {

// Why a run that keeps skipping steps stops, and where to look.
std::string non_finite_gradients_message(std::int64_t skips, double grad_norm, std::int64_t steps_taken,
                                         const LossScaler& scaler, std::int64_t max_skipped_steps) {
  const std::string norm = std::isnan(grad_norm) ? "nan" : "inf";  // a norm is never -inf
  const std::string scale =
      scaler.enabled() ? fmt::format(", at the fp16 loss scale's minimum {:g}", scaler.scale()) : std::string();
  return fmt::format(
      "the gradients were non-finite in {} optimizer steps in a row (last grad norm {}{}), each skipped without an "
      "update; stopped after optimizer step {} by train.max_skipped_steps = {} (-1 never stops). Check the learning "
      "rate (weights that blew up), the rewards (ppo.reward_clip, dpo.beta) and the data for inf/nan",
      skips, norm, scale, steps_taken, max_skipped_steps);
}

}  // namespace

// Squared norm of the dp-summed, loss-scaled gradient of the whole model.
double EngineCore::global_grad_norm_squared() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> squares, expert_squares;
  squares.reserve(buckets_.size() * 2);
  for (auto& bucket : buckets_) {
    const torch::Tensor& grad = bucket.optimizer_grad;
    torch::Tensor total = grad.norm().to(torch::kFloat64).square();
    if (tp_ && !bucket.split_ranges.empty()) {
      // Replicated parameters are the same on every tp rank: each counts
      // 1 / tp of them, so the tp sum counts them once.
      torch::Tensor split = torch::zeros({}, total.options());
      for (const auto& [begin, end] : bucket.split_ranges)
        split += grad.narrow(0, begin, end - begin).norm().to(torch::kFloat64).square();
      total = split + (total - split) / tp_size_;
    } else if (tp_) {
      total = total / tp_size_;
    }
    (bucket.experts ? expert_squares : squares).push_back(total);
  }
  const auto summed = [&](const std::vector<torch::Tensor>& parts) {
    if (parts.empty()) return torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
    return (parts.size() == 1 ? parts.front() : torch::stack(parts).sum()).reshape({1}).to(device_);
  };
  torch::Tensor sum = summed(squares);
  if (dp_ && options.zero_stage >= 1) dp_->all_reduce(sum);
  if (ep_) {
    // Each ep rank's experts are its own: summed over the ep group once
    // their replicas' shards are.
    torch::Tensor experts = summed(expert_squares);
    if (expert_replicas_ && options.zero_stage >= 1) expert_replicas_->all_reduce(experts);
    ep_->all_reduce(experts);
    sum += experts;
  }
  if (tp_) tp_->all_reduce(sum);
  return sum.item<double>();
}

StepResult EngineCore::step() {
  if (!gradients_ready_)
    throw std::logic_error("training engine: step() needs a backward(loss, last_micro_step = true) first");
  torch::NoGradGuard no_grad;
  if (options.offload)
    for (auto& bucket : buckets_) bucket.optimizer_grad.copy_(bucket.reduced_grad);

  StepResult result;
  result.loss_scale = scaler.scale();
  result.lr = options.schedule.lr(steps_taken);
  const double divisor = static_cast<double>(dp_size_) * scaler.scale();
  result.grad_norm = std::sqrt(global_grad_norm_squared()) / divisor;
  if (!std::isfinite(result.grad_norm)) {
    result.skipped = true;
    scaler.update(true);
    zero_gradients();
    result.step = steps_taken;
    // Every rank has the same all-reduced norm and scaler, so all stop here
    // together and none is left waiting in a collective.
    const std::int64_t skips = scaler.skips_without_backoff_in_a_row();
    if (options.max_skipped_steps > 0 && skips >= options.max_skipped_steps)
      throw NonFiniteGradientsError(
          non_finite_gradients_message(skips, result.grad_norm, steps_taken, scaler, options.max_skipped_steps));
    return result;
  }
  const double multiplier = clip_coefficient(result.grad_norm, options.max_norm) / divisor;
  ++steps_taken;
  // An expert's reduced gradient already sums the ep group's tokens (the
  // all-to-all brought them) over dp / ep of the replicas: divided like
  // every other by the whole dp × sp, it is their mean.
  for (auto& bucket : buckets_)
    adamw_step(bucket.optimizer, bucket.optimizer_grad, options.adamw, result.lr, steps_taken, multiplier);
  refresh_model_from_master();
  scaler.update(false);
  zero_gradients();
  result.step = steps_taken;
  return result;
}

void EngineCore::zero_gradients() {
  // ZeRO-3 released its full gradients after reducing them.
  if (options.zero_stage != 3)
    for (auto& bucket : buckets_) bucket.grads.zero_();
  gradients_ready_ = false;
}

// Copies the master shards into the model's weights and, at ZeRO 1/2,
// all-gathers the shards so every rank holds the whole model again.
void EngineCore::refresh_model_from_master() {
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets_) {
    if (bucket.master_aliases_model) continue;
    torch::Tensor target = options.zero_stage == 3 ? bucket.param_shard
                                                   : bucket.params.narrow(0, bucket.owned_begin, bucket.owned_numel);
    target.copy_(bucket.optimizer.params);
  }
  if (options.zero_stage == 0 || options.zero_stage == 3) return;
  for (auto& bucket : buckets_) {
    if (!bucket.group) continue;
    torch::Tensor owned = bucket.params.narrow(0, bucket.owned_begin, bucket.owned_numel);
    bucket.work = bucket.group->all_gather_into_tensor_async(bucket.params, owned);
  }
  for (auto& bucket : buckets_) bucket.work.wait();
}

}  // namespace meshrun::train_detail
