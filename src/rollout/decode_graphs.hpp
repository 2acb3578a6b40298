// DecodeGraphs: the rollout engine's decode steps on fixed shapes, replayed
// as CUDA graphs (item 5 of the engine's design; vLLM's and SGLang's
// answer to a decode step of a small model being mostly kernel launches).
//
// A step of `rows` live sequences runs as the smallest batch bucket that
// holds them (1, 2, 4, 8, then every multiple of 8, and max_batch itself)
// over the smallest key width (a power of two of blocks, at most a whole
// sequence's) that covers its longest block table; the rows past `rows` are
// padding whose table is the scratch block (a block the pool never hands
// out), so their writes harm nothing, and whose logits are dropped. Each
// (batch, width) shape is captured the first time a step needs it, after
// one eager warm-up, into one memory pool all the shapes share; from then
// on a decode step is one copy of its inputs to the device and one graph
// launch.
//
// Invariants: a graph replays the addresses it was captured with: those of
// the weights, the KV cache and its own input buffers. bind() drops every
// graph when any of the first two moved (weights loaded out of place, a
// sleep and wake), release() drops them and their pool (the engine going to
// sleep). Each replay's logits are copied out at once, so a later replay of
// another shape, which may reuse the pool's memory, cannot change logits in
// use. Off CUDA the same fixed-shape steps run eagerly, without capture:
// the buckets, buffers and padding are the same (and tested there).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "meshrun/model/model.hpp"
#include "meshrun/model/paged_kv_cache.hpp"
#include "meshrun/rollout/kv_blocks.hpp"

namespace meshrun::rollout_detail {

// The batch sizes steps run as: 1, 2, 4, 8, then multiples of 8 below
// max_batch, then max_batch (vLLM's capture sizes). Throws for max_batch < 1.
std::vector<int64_t> decode_batch_buckets(int64_t max_batch);
// The key width, in blocks, of a step whose longest table holds `blocks`:
// the next power of two, at most max_blocks (a whole sequence's).
int64_t decode_width_blocks(int64_t blocks, int64_t max_blocks);

class DecodeGraphs {
 public:
  // Steps of at most max_batch rows whose tables hold at most max_blocks
  // blocks; padding rows write to `scratch_block` of the cache.
  DecodeGraphs(int64_t max_batch, int64_t max_blocks, int64_t scratch_block);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // The tensors the graphs read and write (the weights and the KV cache):
  // when their storages are not where they were at the last bind(), every
  // graph is dropped (the next steps capture anew).
  void bind(const std::vector<torch::Tensor>& memory);
  // One decode step: token `tokens[r]` at position `positions[r]` of the
  // sequence whose blocks are `tables[r]` (which covers that position);
  // returns the next-token logits [rows, vocab / tp], a tensor of its own.
  torch::Tensor step(LlamaModelImpl& model, PagedKvCache& cache, const std::vector<int64_t>& tokens,
                     const std::vector<int64_t>& positions, const std::vector<const KvBlockTable*>& tables);
  // Drops every graph and the memory they hold.
  void release();

  int64_t graphs() const;  // shapes captured and held now
  int64_t captures() const { return captures_; }  // since construction
  int64_t replays() const { return replays_; }    // steps served by a graph
  // Steps served, by batch bucket (the eager ones off CUDA included).
  const std::map<int64_t, int64_t>& steps_by_batch() const { return steps_by_batch_; }

 private:
  struct Shape;  // a (batch, width)'s buffers and graph (decode_graphs.cpp)
  Shape& shape_for(int64_t batch, int64_t width, const torch::Device& device);

  int64_t max_batch_, max_blocks_, scratch_block_;
  std::vector<int64_t> buckets_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Shape>> shapes_;
  std::vector<const void*> bound_;  // the storages of bind()'s tensors
  struct Pool;                      // the shared CUDA memory pool
  std::unique_ptr<Pool> pool_;
  int64_t captures_ = 0, replays_ = 0;
  std::map<int64_t, int64_t> steps_by_batch_;
};

}  // namespace meshrun::rollout_detail
