// The rollout engine's decode step on the CPU as one routine per decoder
// layer (forward_paged with one new token per row, fp32, no autograd).
//
// Why: in that step a layer is some twenty LibTorch operators on a few
// rows (norms, views, two rotations, two index_copy_ into the pool, the
// attention's checks and allocations, the residual adds, the SwiGLU node),
// and with the long tail of a GRPO rollout most steps hold a handful of
// rows, so the operators' dispatch and allocations cost more than their
// arithmetic; the step's masks and slot indices are more operators still.
// cpu_decode_layer runs the layer on raw rows: the norms, rotations, pool
// writes and the attention in one parallel region, around the same
// projections (forward_sharing_input, linear_or_small_batch).
//
// Invariant: the result has exactly the bits of DecoderLayerImpl::forward
// over the paged cache (tested): every element is computed by the same
// kernel in the same order (rms_norm's row kernels, rotate_decode_row, the
// paged attention's rows with a mask of zeros, which is what the step's mask
// holds at every key a row reads, and swiglu_to). So the fused step changes
// no token and no log-prob; it only skips the operators around them.
#pragma once

#include <torch/torch.h>

#include "layers.hpp"

namespace meshrun::model_detail {

// One decode step's rows: row b feeds the token at positions[b] and reads
// keys 0 .. positions[b] through tables[b × width ..] (block ids, checked
// by the caller to lie in the pool and to cover every position).
struct CpuDecodeRows {
  int64_t rows = 0;
  const int64_t* positions = nullptr;
  const int64_t* tables = nullptr;
  int64_t width = 0;
  // rotary_tables for the rows' positions, [rows or 1, 1, 1, head_dim / 2],
  // contiguous.
  RotaryTables rope;
  PagedKvCache* cache = nullptr;
};

// Whether the step may run a model's layers through cpu_decode_layer: fp32
// on the CPU without autograd, every layer plain() (layers.hpp), no sliding
// window, an even head size.
bool cpu_decode_layers_serve(const std::vector<DecoderLayer>& layers, const ModelConfig& config, torch::Dtype dtype,
                             torch::Device device);

// While one lives on this thread, cpu_decode_layers_serve says no: the
// step runs the unfused layers (what the tests and the benchmark hold the
// fused ones to).
class UnfusedDecodeScope {
 public:
  UnfusedDecodeScope();
  ~UnfusedDecodeScope();
  UnfusedDecodeScope(const UnfusedDecodeScope&) = delete;
  UnfusedDecodeScope& operator=(const UnfusedDecodeScope&) = delete;

 private:
  bool outer_;
};

// Layer `layer_index` of the step on x [rows, hidden] (contiguous; its
// storage is reused for the output): writes the rows' new keys and values
// into the cache and returns the layer's output [rows, hidden].
torch::Tensor cpu_decode_layer(DecoderLayerImpl& layer, int64_t layer_index, torch::Tensor x,
                               const CpuDecodeRows& step);

}  // namespace meshrun::model_detail
