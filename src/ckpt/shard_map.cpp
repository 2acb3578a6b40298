// ShardMap JSON (include/meshrun/ckpt/shard_map.hpp).
#include "meshrun/ckpt/shard_map.hpp"

#include <optional>

#include <nlohmann/json.hpp>

#include "json_integer.hpp"
#include "meshrun/bounded_json.hpp"
#include "meshrun/ckpt/checkpoint.hpp"

namespace meshrun {
namespace {

constexpr std::string_view kShardPrefix = "shards/";

void require(bool condition, const std::string& where, const std::string& what) {
  if (!condition) throw CheckpointError(where + ": shard map: " + what);
}

// The product of `shape`; none when a size is negative or it overflows.
std::optional<std::int64_t> element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t count = 1;
  for (std::int64_t size : shape)
    if (size < 0 || __builtin_mul_overflow(count, size, &count)) return std::nullopt;
  return count;
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
    buckets_json.push_back({{"ep_rank", bucket.ep_rank},
                            {"padded_numel", bucket.padded_numel},
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
  using ckpt_detail::integer_at;
  using ckpt_detail::integer_list_at;
  const std::string what = where + ": shard map: ";
  ShardMap map;
  try {
    const auto json = parse_bounded_json(text);
    map.dp_rank = integer_at<int>(json, "dp_rank", what);
    map.dp_size = integer_at<int>(json, "dp_size", what);
    map.tp_rank = integer_at<int>(json, "tp_rank", what);
    map.tp_size = integer_at<int>(json, "tp_size", what);
    map.zero_stage = integer_at<int>(json, "zero_stage", what);
    for (const auto& bucket_json : json.at("buckets")) {
      const std::string bucket_what = what + "buckets[" + std::to_string(map.buckets.size()) + "].";
      ShardBucket bucket;
      // Absent from maps written before expert parallelism: every rank's.
      if (bucket_json.contains("ep_rank")) bucket.ep_rank = integer_at<int>(bucket_json, "ep_rank", bucket_what);
      bucket.padded_numel = integer_at<std::int64_t>(bucket_json, "padded_numel", bucket_what);
      bucket.owned_begin = integer_at<std::int64_t>(bucket_json, "owned_begin", bucket_what);
      bucket.owned_numel = integer_at<std::int64_t>(bucket_json, "owned_numel", bucket_what);
      for (const auto& entry_json : bucket_json.at("entries")) {
        const std::string entry_what = bucket_what + "entries[" + std::to_string(bucket.entries.size()) + "].";
        bucket.entries.push_back({entry_json.at("name").get<std::string>(),
                                  integer_at<std::int64_t>(entry_json, "offset", entry_what),
                                  integer_at<std::int64_t>(entry_json, "numel", entry_what),
                                  integer_list_at(entry_json, "shape", entry_what),
                                  integer_list_at(entry_json, "full_shape", entry_what),
                                  integer_at<int>(entry_json, "split_dim", entry_what)});
      }
      map.buckets.push_back(std::move(bucket));
    }
  } catch (const nlohmann::json::exception& error) {
    throw CheckpointError(where + ": shard map is not readable (" + error.what() + ")");
  }
  require(map.dp_size >= 1 && map.dp_rank >= 0 && map.dp_rank < map.dp_size, where,
          "dp rank " + std::to_string(map.dp_rank) + " of " + std::to_string(map.dp_size));
  require(map.tp_size >= 1 && map.tp_rank >= 0 && map.tp_rank < map.tp_size, where,
          "tp rank " + std::to_string(map.tp_rank) + " of " + std::to_string(map.tp_size));
  // Sums and products are checked without computing past int64 (the
  // values are the file's, unbounded).
  for (size_t b = 0; b < map.buckets.size(); ++b) {
    const ShardBucket& bucket = map.buckets[b];
    const std::string name = "bucket " + std::to_string(b);
    require(bucket.ep_rank >= -1, where, name + " has ep rank " + std::to_string(bucket.ep_rank));
    require(bucket.owned_begin >= 0 && bucket.owned_numel >= 0 && bucket.owned_begin <= bucket.padded_numel &&
                bucket.owned_numel <= bucket.padded_numel - bucket.owned_begin,
            where, name + " owns elements outside its buffer");
    for (const auto& entry : bucket.entries) {
      const std::optional<std::int64_t> local = element_count(entry.shape), full = element_count(entry.full_shape);
      require(entry.offset >= 0 && entry.numel >= 0 && entry.offset <= bucket.padded_numel &&
                  entry.numel <= bucket.padded_numel - entry.offset && local == entry.numel,
              where, name + " entry '" + entry.name + "' does not fit its buffer");
      require(entry.split_dim >= -1 && entry.split_dim < static_cast<int>(entry.full_shape.size()) &&
                  entry.shape.size() == entry.full_shape.size() && full &&
                  (entry.split_dim >= 0 || local == full),
              where, name + " entry '" + entry.name + "' has inconsistent shapes");
    }
  }
  return map;
}

}  // namespace meshrun
