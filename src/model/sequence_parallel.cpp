// Sequence parallelism: each rank of an sp group computes two chunks of
// every row (head and tail, so causal work is equal), and attention gathers
// the whole row's keys and values (Llama 3's context parallelism) rather
// than passing blocks around a ring. Why this choice: it needs only the
// all-gather and reduce-scatter every backend has (Gloo included, which has
// no overlap of send/recv with compute to win back); one collective per layer
// instead of sp - 1 ring steps keeps latency low on CPU and small clusters;
// and with GQA the gathered K/V are small next to the queries. It costs
// K/V for the whole row per rank (2 × kv_dim × seq / tp per layer), which
// the plan's memory estimate counts.
#include "layers.hpp"

namespace meshrun {

torch::Tensor SequenceShard::take(const torch::Tensor& full, double fill) const {
  if (whole()) return full;
  torch::Tensor padded_full = full;
  if (padded > length) {
    std::vector<int64_t> shape = full.sizes().vec();
    shape[1] = padded - length;
    padded_full = torch::cat({full, torch::full(shape, fill, full.options())}, 1);
  }
  return padded_full.index_select(1, local.to(full.device()));
}

SequenceShard sequence_shard(int64_t length, int sp_rank, int sp_size, torch::Device device) {
  if (sp_size < 1 || sp_rank < 0 || sp_rank >= sp_size)
    throw std::logic_error("sequence_shard: rank " + std::to_string(sp_rank) + " of " + std::to_string(sp_size));
  SequenceShard shard;
  shard.length = length;
  shard.sp_rank = sp_rank;
  shard.sp_size = sp_size;
  const auto options = torch::TensorOptions().dtype(torch::kInt64).device(device);
  if (sp_size == 1) {
    shard.padded = length;
    shard.local = torch::arange(length, options);
    shard.gathered = shard.local;
    return shard;
  }
  const int64_t chunks = 2 * static_cast<int64_t>(sp_size);
  const int64_t chunk = std::max<int64_t>(1, (length + chunks - 1) / chunks);
  shard.padded = chunk * chunks;
  auto columns_of = [&](int64_t rank) {
    return torch::cat({torch::arange(rank * chunk, (rank + 1) * chunk, options),
                       torch::arange((chunks - 1 - rank) * chunk, (chunks - rank) * chunk, options)});
  };
  std::vector<torch::Tensor> all;
  for (int64_t rank = 0; rank < sp_size; ++rank) all.push_back(columns_of(rank));
  shard.local = all[static_cast<size_t>(sp_rank)];
  shard.gathered = torch::cat(all);
  return shard;
}

namespace model_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [b, h, s, d] <-> [s, b, h, d]: collectives concatenate along dim 0.
torch::Tensor sequence_first(const torch::Tensor& x) { return x.permute({2, 0, 1, 3}).contiguous(); }
torch::Tensor sequence_third(const torch::Tensor& x) { return x.permute({1, 2, 0, 3}).contiguous(); }

struct GatherSequence : torch::autograd::Function<GatherSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Group* group) {
    ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group));
    return sequence_third(group->all_gather_into_tensor(sequence_first(x)));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* group = reinterpret_cast<Group*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
    return {sequence_third(group->reduce_scatter(sequence_first(grads[0]))), torch::Tensor()};
  }
};

struct SumOverSequence : torch::autograd::Function<SumOverSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Group* group) {
    ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(group));
    torch::Tensor sum = x.clone();
    group->all_reduce(sum);
    return sum;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* group = reinterpret_cast<Group*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
    torch::Tensor grad = grads[0].clone();
    group->all_reduce(grad);
    return {grad, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor sum_over_sequence(const torch::Tensor& x, const SequenceParallel& sp) {
  if (!sp.split()) return x;
  return SumOverSequence::apply(x, sp.group);
}

torch::Tensor gather_sequence(const torch::Tensor& x, const SequenceParallel& sp) {
  if (!sp.split()) return x;
  return GatherSequence::apply(x, sp.group);
}

}  // namespace model_detail

torch::Tensor gather_columns(const torch::Tensor& local, const SequenceShard& shard, Group* sp) {
  if (sp == nullptr || sp->size() == 1 || shard.whole()) return local;
  const int64_t batch = local.size(0), columns = local.size(1);
  if (columns * sp->size() != shard.padded)
    throw std::logic_error("gather_columns: " + std::to_string(columns) + " local columns × sp " +
                           std::to_string(sp->size()) + " ≠ the shard's " + std::to_string(shard.padded));
  std::vector<int64_t> shape = local.sizes().vec();
  // As [batch, 1, columns, rest]: gather_sequence's layout.
  const torch::Tensor flat = local.reshape({batch, 1, columns, -1});
  const model_detail::SequenceParallel group{sp, sp->rank(), sp->size()};
  const torch::Tensor gathered = model_detail::gather_sequence(flat, group);  // [batch, 1, padded, rest], rank order
  const torch::Tensor order = torch::argsort(shard.gathered.to(local.device()));
  shape[1] = shard.padded;
  return gathered.index_select(2, order).reshape(shape).narrow(1, 0, shard.length);
}

}  // namespace meshrun
