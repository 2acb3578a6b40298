// KvCache: the keys and values of the tokens a LlamaModel has already seen,
// so that generation runs each new token through the model once instead of
// recomputing the whole prefix (LlamaModelImpl::forward_cached).
//
// Invariants: memory is allocated once, at construction, for `capacity`
// tokens of `batch` sequences in every layer (this rank's kv heads under
// tensor parallelism), in the model's dtype and on its device; nothing grows
// during generation. Positions [0, length()) of every sequence hold valid
// keys and values (left padding included: the attention mask decides what is
// read). forward_cached appends and advances length(); going past capacity
// is an error, never a reallocation.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace meshrun {

class LlamaModelImpl;

class KvCache {
 public:
  KvCache(const LlamaModelImpl& model, int64_t batch, int64_t capacity);

  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  int64_t length() const { return length_; }
  int64_t bytes() const;
  // Forget every token (the memory stays allocated).
  void clear() { length_ = 0; }

  // Layer `layer`'s keys or values, [batch × kv_heads, capacity, head_dim].
  torch::Tensor& keys(int64_t layer) { return keys_.at(static_cast<size_t>(layer)); }
  torch::Tensor& values(int64_t layer) { return values_.at(static_cast<size_t>(layer)); }
  int64_t layers() const { return static_cast<int64_t>(keys_.size()); }
  // Checks that `tokens` more fit; throws std::logic_error otherwise (the
  // generator sizes the cache for every prompt first).
  void check_room(int64_t tokens) const;
  void advance(int64_t tokens);

  // Bytes a cache of `tokens` tokens per sequence takes for one sequence of
  // `model` (all layers, keys and values).
  static int64_t bytes_per_token(const LlamaModelImpl& model);

 private:
  int64_t batch_ = 0;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  std::vector<torch::Tensor> keys_, values_;
};

}  // namespace meshrun
