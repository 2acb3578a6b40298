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
                                                       const torch::TensorOptions& options, double scale)
    : tp_(tp), first_(vocab / tp.size * tp.rank), scale_(scale) {
  weight = register_parameter("weight", torch::empty({vocab / tp.size, hidden}, options));
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& ids) {
  torch::Tensor rows;
  if (!tp_.split()) {
    rows = at::embedding(weight, ids);
  } else {
    const torch::Tensor outside = (ids < first_).logical_or_(ids >= first_ + weight.size(0));
    const torch::Tensor local = (ids - first_).masked_fill_(outside, 0);
    rows = reduce_from_tensor_parallel(at::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0), tp_);
  }
  // In the weights' dtype, as transformers rounds it.
  return scale_ > 0 ? rows * torch::scalar_tensor(scale_, weight.options()) : rows;
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

// grad[r] = g[r] (softmax(z[r]) − onehot(label[r]) where in this shard),
// into `into` when given (it may be the logits themselves: each element is
// read before it is written).
torch::Tensor cpu_rows_backward(const torch::Tensor& logits, const torch::Tensor& max, const torch::Tensor& sum_exp,
                                const torch::Tensor& local, const torch::Tensor& here, const torch::Tensor& grad_loss,
                                torch::Tensor into = {}) {
  const int64_t shard = logits.size(-1), rows = logits.numel() / shard;
  torch::Tensor grad = into.defined() ? into : torch::empty_like(logits);
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

// Every label but ignore_index in [0, vocab): one reduction and one read
// back (a device sync on CUDA), not a masked_select and two.
void check_label_range(const torch::Tensor& labels, int64_t vocab, int64_t ignore_index, const char* what) {
  const torch::Tensor outside = labels.ne(ignore_index).logical_and(labels.lt(0).logical_or(labels.ge(vocab)));
  if (outside.any().item<bool>())
    throw ModelInputError(std::string(what) + ": a label is outside the vocabulary [0, " +
                          std::to_string(vocab) + ")");
}

void check_labels(const torch::Tensor& logits, const torch::Tensor& labels, Group* tp, int64_t ignore_index,
                  const char* what) {
  if (labels.sizes() != logits.sizes().slice(0, logits.dim() - 1))
    throw std::logic_error(std::string(what) + ": labels of shape " + c10::str(labels.sizes()) +
                           " do not match logits of shape " + c10::str(logits.sizes()));
  check_label_range(labels, logits.size(-1) * (tp ? tp->size() : 1), ignore_index, what);
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

// One chunk's logits in fp32, soft-capped, tempered; into the first rows
// of `buffer` when given (fp32 weights: the chunks of one call reuse one
// allocation, which on the CPU spares each chunk the page faults of a fresh
// one).
torch::Tensor chunk_logits(const torch::Tensor& hidden, const torch::Tensor& weight, double temperature,
                           const torch::Tensor& buffer, double softcap) {
  torch::Tensor z;
  if (buffer.defined() && weight.scalar_type() == torch::kFloat && hidden.scalar_type() == torch::kFloat) {
    z = buffer.narrow(0, 0, hidden.size(0));
    at::mm_out(z, hidden, weight.t());
  } else {
    z = at::linear(hidden, weight);
    z = z.scalar_type() == torch::kFloat ? z.contiguous() : z.to(torch::kFloat).contiguous();
  }
  if (softcap > 0) z.div_(softcap).tanh_().mul_(softcap);
  if (temperature > 0 && temperature != 1.0) z.div_(temperature);
  return z;
}

// d(capped logit)/d(logit) at the chunk's soft-capped, tempered logits z:
// 1 − tanh², where tanh = z × temperature / cap; undefined without a cap.
// Taken before chunk_logit_grad, which may write over z.
torch::Tensor cap_derivative(const torch::Tensor& z, double softcap, double temperature) {
  if (softcap <= 0) return {};
  const torch::Tensor tanh = z * ((temperature > 0 ? temperature : 1.0) / softcap);
  return 1 - tanh * tanh;
}

// What a chunk's rows reduce to, global over tp: the max, Σ e^(z−m), the
// label's z − m (0 where not in any shard) and, with the entropy, E[z].
struct ChunkStats {
  torch::Tensor max, sum_exp, target, expected;
};

// The labels of a chunk on this rank's shard.
struct ChunkLabels {
  torch::Tensor local;  // label − the shard's first id (0 elsewhere)
  torch::Tensor here;   // the label is in this shard
};

ChunkStats chunk_stats(const torch::Tensor& z, const ChunkLabels& labels, Group* group, bool entropy) {
  const TensorParallel tp = tensor_parallel_of(group);
  ChunkStats stats;
  torch::Tensor sums;
  if (rows_fused_on_cpu(z) && !entropy) {
    stats.max = cpu_row_max(z);
    if (tp.split()) group->all_reduce(stats.max, ReduceOp::max);
    sums = cpu_row_sums(z, stats.max, labels.local, labels.here);
  } else {
    stats.max = z.amax(-1);
    if (tp.split()) group->all_reduce(stats.max, ReduceOp::max);
    const torch::Tensor shifted = z - stats.max.unsqueeze(-1);
    const torch::Tensor exps = shifted.exp();
    std::vector<torch::Tensor> parts{exps.sum(-1),
                                     shifted.gather(-1, labels.local.unsqueeze(-1)).squeeze(-1) * labels.here};
    // Σ e^(z−m) z, as Σ e^(z−m)(z−m) + m Σ e^(z−m) after the reduction.
    if (entropy) parts.push_back((exps * shifted).sum(-1));
    sums = torch::stack(parts);
  }
  if (tp.split()) group->all_reduce(sums);  // one all-reduce for every row sum
  stats.sum_exp = sums[0];
  stats.target = sums[1];
  if (entropy) stats.expected = sums[2] / sums[0] + stats.max;
  return stats;
}

// d/dz of Σ_rows g_loss · (−log p(label)) + g_entropy · H, of the chunk's
// logits (divided by the temperature, as they were made); g_entropy
// undefined: no entropy term. `in_place`: written over z (CPU rows).
torch::Tensor chunk_logit_grad(const torch::Tensor& z, const ChunkStats& stats, const ChunkLabels& labels,
                               const torch::Tensor& grad_loss, const torch::Tensor& grad_entropy, double temperature,
                               bool in_place = false) {
  torch::Tensor grad_z;
  if (rows_fused_on_cpu(z) && !grad_entropy.defined()) {
    grad_z = cpu_rows_backward(z, stats.max, stats.sum_exp, labels.local, labels.here, grad_loss.contiguous(),
                               in_place ? z : torch::Tensor());
  } else {
    const torch::Tensor p = (z - stats.max.unsqueeze(-1)).exp_().div_(stats.sum_exp.unsqueeze(-1));
    grad_z = p * grad_loss.unsqueeze(-1);
    grad_z.scatter_add_(-1, labels.local.unsqueeze(-1), (-grad_loss * labels.here).unsqueeze(-1));
    // dH/dz = −p (z − E[z]).
    if (grad_entropy.defined())
      grad_z.sub_(p * (z - stats.expected.unsqueeze(-1)) * grad_entropy.unsqueeze(-1));
  }
  if (temperature > 0 && temperature != 1.0) grad_z.div_(temperature);
  return grad_z;
}

// The chunk's gradients into the whole rows': the hidden rows' written,
// the weight's accumulated (in place, no weight-sized temporary).
void chunk_backward(const torch::Tensor& grad_z, const torch::Tensor& hidden, const torch::Tensor& weight,
                    torch::Tensor& grad_hidden, torch::Tensor& grad_weight) {
  const torch::Tensor grad_logits = grad_z.to(weight.scalar_type());
  if (grad_hidden.defined()) {
    torch::Tensor rows = grad_hidden;
    at::mm_out(rows, grad_logits, weight);
  }
  if (grad_weight.defined()) grad_weight.addmm_(grad_logits.t(), hidden);
}

// A step's rows cut into chunks of `rows` rows, labels on this shard.
struct Chunks {
  int64_t total = 0, rows = 1;
  torch::Tensor local, here, ignored;
  Chunks(const torch::Tensor& labels, int64_t ignore_index, int64_t shard, int rank, int64_t chunk_rows)
      : total(labels.size(0)), rows(chunk_rows) {
    const int64_t first = shard * rank;
    ignored = labels.eq(ignore_index);
    here = (labels >= first).logical_and_(labels < first + shard).logical_and_(ignored.logical_not());
    local = (labels - first).masked_fill_(here.logical_not(), 0).contiguous();
  }
  ChunkLabels labels(int64_t begin, int64_t count) const {
    return {local.narrow(0, begin, count).contiguous(), here.narrow(0, begin, count).contiguous()};
  }
};

// The head over rows [N, H] → [N, 2] (log-prob, entropy or 0), a chunk of
// rows at a time. Saved for backward: the inputs, each row's max, sum of
// exponentials and (with entropy) expected logit, all global over tp; the
// chunk's logits themselves only when one chunk held every row.
struct FusedHead : torch::autograd::Function<FusedHead> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& labels, Group* group, int64_t ignore_index, double temperature,
                               double softcap, bool entropy, bool entropy_gradient, int64_t chunk_rows) {
    const TensorParallel tp = tensor_parallel_of(group);
    const Chunks chunks(labels, ignore_index, weight.size(0), tp.rank, chunk_rows);
    const int64_t rows = chunks.total;
    const auto floats = torch::TensorOptions().dtype(torch::kFloat).device(hidden.device());
    torch::Tensor max = torch::empty({rows}, floats), sum_exp = torch::empty({rows}, floats);
    torch::Tensor out = torch::zeros({rows, 2}, floats), expected = torch::zeros({rows}, floats);
    torch::Tensor kept_logits;
    const torch::Tensor buffer = chunk_rows >= rows ? torch::Tensor() : torch::empty({chunk_rows, weight.size(0)}, floats);
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t count = std::min(chunk_rows, rows - begin);
      torch::Tensor z = chunk_logits(hidden.narrow(0, begin, count), weight, temperature, buffer, softcap);
      const ChunkStats stats = chunk_stats(z, chunks.labels(begin, count), group, entropy);
      max.narrow(0, begin, count).copy_(stats.max);
      sum_exp.narrow(0, begin, count).copy_(stats.sum_exp);
      // log p = (z_y − m) − log Σ e^(z−m); H = m + log Σ e^(z−m) − E[z].
      const torch::Tensor log_sum = stats.sum_exp.log();
      out.select(1, 0).narrow(0, begin, count).copy_(stats.target - log_sum);
      if (entropy) {
        expected.narrow(0, begin, count).copy_(stats.expected);
        out.select(1, 1).narrow(0, begin, count).copy_(stats.max + log_sum - stats.expected);
      }
      if (chunk_rows >= rows) kept_logits = z;
    }
    out.select(1, 0).masked_fill_(chunks.ignored, 0);
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["entropy"] = entropy && entropy_gradient;
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->save_for_backward({hidden, weight, chunks.local, chunks.here, chunks.ignored, max, sum_exp, expected,
                            kept_logits});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &weight = saved[1], &local = saved[2], &here = saved[3];
    const torch::Tensor &ignored = saved[4], &max = saved[5], &sum_exp = saved[6], &expected = saved[7];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const double softcap = ctx->saved_data["softcap"].toDouble();
    const bool entropy = ctx->saved_data["entropy"].toBool();
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const int64_t rows = hidden.size(0);
    const torch::Tensor grad = grads[0].to(torch::kFloat);
    // The kernels take the gradient of −log p: −g.
    const torch::Tensor grad_loss = (-grad.select(1, 0)).masked_fill(ignored, 0).contiguous();
    const torch::Tensor grad_entropy = grad.select(1, 1);
    torch::Tensor grad_hidden = ctx->needs_input_grad(0) ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor grad_weight = ctx->needs_input_grad(1) ? torch::zeros_like(weight) : torch::Tensor();
    const torch::Tensor buffer =
        saved[8].defined() ? torch::Tensor()
                           : torch::empty({std::min(chunk_rows, rows), weight.size(0)},
                                          torch::TensorOptions().dtype(torch::kFloat).device(hidden.device()));
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t count = std::min(chunk_rows, rows - begin);
      const torch::Tensor h = hidden.narrow(0, begin, count);
      const torch::Tensor z = saved[8].defined() ? saved[8] : chunk_logits(h, weight, temperature, buffer, softcap);
      const torch::Tensor capped = cap_derivative(z, softcap, temperature);
      const ChunkLabels labels{local.narrow(0, begin, count).contiguous(), here.narrow(0, begin, count).contiguous()};
      ChunkStats stats{max.narrow(0, begin, count), sum_exp.narrow(0, begin, count), {},
                       expected.narrow(0, begin, count)};
      const torch::Tensor grad_z =
          chunk_logit_grad(z, stats, labels, grad_loss.narrow(0, begin, count),
                           entropy ? grad_entropy.narrow(0, begin, count) : torch::Tensor(), temperature,
                           /*in_place=*/!saved[8].defined());  // kept logits stay intact
      if (capped.defined()) grad_z.mul_(capped);
      torch::Tensor hidden_rows = grad_hidden.defined() ? grad_hidden.narrow(0, begin, count) : torch::Tensor();
      chunk_backward(grad_z, h, weight, hidden_rows, grad_weight);
    }
    return {grad_hidden, grad_weight, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// SFT's loss Σ −log p(label) over the rows not ignored, a scalar: as its
// gradient is the scalar's, each chunk's gradients are made in forward
// from the logits in hand (Liger Kernel's way), and backward scales them,
// so the logits are made once. Without gradients (evaluation) the chunks
// are only reduced.
struct FusedHeadLossSum : torch::autograd::Function<FusedHeadLossSum> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& labels, Group* group, int64_t ignore_index, double temperature,
                               double softcap, bool want_hidden, bool want_weight, int64_t chunk_rows) {
    const TensorParallel tp = tensor_parallel_of(group);
    const Chunks chunks(labels, ignore_index, weight.size(0), tp.rank, chunk_rows);
    const int64_t rows = chunks.total;
    const auto floats = torch::TensorOptions().dtype(torch::kFloat).device(hidden.device());
    torch::Tensor grad_hidden = want_hidden ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor grad_weight = want_weight ? torch::zeros_like(weight) : torch::Tensor();
    const torch::Tensor counted = chunks.ignored.logical_not().to(torch::kFloat);
    torch::Tensor total = torch::zeros({}, floats);
    const torch::Tensor buffer = torch::empty({std::min(chunk_rows, rows), weight.size(0)}, floats);
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t count = std::min(chunk_rows, rows - begin);
      const torch::Tensor h = hidden.narrow(0, begin, count);
      const torch::Tensor z = chunk_logits(h, weight, temperature, buffer, softcap);
      const ChunkLabels labels = chunks.labels(begin, count);
      const ChunkStats stats = chunk_stats(z, labels, group, false);
      const torch::Tensor weights = counted.narrow(0, begin, count);
      total += ((stats.sum_exp.log() - stats.target) * weights).sum();
      if (!want_hidden && !want_weight) continue;
      const torch::Tensor capped = cap_derivative(z, softcap, temperature);
      torch::Tensor grad_z =
          chunk_logit_grad(z, stats, labels, weights, torch::Tensor(), temperature, /*in_place=*/true);
      if (capped.defined()) grad_z.mul_(capped);
      torch::Tensor hidden_rows = want_hidden ? grad_hidden.narrow(0, begin, count) : torch::Tensor();
      chunk_backward(grad_z, h, weight, hidden_rows, grad_weight);
    }
    ctx->save_for_backward({grad_hidden, grad_weight});
    return total;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor scale = grads[0].to(torch::kFloat);
    const auto scaled = [&](const torch::Tensor& grad) {
      return grad.defined() ? (grad * scale.to(grad.scalar_type())) : torch::Tensor();
    };
    return {scaled(saved[0]), scaled(saved[1]), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Rows per chunk: the budget's bytes of fp32 logits of this shard.
int64_t rows_per_chunk(int64_t rows, int64_t shard, const FusedHeadOptions& options) {
  const int64_t bytes = options.chunk_bytes > 0 ? options.chunk_bytes : kFusedHeadChunkBytes;
  return std::max<int64_t>(1, std::min<int64_t>(std::max<int64_t>(1, rows), bytes / (4 * shard)));
}

// The shapes fused_head and fused_head_loss_sum take, and the labels in
// the vocabulary.
void check_head_inputs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& labels, Group* tp,
                       const FusedHeadOptions& options, const char* what) {
  const int64_t ignore_index = options.ignore_index;
  if (hidden.dim() < 1 || weight.dim() != 2 || hidden.size(-1) != weight.size(1) ||
      labels.sizes() != hidden.sizes().slice(0, hidden.dim() - 1))
    throw std::logic_error(std::string(what) + ": hidden " + c10::str(hidden.sizes()) + ", weight " +
                           c10::str(weight.sizes()) + " and labels " + c10::str(labels.sizes()) + " do not match");
  if (!options.labels_checked) check_label_range(labels, weight.size(0) * (tp ? tp->size() : 1), ignore_index, what);
}

}  // namespace

HeadOutputs fused_head(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& labels, Group* tp,
                       const FusedHeadOptions& options) {
  check_head_inputs(hidden, weight, labels, tp, options, "fused_head");
  const torch::Tensor rows = hidden.reshape({-1, hidden.size(-1)});
  const torch::Tensor out = FusedHead::apply(rows, weight, labels.reshape({-1}).to(torch::kLong), tp,
                                             options.ignore_index, options.temperature, options.logit_softcap,
                                             options.entropy,
                                             options.entropy_gradient, rows_per_chunk(rows.size(0), weight.size(0), options));
  HeadOutputs result;
  result.log_probs = out.select(1, 0).reshape(labels.sizes());
  if (options.entropy) result.entropy = out.select(1, 1).reshape(labels.sizes());
  return result;
}

torch::Tensor fused_head_loss_sum(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& labels,
                                  Group* tp, const FusedHeadOptions& options) {
  check_head_inputs(hidden, weight, labels, tp, options, "fused_head_loss_sum");
  const torch::Tensor rows = hidden.reshape({-1, hidden.size(-1)});
  const bool grad = torch::GradMode::is_enabled();
  return FusedHeadLossSum::apply(rows, weight, labels.reshape({-1}).to(torch::kLong), tp, options.ignore_index,
                                 options.temperature, options.logit_softcap, grad && rows.requires_grad(),
                                 grad && weight.requires_grad(),
                                 rows_per_chunk(rows.size(0), weight.size(0), options));
}

}  // namespace meshrun
