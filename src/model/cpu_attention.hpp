// Causal attention for CPU training in fp32, by query blocks, one (sequence,
// query head) per thread. Why: LibTorch's CPU bmm runs one multi-threaded
// GEMM per matrix of the batch, and at attention's sizes (a [256, 64] by
// [64, 256] product) each of those calls spends much of its time starting
// and joining threads; here every thread runs whole single-threaded GEMMs
// and keeps a block's scores in its cache. Query block [r0, r1) only meets
// keys [0, r1): with a causal mask every later key has probability exactly
// zero, so skipping them changes nothing but the work (about 5/8 of the full
// square at 256 tokens in blocks of 64).
//
// Invariants the caller keeps: the mask forbids every key after its query
// (attention_mask() always does), and q, k and v come from one forward (no
// KV cache). A query whose every key is masked (padding) gets a uniform
// distribution over keys [0, r1) instead of all keys; such rows carry no loss.
// With sequence parallelism the queries are this rank's columns of the row
// (two chunks) and the keys the whole row: each query row carries its
// position, and a block meets the keys up to its last row's position.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace meshrun::model_detail {

// True when cpu_causal_attention serves these inputs: CPU float32 tensors
// and at least as many (sequence, query head) pairs as intra-op threads.
bool cpu_causal_attention_applies(const torch::Tensor& q, int64_t batch, int64_t heads);

// softmax(q kᵀ + mask) v with autograd. q [batch, heads, seq, d]; k and v
// [batch × kv_heads, keys, d] (query head h reads kv head h / (heads /
// kv_heads)); mask additive [1 or batch, 1, seq, keys], causal by position.
// query_positions: CPU int64 [seq], ascending, each < keys, the key column
// of each query row; undefined when the queries are keys 0..seq-1 (keys ==
// seq). Returns [batch, heads, seq, d].
torch::Tensor cpu_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& mask, const torch::Tensor& query_positions = {});

// A decode step's attention straight from a paged KV pool (PagedKvCache),
// fp32 on the CPU, no autograd (generation only). Why hand-written: the
// tensor path gathers every row's keys and values up to the longest live
// row (index_select, then a transposing copy), so each step copies
// batch × longest × kv_heads × d twice per pool and multiplies the padding
// too; with long-tailed lengths most of that is padding. Here each (row, kv
// head) reads its own n = position + 1 keys and values once, through its
// block table, one thread per (row, kv head).
//
// q [batch, heads, 1, d] (the new token of each row, the 1/√d scale in it);
// key_pool, value_pool [slots, kv_heads, d]; tables CPU int64 [batch,
// width] (block ids); positions CPU int64 [batch] (the new token's
// position: it sees keys 0..position, its own written already); mask
// additive float [batch, 1, 1, keys > every position] (a window's masked
// keys weigh exactly 0). Returns [batch, heads, 1, d]. Every table entry a
// row reads and every position is checked before anything is read.
// applies: for this q; serves: for a step of `new_tokens` per row in this
// device and dtype (what forward_paged decides before q exists).
bool cpu_paged_decode_attention_serves(torch::Device device, torch::Dtype dtype, int64_t new_tokens);
bool cpu_paged_decode_attention_applies(const torch::Tensor& q);
torch::Tensor cpu_paged_decode_attention(const torch::Tensor& q, const torch::Tensor& key_pool,
                                         const torch::Tensor& value_pool, const torch::Tensor& tables,
                                         const torch::Tensor& positions, const torch::Tensor& mask,
                                         int64_t block_size);

// One (row, kv head) of a paged decode step, what each thread of
// cpu_paged_decode_attention (and of the fused decode layer,
// cpu_decode_step.hpp) runs: the kv head's `group` query rows at q (d
// floats each, consecutive) against keys and values 0 .. n − 1 of kv head
// `kv`, found through `table` (block ids) in pools [slots, kv_heads, d],
// with the additive mask row `mask` [n]; out like q. The AVX2 rows where
// they apply (decode_kernels.hpp), the portable ones elsewhere.
struct PagedDecodeScratch {
  PagedDecodeScratch(int64_t longest, int64_t group);
  std::vector<const float*> keys, values;  // n each
  std::vector<float> scores;               // group × n
};
void paged_decode_unit(float* out, const float* q, int64_t group, const float* mask, const float* key_pool,
                       const float* value_pool, const int64_t* table, int64_t block_size, int64_t kv_heads, int64_t kv,
                       int64_t n, int64_t d, PagedDecodeScratch& scratch);

}  // namespace meshrun::model_detail
