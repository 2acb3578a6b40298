// The fused decode layer (cpu_decode_step.hpp). Each part names the
// unfused operator whose bits it keeps.
#include "cpu_decode_step.hpp"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <vector>

#include "cpu_attention.hpp"
#include "meshrun/model/paged_kv_cache.hpp"
#include "row_kernels.hpp"

namespace meshrun::model_detail {
namespace {

// The chunk of swiglu()'s CPU node (swiglu.cpp): swiglu_to's vector body
// and scalar tail meet at the chunks' edges, so the same chunks give the
// same bits.
constexpr int64_t kSwigluGrain = 16384;

// rows × n of x normalised into out (RmsNormFunction's CPU rows).
void rms_norm_rows(float* out, const float* x, const RmsNormImpl& norm, int64_t rows, int64_t n) {
  const float* w = norm.weight.const_data_ptr<float>();
  const auto epsilon = static_cast<float>(norm.eps());
  for (int64_t r = 0; r < rows; ++r) rms_norm_row(out + r * n, x + r * n, w, inverse_rms_of(x + r * n, n, epsilon), n);
}

// x += delta, element by element (the layer's residual adds).
void add_into(const torch::Tensor& x, const torch::Tensor& delta) {
  float* xp = x.data_ptr<float>();
  const float* dp = delta.const_data_ptr<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) xp[i] += dp[i];
}

// A projection whose input nothing shares: what project_out (o_proj) and
// MlpImpl::forward (down_proj) compute without tensor parallelism.
torch::Tensor project(const LinearImpl& linear, const torch::Tensor& x) {
  torch::Tensor out = linear.adapted(x, linear_or_small_batch(x, linear.weight));
  return linear.bias.defined() ? out + linear.bias : out;
}

thread_local bool unfused_decode = false;

}  // namespace

UnfusedDecodeScope::UnfusedDecodeScope() : outer_(unfused_decode) { unfused_decode = true; }
UnfusedDecodeScope::~UnfusedDecodeScope() { unfused_decode = outer_; }

bool cpu_decode_layers_serve(const std::vector<DecoderLayer>& layers, const ModelConfig& config, torch::Dtype dtype,
                             torch::Device device) {
  if (unfused_decode || dtype != torch::kFloat || !device.is_cpu() || torch::GradMode::is_enabled()) return false;
  if (config.sliding_window > 0 || config.head_dim() % 2 != 0) return false;
  for (const DecoderLayer& layer : layers)
    if (!layer->plain()) return false;
  return true;
}

torch::Tensor cpu_decode_layer(DecoderLayerImpl& layer, int64_t layer_index, torch::Tensor x,
                               const CpuDecodeRows& step) {
  RECORD_FUNCTION("meshrun::cpu_decode_layer", std::vector<c10::IValue>());
  AttentionImpl& attention = *layer.self_attn;
  const int64_t rows = step.rows, hidden = x.size(1);
  const int64_t heads = attention.heads(), kv_heads = attention.kv_heads(), d = attention.head_dim();
  const int64_t group = heads / kv_heads, half = d / 2;

  // input_layernorm, then q, k and v (one small-batch product where it is chosen).
  torch::Tensor normed = torch::empty_like(x);
  rms_norm_rows(normed.data_ptr<float>(), x.const_data_ptr<float>(), *layer.input_layernorm, rows, hidden);
  const std::vector<torch::Tensor> qkv =
      forward_sharing_input(normed, {attention.q_proj.get(), attention.k_proj.get(), attention.v_proj.get()});
  const torch::Tensor q = qkv[0].contiguous(), k = qkv[1].contiguous(), v = qkv[2].contiguous();

  // Per (row, kv head): the group's queries and the key rotated
  // (cpu_decode_rotary), the key and value written at the row's slot
  // (index_copy_ into the pool), then the row's attention over its blocks
  // (cpu_paged_decode_attention). A row writes only its own slot, which no
  // other row reads: a shared prompt's blocks end before any sample's new
  // token (the fork copies a partial last block).
  torch::Tensor& key_pool = step.cache->keys(layer_index);
  torch::Tensor& value_pool = step.cache->values(layer_index);
  float* kp = key_pool.data_ptr<float>();
  float* vp = value_pool.data_ptr<float>();
  const int64_t block = step.cache->block_size(), slot_stride = kv_heads * d;
  const float* qp = q.const_data_ptr<float>();
  const float* knew = k.const_data_ptr<float>();
  const float* vnew = v.const_data_ptr<float>();
  const float* cos = step.rope.cos.const_data_ptr<float>();
  const float* sin = step.rope.sin.const_data_ptr<float>();
  const float* query_cos = step.rope.query_cos.const_data_ptr<float>();
  const float* query_sin = step.rope.query_sin.const_data_ptr<float>();
  const int64_t table_row = step.rope.cos.size(0) == 1 ? 0 : half;
  int64_t longest = 0;
  for (int64_t b = 0; b < rows; ++b) longest = std::max(longest, step.positions[b] + 1);
  // The step's mask at every key a row reads: 0 (slot_attention_mask).
  const std::vector<float> zeros(static_cast<size_t>(longest), 0.0f);
  torch::Tensor rotated = torch::empty({rows, heads * d}, x.options());
  torch::Tensor context = torch::empty({rows, heads * d}, x.options());
  float* rp = rotated.data_ptr<float>();
  float* cp = context.data_ptr<float>();
  at::parallel_for(0, rows * kv_heads, 1, [&](int64_t begin, int64_t end) {
    PagedDecodeScratch scratch(longest, group);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t b = unit / kv_heads, kv = unit % kv_heads, position = step.positions[b];
      const int64_t* table = step.tables + b * step.width;
      for (int64_t h = kv * group; h < (kv + 1) * group; ++h)
        rotate_decode_row(rp + (b * heads + h) * d, qp + (b * heads + h) * d, query_cos + b * table_row,
                          query_sin + b * table_row, half);
      const int64_t slot = table[position / block] * block + position % block;
      rotate_decode_row(kp + slot * slot_stride + kv * d, knew + (b * kv_heads + kv) * d, cos + b * table_row,
                        sin + b * table_row, half);
      std::copy_n(vnew + (b * kv_heads + kv) * d, d, vp + slot * slot_stride + kv * d);
      const int64_t first = (b * heads + kv * group) * d;
      paged_decode_unit(cp + first, rp + first, group, zeros.data(), kp, vp, table, block, kv_heads, kv, position + 1,
                        d, scratch);
    }
  });

  // o_proj and the residual; post_attention_layernorm on the sum.
  add_into(x, project(*attention.o_proj, context));
  rms_norm_rows(normed.data_ptr<float>(), x.const_data_ptr<float>(), *layer.post_attention_layernorm, rows, hidden);

  // The MLP: gate and up in one product, silu(gate) · up over gate, down,
  // and the residual.
  Mlp& mlp = layer.mlp;
  const std::vector<torch::Tensor> gate_up = forward_sharing_input(normed, {mlp->gate_proj.get(), mlp->up_proj.get()});
  const torch::Tensor gate = gate_up[0].contiguous(), up = gate_up[1].contiguous();
  float* g = gate.data_ptr<float>();
  const float* u = up.const_data_ptr<float>();
  at::parallel_for(0, gate.numel(), kSwigluGrain,
                   [&](int64_t begin, int64_t end) { swiglu_to(g + begin, g + begin, u + begin, end - begin); });
  add_into(x, project(*mlp->down_proj, gate));
  return x;
}

}  // namespace meshrun::model_detail
