// TrainEngine: the parallel training step of one role's model: data
// parallelism with gradient buckets overlapped with backward, ZeRO stages
// 1-3 over the data-parallel group, tensor parallelism (a model whose split
// parameters are local shards), bf16/fp16/fp32 with fp32 master weights,
// AdamW, clipping by the true global norm, learning-rate schedules, and
// optimizer offload to CPU memory.
//
// Use (one optimizer step of `accumulation` micro-batches):
//   TrainEngine engine(model, mesh, EngineOptions::from_plan(*plan.role(Role::actor), total_steps));
//   for (int micro = 0; micro < accumulation; ++micro) {
//     torch::Tensor logits = engine.forward(inputs[micro]);
//     torch::Tensor loss = ... / accumulation;   // the caller scales by 1/accumulation
//     engine.backward(loss, micro + 1 == accumulation);
//   }
//   StepResult result = engine.step();           // {grad_norm, lr, skipped, ...}
//
// Invariants and contracts:
// - Gradients are averaged over the dp group: pass this rank's mean loss of
//   its micro-batch divided by the number of micro-steps, and the update
//   equals that of one process on the global batch (equal batch sizes per
//   rank). Reductions run only on the last micro-step (the others
//   accumulate locally), always in fp32.
// - Always call engine.backward(), never loss.backward(): it applies the
//   fp16 loss scale, tells ZeRO-3 that backward runs, and finishes the
//   bucket reductions before returning.
// - The model's parameters become views into the engine's flat buffers
//   (one per bucket, padded to a multiple of dp). Under ZeRO-3 they only hold
//   values inside forward/backward (each unit is gathered before it runs and
//   released after); read weights with gather_full_parameters().
// - Every function that talks to other ranks (construction, backward with
//   last_micro_step, step, gather_*, load_*) must be called by every member
//   of the dp and tp groups in the same order.
// - Expert parallelism (ExpertGroups): the experts a rank holds are its
//   own; their gradients sum over the ep group's tokens through the model's
//   all-to-all and are reduced over the expert replicas, scaled so that the
//   update equals the one without ep. Full states hold every expert.
// - grad_norm is the norm of the whole model's gradient (every dp shard and
//   tp shard, replicated tp parameters counted once), before clipping and
//   after loss-scale removal. A step whose norm is not finite changes no
//   weight: skipped = true (fp16 also lowers its loss scale). After
//   max_skipped_steps such steps in a row that the loss scale could not
//   answer, step() throws NonFiniteGradientsError, on every rank at once
//   (they all see the same all-reduced norm).
// - Off the CPU the step reads nothing back (EngineOptions::device_decides):
//   the norm, the clipping multiplier, the finite check, the skip, the
//   step count, the learning rate and the fp16 loss scale are device
//   tensors, AdamW takes them as such, and StepResult holds them until
//   read() (one copy to the host, the caller's at its logging cadence).
//   The NonFiniteGradientsError of a run of skips is then thrown by the
//   read() that sees it, or by the step that needs the host's count (every
//   256 steps at most, for the learning-rate window), on every rank alike.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "meshrun/error.hpp"
#include "meshrun/train/lr_schedule.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/train/optimizer.hpp"
#include "meshrun/ckpt/shard_map.hpp"

namespace meshrun {

class Group;
class DeviceMesh;
struct RolePlan;

torch::Dtype torch_dtype_of(Precision precision);
// "bf16" | "fp16" | "fp32" (a name given outside a recipe, where the schema
// has not checked it); throws ConfigError otherwise.
torch::Dtype dtype_from_recipe_name(const std::string& name);

struct EngineOptions {
  int zero_stage = 0;                    // 0..3
  torch::Dtype dtype = torch::kFloat32;  // the model's parameter dtype
  AdamWOptions adamw;
  LrSchedule schedule;
  double max_norm = 1.0;  // <= 0: no clipping
  bool gradient_checkpointing = false;
  bool offload = false;  // optimizer states and master weights in CPU memory
  double bucket_mb = 25;  // dp gradient buckets (stages 0-2; ZeRO-3 buckets are units)
  LossScalerOptions loss_scaler;  // fp16 only
  // Skipped steps in a row (non-finite gradients the loss scale cannot back
  // off from any more: LossScaler::skips_without_backoff_in_a_row) at which
  // step() throws; -1: never.
  std::int64_t max_skipped_steps = 10;
  // Whether step() decides on the device (no host read; see above). Unset:
  // off the CPU only (on the CPU a read costs nothing and the host's
  // arithmetic is what the bitwise tests pin); set: either way (tests run
  // the device path on the CPU).
  std::optional<bool> device_decides;
  // A bf16/fp16 bucket that no other rank shares (nothing to reduce) and
  // whose states stay on the device keeps no fp32 copy of its gradient:
  // the step reads the gradient a chunk of this many elements at a time
  // through one fp32 scratch buffer, so such a model holds 16 bytes a
  // parameter (weights, gradients, fp32 masters and moments), not 20.
  std::int64_t upcast_chunk_elements = std::int64_t{1} << 25;

  // From a trained role's resolved plan (zero_stage, dtype, offload,
  // gradient_checkpointing and its optimizer: learning rate and schedule,
  // AdamW's settings, max_norm, bucket_mb, max_skipped_steps) and the number
  // of optimizer steps of the run. Throws ConfigError on a bad value (naming
  // the recipe key where it is known).
  static EngineOptions from_plan(const RolePlan& role, std::int64_t total_steps);
};

// A run whose gradients stay non-finite: skipping steps for ever would burn
// the budget and exit as if it had trained (DeepSpeed stops at the minimum
// fp16 loss scale, Megatron on NaN).
class NonFiniteGradientsError : public KindError<ErrorKind::model> {
 public:
  using KindError::KindError;
};

struct StepResult {
  double grad_norm = 0;  // before clipping
  double lr = 0;         // the rate this step used (or would have used, when skipped)
  bool skipped = false;  // non-finite gradients: no update
  double loss_scale = 1;  // the fp16 scale in force for this step's backward
  std::int64_t step = 0;  // optimizer steps taken so far (skipped ones excluded)

  // A step decided on the device: the figures above as a device tensor,
  // until read() fills them (a device sync). Throws NonFiniteGradientsError
  // when they show the run of skips that stops the run. A host-decided
  // result is read already (read() does nothing).
  const StepResult& read();
  bool pending() const { return figures.defined(); }
  torch::Tensor figures = {};          // [grad_norm, skipped, lr, loss_scale, step, skips in a row], float64
  bool scaler_enabled = false;         // for the message of a stopped run
  std::int64_t max_skipped_steps = -1;
};

// What the engine needs of a model. LlamaModel provides it (of()); any
// torch module that follows model.hpp's contract (Hugging Face-style names,
// ParameterSpecs in unit order, unit hooks around each unit) can too.
struct TrainableModel {
  std::shared_ptr<torch::nn::Module> module;
  std::vector<ParameterSpec> specs;
  std::vector<torch::Tensor> parameters;  // specs[i]'s local tensor
  int num_units = 1;
  // Units whose parameters are used together (tied embeddings): ZeRO-3
  // gathers them as one; empty: every unit alone. from_module() fills it
  // from ParameterSpec::also_used_by_unit.
  std::vector<std::vector<int>> shared_units;
  std::function<void(ModelUnitHooks*)> set_unit_hooks;
  std::function<void(bool)> set_gradient_checkpointing;

  static TrainableModel of(const LlamaModel& model);
  // Looks every trainable spec up in module's named_parameters() (specs
  // with trainable false, a LoRA run's frozen base, are left out); throws
  // std::logic_error naming a spec without parameter or vice versa.
  static TrainableModel from_module(std::shared_ptr<torch::nn::Module> module, std::vector<ParameterSpec> specs,
                                    int num_units);
};

// Full (unsharded, untied over tp) fp32 tensors by parameter name, on CPU.
using NamedTensors = std::map<std::string, torch::Tensor>;

// Everything needed to continue training under another dp/tp/ZeRO layout.
struct FullTrainingState {
  NamedTensors parameters;  // fp32 master weights
  NamedTensors exp_avg;
  NamedTensors exp_avg_sq;
  std::int64_t step = 0;
  double loss_scale = 1;
};

// Which tensor of a full state: the fp32 master weights or a moment.
enum class StatePart { parameters, exp_avg, exp_avg_sq };

// A full training state read one parameter at a time, so that loading one
// never holds more than a parameter's full tensor beside the engine (a
// checkpoint being resharded: meshrun/train/checkpoint_state.hpp). Every tensor
// is fp32 at its full (unsplit) shape, on CPU.
class FullStateSource {
 public:
  virtual ~FullStateSource() = default;
  virtual std::int64_t step() const = 0;
  virtual double loss_scale() const = 0;
  virtual bool has_moments() const = 0;
  // Throws (CheckpointError or the source's own error) when `name` is
  // missing.
  virtual torch::Tensor tensor(StatePart part, const std::string& name) const = 0;
};

// Expert parallelism's groups (DeviceMesh::expert_parallel_group and
// expert_replica_group): an expert's parameters live on one rank of
// `parallel` and are replicated over `replica`, over which their gradients
// are reduced and ZeRO-sharded; the other parameters keep the dp group.
// Null (or groups of one): no expert parallelism.
struct ExpertGroups {
  Group* parallel = nullptr;
  Group* replica = nullptr;
};

namespace train_detail {
class EngineCore;
}

class TrainEngine {
 public:
  // dp / tp null: a group of one. The model's parameters must be
  // identical across dp ranks after construction (they are broadcast from
  // dp rank 0 to make sure) and on options.dtype.
  TrainEngine(LlamaModel model, DeviceMesh& mesh, EngineOptions options);
  TrainEngine(LlamaModel model, Group* dp, Group* tp, EngineOptions options, ExpertGroups experts = {});
  TrainEngine(TrainableModel model, Group* dp, Group* tp, EngineOptions options, ExpertGroups experts = {});
  ~TrainEngine();
  TrainEngine(const TrainEngine&) = delete;
  TrainEngine& operator=(const TrainEngine&) = delete;

  // The LlamaModel's forward (only for engines built from a LlamaModel).
  torch::Tensor forward(const ModelInputs& inputs);
  // Its forward_log_probs (the LM head fused with the log-probs).
  HeadOutputs forward_log_probs(const ModelInputs& inputs, const torch::Tensor& labels,
                                const FusedHeadOptions& options = {}, int64_t first_column = 0);
  torch::Tensor forward_loss_sum(const ModelInputs& inputs, const torch::Tensor& labels,
                                 const FusedHeadOptions& options = {});
  // backward of loss * loss_scale; reduces gradients when last_micro_step.
  void backward(const torch::Tensor& loss, bool last_micro_step = true);
  // Clip, AdamW at the schedule's rate, zero the gradients. Needs a
  // backward with last_micro_step since the previous step. Throws
  // NonFiniteGradientsError at the options.max_skipped_steps-th skip in a
  // row that the loss scale could not answer (gradients already zeroed).
  StepResult step();

  void train();
  void eval();

  std::int64_t steps_taken() const;
  double current_lr() const;  // of the next step
  double loss_scale() const;
  const EngineOptions& options() const;

  // Full fp32 weights by Hugging Face name, on every rank (collective).
  NamedTensors gather_full_parameters();
  FullTrainingState gather_full_state();
  // Takes this rank's shards out of a full state (any former layout) and
  // refreshes the model's weights (collective). The source is asked once per
  // parameter and part whose elements this rank owns.
  void load_full_state(const FullTrainingState& state);
  void load_full_state(const FullStateSource& source);

  // This rank's own optimizer shard, master weights and counters, for
  // checkpoints that keep the layout ("bucket.<i>.master|exp_avg|exp_avg_sq",
  // "bucket.<i>.layout" = [padded numel, shard begin, shard end], "step",
  // "loss_scale", "scaler"). Loading checks the layout. copy = false gives
  // views of the engine's own buffers instead of CPU copies: valid, and
  // unchanged, only until the next backward or step (a synchronous save
  // writes them straight away; an async one stages them first).
  NamedTensors local_state(bool copy = true);
  void load_local_state(const NamedTensors& state);
  // Where local_state()'s buckets sit in the whole model (which parameter,
  // which elements, which dp and tp rank), so that the local states of all
  // ranks can be reassembled into a full state under any other layout
  // (meshrun/train/checkpoint_state.hpp).
  ShardMap shard_map() const;

  // Every tensor holding the engine's memory (flat parameters and
  // gradients, reduction buffers, master weights, moments) and the model's
  // (its parameters and buffers, a LoRA model's frozen base included), for
  // StorageSleep (meshrun/train/storage_sleep.hpp). Only between steps.
  std::vector<torch::Tensor> memory() const;

 private:
  std::optional<LlamaModel> llama_;
  std::unique_ptr<train_detail::EngineCore> core_;
};

}  // namespace meshrun
