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

namespace meshrun {

namespace {

using model_detail::TensorParallel;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The head over rows [N, H] → [N, 2] (log-prob, entropy or 0), a chunk of
// rows at a time. Saved for backward: the inputs, each row's max, sum of
// exponentials and (with entropy) expected logit, all global over tp; the
// chunk's logits themselves only when one chunk held every row.
struct FusedHead : torch::autograd::Function<FusedHead> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& labels, Group* group, int64_t ignore_index, double temperature,
                               bool entropy, bool entropy_gradient, int64_t chunk_rows) {
    const TensorParallel tp = tensor_parallel_of(group);
    const int64_t rows = hidden.size(0), shard = weight.size(0), first = shard * tp.rank;
    const torch::Tensor ignored = labels.eq(ignore_index);
    const torch::Tensor here = (labels >= first).logical_and_(labels < first + shard).logical_and_(ignored.logical_not());
    const torch::Tensor local = (labels - first).masked_fill_(here.logical_not(), 0).contiguous();
    const auto floats = torch::TensorOptions().dtype(torch::kFloat).device(hidden.device());
    torch::Tensor max = torch::empty({rows}, floats), sum_exp = torch::empty({rows}, floats);
    torch::Tensor target = torch::empty({rows}, floats), expected = torch::zeros({rows}, floats);
    torch::Tensor kept_logits;
    const bool one_chunk = chunk_rows >= rows;
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t count = std::min(chunk_rows, rows - begin);
      torch::Tensor z = logits_of(hidden.narrow(0, begin, count), weight, temperature);
      const torch::Tensor chunk_local = local.narrow(0, begin, count), chunk_here = here.narrow(0, begin, count);
      torch::Tensor chunk_max, sums;
      if (rows_fused_on_cpu(z) && !entropy) {
        chunk_max = cpu_row_max(z);
        if (tp.split()) group->all_reduce(chunk_max, ReduceOp::max);
        sums = cpu_row_sums(z, chunk_max, chunk_local.contiguous(), chunk_here.contiguous());
      } else {
        chunk_max = z.amax(-1);
        if (tp.split()) group->all_reduce(chunk_max, ReduceOp::max);
        const torch::Tensor shifted = z - chunk_max.unsqueeze(-1);
        const torch::Tensor exps = shifted.exp();
        std::vector<torch::Tensor> parts{exps.sum(-1), shifted.gather(-1, chunk_local.unsqueeze(-1)).squeeze(-1) *
                                                           chunk_here};
        // Σ e^(z−m) z, as Σ e^(z−m)(z−m) + m Σ e^(z−m) after the reduction.
        if (entropy) parts.push_back((exps * shifted).sum(-1));
        sums = torch::stack(parts);
      }
      if (tp.split()) group->all_reduce(sums);  // one all-reduce for every row sum
      max.narrow(0, begin, count).copy_(chunk_max);
      sum_exp.narrow(0, begin, count).copy_(sums[0]);
      target.narrow(0, begin, count).copy_(sums[1]);
      if (entropy) expected.narrow(0, begin, count).copy_(sums[2] / sums[0] + chunk_max);
      if (one_chunk) kept_logits = z;
    }
    // log p = (z_y − m) − log Σ e^(z−m); H = m + log Σ e^(z−m) − E[z].
    const torch::Tensor log_sum = sum_exp.log();
    torch::Tensor out = torch::zeros({rows, 2}, floats);
    out.select(1, 0).copy_((target - log_sum).masked_fill_(ignored, 0));
    if (entropy) out.select(1, 1).copy_(max + log_sum - expected);
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["entropy"] = entropy && entropy_gradient;
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->save_for_backward({hidden, weight, local, here, ignored, max, sum_exp, expected,
                            kept_logits.defined() ? kept_logits : torch::Tensor()});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &weight = saved[1], &local = saved[2], &here = saved[3];
    const torch::Tensor &ignored = saved[4], &max = saved[5], &sum_exp = saved[6], &expected = saved[7];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const bool entropy = ctx->saved_data["entropy"].toBool();
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const int64_t rows = hidden.size(0);
    const torch::Tensor grad = grads[0].to(torch::kFloat);
    // The loss of vocab_parallel_cross_entropy is −log p: its kernels take −g.
    const torch::Tensor grad_loss = (-grad.select(1, 0)).masked_fill(ignored, 0).contiguous();
    const torch::Tensor grad_entropy = grad.select(1, 1);
    const bool want_hidden = ctx->needs_input_grad(0), want_weight = ctx->needs_input_grad(1);
    torch::Tensor grad_hidden = want_hidden ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor grad_weight = want_weight ? torch::zeros_like(weight) : torch::Tensor();
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t count = std::min(chunk_rows, rows - begin);
      const torch::Tensor h = hidden.narrow(0, begin, count);
      const torch::Tensor z = saved[8].defined() ? saved[8] : logits_of(h, weight, temperature);
      const torch::Tensor chunk_local = local.narrow(0, begin, count), chunk_here = here.narrow(0, begin, count);
      const torch::Tensor chunk_max = max.narrow(0, begin, count), chunk_sum = sum_exp.narrow(0, begin, count);
      const torch::Tensor g = grad_loss.narrow(0, begin, count);
      torch::Tensor grad_z;
      if (rows_fused_on_cpu(z) && !entropy) {
        grad_z = cpu_rows_backward(z, chunk_max, chunk_sum, chunk_local.contiguous(), chunk_here.contiguous(), g);
      } else {
        const torch::Tensor p = (z - chunk_max.unsqueeze(-1)).exp_().div_(chunk_sum.unsqueeze(-1));
        grad_z = p * g.unsqueeze(-1);
        grad_z.scatter_add_(-1, chunk_local.unsqueeze(-1), (-g * chunk_here).unsqueeze(-1));
        // dH/dz = −p (z − E[z]).
        if (entropy)
          grad_z.sub_(p * (z - expected.narrow(0, begin, count).unsqueeze(-1)) *
                      grad_entropy.narrow(0, begin, count).unsqueeze(-1));
      }
      if (temperature > 0 && temperature != 1.0) grad_z.div_(temperature);
      const torch::Tensor grad_logits = grad_z.to(weight.scalar_type());
      if (want_hidden) grad_hidden.narrow(0, begin, count).copy_(at::matmul(grad_logits, weight));
      if (want_weight) grad_weight.add_(at::matmul(grad_logits.t(), h));
    }
    return {grad_hidden, grad_weight, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

  // A chunk's logits in fp32, tempered.
  static torch::Tensor logits_of(const torch::Tensor& hidden, const torch::Tensor& weight, double temperature) {
    torch::Tensor z = at::linear(hidden, weight);
    z = z.scalar_type() == torch::kFloat ? z.contiguous() : z.to(torch::kFloat).contiguous();
    if (temperature > 0 && temperature != 1.0) z.div_(temperature);
    return z;
  }
};

}  // namespace

HeadOutputs fused_head(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& labels, Group* tp,
                       const FusedHeadOptions& options) {
  if (hidden.dim() < 1 || weight.dim() != 2 || hidden.size(-1) != weight.size(1) ||
      labels.sizes() != hidden.sizes().slice(0, hidden.dim() - 1))
    throw std::logic_error("fused_head: hidden " + c10::str(hidden.sizes()) + ", weight " + c10::str(weight.sizes()) +
                           " and labels " + c10::str(labels.sizes()) + " do not match");
  const int64_t vocab = weight.size(0) * (tp ? tp->size() : 1);
  const torch::Tensor outside =
      labels.ne(options.ignore_index).logical_and(labels.lt(0).logical_or(labels.ge(vocab)));
  if (outside.any().item<bool>())
    throw ModelInputError("fused_head: a label is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  const int64_t width = hidden.size(-1);
  const torch::Tensor rows = hidden.reshape({-1, width});
  const int64_t bytes = options.chunk_bytes > 0 ? options.chunk_bytes : kFusedHeadChunkBytes;
  const int64_t chunk_rows =
      std::max<int64_t>(1, std::min<int64_t>(std::max<int64_t>(1, rows.size(0)), bytes / (4 * weight.size(0))));
  const torch::Tensor out = FusedHead::apply(rows, weight, labels.reshape({-1}).to(torch::kLong), tp,
                                             options.ignore_index, options.temperature, options.entropy,
                                             options.entropy_gradient, chunk_rows);
  HeadOutputs result;
  result.log_probs = out.select(1, 0).reshape(labels.sizes());
  if (options.entropy) result.entropy = out.select(1, 1).reshape(labels.sizes());
  return result;
}

}  // namespace meshrun
