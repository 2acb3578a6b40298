// The building blocks of LlamaModel (src/model/): tensor-parallel autograd
// functions, RMSNorm, rotary embeddings, attention, the SwiGLU MLP, the
// decoder layer, the vocab-parallel embedding and per-layer checkpointing.
// Internal to src/model; the public surface is include/meshrun/model/model.hpp.
#pragma once

#include <torch/torch.h>

#include "meshrun/dist/dist.hpp"
#include "meshrun/model/model.hpp"
#include "decode_kernels.hpp"

namespace meshrun::model_detail {

// This rank's place in the tensor-parallel group (size 1 without a group).
struct TensorParallel {
  Group* group = nullptr;
  int rank = 0;
  int size = 1;
  bool split() const { return group != nullptr && size > 1; }
};

// This rank's place in the expert-parallel group (MeshPlan::ep): it holds
// experts [rank × experts / size, (rank + 1) × experts / size) of every
// sparse layer, and the group's ranks exchange tokens with all-to-all.
struct ExpertParallel {
  Group* group = nullptr;
  int rank = 0;
  int size = 1;
  bool split() const { return group != nullptr && size > 1; }
};

// Rows to and from the expert-parallel group's ranks (Group::all_to_all),
// differentiable: backward sends the gradients back the way the rows came.
torch::Tensor all_to_all_rows(const torch::Tensor& rows, const std::vector<int64_t>& send,
                              const std::vector<int64_t>& receive, Group* group);

// Identity in forward, all-reduce of the gradient in backward: where a
// replicated activation enters column-parallel layers.
torch::Tensor copy_to_tensor_parallel(const torch::Tensor& x, const TensorParallel& tp);
// All-reduce in forward, identity in backward: the sum of row-parallel
// partial outputs (and of the vocab-parallel embedding's masked lookups).
torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& x, const TensorParallel& tp);

// This rank's place in the sequence-parallel group (size 1 without a
// group): the rank holds two of the 2 × size chunks of every row (see
// SequenceShard in model.hpp) and attends over the whole row's keys.
struct SequenceParallel {
  Group* group = nullptr;
  int rank = 0;
  int size = 1;
  bool split() const { return group != nullptr && size > 1; }
};

// K or V [batch, heads, local, d] of every sp rank, concatenated along the
// sequence in group-rank order: an all-gather in forward, a reduce-scatter
// (sum) of the gradient in backward, so each rank's keys and values get the
// gradient of every rank's queries.
torch::Tensor gather_sequence(const torch::Tensor& x, const SequenceParallel& sp);

// The sum of x over the sp group on every rank, in forward and of the
// gradient in backward: a figure of the whole rows that every sp rank then
// computes the same function of (the routers' load-balancing loss), whose
// gradient reaches each rank's own columns sp times over, as the average
// over dp × sp expects (gather_columns' rule).
torch::Tensor sum_over_sequence(const torch::Tensor& x, const SequenceParallel& sp);

// How a projection is split over tp: along out (column-parallel: q, k, v,
// gate, up), along in (row-parallel: o, down), or not at all.
enum class LinearSplit { column, row, none };

// A projection with Hugging Face's layout: weight [out, in] (this rank's
// slice when split), optional bias, optional LoRA adapter.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool with_bias, const torch::TensorOptions& options);
  // x W^T + b, plus the adapter's term.
  torch::Tensor forward(const torch::Tensor& x) const;
  // `base` (this projection of x, computed by the caller: row-parallel
  // layers reduce after adding) plus the adapter's term when there is one.
  torch::Tensor adapted(const torch::Tensor& x, torch::Tensor base) const;
  // Registers lora_A [rank, in] and lora_B [out, rank] (this rank's in and
  // out) as submodules, so their names are "<module>.lora_A.weight".
  void add_lora(const LoraSettings& lora, LinearSplit split, const TensorParallel& tp,
                const torch::TensorOptions& options);
  // Off: forward is the base projection alone (the adapter stays).
  void set_adapter_enabled(bool on) { adapter_enabled_ = on; }
  torch::Tensor weight, bias;

 private:
  std::shared_ptr<LinearImpl> lora_A_, lora_B_;
  bool adapter_enabled_ = true;
  double lora_scale_ = 0;
  double lora_dropout_ = 0;
  LinearSplit split_ = LinearSplit::none;
  TensorParallel tp_;
};
TORCH_MODULE(Linear);

// Each linear's forward(x), for projections that share their input (q, k
// and v; gate and up): in a decode step on the CPU one small-batch product
// serves them all (decode_kernels.hpp's small_batch_linears), elsewhere
// each forward runs as it would alone.
std::vector<torch::Tensor> forward_sharing_input(const torch::Tensor& x, const std::vector<const LinearImpl*>& linears);

// RMSNorm as Hugging Face computes it: statistics in fp32, the normalised
// value cast back to the input dtype, then scaled by the weight. One fused
// autograd node.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// silu(gate) × up, SwiGLU's activation. On the CPU with float inputs of one
// contiguous shape, and on CUDA with meshrun's kernels (fused_kernels.hpp)
// for fp32 / bf16 / fp16, one fused autograd node (one pass forward, one
// backward, saving gate and up only); elsewhere LibTorch's silu and mul.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// rms_norm, or with plus_one Gemma's: x̂ × (1 + w) in fp32, then cast.
torch::Tensor rms_norm_of(const torch::Tensor& x, const torch::Tensor& weight, double eps, bool plus_one);

// A residual sum and its norm: the decoder layer's h = x + attention and
// the input of its feed-forward.
struct AddedNorm {
  torch::Tensor normed, sum;
};
// sum = x + delta, normed = rms_norm_of(sum, ...). On CUDA with meshrun's
// kernels (fused_kernels.hpp: one dtype, contiguous, rows up to 24 576
// wide) one kernel each way; elsewhere the add and rms_norm_of.
AddedNorm add_rms_norm_of(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& weight, double eps,
                          bool plus_one);

// plus_one: Gemma's norm, x̂ × (1 + w) with w from 0 (ModelConfig::norm_plus_one).
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t hidden, double eps, const torch::TensorOptions& options, bool plus_one = false);
  torch::Tensor forward(const torch::Tensor& x) const;
  // {forward(x + delta), x + delta}: add_rms_norm_of with this norm.
  AddedNorm add_and_forward(const torch::Tensor& x, const torch::Tensor& delta) const;
  bool plus_one() const { return plus_one_; }
  double eps() const { return eps_; }
  torch::Tensor weight;

 private:
  double eps_;
  bool plus_one_ = false;
};
TORCH_MODULE(RmsNorm);

// Rotary tables for one forward: the half tables (cos, sin of position ×
// inverse frequency), [batch or 1, 1, seq, head_dim / 2] in the compute
// dtype; the query's are pre-multiplied by 1/sqrt(head_dim) so that the
// attention scale costs nothing.
struct RotaryTables {
  torch::Tensor cos, sin, query_cos, query_sin;
};

// Inverse frequencies [head_dim / 2] (fp32) for a forward whose largest
// position is `max_position_seen` (dynamic scaling depends on it).
torch::Tensor rope_inverse_frequencies(const ModelConfig& config, int64_t max_position_seen);
// Whether the tables depend on the forward's largest position (dynamic and
// longrope scaling).
bool rope_depends_on_length(const ModelConfig& config);
// positions: [batch, seq] (int64). max_position: the largest position of
// the whole forward (dynamic scaling depends on it); -1: positions' own
// (a sequence-parallel rank holds only part of the row).
RotaryTables rotary_tables(const ModelConfig& config, const torch::Tensor& positions, torch::Dtype dtype,
                           int64_t max_position = -1);
// The same from inverse frequencies already on positions' device: device
// work only (no host value read, nothing copied from the host), which is
// what a CUDA graph can capture.
RotaryTables rotary_tables_from(const ModelConfig& config, const torch::Tensor& positions,
                                const torch::Tensor& inverse, torch::Dtype dtype);
// x [batch, seq, heads, head_dim] contiguous -> rotated, contiguous
// [batch, heads, seq, head_dim] (the layout attention's matmuls want). On
// CUDA with meshrun's kernels (fused_kernels.hpp), apply_rotary_in_place's:
// callers pass a temporary (the projection's output), which it overwrites,
// and get a strided [batch, heads, seq, head_dim] view (batch and heads do
// not merge into one dimension without a copy): consumers reshape, never
// view across those dimensions.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// For tests: while alive, apply_rotary takes apply_rotary_in_place on the
// CPU too (its CPU form), so the strided layout the CUDA kernel leaves
// reaches attention where no GPU is.
class InPlaceRotaryScope {
 public:
  InPlaceRotaryScope();
  ~InPlaceRotaryScope();
  InPlaceRotaryScope(const InPlaceRotaryScope&) = delete;
  InPlaceRotaryScope& operator=(const InPlaceRotaryScope&) = delete;

 private:
  bool outer_;
};
// The rotation written over x [batch, seq, heads, head_dim] (last dimension
// contiguous; autograd told, so the graph stays right), returned as the
// [batch, heads, seq, head_dim] view of x. The CUDA kernel's node; on the
// CPU the same node over LibTorch ops.
torch::Tensor apply_rotary_in_place(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// One head of a CPU decode step rotated: out ← x by (cos, sin) over `half`
// pairs, fp32, out apart from x; the bits of apply_rotary's CPU decode form.
void rotate_decode_row(float* out, const float* x, const float* cos, const float* sin, int64_t half);

// What the sparse layers of one training forward record for the routers'
// load-balancing loss and the moe/* metrics, one entry per layer in layer
// order. Only forward(), forward_log_probs() and forward_loss_sum() record
// (not generation).
struct RouterRecord {
  std::vector<torch::Tensor> prob_sums;  // [experts] fp32: router probabilities summed over counted tokens (with grad)
  std::vector<torch::Tensor> counts;     // [experts] fp32: (token, pick) assignments per expert, counted tokens only
  std::vector<torch::Tensor> rows;       // [] fp32: the tokens counted
  // Routing replay: [2] fp32 per sparse layer, the tokens given a route and
  // those among them whose router would have picked other experts.
  std::vector<torch::Tensor> replays;
  void clear() {
    prob_sums.clear();
    counts.clear();
    rows.clear();
    replays.clear();
  }
};

// What every layer of one forward shares. With a cache (forward_cached),
// mask is [batch, 1, new, cached + new] and each layer appends its new keys
// and values at the cache's length() before attending over all of them.
// With sequence parallelism (sp split) the queries are this rank's columns
// and the keys the whole row's in gathered order: mask is [batch or 1, 1,
// local, sp × local].
struct AttentionInputs {
  RotaryTables rope;
  torch::Tensor mask;  // additive, [batch or 1, 1, seq, seq], compute dtype
  // The mask is plainly causal (no padding, packing, window, cache or sp):
  // on CUDA the fused attention then takes is_causal instead of the mask,
  // which lets it use the flash kernel and skip the blocks above the
  // diagonal (with an explicit mask it must compute them all).
  bool causal_only = false;
  KvCache* cache = nullptr;
  // forward_paged: the new tokens' keys and values go to the pool slots
  // kv_write_index [batch × new] (row-major); row b attends over the slots
  // kv_read_index [batch × kv_keys] (its positions 0 .. kv_keys - 1, those
  // past its own length masked), mask [batch, 1, new, kv_keys].
  PagedKvCache* paged = nullptr;
  torch::Tensor kv_write_index, kv_read_index;  // int64 on the device
  int64_t kv_keys = 0;
  // A decode step in fp32 on the CPU without soft-capped scores
  // (cpu_paged_decode_attention reads the pool through the tables itself):
  // the block tables [batch, width] and each row's new position [batch],
  // CPU int64, and no kv_read_index.
  torch::Tensor kv_host_tables, kv_host_positions;
  SequenceParallel sp;
  // With sp: the gathered keys (in rank order) → column order of the padded
  // row, and this rank's query columns (SequenceShard::local) on the CPU;
  // the mask is then [batch or 1, 1, local, padded] in column order.
  torch::Tensor sp_key_order;
  torch::Tensor sp_query_columns;
  // A model whose layers differ in their window (Gemma 2): `mask` is the
  // full-attention layers', window_mask the windowed layers' (same shape);
  // undefined where every layer is alike.
  torch::Tensor window_mask;
  // A model whose windowed layers have their own rotary base (Gemma 3):
  // their tables; undefined otherwise.
  RotaryTables window_rope;
  // Sparse layers append to `router` when set; token_weights [batch × seq]
  // fp32 (1 a real token, 0 padding; undefined: every token) says which
  // tokens their statistics count, as transformers' attention mask does.
  RouterRecord* router = nullptr;
  torch::Tensor token_weights;
  // Routing replay: int64 [batch × seq, sparse layers, k] (ModelInputs::
  // routes, this rank's columns); undefined: the routers choose.
  torch::Tensor routes;
  // Sparse layers append their choices here when set (capture_routes).
  std::vector<torch::Tensor>* route_capture = nullptr;
};

// The additive mask: causal, within the same sequence id, not onto padding,
// within the sliding window (when the config has one).
torch::Tensor attention_mask(const ModelConfig& config, int64_t seq, const torch::Tensor& sequence_ids,
                             const torch::Tensor& padding_mask, torch::Dtype dtype, torch::Device device);
// The same between the columns `query_index` [q] and `key_index` [k] (int64)
// of rows whose sequence_ids and padding_mask ([batch, row length], either
// undefined) are whole: [batch or 1, 1, q, k].
torch::Tensor attention_mask_between(const ModelConfig& config, const torch::Tensor& query_index,
                                     const torch::Tensor& key_index, const torch::Tensor& sequence_ids,
                                     const torch::Tensor& padding_mask, torch::Dtype dtype);
// The same for `fresh` new tokens after `past` cached ones: causal by index
// (query i is token past + i), not onto padding (padding_mask [batch, past +
// fresh]), within the sliding window.
torch::Tensor cached_attention_mask(const ModelConfig& config, int64_t past, int64_t fresh,
                                    const torch::Tensor& padding_mask, torch::Dtype dtype);

// The same for rows at their own positions [batch, new] (forward_paged):
// query (b, i) sees the keys at positions up to positions[b][i], within the
// sliding window; [batch, 1, new, keys].
torch::Tensor slot_attention_mask(const ModelConfig& config, const torch::Tensor& positions, int64_t keys,
                                  torch::Dtype dtype);

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, const TensorParallel& tp, const torch::TensorOptions& options,
                int64_t layer_index);
  torch::Tensor forward(const torch::Tensor& x, const AttentionInputs& inputs);
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};  // config.qk_norm only
  int64_t heads() const { return heads_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  // Nothing but projections, rotation and softmax attention: no q/k norms,
  // clipping, soft cap, window or own rotary base, and no tensor
  // parallelism (what the CPU decode step's fused layer computes).
  bool plain() const;

 private:
  // softmax(q k^T + mask) v for q [b, heads, s, d] against k, v
  // [b × kv_heads, keys, d], then o_proj.
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& mask, int64_t batch, int64_t seq);
  // SDPA on [b, heads | kv_heads, s, d] heads (CUDA): the context [b, heads, s, d].
  torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& mask) const;
  // [b, s, heads, d] through q_norm or k_norm when the config has them.
  torch::Tensor normalise_heads(const RmsNorm& norm, const torch::Tensor& heads) const;
  TensorParallel tp_;
  int64_t heads_, kv_heads_, head_dim_;  // heads of this rank
  bool full_width_ = false;  // q/k norms over the whole projection (OLMo 2)
  double eps_;
  double clip_ = 0;  // OLMoE's clip_qkv; 0: none
  double softcap_ = 0;  // Gemma 2's attn_logit_softcapping; 0: none
  bool windowed_ = false;  // reads AttentionInputs::window_mask (layers of mixed windows)
  bool window_rope_ = false;  // reads AttentionInputs::window_rope (Gemma 3's local layers)
  int64_t layer_index_;  // its slot in a KvCache
};
TORCH_MODULE(Attention);

// What an MLP's three projections are called in the files: gate_proj,
// up_proj, down_proj, or Mixtral's experts' w1, w3, w2.
struct MlpNames {
  const char* gate = "gate_proj";
  const char* up = "up_proj";
  const char* down = "down_proj";
};

// Where a family keeps a sparse layer's experts: the module ("mlp", or
// Mixtral's "block_sparse_moe") and each expert's projections (Mixtral:
// w1, w3, w2). Read by the model's modules and by hf_parameters alike.
const char* experts_module(ModelFamily family);
MlpNames expert_names(ModelFamily family);

// The SwiGLU MLP of width `width` (this rank's: width / tp): a dense
// layer's, or one expert's.
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t hidden, int64_t width, bool bias, const TensorParallel& tp, const torch::TensorOptions& options,
          MlpNames names = {}, bool gelu = false);
  torch::Tensor forward(const torch::Tensor& x);
  // down(silu(gate(x)) × up(x)) of an input already copied into the tp
  // group, before the row-parallel reduction and without down's bias (an
  // expert has none): the mixture sums its experts' partial outputs and
  // reduces once.
  torch::Tensor partial(const torch::Tensor& input);
  // SwiGLU without tensor parallelism (the fused decode layer's case).
  bool plain() const { return !gelu_ && !tp_.split(); }
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  TensorParallel tp_;
  bool gelu_ = false;  // GeGLU (gelu_pytorch_tanh) in place of SwiGLU
};
TORCH_MODULE(Mlp);

// A sparse layer's MLP: a router ("gate", [experts, hidden], replicated over
// tp) scores every expert, softmax over all of them, the top
// experts_per_token are picked per token (renormalised to sum to 1 with
// norm_topk_prob) and their SwiGLU outputs summed with those weights. Each
// expert is split over tp like a dense MLP. With expert parallelism the
// layer holds only its ep rank's experts (registered under their global
// indices, so names match the whole model's): every rank routes its own
// tokens, sends each (token, pick) to the rank of its expert, runs its
// experts on what arrives and sends the outputs back.
class SparseMoeImpl : public torch::nn::Module {
 public:
  SparseMoeImpl(const ModelConfig& config, const TensorParallel& tp, const ExpertParallel& ep,
                const torch::TensorOptions& options, int64_t sparse_index = 0);
  // x [batch, seq, hidden]; appends this layer's routing statistics to
  // `record` when it is set (token_weights as AttentionInputs' ); routes
  // and route_capture as AttentionInputs'.
  torch::Tensor forward(const torch::Tensor& x, RouterRecord* record, const torch::Tensor& token_weights,
                        const torch::Tensor& routes = {}, std::vector<torch::Tensor>* route_capture = nullptr);
  Linear gate{nullptr};
  std::vector<Mlp> experts;  // this rank's: global indices ep rank × experts / ep onwards

 private:
  // The experts' outputs for `sorted` (assignments grouped by expert, in
  // expert order), `per_expert` [experts] rows each, over the ep group.
  torch::Tensor dispatched(const torch::Tensor& sorted, const torch::Tensor& per_expert);

  TensorParallel tp_;
  ExpertParallel ep_;
  int64_t top_k_;
  int64_t experts_total_;
  int64_t sparse_index_ = 0;  // among the model's sparse layers (routing replay's column)
  bool renormalise_;
};
TORCH_MODULE(SparseMoe);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, const TensorParallel& tp, const ExpertParallel& ep,
                   const torch::TensorOptions& options, int64_t layer_index);
  torch::Tensor forward(const torch::Tensor& x, const AttentionInputs& inputs);
  // Pre-norm (Llama's: no post or sandwich norms, no Gemma 1 + w), plain
  // attention, a dense plain MLP: what cpu_decode_layer computes.
  bool plain() const;
  Attention self_attn{nullptr};
  // One of the two: the dense MLP ("mlp"), or the experts of a sparse layer
  // ("mlp", Mixtral's "block_sparse_moe").
  Mlp mlp{nullptr};
  SparseMoe moe{nullptr};
  // Pre-norms: input_layernorm before attention, post_attention_layernorm
  // before the MLP. Post-norms (OLMo 2): post_attention_layernorm on the
  // attention's output, post_feedforward_layernorm on the MLP's, each
  // before its residual add; no input_layernorm. Sandwich norms (Gemma):
  // input_layernorm and pre_feedforward_layernorm before, and
  // post_attention_layernorm and post_feedforward_layernorm after.
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr}, pre_feedforward_layernorm{nullptr},
      post_feedforward_layernorm{nullptr};

 private:
  torch::Tensor feed_forward(const torch::Tensor& x, const AttentionInputs& inputs);
};
TORCH_MODULE(DecoderLayer);

// Each rank holds rows [rank × vocab/tp, (rank+1) × vocab/tp) of the table.
class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  // scale: Gemma's √hidden on the looked-up rows (0: none).
  VocabParallelEmbeddingImpl(int64_t vocab, int64_t hidden, const TensorParallel& tp,
                             const torch::TensorOptions& options, double scale = 0);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;

 private:
  TensorParallel tp_;
  int64_t first_ = 0;  // first vocab id of this rank
  double scale_ = 0;
};
TORCH_MODULE(VocabParallelEmbedding);

// The decoder layer with only its input kept: recomputed (after
// hooks->before_unit(unit)) in backward.
torch::Tensor checkpointed_layer(DecoderLayerImpl& layer, const torch::Tensor& x, const AttentionInputs& inputs,
                                 ModelUnitHooks* hooks, int unit);

}  // namespace meshrun::model_detail
