// ShardMap: the JSON a rank file carries about where its engine shards sit
// round-trips exactly, and malformed or inconsistent maps are refused with
// the file named.
#include <doctest/doctest.h>

#include <limits>

#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/ckpt/shard_map.hpp"

namespace meshrun {
namespace {

ShardMap example() {
  ShardMap map;
  map.dp_rank = 1;
  map.dp_size = 2;
  map.tp_rank = 1;
  map.tp_size = 2;
  map.zero_stage = 2;
  ShardBucket bucket;
  bucket.padded_numel = 16;
  bucket.owned_begin = 8;
  bucket.owned_numel = 8;
  bucket.entries.push_back({"model.layers.0.mlp.up_proj.weight", 0, 6, {3, 2}, {6, 2}, 0});
  bucket.entries.push_back({"model.norm.weight", 6, 2, {2}, {2}, -1});
  map.buckets.push_back(bucket);
  return map;
}

std::string error_of(const std::string& text) {
  try {
    ShardMap::from_json(text, "rank-1.safetensors");
  } catch (const CheckpointError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a shard map round-trips through JSON") {
  const ShardMap map = example();
  const ShardMap back = ShardMap::from_json(map.to_json(), "here");
  CHECK(back.dp_rank == 1);
  CHECK(back.dp_size == 2);
  CHECK(back.tp_rank == 1);
  CHECK(back.tp_size == 2);
  CHECK(back.zero_stage == 2);
  REQUIRE(back.buckets.size() == 1);
  CHECK(back.buckets[0].padded_numel == 16);
  CHECK(back.buckets[0].owned_begin == 8);
  CHECK(back.buckets[0].owned_numel == 8);
  REQUIRE(back.buckets[0].entries.size() == 2);
  const ShardEntry& split = back.buckets[0].entries[0];
  CHECK(split.name == "model.layers.0.mlp.up_proj.weight");
  CHECK(split.shape == std::vector<std::int64_t>{3, 2});
  CHECK(split.full_shape == std::vector<std::int64_t>{6, 2});
  CHECK(split.split_dim == 0);
  CHECK(back.buckets[0].entries[1].split_dim == -1);
  CHECK(back.to_json() == map.to_json());
}

TEST_CASE("malformed and inconsistent shard maps are refused with the file named") {
  CHECK(error_of("{").find("rank-1.safetensors: shard map is not readable") == 0);
  CHECK(error_of(R"({"dp_rank": 0})").find("shard map is not readable") != std::string::npos);

  ShardMap map = example();
  map.dp_rank = 2;
  CHECK(error_of(map.to_json()).find("dp rank 2 of 2") != std::string::npos);
  map = example();
  map.tp_size = 0;
  CHECK(error_of(map.to_json()).find("tp rank 1 of 0") != std::string::npos);
  map = example();
  map.buckets[0].owned_numel = 9;
  CHECK(error_of(map.to_json()).find("bucket 0 owns elements outside its buffer") != std::string::npos);
  map = example();
  map.buckets[0].entries[1].offset = 15;
  CHECK(error_of(map.to_json()).find("entry 'model.norm.weight' does not fit its buffer") != std::string::npos);
  map = example();
  map.buckets[0].entries[0].shape = {2, 3, 1};
  CHECK(error_of(map.to_json()).find("entry 'model.layers.0.mlp.up_proj.weight' has inconsistent shapes") !=
        std::string::npos);
  map = example();
  map.buckets[0].entries[1].full_shape = {4};  // replicated, yet larger than its local shape
  CHECK(error_of(map.to_json()).find("has inconsistent shapes") != std::string::npos);
}

TEST_CASE("numbers out of range are refused naming the key, never converted or summed past int64") {
  // Found by fuzz/ckpt_fuzz.cpp (fuzz/regressions/ckpt/shard-map-float-offset):
  // a float beyond int64 reached nlohmann's get<int64_t>(), undefined behaviour.
  std::string text = example().to_json();
  const auto replace = [](std::string text, const std::string& from, const std::string& to) {
    return text.replace(text.find(from), from.size(), to);
  };
  CHECK(error_of(replace(text, "\"owned_begin\":8", "\"owned_begin\":2.0e48")) ==
        "rank-1.safetensors: shard map: buckets[0].owned_begin is 2e+48, not a 64-bit integer");
  CHECK(error_of(replace(text, "\"dp_size\":2", "\"dp_size\":4294967298")) ==
        "rank-1.safetensors: shard map: dp_size is 4294967298, not a 32-bit integer");
  CHECK(error_of(replace(text, "\"shape\":[3,2]", "\"shape\":[3,2.5]")) ==
        "rank-1.safetensors: shard map: buckets[0].entries[0].shape[1] is 2.5, not a 64-bit integer");
  CHECK(error_of(replace(text, "\"split_dim\":-1", "\"split_dim\":\"none\"")) ==
        "rank-1.safetensors: shard map: buckets[0].entries[1].split_dim is \"none\", not a 32-bit integer");

  ShardMap map = example();
  map.buckets[0].owned_begin = 8;
  map.buckets[0].owned_numel = std::numeric_limits<std::int64_t>::max();  // begin + numel overflows
  CHECK(error_of(map.to_json()).find("bucket 0 owns elements outside its buffer") != std::string::npos);
  map = example();
  map.buckets[0].entries[1].numel = std::numeric_limits<std::int64_t>::max();
  CHECK(error_of(map.to_json()).find("entry 'model.norm.weight' does not fit its buffer") != std::string::npos);
  map = example();
  map.buckets[0].entries[0].shape = {2617418, 7047956753329};  // the product is 2^64 + 6: 6 after overflowing
  CHECK(error_of(map.to_json()).find("does not fit its buffer") != std::string::npos);
  map = example();
  map.buckets[0].entries[0].shape = {-3, -2};  // negative sizes whose product is the numel
  CHECK(error_of(map.to_json()).find("does not fit its buffer") != std::string::npos);
}

TEST_CASE("metadata keys name the roles that have shard maps") {
  CHECK(shard_map_key("actor") == "shards/actor");
  CHECK(model_config_key("critic") == "model/critic");
  CHECK(model_head_key("critic") == "head/critic");
  CHECK(roles_with_shard_maps({"head/actor", "shards/actor", "model/actor", "shards/critic", "shards/", "format"}) ==
        std::vector<std::string>{"actor", "critic"});
}

}  // namespace meshrun
