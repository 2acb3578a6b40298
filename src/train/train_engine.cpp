// TrainEngine's public face and its options (include/meshrun/train/train_engine.hpp).
#include "meshrun/train/train_engine.hpp"
#include "meshrun/plan/plan.hpp"

#include <stdexcept>

#include "engine_core.hpp"
#include "host_memory.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun {

torch::Dtype torch_dtype_of(Precision precision) {
  switch (precision) {
    case Precision::bf16: return torch::kBFloat16;
    case Precision::fp16: return torch::kFloat16;
    case Precision::fp32: return torch::kFloat32;
  }
  throw std::logic_error("torch_dtype_of: a precision without a dtype");
}

torch::Dtype dtype_from_recipe_name(const std::string& name) {
  if (const auto precision = precision_named(name)) return torch_dtype_of(*precision);
  throw ConfigError("unknown dtype '" + name + "' (bf16, fp16 or fp32)");
}

namespace {

// The limit's own rule, for options from the plan and from code alike;
// `recipe_key` when the value is known to come from that key.
void check_max_skipped_steps(std::int64_t value, const std::string& name, const std::string& recipe_key = {}) {
  if (value < 1 && value != -1)
    throw ConfigError(name + " must be at least 1, or -1 (never stop), got " + std::to_string(value), recipe_key,
                      recipe_key.empty() ? "" : "schema.range");
}

}  // namespace

EngineOptions EngineOptions::from_plan(const RolePlan& role, std::int64_t total_steps) {
  const OptimizerPlan& optimizer = role.optimizer;
  EngineOptions options;
  options.zero_stage = role.zero_stage;
  options.dtype = torch_dtype_of(role.dtype);
  options.adamw.beta1 = optimizer.adam_beta1;
  options.adamw.beta2 = optimizer.adam_beta2;
  options.adamw.eps = optimizer.adam_eps;
  options.adamw.weight_decay = optimizer.weight_decay;
  options.schedule = LrSchedule::make(optimizer.lr_scheduler, optimizer.learning_rate,
                                      total_steps, optimizer.warmup_ratio, optimizer.min_lr_ratio);
  options.max_norm = optimizer.max_norm;
  options.gradient_checkpointing = role.gradient_checkpointing;
  options.offload = role.offload;
  options.bucket_mb = optimizer.bucket_mb;
  if (!(options.bucket_mb > 0))
    throw ConfigError("train.bucket_mb must be positive", "train.bucket_mb", "schema.range");
  options.max_skipped_steps = optimizer.max_skipped_steps;
  check_max_skipped_steps(options.max_skipped_steps, "train.max_skipped_steps", "train.max_skipped_steps");
  return options;
}

TrainableModel TrainableModel::from_module(std::shared_ptr<torch::nn::Module> module, std::vector<ParameterSpec> specs,
                                           int num_units) {
  if (!module) throw std::logic_error("trainable model: no module");
  TrainableModel model;
  const auto named = module->named_parameters(/*recurse=*/true);
  // Frozen parameters (a LoRA run's base weights) are not the engine's.
  std::erase_if(specs, [](const ParameterSpec& spec) { return !spec.trainable; });
  std::size_t trainable = 0;
  for (const auto& item : named) trainable += item.value().requires_grad() ? 1 : 0;
  if (trainable != specs.size())
    throw std::logic_error("trainable model: the module has " + std::to_string(trainable) +
                           " trainable parameters but " + std::to_string(specs.size()) + " specs");
  for (const auto& spec : specs) {
    const torch::Tensor* parameter = named.find(spec.name);
    if (!parameter) throw std::logic_error("trainable model: no parameter named '" + spec.name + "'");
    model.parameters.push_back(*parameter);
    if (spec.also_used_by_unit >= 0) model.shared_units.push_back({spec.unit, spec.also_used_by_unit});
  }
  model.module = std::move(module);
  model.specs = std::move(specs);
  model.num_units = num_units;
  return model;
}

TrainEngine::TrainEngine(TrainableModel model, Group* dp, Group* tp, EngineOptions options, ExpertGroups experts) {
  check_max_skipped_steps(options.max_skipped_steps, "training engine: max_skipped_steps");
  core_ = std::make_unique<train_detail::EngineCore>(std::move(model), dp, tp, std::move(options), experts);
  train_detail::keep_freed_host_memory();
}

TrainEngine::~TrainEngine() = default;

torch::Tensor TrainEngine::forward(const ModelInputs& inputs) {
  if (!llama_) throw std::logic_error("training engine: forward() needs an engine built from a LlamaModel");
  return (*llama_)->forward(inputs);
}

HeadOutputs TrainEngine::forward_log_probs(const ModelInputs& inputs, const torch::Tensor& labels,
                                           const FusedHeadOptions& options, int64_t first_column) {
  if (!llama_) throw std::logic_error("training engine: forward_log_probs() needs an engine built from a LlamaModel");
  return (*llama_)->forward_log_probs(inputs, labels, options, first_column);
}

torch::Tensor TrainEngine::forward_loss_sum(const ModelInputs& inputs, const torch::Tensor& labels,
                                            const FusedHeadOptions& options) {
  if (!llama_) throw std::logic_error("training engine: forward_loss_sum() needs an engine built from a LlamaModel");
  return (*llama_)->forward_loss_sum(inputs, labels, options);
}

void TrainEngine::backward(const torch::Tensor& loss, bool last_micro_step) { core_->backward(loss, last_micro_step); }
StepResult TrainEngine::step() { return core_->step(); }
void TrainEngine::train() { core_->model.module->train(true); }
void TrainEngine::eval() { core_->model.module->train(false); }
std::int64_t TrainEngine::steps_taken() const {
  core_->settle();
  return core_->steps_taken;
}
double TrainEngine::current_lr() const { return core_->options.schedule.lr(steps_taken()); }
double TrainEngine::loss_scale() const {
  core_->settle();
  return core_->scaler.scale();
}
const EngineOptions& TrainEngine::options() const { return core_->options; }
NamedTensors TrainEngine::gather_full_parameters() { return core_->gather_full_state(false).parameters; }
FullTrainingState TrainEngine::gather_full_state() { return core_->gather_full_state(true); }
void TrainEngine::load_full_state(const FullTrainingState& state) { core_->load_full_state(state); }
void TrainEngine::load_full_state(const FullStateSource& source) { core_->load_full_state(source); }
NamedTensors TrainEngine::local_state(bool copy) { return core_->local_state(copy); }
void TrainEngine::load_local_state(const NamedTensors& state) { core_->load_local_state(state); }
ShardMap TrainEngine::shard_map() const { return core_->shard_map(); }
std::vector<torch::Tensor> TrainEngine::memory() const { return core_->memory(); }

}  // namespace meshrun
