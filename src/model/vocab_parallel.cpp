// The vocab-parallel embedding and cross-entropy. Each tp rank holds a
// contiguous slice of the vocabulary; a lookup is masked to the ids of the
// slice and summed over the group, and the cross-entropy needs only the
// global max, the global sum of exponentials and the target logit, each a
// [batch, seq] all-reduce, never the full logits.
#include <ATen/Parallel.h>

#include <cstring>
#include <vector>

#include "layers.hpp"
#include "row_kernels.hpp"

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

// The cross-entropy's rows on the CPU, for float logits with contiguous
// rows: two passes forward (max; exponentials summed, never stored) and one
// backward (gradient rows written from the logits), where the tensor-op
// form below makes five passes forward and stores the softmax. At a 4 096
// vocabulary over 1 024 tokens that was a tenth of a 1.9 M-parameter
// model's step (bench/train_bench, docs/benchmarks.md).
bool rows_fused_on_cpu(const torch::Tensor& logits) {
  return logits.device().is_cpu() && logits.scalar_type() == torch::kFloat && logits.is_contiguous() &&
         logits.numel() > 0;
}

// Per row of logits [rows, shard]: its max.
torch::Tensor cpu_row_max(const torch::Tensor& logits) {
  const int64_t shard = logits.size(-1), rows = logits.numel() / shard;
  torch::Tensor max = torch::empty(logits.sizes().slice(0, logits.dim() - 1), logits.options());
  const float* z = logits.const_data_ptr<float>();
  float* out = max.data_ptr<float>();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) out[r] = model_detail::row_max(z + r * shard, shard);
  });
  return max;
}

// Per row: Σ e^(z − max) into sums[0] and, where the label is in this
// shard, z[label] − max into sums[1] (else 0). sums: [2, rows...].
torch::Tensor cpu_row_sums(const torch::Tensor& logits, const torch::Tensor& max, const torch::Tensor& local,
                           const torch::Tensor& here) {
  const int64_t shard = logits.size(-1), rows = logits.numel() / shard;
  std::vector<int64_t> sizes{2};
  for (int64_t size : max.sizes()) sizes.push_back(size);
  torch::Tensor sums = torch::empty(sizes, logits.options());
  const float* z = logits.const_data_ptr<float>();
  const float* row_max = max.const_data_ptr<float>();
  const int64_t* label = local.const_data_ptr<int64_t>();
  const bool* in_shard = here.const_data_ptr<bool>();
  float* sum_exp = sums.data_ptr<float>();
  float* target = sum_exp + rows;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = z + r * shard;
      sum_exp[r] = model_detail::exp_shifted_sum(row, row_max[r], shard);
      target[r] = in_shard[r] ? row[label[r]] - row_max[r] : 0.0f;
    }
  });
  return sums;
}

// grad[r] = g[r] (softmax(z[r]) − onehot(label[r]) where in this shard).
torch::Tensor cpu_rows_backward(const torch::Tensor& logits, const torch::Tensor& max, const torch::Tensor& sum_exp,
                                const torch::Tensor& local, const torch::Tensor& here, const torch::Tensor& grad_loss) {
  const int64_t shard = logits.size(-1), rows = logits.numel() / shard;
  torch::Tensor grad = torch::empty_like(logits);
  const torch::Tensor g = grad_loss.contiguous();
  const float* z = logits.const_data_ptr<float>();
  const float* row_max = max.const_data_ptr<float>();
  const float* sums = sum_exp.const_data_ptr<float>();
  const float* g_row = g.const_data_ptr<float>();
  const int64_t* label = local.const_data_ptr<int64_t>();
  const bool* in_shard = here.const_data_ptr<bool>();
  float* out = grad.data_ptr<float>();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = out + r * shard;
      if (g_row[r] == 0.0f) {
        std::memset(row, 0, static_cast<size_t>(shard) * sizeof(float));
        continue;
      }
      model_detail::exp_shifted_scaled_to(row, z + r * shard, row_max[r], g_row[r] / sums[r], shard);
      if (in_shard[r]) row[label[r]] -= g_row[r];
    }
  });
  return grad;
}

// Per-token cross-entropy. Saves the softmax shard for backward, or on the
// CPU's fused rows the logits with each row's max and sum.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& labels,
                               Group* group, int64_t ignore_index) {
    const TensorParallel tp = tensor_parallel_of(group);
    const int64_t shard = logits.size(-1), first = shard * tp.rank;
    const torch::Tensor ignored = labels.eq(ignore_index);
    const torch::Tensor here = (labels >= first).logical_and_(labels < first + shard).logical_and_(ignored.logical_not());
    const torch::Tensor local = (labels - first).masked_fill_(here.logical_not(), 0);
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());

    if (rows_fused_on_cpu(logits) && local.scalar_type() == torch::kLong && local.is_contiguous() &&
        here.is_contiguous()) {
      torch::Tensor max = cpu_row_max(logits);
      if (tp.split()) group->all_reduce(max, ReduceOp::max);
      torch::Tensor sums = cpu_row_sums(logits, max, local, here);
      if (tp.split()) group->all_reduce(sums);  // one all-reduce for both
      const torch::Tensor sum_exp = sums[0], target_logit = sums[1];
      ctx->save_for_backward({logits, local, here, ignored, max, sum_exp});
      return (sum_exp.log() - target_logit).masked_fill_(ignored, 0);
    }

    const torch::Tensor as_float = logits.scalar_type() == torch::kFloat ? logits : logits.to(torch::kFloat);
    torch::Tensor max = as_float.amax(-1);
    if (tp.split()) group->all_reduce(max, ReduceOp::max);
    torch::Tensor exps = as_float - max.unsqueeze(-1);  // a fresh tensor: the logits stay untouched
    const torch::Tensor target = exps.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill_(here.logical_not(), 0);
    exps.exp_();
    // One all-reduce for both: [2, batch, seq].
    torch::Tensor sums = torch::stack({exps.sum(-1), target});
    if (tp.split()) group->all_reduce(sums);
    const torch::Tensor sum_exp = sums[0], target_logit = sums[1];
    exps.div_(sum_exp.unsqueeze(-1));  // now the softmax

    ctx->save_for_backward({exps, local, here, ignored});
    return (sum_exp.log() - target_logit).masked_fill_(ignored, 0);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& local = saved[1];
    const torch::Tensor& here = saved[2];
    const torch::Tensor& ignored = saved[3];
    const torch::Tensor grad_loss = grads[0].to(torch::kFloat).masked_fill(ignored, 0);
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    if (saved.size() == 6) {  // the CPU's fused rows
      return {cpu_rows_backward(saved[0], saved[4], saved[5], local, here, grad_loss), torch::Tensor(), torch::Tensor(),
              torch::Tensor()};
    }
    const torch::Tensor& softmax = saved[0];
    torch::Tensor grad = softmax * grad_loss.unsqueeze(-1);
    grad.scatter_add_(-1, local.unsqueeze(-1), (-grad_loss * here).unsqueeze(-1));
    return {grad.to(dtype), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

void check_labels(const torch::Tensor& logits, const torch::Tensor& labels, Group* tp, int64_t ignore_index,
                  const char* what) {
  if (labels.sizes() != logits.sizes().slice(0, logits.dim() - 1))
    throw std::logic_error(std::string(what) + ": labels of shape " + c10::str(labels.sizes()) +
                           " do not match logits of shape " + c10::str(logits.sizes()));
  const int64_t vocab = logits.size(-1) * (tp ? tp->size() : 1);
  // One reduction and one read back (a device sync on CUDA), not a
  // masked_select and two.
  const torch::Tensor outside = labels.ne(ignore_index).logical_and(labels.lt(0).logical_or(labels.ge(vocab)));
  if (outside.any().item<bool>())
    throw ModelInputError(std::string(what) + ": a label is outside the vocabulary [0, " +
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
