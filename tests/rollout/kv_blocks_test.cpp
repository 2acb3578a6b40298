// KvBlockPool: allocation, sharing, copy-on-write at a fork, freeing, and
// no leak after many sequences.
#include <doctest/doctest.h>

#include <random>
#include <set>
#include <stdexcept>

#include "meshrun/rollout/kv_blocks.hpp"

namespace meshrun {
namespace {

TEST_CASE("blocks follow the tokens: a table holds ceil(tokens / block_size) blocks") {
  KvBlockPool pool(8, 4);
  KvBlockTable table;
  REQUIRE(pool.grow(table, 5));
  CHECK(table.tokens == 5);
  CHECK(table.blocks.size() == 2);
  CHECK(pool.free_blocks() == 6);
  REQUIRE(pool.grow(table, 3));  // fills the second block, no new one
  CHECK(table.blocks.size() == 2);
  REQUIRE(pool.grow(table, 1));
  CHECK(table.blocks.size() == 3);
  CHECK(pool.slot(table, 0) == table.blocks[0] * 4);
  CHECK(pool.slot(table, 6) == table.blocks[1] * 4 + 2);
  CHECK(pool.slot(table, 8) == table.blocks[2] * 4);
  CHECK_THROWS_AS(pool.slot(table, 12), std::logic_error);
  pool.release(table);
  CHECK(table.blocks.empty());
  CHECK(table.tokens == 0);
  CHECK(pool.free_blocks() == 8);
  CHECK(pool.peak_used_blocks() == 3);
}

TEST_CASE("a grow the pool cannot serve changes nothing") {
  KvBlockPool pool(3, 4);
  KvBlockTable a, b;
  REQUIRE(pool.grow(a, 9));  // 3 blocks
  CHECK_FALSE(pool.grow(b, 1));
  CHECK(b.blocks.empty());
  CHECK(b.tokens == 0);
  CHECK_FALSE(pool.grow(a, 4));
  CHECK(a.tokens == 9);
  CHECK(a.blocks.size() == 3);
  REQUIRE(pool.grow(a, 3));  // the last block's free slots need no block
  CHECK(a.tokens == 12);
}

TEST_CASE("a fork shares the full blocks and copies the partial last one") {
  KvBlockPool pool(10, 4);
  KvBlockTable prompt, sample;
  REQUIRE(pool.grow(prompt, 10));  // blocks: full, full, 2 of 4
  std::optional<KvBlockCopy> copy;
  REQUIRE(pool.fork(prompt, sample, copy));
  REQUIRE(copy.has_value());
  CHECK(copy->from == prompt.blocks[2]);
  CHECK(copy->to == sample.blocks[2]);
  CHECK(copy->tokens == 2);
  CHECK(sample.blocks[0] == prompt.blocks[0]);
  CHECK(sample.blocks[1] == prompt.blocks[1]);
  CHECK(sample.blocks[2] != prompt.blocks[2]);
  CHECK(pool.refs(prompt.blocks[0]) == 2);
  CHECK(pool.refs(prompt.blocks[2]) == 1);
  CHECK(pool.used_blocks() == 4);
  // Each writes its next token into a block of its own.
  REQUIRE(pool.grow(prompt, 1));
  REQUIRE(pool.grow(sample, 1));
  CHECK(pool.slot(prompt, 10) != pool.slot(sample, 10));
  CHECK(pool.slot(prompt, 3) == pool.slot(sample, 3));
  // The shared blocks outlive the first table released.
  pool.release(prompt);
  CHECK(pool.refs(sample.blocks[0]) == 1);
  CHECK(pool.used_blocks() == 3);
  pool.release(sample);
  CHECK(pool.free_blocks() == 10);
}

TEST_CASE("a fork at a block boundary copies nothing, and a fork with no block free fails cleanly") {
  KvBlockPool pool(3, 4);
  KvBlockTable prompt, sample;
  REQUIRE(pool.grow(prompt, 8));
  std::optional<KvBlockCopy> copy;
  REQUIRE(pool.fork(prompt, sample, copy));
  CHECK_FALSE(copy.has_value());
  CHECK(pool.used_blocks() == 2);
  REQUIRE(pool.grow(prompt, 1));  // the last free block
  KvBlockTable partial;
  REQUIRE(pool.fork(prompt, partial, copy) == false);
  CHECK(partial.blocks.empty());
  CHECK(pool.refs(prompt.blocks[0]) == 2);
  CHECK_THROWS_AS(pool.fork(prompt, sample, copy), std::logic_error);  // sample holds blocks
}

TEST_CASE("10k sequences with forks and random lengths leave no block behind") {
  KvBlockPool pool(64, 16);
  std::mt19937 random(7);
  std::vector<KvBlockTable> live;
  int64_t served = 0;
  while (served < 10000) {
    const auto action = random() % 4;
    if (action == 0 || live.empty()) {
      KvBlockTable table;
      if (pool.grow(table, 1 + static_cast<int64_t>(random() % 60))) {
        live.push_back(table);
        ++served;
      }
    } else if (action == 1) {
      KvBlockTable child;
      std::optional<KvBlockCopy> copy;
      if (pool.fork(live[random() % live.size()], child, copy)) {
        live.push_back(child);
        ++served;
      }
    } else if (action == 2) {
      (void)pool.grow(live[random() % live.size()], 1 + static_cast<int64_t>(random() % 20));
    } else {
      const size_t which = random() % live.size();
      pool.release(live[which]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(which));
    }
    // Every block is free or held, never both; shared blocks are full.
    std::multiset<int32_t> held;
    for (const KvBlockTable& table : live) {
      CHECK(static_cast<int64_t>(table.blocks.size()) == pool.blocks_for(table.tokens));
      held.insert(table.blocks.begin(), table.blocks.end());
    }
    std::set<int32_t> distinct(held.begin(), held.end());
    REQUIRE(static_cast<int64_t>(distinct.size()) + pool.free_blocks() == pool.total_blocks());
    for (const KvBlockTable& table : live)
      if (table.tokens % 16 != 0) CHECK(pool.refs(table.blocks.back()) == 1);
  }
  for (KvBlockTable& table : live) pool.release(table);
  CHECK(pool.free_blocks() == pool.total_blocks());
  CHECK(pool.peak_used_blocks() <= pool.total_blocks());
}

TEST_CASE("a pool of nothing is refused") {
  CHECK_THROWS_AS(KvBlockPool(0, 16), std::logic_error);
  CHECK_THROWS_AS(KvBlockPool(4, 0), std::logic_error);
  KvBlockPool pool(1, 1);
  KvBlockTable table;
  REQUIRE(pool.grow(table, 1));
  pool.release(table);
  CHECK_THROWS_AS(pool.release(table = KvBlockTable{{0}, 1}), std::logic_error);
}

}  // namespace
}  // namespace meshrun
