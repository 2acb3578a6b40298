// The optimizer step: global gradient norm over dp and tp shards, loss-scale
// removal and clipping folded into one multiplier, AdamW per bucket shard,
// weights back to the model (engine_core.hpp). Decided by the host (the
// norm read back) or, off the CPU, on the device: the same decisions as
// tensor arithmetic, so that the step waits for nothing (train_engine.hpp).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "adamw_library.hpp"
#include "engine_core.hpp"

namespace meshrun::train_detail {

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

// Squared norm of the dp-summed, loss-scaled gradient of the whole model.
double EngineCore::global_grad_norm_squared() { return global_grad_norm_squared_tensor().item<double>(); }

namespace {

// The norm of a gradient in fp32 arithmetic whatever its dtype, as float64.
// A bf16/fp16 gradient (upcast_in_chunks) is accumulated in fp32 by the
// reduction itself: on a GPU one kernel reads it without an fp32 copy.
torch::Tensor squared_norm(const torch::Tensor& grad) {
  const torch::Tensor norm = grad.scalar_type() == torch::kFloat32
                                 ? grad.norm()
                                 : at::linalg_vector_norm(grad, 2, std::nullopt, false, torch::kFloat32);
  return norm.to(torch::kFloat64).square();
}

}  // namespace

void EngineCore::for_each_gradient_chunk(Bucket& bucket,
                                         const std::function<void(AdamWShard&, const torch::Tensor&)>& update) {
  if (!bucket.upcast_in_chunks) {
    update(bucket.optimizer, bucket.optimizer_grad);
    return;
  }
  AdamWShard& whole = bucket.optimizer;
  // The chunks share the bucket's device scalars (the library step fills
  // them per call) rather than each making its own.
  for (torch::Tensor* scalar : {&whole.step_count, &whole.grad_divisor})
    if (!scalar->defined()) *scalar = torch::empty({}, whole.params.options());
  const std::int64_t numel = whole.params.numel(), chunk = grad_chunk_.numel();
  for (std::int64_t begin = 0; begin < numel; begin += chunk) {
    const std::int64_t length = std::min(chunk, numel - begin), end = begin + length;
    AdamWShard part;
    part.params = whole.params.narrow(0, begin, length);
    part.exp_avg = whole.exp_avg.narrow(0, begin, length);
    part.exp_avg_sq = whole.exp_avg_sq.narrow(0, begin, length);
    part.step_count = whole.step_count;
    part.grad_divisor = whole.grad_divisor;
    for (const auto& [from, to] : whole.decay_ranges)
      if (from < end && to > begin) part.decay_ranges.emplace_back(std::max(from, begin) - begin, std::min(to, end) - begin);
    const torch::Tensor grad = grad_chunk_.narrow(0, 0, length);
    grad.copy_(bucket.optimizer_grad.narrow(0, begin, length));
    update(part, grad);
  }
}

torch::Tensor EngineCore::global_grad_norm_squared_tensor() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> squares, expert_squares;
  squares.reserve(buckets_.size() * 2);
  for (auto& bucket : buckets_) {
    const torch::Tensor& grad = bucket.optimizer_grad;
    torch::Tensor total = squared_norm(grad);
    if (tp_ && !bucket.split_ranges.empty()) {
      // Replicated parameters are the same on every tp rank: each counts
      // 1 / tp of them, so the tp sum counts them once.
      torch::Tensor split = torch::zeros({}, total.options());
      for (const auto& [begin, end] : bucket.split_ranges)
        split += squared_norm(grad.narrow(0, begin, end - begin));
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
  return sum;
}

StepResult EngineCore::step() {
  if (!gradients_ready_)
    throw std::logic_error("training engine: step() needs a backward(loss, last_micro_step = true) first");
  if (device_decides_) return step_on_device();
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
    for_each_gradient_chunk(bucket, [&](AdamWShard& shard, const torch::Tensor& grad) {
      adamw_step(shard, grad, options.adamw, result.lr, steps_taken, multiplier);
    });
  refresh_model_from_master();
  scaler.update(false);
  zero_gradients();
  result.step = steps_taken;
  return result;
}

void EngineCore::zero_gradients() {
  // sharded_reduce buckets released their full gradients after
  // reducing them; their next first reduction overwrites reduced_grad.
  // A bucket reduced whole (ZeRO-0, or one no other rank shares) in a
  // low-precision model keeps its fp32 copy only from its reduction to the
  // step: launch() restores and overwrites it at the next last micro-step,
  // so between steps (rollouts, evaluation, a colocated role's turn) the
  // memory is free.
  for (auto& bucket : buckets_) {
    if (has_storage(bucket.grads)) bucket.grads.zero_();
    bucket.accumulated = false;
    if (!fp32_model_ && !bucket.upcast_in_chunks && !bucket.sharded_reduce) release_storage(bucket.reduce_input);
  }
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

// ---- The step decided on the device -----------------------------------------

namespace {

// Learning rates uploaded at a time: the step reads the host's count (a
// sync) once per this many steps at most.
constexpr std::int64_t kLrWindow = 256;

// [grad_norm, skipped, lr, loss_scale, step, skips in a row]
enum Figure : int { kGradNorm, kSkipped, kLr, kLossScale, kStep, kSkipsInARow, kFigures };

}  // namespace

void EngineCore::upload_counters() {
  if (!device_decides_) return;
  const auto on = torch::TensorOptions().dtype(torch::kFloat64).device(device_);
  const auto scalar = [&](double value) { return torch::full({}, value, on); };
  applied_ = scalar(static_cast<double>(steps_taken));
  scale_ = scalar(scaler.scale());
  good_steps_ = scalar(static_cast<double>(scaler.finite_steps_in_a_row()));
  skipped_ = scalar(static_cast<double>(scaler.skipped_steps()));
  skips_in_a_row_ = scalar(static_cast<double>(scaler.skips_without_backoff_in_a_row()));
  lr_window_first_ = -1;
  counters_uploaded_ = true;
}

void EngineCore::settle() {
  if (!device_decides_ || !counters_uploaded_) return;
  const torch::Tensor host = torch::stack({applied_, scale_, good_steps_, skipped_, skips_in_a_row_}).cpu();
  const double* v = host.const_data_ptr<double>();
  steps_taken = static_cast<std::int64_t>(v[0]);
  scaler.set_state(v[1], static_cast<std::int64_t>(v[2]), static_cast<std::int64_t>(v[3]),
                   static_cast<std::int64_t>(v[4]));
}

torch::Tensor EngineCore::scaled_loss(const torch::Tensor& loss) {
  if (!device_decides_) return loss * scaler.scale();
  if (!counters_uploaded_) upload_counters();
  return loss * scale_;
}

// The rates of steps [steps_taken, + kLrWindow) as the host's schedule
// computes them (the same doubles as the host-decided step's).
void EngineCore::refill_lr_window() {
  settle();
  std::vector<double> rates(kLrWindow);
  for (std::int64_t i = 0; i < kLrWindow; ++i) rates[i] = options.schedule.lr(steps_taken + i);
  lr_window_ = torch::tensor(rates, torch::kFloat64).to(device_);
  lr_window_first_ = steps_taken;
  steps_since_window_ = 0;
}

// The host-decided step's decisions as tensor arithmetic (float64, the
// host's doubles): norm = √Σ / (dp × scale); skipped = the norm is not
// finite; multiplier = clip_coefficient(norm) / (dp × scale); the rate of
// the applied count; AdamW told all four; then the counters and the fp16
// scale as LossScaler::update moves them. Only the window refill and a
// run of skips worth stopping for read the host.
StepResult EngineCore::step_on_device() {
  torch::NoGradGuard no_grad;
  if (!counters_uploaded_) upload_counters();
  if (lr_window_first_ < 0 || steps_since_window_ + 1 >= kLrWindow) {
    refill_lr_window();  // settles: the host's count is current here
    const std::int64_t skips = scaler.skips_without_backoff_in_a_row();
    if (options.max_skipped_steps > 0 && skips >= options.max_skipped_steps)
      throw NonFiniteGradientsError(non_finite_gradients_message(skips, NAN, steps_taken, scaler,
                                                                 options.max_skipped_steps));
  }
  ++steps_since_window_;
  const torch::Tensor scale_used = scale_.clone();
  const torch::Tensor divisor = scale_ * static_cast<double>(dp_size_);
  const torch::Tensor norm = (global_grad_norm_squared_tensor().reshape({}).sqrt() / divisor);
  const torch::Tensor finite = torch::isfinite(norm);
  const torch::Tensor found_bool = finite.logical_not();
  const torch::Tensor found = found_bool.to(torch::kFloat64);
  torch::Tensor coefficient = torch::ones({}, norm.options());
  if (options.max_norm > 0)
    // full_like: a double over a tensor is a reciprocal times it in
    // LibTorch, not the host's division.
    coefficient = torch::where(finite, (torch::full_like(norm, options.max_norm) / (norm + 1e-6)).clamp_max(1.0),
                               coefficient);
  // The fused kernel divides the gradient by this (multiplier = 1 / it).
  const torch::Tensor grad_divisor = divisor / coefficient;
  const torch::Tensor index = (applied_ - static_cast<double>(lr_window_first_)).clamp(0, kLrWindow - 1).to(torch::kLong);
  const torch::Tensor lr = lr_window_.index_select(0, index.reshape({1})).reshape({});
  DeviceStepScalars scalars;
  scalars.lr = lr.to(torch::kFloat32).reshape({1});
  scalars.step = (applied_ + 1).to(torch::kFloat32);
  scalars.grad_divisor = grad_divisor.to(torch::kFloat32);
  scalars.found_inf = found.to(torch::kFloat32).reshape({1});
  if (device_.is_cpu()) {
    // adamw_device_step's CPU form reads these: give it the host step's
    // exact double figures.
    scalars.lr = lr;
    scalars.step = applied_ + 1;
    scalars.multiplier = coefficient / divisor;
  }
  for (auto& bucket : buckets_)
    for_each_gradient_chunk(bucket, [&](AdamWShard& shard, const torch::Tensor& grad) {
      adamw_device_step(shard, grad, options.adamw, scalars);
    });
  // A skipped step left the master weights as they were: refreshing the
  // model from them changes nothing.
  refresh_model_from_master();
  zero_gradients();

  // LossScaler::update, on the device.
  applied_ += 1 - found;
  skipped_ += found;
  const LossScalerOptions& o = scaler.options();
  if (scaler.enabled()) {
    const torch::Tensor backs_off = found_bool.logical_and(scale_ > o.min_scale);
    skips_in_a_row_ = torch::where(found_bool, torch::where(backs_off, skips_in_a_row_, skips_in_a_row_ + 1),
                                   torch::zeros_like(skips_in_a_row_));
    scale_ = torch::where(backs_off, (scale_ * o.backoff_factor).clamp_min(o.min_scale), scale_);
    good_steps_ = torch::where(found_bool, torch::zeros_like(good_steps_), good_steps_ + 1);
    const torch::Tensor grows = good_steps_ >= static_cast<double>(o.growth_interval);
    scale_ = torch::where(grows, scale_ * o.growth_factor, scale_);
    good_steps_ = torch::where(grows, torch::zeros_like(good_steps_), good_steps_);
  } else {
    skips_in_a_row_ = torch::where(found_bool, skips_in_a_row_ + 1, torch::zeros_like(skips_in_a_row_));
    good_steps_ = torch::where(found_bool, torch::zeros_like(good_steps_), good_steps_ + 1);
  }
  StepResult result;
  result.figures = torch::stack({norm, found, lr, scale_used, applied_.clone(), skips_in_a_row_.clone()});
  result.scaler_enabled = scaler.enabled();
  result.max_skipped_steps = options.max_skipped_steps;
  return result;
}

}  // namespace meshrun::train_detail

namespace meshrun {

const StepResult& StepResult::read() {
  using namespace train_detail;
  if (!figures.defined()) return *this;
  const torch::Tensor host = figures.to(torch::kCPU, torch::kFloat64).contiguous();
  figures = torch::Tensor();
  const double* v = host.const_data_ptr<double>();
  grad_norm = v[kGradNorm];
  skipped = v[kSkipped] != 0;
  lr = v[kLr];
  loss_scale = v[kLossScale];
  step = static_cast<std::int64_t>(v[kStep]);
  const auto skips = static_cast<std::int64_t>(v[kSkipsInARow]);
  if (max_skipped_steps > 0 && skips >= max_skipped_steps) {
    LossScaler described(scaler_enabled);
    described.set_state(loss_scale, 0, 0, skips);
    throw NonFiniteGradientsError(
        non_finite_gradients_message(skips, grad_norm, step, described, max_skipped_steps));
  }
  return *this;
}

}  // namespace meshrun
