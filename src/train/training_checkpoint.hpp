// Saving and resuming a trainer's state through a CheckpointDir
// (include/meshrun/checkpoint.hpp). Internal to src/train; the SFT and PPO
// trainers decide what their state is.
//
// Per checkpoint: every rank writes rank-<R>.safetensors (its engines'
// local state under "<role>/...", and its CPU random state as "rng/cpu");
// rank 0 writes trainer_state.json (the trainer's JSON: step, sampler
// state, ...); the trainer may add files (save_hf: hf/actor, hf/critic);
// then a barrier, rank 0 commits and rotates, and a barrier.
// The checkpoint root must be one filesystem seen by every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "meshrun/checkpoint.hpp"
#include "meshrun/dist.hpp"
#include "meshrun/recipe.hpp"
#include "meshrun/train_engine.hpp"

namespace meshrun::train_detail {

struct ResumePoint {
  int64_t step = 0;
  NamedTensors tensors;     // this rank's rank-<R>.safetensors
  nlohmann::json trainer;   // trainer_state.json
};

class TrainingCheckpointer {
 public:
  // `layout`: the world layout the rank files belong to (manifest.layout).
  TrainingCheckpointer(const Recipe& recipe, Group& world, std::string layout);

  // Collective. Rank 0 removes partial checkpoints and picks one by
  // [checkpoint] load (warnings logged); every rank then reads its file.
  // A checkpoint of another layout is an error naming both layouts.
  std::optional<ResumePoint> resume();

  // Whether `step` (1-based, `last` for the final one) is a save point.
  bool due(int64_t step, bool last) const;

  // Collective. `tensors`: this rank's state; `write_extra`, called on
  // every rank with the directory being written, may add files there (the
  // HF export, by the rank that holds the full weights).
  void save(int64_t step, const NamedTensors& tensors, const nlohmann::json& trainer,
            const std::function<void(const std::string& directory)>& write_extra = {});

  const CheckpointDir& dir() const { return dir_; }

 private:
  const Recipe& recipe_;
  Group& world_;
  std::string layout_;
  CheckpointDir dir_;
};

// The CPU random state as a tensor, and back.
torch::Tensor cpu_rng_state();
void set_cpu_rng_state(const torch::Tensor& state);

// Keys of `tensors` that start with "<prefix>/", without the prefix.
NamedTensors with_prefix_removed(const NamedTensors& tensors, const std::string& prefix);

}  // namespace meshrun::train_detail
