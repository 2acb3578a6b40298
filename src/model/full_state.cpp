// Full (unsplit) parameters of a tensor-parallel model: each split parameter
// is all-gathered over the tp group and concatenated along its split dim;
// replicated ones are taken as they are.
#include "meshrun/model/hf_model.hpp"
#include "layers.hpp"

namespace meshrun {

torch::Tensor shard_of(const ParameterSpec& spec, const torch::Tensor& full, int tp_rank, int tp_size) {
  if (full.sizes().vec() != spec.full_shape)
    throw ModelLoadError("tensor \"" + spec.name + "\" has shape " + c10::str(full.sizes()) + ", the model needs " +
                         c10::str(c10::IntArrayRef(spec.full_shape)));
  if (spec.split_dim < 0 || tp_size == 1) return full;
  const int64_t size = spec.full_shape[spec.split_dim] / tp_size;
  return full.narrow(spec.split_dim, size * tp_rank, size);
}

std::map<std::string, torch::Tensor> gather_full_state(LlamaModel& model) {
  std::map<std::string, torch::Tensor> full;
  auto parameters = model->named_parameters();
  Group* group = model->options().tensor_parallel;
  for (const auto& spec : model->parameter_specs()) {
    const torch::Tensor local = parameters[spec.name].detach();
    if (spec.split_dim < 0 || model->tp_size() == 1) {
      full[spec.name] = local.clone();
      continue;
    }
    std::vector<torch::Tensor> pieces = group->all_gather(local.contiguous());
    full[spec.name] = torch::cat(pieces, spec.split_dim);
  }
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
