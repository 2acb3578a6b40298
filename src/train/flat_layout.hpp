// Flat buffers of the training engine (private to src/train).
//
// A bucket is a run of parameters stored back to back in one 1-D buffer,
// padded to a multiple of the data-parallel size so that it splits into
// equal shards (rank r owns [r * shard, (r + 1) * shard)). Parameters,
// gradients and optimizer shards are views into such buffers, so one
// collective or one fused optimizer kernel covers a whole bucket.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "meshrun/dist/dist.hpp"
#include "meshrun/train/optimizer.hpp"

namespace meshrun::train_detail {

struct FlatEntry {
  int parameter = 0;             // index into the engine's parameter list
  std::int64_t offset = 0;       // first element in the flat buffer
  std::int64_t numel = 0;
  std::vector<std::int64_t> shape;  // the local (tp-shard) shape
  bool decays = true;
  bool tp_split = false;  // split over tensor parallel (counted per rank in the norm)
};

struct FlatLayout {
  std::vector<FlatEntry> entries;  // in buffer order
  std::int64_t numel = 0;          // sum of the entries
  std::int64_t padded_numel = 0;   // a multiple of shards, >= numel (0 only when empty)
  std::int64_t shard_numel = 0;
  int shards = 1;

  std::int64_t shard_begin(int rank) const { return rank * shard_numel; }
  // The runs (merged, relative to `begin`) of [begin, end) where entries
  // satisfy `which` (decays, tp_split).
  ElementRanges ranges_within(std::int64_t begin, std::int64_t end, bool FlatEntry::*which) const;
};

struct FlatParameterInfo {
  int parameter = 0;
  std::vector<std::int64_t> shape;
  bool decays = true;
  bool tp_split = false;
};

// Lays `parameters` out back to back; shards >= 1.
FlatLayout make_flat_layout(const std::vector<FlatParameterInfo>& parameters, int shards);

// Groups parameter indices into buckets of about `bucket_bytes`, walking
// `backward_order` (the order gradients become ready: last unit first). A
// parameter larger than a bucket gets a bucket of its own; every bucket
// holds at least one parameter.
std::vector<std::vector<int>> assign_buckets(const std::vector<int>& backward_order,
                                             const std::vector<std::int64_t>& parameter_bytes,
                                             std::int64_t bucket_bytes);

// The view of `entry` in `flat` (shape entry.shape).
torch::Tensor entry_view(const torch::Tensor& flat, const FlatEntry& entry);

// Storage of a flat buffer that exists only part of the time (ZeRO-3
// parameters between gather and release, gradients during backward): views
// keep pointing into the same storage, so autograd's saved tensors see the
// re-gathered values. Reading a released buffer is a bug the engine
// prevents; has_storage() tells.
void release_storage(const torch::Tensor& flat);
void restore_storage(const torch::Tensor& flat);
bool has_storage(const torch::Tensor& flat);
// Restores `flat` and fills it with every rank's `shard` (ZeRO-3's gather,
// trained or frozen): an all-gather over `group`, or a copy when it is null
// (this rank alone).
void gather_into(Group* group, const torch::Tensor& flat, const torch::Tensor& shard);

}  // namespace meshrun::train_detail
