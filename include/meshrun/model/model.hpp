// Model: the Llama-style decoder (LlamaForCausalLM and the families of
// kModelFamilies, mixtures of experts among them) in LibTorch, optionally split over a
// tensor-parallel group, with a language-model head or a scalar value head
// (critic and reward models).
//
// Invariants:
// - Parameter names are Hugging Face's ("model.embed_tokens.weight",
//   "model.layers.3.self_attn.q_proj.weight", "lm_head.weight", and for the
//   value head "score.weight"), so a state dict maps onto safetensors files
//   one to one. With tp > 1 each rank holds its shard of the split
//   parameters; parameter_specs() says how each one is split, so full tensors
//   can be gathered or scattered (checkpoints, Hugging Face export).
// - The model runs as a sequence of units (embedding, each decoder layer,
//   final norm + head). A ModelUnitHooks installed with set_unit_hooks() is
//   called around each unit in forward; ZeRO-3 uses it to gather a unit's
//   parameters just in time and release them after, and to re-gather them
//   for backward (see include/meshrun/train/train_engine.hpp).
// - With gradient checkpointing on, a decoder layer keeps only its input in
//   forward and recomputes itself in backward; before_unit runs again before
//   the recomputation (after_unit does not: nothing goes on from it).
// - With ModelOptions::lora enabled, the targeted projections carry
//   adapters ("model.layers.N.self_attn.q_proj.lora_A.weight", ".lora_B.")
//   whose specs are the only trainable ones; base parameters are frozen.
// - tp must divide num_attention_heads, num_key_value_heads,
//   intermediate_size and vocab_size; the constructor says which does not
//   (ModelConfigError).
// - A token id or label outside the vocabulary (a tokenizer that does not
//   fit the model) is a ModelInputError; inputs of the wrong shape or type
//   are the caller's bug (std::logic_error).
// - Numerics follow transformers' eager Llama: RMSNorm statistics and the
//   attention softmax in fp32, rotate_half rotary embeddings.
// - forward() keeps no keys or values; forward_paged() runs only the new
//   tokens of each sequence against a paged cache (the rollout engine's),
//   forward_cached() against a static one (a plain batch, the simple
//   reference). All give the same logits for the same tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "meshrun/model/kv_cache.hpp"
#include "meshrun/model/paged_kv_cache.hpp"
#include "meshrun/arch/lora.hpp"
#include "meshrun/arch/model_config.hpp"

namespace meshrun {

class Group;
namespace model_detail {
struct AttentionInputs;
}

// Token ids or labels the model cannot take: outside its vocabulary, which
// is what a tokenizer that does not fit the model produces.
class ModelInputError : public KindError<ErrorKind::model> {
 public:
  using KindError::KindError;
};

// How a parameter is laid out over the tensor-parallel group.
struct ParameterSpec {
  std::string name;                // Hugging Face name
  std::vector<int64_t> full_shape;  // shape of the unsplit tensor
  int split_dim = -1;               // -1: replicated on every tp rank
  int unit = 0;                     // index of the unit that owns it
  bool decays = true;               // AdamW weight decay applies (not norms, not biases)
  // Tied embeddings: model.embed_tokens.weight (unit 0) is read by the head
  // unit as well; -1 otherwise.
  int also_used_by_unit = -1;
  // A LoRA factor ("....q_proj.lora_A.weight"); with adapters on, only these
  // are trainable and the base weights are frozen (requires_grad false).
  bool adapter = false;
  bool trainable = true;
  // A mixture's expert parameter ("....experts.<expert>...."): its expert's
  // global index and the layer's number of experts; -1 and 0 otherwise.
  // Under expert parallelism a rank holds the experts of its ep rank only.
  int expert = -1;
  int experts = 0;
};

// The name `spec` (an expert's parameter) has for expert `expert` of the
// same layer: what another ep rank holds in its place.
std::string expert_parameter_name(const ParameterSpec& spec, int expert);

// One forward batch. Shapes are [batch, seq], int64 (attention_mask may be
// any integer or bool dtype). position_ids default to 0..seq-1 per row, or,
// with an attention_mask, to the count of real tokens before each one (so a
// left-padded row gets the positions of its unpadded self); sequence_ids (packing) restrict attention to tokens of
// the same id (and causally); attention_mask (1 real, 0 padding) is for
// left- or right-padded batches. Either of the last two may be undefined.
struct ModelInputs {
  torch::Tensor input_ids;
  torch::Tensor position_ids;
  torch::Tensor sequence_ids;
  torch::Tensor attention_mask;
  // Routing replay (a mixture of experts): int64 [batch, seq, sparse layers,
  // experts_per_token], the experts each token's sparse layers take instead
  // of their router's top k (the router's probabilities of them still
  // weigh the outputs, so the routers train); a token whose first entry is
  // -1 routes itself. Undefined: every token routes itself.
  torch::Tensor routes = {};
  // The caller checked input_ids against the vocabulary where it built them
  // (on the host): the forward reads nothing back to check them (a device
  // sync on a GPU).
  bool ids_checked = false;
};

class ModelUnitHooks {
 public:
  virtual ~ModelUnitHooks() = default;
  // Before unit `unit` runs forward (or its checkpointed recomputation).
  virtual void before_unit(int unit) = 0;
  // After unit `unit` ran forward; may attach autograd hooks to `output`
  // (for example to re-gather parameters before its backward) and returns
  // the tensor the model goes on with.
  virtual torch::Tensor after_unit(int unit, torch::Tensor output) = 0;
};

// Which columns of a row one rank of a sequence-parallel group computes.
// The row is padded to a multiple of 2 × sp and cut into 2 × sp chunks;
// rank r holds chunks r and 2 × sp - 1 - r (head and tail, "zigzag"), so
// under causal attention every rank has the same work. sp 1: the whole row.
struct SequenceShard {
  int64_t length = 0;  // the row as given
  int64_t padded = 0;  // a multiple of 2 × sp
  int sp_rank = 0, sp_size = 1;
  torch::Tensor local;  // int64 [padded / sp]: this rank's columns, ascending
  torch::Tensor gathered;  // int64 [padded]: every rank's columns, in rank order
  bool whole() const { return sp_size == 1; }
  // `full` [batch, length, ...] → [batch, padded / sp, ...]: this rank's
  // columns, those past `length` set to `fill`. sp 1: `full` itself.
  torch::Tensor take(const torch::Tensor& full, double fill) const;
};
SequenceShard sequence_shard(int64_t length, int sp_rank, int sp_size, torch::Device device);

// The inverse of SequenceShard::take over an sp group: every rank's
// `local` [batch, padded / sp, ...] → [batch, length, ...] in column order
// (padding dropped), on every rank of `sp` (null or sp 1: `local` itself).
// Differentiable for callers where every sp rank then computes the same
// function of the whole rows (PPO's sequence-level terms): backward sums
// the ranks' gradients of this rank's columns (a reduce-scatter), so the
// gradient is sp times the one rank's and the replica average over dp × sp
// brings it back to one copy per dp rank.
torch::Tensor gather_columns(const torch::Tensor& local, const SequenceShard& shard, Group* sp);

struct ModelOptions {
  ModelConfig config;
  ModelHead head = ModelHead::language_model;
  Group* tensor_parallel = nullptr;  // null: tp = 1
  // Null: sp = 1. Otherwise forward() takes whole rows and returns the
  // outputs of this rank's columns only (sequence_shard()).
  Group* sequence_parallel = nullptr;
  // Null: every expert on every rank. Otherwise the group's ranks split each
  // sparse layer's experts (meshrun/plan/plan.hpp's MeshPlan::ep); they
  // must run the same forwards and backwards, in the same order.
  Group* expert_parallel = nullptr;
  torch::Dtype dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  bool gradient_checkpointing = false;
  // Random initial weights (normal(0, initializer_range), norms 1, biases 0),
  // drawn from torch's default generator as full tensors, so every tp
  // layout of one seed holds the same model. false: left uninitialised, for
  // callers that load every parameter (load_hf_model).
  bool initialize = true;
  // LoRA adapters on the targeted projections (meshrun/arch/lora.hpp):
  // drawn from torch's default generator after the base weights (whether
  // initialised or loaded), as full tensors, so every tp layout of one seed
  // holds the same adapters.
  LoraSettings lora;
};

// The LM head fused with what is read from its logits (fused_head below).
struct FusedHeadOptions {
  int64_t ignore_index = -100;  // labels equal to it: log-prob 0, no gradient
  double temperature = 1.0;     // divides the logits (PPO's sampling temperature)
  // cap × tanh(logits / cap) before the temperature (Gemma 2's
  // final_logit_softcapping; LlamaModel sets its own); 0: none.
  double logit_softcap = 0;
  bool entropy = false;         // also each row's entropy
  bool entropy_gradient = true;  // false: the entropy is a figure only, it sends no gradient back
  // The most bytes of fp32 logits one chunk of rows holds; 0: the default
  // (kFusedHeadChunkBytes). When every row fits in one chunk the logits are
  // kept for backward, otherwise each chunk's are recomputed there.
  int64_t chunk_bytes = 0;
  // The caller checked the labels (ignore_index or in the vocabulary) where
  // it built them: no range check read back (a device sync on a GPU).
  bool labels_checked = false;
};
inline constexpr int64_t kFusedHeadChunkBytes = int64_t{64} << 20;

// Per row: log p(label) (0 at ignored labels) and, when asked, the entropy
// of the row's distribution over the whole vocabulary.
struct HeadOutputs {
  torch::Tensor log_probs;
  torch::Tensor entropy;  // undefined unless FusedHeadOptions::entropy
};

// A mixture of experts' routing in the latest training forward (forward(),
// forward_log_probs(), forward_loss_sum(); generation records nothing).
struct RouterStats {
  // transformers' load_balancing_loss_func over every sparse layer:
  // experts × Σ_e (assignments to e per token) × (mean router probability
  // of e), both averaged over every sparse layer's counted tokens (padding
  // left out), so top-k when the load is even. Its graph reaches the routers.
  torch::Tensor aux_loss;
  // The largest over sparse layers of (assignments to its busiest expert) /
  // (the mean over its experts): 1 when even.
  torch::Tensor expert_load_max;
  // Routing replay ([3] fp32, this rank's columns; undefined without
  // replayed routes): the (token, sparse layer) pairs given a route, those
  // whose router would have chosen other experts (flips), and all counted
  // (real tokens × sparse layers).
  torch::Tensor replayed_routes;
};

class LlamaModelImpl : public torch::nn::Module {
 public:
  explicit LlamaModelImpl(ModelOptions options);

  // Language-model head: logits [batch, seq, vocab / tp] (this rank's vocab
  // shard). Value head: values [batch, seq]. With sequence parallelism
  // inputs are whole rows and seq is this rank's columns, those of
  // sequence_shard(input length): the sp ranks of a group call forward with
  // the same inputs.
  torch::Tensor forward(const ModelInputs& inputs);
  // The same forward to the LM head, which is fused with the log-probs of
  // `labels` (and the entropy) so the logits are never whole (fused_head):
  // over columns [first_column, first_column + labels.size(1)) of forward()'s
  // columns, so a caller that wants only the responses pays the head for
  // nothing else. Language-model head only.
  HeadOutputs forward_log_probs(const ModelInputs& inputs, const torch::Tensor& labels,
                                const FusedHeadOptions& options = {}, int64_t first_column = 0);
  // The same forward to the LM head, fused with SFT's summed cross-entropy
  // of `labels` [batch, columns] (fused_head_loss_sum).
  torch::Tensor forward_loss_sum(const ModelInputs& inputs, const torch::Tensor& labels,
                                 const FusedHeadOptions& options = {});
  // Incremental forward for generation: inputs.input_ids [batch, new] are
  // the tokens after the cache's length() tokens; inputs.attention_mask
  // [batch, length() + new] covers the cached tokens and the new ones (1
  // real, 0 left padding; undefined: all real); position_ids [batch, new]
  // default to the count of real tokens before each one. Appends the new
  // keys and values to `cache` (a batch smaller than the cache's uses its
  // first rows) and returns the logits of the new tokens.
  // No unit hooks run (inference engines are not ZeRO-sharded).
  torch::Tensor forward_cached(const ModelInputs& inputs, KvCache& cache);
  // Continuous batching's forward over a paged cache: row b of input_ids
  // [batch, new] continues a sequence of past[b] tokens (no padding: each
  // sequence starts at position 0) whose token at position p lives in slot
  // block_tables[b][p / block_size] × block_size + p % block_size of
  // `cache`. block_tables [batch, blocks] (int64, any device; a row's
  // unused columns any valid block) covers past[b] + new tokens of every
  // row. Writes the new keys and values through the table and returns each
  // row's next-token logits, [batch, vocab / tp] (the last new token's).
  // No two rows write the same slot (the block pool's invariant). Ids on
  // a GPU are not read back (no sync per step): the caller checks them.
  torch::Tensor forward_paged(const torch::Tensor& input_ids, const std::vector<int64_t>& past,
                              const torch::Tensor& block_tables, PagedKvCache& cache);
  // forward_paged's decode step (one new token per row) as fixed device
  // work, what the rollout engine captures as a CUDA graph: tokens [batch,
  // 1], positions [batch, 1] (the new token's) and block_tables [batch,
  // width] int64 already on the model's device; every row attends over
  // width × block_size key slots (those past its position masked). Reads no
  // value on the host and checks none (the caller built the inputs), so the
  // same tensors, refilled, replay the same kernels. Rows of padding give
  // their table a block no sequence holds, so their writes harm nothing.
  // Throws std::logic_error where decode_graph_blocker() names a reason.
  torch::Tensor forward_paged_decode(const torch::Tensor& tokens, const torch::Tensor& positions,
                                     const torch::Tensor& block_tables, PagedKvCache& cache);

  // Undefined tensors for a dense model or before a training forward. With
  // sp, over the whole rows: a collective of the sp group, which every sp
  // rank calls after the same forward.
  RouterStats router_stats() const;
  // While set, every forward (generation's included) appends to `into` one
  // int64 [tokens, experts_per_token] per sparse layer, in layer order: the
  // experts each of its tokens (batch × new, row-major) went to. Null stops.
  void capture_routes(std::vector<torch::Tensor>* into);

  const ModelOptions& options() const { return options_; }
  const ModelConfig& config() const { return options_.config; }
  int tp_rank() const;
  int tp_size() const;
  int sp_size() const;
  // The columns forward() returns for rows of `length` tokens.
  SequenceShard sequence_shard(int64_t length, torch::Device device) const;
  // gather_columns() of forward()'s outputs for inputs of `length` columns
  // over this model's sp group: the whole rows' outputs on every sp rank.
  torch::Tensor whole_rows(const torch::Tensor& local, int64_t length) const;
  // Every parameter, in unit order; names as in named_parameters().
  const std::vector<ParameterSpec>& parameter_specs() const { return specs_; }
  int num_units() const;  // layers + 2
  void set_unit_hooks(ModelUnitHooks* hooks) { hooks_ = hooks; }
  void set_gradient_checkpointing(bool on) { options_.gradient_checkpointing = on; }
  // Whether forward_paged's decode steps (one new token per row) run the
  // fused CPU layers here (src/model/cpu_decode_step.hpp): fp32 on the CPU,
  // no autograd, no tensor parallelism, Llama-style layers.
  bool decode_layers_fuse() const;
  // LoRA: with adapters off, forward() is the frozen base model's (DPO's
  // reference shares the actor's base so, as TRL does with PEFT's
  // disable_adapter). Prefer AdaptersOff, which turns them back on.
  void set_adapters_enabled(bool on);

 private:
  // forward() to the final norm's output (the head's input), its unit begun.
  torch::Tensor head_input(const ModelInputs& inputs);
  // The paged forwards' layers and head, the attention inputs set.
  torch::Tensor paged_layers_and_head(const torch::Tensor& input_ids, model_detail::AttentionInputs& shared);
  // forward_paged's decode step through the fused CPU layers (cpu_decode_step.hpp);
  // block_tables: CPU int64, contiguous, every entry checked to lie in the pool.
  torch::Tensor forward_cpu_decode(const torch::Tensor& input_ids, const std::vector<int64_t>& past,
                                   const torch::Tensor& block_tables, PagedKvCache& cache, int64_t longest);
  // The final norm and the head on each row's last hidden state [batch, hidden].
  torch::Tensor paged_head(const torch::Tensor& last_hidden);

  ModelOptions options_;
  std::vector<ParameterSpec> specs_;
  ModelUnitHooks* hooks_ = nullptr;
  struct Layers;
  std::shared_ptr<Layers> layers_;
};
TORCH_MODULE(LlamaModel);

// The model's LoRA adapters off for a scope (a no-op without adapters).
class AdaptersOff {
 public:
  explicit AdaptersOff(LlamaModel& model) : model_(model) { model_->set_adapters_enabled(false); }
  ~AdaptersOff() { model_->set_adapters_enabled(true); }
  AdaptersOff(const AdaptersOff&) = delete;
  AdaptersOff& operator=(const AdaptersOff&) = delete;

 private:
  LlamaModel& model_;
};

// Cross-entropy over a vocab-parallel logits shard [batch, seq, vocab/tp]
// against labels [batch, seq] (global token ids; ignore_index skipped):
// per-token loss [batch, seq] (0 at ignored positions), equal to
// cross_entropy over the full logits, with gradients, using only
// all-reduces of [batch, seq] tensors over `tp` (null: tp = 1).
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits_shard, const torch::Tensor& labels,
                                           Group* tp, int64_t ignore_index = -100);

// log p(label) per token from a vocab-parallel shard, as above (PPO).
torch::Tensor vocab_parallel_log_probs(const torch::Tensor& logits_shard, const torch::Tensor& labels,
                                       Group* tp);

// Entropy of the softmax over the full vocabulary per position [batch, seq]
// from a vocab-parallel shard, with gradients (PPO's entropy bonus).
torch::Tensor vocab_parallel_entropy(const torch::Tensor& logits_shard, Group* tp);

// The LM head and the per-token log-probs (and entropy) in one, over chunks
// of rows (Liger Kernel's fused linear cross-entropy): hidden [..., H] (the
// head's input, the same on every tp rank), weight [vocab / tp, H] (this
// rank's vocabulary shard), labels [...] global ids. Each chunk's logits
// are made, reduced to a max, a sum of exponentials and the label's logit
// (all-reduced over `tp`), and dropped; backward recomputes them a chunk at
// a time (unless they all fit one chunk, then kept), so memory holds one
// chunk of [rows × vocab / tp] instead of all of them twice. Equal to
// vocab_parallel_log_probs / _entropy of at::linear(hidden, weight) /
// temperature, gradients included (to hidden: this rank's part; the caller
// all-reduces it over tp, as copy_to_tensor_parallel does).
HeadOutputs fused_head(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& labels, Group* tp,
                       const FusedHeadOptions& options = {});

// SFT's loss: Σ −log p(label) over the rows whose label is not ignored, a
// scalar (float, this rank's rows). Its gradient being the scalar's, each
// chunk's gradients are made in forward from the logits in hand and
// backward only scales them, so the logits are made once (Liger Kernel's
// fused linear cross-entropy); under no_grad the chunks are only reduced.
// options.entropy is not read.
torch::Tensor fused_head_loss_sum(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& labels,
                                  Group* tp, const FusedHeadOptions& options = {});

}  // namespace meshrun
