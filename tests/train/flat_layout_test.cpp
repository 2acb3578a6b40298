// Flat buffers: padding to the dp size, parameter views, decay and split
// ranges per shard, bucket assignment, releasable storage.
#include "tests/dist/torch_doctest.hpp"

#include "src/train/flat_layout.hpp"

namespace meshrun::train_detail {
namespace {

TEST_CASE("a flat layout packs parameters back to back and pads to a multiple of the shards") {
  const auto layout = make_flat_layout({{4, {2, 3}, true, false}, {1, {5}, false, true}, {7, {3}, true, false}}, 4);
  REQUIRE(layout.entries.size() == 3);
  CHECK(layout.entries[0].parameter == 4);
  CHECK(layout.entries[1].offset == 6);
  CHECK(layout.entries[2].offset == 11);
  CHECK(layout.numel == 14);
  CHECK(layout.shard_numel == 4);
  CHECK(layout.padded_numel == 16);
  CHECK(layout.shard_begin(3) == 12);
  // Shard 1 covers [4, 8): entry 0's tail decays, entry 1's head is split.
  CHECK(layout.ranges_within(4, 8, &FlatEntry::decays) == ElementRanges{{0, 2}});
  CHECK(layout.ranges_within(4, 8, &FlatEntry::tp_split) == ElementRanges{{2, 4}});
  // Shard 3 covers [12, 16): the last entry's rest, then padding.
  CHECK(layout.ranges_within(12, 16, &FlatEntry::decays) == ElementRanges{{0, 2}});
  // Adjacent decaying entries merge into one run.
  const auto merged = make_flat_layout({{0, {3}, true, false}, {1, {2}, true, false}}, 1);
  CHECK(merged.padded_numel == 5);
  CHECK(merged.ranges_within(0, 5, &FlatEntry::decays) == ElementRanges{{0, 5}});
  CHECK_THROWS_AS(make_flat_layout({}, 0), std::logic_error);
}

TEST_CASE("entry views alias the flat buffer") {
  const auto layout = make_flat_layout({{0, {2, 2}, true, false}, {1, {3}, true, false}}, 2);
  auto flat = torch::arange(layout.padded_numel, torch::kFloat32);
  auto second = entry_view(flat, layout.entries[1]);
  CHECK(second.sizes().vec() == std::vector<int64_t>{3});
  CHECK(second[0].item<float>() == 4.0f);
  entry_view(flat, layout.entries[0]).fill_(-1);
  CHECK(flat[3].item<float>() == -1.0f);
  CHECK(flat[4].item<float>() == 4.0f);
  CHECK(layout.padded_numel == 8);
}

TEST_CASE("buckets fill to the byte limit in backward order; a large parameter gets its own") {
  const std::vector<int64_t> bytes{40, 40, 200, 10, 10, 10};
  const auto buckets = assign_buckets({5, 4, 3, 2, 1, 0}, bytes, 64);
  REQUIRE(buckets.size() == 4);
  CHECK(buckets[0] == std::vector<int>{5, 4, 3});
  CHECK(buckets[1] == std::vector<int>{2});
  CHECK(buckets[2] == std::vector<int>{1});
  CHECK(buckets[3] == std::vector<int>{0});
  CHECK(assign_buckets({2, 1, 0}, {1, 1, 1}, 1 << 20).size() == 1);
  CHECK_THROWS_AS(assign_buckets({3}, {1, 1}, 8), std::logic_error);
}

TEST_CASE("released storage keeps views valid once restored") {
  auto flat = torch::arange(6, torch::kFloat32);
  auto view = flat.narrow(0, 2, 3).view({3});
  CHECK(has_storage(flat));
  release_storage(flat);
  CHECK_FALSE(has_storage(flat));
  CHECK_FALSE(has_storage(view));
  restore_storage(flat);
  REQUIRE(has_storage(view));
  flat.copy_(torch::arange(6, torch::kFloat32) * 10);
  CHECK(view[1].item<float>() == 30.0f);
}

}  // namespace
}  // namespace meshrun::train_detail
