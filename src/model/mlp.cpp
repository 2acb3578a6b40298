// The SwiGLU MLP, down(silu(gate(x)) × up(x)); gate and up column-parallel,
// down row-parallel. And the decoder layer around attention and MLP.
#include "layers.hpp"

namespace meshrun::model_detail {

MlpImpl::MlpImpl(const ModelConfig& config, const TensorParallel& tp, const torch::TensorOptions& options) : tp_(tp) {
  const int64_t local = config.intermediate / tp.size;
  gate_proj = register_module("gate_proj", Linear(config.hidden, local, config.mlp_bias, options));
  up_proj = register_module("up_proj", Linear(config.hidden, local, config.mlp_bias, options));
  down_proj = register_module("down_proj", Linear(local, config.hidden, config.mlp_bias, options));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  const torch::Tensor input = copy_to_tensor_parallel(x, tp_);
  const torch::Tensor activated = swiglu(gate_proj->forward(input), up_proj->forward(input));
  torch::Tensor out =
      reduce_from_tensor_parallel(down_proj->adapted(activated, at::linear(activated, down_proj->weight)), tp_);
  if (down_proj->bias.defined()) out = out + down_proj->bias;
  return out;
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& config, const TensorParallel& tp,
                                   const torch::TensorOptions& options, int64_t layer_index) {
  const auto norm = [&] { return RmsNorm(config.hidden, config.rms_norm_eps, options); };
  // Registered in the order of hf_parameters (hf_model_dir.cpp).
  if (!config.post_norms) input_layernorm = register_module("input_layernorm", norm());
  self_attn = register_module("self_attn", Attention(config, tp, options, layer_index));
  post_attention_layernorm = register_module("post_attention_layernorm", norm());
  mlp = register_module("mlp", Mlp(config, tp, options));
  if (config.post_norms) post_feedforward_layernorm = register_module("post_feedforward_layernorm", norm());
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const AttentionInputs& inputs) {
  if (post_feedforward_layernorm) {
    const torch::Tensor h = x + post_attention_layernorm->forward(self_attn->forward(x, inputs));
    return h + post_feedforward_layernorm->forward(mlp->forward(h));
  }
  const torch::Tensor h = x + self_attn->forward(input_layernorm->forward(x), inputs);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

}  // namespace meshrun::model_detail
