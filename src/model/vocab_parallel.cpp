// The vocab-parallel embedding and cross-entropy. Each tp rank holds a
// contiguous slice of the vocabulary; a lookup is masked to the ids of the
// slice and summed over the group, and the cross-entropy needs only the
// global max, the global sum of exponentials and the target logit, each a
// [batch, seq] all-reduce, never the full logits.
#include "layers.hpp"

namespace meshrun {
namespace model_detail {

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab, int64_t hidden, const TensorParallel& tp,
                                                       const torch::TensorOptions& options)
    : tp_(tp), first_(vocab / tp.size * tp.rank) {
  weight = register_parameter("weight", torch::empty({vocab / tp.size, hidden}, options));
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& ids) {
  if (!tp_.split()) return at::embedding(weight, ids);
  const torch::Tensor outside = (ids < first_).logical_or_(ids >= first_ + weight.size(0));
  const torch::Tensor local = (ids - first_).masked_fill_(outside, 0);
  return reduce_from_tensor_parallel(at::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0), tp_);
}

}  // namespace model_detail

namespace {

using model_detail::TensorParallel;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

TensorParallel tensor_parallel_of(Group* group) {
  TensorParallel tp;
  if (group) {
    tp.group = group;
    tp.rank = group->rank();
    tp.size = group->size();
  }
  return tp;
}

// Per-token cross-entropy; saves the softmax shard for backward.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& labels,
                               Group* group, int64_t ignore_index) {
    const TensorParallel tp = tensor_parallel_of(group);
    const int64_t shard = logits.size(-1), first = shard * tp.rank;
    const torch::Tensor as_float = logits.scalar_type() == torch::kFloat ? logits : logits.to(torch::kFloat);
    torch::Tensor max = as_float.amax(-1);
    if (tp.split()) group->all_reduce(max, ReduceOp::max);
    torch::Tensor exps = as_float - max.unsqueeze(-1);  // a fresh tensor: the logits stay untouched

    const torch::Tensor ignored = labels.eq(ignore_index);
    const torch::Tensor here = (labels >= first).logical_and_(labels < first + shard).logical_and_(ignored.logical_not());
    const torch::Tensor local = (labels - first).masked_fill_(here.logical_not(), 0);
    const torch::Tensor target = exps.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill_(here.logical_not(), 0);
    exps.exp_();
    // One all-reduce for both: [2, batch, seq].
    torch::Tensor sums = torch::stack({exps.sum(-1), target});
    if (tp.split()) group->all_reduce(sums);
    const torch::Tensor sum_exp = sums[0], target_logit = sums[1];
    exps.div_(sum_exp.unsqueeze(-1));  // now the softmax

    ctx->save_for_backward({exps, local, here, ignored});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return (sum_exp.log() - target_logit).masked_fill_(ignored, 0);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& softmax = saved[0];
    const torch::Tensor& local = saved[1];
    const torch::Tensor& here = saved[2];
    const torch::Tensor& ignored = saved[3];
    const torch::Tensor grad_loss = grads[0].to(torch::kFloat).masked_fill(ignored, 0);
    torch::Tensor grad = softmax * grad_loss.unsqueeze(-1);
    grad.scatter_add_(-1, local.unsqueeze(-1), (-grad_loss * here).unsqueeze(-1));
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.to(dtype), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

void check_labels(const torch::Tensor& logits, const torch::Tensor& labels, Group* tp, int64_t ignore_index,
                  const char* what) {
  if (labels.sizes() != logits.sizes().slice(0, logits.dim() - 1))
    throw std::invalid_argument(std::string(what) + ": labels of shape " + c10::str(labels.sizes()) +
                                " do not match logits of shape " + c10::str(logits.sizes()));
  const int64_t vocab = logits.size(-1) * (tp ? tp->size() : 1);
  // One reduction and one read back (a device sync on CUDA), not a
  // masked_select and two.
  const torch::Tensor outside = labels.ne(ignore_index).logical_and(labels.lt(0).logical_or(labels.ge(vocab)));
  if (outside.any().item<bool>())
    throw std::invalid_argument(std::string(what) + ": a label is outside the vocabulary [0, " +
                                std::to_string(vocab) + ")");
}

}  // namespace

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits_shard, const torch::Tensor& labels, Group* tp,
                                           int64_t ignore_index) {
  check_labels(logits_shard, labels, tp, ignore_index, "vocab_parallel_cross_entropy");
  return VocabParallelCrossEntropy::apply(logits_shard, labels, tp, ignore_index);
}

torch::Tensor vocab_parallel_log_probs(const torch::Tensor& logits_shard, const torch::Tensor& labels, Group* tp) {
  constexpr int64_t kNoIgnoredLabel = -100;
  check_labels(logits_shard, labels, tp, kNoIgnoredLabel, "vocab_parallel_log_probs");
  return -VocabParallelCrossEntropy::apply(logits_shard, labels, tp, kNoIgnoredLabel);
}

}  // namespace meshrun

namespace meshrun {

torch::Tensor vocab_parallel_entropy(const torch::Tensor& logits_shard, Group* tp) {
  const model_detail::TensorParallel parallel{tp, tp ? tp->rank() : 0, tp ? tp->size() : 1};
  const torch::Tensor z = logits_shard.to(torch::kFloat);
  // H = log S + m - T / S with S = Σ exp(z - m), T = Σ exp(z - m) z: the
  // shards' partial sums are added across tp (all-reduce forward, identity
  // backward, which is exact for sums); the max only stabilises.
  torch::Tensor max = std::get<0>(z.detach().max(-1, true));
  if (parallel.split()) parallel.group->all_reduce(max, ReduceOp::max);
  const torch::Tensor exponentials = (z - max).exp();
  const torch::Tensor total = model_detail::reduce_from_tensor_parallel(exponentials.sum(-1), parallel);
  const torch::Tensor weighted = model_detail::reduce_from_tensor_parallel((exponentials * z).sum(-1), parallel);
  return total.log() + max.squeeze(-1) - weighted / total;
}

}  // namespace meshrun
