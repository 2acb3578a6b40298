// The model roles on this rank and their forward-pass arithmetic
// (roles.hpp).
#include "roles.hpp"

#include <spdlog/spdlog.h>

#include "meshrun/model/hf_model.hpp"
#include "meshrun/train/trainer_output.hpp"

namespace meshrun::ppo_detail {

namespace {

// With sp > 1 the model's outputs are this rank's columns of the whole rows;
// the response is a run of columns spread over the sp ranks, so the
// per-position terms are computed on every local column and then gathered.
bool split(const RoleSlot& slot) { return slot.sp != nullptr; }

// The model roles, in the order they are built (each from the seed).
constexpr Role kBuildOrder[] = {Role::actor, Role::critic, Role::ref, Role::reward};

}  // namespace

void RoleSlots::build(const Plan& plan, Runtime& runtime, torch::Device device, int64_t optimizer_steps) {
  for (Role role : kBuildOrder) {
    const RolePlan* config = plan.role(role);
    if (config && !config->model.empty()) build_role(*config, runtime, device, plan.run.seed, optimizer_steps);
  }
}

void RoleSlots::build_role(const RolePlan& config, Runtime& runtime, torch::Device device, long long seed,
                           int64_t optimizer_steps) {
  DeviceMesh& mesh = runtime.mesh(config.role);
  if (!mesh.holds_this_rank()) return;
  RoleSlot& slot = slots_[config.role];
  slot.role = config.role;
  slot.config = &config;
  slot.mesh = &mesh;
  slot.dp = &mesh.group(MeshAxis::dp);
  slot.tp = mesh.tp() > 1 ? &mesh.group(MeshAxis::tp) : nullptr;
  slot.sp = mesh.sp() > 1 ? &mesh.group(MeshAxis::sp) : nullptr;
  ModelOptions options = train_detail::model_options_for(config, mesh, device);
  options.head = row_of(config.role).head == RoleHead::value ? ModelHead::value : ModelHead::language_model;
  torch::manual_seed(seed);
  LlamaModel model = load_hf_model(config.model, options);
  if (config.trained) {
    slot.engine = std::make_unique<TrainEngine>(model, mesh, EngineOptions::from_plan(config, optimizer_steps));
  } else {
    model->eval();
    for (auto& parameter : model->parameters()) parameter.set_requires_grad(false);
    // As the planner counts it (inference_role_memory): N / (dp × sp) a process and one unit.
    if (config.zero_stage == 3) {
      slot.shards = std::make_unique<FrozenShards>(model, mesh);
      if (mesh.coordinate(MeshAxis::dp) == 0 && mesh.coordinate(MeshAxis::tp) == 0 && mesh.coordinate(MeshAxis::sp) == 0)
        spdlog::info("{}: ZeRO-3 holds {} of its {} weight bytes a process, one unit gathered at a time",
                     config.name, slot.shards->shard_bytes(), slot.shards->weight_bytes());
    }
  }
  slot.model = model;
  slot.sleeper.add(slot.engine ? slot.engine->memory() : slot.shards ? slot.shards->memory() : model->parameters());
}

RoleSlot* RoleSlots::find(Role role) {
  auto found = slots_.find(role);
  return found == slots_.end() ? nullptr : &found->second;
}

ModelInputs inputs_for(const SequenceBatch& batch, const torch::Tensor& rows) {
  return ModelInputs{batch.sequences.index_select(0, rows), {}, {}, batch.attention_mask.index_select(0, rows)};
}

torch::Tensor response_columns(const torch::Tensor& out, const SequenceBatch& batch, const RoleSlot& slot) {
  return (*slot.model)->whole_rows(out, batch.sequences.size(1)).narrow(1, batch.prompt_len - 1, batch.response_len);
}

HeadOutputs response_head(RoleSlot& slot, const SequenceBatch& batch, const torch::Tensor& rows, double temperature,
                          bool entropy, bool entropy_gradient) {
  const int64_t p = batch.prompt_len, r = batch.response_len;
  FusedHeadOptions head;
  head.temperature = temperature;
  head.entropy = entropy;
  head.entropy_gradient = entropy_gradient;
  ModelInputs inputs = inputs_for(batch, rows);
  // Routing replay: the routes the engines recorded are the policy's.
  if (slot.role == Role::actor && batch.routes.defined()) inputs.routes = batch.routes.index_select(0, rows);
  const torch::Tensor sequences = batch.sequences.index_select(0, rows);
  const auto forward = [&](const torch::Tensor& labels, int64_t first_column) {
    return slot.engine ? slot.engine->forward_log_probs(inputs, labels, head, first_column)
                       : (*slot.model)->forward_log_probs(inputs, labels, head, first_column);
  };
  if (!split(slot)) return forward(sequences.narrow(1, p, r), p - 1);
  // Column c predicts the token at c + 1 (the last column predicts nothing).
  const int64_t length = sequences.size(1);
  const torch::Tensor next = torch::cat({sequences.narrow(1, 1, length - 1), torch::zeros_like(sequences.narrow(1, 0, 1))}, 1);
  const SequenceShard shard = (*slot.model)->sequence_shard(length, sequences.device());
  HeadOutputs out = forward(shard.take(next, 0), 0);
  out.log_probs = response_columns(out.log_probs, batch, slot);
  if (entropy) out.entropy = response_columns(out.entropy, batch, slot);
  return out;
}

}  // namespace meshrun::ppo_detail
