// The training engine's machinery behind include/meshrun/train/train_engine.hpp
// (private to src/train): flat buckets, gradient-ready hooks, ZeRO-3 unit
// gathering, the optimizer step, and state export.
//
// A bucket's buffers, for dp size D, ZeRO stage Z, and its owned range
// [owned_begin, owned_begin + owned_numel) (the whole padded buffer at
// stage 0, this rank's shard from stage 1):
//   params        model dtype, padded; the model's parameters are views.
//                 ZeRO-3: storage exists only between gather and release.
//   grads         model dtype, padded; the parameters' .grad are views, so
//                 autograd accumulates into it in place. ZeRO-3: storage
//                 exists from the unit's backward until its reduction.
//   reduce_input  fp32, padded: grads itself on fp32 models, else a copy
//                 made when the bucket is reduced, freed after the step
//                 (sharded_reduce: after the reduction). None when
//                 upcast_in_chunks (a low-precision bucket no other rank
//                 shares, ZeRO 0-2, not offloaded): its gradient is final
//                 as autograd leaves it, and the step upcasts it a chunk at
//                 a time through EngineCore's grad_chunk_.
//   reduced_grad  fp32, owned range: the dp sum of the gradient (a view of
//                 reduce_input at Z = 0 or when no other rank shares the
//                 bucket below Z = 3, else reduce-scatter's output).
//   reduce_output fp32, owned range, only while a later micro-step's
//                 reduction is in flight: added into reduced_grad.
//   optimizer     fp32 master shard and moments (CPU when offloading); the
//                 master is a view of params when the model is fp32 and
//                 nothing is offloaded (ZeRO-3: of param_shard).
//
// sharded_reduce (reduced_grad is its own shard: ZeRO-1/2 shared with other
// ranks, ZeRO-3): the gradient is reduce-scattered as soon as its bucket is
// ready, and grads and reduce_input lose their storage once the bucket's
// reduction is done, at most kReductionsInFlight buckets at a time. From
// ZeRO-2 (reduces_every_micro_step) that happens at every micro-step, each
// summed into reduced_grad; ZeRO-1 keeps the full gradient across
// micro-steps and reduces at the last. So what outlives a step's backward
// is the fp32 shard alone, not a full gradient in two dtypes (as DeepSpeed
// partitions gradients); the planner counts the same (src/plan/memory.cpp).
#pragma once

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "flat_layout.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/train/train_engine.hpp"

namespace meshrun::train_detail {

struct Bucket {
  // The ranks sharing this bucket's parameters, over which its gradient is
  // reduced and, from ZeRO 1, its state sharded: the replica group, or for
  // a bucket of experts the expert replica group. Null: this rank alone.
  Group* group = nullptr;
  int shard_rank = 0;
  bool experts = false;  // expert parameters (this rank's experts only)
  FlatLayout layout;
  std::vector<int> units;  // ZeRO-3: the units gathered with it (a unit may have two buckets: dense and experts)
  torch::Tensor params;
  torch::Tensor grads;
  torch::Tensor param_shard;  // ZeRO-3: this rank's persistent shard, model dtype
  torch::Tensor reduce_input;
  torch::Tensor reduced_grad;
  torch::Tensor optimizer_grad;  // reduced_grad, or its CPU copy when offloading; upcast_in_chunks: grads
  AdamWShard optimizer;
  torch::Tensor reduce_output;
  bool upcast_in_chunks = false;
  bool sharded_reduce = false;
  bool reduces_every_micro_step = false;
  bool master_aliases_model = false;
  std::int64_t owned_begin = 0;
  std::int64_t owned_numel = 0;
  ElementRanges split_ranges;  // tp-split parameters within the owned range

  // Per backward.
  int pending = 0;
  bool ready = false;
  bool launched = false;
  PendingCollective work;
  bool accumulated = false;  // reduced_grad holds this step's earlier micro-steps
  bool gathered = false;
};

// Reductions of sharded_reduce buckets launched and not yet
// waited for: each holds an fp32 copy of its bucket, so few stay in
// flight (meshrun/plan/plan.hpp, which the planner counts).
inline constexpr std::size_t kReductionsInFlight = kGradientReductionsInFlight;

class EngineCore : public ModelUnitHooks {
 public:
  EngineCore(TrainableModel model, Group* dp, Group* tp, EngineOptions options, ExpertGroups experts = {});
  ~EngineCore() override;

  void backward(const torch::Tensor& loss, bool last_micro_step);
  StepResult step();

  void before_unit(int unit) override;
  torch::Tensor after_unit(int unit, torch::Tensor output) override;

  FullTrainingState gather_full_state(bool with_moments);
  void load_full_state(const FullTrainingState& state);
  void load_full_state(const FullStateSource& source);
  NamedTensors local_state(bool copy);
  void load_local_state(const NamedTensors& state);
  ShardMap shard_map() const;
  std::vector<torch::Tensor> memory() const;

  TrainableModel model;
  EngineOptions options;
  // The host's step count and loss scaler. When the device decides
  // (decides_on_device()), its counters are the truth and these their copy
  // as of the last settle(); everything that reads them (checkpoints, the
  // loss scale, steps_taken) settles first.
  LossScaler scaler;
  std::int64_t steps_taken = 0;

  bool decides_on_device() const { return device_decides_; }
  // Copies the device's counters into steps_taken and scaler (one device
  // sync); nothing when the host decides. A restore that changes them on
  // the host marks the device's stale (counters_uploaded_), and the next
  // step uploads them.
  void settle();
  // The loss scale to multiply a loss by: the host's double, or the
  // device's scalar.
  torch::Tensor scaled_loss(const torch::Tensor& loss);

 private:
  void validate_parameters() const;
  void build_buckets();
  void build_bucket(Bucket& bucket, const std::vector<int>& parameters);
  // Splits each list into its dense and expert parameters (the experts,
  // when there are any, second): their buckets reduce over different groups.
  std::vector<std::vector<int>> apart_from_experts(const std::vector<std::vector<int>>& lists) const;
  void register_gradient_hooks();
  void attach_gradient_views();
  void gradient_ready(int parameter);
  void bucket_ready(int bucket);
  void launch_in_order();
  void launch(Bucket& bucket);
  // Waits for a sharded_reduce bucket's reduction, sums it into
  // reduced_grad and frees the bucket's full-size buffers.
  void finish_reduction(Bucket& bucket);
  void finish_backward(bool last_micro_step);
  void gather(Bucket& bucket);
  void release(Bucket& bucket);
  void before_unit_backward(int unit);
  double global_grad_norm_squared();
  torch::Tensor global_grad_norm_squared_tensor();  // [1] float64 on device_
  StepResult step_on_device();
  void upload_counters();  // the device's counters from steps_taken and scaler
  void refill_lr_window();
  void zero_gradients();
  void refresh_model_from_master();
  torch::Tensor full_flat(Bucket& bucket, const torch::Tensor& owned);
  // Calls update(shard, fp32 gradient) over the bucket's owned range: once
  // with its optimizer and optimizer_grad, or, upcast_in_chunks, once per
  // chunk of upcast_chunk_elements with views of the optimizer's tensors
  // and the chunk's gradient upcast into grad_chunk_.
  void for_each_gradient_chunk(Bucket& bucket, const std::function<void(AdamWShard&, const torch::Tensor&)>& update);

  Group* dp_ = nullptr;
  Group* tp_ = nullptr;
  Group* ep_ = nullptr;              // expert parallel; null without
  Group* expert_replicas_ = nullptr;  // null: no other rank holds this rank's experts
  int ep_size_ = 1;
  int ep_rank_ = 0;
  int dp_size_ = 1;
  int dp_rank_ = 0;
  int tp_size_ = 1;
  int tp_rank_ = 0;
  torch::Device device_{torch::kCPU};
  bool fp32_model_ = true;
  bool hooked_ = false;  // gradient-ready hooks drive the reductions
  std::vector<Bucket> buckets_;  // in backward order
  torch::Tensor grad_chunk_;     // fp32 scratch of the upcast_in_chunks buckets (empty without)
  std::vector<int> bucket_of_parameter_;
  std::vector<std::vector<int>> buckets_of_unit_;  // ZeRO-3; empty: a unit without parameters
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, std::uintptr_t>> accumulator_hooks_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  bool in_backward_ = false;
  bool reducing_ = false;      // this backward reduces buckets (the last micro-step, or any reduces_every_micro_step)
  bool last_micro_step_ = false;
  std::vector<std::size_t> in_flight_;  // indices into buckets_, oldest first
  bool gradients_ready_ = false;  // reduced, waiting for step()
  std::size_t next_launch_ = 0;

  // The device-decided step's state (engine_step.cpp), float64 scalars on
  // device_: steps applied, the loss scale, finite steps in a row, skipped
  // steps, skips in a row the scale could not answer; and the learning
  // rates of steps [lr_window_first_, + kLrWindow), which the step indexes
  // by its applied count.
  bool device_decides_ = false;
  torch::Tensor applied_, scale_, good_steps_, skipped_, skips_in_a_row_;
  torch::Tensor lr_window_;
  std::int64_t lr_window_first_ = -1;
  std::int64_t steps_since_window_ = 0;  // step() calls since the window was filled
  bool counters_uploaded_ = false;
};

// Why a run that keeps skipping steps stops, and where to look
// (engine_step.cpp; also StepResult::read's).
std::string non_finite_gradients_message(std::int64_t skips, double grad_norm, std::int64_t steps_taken,
                                         const LossScaler& scaler, std::int64_t max_skipped_steps);

// "[4, 64]", for error messages.
inline std::string shape_text(c10::IntArrayRef shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace meshrun::train_detail
