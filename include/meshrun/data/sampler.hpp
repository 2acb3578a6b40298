// The data-parallel sampler: which sequences each rank trains on, step by
// step, deterministic from the seed and resumable from (epoch, position).
//
// Each epoch visits the sequences in a permutation derived from (seed,
// epoch) only — by a Fisher–Yates shuffle driven by splitmix64 with an
// unbiased bounded draw, never std::shuffle or a std distribution, so it is
// the same on every rank, run and platform. An epoch is cut into global
// batches of `global_batch` sequences (batch.train); the last incomplete
// global batch of an epoch is dropped (every optimizer step sees exactly
// batch.train sequences). Of each global batch, dp rank r takes its share of
// global_batch / dp_size sequences — strided (positions r, r + dp, ...) or
// contiguous (the r-th slice) — and splits it, in order, into grad_accum =
// global_batch / (micro_batch × dp_size) micro-batches of micro_batch
// sequences.
//
// State: `epoch` and `position`, the number of this epoch's permutation
// already consumed (a multiple of global_batch). Restoring a state gives
// exactly the batches an uninterrupted run would have produced next. The
// state does not depend on dp_size or dp_rank, so a run may resume on a
// different number of ranks. It also records num_items, global_batch and
// seed; restoring into a sampler that disagrees is an error rather than a
// silently different data order.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "meshrun/error.hpp"

namespace meshrun {

// splitmix64 (Steele, Lea, Flood 2014): 64-bit state, full period,
// identical everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform in [0, bound), without modulo bias (rejection). bound >= 1.
  uint64_t below(uint64_t bound);

 private:
  uint64_t state_;
};

// The permutation of 0..n-1 for (seed, epoch); n >= 0 (std::logic_error
// otherwise).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

enum class ShardLayout { strided, contiguous };

// What a dataset's items are to a step: sequences (SFT) and pairs (DPO, RM)
// fill batch.train, prompts (RL) batch.rollout. It names the recipe keys and
// the words of a sampler's refusals.
enum class BatchItems { sequences, pairs, prompts };

// How a dataset is cut into steps, as the plan resolved it (StepPlan): the
// loaders' part of the recipe.
struct Batching {
  int global_batch = 8;  // items an optimizer step (RL: a rollout step) takes
  int micro_batch = 1;   // items a micro-step takes, per rank
  int epochs = 1;        // passes over the dataset (RL: episodes)
  int64_t seed = 42;     // of the shuffle
  BatchItems items = BatchItems::sequences;
};

// The one statement of "the data holds fewer items than one step takes": a
// ConfigError at batch.train (batch.rollout for prompts) with the counts and
// `source`, the file (empty: unnamed). Samplers throw it; so does nothing else.
ConfigError too_few_items(BatchItems items, int64_t count, int64_t batch, const std::string& source);

struct SamplerConfig {
  int64_t num_items = 0;  // sequences (packed ones when packing), pairs or prompts
  int global_batch = 8;   // batch.train (prompts: batch.rollout)
  int micro_batch = 1;    // batch.micro_train, per rank
  int dp_size = 1;
  int dp_rank = 0;
  int64_t seed = 42;
  int epochs = 1;
  bool shuffle = true;  // false: dataset order every epoch
  ShardLayout layout = ShardLayout::strided;
  BatchItems items = BatchItems::sequences;
  std::string source;  // the data file, for the errors; empty: unnamed

  // A rank's sampler over `num_items` items cut by `batching`.
  static SamplerConfig of(const Batching& batching, int64_t num_items, int dp_size, int dp_rank,
                          ShardLayout layout, std::string source);
};

struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;
  // What the state was taken from; -1 / nullopt: not checked on restore.
  int64_t num_items = -1;
  int64_t global_batch = -1;
  std::optional<int64_t> seed;

  // {"epoch":E,"position":P,"num_items":N,"global_batch":G,"seed":S}
  std::string to_json() const;
  // Throws CheckpointError naming the bad key.
  static SamplerState from_json(std::string_view text);
  friend bool operator==(const SamplerState&, const SamplerState&) = default;
};

// One optimizer step's share for this rank.
struct SamplerStep {
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  int64_t global_step = 0;  // epoch × steps_per_epoch + step_in_epoch
  std::vector<std::vector<int64_t>> micro_batches;  // grad_accum lists of micro_batch item indices
};

class DistributedSampler {
 public:
  // Throws ConfigError naming the recipe key for an impossible configuration
  // (batch not divisible, fewer items than one global batch, ...) and
  // std::logic_error for a rank out of range.
  explicit DistributedSampler(SamplerConfig config);

  const SamplerConfig& config() const { return config_; }
  int grad_accum() const;
  int64_t steps_per_epoch() const;
  int64_t total_steps() const;        // over all epochs
  int64_t dropped_per_epoch() const;  // items of the incomplete last global batch

  bool done() const;
  int64_t global_step() const;  // steps taken so far
  // The next step for this rank; nullopt after the last epoch.
  std::optional<SamplerStep> next();

  // The items of global batch `step_in_epoch` of `epoch`, all ranks', in
  // permutation order.
  std::vector<int64_t> global_batch(int64_t epoch, int64_t step_in_epoch);

  SamplerState state() const;
  // Throws when the state does not fit this sampler: ConfigError (batch.train
  // or seed changed) or CheckpointError (anything else).
  void restore(const SamplerState& state);

 private:
  const std::vector<int64_t>& permutation(int64_t epoch);

  SamplerConfig config_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_permutation_;
};

}  // namespace meshrun
