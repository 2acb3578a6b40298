// StorageSleep: moves the memory behind a set of tensors to CPU memory and
// back, for `[colocate] sleep`: while one role works, the roles colocated
// with it sleep, so their parameters, gradients and optimizer states do not
// hold device memory (OpenRLHF's sleep / wake of colocated models).
//
// Invariants: it works on storages, not tensors, so every tensor and view
// sharing a registered storage (a model's parameters that are views into a
// training engine's flat buffers, optimizer moments, a KV cache) stays valid
// and sees the same bytes after wake(); while asleep the storages hold no
// memory (any access is a bug: reads see no data). Storages that hold no
// memory when sleep() runs (ZeRO-3 buffers between gathers) are left alone.
// On CPU the same copy-out, free, reallocate, copy-back happens, so the
// mechanism is exercised (and tested) without a GPU; on CUDA the host copies
// are pinned and the caching allocator's freed blocks go back to the driver,
// so other processes on the GPU (rollout engines elsewhere) can use them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace meshrun {

class StorageSleep {
 public:
  // Registers the tensor's storage (once per storage; undefined tensors are
  // ignored). Only while awake.
  void add(const torch::Tensor& tensor);
  void add(const std::vector<torch::Tensor>& tensors);

  // Runs `release` at each sleep(), before the storages move: for what
  // holds their addresses (an engine's CUDA graphs) to let them go.
  void before_sleep(std::function<void()> release) { releases_.push_back(std::move(release)); }
  // Moves the storages out; returns the bytes that left a device (0 for
  // CPU storages, and when already asleep).
  int64_t sleep();
  void wake();   // no-op when awake
  bool asleep() const { return asleep_; }
  // Device bytes the registered storages hold while awake.
  int64_t bytes() const;
  // The device memory the process's caching allocator reserves on `device`
  // (0 for the CPU, or without CUDA): what sleep gives back is visible here.
  static int64_t device_reserved_bytes(const torch::Device& device);

 private:
  struct Entry {
    c10::Storage storage;
    torch::Tensor host;  // the bytes while asleep
    size_t bytes = 0;
  };
  std::vector<Entry> entries_;
  std::vector<std::function<void()>> releases_;
  bool asleep_ = false;
};

}  // namespace meshrun
