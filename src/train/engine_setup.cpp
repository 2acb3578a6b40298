// Engine construction: parameter checks, buckets and their flat buffers,
// gradient-ready hooks (engine_core.hpp).
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <stdexcept>

#include "engine_core.hpp"
#include "meshrun/model/expert_placement.hpp"

namespace meshrun::train_detail {

namespace {

class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> ready) : ready_(std::move(ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ready_();
    return outputs;
  }

 private:
  std::function<void()> ready_;
};

}  // namespace

EngineCore::EngineCore(TrainableModel model_in, Group* dp, Group* tp, EngineOptions options_in, ExpertGroups experts)
    : model(std::move(model_in)),
      options(std::move(options_in)),
      scaler(options.dtype == torch::kFloat16, options.loss_scaler),
      dp_(dp && dp->size() > 1 ? dp : nullptr),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      ep_(experts.parallel && experts.parallel->size() > 1 ? experts.parallel : nullptr),
      expert_replicas_(ep_ && experts.replica && experts.replica->size() > 1 ? experts.replica : nullptr) {
  if (options.zero_stage < 0 || options.zero_stage > 3)
    throw ConfigError("training engine: zero_stage must be 0, 1, 2 or 3, got " + std::to_string(options.zero_stage));
  if (dp_) dp_size_ = dp_->size(), dp_rank_ = dp_->rank();
  if (tp_) tp_size_ = tp_->size(), tp_rank_ = tp_->rank();
  if (ep_) {
    ep_size_ = ep_->size(), ep_rank_ = ep_->rank();
    // The replicas of an expert and its ep peers together are the dp group.
    const int replicas = expert_replicas_ ? expert_replicas_->size() : 1;
    if (replicas * ep_size_ != dp_size_)
      throw std::logic_error("training engine: " + std::to_string(replicas) + " expert replicas × ep " +
                             std::to_string(ep_size_) + " is not the dp group's " + std::to_string(dp_size_) + " ranks");
  }
  validate_parameters();
  device_ = model.parameters.front().device();
  // Offloaded states live in host memory: their step reads the host anyway.
  device_decides_ = options.device_decides.value_or(!device_.is_cpu() && !options.offload);
  fp32_model_ = options.dtype == torch::kFloat32;
  if (model.set_gradient_checkpointing) model.set_gradient_checkpointing(options.gradient_checkpointing);
  build_buckets();
  hooked_ = dp_ != nullptr || options.zero_stage == 3;
  if (hooked_) register_gradient_hooks();
  if (options.zero_stage == 3) {
    for (auto& bucket : buckets_) {
      release_storage(bucket.params);
      release_storage(bucket.grads);
    }
    if (!model.set_unit_hooks) throw std::logic_error("training engine: ZeRO-3 needs a model with unit hooks");
    model.set_unit_hooks(this);
  }
}

EngineCore::~EngineCore() {
  *alive_ = false;
  if (options.zero_stage == 3 && model.set_unit_hooks) model.set_unit_hooks(nullptr);
  for (auto& [accumulator, key] : accumulator_hooks_) accumulator->del_post_hook(key);
}

void EngineCore::validate_parameters() const {
  if (model.parameters.empty()) throw std::logic_error("training engine: the model has no parameters");
  if (model.parameters.size() != model.specs.size())
    throw std::logic_error("training engine: " + std::to_string(model.parameters.size()) + " parameters but " +
                           std::to_string(model.specs.size()) + " parameter specs");
  const auto device = model.parameters.front().device();
  for (size_t i = 0; i < model.parameters.size(); ++i) {
    const auto& parameter = model.parameters[i];
    const auto& spec = model.specs[i];
    if (parameter.scalar_type() != options.dtype)
      throw std::logic_error("training engine: parameter " + spec.name + " is " +
                             std::string(c10::toString(parameter.scalar_type())) + ", the recipe's dtype is " +
                             std::string(c10::toString(options.dtype)));
    if (parameter.device() != device)
      throw std::logic_error("training engine: parameter " + spec.name + " is on " + parameter.device().str() +
                             ", the others on " + device.str());
    if (!parameter.requires_grad())
      throw std::logic_error("training engine: parameter " + spec.name + " does not require grad");
    std::vector<int64_t> local = spec.full_shape;
    if (spec.split_dim >= 0 && tp_size_ > 1) {
      if (static_cast<size_t>(spec.split_dim) >= local.size() || local[spec.split_dim] % tp_size_ != 0)
        throw std::logic_error("training engine: parameter " + spec.name + " cannot split dim " +
                               std::to_string(spec.split_dim) + " of " + shape_text(spec.full_shape) +
                               " over tp " + std::to_string(tp_size_));
      local[spec.split_dim] /= tp_size_;
    }
    if (!parameter.sizes().equals(local))
      throw std::logic_error("training engine: parameter " + spec.name + " has shape " +
                             shape_text(parameter.sizes()) + ", its spec says " + shape_text(local) +
                             " on each of " + std::to_string(tp_size_) + " tp rank(s)");
    if (spec.unit < 0 || spec.unit >= model.num_units)
      throw std::logic_error("training engine: parameter " + spec.name + " belongs to unit " +
                             std::to_string(spec.unit) + " of " + std::to_string(model.num_units));
    if (ep_ && spec.expert >= 0 && !ExpertPlacement{spec.experts, ep_size_}.holds(ep_rank_, spec.expert))
      throw std::logic_error("training engine: parameter " + spec.name + " is not one of ep rank " +
                             std::to_string(ep_rank_) + "'s experts of " + std::to_string(spec.experts));
  }
}

void EngineCore::build_buckets() {
  const int parameters = static_cast<int>(model.parameters.size());
  std::vector<std::vector<int>> bucket_parameters;
  if (options.zero_stage == 3) {
    // One bucket per unit (units used together share one), last unit first.
    std::vector<int> group_of_unit(static_cast<size_t>(model.num_units));
    for (int unit = 0; unit < model.num_units; ++unit) group_of_unit[unit] = unit;
    for (const auto& shared : model.shared_units)
      for (const int unit : shared) {
        if (unit < 0 || unit >= model.num_units || shared.empty())
          throw std::logic_error("training engine: shared unit " + std::to_string(unit) + " out of range");
        group_of_unit[unit] = *std::max_element(shared.begin(), shared.end());
      }

    std::vector<int> bucket_of_group(static_cast<size_t>(model.num_units), -1);
    for (int unit = model.num_units - 1; unit >= 0; --unit) {
      const int group = group_of_unit[unit];
      std::vector<int> members;
      for (int i = 0; i < parameters; ++i)
        if (model.specs[i].unit == unit) members.push_back(i);
      if (members.empty() && bucket_of_group[group] < 0) continue;
      if (bucket_of_group[group] < 0) {
        bucket_of_group[group] = static_cast<int>(bucket_parameters.size());
        bucket_parameters.emplace_back();
      }
      auto& bucket = bucket_parameters[bucket_of_group[group]];
      bucket.insert(bucket.end(), members.begin(), members.end());
    }
    // A unit's experts gather and reduce over their own group: a bucket of
    // their own, right after the unit's other parameters.
    std::vector<int> first_of_group(bucket_parameters.size());
    std::vector<std::vector<int>> apart;
    for (size_t b = 0; b < bucket_parameters.size(); ++b) {
      first_of_group[b] = static_cast<int>(apart.size());
      for (auto& list : apart_from_experts({bucket_parameters[b]})) apart.push_back(std::move(list));
    }
    buckets_of_unit_.assign(static_cast<size_t>(model.num_units), {});
    for (int unit = 0; unit < model.num_units; ++unit) {
      const int b = bucket_of_group[group_of_unit[unit]];
      if (b < 0) continue;
      const int end = static_cast<size_t>(b) + 1 < first_of_group.size() ? first_of_group[b + 1]
                                                                           : static_cast<int>(apart.size());
      for (int i = first_of_group[b]; i < end; ++i) buckets_of_unit_[unit].push_back(i);
    }
    bucket_parameters = std::move(apart);
  } else {
    std::vector<int> backward_order;
    std::vector<std::int64_t> bytes;
    for (int i = parameters - 1; i >= 0; --i) backward_order.push_back(i);
    for (const auto& parameter : model.parameters) bytes.push_back(parameter.numel() * parameter.element_size());
    bucket_parameters = apart_from_experts(assign_buckets(
        backward_order, bytes, std::max<std::int64_t>(1, static_cast<std::int64_t>(options.bucket_mb * 1048576))));
  }
  bucket_of_parameter_.assign(static_cast<size_t>(parameters), -1);
  buckets_.resize(bucket_parameters.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (const int parameter : bucket_parameters[b]) bucket_of_parameter_[parameter] = static_cast<int>(b);
    build_bucket(buckets_[b], bucket_parameters[b]);
  }
  if (options.zero_stage == 3)
    for (int unit = 0; unit < model.num_units; ++unit)
      for (const int b : buckets_of_unit_[unit]) buckets_[b].units.push_back(unit);
}

std::vector<std::vector<int>> EngineCore::apart_from_experts(const std::vector<std::vector<int>>& lists) const {
  if (!ep_) return lists;
  std::vector<std::vector<int>> out;
  for (const auto& list : lists) {
    std::vector<int> dense, experts;
    for (const int parameter : list) (model.specs[parameter].expert >= 0 ? experts : dense).push_back(parameter);
    if (!dense.empty()) out.push_back(std::move(dense));
    if (!experts.empty()) out.push_back(std::move(experts));
  }
  return out;
}

void EngineCore::build_bucket(Bucket& bucket, const std::vector<int>& parameters) {
  torch::NoGradGuard no_grad;
  bucket.experts = ep_ && model.specs[parameters.front()].expert >= 0;
  bucket.group = bucket.experts ? expert_replicas_ : dp_;
  bucket.shard_rank = bucket.group ? bucket.group->rank() : 0;
  std::vector<FlatParameterInfo> infos;
  for (const int i : parameters)
    infos.push_back({i, model.parameters[i].sizes().vec(), model.specs[i].decays,
                     model.specs[i].split_dim >= 0 && tp_size_ > 1});
  bucket.layout = make_flat_layout(infos, bucket.group ? bucket.group->size() : 1);
  const auto model_options = torch::TensorOptions().dtype(options.dtype).device(device_);
  const auto fp32_options = model_options.dtype(torch::kFloat32);
  bucket.params = torch::zeros({bucket.layout.padded_numel}, model_options);
  bucket.grads = torch::zeros({bucket.layout.padded_numel}, model_options);
  for (const auto& entry : bucket.layout.entries) {
    auto& parameter = model.parameters[entry.parameter];
    torch::Tensor view = entry_view(bucket.params, entry);
    view.copy_(parameter);
    parameter.set_data(view);
    parameter.mutable_grad() = entry_view(bucket.grads, entry);
  }
  // Replicas must start equal; the first replica's weights win.
  if (bucket.group) bucket.group->broadcast(bucket.params, 0);

  const int stage = options.zero_stage;
  bucket.owned_begin = stage == 0 ? 0 : bucket.layout.shard_begin(bucket.shard_rank);
  bucket.owned_numel = stage == 0 ? bucket.layout.padded_numel : bucket.layout.shard_numel;
  const std::int64_t owned_end = bucket.owned_begin + bucket.owned_numel;
  bucket.split_ranges = bucket.layout.ranges_within(bucket.owned_begin, owned_end, &FlatEntry::tp_split);
  bucket.upcast_in_chunks = !fp32_model_ && !bucket.group && stage != 3 && !options.offload;
  if (!bucket.upcast_in_chunks) {
    bucket.reduce_input = fp32_model_ ? bucket.grads : torch::empty({bucket.layout.padded_numel}, fp32_options);
    if (stage == 0 || (stage <= 2 && !bucket.group))
      bucket.reduced_grad = bucket.reduce_input.narrow(0, bucket.owned_begin, bucket.owned_numel);
    else
      bucket.reduced_grad = torch::zeros({bucket.owned_numel}, fp32_options);
    bucket.sharded_reduce = !bucket.reduced_grad.is_alias_of(bucket.reduce_input);
    bucket.reduces_every_micro_step = bucket.sharded_reduce && stage >= 2;
    if (bucket.sharded_reduce) {
      bucket.reduce_output = torch::empty({bucket.owned_numel}, fp32_options);
      release_storage(bucket.reduce_output);
    }
    // The fp32 copy exists from the bucket's reduction to the step (or, sharded, to the reduction's end).
    if (!fp32_model_) release_storage(bucket.reduce_input);
  }

  torch::Tensor owned_params = bucket.params.narrow(0, bucket.owned_begin, bucket.owned_numel);
  if (stage == 3) {
    bucket.param_shard = owned_params.clone();
    owned_params = bucket.param_shard;
  }
  torch::Tensor master;
  bucket.master_aliases_model = fp32_model_ && !options.offload;
  if (bucket.master_aliases_model)
    master = owned_params;
  else
    master = owned_params.to(torch::TensorOptions().dtype(torch::kFloat32).device(
                                 options.offload ? torch::Device(torch::kCPU) : device_),
                             /*non_blocking=*/false, /*copy=*/true);
  bucket.optimizer =
      AdamWShard::for_params(master, bucket.layout.ranges_within(bucket.owned_begin, owned_end, &FlatEntry::decays));
  bucket.optimizer_grad = options.offload           ? torch::zeros({bucket.owned_numel}, torch::kFloat32)
                          : bucket.upcast_in_chunks ? bucket.grads.narrow(0, bucket.owned_begin, bucket.owned_numel)
                                                    : bucket.reduced_grad;
  if (bucket.upcast_in_chunks) {
    // One scratch for every such bucket: as large as the largest chunk.
    const std::int64_t chunk = std::min(bucket.owned_numel, std::max<std::int64_t>(options.upcast_chunk_elements, 1));
    if (!grad_chunk_.defined() || grad_chunk_.numel() < chunk) grad_chunk_ = torch::empty({chunk}, fp32_options);
  }
}

void EngineCore::register_gradient_hooks() {
  for (size_t i = 0; i < model.parameters.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(model.parameters[i]);
    if (!accumulator)
      throw std::logic_error("training engine: parameter " + model.specs[i].name + " has no gradient accumulator");
    const int parameter = static_cast<int>(i);
    const auto key = accumulator->add_post_hook(std::make_unique<GradientReadyHook>(
        [this, parameter, alive = std::weak_ptr<bool>(alive_)] {
          if (auto still = alive.lock(); still && *still) gradient_ready(parameter);
        }));
    accumulator_hooks_.emplace_back(std::move(accumulator), key);
  }
}

void EngineCore::attach_gradient_views() {
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (const auto& entry : buckets_[b].layout.entries) {
      auto& parameter = model.parameters[entry.parameter];
      if (!parameter.grad().defined() || !parameter.grad().is_alias_of(buckets_[b].grads))
        parameter.mutable_grad() = entry_view(buckets_[b].grads, entry);
    }
}

}  // namespace meshrun::train_detail
