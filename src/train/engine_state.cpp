// State export and import: full fp32 tensors by name (gathered over dp
// shards and tp splits) for resharding and Hugging Face export, and this
// rank's own shards for same-layout checkpoints (engine_core.hpp).
#include <stdexcept>

#include "engine_core.hpp"
#include "meshrun/model/expert_placement.hpp"
#include "meshrun/ckpt/checkpoint.hpp"

namespace meshrun::train_detail {

namespace {

const torch::Tensor& find_tensor(const NamedTensors& tensors, const std::string& key, const std::string& what) {
  const auto found = tensors.find(key);
  if (found == tensors.end()) throw CheckpointError("training state: " + what + " has no '" + key + "'");
  return found->second;
}

// find_tensor's tensor, which must hold `count` values (a step, a scale).
const torch::Tensor& find_values(const NamedTensors& tensors, const std::string& key, const std::string& what,
                                 int64_t count) {
  const torch::Tensor& found = find_tensor(tensors, key, what);
  if (found.numel() != count)
    throw CheckpointError("training state: " + what + "'s '" + key + "' holds " +
                          std::to_string(found.numel()) + " values, not " + std::to_string(count));
  return found;
}

const char* part_name(StatePart part) {
  return part == StatePart::parameters ? "parameters" : part == StatePart::exp_avg ? "exp_avg" : "exp_avg_sq";
}

// A FullTrainingState as a source.
class InMemorySource : public FullStateSource {
 public:
  explicit InMemorySource(const FullTrainingState& state) : state_(state) {}
  std::int64_t step() const override { return state_.step; }
  double loss_scale() const override { return state_.loss_scale; }
  bool has_moments() const override { return !state_.exp_avg.empty() || !state_.exp_avg_sq.empty(); }
  torch::Tensor tensor(StatePart part, const std::string& name) const override {
    const NamedTensors& tensors = part == StatePart::parameters ? state_.parameters
                                  : part == StatePart::exp_avg  ? state_.exp_avg
                                                                : state_.exp_avg_sq;
    return find_tensor(tensors, name, part_name(part));
  }

 private:
  const FullTrainingState& state_;
};

}  // namespace

// The whole padded bucket of one owned-range fp32 tensor, on CPU.
torch::Tensor EngineCore::full_flat(Bucket& bucket, const torch::Tensor& owned) {
  if (options.zero_stage == 0 || !bucket.group) return owned.to(torch::kCPU);
  torch::Tensor shard = owned.to(device_).contiguous();
  torch::Tensor full = torch::empty({bucket.layout.padded_numel}, shard.options());
  bucket.group->all_gather_into_tensor_async(full, shard).wait();
  return full.to(torch::kCPU);
}

FullTrainingState EngineCore::gather_full_state(bool with_moments) {
  torch::NoGradGuard no_grad;
  FullTrainingState state;
  settle();
  state.step = steps_taken;
  state.loss_scale = scaler.scale();
  auto add = [&](NamedTensors& into, Bucket& bucket, const torch::Tensor& owned) {
    const torch::Tensor full = full_flat(bucket, owned);
    for (const auto& entry : bucket.layout.entries) {
      const auto& spec = model.specs[entry.parameter];
      torch::Tensor local = entry_view(full, entry);
      torch::Tensor whole;
      if (entry.tp_split) {
        torch::Tensor on_device = local.to(device_).contiguous();
        std::vector<torch::Tensor> pieces = tp_->all_gather(on_device);
        for (auto& piece : pieces) piece = piece.to(torch::kCPU);
        whole = torch::cat(pieces, spec.split_dim);
      } else {
        whole = local.clone();
      }
      if (!bucket.experts) {
        into[spec.name] = std::move(whole);
        continue;
      }
      // The ep peers hold the other experts, each at this one's place.
      const ExpertPlacement placement{spec.experts, ep_size_};
      std::vector<torch::Tensor> peers = ep_->all_gather(whole.to(device_).contiguous());
      for (int q = 0; q < ep_size_; ++q)
        into[expert_parameter_name(spec, placement.at_peer(ep_rank_, spec.expert, q))] = peers[q].to(torch::kCPU);
    }
  };
  for (auto& bucket : buckets_) {
    add(state.parameters, bucket, bucket.optimizer.params);
    if (with_moments) {
      add(state.exp_avg, bucket, bucket.optimizer.exp_avg);
      add(state.exp_avg_sq, bucket, bucket.optimizer.exp_avg_sq);
    }
  }
  return state;
}

void EngineCore::load_full_state(const FullTrainingState& state) { load_full_state(InMemorySource(state)); }

void EngineCore::load_full_state(const FullStateSource& source) {
  torch::NoGradGuard no_grad;
  if (gradients_ready_) throw std::logic_error("training state: cannot load between backward and step");
  auto take = [&](StatePart part, Bucket& bucket, torch::Tensor& owned) {
    const std::int64_t owned_end = bucket.owned_begin + bucket.owned_numel;
    torch::Tensor staged = torch::zeros({bucket.owned_numel}, torch::kFloat32);
    for (const auto& entry : bucket.layout.entries) {
      const std::int64_t from_element = std::max(bucket.owned_begin, entry.offset);
      const std::int64_t to_element = std::min(owned_end, entry.offset + entry.numel);
      if (from_element >= to_element) continue;
      const auto& spec = model.specs[entry.parameter];
      torch::Tensor full = source.tensor(part, spec.name);
      if (!full.sizes().equals(spec.full_shape))
        throw CheckpointError(std::string("training state: ") + part_name(part) + " '" + spec.name + "' has shape " +
                              shape_text(full.sizes()) + ", the model's is " + shape_text(spec.full_shape));
      torch::Tensor local = entry.tp_split ? full.chunk(tp_size_, spec.split_dim)[tp_rank_] : full;
      torch::Tensor flat = local.to(torch::kFloat32).contiguous().view({-1});
      staged.narrow(0, from_element - bucket.owned_begin, to_element - from_element)
          .copy_(flat.narrow(0, from_element - entry.offset, to_element - from_element));
    }
    owned.copy_(staged);
  };
  const bool with_moments = source.has_moments();
  for (auto& bucket : buckets_) {
    take(StatePart::parameters, bucket, bucket.optimizer.params);
    if (with_moments) {
      take(StatePart::exp_avg, bucket, bucket.optimizer.exp_avg);
      take(StatePart::exp_avg_sq, bucket, bucket.optimizer.exp_avg_sq);
    } else {
      bucket.optimizer.exp_avg.zero_();
      bucket.optimizer.exp_avg_sq.zero_();
    }
  }
  // Aliased masters are the model's weights already, but ZeRO 1/2 ranks
  // still need each other's shards.
  refresh_model_from_master();
  settle();
  steps_taken = source.step();
  scaler.restore(source.loss_scale(), 0, scaler.skipped_steps());
  counters_uploaded_ = false;  // the device takes them at the next step
}

NamedTensors EngineCore::local_state(bool copy) {
  NamedTensors state;
  const auto out = [copy](const torch::Tensor& tensor) { return copy ? tensor.to(torch::kCPU, false, true) : tensor; };
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto& bucket = buckets_[b];
    const std::string prefix = "bucket." + std::to_string(b) + ".";
    state[prefix + "master"] = out(bucket.optimizer.params);
    state[prefix + "exp_avg"] = out(bucket.optimizer.exp_avg);
    state[prefix + "exp_avg_sq"] = out(bucket.optimizer.exp_avg_sq);
    state[prefix + "layout"] =
        torch::tensor({bucket.layout.padded_numel, bucket.owned_begin, bucket.owned_numel}, torch::kInt64);
  }
  settle();
  state["step"] = torch::tensor({steps_taken}, torch::kInt64);
  state["loss_scale"] = torch::tensor({scaler.scale()}, torch::kFloat64);
  state["scaler"] = torch::tensor({scaler.finite_steps_in_a_row(), scaler.skipped_steps()}, torch::kInt64);
  return state;
}

void EngineCore::load_local_state(const NamedTensors& state) {
  torch::NoGradGuard no_grad;
  if (gradients_ready_) throw std::logic_error("training state: cannot load between backward and step");
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto& bucket = buckets_[b];
    const std::string prefix = "bucket." + std::to_string(b) + ".";
    const torch::Tensor layout = find_tensor(state, prefix + "layout", "the local state").to(torch::kInt64);
    const torch::Tensor expected =
        torch::tensor({bucket.layout.padded_numel, bucket.owned_begin, bucket.owned_numel}, torch::kInt64);
    if (!layout.sizes().equals(expected.sizes()) || !layout.equal(expected))
      throw CheckpointError("training state: bucket " + std::to_string(b) +
                            " was saved under another layout (dp size, ZeRO stage, bucket_mb or model); "
                            "load a full state instead");
    for (const auto& [name, target] : {std::pair<std::string, torch::Tensor*>{"master", &bucket.optimizer.params},
                                       {"exp_avg", &bucket.optimizer.exp_avg},
                                       {"exp_avg_sq", &bucket.optimizer.exp_avg_sq}}) {
      const torch::Tensor& saved = find_tensor(state, prefix + name, "the local state");
      if (saved.numel() != target->numel())
        throw CheckpointError("training state: '" + prefix + name + "' has " + std::to_string(saved.numel()) +
                              " elements, expected " + std::to_string(target->numel()));
      target->copy_(saved.view({-1}));
    }
  }
  if (buckets_.size() != 0 && state.count("bucket." + std::to_string(buckets_.size()) + ".layout"))
    throw CheckpointError("training state: saved with more buckets than this engine has");
  refresh_model_from_master();
  steps_taken = find_values(state, "step", "the local state", 1).item<std::int64_t>();
  const torch::Tensor counters = find_values(state, "scaler", "the local state", 2).view({-1});
  scaler.restore(find_values(state, "loss_scale", "the local state", 1).item<double>(),
                 counters[0].item<std::int64_t>(), counters[1].item<std::int64_t>());
  counters_uploaded_ = false;  // the device takes them at the next step
}

ShardMap EngineCore::shard_map() const {
  ShardMap map;
  map.dp_rank = dp_rank_;
  map.dp_size = dp_size_;
  map.tp_rank = tp_rank_;
  map.tp_size = tp_size_;
  map.zero_stage = options.zero_stage;
  for (const Bucket& bucket : buckets_) {
    ShardBucket& out = map.buckets.emplace_back();
    out.ep_rank = bucket.experts ? ep_rank_ : -1;
    out.padded_numel = bucket.layout.padded_numel;
    out.owned_begin = bucket.owned_begin;
    out.owned_numel = bucket.owned_numel;
    for (const FlatEntry& entry : bucket.layout.entries) {
      const ParameterSpec& spec = model.specs[entry.parameter];
      out.entries.push_back({spec.name, entry.offset, entry.numel, entry.shape, spec.full_shape,
                             entry.tp_split ? spec.split_dim : -1});
    }
  }
  return map;
}

std::vector<torch::Tensor> EngineCore::memory() const {
  std::vector<torch::Tensor> tensors;
  for (const Bucket& bucket : buckets_)
    for (const torch::Tensor* tensor :
         {&bucket.params, &bucket.grads, &bucket.param_shard, &bucket.reduce_input, &bucket.reduced_grad, &bucket.reduce_output,
          &bucket.optimizer_grad, &bucket.optimizer.params, &bucket.optimizer.exp_avg, &bucket.optimizer.exp_avg_sq})
      if (tensor->defined()) tensors.push_back(*tensor);
  if (grad_chunk_.defined()) tensors.push_back(grad_chunk_);
  // The module's own tensors too: those the engine does not hold (a LoRA
  // model's frozen base, rotary tables) would otherwise stay on the device;
  // the trained parameters are views of the buffers above (StorageSleep
  // counts a storage once).
  for (const torch::Tensor& tensor : model.module->parameters()) tensors.push_back(tensor);
  for (const torch::Tensor& tensor : model.module->buffers()) tensors.push_back(tensor);
  return tensors;
}

}  // namespace meshrun::train_detail
