// Tensor-parallel linear layers (Megatron's f and g): a column-parallel
// layer reads a replicated input, so its input gradient, a partial sum on
// each rank, is all-reduced in backward; a row-parallel layer produces
// partial sums, all-reduced in forward, while the gradient of a replicated
// output passes through unchanged.
#include "layers.hpp"

namespace meshrun::model_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Group* group_in(AutogradContext* ctx) {
  return reinterpret_cast<Group*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
}

struct CopyToTensorParallel : torch::autograd::Function<CopyToTensorParallel> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Group* group) {
    ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group));
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    torch::Tensor grad = grads[0].clone(at::MemoryFormat::Contiguous);
    group_in(ctx)->all_reduce(grad);
    return {grad, torch::Tensor()};
  }
};

// Reduces in place: its inputs are fresh outputs of a matmul or a masked
// lookup, which no backward reads.
struct ReduceFromTensorParallel : torch::autograd::Function<ReduceFromTensorParallel> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, Group* group) {
    if (!x.is_contiguous()) {
      torch::Tensor sum = x.contiguous();
      group->all_reduce(sum);
      return sum;
    }
    group->all_reduce(x);
    ctx->mark_dirty({x});
    return x;
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

// Rows out to the ranks of an expert-parallel group and back; the
// gradient of what arrived returns along the reversed counts.
struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows, Group* group,
                               std::vector<int64_t> send, std::vector<int64_t> receive) {
    ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group));
    ctx->saved_data["send"] = send;
    ctx->saved_data["receive"] = receive;
    return group->all_to_all(rows, send, receive);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector();
    const std::vector<int64_t> receive = ctx->saved_data["receive"].toIntVector();
    return {group_in(ctx)->all_to_all(grads[0].contiguous(), receive, send), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor all_to_all_rows(const torch::Tensor& rows, const std::vector<int64_t>& send,
                              const std::vector<int64_t>& receive, Group* group) {
  return AllToAllRows::apply(rows, group, send, receive);
}

torch::Tensor copy_to_tensor_parallel(const torch::Tensor& x, const TensorParallel& tp) {
  if (!tp.split()) return x;
  return CopyToTensorParallel::apply(x, tp.group);
}

torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& x, const TensorParallel& tp) {
  if (!tp.split()) return x;
  return ReduceFromTensorParallel::apply(x, tp.group);
}

LinearImpl::LinearImpl(int64_t in, int64_t out, bool with_bias, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({out, in}, options));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}, options));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) const {
  return adapted(x, linear_or_small_batch(x, weight, bias));
}

std::vector<torch::Tensor> forward_sharing_input(const torch::Tensor& x, const std::vector<const LinearImpl*>& linears) {
  bool shared = linears.size() > 1;
  std::vector<torch::Tensor> weights;
  for (const LinearImpl* linear : linears) {
    shared = shared && small_batch_linear_chosen(x, linear->weight);
    weights.push_back(linear->weight);
  }
  std::vector<torch::Tensor> out;
  if (!shared) {
    for (const LinearImpl* linear : linears) out.push_back(linear->forward(x));
    return out;
  }
  out = small_batch_linears(x, weights);
  for (size_t i = 0; i < linears.size(); ++i) {
    if (linears[i]->bias.defined()) out[i].add_(linears[i]->bias);
    out[i] = linears[i]->adapted(x, std::move(out[i]));
  }
  return out;
}

void LinearImpl::add_lora(const LoraSettings& lora, LinearSplit split, const TensorParallel& tp,
                          const torch::TensorOptions& options) {
  lora_A_ = register_module("lora_A", std::make_shared<LinearImpl>(weight.size(1), lora.rank, false, options));
  lora_B_ = register_module("lora_B", std::make_shared<LinearImpl>(lora.rank, weight.size(0), false, options));
  lora_scale_ = lora.scale();
  lora_dropout_ = lora.dropout;
  split_ = split;
  tp_ = tp;
}

torch::Tensor LinearImpl::adapted(const torch::Tensor& x, torch::Tensor base) const {
  if (!lora_A_ || !adapter_enabled_) return base;
  const torch::Tensor input = lora_dropout_ > 0 && is_training() ? at::dropout(x, lora_dropout_, true) : x;
  // The whole factor (A of a column-parallel projection, B of a row-parallel
  // one) sees only this rank's part of the gradient: identity forward,
  // gradient all-reduced over tp.
  const torch::Tensor a =
      split_ == LinearSplit::column ? copy_to_tensor_parallel(lora_A_->weight, tp_) : lora_A_->weight;
  const torch::Tensor b = split_ == LinearSplit::row ? copy_to_tensor_parallel(lora_B_->weight, tp_) : lora_B_->weight;
  return base + at::linear(at::linear(input, a), b) * lora_scale_;
}

}  // namespace meshrun::model_detail
