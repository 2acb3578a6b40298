// FrozenShards: ZeRO-3 for a role that is not trained (a PPO reference or
// reward model with roles.NAME.zero_stage = 3). Each unit's weights (the
// embedding, a decoder layer, the final norm with the head; a tied
// embedding serves the first and the last) become one flat buffer, of
// which this rank keeps its 1 / z shard (z: the role's dp × sp replicas;
// experts under ep: their replicas); the model's unit hooks all-gather a
// unit's buffer before its forward and free it after. So a process holds
// N / z of the weights plus one unit at a time, what the planner counts
// (src/plan/memory.cpp, inference_role_memory), as peers shard a frozen
// reference (OpenRLHF's ZeRO-3 inference, veRL's FSDP ref).
//
// Invariants: forward only (under no-grad: a gathered unit is freed when
// its forward ends); every rank of a replica group runs the same forwards
// (the gathers are collectives), as it does for a trained ZeRO-3 role.
// The model's parameters are views of the flat buffers: read them only
// between a unit's before_unit and after_unit. Detaches itself from the
// model when destroyed.
#pragma once

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "meshrun/dist/mesh.hpp"
#include "meshrun/model/model.hpp"

namespace meshrun {

class FrozenShards final : public ModelUnitHooks {
 public:
  FrozenShards(const LlamaModel& model, DeviceMesh& mesh);
  ~FrozenShards() override;
  FrozenShards(const FrozenShards&) = delete;
  FrozenShards& operator=(const FrozenShards&) = delete;

  void before_unit(int unit) override;
  torch::Tensor after_unit(int unit, torch::Tensor output) override;

  // The shards and the flat buffers (free between gathers): for
  // StorageSleep, and what a process holds of the weights.
  std::vector<torch::Tensor> memory() const;
  // Bytes of this rank's shards, and of the whole model's weights.
  int64_t shard_bytes() const;
  int64_t weight_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshrun
