// KvBlockPool: the bookkeeping of a paged KV cache, torch-free. The cache's
// memory is `blocks` fixed-size blocks of `block_size` token slots; each live
// sequence has a block table (KvBlockTable) saying which blocks hold its
// tokens, in order, so memory follows the tokens that are live instead of
// max_batch × the longest sequence. The samples of one prompt share the
// prompt's full blocks (reference counts); the last, partial block is copied
// for each of them when they fork (copy-on-write at the fork: each sample
// writes its next token into it at once, so copying later would copy the
// same tokens). The tensors themselves are PagedKvCache's (model/); this
// class only hands out block numbers.
//
// Invariants: a block is either free or referenced by at least one table;
// free_blocks() + the distinct referenced blocks = total_blocks(); a table
// of `tokens` tokens holds exactly blocks_for(tokens) blocks, and only its
// last may be partly filled; a block referenced by more than one table is
// full, so no write ever lands in a shared block. Every operation that needs
// blocks either gets all of them or changes nothing (the caller then
// preempts a sequence or waits), and nothing is allocated after construction.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace meshrun {

struct KvBlockTable {
  std::vector<int32_t> blocks;
  int64_t tokens = 0;  // token slots in use, positions [0, tokens)
};

// A partial block a fork copies: the first `tokens` slots of block `from`
// into block `to`.
struct KvBlockCopy {
  int32_t from = 0, to = 0;
  int64_t tokens = 0;
};

class KvBlockPool {
 public:
  // Throws std::logic_error unless blocks >= 1, block_size >= 1 and the pool
  // stays within int32 block numbers.
  KvBlockPool(int64_t blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t total_blocks() const { return static_cast<int64_t>(refs_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return total_blocks() - free_blocks(); }
  // The most blocks in use at once since construction or reset_peak().
  int64_t peak_used_blocks() const { return peak_used_; }
  void reset_peak() { peak_used_ = used_blocks(); }
  int refs(int32_t block) const { return refs_.at(static_cast<size_t>(block)); }

  // Blocks that `tokens` tokens take.
  static int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }
  int64_t blocks_for(int64_t tokens) const { return blocks_for(tokens, block_size_); }

  // Room for `more` tokens after the table's: allocates the blocks that
  // needs and advances table.tokens. False, with nothing changed, when the
  // pool has too few free blocks.
  bool grow(KvBlockTable& table, int64_t more);
  // `child` (empty) becomes a copy of `parent`: the full blocks shared, the
  // partial last block (if any) a fresh block whose slots the caller copies
  // (`copy`). False, with nothing changed, when no block is free for that.
  bool fork(const KvBlockTable& parent, KvBlockTable& child, std::optional<KvBlockCopy>& copy);
  // Drops the table's references (a block no table holds is free again)
  // and empties it.
  void release(KvBlockTable& table);
  // Every block free again, whatever tables still name them (they must be
  // dropped): the way out of a generation that failed half-way.
  void clear();

  // The pool slot of the table's token `position` (block × block_size + offset).
  int64_t slot(const KvBlockTable& table, int64_t position) const;

 private:
  int32_t take();

  int64_t block_size_;
  std::vector<int> refs_;       // per block
  std::vector<int32_t> free_;   // a stack: the most recently freed block is reused first
  int64_t peak_used_ = 0;
};

}  // namespace meshrun
