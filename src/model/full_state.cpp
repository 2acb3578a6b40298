// Full (unsplit) parameters of a tensor-parallel model: each split parameter
// is all-gathered over the tp group and concatenated along its split dim;
// replicated ones are taken as they are. Under expert parallelism each
// expert parameter is all-gathered over the ep group too, each rank's
// tensor standing for its own expert at the same place.
#include "meshrun/model/hf_model.hpp"
#include "layers.hpp"
#include "meshrun/model/expert_placement.hpp"

namespace meshrun {

torch::Tensor shard_of(const ParameterSpec& spec, const torch::Tensor& full, int tp_rank, int tp_size) {
  if (full.sizes().vec() != spec.full_shape)
    throw ModelLoadError("tensor \"" + spec.name + "\" has shape " + c10::str(full.sizes()) + ", the model needs " +
                         c10::str(c10::IntArrayRef(spec.full_shape)));
  if (spec.split_dim < 0 || tp_size == 1) return full;
  const int64_t size = spec.full_shape[spec.split_dim] / tp_size;
  return full.narrow(spec.split_dim, size * tp_rank, size);
}

void gather_whole_parameter(LlamaModel& model, const ParameterSpec& spec, const torch::Tensor& local,
                            std::map<std::string, torch::Tensor>& into) {
  Group* group = model->options().tensor_parallel;
  Group* experts = model->options().expert_parallel;
  torch::Tensor whole = spec.split_dim < 0 || model->tp_size() == 1
                            ? local.clone()
                            : torch::cat(group->all_gather(local.contiguous()), spec.split_dim);
  if (spec.expert < 0 || !experts || experts->size() == 1) {
    into[spec.name] = std::move(whole);
    return;
  }
  const ExpertPlacement placement{spec.experts, experts->size()};
  std::vector<torch::Tensor> peers = experts->all_gather(whole.contiguous());
  for (int q = 0; q < experts->size(); ++q)
    into[expert_parameter_name(spec, placement.at_peer(experts->rank(), spec.expert, q))] = peers[q];
}

std::map<std::string, torch::Tensor> gather_full_state(LlamaModel& model) {
  std::map<std::string, torch::Tensor> full;
  auto parameters = model->named_parameters();
  for (const auto& spec : model->parameter_specs()) gather_whole_parameter(model, spec, parameters[spec.name].detach(), full);
  return full;
}

void scatter_full_state(LlamaModel& model, const std::map<std::string, torch::Tensor>& full) {
  torch::NoGradGuard no_grad;
  auto parameters = model->named_parameters();
  for (const auto& spec : model->parameter_specs()) {
    auto it = full.find(spec.name);
    if (it == full.end()) throw ModelLoadError("full state lacks tensor \"" + spec.name + "\"");
    parameters[spec.name].copy_(shard_of(spec, it->second, model->tp_rank(), model->tp_size()));
  }
}

}  // namespace meshrun
