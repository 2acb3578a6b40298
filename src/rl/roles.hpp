// The model roles on this rank (actor, critic, ref, reward: rows of
// recipe/roles.hpp), shared by the Scoring and Updates stages: each role's
// model, its engine when trained, its mesh groups and its [colocate]
// sleeper; and the forward-pass arithmetic both stages apply to a role's
// outputs (response log-probs, entropy, per-position columns). Internal to
// src/rl.
#pragma once

#include <map>
#include <optional>

#include <torch/torch.h>

#include "meshrun/dist/mesh.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/rollout/generation.hpp"
#include "meshrun/train/frozen_shards.hpp"
#include "meshrun/train/storage_sleep.hpp"
#include "meshrun/train/train_engine.hpp"
#include "rl_internal.hpp"

namespace meshrun::ppo_detail {

// A role's model on this rank: trained (engine) or frozen (model only).
struct RoleSlot {
  Role role = Role::actor;
  const RolePlan* config = nullptr;  // resolved by the plan
  DeviceMesh* mesh = nullptr;
  Group* dp = nullptr;
  Group* tp = nullptr;
  Group* sp = nullptr;  // null: sp 1; otherwise the model computes its share of every row's columns
  std::optional<LlamaModel> model;
  std::unique_ptr<TrainEngine> engine;
  // A role not trained at zero_stage 3: its weights sharded, a unit gathered at a time.
  std::unique_ptr<FrozenShards> shards;
  StorageSleep sleeper;  // [colocate] sleep
  // This rank writes the role's results for its dp slice (first tp and sp rank).
  bool produces() const { return mesh->coordinate(MeshAxis::tp) == 0 && mesh->coordinate(MeshAxis::sp) == 0; }
  RowRange rows(int64_t count) const { return slice_of(count, dp->size(), dp->rank()); }
};

// The roles of the plan that hold this rank, by Role.
class RoleSlots {
 public:
  // Builds every model role of the plan this rank holds, each from the
  // seed (so actor and ref built from the same preset hold the same
  // weights); trained roles get engines scheduled over `optimizer_steps`.
  void build(const Plan& plan, Runtime& runtime, torch::Device device, int64_t optimizer_steps);
  RoleSlot* find(Role role);
  std::map<Role, RoleSlot>& all() { return slots_; }

 private:
  void build_role(const RolePlan& config, Runtime& runtime, torch::Device device, long long seed,
                  int64_t optimizer_steps);
  std::map<Role, RoleSlot> slots_;
};

ModelInputs inputs_for(const SequenceBatch& batch, const torch::Tensor& rows);

// The log-probs [rows, R] of the sampled response tokens (the token at
// prompt_len + t is predicted at prompt_len + t - 1) under the slot's model
// (its engine's when it trains) for `rows`, with the sampling temperature
// applied, and with `entropy` the entropy of those predictions (of the same
// tempered distribution, as veRL and TRL take it). The LM head is fused with
// them (fused_head): without sp only the response's columns go through it;
// with sp each rank's columns do and the whole rows' terms are gathered, so
// every sp rank holds them.
// `entropy_gradient` false: the entropy is a figure, not in the loss.
HeadOutputs response_head(RoleSlot& slot, const SequenceBatch& batch, const torch::Tensor& rows, double temperature,
                          bool entropy, bool entropy_gradient = false);
// The response columns [rows, R] of a per-position output [rows, columns]
// of the slot's model (values, or per-position terms of all its columns).
torch::Tensor response_columns(const torch::Tensor& out, const SequenceBatch& batch, const RoleSlot& slot);

}  // namespace meshrun::ppo_detail
