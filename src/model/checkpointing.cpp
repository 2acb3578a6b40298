// Gradient checkpointing of one decoder layer, as torch.utils.checkpoint
// (reentrant) does it: forward runs without a graph and keeps only the
// layer's input and the shared rope tables, mask and sp group; backward calls the unit
// hook (ZeRO-3 re-gathers the layer's parameters), recomputes the layer with
// grad enabled and back-propagates through the recomputation, which
// accumulates the parameters' gradients.
#include "layers.hpp"

namespace meshrun::model_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct CheckpointTarget {
  DecoderLayerImpl* layer;
  ModelUnitHooks* hooks;
  int unit;
};

int64_t as_integer(const void* pointer) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(pointer)); }
template <class T>
T* as_pointer(const c10::IValue& value) {
  return reinterpret_cast<T*>(static_cast<intptr_t>(value.toInt()));
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const AttentionInputs* inputs,
                               CheckpointTarget target) {
    ctx->save_for_backward({x});
    ctx->saved_data["cos"] = inputs->rope.cos;
    ctx->saved_data["sin"] = inputs->rope.sin;
    ctx->saved_data["query_cos"] = inputs->rope.query_cos;
    ctx->saved_data["query_sin"] = inputs->rope.query_sin;
    ctx->saved_data["mask"] = inputs->mask;
    ctx->saved_data["causal_only"] = inputs->causal_only;
    ctx->saved_data["sp_group"] = as_integer(inputs->sp.group);
    ctx->saved_data["sp_rank"] = static_cast<int64_t>(inputs->sp.rank);
    ctx->saved_data["sp_size"] = static_cast<int64_t>(inputs->sp.size);
    ctx->saved_data["sp_key_order"] = inputs->sp_key_order;
    ctx->saved_data["sp_query_columns"] = inputs->sp_query_columns;
    ctx->saved_data["layer"] = as_integer(target.layer);
    ctx->saved_data["hooks"] = as_integer(target.hooks);
    ctx->saved_data["unit"] = static_cast<int64_t>(target.unit);
    return target.layer->forward(x, *inputs);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    AttentionInputs inputs;
    inputs.rope.cos = ctx->saved_data["cos"].toTensor();
    inputs.rope.sin = ctx->saved_data["sin"].toTensor();
    inputs.rope.query_cos = ctx->saved_data["query_cos"].toTensor();
    inputs.rope.query_sin = ctx->saved_data["query_sin"].toTensor();
    inputs.mask = ctx->saved_data["mask"].toTensor();
    inputs.causal_only = ctx->saved_data["causal_only"].toBool();
    // The recomputation gathers keys and values over sp again: every sp rank
    // recomputes the same layer in the same order.
    inputs.sp.group = as_pointer<Group>(ctx->saved_data["sp_group"]);
    inputs.sp.rank = static_cast<int>(ctx->saved_data["sp_rank"].toInt());
    inputs.sp.size = static_cast<int>(ctx->saved_data["sp_size"].toInt());
    inputs.sp_key_order = ctx->saved_data["sp_key_order"].toOptional<torch::Tensor>().value_or(torch::Tensor());
    inputs.sp_query_columns = ctx->saved_data["sp_query_columns"].toOptional<torch::Tensor>().value_or(torch::Tensor());
    auto* layer = as_pointer<DecoderLayerImpl>(ctx->saved_data["layer"]);
    auto* hooks = as_pointer<ModelUnitHooks>(ctx->saved_data["hooks"]);
    const int unit = static_cast<int>(ctx->saved_data["unit"].toInt());

    const torch::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    if (hooks) hooks->before_unit(unit);
    torch::Tensor output;
    {
      torch::AutoGradMode enable(true);
      output = layer->forward(input, inputs);
    }
    torch::autograd::backward({output}, {grads[0]});
    return {input.grad(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpointed_layer(DecoderLayerImpl& layer, const torch::Tensor& x, const AttentionInputs& inputs,
                                 ModelUnitHooks* hooks, int unit) {
  return CheckpointFunction::apply(x, &inputs, CheckpointTarget{&layer, hooks, unit});
}

}  // namespace meshrun::model_detail
