// Flat buffer layout, buckets and releasable storage (flat_layout.hpp).
#include "flat_layout.hpp"

#include <c10/core/StorageImpl.h>

#include <stdexcept>

namespace meshrun::train_detail {

ElementRanges FlatLayout::ranges_within(std::int64_t begin, std::int64_t end, bool FlatEntry::*which) const {
  ElementRanges ranges;
  for (const auto& entry : entries) {
    if (!(entry.*which)) continue;
    const std::int64_t from = std::max(begin, entry.offset);
    const std::int64_t to = std::min(end, entry.offset + entry.numel);
    if (from >= to) continue;
    if (!ranges.empty() && ranges.back().second == from - begin)
      ranges.back().second = to - begin;
    else
      ranges.emplace_back(from - begin, to - begin);
  }
  return ranges;
}

FlatLayout make_flat_layout(const std::vector<FlatParameterInfo>& parameters, int shards) {
  if (shards < 1) throw std::logic_error("flat layout: shards must be at least 1");
  FlatLayout layout;
  layout.shards = shards;
  for (const auto& parameter : parameters) {
    FlatEntry entry;
    entry.parameter = parameter.parameter;
    entry.offset = layout.numel;
    entry.numel = 1;
    for (const auto size : parameter.shape) entry.numel *= size;
    entry.shape = parameter.shape;
    entry.decays = parameter.decays;
    entry.tp_split = parameter.tp_split;
    layout.numel += entry.numel;
    layout.entries.push_back(std::move(entry));
  }
  layout.shard_numel = (layout.numel + shards - 1) / shards;
  layout.padded_numel = layout.shard_numel * shards;
  return layout;
}

std::vector<std::vector<int>> assign_buckets(const std::vector<int>& backward_order,
                                             const std::vector<std::int64_t>& parameter_bytes,
                                             std::int64_t bucket_bytes) {
  std::vector<std::vector<int>> buckets;
  std::int64_t filled = 0;
  for (const int parameter : backward_order) {
    if (parameter < 0 || static_cast<size_t>(parameter) >= parameter_bytes.size())
      throw std::logic_error("bucket assignment: no parameter " + std::to_string(parameter));
    const std::int64_t bytes = parameter_bytes[static_cast<size_t>(parameter)];
    if (buckets.empty() || (filled > 0 && filled + bytes > bucket_bytes)) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(parameter);
    filled += bytes;
  }
  return buckets;
}

torch::Tensor entry_view(const torch::Tensor& flat, const FlatEntry& entry) {
  return flat.narrow(0, entry.offset, entry.numel).view(entry.shape);
}

void release_storage(const torch::Tensor& flat) {
  c10::StorageImpl* storage = flat.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, flat.device()));
  storage->set_nbytes(0);
}

void restore_storage(const torch::Tensor& flat) {
  c10::StorageImpl* storage = flat.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(flat.storage_offset() + flat.numel()) * flat.element_size();
  if (storage->nbytes() >= bytes) return;
  if (storage->allocator() == nullptr) throw std::logic_error("flat buffer without an allocator cannot be restored");
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

void gather_into(Group* group, const torch::Tensor& flat, const torch::Tensor& shard) {
  torch::NoGradGuard no_grad;
  restore_storage(flat);
  if (group) {
    torch::Tensor output = flat;
    group->all_gather_into_tensor_async(output, shard).wait();
  } else {
    flat.copy_(shard);
  }
}

bool has_storage(const torch::Tensor& flat) {
  return flat.storage().nbytes() >= static_cast<size_t>(flat.storage_offset() + flat.numel()) * flat.element_size();
}

}  // namespace meshrun::train_detail
