// The model roles on this rank and their forward-pass arithmetic
// (roles.hpp).
#include "roles.hpp"

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
  }
  slot.model = model;
  slot.sleeper.add(slot.engine ? slot.engine->memory() : model->parameters());
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

torch::Tensor response_log_probs(const torch::Tensor& logits, const SequenceBatch& batch, const torch::Tensor& rows,
                                 const RoleSlot& slot, double temperature) {
  const int64_t p = batch.prompt_len, r = batch.response_len;
  const auto tempered = [temperature](const torch::Tensor& x) {
    return temperature > 0 && temperature != 1.0 ? x / temperature : x;
  };
  const torch::Tensor sequences = batch.sequences.index_select(0, rows);
  if (!split(slot))
    return vocab_parallel_log_probs(tempered(logits.narrow(1, p - 1, r)), sequences.narrow(1, p, r), slot.tp);
  // Column c predicts the token at c + 1 (the last column predicts nothing).
  const int64_t length = sequences.size(1);
  const torch::Tensor next = torch::cat({sequences.narrow(1, 1, length - 1), torch::zeros_like(sequences.narrow(1, 0, 1))}, 1);
  const SequenceShard shard = (*slot.model)->sequence_shard(length, logits.device());
  return response_columns(vocab_parallel_log_probs(tempered(logits), shard.take(next, 0), slot.tp), batch, slot);
}

torch::Tensor response_entropy(const torch::Tensor& logits, const SequenceBatch& batch, const RoleSlot& slot) {
  if (!split(slot)) return vocab_parallel_entropy(logits.narrow(1, batch.prompt_len - 1, batch.response_len), slot.tp);
  return response_columns(vocab_parallel_entropy(logits, slot.tp), batch, slot);
}

}  // namespace meshrun::ppo_detail
