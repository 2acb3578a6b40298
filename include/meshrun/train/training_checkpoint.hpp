// Saving and resuming a trainer's state through a CheckpointDir
// (include/meshrun/ckpt/checkpoint.hpp). Internal to src/train; the SFT and PPO
// trainers decide what their state is.
//
// Per checkpoint: every rank writes rank-<R>.safetensors (its engines'
// local state under "<role>/..." with each role's shard map and model in
// the file's metadata, and its random states as "rng/cpu" and, on a GPU,
// "rng/cuda"); rank 0 writes trainer_state.json (the trainer's JSON: step,
// sampler state, ...); the trainer may add files (save_hf: hf/actor,
// hf/critic); then a barrier, rank 0 commits and rotates, and a barrier.
// The checkpoint root must be one filesystem seen by every rank.
//
// A RankState holds views of the engines' buffers (no copy): a synchronous
// save writes them before training goes on. With [checkpoint] async, save()
// copies them into staging buffers in CPU memory (allocated at the first
// save and reused; pinned for GPU tensors) and returns; a background thread
// writes the files, and the checkpoint is committed by the first poll()
// after every rank has finished writing (poll() is collective and cheap:
// one small all-reduce per step while a save is in flight). finish() waits
// and commits; a new save() first finishes the one before. A crash before
// the commit leaves a partial directory, removed at the next start, and the
// previous checkpoint intact, as with a synchronous save.
//
// Resuming under the layout that saved the checkpoint restores each rank's
// own shards exactly; under another layout (world size, dp, tp, ZeRO stage,
// dtype, bucket size) each engine is loaded from the full state reassembled
// from every rank file (meshrun/train/checkpoint_state.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/train/checkpoint_state.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/train/train_engine.hpp"

namespace meshrun::train_detail {

// What one rank puts into its rank file.
struct RankState {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;

  // The engine's local state under "<role>/", its shard map, and the
  // model's config and head (for resharding and export).
  void add_engine(const std::string& role, TrainEngine& engine, const ModelConfig& config, ModelHead head,
                  Precision dtype);
  // "rng/cpu", and "rng/cuda" of `device` when it is a CUDA device.
  void add_rng_states(const torch::Device& device);
};

struct ResumePoint {
  int64_t step = 0;
  NamedTensors tensors;    // this rank's rank file (same layout), or its "rng/*" (resharding)
  nlohmann::json trainer;  // trainer_state.json (an object)
  std::string trainer_file;  // its path, for messages
  // Set when the checkpoint was saved under another layout.
  std::shared_ptr<const CheckpointReader> reshard_from;
  std::string saved_layout;

  // Loads `role`'s engine: its own shards, or its part of the reassembled
  // full state when resharding. Collective over the engine's groups.
  void restore_engine(const std::string& role, TrainEngine& engine) const;
  // The random states saved by this rank (by rank % saved world when resharding).
  void restore_rng_states(const torch::Device& device) const;
  // trainer_state.json's `key`: missing, mistyped, not finite or below
  // `least` is a CheckpointError naming the file and the key (a checkpoint
  // whose manifest verifies can still hold what a bug or a hand wrote).
  const nlohmann::json& trainer_field(const std::string& key) const;
  double trainer_number(const std::string& key, double least) const;
  int64_t trainer_integer(const std::string& key, int64_t least) const;
};

class TrainingCheckpointer {
 public:
  // `run`: the resolved checkpoint policy; `layout`: the world layout the
  // rank files belong to (manifest.layout).
  TrainingCheckpointer(const RunPlan& run, Group& world, std::string layout);
  // Waits for a background write still under way (never commits it: that
  // takes every rank).
  ~TrainingCheckpointer();
  TrainingCheckpointer(const TrainingCheckpointer&) = delete;
  TrainingCheckpointer& operator=(const TrainingCheckpointer&) = delete;

  // Collective. Rank 0 removes partial checkpoints and picks one by
  // [checkpoint] load (warnings logged); every rank verifies the files it
  // reads (in parallel) and a checkpoint is taken when all of them verify.
  std::optional<ResumePoint> resume();

  // Collective. `state`: this rank's file; `write_extra`, called on every
  // rank with the directory being written, may add files there (the HF
  // export, by the rank that holds the full weights).
  // With async, write_extra runs in the background thread: it must own
  // what it writes (capture by value).
  void save(int64_t step, const RankState& state, const nlohmann::json& trainer,
            const std::function<void(const std::string& directory)>& write_extra = {});
  // Collective, after every step: commits a pending async save once every
  // rank has written its files. Throws CheckpointError when a rank failed.
  void poll() { settle(false); }
  // Collective: waits for a pending async save and commits it.
  void finish() { settle(true); }
  // The step of an async save not committed yet.
  std::optional<int64_t> pending_step() const;

  const CheckpointDir& dir() const { return dir_; }

 private:
  struct Pending {
    int64_t step = 0;
    std::future<void> written;
    int status = 0;  // 0 writing, 1 written, -1 failed (error)
    std::string error;
  };
  void write_files(const std::string& partial, const RankState& state, const nlohmann::json& trainer,
                   const std::function<void(const std::string&)>& write_extra) const;
  void commit(int64_t step) const;  // rank 0
  void settle(bool wait);

  // Async: the snapshot's CPU copies, by tensor name, reused by every save.
  RankState stage(const RankState& state);

  RunPlan run_;
  Group& world_;
  std::string layout_;
  CheckpointDir dir_;
  std::optional<Pending> pending_;
  NamedTensors staging_;
};

// Keys of `tensors` that start with "<prefix>/", without the prefix.
NamedTensors with_prefix_removed(const NamedTensors& tensors, const std::string& prefix);

}  // namespace meshrun::train_detail
