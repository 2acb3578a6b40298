// TrainEngine on a LlamaModel (include/meshrun/train/train_engine.hpp): its specs,
// unit hooks and checkpointing switch.
#include "engine_core.hpp"
#include "meshrun/dist/mesh.hpp"

namespace meshrun {

TrainableModel TrainableModel::of(const LlamaModel& model) {
  TrainableModel trainable = from_module(model.ptr(), model->parameter_specs(), model->num_units());
  LlamaModelImpl* impl = model.ptr().get();
  trainable.set_unit_hooks = [impl](ModelUnitHooks* hooks) { impl->set_unit_hooks(hooks); };
  trainable.set_gradient_checkpointing = [impl](bool on) { impl->set_gradient_checkpointing(on); };
  return trainable;
}

TrainEngine::TrainEngine(LlamaModel model, Group* dp, Group* tp, EngineOptions options, ExpertGroups experts)
    : TrainEngine(TrainableModel::of(model), dp, tp, std::move(options), experts) {
  llama_ = std::move(model);
}

TrainEngine::TrainEngine(LlamaModel model, DeviceMesh& mesh, EngineOptions options)
    : TrainEngine(model, mesh.dp() * mesh.sp() > 1 ? &mesh.replica_group() : nullptr,
                  mesh.tp() > 1 ? &mesh.group(MeshAxis::tp) : nullptr, std::move(options),
                  ExpertGroups{mesh.expert_parallel_group(), mesh.expert_replica_group()}) {}

}  // namespace meshrun
