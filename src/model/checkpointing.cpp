// Gradient checkpointing of one decoder layer, as torch.utils.checkpoint
// (reentrant) does it: forward runs without a graph and keeps only the
// layer's input and the shared rope tables, mask and sp group; backward calls the unit
// hook (ZeRO-3 re-gathers the layer's parameters), recomputes the layer with
// grad enabled and back-propagates through the recomputation, which
// accumulates the parameters' gradients. A sparse layer that records its
// routing also returns the record's entries as outputs of the node, so the
// load-balancing loss built from them reaches the recomputed router.
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

// The layer's output, then (a sparse layer recording its routing) the
// router's probability sum, its counts and rows.
variable_list run_layer(DecoderLayerImpl& layer, const torch::Tensor& x, const AttentionInputs& shared, bool records) {
  if (!records) return {layer.forward(x, shared)};
  RouterRecord record;
  AttentionInputs inputs = shared;
  inputs.router = &record;
  torch::Tensor out = layer.forward(x, inputs);
  return {out, record.prob_sums.at(0), record.counts.at(0), record.rows.at(0)};
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const AttentionInputs* inputs,
                               CheckpointTarget target) {
    ctx->save_for_backward({x});
    ctx->saved_data["cos"] = inputs->rope.cos;
    ctx->saved_data["sin"] = inputs->rope.sin;
    ctx->saved_data["query_cos"] = inputs->rope.query_cos;
    ctx->saved_data["query_sin"] = inputs->rope.query_sin;
    ctx->saved_data["mask"] = inputs->mask;
    ctx->saved_data["window_mask"] = inputs->window_mask;
    ctx->saved_data["window_cos"] = inputs->window_rope.cos;
    ctx->saved_data["window_sin"] = inputs->window_rope.sin;
    ctx->saved_data["window_query_cos"] = inputs->window_rope.query_cos;
    ctx->saved_data["window_query_sin"] = inputs->window_rope.query_sin;
    ctx->saved_data["causal_only"] = inputs->causal_only;
    ctx->saved_data["sp_group"] = as_integer(inputs->sp.group);
    ctx->saved_data["sp_rank"] = static_cast<int64_t>(inputs->sp.rank);
    ctx->saved_data["sp_size"] = static_cast<int64_t>(inputs->sp.size);
    ctx->saved_data["sp_key_order"] = inputs->sp_key_order;
    ctx->saved_data["sp_query_columns"] = inputs->sp_query_columns;
    ctx->saved_data["layer"] = as_integer(target.layer);
    ctx->saved_data["hooks"] = as_integer(target.hooks);
    ctx->saved_data["unit"] = static_cast<int64_t>(target.unit);
    ctx->saved_data["token_weights"] = inputs->token_weights;
    const bool records = target.layer->moe && inputs->router;
    ctx->saved_data["records"] = records;
    variable_list out = run_layer(*target.layer, x, *inputs, records);
    if (records) ctx->mark_non_differentiable({out[2], out[3]});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    AttentionInputs inputs;
    inputs.rope.cos = ctx->saved_data["cos"].toTensor();
    inputs.rope.sin = ctx->saved_data["sin"].toTensor();
    inputs.rope.query_cos = ctx->saved_data["query_cos"].toTensor();
    inputs.rope.query_sin = ctx->saved_data["query_sin"].toTensor();
    inputs.mask = ctx->saved_data["mask"].toTensor();
    const auto optional = [&](const char* key) {
      return ctx->saved_data[key].toOptional<torch::Tensor>().value_or(torch::Tensor());
    };
    inputs.window_mask = optional("window_mask");
    inputs.window_rope = {optional("window_cos"), optional("window_sin"), optional("window_query_cos"),
                          optional("window_query_sin")};
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
    inputs.token_weights = ctx->saved_data["token_weights"].toOptional<torch::Tensor>().value_or(torch::Tensor());
    const bool records = ctx->saved_data["records"].toBool();

    const torch::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    if (hooks) hooks->before_unit(unit);
    variable_list outputs;
    {
      torch::AutoGradMode enable(true);
      outputs = run_layer(*layer, input, inputs, records);
    }
    if (records && grads[1].defined()) torch::autograd::backward({outputs[0], outputs[1]}, {grads[0], grads[1]});
    else torch::autograd::backward({outputs[0]}, {grads[0]});
    return {input.grad(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpointed_layer(DecoderLayerImpl& layer, const torch::Tensor& x, const AttentionInputs& inputs,
                                 ModelUnitHooks* hooks, int unit) {
  variable_list out = CheckpointFunction::apply(x, &inputs, CheckpointTarget{&layer, hooks, unit});
  if (out.size() == 4) {
    inputs.router->prob_sums.push_back(out[1]);
    inputs.router->counts.push_back(out[2]);
    inputs.router->rows.push_back(out[3]);
  }
  return out[0];
}

}  // namespace meshrun::model_detail
