// PagedKvCache (include/meshrun/model/paged_kv_cache.hpp).
#include "meshrun/model/paged_kv_cache.hpp"

#include <stdexcept>
#include <string>

#include "meshrun/model/model.hpp"

namespace meshrun {

PagedKvCache::PagedKvCache(const LlamaModelImpl& model, int64_t blocks, int64_t block_size)
    : blocks_(blocks), block_size_(block_size) {
  if (blocks < 1 || block_size < 1)
    throw std::logic_error("a paged KV cache needs at least one block of at least one token, got " +
                           std::to_string(blocks) + " × " + std::to_string(block_size));
  const ModelConfig& config = model.config();
  const int64_t kv_heads = config.kv_heads / model.tp_size();
  const auto options = torch::TensorOptions().dtype(model.options().dtype).device(model.options().device);
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    keys_.push_back(torch::zeros({blocks * block_size, kv_heads, config.head_dim()}, options));
    values_.push_back(torch::zeros({blocks * block_size, kv_heads, config.head_dim()}, options));
  }
}

int64_t PagedKvCache::bytes() const {
  int64_t total = 0;
  for (const auto& tensor : keys_) total += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  return 2 * total;
}

void PagedKvCache::copy_block(int64_t from, int64_t to, int64_t tokens) {
  if (from < 0 || from >= blocks_ || to < 0 || to >= blocks_ || tokens < 0 || tokens > block_size_)
    throw std::logic_error("copy_block " + std::to_string(from) + " -> " + std::to_string(to) + " of " +
                           std::to_string(tokens) + " tokens in a pool of " + std::to_string(blocks_) + " × " +
                           std::to_string(block_size_));
  if (from == to || tokens == 0) return;
  for (auto* tensors : {&keys_, &values_})
    for (torch::Tensor& layer : *tensors)
      layer.narrow(0, to * block_size_, tokens).copy_(layer.narrow(0, from * block_size_, tokens));
}

}  // namespace meshrun
