// Grouped-query attention without repeating k and v: the query heads that
// share a kv head are laid out next to each other ([b, kv, group × s, d]),
// so one batched matmul per kv head serves the whole group. Softmax runs in
// fp32. With tensor parallelism each rank holds heads/tp query heads and
// kv_heads/tp kv heads (q/k/v column-parallel, o_proj row-parallel). On
// CUDA the product goes through at::scaled_dot_product_attention (fused
// kernels); on the CPU, training uses the blocked causal attention
// (cpu_attention.hpp), an fp32 decode step over the paged cache reads the
// pool through its block tables (cpu_paged_decode_attention, there too),
// and everything else goes through the batched matmuls below.
#include "cpu_attention.hpp"
#include "layers.hpp"

namespace meshrun::model_detail {
namespace {

// The dtype's lowest finite value rather than -inf: a fully masked row (a
// padding query) gives a uniform softmax, not NaN.
double lowest_value(torch::Dtype dtype) {
  return dtype == torch::kFloat64    ? std::numeric_limits<double>::lowest()
         : dtype == torch::kFloat    ? std::numeric_limits<float>::lowest()
         : dtype == torch::kBFloat16 ? -3.3895313892515355e38
                                     : -65504.0;
}

// context [b, heads, s, d] (any view of those elements) through o_proj.
torch::Tensor project_out(const AttentionImpl& attention, const TensorParallel& tp, const torch::Tensor& context_by_head,
                          int64_t batch, int64_t seq) {
  const int64_t heads = attention.heads(), head_dim = attention.head_dim();
  const torch::Tensor context =
      context_by_head.view({batch, heads, seq, head_dim}).transpose(1, 2).reshape({batch, seq, heads * head_dim});
  torch::Tensor out = reduce_from_tensor_parallel(
      attention.o_proj->adapted(context, linear_or_small_batch(context, attention.o_proj->weight)), tp);
  if (attention.o_proj->bias.defined()) out = out + attention.o_proj->bias;
  return out;
}

}  // namespace

AttentionImpl::AttentionImpl(const ModelConfig& config, const TensorParallel& tp, const torch::TensorOptions& options,
                             int64_t layer_index)
    : tp_(tp),
      heads_(config.heads / tp.size),
      kv_heads_(config.kv_heads / tp.size),
      head_dim_(config.head_dim()),
      eps_(config.rms_norm_eps),
      clip_(config.clip_qkv),
      softcap_(config.attn_softcap),
      windowed_(config.mixed_windows() && config.windowed(layer_index)),
      window_rope_(config.window_rope_theta > 0 && !config.windowed_layers.empty() &&
                   layer_index < static_cast<int64_t>(config.windowed_layers.size()) &&
                   config.windowed_layers[static_cast<size_t>(layer_index)]),
      layer_index_(layer_index) {
  const int64_t hidden = config.hidden;
  q_proj = register_module("q_proj", Linear(hidden, heads_ * head_dim_, config.qkv_bias, options));
  k_proj = register_module("k_proj", Linear(hidden, kv_heads_ * head_dim_, config.qkv_bias, options));
  v_proj = register_module("v_proj", Linear(hidden, kv_heads_ * head_dim_, config.qkv_bias, options));
  // Row-parallel: the bias, replicated, is added once after the reduction.
  o_proj = register_module("o_proj", Linear(heads_ * head_dim_, hidden, config.o_bias, options));
  if (config.qk_norm) {
    // OLMo 2 normalises the whole projection, which a tp rank holds only a
    // slice of: the plan refuses tp > 1 for it (mesh.qk-norm-tp).
    if (config.qk_norm_full_width && tp.size > 1)
      throw ModelConfigError("q/k norms over the whole projection (" + std::string(model_family_row(config.family).model_type) +
                             ") do not split over tensor parallelism; use tp = 1");
    full_width_ = config.qk_norm_full_width;
    q_norm = register_module("q_norm", RmsNorm(full_width_ ? heads_ * head_dim_ : head_dim_, config.rms_norm_eps, options,
                                               config.norm_plus_one));
    k_norm = register_module("k_norm", RmsNorm(full_width_ ? kv_heads_ * head_dim_ : head_dim_, config.rms_norm_eps,
                                               options, config.norm_plus_one));
  }
}

bool AttentionImpl::plain() const {
  return !q_norm && !k_norm && clip_ == 0 && softcap_ == 0 && !windowed_ && !window_rope_ && !tp_.split();
}

torch::Tensor AttentionImpl::normalise_heads(const RmsNorm& norm, const torch::Tensor& heads) const {
  if (!norm) return heads;
  if (full_width_) {  // over every head's features at once (tp = 1)
    const auto sizes = heads.sizes();
    return rms_norm_of(heads.flatten(2), norm->weight, eps_, norm->plus_one()).view(sizes);
  }
  // The weight is replicated over tp but each rank applies it to its own
  // heads, so its gradient is a partial sum per rank: copy_to_tensor_parallel
  // all-reduces it in backward (as the engine expects of a replicated
  // parameter: the same gradient on every tp rank).
  return rms_norm_of(heads, copy_to_tensor_parallel(norm->weight, tp_), eps_, norm->plus_one());
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const AttentionInputs& inputs) {
  const int64_t batch = x.size(0), seq = x.size(1);
  const torch::Tensor input = copy_to_tensor_parallel(x, tp_);
  // OLMoE's clip_qkv: after the q/k norms, before the rotary embedding.
  const auto clip = [&](const torch::Tensor& t) { return clip_ > 0 ? t.clamp(-clip_, clip_) : t; };
  const RotaryTables& rope = window_rope_ && inputs.window_rope.cos.defined() ? inputs.window_rope : inputs.rope;
  const std::vector<torch::Tensor> projected = forward_sharing_input(input, {q_proj.get(), k_proj.get(), v_proj.get()});
  const torch::Tensor q =
      apply_rotary(clip(normalise_heads(q_norm, projected[0].view({batch, seq, heads_, head_dim_}))),
                   rope.query_cos, rope.query_sin);
  const torch::Tensor k =
      apply_rotary(clip(normalise_heads(k_norm, projected[1].view({batch, seq, kv_heads_, head_dim_}))),
                   rope.cos, rope.sin);
  const torch::Tensor v = clip(projected[2]).view({batch, seq, kv_heads_, head_dim_}).transpose(1, 2);
  // This layer's mask: a windowed layer among full-attention ones has its own.
  const torch::Tensor& mask = windowed_ && inputs.window_mask.defined() ? inputs.window_mask : inputs.mask;
  // Soft-capped scores take the plain path below (no fused kernel caps them).
  const bool fused_kernels = softcap_ == 0;
  if (inputs.sp.split()) {
    // Llama 3's context parallelism: the whole row's keys and values
    // gathered and put in column order, this rank's queries against them
    // (see sequence_parallel.cpp); on the CPU blocked like the causal case,
    // each query block meeting only the keys up to its last column.
    const auto whole_row = [&](const torch::Tensor& local) {
      const torch::Tensor gathered = gather_sequence(local, inputs.sp);
      return gathered.index_select(2, inputs.sp_key_order).view({batch * kv_heads_, gathered.size(2), head_dim_});
    };
    const torch::Tensor keys = whole_row(k), values = whole_row(v.contiguous());
    if (fused_kernels && cpu_causal_attention_applies(q, batch, heads_))
      return project_out(*this, tp_, cpu_causal_attention(q, keys, values, mask, inputs.sp_query_columns),
                         batch, seq);
    return attend(q, keys, values, mask, batch, seq);
  }
  if (inputs.paged) {
    // Paged: each new token's keys and values go to its slot, then each row
    // reads its own slots in position order (positions past its length are
    // masked, whatever those slots hold).
    PagedKvCache& cache = *inputs.paged;
    const auto new_tokens = [&](const torch::Tensor& heads) {  // [b, kv, s, d] -> [b × s, kv, d]
      return heads.transpose(1, 2).reshape({batch * seq, kv_heads_, head_dim_});
    };
    cache.keys(layer_index_).index_copy_(0, inputs.kv_write_index, new_tokens(k));
    cache.values(layer_index_).index_copy_(0, inputs.kv_write_index, new_tokens(v));
    if (inputs.kv_host_positions.defined())
      return project_out(*this, tp_,
                         cpu_paged_decode_attention(q, cache.keys(layer_index_), cache.values(layer_index_),
                                                    inputs.kv_host_tables, inputs.kv_host_positions, mask,
                                                    cache.block_size()),
                         batch, seq);
    const auto rows = [&](const torch::Tensor& pool) {  // -> [b × kv, keys, d]
      return pool.index_select(0, inputs.kv_read_index)
          .view({batch, inputs.kv_keys, kv_heads_, head_dim_})
          .transpose(1, 2)
          .reshape({batch * kv_heads_, inputs.kv_keys, head_dim_});
    };
    return attend(q, rows(cache.keys(layer_index_)), rows(cache.values(layer_index_)), mask, batch, seq);
  }
  if (!inputs.cache) {
    if (q.is_cuda() && fused_kernels) {
      // The heads as they are ([b, h, s, d] views, strided where the
      // in-place rotary left them): SDPA takes them without a copy. No mask:
      // plain causal attention is flash attention's case.
      const bool causal = inputs.causal_only && !windowed_;
      return project_out(*this, tp_, fused_attention(q, k, v, causal ? torch::Tensor() : mask), batch, seq);
    }
    // reshape: a view where the heads are contiguous (the CPU's rotary), a
    // copy where they are not.
    const torch::Tensor keys = k.reshape({batch * kv_heads_, seq, head_dim_});
    const torch::Tensor values = v.reshape({batch * kv_heads_, seq, head_dim_});
    if (fused_kernels && cpu_causal_attention_applies(q, batch, heads_))
      return project_out(*this, tp_, cpu_causal_attention(q, keys, values, mask), batch, seq);
    return attend(q, keys, values, mask, batch, seq);
  }
  // Append to the cache, then attend over everything it holds. The cache's
  // rows are [capacity, d] per (sequence, kv head), so the first `total`
  // rows of each are a strided view bmm reads directly.
  KvCache& cache = *inputs.cache;
  const int64_t past = cache.length(), total = past + seq;
  // A batch smaller than the cache's uses its first rows.
  const torch::Tensor key_cache = cache.keys(layer_index_).narrow(0, 0, batch * kv_heads_);
  const torch::Tensor value_cache = cache.values(layer_index_).narrow(0, 0, batch * kv_heads_);
  const int64_t capacity = cache.capacity();
  key_cache.view({batch, kv_heads_, capacity, head_dim_}).narrow(2, past, seq).copy_(k);
  value_cache.view({batch, kv_heads_, capacity, head_dim_}).narrow(2, past, seq).copy_(v);
  return attend(q, key_cache.narrow(1, 0, total), value_cache.narrow(1, 0, total), mask, batch, seq);
}

// The fused kernels (memory-efficient with the additive mask, in the compute
// dtype with fp32 accumulation) on [b, h, s, d] heads, any strides with the
// last dimension contiguous; q carries the 1/sqrt(d) scale already (rope's
// query tables), and enable_gqa lets each kv head serve its group without
// repeating k and v. An undefined mask means plain causal
// (AttentionInputs::causal_only): flash attention's case.
torch::Tensor AttentionImpl::fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                             const torch::Tensor& mask) const {
  return at::scaled_dot_product_attention(q, k, v,
                                          mask.defined() ? std::optional<torch::Tensor>(mask) : std::nullopt, 0.0,
                                          !mask.defined(), 1.0, heads_ != kv_heads_);
}

torch::Tensor AttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& mask, int64_t batch, int64_t seq) {
  const int64_t group = heads_ / kv_heads_, keys = k.size(1);
  if (q.is_cuda() && softcap_ == 0)
    return project_out(*this, tp_,
                       fused_attention(q.view({batch, heads_, seq, head_dim_}), k.view({batch, kv_heads_, keys, head_dim_}),
                                       v.view({batch, kv_heads_, keys, head_dim_}), mask),
                       batch, seq);
  // Out of place: adding in place to a view of the matmul's output would
  // make autograd copy the whole gradient back through CopySlices. reshape:
  // the in-place rotary's strided q (Gemma 2's soft caps on CUDA) needs a
  // copy to merge its batch and heads.
  torch::Tensor scores =
      at::bmm(q.reshape({batch * kv_heads_, group * seq, head_dim_}), k.transpose(1, 2)).view({batch, heads_, seq, keys});
  // Gemma 2: cap × tanh(scores / cap), before the mask (transformers' order).
  if (softcap_ > 0) scores = (scores / softcap_).tanh() * softcap_;
  scores = scores + mask;
  const torch::Tensor probabilities = scores.scalar_type() == torch::kFloat ? at::softmax(scores, -1)
                                                                      : at::softmax(scores, -1, torch::kFloat)
                                                                            .to(scores.scalar_type());
  return project_out(*this, tp_, at::bmm(probabilities.view({batch * kv_heads_, group * seq, keys}), v), batch, seq);
}

torch::Tensor attention_mask(const ModelConfig& config, int64_t seq, const torch::Tensor& sequence_ids,
                             const torch::Tensor& padding_mask, torch::Dtype dtype, torch::Device device) {
  const auto index_options = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const torch::Tensor query = torch::arange(seq, index_options).unsqueeze(1);
  const torch::Tensor key = torch::arange(seq, index_options).unsqueeze(0);
  torch::Tensor allowed = (key <= query);
  if (config.sliding_window > 0) allowed.logical_and_(key > query - config.sliding_window);
  allowed = allowed.view({1, 1, seq, seq});
  if (sequence_ids.defined())
    allowed = allowed.logical_and(sequence_ids.unsqueeze(2).eq(sequence_ids.unsqueeze(1)).unsqueeze(1));
  if (padding_mask.defined()) allowed = allowed.logical_and(padding_mask.ne(0).view({padding_mask.size(0), 1, 1, seq}));
  return torch::zeros(allowed.sizes(), torch::TensorOptions().dtype(dtype).device(device))
      .masked_fill_(allowed.logical_not(), lowest_value(dtype));
}

torch::Tensor attention_mask_between(const ModelConfig& config, const torch::Tensor& query_index,
                                     const torch::Tensor& key_index, const torch::Tensor& sequence_ids,
                                     const torch::Tensor& padding_mask, torch::Dtype dtype) {
  const int64_t queries = query_index.size(0), keys = key_index.size(0);
  const torch::Tensor query = query_index.unsqueeze(1), key = key_index.unsqueeze(0);
  torch::Tensor allowed = key <= query;
  if (config.sliding_window > 0) allowed.logical_and_(key > query - config.sliding_window);
  allowed = allowed.view({1, 1, queries, keys});
  if (sequence_ids.defined())
    allowed = allowed.logical_and(sequence_ids.index_select(1, query_index)
                                      .unsqueeze(2)
                                      .eq(sequence_ids.index_select(1, key_index).unsqueeze(1))
                                      .unsqueeze(1));
  if (padding_mask.defined())
    allowed = allowed.logical_and(
        padding_mask.index_select(1, key_index).ne(0).view({padding_mask.size(0), 1, 1, keys}));
  return torch::zeros(allowed.sizes(), torch::TensorOptions().dtype(dtype).device(query_index.device()))
      .masked_fill_(allowed.logical_not(), lowest_value(dtype));
}

torch::Tensor cached_attention_mask(const ModelConfig& config, int64_t past, int64_t fresh,
                                    const torch::Tensor& padding_mask, torch::Dtype dtype) {
  const torch::Device device = padding_mask.device();
  const int64_t total = past + fresh, batch = padding_mask.size(0);
  const auto index_options = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const torch::Tensor query = torch::arange(past, total, index_options).unsqueeze(1);
  const torch::Tensor key = torch::arange(total, index_options).unsqueeze(0);
  torch::Tensor allowed = (key <= query);
  if (config.sliding_window > 0) allowed.logical_and_(key > query - config.sliding_window);
  allowed = allowed.view({1, 1, fresh, total}).logical_and(padding_mask.ne(0).view({batch, 1, 1, total}));
  return torch::zeros(allowed.sizes(), torch::TensorOptions().dtype(dtype).device(device))
      .masked_fill_(allowed.logical_not(), lowest_value(dtype));
}

torch::Tensor slot_attention_mask(const ModelConfig& config, const torch::Tensor& positions, int64_t keys,
                                  torch::Dtype dtype) {
  const torch::Device device = positions.device();
  const torch::Tensor key = torch::arange(keys, torch::TensorOptions().dtype(torch::kInt64).device(device)).view({1, 1, keys});
  const torch::Tensor query = positions.unsqueeze(2);
  torch::Tensor allowed = key <= query;
  if (config.sliding_window > 0) allowed.logical_and_(key > query - config.sliding_window);
  return torch::zeros({positions.size(0), 1, positions.size(1), keys}, torch::TensorOptions().dtype(dtype).device(device))
      .masked_fill_(allowed.logical_not().unsqueeze(1), lowest_value(dtype));
}

}  // namespace meshrun::model_detail
