// ShardMap JSON (include/meshrun/ckpt/shard_map.hpp).
#include "meshrun/ckpt/shard_map.hpp"

#include <nlohmann/json.hpp>

#include "meshrun/ckpt/checkpoint.hpp"

namespace meshrun {
namespace {

constexpr std::string_view kShardPrefix = "shards/";

void require(bool condition, const std::string& where, const std::string& what) {
  if (!condition) throw CheckpointError(where + ": shard map: " + what);
}

}  // namespace

std::string shard_map_key(const std::string& role) { return std::string(kShardPrefix) + role; }
std::string model_config_key(const std::string& role) { return "model/" + role; }
std::string model_head_key(const std::string& role) { return "head/" + role; }

std::vector<std::string> roles_with_shard_maps(const std::vector<std::string>& metadata_keys) {
  std::vector<std::string> roles;
  for (const auto& key : metadata_keys)
    if (key.size() > kShardPrefix.size() && key.compare(0, kShardPrefix.size(), kShardPrefix) == 0)
      roles.push_back(key.substr(kShardPrefix.size()));
  return roles;
}

std::string ShardMap::to_json() const {
  nlohmann::json buckets_json = nlohmann::json::array();
  for (const auto& bucket : buckets) {
    nlohmann::json entries_json = nlohmann::json::array();
    for (const auto& entry : bucket.entries)
      entries_json.push_back({{"name", entry.name},
                              {"offset", entry.offset},
                              {"numel", entry.numel},
                              {"shape", entry.shape},
                              {"full_shape", entry.full_shape},
                              {"split_dim", entry.split_dim}});
    buckets_json.push_back({{"padded_numel", bucket.padded_numel},
                            {"owned_begin", bucket.owned_begin},
                            {"owned_numel", bucket.owned_numel},
                            {"entries", std::move(entries_json)}});
  }
  return nlohmann::json{{"dp_rank", dp_rank},       {"dp_size", dp_size}, {"tp_rank", tp_rank},
                        {"tp_size", tp_size},       {"zero_stage", zero_stage},
                        {"buckets", std::move(buckets_json)}}
      .dump();
}

ShardMap ShardMap::from_json(std::string_view text, const std::string& where) {
  ShardMap map;
  try {
    const auto json = nlohmann::json::parse(text);
    map.dp_rank = json.at("dp_rank").get<int>();
    map.dp_size = json.at("dp_size").get<int>();
    map.tp_rank = json.at("tp_rank").get<int>();
    map.tp_size = json.at("tp_size").get<int>();
    map.zero_stage = json.at("zero_stage").get<int>();
    for (const auto& bucket_json : json.at("buckets")) {
      ShardBucket bucket;
      bucket.padded_numel = bucket_json.at("padded_numel").get<std::int64_t>();
      bucket.owned_begin = bucket_json.at("owned_begin").get<std::int64_t>();
      bucket.owned_numel = bucket_json.at("owned_numel").get<std::int64_t>();
      for (const auto& entry_json : bucket_json.at("entries"))
        bucket.entries.push_back({entry_json.at("name").get<std::string>(), entry_json.at("offset").get<std::int64_t>(),
                                  entry_json.at("numel").get<std::int64_t>(),
                                  entry_json.at("shape").get<std::vector<std::int64_t>>(),
                                  entry_json.at("full_shape").get<std::vector<std::int64_t>>(),
                                  entry_json.at("split_dim").get<int>()});
      map.buckets.push_back(std::move(bucket));
    }
  } catch (const nlohmann::json::exception& error) {
    throw CheckpointError(where + ": shard map is not readable (" + error.what() + ")");
  }
  require(map.dp_size >= 1 && map.dp_rank >= 0 && map.dp_rank < map.dp_size, where,
          "dp rank " + std::to_string(map.dp_rank) + " of " + std::to_string(map.dp_size));
  require(map.tp_size >= 1 && map.tp_rank >= 0 && map.tp_rank < map.tp_size, where,
          "tp rank " + std::to_string(map.tp_rank) + " of " + std::to_string(map.tp_size));
  for (size_t b = 0; b < map.buckets.size(); ++b) {
    const ShardBucket& bucket = map.buckets[b];
    const std::string name = "bucket " + std::to_string(b);
    require(bucket.owned_begin >= 0 && bucket.owned_numel >= 0 &&
                bucket.owned_begin + bucket.owned_numel <= bucket.padded_numel,
            where, name + " owns elements outside its buffer");
    for (const auto& entry : bucket.entries) {
      std::int64_t local = 1, full = 1;
      for (auto size : entry.shape) local *= size;
      for (auto size : entry.full_shape) full *= size;
      require(entry.offset >= 0 && entry.numel >= 0 && entry.offset + entry.numel <= bucket.padded_numel &&
                  local == entry.numel,
              where, name + " entry '" + entry.name + "' does not fit its buffer");
      require(entry.split_dim >= -1 && entry.split_dim < static_cast<int>(entry.full_shape.size()) &&
                  entry.shape.size() == entry.full_shape.size() &&
                  (entry.split_dim >= 0 || local == full),
              where, name + " entry '" + entry.name + "' has inconsistent shapes");
    }
  }
  return map;
}

}  // namespace meshrun
