// KvCache: one allocation per layer for keys and one for values, shaped the
// way attention reads them ([batch × kv_heads, capacity, head_dim]).
#include "meshrun/model/kv_cache.hpp"

#include <stdexcept>
#include <string>

#include "meshrun/model/model.hpp"

namespace meshrun {

KvCache::KvCache(const LlamaModelImpl& model, int64_t batch, int64_t capacity) : batch_(batch), capacity_(capacity) {
  if (batch < 1 || capacity < 1)
    throw std::logic_error("a KV cache needs at least one sequence and one token, got " + std::to_string(batch) +
                           " × " + std::to_string(capacity));
  const ModelConfig& config = model.config();
  const int64_t kv_heads = config.kv_heads / model.tp_size();
  const auto options = torch::TensorOptions().dtype(model.options().dtype).device(model.options().device);
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    keys_.push_back(torch::zeros({batch * kv_heads, capacity, config.head_dim()}, options));
    values_.push_back(torch::zeros({batch * kv_heads, capacity, config.head_dim()}, options));
  }
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const auto& tensor : keys_) total += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  return 2 * total;
}

void KvCache::check_room(int64_t tokens) const {
  if (length_ + tokens > capacity_)
    throw std::logic_error("the KV cache holds " + std::to_string(capacity_) + " tokens per sequence; " +
                           std::to_string(length_) + " are used and " + std::to_string(tokens) + " more do not fit");
}

void KvCache::advance(int64_t tokens) {
  check_room(tokens);
  length_ += tokens;
}

int64_t KvCache::bytes_per_token(const LlamaModelImpl& model) {
  const ModelConfig& config = model.config();
  const int64_t element = static_cast<int64_t>(c10::elementSize(model.options().dtype));
  return 2 * config.layers * (config.kv_heads / model.tp_size()) * config.head_dim() * element;
}

}  // namespace meshrun
