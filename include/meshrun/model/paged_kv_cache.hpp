// PagedKvCache: the keys and values of a paged KV cache, the memory behind
// the rollout engine's block tables (rollout/kv_blocks.hpp). Per layer one
// pool of blocks × block_size token slots for keys and one for values,
// [slots, kv_heads, head_dim] (this rank's kv heads under tensor
// parallelism): token slot s is block s / block_size, offset s % block_size.
// LlamaModelImpl::forward_paged writes each new token's keys and values at
// the slot its table names and reads a sequence's keys through its table.
//
// Invariants: allocated once, at construction, in the model's dtype and on
// its device; nothing grows while generating. Which slots hold which
// sequence is the block tables' business; this class knows only slots.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace meshrun {

class LlamaModelImpl;

class PagedKvCache {
 public:
  PagedKvCache(const LlamaModelImpl& model, int64_t blocks, int64_t block_size);

  int64_t blocks() const { return blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t slots() const { return blocks_ * block_size_; }
  int64_t bytes() const;
  int64_t layers() const { return static_cast<int64_t>(keys_.size()); }
  // Layer `layer`'s keys or values, [slots, kv_heads, head_dim].
  torch::Tensor& keys(int64_t layer) { return keys_.at(static_cast<size_t>(layer)); }
  torch::Tensor& values(int64_t layer) { return values_.at(static_cast<size_t>(layer)); }
  // The first `tokens` slots of block `from` into block `to`, every layer
  // (a fork's copy of a partial prompt block).
  void copy_block(int64_t from, int64_t to, int64_t tokens);

 private:
  int64_t blocks_ = 0, block_size_ = 0;
  std::vector<torch::Tensor> keys_, values_;
};

}  // namespace meshrun
