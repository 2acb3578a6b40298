// Internal to the RL stages (src/rl/*.cpp): the world exchanges that move
// a step's data between ranks, and the hook points' view of trajectories.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "meshrun/dist/dist.hpp"
#include "meshrun/rollout/generation.hpp"
#include "meshrun/hooks/hooks.hpp"
#include "meshrun/data/prompts.hpp"
#include "meshrun/rl/math.hpp"
#include "meshrun/rl/trajectory.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "meshrun/train/train_engine.hpp"

namespace meshrun::ppo_detail {

// Rows [begin, end) of `count` split as evenly as possible over `parts`.
struct RowRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
RowRange slice_of(int64_t count, int parts, int part);

// One engine's samples of a round: rows [begin, begin + samples.size())
// of the step's, and their episodes (empty: single-turn).
struct ProducedSlice {
  int64_t begin = 0;
  std::vector<GeneratedSample> samples;
  std::vector<EpisodeRecord> episodes;
};

// Gives every rank every engine's trajectories (sample, loss mask =
// policy mask, episode): each engine's first rank contributes its slices,
// everyone else nothing; widths are bounded by the recipe's max lengths
// (a trajectory's prompt and response). The policy masks (and episodes'
// records) travel only with `episodes` (multi-turn): single responses have
// none, and the exchange stays its old size; likewise the tokens' policy
// versions only with `versions` (partial rollouts). The rest of each
// trajectory is the caller's to fill.
// Routing replay: each sample's recorded routes travel too, RouteShape's
// sparse layers × experts per token for every position (zero: none).
struct RouteShape {
  int32_t layers = 0, picks = 0;
};
std::vector<Trajectory> share_trajectories(const std::vector<ProducedSlice>& local, int64_t total, int64_t max_prompt,
                                           int64_t max_response, bool episodes, bool versions, Group& world,
                                           RouteShape routes = {});

// Sums a float tensor over the world in place (producers fill their rows,
// the others leave zeros).
void share_sum(torch::Tensor& tensor, Group& world);

// (name, full shape) of every parameter of a model, in an order every rank
// knows.
using ParameterShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// The actor's new weights into this rank's engine models. `full`: the
// actor's full weights on its ranks (empty elsewhere). When every engine
// rank holds the actor (colocated), each engine takes its shards from its
// own copy; otherwise every tensor of `shapes` is broadcast over `world`
// from global rank `source` (every rank of the world must call this).
void send_weights_to_engines(NamedTensors full, const ParameterShapes& shapes, bool engines_hold_actor, int source,
                             const std::vector<LlamaModel*>& engines, Group& world);

// Runs `call` on rank 0 and tells every rank whether it failed: on failure
// every rank throws a hook-kind Error with rank 0's message.
void on_rank0_or_fail_everywhere(Group& world, const std::string& hook_point, const std::function<void()>& call);

// Runs `call` on every rank and tells every rank whether any failed: then
// every rank throws a hook-kind Error with the first failing rank's message.
void on_every_rank_or_fail_everywhere(Group& world, const std::string& hook_point, const std::function<void()>& call);

}  // namespace meshrun::ppo_detail

namespace meshrun::ppo_detail {

struct HookContext;

// What the hook points of a step see besides its trajectories, shared by
// the stages that call hooks (on_rollout in Rollouts, reward in Scoring).
struct HookResources {
  HookScript* script = nullptr;             // null: no hook script
  const Tokenizer* tokenizer = nullptr;
  // Labels: each trajectory's prompt row in `prompts` (batch:label(i));
  // null: no labels.
  const PromptDataset* prompts = nullptr;
  int64_t group_size = 1;                   // n_samples_per_prompt

  HookContext context(int64_t step, RowRange rows) const;
};

// One call of a hook point (on rank 0, or each rank's share with [hooks]
// parallel), with the step's tensors as views.
struct HookContext {
  HookResources resources;
  int64_t step = 0;
  // The samples the hook sees: rows [begin, end) of the step's; sample i of
  // the batch is row begin + i.
  RowRange rows;
};

inline HookContext HookResources::context(int64_t step, RowRange rows) const { return HookContext{*this, step, rows}; }

// on_rollout over every trajectory: may rewrite response tokens (in
// `trajectories`) and drop trajectories (`keep` 0).
void call_on_rollout(const HookContext& context, const std::string& function, std::vector<Trajectory>& trajectories,
                     std::vector<uint8_t>& keep);
// reward over context.rows of the step's trajectories (with their model
// rewards); one value per row.
std::vector<double> call_reward(const HookContext& context, const std::string& function,
                                const std::vector<Trajectory>& trajectories);

}  // namespace meshrun::ppo_detail
