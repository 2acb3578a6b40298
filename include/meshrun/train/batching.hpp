// The plan's step shape as the data loaders take it (data/sampler.hpp's
// Batching): SFT's sequences and DPO/RM's pairs by batch.train and
// train.epochs, RL's prompts by batch.rollout and ppo.num_episodes, all
// shuffled by the recipe's seed. The one place a runner turns its plan into
// a sampler's sizes. Internal to the runners (src/sft, src/preference,
// src/rl).
#pragma once

#include "meshrun/data/sampler.hpp"
#include "meshrun/plan/plan.hpp"

namespace meshrun::train_detail {

inline Batching batching_of(const Plan& plan) {
  Batching batching;
  batching.seed = plan.run.seed;
  const StepPlan& step = plan.step;
  switch (row_of(plan.algorithm).data) {
    case DataShape::prompt:
      // A rollout step takes its prompts whole on every rank (rollout
      // engines split the samples, not the sampler).
      batching.items = BatchItems::prompts;
      batching.global_batch = static_cast<int>(step.prompts);
      batching.micro_batch = static_cast<int>(step.prompts);
      batching.epochs = plan.rl.num_episodes;
      return batching;
    case DataShape::prompt_response:
    case DataShape::preference:
      batching.items = row_of(plan.algorithm).data == DataShape::preference ? BatchItems::pairs : BatchItems::sequences;
      batching.global_batch = static_cast<int>(step.train_batch);
      batching.micro_batch = step.micro_batch;
      batching.epochs = step.data_epochs;
      return batching;
  }
  return batching;
}

}  // namespace meshrun::train_detail
