// The actor-only runners' shared setup (actor_setup.hpp).
#include "meshrun/train/actor_setup.hpp"

#include <algorithm>
#include <stdexcept>

#include "meshrun/dist/dist.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/train/run_shell.hpp"

namespace meshrun::train_detail {

ActorSlot ActorSlot::of(const Plan& plan, Runtime& runtime) {
  const RolePlan* role = plan.role(Role::actor);
  if (!role) throw std::logic_error("a plan without an actor");
  DeviceMesh& mesh = runtime.mesh(Role::actor);
  if (!mesh.holds_this_rank())
    throw DistError("rank " + std::to_string(runtime.launch().rank) + " holds no part of the actor, the only placed "
                    "role of a " + name_of(plan.algorithm) + " run");
  ActorSlot slot{*role, mesh};
  slot.dp = &mesh.group(MeshAxis::dp);
  slot.tp = mesh.tp() > 1 ? &mesh.group(MeshAxis::tp) : nullptr;
  slot.sp = mesh.sp() > 1 ? &mesh.group(MeshAxis::sp) : nullptr;
  return slot;
}

void check_vocabulary(const LlamaModel& model, const Tokenizer& tokenizer, const std::string& model_name) {
  const int64_t vocab = model->options().config.vocab;
  if (vocab < tokenizer.vocab_size())
    throw ModelLoadError("the tokenizer (" + tokenizer.description() + ") has " +
                         std::to_string(tokenizer.vocab_size()) + " tokens but the model " + model_name + " only " +
                         std::to_string(vocab));
}

int64_t planned_steps(int64_t data_steps, const RunPlan& run) {
  const int64_t steps = capped_steps(data_steps, run);
  if (steps <= 0) throw std::logic_error("planned_steps: " + std::to_string(data_steps) + " steps from the sampler");
  return steps;
}

}  // namespace meshrun::train_detail
