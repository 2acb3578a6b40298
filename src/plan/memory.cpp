// The per-process memory model. Every term and the reason for it is in
// docs/planning.md; the code keeps the same names. Divisions that split a
// tensor over processes round up, because a shard cannot hold a fraction of an
// element and frameworks pad the last shard.
#include <algorithm>
#include <cmath>

#include "plan_internal.hpp"

namespace meshrun::plan_detail {
namespace {

// Bytes per parameter of optimizer state: Adam's m and v in fp32, plus an
// fp32 master copy of the weights when the weights themselves are not fp32.
int64_t optimizer_bytes_per_parameter(int element) { return (element == 4 ? 0 : 4) + 8; }

int64_t local_tokens(const WorkloadShape& workload, const MeshPlan& mesh) {
  return ceil_div(static_cast<int64_t>(workload.micro_batch) * workload.sequence_length, mesh.sp);
}

// Sequence parallelism gathers each layer's keys and values for the whole
// row (src/model/sequence_parallel.cpp): the other sp ranks' share of them,
// per layer.
int64_t gathered_kv_elements(const Architecture& a, const WorkloadShape& workload, const MeshPlan& mesh) {
  if (mesh.sp <= 1) return 0;
  const int64_t row_tokens = static_cast<int64_t>(workload.micro_batch) * workload.sequence_length;
  return (row_tokens - local_tokens(workload, mesh)) * ceil_div(2 * a.kv_dim(), mesh.tp);
}

// Logits of the micro-batch in the model dtype plus the fp32 log-softmax that
// the loss (or the reference log-probabilities) computes from them.
int64_t logits_bytes(const Architecture& a, int64_t tokens, int tp, int element) {
  return tokens * ceil_div(a.vocab, tp) * (element + 4);
}

// ZeRO-3 gathers the weights of one unit at a time: the embedding, a
// decoder layer, or the final norm with an untied lm_head
// (src/model/llama_model.cpp). The largest, per process: tp splits the
// embedding, the head and a layer's matrices, ep a layer's experts. With
// LoRA the units are a layer's adapters.
int64_t largest_unit_elements(const Architecture& a, const MeshPlan& mesh, int64_t adapters) {
  if (adapters > 0) return ceil_div(adapters, std::max<int64_t>(a.layers, 1) * mesh.tp);
  int64_t largest = ceil_div(a.vocab * a.hidden, mesh.tp) + (a.tied_embeddings ? 0 : a.hidden);
  for (int64_t layer = 0; layer < a.layers; ++layer) {
    const int64_t experts = a.sparse_layer(layer) ? a.experts * 3 * a.hidden * a.expert_intermediate : 0;
    const int64_t dense = a.decoder_layer_parameters(layer) - experts;
    largest = std::max(largest, ceil_div(dense, mesh.tp) + ceil_div(experts, mesh.tp * std::max(mesh.ep, 1)));
  }
  return largest;
}

}  // namespace

int64_t expert_parameter_count(const Architecture& a) {
  return a.sparse_layers() * a.experts * 3 * a.hidden * a.expert_intermediate;
}

int64_t ceil_div(int64_t numerator, int64_t denominator) {
  return (numerator + denominator - 1) / denominator;
}

int64_t process_overhead_bytes(DeviceKind device) {
  return device == DeviceKind::cpu ? 256 * kMiB : kGiB;
}

int64_t layer_activation_elements(const Architecture& a, int tp, int ep) {
  // Replicated across tp: residual input of both norms, and the normalized
  // inputs of the q/k/v and gate/up projections.
  const int64_t replicated = 4 * a.hidden;
  // Sharded over tp: q, attention output (each heads × head_dim wide), k
  // and v, Qwen3's q/k before their norms, gate, up, silu(gate) and the down
  // projection's input (each intermediate wide).
  // A sparse layer keeps those four per picked expert (each
  // expert_intermediate wide), the token's copy in each picked expert's
  // input and output, and the router's logits and probabilities; the
  // estimate takes the widest layer.
  const int64_t q_dim = a.heads * a.head_dim();
  const int64_t mlp = a.sparse_layers() > 0
                          ? std::max(a.sparse_layers() < a.layers ? 4 * a.intermediate : 0,
                                     a.experts_per_token * 4 * a.expert_intermediate)
                          : 4 * a.intermediate;
  // Expert parallelism adds per pick what arrives from the ep group, its
  // regrouped copy and the outputs sent back (src/model/mlp.cpp).
  const int64_t routed = a.sparse_layers() > 0
                             ? (ep > 1 ? 5 : 2) * a.experts_per_token * a.hidden + 2 * a.experts
                             : 0;
  const int64_t sharded = 2 * q_dim + 2 * a.kv_dim() + (a.qk_norm ? q_dim + a.kv_dim() : 0) + mlp;
  return replicated + routed + ceil_div(sharded, tp);
}

MemoryEstimate trained_role_memory(const Architecture& a, int64_t parameter_count,
                                   const RolePlan& role, const MeshPlan& mesh,
                                   const WorkloadShape& workload) {
  const int e = element_bytes(role.dtype);
  const int64_t zero_shards = static_cast<int64_t>(mesh.dp) * mesh.sp;
  // Under expert parallelism a rank holds 1 / ep of the experts, sharded by
  // ZeRO over their (dp / ep) × sp replicas: 1 / (dp × sp) of them again.
  const int64_t experts = mesh.ep > 1 ? expert_parameter_count(a) : 0;
  auto per_process = [&](int64_t count, int64_t bytes_each, bool sharded_by_zero) {
    const int64_t expert_count = std::min(experts, count);
    return ceil_div((count - expert_count) * bytes_each, mesh.tp * (sharded_by_zero ? zero_shards : 1)) +
           ceil_div(expert_count * bytes_each, mesh.tp * (sharded_by_zero ? zero_shards : mesh.ep));
  };

  // With LoRA the engine holds the adapters; the frozen base stays whole
  // on each tp rank (ZeRO does not shard it) and has no gradient or state.
  // Adapters are never an expert's (lint's lora.experts).
  const int64_t adapters = lora_parameter_count(a, role.lora);
  const int64_t trained = adapters > 0 ? adapters : parameter_count;
  const int64_t frozen = adapters > 0 ? parameter_count : 0;
  const auto trained_part = [&](int64_t bytes_each, bool sharded_by_zero) {
    return adapters > 0 ? ceil_div(adapters * bytes_each, mesh.tp * (sharded_by_zero ? zero_shards : 1))
                        : per_process(trained, bytes_each, sharded_by_zero);
  };
  MemoryEstimate m;
  m.parameters = trained_part(e, role.zero_stage >= 3) + (frozen > 0 ? per_process(frozen, e, false) : 0);
  // ZeRO-3's working set (src/train/engine_backward.cpp), for the largest
  // unit U: its gathered weights (e·U), and in the backward its gradient
  // (e·U) beside the fp32 gradient copies of the units being
  // reduce-scattered (kGradientReductionsInFlight · 4·U, and from the
  // second micro-step each one's 4·U / z output, added into the shard). A
  // tied embedding T, used by the first unit and the last, stays gathered
  // with its gradient for the whole backward (2·e·T).
  const int64_t unit = role.zero_stage == 3 ? largest_unit_elements(a, mesh, adapters) : 0;
  const int64_t tied = role.zero_stage == 3 && adapters == 0 && a.tied_embeddings ? ceil_div(a.vocab * a.hidden, mesh.tp) : 0;
  m.parameters += e * (unit + tied);
  // What the engine holds of the gradient (src/train/engine_core.hpp).
  // ZeRO-1/2 shared with other ranks, and ZeRO-3, reduce-scatter into an
  // fp32 shard and free the full gradient after (ZeRO-1/2 hold it, in the
  // training dtype, while micro-steps accumulate and during backward; ZeRO-3
  // one unit's at a time); otherwise the full gradient stays, with an fp32
  // copy to reduce (or offload) when the training dtype is narrower; alone
  // and on the device, the step upcasts it in chunks.
  const bool shared = zero_shards > 1;
  if (role.zero_stage == 3)
    m.gradients = trained_part(4, true) + e * (unit + tied) +
                  kGradientReductionsInFlight * (4 * unit + ceil_div(4 * unit, zero_shards));
  else if (role.zero_stage >= 1 && shared)
    m.gradients = trained_part(4, true) + trained_part(e, false);
  else
    m.gradients = trained_part(e, false) + (e != 4 && (shared || role.offload) ? trained_part(4, false) : 0);
  m.optimizer = trained_part(optimizer_bytes_per_parameter(e), role.zero_stage >= 1);
  if (role.offload) std::swap(m.optimizer, m.optimizer_host);
  // The snapshot is what the rank file holds: fp32 master, m and v of the
  // parameters this process owns (all of them below ZeRO stage 1).
  if (workload.async_checkpoint) m.checkpoint_host = trained_part(12, role.zero_stage >= 1);

  const int64_t tokens = local_tokens(workload, mesh);
  const int64_t layer_elements = layer_activation_elements(a, mesh.tp, mesh.ep);
  const int64_t gathered = gathered_kv_elements(a, workload, mesh);
  if (role.gradient_checkpointing) {
    // Only each layer's input survives the forward pass; the backward pass
    // recomputes one layer at a time, which then holds its full working set.
    m.activations = a.layers * tokens * a.hidden * e + (tokens * layer_elements + gathered) * e;
  } else {
    m.activations = a.layers * (tokens * layer_elements + gathered) * e;
  }
  m.logits = workload.lm_head ? logits_bytes(a, tokens, mesh.tp, e) : 0;
  m.overhead = workload.overhead;
  return m;
}

MemoryEstimate inference_role_memory(const Architecture& a, int64_t parameter_count,
                                     const RolePlan& role, const MeshPlan& mesh,
                                     const WorkloadShape& workload) {
  const int e = element_bytes(role.dtype);
  const int64_t zero_shards = role.zero_stage >= 3 ? static_cast<int64_t>(mesh.dp) * mesh.sp : 1;
  const int64_t experts = mesh.ep > 1 ? expert_parameter_count(a) : 0;
  MemoryEstimate m;
  m.parameters = ceil_div(e * (parameter_count - experts), mesh.tp * zero_shards) +
                 ceil_div(e * experts, mesh.tp * (zero_shards > 1 ? zero_shards : mesh.ep));
  // ZeRO-3 gathers one unit's weights at a time.
  if (role.zero_stage >= 3) m.parameters += e * largest_unit_elements(a, mesh, 0);
  // No backward pass: activations are freed layer by layer, so one layer's
  // working set is the peak.
  const int64_t tokens = local_tokens(workload, mesh);
  m.activations =
      (tokens * layer_activation_elements(a, mesh.tp, mesh.ep) + gathered_kv_elements(a, workload, mesh)) * e;
  m.logits = workload.lm_head ? logits_bytes(a, tokens, mesh.tp, e) : 0;
  m.overhead = workload.overhead;
  return m;
}

void add_reference_memory(const Architecture& reference, int64_t parameter_count, const RolePlan& role,
                          const MeshPlan& mesh, const WorkloadShape& workload, bool sleeps, MemoryEstimate& m) {
  // The role's dtype and tp split; no ZeRO (a plain model on every rank).
  const int64_t weights = ceil_div(element_bytes(role.dtype) * parameter_count, mesh.tp);
  if (!sleeps) {
    // Resident throughout; its no-grad forward (one layer at a time, the
    // same logits as the role's) ends before the role's own forward.
    m.reference = weights;
    return;
  }
  // Woken for its forward only, before the role's activations exist: the
  // peak is the larger of the two phases.
  const int64_t forward = weights + (local_tokens(workload, mesh) * layer_activation_elements(reference, mesh.tp) +
                                     gathered_kv_elements(reference, workload, mesh)) *
                                        element_bytes(role.dtype);
  m.reference = std::max<int64_t>(0, forward - m.activations);
  m.reference_host = weights;
}

EngineMemory engine_memory(const Architecture& a, Precision dtype, int tensor_parallel,
                           double memory_utilization, int64_t capacity, int64_t sequence_length,
                           int64_t overhead) {
  const int e = element_bytes(dtype);
  EngineMemory engine;
  engine.memory.parameters = ceil_div(e * a.parameters(), tensor_parallel);
  engine.memory.overhead = overhead;
  // Key and value per layer; a kv head is replicated when tp exceeds kv_heads.
  const int64_t kv_heads_here = std::max<int64_t>(1, a.kv_heads / tensor_parallel);
  engine.kv_bytes_per_token = 2 * a.layers * kv_heads_here * a.head_dim() * e;
  if (capacity <= 0) return engine;  // nothing to size the cache against

  engine.budget_bytes = static_cast<int64_t>(std::floor(memory_utilization * static_cast<double>(capacity)));
  const int64_t fixed = engine.memory.parameters + overhead;
  engine.memory.kv_cache = std::max<int64_t>(0, engine.budget_bytes - fixed);
  engine.kv_cache_tokens = engine.memory.kv_cache / engine.kv_bytes_per_token;
  engine.kv_cache_sequences = sequence_length > 0 ? engine.kv_cache_tokens / sequence_length : 0;
  engine.fits_budget = engine.budget_bytes >= fixed + engine.kv_bytes_per_token * sequence_length;
  return engine;
}

// Saturates: the schema and --cluster bound memory_gb, but a ClusterShape
// built otherwise must not turn a huge size into a negative one.
int64_t capacity_bytes(const ClusterShape& cluster) {
  if (!(cluster.memory_gb > 0)) return 0;
  const double bytes = cluster.memory_gb * static_cast<double>(kGiB);
  constexpr double kLargest = 0x1p62;  // exact in a double, and leaves room for sums
  return bytes >= kLargest ? static_cast<int64_t>(kLargest) : static_cast<int64_t>(std::llround(bytes));
}

}  // namespace meshrun::plan_detail
