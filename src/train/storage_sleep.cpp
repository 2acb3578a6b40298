// StorageSleep (include/meshrun/train/storage_sleep.hpp): raw bytes out to host
// memory, the storage's allocation freed, and the reverse on wake.
#include "meshrun/train/storage_sleep.hpp"

#include <algorithm>
#include <stdexcept>

#ifdef MESHRUN_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace meshrun {
namespace {

torch::Tensor bytes_of(const c10::Storage& storage, size_t bytes) {
  return torch::from_blob(storage.data_ptr().get(), {static_cast<int64_t>(bytes)},
                          torch::TensorOptions().dtype(torch::kUInt8).device(storage.device()));
}

}  // namespace

void StorageSleep::add(const torch::Tensor& tensor) {
  if (!tensor.defined()) return;
  if (asleep_) throw std::logic_error("StorageSleep::add while asleep");
  const c10::Storage& storage = tensor.storage();
  const auto same = [&](const Entry& entry) { return entry.storage.is_alias_of(storage); };
  if (std::any_of(entries_.begin(), entries_.end(), same)) return;
  entries_.push_back(Entry{storage, {}, 0});
}

void StorageSleep::add(const std::vector<torch::Tensor>& tensors) {
  for (const auto& tensor : tensors) add(tensor);
}

int64_t StorageSleep::sleep() {
  if (asleep_) return 0;
  for (const auto& release : releases_) release();
  int64_t device_bytes = 0;
  for (Entry& entry : entries_) {
    entry.bytes = entry.storage.nbytes();
    if (entry.bytes == 0 || entry.storage.data_ptr().get() == nullptr) {
      entry.bytes = 0;
      continue;
    }
    const bool cuda = entry.storage.device().is_cuda();
    entry.host = torch::empty({static_cast<int64_t>(entry.bytes)},
                              torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(cuda));
    entry.host.copy_(bytes_of(entry.storage, entry.bytes));
    c10::StorageImpl* impl = entry.storage.unsafeGetStorageImpl();
    impl->set_data_ptr_noswap(at::DataPtr(nullptr, entry.storage.device()));
    impl->set_nbytes(0);
    if (cuda) device_bytes += static_cast<int64_t>(entry.bytes);
  }
  asleep_ = true;
#ifdef MESHRUN_HAVE_CUDA
  if (device_bytes > 0) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  return device_bytes;
}

void StorageSleep::wake() {
  if (!asleep_) return;
  for (Entry& entry : entries_) {
    if (entry.bytes == 0) continue;
    c10::StorageImpl* impl = entry.storage.unsafeGetStorageImpl();
    if (impl->allocator() == nullptr) throw std::logic_error("a sleeping storage has no allocator to wake with");
    impl->set_data_ptr_noswap(impl->allocator()->allocate(entry.bytes));
    impl->set_nbytes(entry.bytes);
    bytes_of(entry.storage, entry.bytes).copy_(entry.host);
    entry.host = torch::Tensor();
  }
  asleep_ = false;
}

int64_t StorageSleep::device_reserved_bytes([[maybe_unused]] const torch::Device& device) {
#ifdef MESHRUN_HAVE_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  }
#endif
  return 0;
}

int64_t StorageSleep::bytes() const {
  int64_t total = 0;
  for (const Entry& entry : entries_)
    total += static_cast<int64_t>(asleep_ ? entry.bytes : entry.storage.nbytes());
  return total;
}

}  // namespace meshrun
