// FrozenShards (include/meshrun/train/frozen_shards.hpp): the flat-buffer
// layout and storage release/restore of the training engine's ZeRO-3
// (flat_layout.hpp), without gradients or optimizer state.
#include "meshrun/train/frozen_shards.hpp"

#include <algorithm>
#include <map>

#include "flat_layout.hpp"

namespace meshrun {

using train_detail::entry_view;
using train_detail::FlatLayout;
using train_detail::FlatParameterInfo;
using train_detail::make_flat_layout;
using train_detail::release_storage;

struct FrozenShards::Impl {
  struct Piece {
    Group* group = nullptr;  // null: this rank alone (nothing to gather)
    FlatLayout layout;
    torch::Tensor flat;   // the whole unit's weights; storage only while gathered
    torch::Tensor shard;  // this rank's part of flat
    bool gathered = false;
  };
  std::shared_ptr<LlamaModelImpl> model;
  std::vector<Piece> pieces;
  std::vector<std::vector<int>> pieces_of_unit;

  void gather(Piece& piece) {
    if (piece.gathered) return;
    train_detail::gather_into(piece.group, piece.flat, piece.shard);
    piece.gathered = true;
  }
  void release(Piece& piece) {
    if (!piece.gathered) return;
    release_storage(piece.flat);
    piece.gathered = false;
  }
};

FrozenShards::FrozenShards(const LlamaModel& model, DeviceMesh& mesh) : impl_(std::make_unique<Impl>()) {
  impl_->model = model.ptr();
  const std::vector<ParameterSpec>& specs = model->parameter_specs();
  const int units = model->num_units();
  std::map<std::string, torch::Tensor> named;
  for (const auto& item : model->named_parameters()) named.emplace(item.key(), item.value());
  // A tied embedding's unit and the head's gather as one (the larger index
  // names the group, as the training engine groups them).
  std::vector<int> group_of_unit(static_cast<size_t>(units));
  for (int unit = 0; unit < units; ++unit) group_of_unit[unit] = unit;
  for (const ParameterSpec& spec : specs)
    if (spec.also_used_by_unit >= 0 && spec.also_used_by_unit < units && spec.unit >= 0 && spec.unit < units)
      group_of_unit[spec.unit] = std::max(spec.unit, spec.also_used_by_unit);
  Group* replicas = mesh.dp() * mesh.sp() > 1 ? &mesh.replica_group() : nullptr;
  Group* expert_parallel = mesh.expert_parallel_group();
  Group* expert_replicas = mesh.expert_replica_group();
  const bool ep = expert_parallel && expert_parallel->size() > 1;
  if (ep && expert_replicas && expert_replicas->size() <= 1) expert_replicas = nullptr;

  // (group, experts?) → its parameters, in spec order.
  std::map<std::pair<int, bool>, std::vector<std::pair<torch::Tensor, std::vector<int64_t>>>> members;
  for (const ParameterSpec& spec : specs) {
    const auto found = named.find(spec.name);
    if (found == named.end()) throw std::logic_error("frozen shards: the model has no parameter " + spec.name);
    if (spec.unit < 0 || spec.unit >= units)
      throw std::logic_error("frozen shards: " + spec.name + " belongs to unit " + std::to_string(spec.unit));
    const bool experts = ep && spec.expert >= 0;
    members[{group_of_unit[spec.unit], experts}].emplace_back(found->second, found->second.sizes().vec());
  }
  std::map<int, std::vector<int>> pieces_of_group;
  torch::NoGradGuard no_grad;
  for (auto& [key, list] : members) {
    Impl::Piece piece;
    piece.group = key.second ? (ep ? expert_replicas : nullptr) : replicas;
    std::vector<FlatParameterInfo> infos;
    for (size_t i = 0; i < list.size(); ++i) infos.push_back({static_cast<int>(i), list[i].second, false, false});
    piece.layout = make_flat_layout(infos, piece.group ? piece.group->size() : 1);
    const torch::Tensor& first = list.front().first;
    piece.flat = torch::empty({piece.layout.padded_numel}, first.options().requires_grad(false));
    piece.flat.zero_();  // the padding
    for (const auto& entry : piece.layout.entries) {
      torch::Tensor& parameter = list[static_cast<size_t>(entry.parameter)].first;
      torch::Tensor view = entry_view(piece.flat, entry);
      view.copy_(parameter);
      parameter.set_data(view);
    }
    const int rank = piece.group ? piece.group->rank() : 0;
    piece.shard = piece.flat.narrow(0, piece.layout.shard_begin(rank), piece.layout.shard_numel).clone();
    release_storage(piece.flat);
    pieces_of_group[key.first].push_back(static_cast<int>(impl_->pieces.size()));
    impl_->pieces.push_back(std::move(piece));
  }
  impl_->pieces_of_unit.assign(static_cast<size_t>(units), {});
  for (int unit = 0; unit < units; ++unit) impl_->pieces_of_unit[unit] = pieces_of_group[group_of_unit[unit]];
  impl_->model->set_unit_hooks(this);
}

FrozenShards::~FrozenShards() {
  if (impl_ && impl_->model) impl_->model->set_unit_hooks(nullptr);
}

void FrozenShards::before_unit(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= impl_->pieces_of_unit.size()) return;
  for (const int piece : impl_->pieces_of_unit[unit]) impl_->gather(impl_->pieces[piece]);
}

torch::Tensor FrozenShards::after_unit(int unit, torch::Tensor output) {
  if (unit < 0 || static_cast<size_t>(unit) >= impl_->pieces_of_unit.size()) return output;
  // A forward that records a graph would read the weights in backward.
  if (output.requires_grad()) throw std::logic_error("frozen shards: a frozen role's forward recorded a graph");
  for (const int piece : impl_->pieces_of_unit[unit]) impl_->release(impl_->pieces[piece]);
  return output;
}

int64_t FrozenShards::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& piece : impl_->pieces) bytes += piece.shard.numel() * piece.shard.element_size();
  return bytes;
}

int64_t FrozenShards::weight_bytes() const {
  int64_t bytes = 0;
  for (const auto& piece : impl_->pieces) bytes += piece.layout.numel * piece.shard.element_size();
  return bytes;
}

std::vector<torch::Tensor> FrozenShards::memory() const {
  std::vector<torch::Tensor> tensors;
  for (const auto& piece : impl_->pieces) {
    tensors.push_back(piece.flat);
    tensors.push_back(piece.shard);
  }
  return tensors;
}

}  // namespace meshrun
