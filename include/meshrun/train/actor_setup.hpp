// What SFT, DPO and reward models share before their first step: the actor
// is their only placed role, so every rank holds part of it; its groups;
// the check that the tokenizer fits its vocabulary; and the planned steps
// (the data's complete global batches, capped by max_steps), refused when
// the data gives none. Internal to the actor-only runners (src/sft,
// src/preference).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "meshrun/dist/mesh.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"

namespace meshrun::train_detail {

struct ActorSlot {
  const RolePlan& role;
  DeviceMesh& mesh;
  Group* dp = nullptr;
  Group* tp = nullptr;  // null: tp 1
  Group* sp = nullptr;  // null: sp 1

  // Throws DistError when this rank holds no part of the actor (the plan
  // of an actor-only algorithm places it on every rank).
  static ActorSlot of(const Plan& plan, Runtime& runtime);
};

// Throws ModelLoadError when the tokenizer has ids the model cannot embed.
void check_vocabulary(const LlamaModel& model, const Tokenizer& tokenizer, const std::string& model_name);

// The steps the run plans: `data_steps` (at least one: the sampler refuses
// data short of one batch, data/sampler.hpp's too_few_items) capped by
// max_steps.
int64_t planned_steps(int64_t data_steps, const RunPlan& run);

}  // namespace meshrun::train_detail
