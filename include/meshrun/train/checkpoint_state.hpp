// Training state read back out of a checkpoint, whatever layout wrote it:
// the reassembly of every rank's engine shards (meshrun/ckpt/shard_map.hpp) into
// full per-parameter tensors, for resuming under another dp / tp / ZeRO
// layout (resharding, as DeepSpeed's universal checkpoint does) and for
// exporting a role's model as a Hugging Face directory (`meshrun ckpt
// convert`).
//
// A checkpoint directory (global_step_N, see meshrun/ckpt/checkpoint.hpp) holds
// rank-<R>.safetensors for R = 0..W-1; a rank file keeps a role's engine
// state under "<role>/bucket.<i>.master|exp_avg|exp_avg_sq" (fp32),
// "<role>/step" and "<role>/loss_scale", and in its metadata the role's
// shard map, its model's config.json text and its head.
//
// Invariants: assembly is exact (the tensors are copies of the saved fp32
// values, never recomputed); it refuses, naming the role, rank and
// elements, a checkpoint whose ranks do not cover every element of every
// parameter, or whose tp ranks disagree on a parameter. A ShardedStateSource
// reads one parameter at a time, and from each rank file only the elements
// of that parameter (a slice of the mapped file), so resuming under another
// layout holds at most one full parameter beside the engine;
// assemble_full_state and CheckpointReader::full_state hold the whole role.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshrun/arch/model_config.hpp"
#include "meshrun/ckpt/shard_map.hpp"
#include "meshrun/train/train_engine.hpp"

namespace meshrun {

class SafetensorsFile;

// One rank's share of a role's engine state: its shard map, and its tensors
// by local-state key ("bucket.0.master", "step", ...): elements [start,
// start + length) of the 1-D tensor `key` (fewer when it is shorter: the
// source checks), or all of it when length < 0.
struct RankShards {
  ShardMap map;
  std::function<torch::Tensor(const std::string& key, std::int64_t start, std::int64_t length)> load;
  std::string origin;  // where it came from, for errors
};

// One role's full state out of the shards of every rank that held it (in
// any order), one parameter at a time. The constructor checks that every tp
// rank is there and that the ranks agree on tp size and buckets; tensor()
// that the dp shards cover the parameter. Both throw CheckpointError.
class ShardedStateSource : public FullStateSource {
 public:
  // `context` (the checkpoint and role) prefixes every error.
  explicit ShardedStateSource(std::vector<RankShards> ranks, std::string context = "");
  ShardedStateSource(const ShardedStateSource&) = delete;  // holds pointers into ranks_
  ShardedStateSource& operator=(const ShardedStateSource&) = delete;
  std::int64_t step() const override;
  double loss_scale() const override;
  bool has_moments() const override { return true; }
  torch::Tensor tensor(StatePart part, const std::string& name) const override;
  // Every parameter, sorted by name.
  std::vector<std::string> names() const;

 private:
  // A one-value tensor of the first rank's file ("step"), or a CheckpointError.
  torch::Tensor scalar(const std::string& key) const;
  struct Located {
    const ShardEntry* entry = nullptr;  // in the bucket of the first of tp rank t's shards that holds it
    std::size_t bucket = 0;
    int ep_rank = -1;  // the bucket's (ShardBucket::ep_rank): only its ranks' shards hold it
  };
  [[noreturn]] void fail(const std::string& message) const;
  std::vector<RankShards> ranks_;
  std::string context_;
  std::vector<std::vector<const RankShards*>> by_tp_;  // tp rank -> its dp shards
  std::map<std::string, std::vector<Located>> located_;  // name -> per tp rank
};

// The whole full state (every parameter; the moments when with_moments).
FullTrainingState assemble_full_state(const std::vector<RankShards>& ranks, bool with_moments);

// "rank-<R>.safetensors".
std::string rank_file_name(int rank);

// A complete checkpoint directory, read under any layout. Opening maps the
// rank files and reads their headers only.
class CheckpointReader {
 public:
  // Throws CheckpointError when rank-0 .. rank-(W-1) are not all there or a
  // rank file is unreadable.
  explicit CheckpointReader(std::string directory);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& directory() const { return directory_; }
  int world_size() const { return static_cast<int>(files_.size()); }
  // The roles whose engine state the rank files hold (with shard maps).
  std::vector<std::string> roles() const;
  FullTrainingState full_state(const std::string& role, bool with_moments = true) const;
  // The role's state for TrainEngine::load_full_state, read lazily; it
  // refers to this reader's mapped files and must not outlive it.
  std::unique_ptr<ShardedStateSource> state_source(const std::string& role) const;
  // The role's model, for export (saved with the state).
  ModelConfig model_config(const std::string& role) const;
  ModelHead model_head(const std::string& role) const;
  // One tensor of rank file `rank` (e.g. "rng/cpu"); throws CheckpointError
  // when it is missing.
  torch::Tensor tensor(int rank, const std::string& name) const;
  bool has_tensor(int rank, const std::string& name) const;

 private:
  std::vector<RankShards> rank_shards(const std::string& role) const;
  // The first rank file with metadata `key`, and its value; throws
  // CheckpointError naming `what` when none has it.
  std::pair<int, const std::string*> find_metadata(const std::string& key, const std::string& what) const;
  std::string directory_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace meshrun
