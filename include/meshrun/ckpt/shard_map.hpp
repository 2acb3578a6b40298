// ShardMap: where one rank's share of a training engine's state lives in
// its checkpoint file, so that a checkpoint can be read back under any other
// layout (dp size, ZeRO stage, tp size, bucket size) or exported whole.
//
// A rank file holds, per trained role, the engine's flat buckets over the
// range the rank owns ("bucket.<i>.master|exp_avg|exp_avg_sq", fp32): the
// whole padded bucket at ZeRO stage 0, the rank's 1/dp shard from stage 1.
// A bucket's entries say which parameter occupies which elements of the flat
// buffer and at which local (tp-shard) shape; a parameter split over tensor
// parallelism (split_dim >= 0) is the concatenation of the tp ranks' local
// tensors along split_dim, in tp-rank order. Buckets are numbered the same
// on every rank of a role; their entries may differ between tp ranks only in
// the local shapes, and between ep ranks in which experts a bucket of
// experts holds.
//
// The map travels as JSON in the rank file's safetensors metadata under
// shard_map_key(role); nothing in it depends on LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshrun {

struct ShardEntry {
  std::string name;  // the parameter's Hugging Face name
  std::int64_t offset = 0;  // first element in the bucket's flat buffer
  std::int64_t numel = 0;
  std::vector<std::int64_t> shape;       // local (this tp rank's) shape
  std::vector<std::int64_t> full_shape;  // unsplit shape
  int split_dim = -1;                    // -1: replicated over tp
};

struct ShardBucket {
  // -1: parameters every rank of the tp rank holds, sharded over all of
  // them. Otherwise a bucket of experts (expert parallelism) that the ranks
  // of this ep rank hold, sharded over those ranks only.
  int ep_rank = -1;
  std::int64_t padded_numel = 0;  // the whole flat buffer
  std::int64_t owned_begin = 0;   // the range this rank's file holds
  std::int64_t owned_numel = 0;
  std::vector<ShardEntry> entries;  // in buffer order
};

struct ShardMap {
  int dp_rank = 0;
  int dp_size = 1;
  int tp_rank = 0;
  int tp_size = 1;
  int zero_stage = 0;
  std::vector<ShardBucket> buckets;

  std::string to_json() const;
  // Throws CheckpointError (meshrun/ckpt/checkpoint.hpp) prefixed by `where` on
  // malformed text or values out of range.
  static ShardMap from_json(std::string_view text, const std::string& where);
};

// Metadata keys of a rank file: the role's shard map, and its model's
// config.json text and head ("language_model" | "value") for export.
std::string shard_map_key(const std::string& role);
std::string model_config_key(const std::string& role);
std::string model_head_key(const std::string& role);
// The roles whose shard maps a rank file's metadata keys name.
std::vector<std::string> roles_with_shard_maps(const std::vector<std::string>& metadata_keys);

}  // namespace meshrun
