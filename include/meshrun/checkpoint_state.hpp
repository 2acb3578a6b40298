// Training state read back out of a checkpoint, whatever layout wrote it:
// the reassembly of every rank's engine shards (meshrun/shard_map.hpp) into
// full per-parameter tensors, for resuming under another dp / tp / ZeRO
// layout (resharding, as DeepSpeed's universal checkpoint does) and for
// exporting a role's model as a Hugging Face directory (`meshrun ckpt
// convert`).
//
// A checkpoint directory (global_step_N, see meshrun/checkpoint.hpp) holds
// rank-<R>.safetensors for R = 0..W-1; a rank file keeps a role's engine
// state under "<role>/bucket.<i>.master|exp_avg|exp_avg_sq" (fp32),
// "<role>/step" and "<role>/loss_scale", and in its metadata the role's
// shard map, its model's config.json text and its head.
//
// Invariants: assembly is exact (the tensors are copies of the saved fp32
// values, never recomputed); it refuses, naming the role, rank and
// elements, a checkpoint whose ranks do not cover every element of every
// parameter, or whose tp ranks disagree on a parameter. Assembly holds the
// full fp32 state of one role (three times its parameters) in CPU memory.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshrun/model_config.hpp"
#include "meshrun/shard_map.hpp"
#include "meshrun/train_engine.hpp"

namespace meshrun {

class SafetensorsFile;

// One rank's share of a role's engine state: its shard map, and its tensors
// by local-state key ("bucket.0.master", "step", ...).
struct RankShards {
  ShardMap map;
  std::function<torch::Tensor(const std::string& key)> load;
  std::string origin;  // where it came from, for errors
};

// The full state from the shards of every rank of one role (in any order).
// Throws CheckpointError naming what is missing or inconsistent.
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
  // The role's model, for export (saved with the state).
  ModelConfig model_config(const std::string& role) const;
  ModelHead model_head(const std::string& role) const;
  // One tensor of rank file `rank` (e.g. "rng/cpu"); throws CheckpointError
  // when it is missing.
  torch::Tensor tensor(int rank, const std::string& name) const;
  bool has_tensor(int rank, const std::string& name) const;

 private:
  // The first rank file with metadata `key`, and its value; throws
  // CheckpointError naming `what` when none has it.
  std::pair<int, const std::string*> find_metadata(const std::string& key, const std::string& what) const;
  std::string directory_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace meshrun
