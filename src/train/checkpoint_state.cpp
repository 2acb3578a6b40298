// Reassembly of engine shards into full state (include/meshrun/checkpoint_state.hpp).
#include "meshrun/checkpoint_state.hpp"

#include <algorithm>
#include <filesystem>
#include <map>

#include "meshrun/checkpoint.hpp"
#include "meshrun/safetensors.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

std::string dims_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

struct Moment {
  const char* key;  // in the rank's local state
  NamedTensors FullTrainingState::*into;
};
constexpr Moment kMasters{"master", &FullTrainingState::parameters};
constexpr Moment kExpAvg{"exp_avg", &FullTrainingState::exp_avg};
constexpr Moment kExpAvgSq{"exp_avg_sq", &FullTrainingState::exp_avg_sq};

// One tp rank's local tensors by parameter name, from the dp ranks that
// share it: each bucket's flat buffer is put back together from the owned
// ranges (a rank whose range is already covered, as at ZeRO stage 0, is
// skipped) and cut into its entries.
NamedTensors assemble_tp_rank(const std::vector<const RankShards*>& shards, const Moment& moment, int tp_rank) {
  const RankShards& first = *shards.front();
  NamedTensors local;
  for (size_t b = 0; b < first.map.buckets.size(); ++b) {
    const ShardBucket& layout = first.map.buckets[b];
    std::vector<const RankShards*> in_order(shards);
    std::stable_sort(in_order.begin(), in_order.end(), [b](const RankShards* x, const RankShards* y) {
      return x->map.buckets[b].owned_begin < y->map.buckets[b].owned_begin;
    });
    std::int64_t needed = 0;
    for (const auto& entry : layout.entries) needed = std::max(needed, entry.offset + entry.numel);
    torch::Tensor flat = torch::zeros({layout.padded_numel}, torch::kFloat32);
    std::int64_t covered = 0;
    for (const RankShards* shard : in_order) {
      const ShardBucket& owned = shard->map.buckets[b];
      if (owned.padded_numel != layout.padded_numel)
        throw CheckpointError(shard->origin + ": bucket " + std::to_string(b) + " has " +
                              std::to_string(owned.padded_numel) + " elements, " + first.origin + "'s has " +
                              std::to_string(layout.padded_numel));
      const std::int64_t end = owned.owned_begin + owned.owned_numel;
      if (end <= covered) continue;
      if (owned.owned_begin > covered) break;
      const std::string key = "bucket." + std::to_string(b) + "." + moment.key;
      const torch::Tensor saved = shard->load(key).to(torch::kFloat32).view({-1});
      if (saved.numel() != owned.owned_numel)
        throw CheckpointError(shard->origin + ": '" + key + "' has " + std::to_string(saved.numel()) +
                              " elements, its shard map says " + std::to_string(owned.owned_numel));
      flat.narrow(0, owned.owned_begin, owned.owned_numel).copy_(saved);
      covered = end;
    }
    if (covered < needed)
      throw CheckpointError("tp rank " + std::to_string(tp_rank) + ", bucket " + std::to_string(b) + ": elements [" +
                            std::to_string(covered) + ", " + std::to_string(needed) +
                            ") are in no rank file (a dp rank's file is missing)");
    for (const auto& entry : layout.entries)
      local[entry.name] = flat.narrow(0, entry.offset, entry.numel).view(entry.shape).clone();
  }
  return local;
}

}  // namespace

std::string rank_file_name(int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; }

FullTrainingState assemble_full_state(const std::vector<RankShards>& ranks, bool with_moments) {
  if (ranks.empty()) throw CheckpointError("no rank holds this role's state");
  const int tp_size = ranks.front().map.tp_size;
  std::vector<std::vector<const RankShards*>> by_tp(tp_size);
  for (const auto& rank : ranks) {
    if (rank.map.tp_size != tp_size)
      throw CheckpointError(rank.origin + ": tp size " + std::to_string(rank.map.tp_size) + ", " +
                            ranks.front().origin + " says " + std::to_string(tp_size));
    if (rank.map.buckets.size() != ranks.front().map.buckets.size())
      throw CheckpointError(rank.origin + ": " + std::to_string(rank.map.buckets.size()) + " buckets, " +
                            ranks.front().origin + " has " + std::to_string(ranks.front().map.buckets.size()));
    by_tp[rank.map.tp_rank].push_back(&rank);
  }
  for (int t = 0; t < tp_size; ++t)
    if (by_tp[t].empty()) throw CheckpointError("no rank file holds tp rank " + std::to_string(t) + " of " +
                                                std::to_string(tp_size));

  // Which entry describes each parameter (tp rank 0's), in a stable order.
  std::map<std::string, const ShardEntry*> entries;
  for (const auto& bucket : by_tp[0].front()->map.buckets)
    for (const auto& entry : bucket.entries) entries[entry.name] = &entry;

  FullTrainingState state;
  std::vector<Moment> moments{kMasters};
  if (with_moments) moments.insert(moments.end(), {kExpAvg, kExpAvgSq});
  for (const Moment& moment : moments) {
    std::vector<NamedTensors> locals;
    for (int t = 0; t < tp_size; ++t) locals.push_back(assemble_tp_rank(by_tp[t], moment, t));
    NamedTensors& into = state.*moment.into;
    for (const auto& [name, entry] : entries) {
      std::vector<torch::Tensor> pieces;
      for (int t = 0; t < tp_size; ++t) {
        auto found = locals[t].find(name);
        if (found == locals[t].end())
          throw CheckpointError("tp rank " + std::to_string(t) + " holds no '" + name + "'");
        pieces.push_back(found->second);
      }
      torch::Tensor full = entry->split_dim >= 0 ? torch::cat(pieces, entry->split_dim) : pieces.front();
      if (full.sizes().vec() != entry->full_shape)
        throw CheckpointError("'" + name + "' reassembles to " + dims_text(full.sizes().vec()) + ", expected " +
                              dims_text(entry->full_shape));
      into[name] = full;
    }
  }
  const RankShards& first = *by_tp[0].front();
  state.step = first.load("step").to(torch::kInt64).item<std::int64_t>();
  state.loss_scale = first.load("loss_scale").to(torch::kFloat64).item<double>();
  return state;
}

CheckpointReader::CheckpointReader(std::string directory) : directory_(std::move(directory)) {
  int count = 0;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(directory_, error)) {
    const std::string name = item.path().filename().string();
    if (name.rfind("rank-", 0) == 0 && item.path().extension() == ".safetensors") ++count;
  }
  if (error) throw CheckpointError("cannot read " + directory_ + ": " + error.message());
  for (int rank = 0; rank < count; ++rank) {
    const fs::path path = fs::path(directory_) / rank_file_name(rank);
    if (!fs::exists(path))
      throw CheckpointError(directory_ + " holds " + std::to_string(count) + " rank files but no " +
                            rank_file_name(rank));
    try {
      files_.push_back(std::make_unique<SafetensorsFile>(path.string()));
    } catch (const SafetensorsError& failure) {
      throw CheckpointError(failure.what());
    }
  }
  if (files_.empty()) throw CheckpointError(directory_ + " holds no rank files");
}

CheckpointReader::~CheckpointReader() = default;

std::vector<std::string> CheckpointReader::roles() const {
  std::vector<std::string> keys;
  for (const auto& [key, value] : files_.front()->metadata()) keys.push_back(key);
  return roles_with_shard_maps(keys);
}

std::pair<int, const std::string*> CheckpointReader::find_metadata(const std::string& key,
                                                                  const std::string& what) const {
  for (int rank = 0; rank < world_size(); ++rank) {
    const auto& metadata = files_[rank]->metadata();
    const auto found = metadata.find(key);
    if (found != metadata.end()) return {rank, &found->second};
  }
  throw CheckpointError(directory_ + ": no rank file holds the " + what +
                        " (saved by a meshrun without resharding: resume it with the layout it was saved with)");
}

FullTrainingState CheckpointReader::full_state(const std::string& role, bool with_moments) const {
  std::vector<RankShards> ranks;
  for (int rank = 0; rank < world_size(); ++rank) {
    const auto& metadata = files_[rank]->metadata();
    if (!metadata.count(shard_map_key(role))) continue;  // a rank outside the role's mesh
    const SafetensorsFile* file = files_[rank].get();
    const std::string origin = file->path() + " (" + role + ")";
    ranks.push_back({ShardMap::from_json(metadata.at(shard_map_key(role)), origin),
                     [file, role, origin](const std::string& key) {
                       const std::string name = role + "/" + key;
                       if (!file->find(name)) throw CheckpointError(origin + " has no tensor '" + name + "'");
                       return file->load(name);
                     },
                     origin});
  }
  if (ranks.empty()) find_metadata(shard_map_key(role), "state of role '" + role + "'");  // throws
  try {
    return assemble_full_state(ranks, with_moments);
  } catch (const CheckpointError& failure) {
    throw CheckpointError(directory_ + ", role " + role + ": " + failure.what());
  }
}

ModelConfig CheckpointReader::model_config(const std::string& role) const {
  const auto [rank, text] = find_metadata(model_config_key(role), "model config of role '" + role + "'");
  return model_config_from_json(*text, files_[rank]->path() + " [" + model_config_key(role) + "]");
}

ModelHead CheckpointReader::model_head(const std::string& role) const {
  const auto [rank, text] = find_metadata(model_head_key(role), "model head of role '" + role + "'");
  return *text == "value" ? ModelHead::value : ModelHead::language_model;
}

bool CheckpointReader::has_tensor(int rank, const std::string& name) const {
  return rank >= 0 && rank < world_size() && files_[rank]->find(name) != nullptr;
}

torch::Tensor CheckpointReader::tensor(int rank, const std::string& name) const {
  if (!has_tensor(rank, name))
    throw CheckpointError(directory_ + ": " + rank_file_name(rank) + " has no tensor '" + name + "'");
  return files_[rank]->load(name);
}

}  // namespace meshrun
