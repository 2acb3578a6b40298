// KvBlockPool (include/meshrun/rollout/kv_blocks.hpp). Hand-written: the
// allocator is a free stack and reference counts, a few dozen lines that
// no library offers apart from an inference engine's own.
#include "meshrun/rollout/kv_blocks.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace meshrun {

KvBlockPool::KvBlockPool(int64_t blocks, int64_t block_size) : block_size_(block_size) {
  if (blocks < 1 || block_size < 1 || blocks > std::numeric_limits<int32_t>::max())
    throw std::logic_error("a KV block pool needs at least one block of at least one token, got " +
                           std::to_string(blocks) + " blocks of " + std::to_string(block_size));
  refs_.assign(static_cast<size_t>(blocks), 0);
  free_.reserve(static_cast<size_t>(blocks));
  clear();
}

void KvBlockPool::clear() {
  std::fill(refs_.begin(), refs_.end(), 0);
  free_.clear();
  // Pushed in reverse so that the first blocks taken are 0, 1, 2, ...
  for (int64_t block = total_blocks() - 1; block >= 0; --block) free_.push_back(static_cast<int32_t>(block));
}

int32_t KvBlockPool::take() {
  const int32_t block = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(block)] = 1;
  if (used_blocks() > peak_used_) peak_used_ = used_blocks();
  return block;
}

bool KvBlockPool::grow(KvBlockTable& table, int64_t more) {
  if (more < 0) throw std::logic_error("grow by " + std::to_string(more) + " tokens");
  const int64_t needed = blocks_for(table.tokens + more) - static_cast<int64_t>(table.blocks.size());
  if (needed > free_blocks()) return false;
  for (int64_t i = 0; i < needed; ++i) table.blocks.push_back(take());
  table.tokens += more;
  return true;
}

bool KvBlockPool::fork(const KvBlockTable& parent, KvBlockTable& child, std::optional<KvBlockCopy>& copy) {
  if (!child.blocks.empty() || child.tokens != 0) throw std::logic_error("fork into a table that holds blocks");
  const int64_t partial = parent.tokens % block_size_;
  copy.reset();
  if (partial != 0 && free_.empty()) return false;
  child.blocks = parent.blocks;
  child.tokens = parent.tokens;
  const size_t shared = partial != 0 ? child.blocks.size() - 1 : child.blocks.size();
  for (size_t i = 0; i < shared; ++i) ++refs_[static_cast<size_t>(child.blocks[i])];
  if (partial != 0) {
    const int32_t fresh = take();
    copy = KvBlockCopy{child.blocks.back(), fresh, partial};
    child.blocks.back() = fresh;
  }
  return true;
}

void KvBlockPool::release(KvBlockTable& table) {
  for (const int32_t block : table.blocks) {
    int& count = refs_.at(static_cast<size_t>(block));
    if (count <= 0) throw std::logic_error("block " + std::to_string(block) + " released more often than held");
    if (--count == 0) free_.push_back(block);
  }
  table.blocks.clear();
  table.tokens = 0;
}

int64_t KvBlockPool::slot(const KvBlockTable& table, int64_t position) const {
  if (position < 0 || position >= static_cast<int64_t>(table.blocks.size()) * block_size_)
    throw std::logic_error("token " + std::to_string(position) + " outside its " +
                           std::to_string(table.blocks.size()) + " blocks");
  return int64_t{table.blocks[static_cast<size_t>(position / block_size_)]} * block_size_ + position % block_size_;
}

}  // namespace meshrun
