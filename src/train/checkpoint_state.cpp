// Reassembly of engine shards into full state (include/meshrun/train/checkpoint_state.hpp).
#include "meshrun/train/checkpoint_state.hpp"

#include <algorithm>
#include <filesystem>
#include <map>

#include "engine_core.hpp"
#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/model/safetensors.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

const char* part_key(StatePart part) {
  return part == StatePart::parameters ? "master" : part == StatePart::exp_avg ? "exp_avg" : "exp_avg_sq";
}

}  // namespace

std::string rank_file_name(int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; }

void ShardedStateSource::fail(const std::string& message) const {
  throw CheckpointError(context_.empty() ? message : context_ + ": " + message);
}

ShardedStateSource::ShardedStateSource(std::vector<RankShards> ranks, std::string context)
    : ranks_(std::move(ranks)), context_(std::move(context)) {
  if (ranks_.empty()) fail("no rank holds this role's state");
  const RankShards& first = ranks_.front();
  const int tp_size = first.map.tp_size;
  // Each tp rank needs a rank file of its own, so with fewer files than the
  // tp size one is missing: named before anything is sized by the file's
  // number (a damaged map may say 2^31).
  if (tp_size > static_cast<int>(ranks_.size())) {
    std::vector<bool> present(ranks_.size() + 1, false);
    for (const auto& rank : ranks_)
      if (rank.map.tp_rank < static_cast<int>(present.size())) present[rank.map.tp_rank] = true;
    const auto missing = std::find(present.begin(), present.end(), false) - present.begin();
    fail("no rank file holds tp rank " + std::to_string(missing) + " of " + std::to_string(tp_size));
  }
  by_tp_.resize(tp_size);
  for (const auto& rank : ranks_) {
    if (rank.map.tp_size != tp_size)
      fail(rank.origin + ": tp size " + std::to_string(rank.map.tp_size) + ", " + first.origin +
                            " says " + std::to_string(tp_size));
    if (rank.map.buckets.size() != first.map.buckets.size())
      fail(rank.origin + ": " + std::to_string(rank.map.buckets.size()) + " buckets, " +
                            first.origin + " has " + std::to_string(first.map.buckets.size()));
    by_tp_[rank.map.tp_rank].push_back(&rank);
  }
  for (int t = 0; t < tp_size; ++t) {
    if (by_tp_[t].empty())
      fail("no rank file holds tp rank " + std::to_string(t) + " of " + std::to_string(tp_size));
    // Every shard's entries: a bucket of experts is in the files of its ep
    // rank only, the other buckets in every file (the first names them).
    for (const RankShards* shard : by_tp_[t]) {
      const auto& buckets = shard->map.buckets;
      for (std::size_t b = 0; b < buckets.size(); ++b) {
        for (const auto& entry : buckets[b].entries) {
          auto& located = located_[entry.name];
          located.resize(tp_size);
          if (!located[t].entry) located[t] = {&entry, b, buckets[b].ep_rank};
        }
      }
    }
  }
  for (const auto& [name, per_tp] : located_)
    for (int t = 0; t < tp_size; ++t)
      if (!per_tp[t].entry) fail("tp rank " + std::to_string(t) + " holds no '" + name + "'");
}

std::vector<std::string> ShardedStateSource::names() const {
  std::vector<std::string> names;
  for (const auto& [name, located] : located_) names.push_back(name);
  return names;
}

torch::Tensor ShardedStateSource::scalar(const std::string& key) const {
  const torch::Tensor value = ranks_.front().load(key, 0, -1);
  if (value.numel() != 1)
    fail(ranks_.front().origin + ": '" + key + "' holds " + std::to_string(value.numel()) + " values, not one");
  return value;
}

std::int64_t ShardedStateSource::step() const { return scalar("step").to(torch::kInt64).item<std::int64_t>(); }

double ShardedStateSource::loss_scale() const { return scalar("loss_scale").to(torch::kFloat64).item<double>(); }

// Each tp rank's local tensor is put together from the dp shards whose
// owned ranges cross the parameter's elements (a shard already covered, as
// at ZeRO stage 0, is skipped), then the tp pieces are concatenated.
torch::Tensor ShardedStateSource::tensor(StatePart part, const std::string& name) const {
  const auto found = located_.find(name);
  if (found == located_.end()) fail("the checkpoint holds no parameter '" + name + "'");
  std::vector<torch::Tensor> pieces;
  for (std::size_t t = 0; t < by_tp_.size(); ++t) {
    const ShardEntry* entry = found->second[t].entry;
    const std::size_t b = found->second[t].bucket;
    const std::int64_t begin = entry->offset, end = entry->offset + entry->numel;
    // Which shard gives which elements, found before anything is allocated:
    // the owned ranges are held to the rank files' buffers (rank_shards), so
    // an entry they cover is no larger than the checkpoint's own data,
    // whatever numel a damaged map claims.
    struct Piece {
      const RankShards* shard;
      std::int64_t from, to;
    };
    const int ep_rank = found->second[t].ep_rank;
    // The shards of the bucket (those of its ep rank, for experts) in the
    // order of their owned ranges.
    std::vector<const RankShards*> holders;
    for (const RankShards* shard : by_tp_[t])
      if (shard->map.buckets[b].ep_rank == ep_rank) holders.push_back(shard);
    std::stable_sort(holders.begin(), holders.end(), [b](const RankShards* x, const RankShards* y) {
      return x->map.buckets[b].owned_begin < y->map.buckets[b].owned_begin;
    });
    std::vector<Piece> plan;
    std::int64_t covered = begin;
    for (const RankShards* shard : holders) {
      const ShardBucket& owned = shard->map.buckets[b];
      const std::int64_t owned_end = owned.owned_begin + owned.owned_numel;
      if (owned_end <= covered || owned.owned_begin >= end) continue;
      if (owned.owned_begin > covered) break;
      const std::int64_t stop = std::min(end, owned_end);
      plan.push_back({shard, covered, stop});
      covered = stop;
      if (covered == end) break;
    }
    if (covered < end)
      fail("tp rank " + std::to_string(t) + ", bucket " + std::to_string(b) + ": elements [" +
                            std::to_string(covered) + ", " + std::to_string(end) + ") ('" + name +
                            "') are in no rank file (a dp rank's file is missing)");
    torch::Tensor local = torch::empty({entry->numel}, torch::kFloat32);
    const std::string key = "bucket." + std::to_string(b) + "." + part_key(part);
    for (const Piece& piece : plan) {
      const std::int64_t owned_begin = piece.shard->map.buckets[b].owned_begin;
      const torch::Tensor slice =
          piece.shard->load(key, piece.from - owned_begin, piece.to - piece.from).to(torch::kFloat32).view({-1});
      if (slice.numel() != piece.to - piece.from)
        fail(piece.shard->origin + ": '" + key + "' is shorter than its shard map says");
      local.narrow(0, piece.from - begin, piece.to - piece.from).copy_(slice);
    }
    pieces.push_back(local.view(entry->shape));
  }
  const ShardEntry& entry = *found->second[0].entry;
  torch::Tensor full = entry.split_dim >= 0 ? torch::cat(pieces, entry.split_dim) : pieces.front();
  if (full.sizes().vec() != entry.full_shape)
    fail("'" + name + "' reassembles to " + train_detail::shape_text(full.sizes()) + ", expected " +
                          train_detail::shape_text(entry.full_shape));
  return full;
}

FullTrainingState assemble_full_state(const std::vector<RankShards>& ranks, bool with_moments) {
  const ShardedStateSource source(ranks);
  FullTrainingState state;
  for (const auto& name : source.names()) {
    state.parameters[name] = source.tensor(StatePart::parameters, name);
    if (!with_moments) continue;
    state.exp_avg[name] = source.tensor(StatePart::exp_avg, name);
    state.exp_avg_sq[name] = source.tensor(StatePart::exp_avg_sq, name);
  }
  state.step = source.step();
  state.loss_scale = source.loss_scale();
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

std::vector<RankShards> CheckpointReader::rank_shards(const std::string& role) const {
  std::vector<RankShards> ranks;
  for (int rank = 0; rank < world_size(); ++rank) {
    const auto& metadata = files_[rank]->metadata();
    if (!metadata.count(shard_map_key(role))) continue;  // a rank outside the role's mesh
    const SafetensorsFile* file = files_[rank].get();
    const std::string origin = file->path() + " (" + role + ")";
    ShardMap map = ShardMap::from_json(metadata.at(shard_map_key(role)), origin);
    // The map's sizes are the file's word; the buffers are what is there.
    for (std::size_t b = 0; b < map.buckets.size(); ++b) {
      const std::string name = role + "/bucket." + std::to_string(b) + ".master";
      const SafetensorsEntry* master = file->find(name);
      if (!master || master->shape.size() != 1 || master->shape[0] < map.buckets[b].owned_numel)
        throw CheckpointError(origin + ": bucket " + std::to_string(b) + " owns " +
                              std::to_string(map.buckets[b].owned_numel) + " elements, but '" + name + "' " +
                              (master ? "holds fewer" : "is missing"));
    }
    ranks.push_back({std::move(map),
                     [file, role, origin](const std::string& key, std::int64_t start, std::int64_t length) {
                       const std::string name = role + "/" + key;
                       const SafetensorsEntry* entry = file->find(name);
                       if (!entry) throw CheckpointError(origin + " has no tensor '" + name + "'");
                       if (length < 0) return file->load(name);
                       if (entry->shape.size() != 1)
                         throw CheckpointError(origin + ": '" + name + "' is not the 1-D buffer its shard map describes");
                       // What is there of the range: the caller checks the length.
                       const std::int64_t available = std::max<std::int64_t>(0, entry->shape[0] - start);
                       return file->load_slice(name, 0, std::min(start, entry->shape[0]), std::min(length, available));
                     },
                     origin});
  }
  if (ranks.empty()) find_metadata(shard_map_key(role), "state of role '" + role + "'");  // throws
  return ranks;
}

FullTrainingState CheckpointReader::full_state(const std::string& role, bool with_moments) const {
  try {
    return assemble_full_state(rank_shards(role), with_moments);
  } catch (const CheckpointError& failure) {
    throw CheckpointError(directory_ + ", role " + role + ": " + failure.what());
  }
}

std::unique_ptr<ShardedStateSource> CheckpointReader::state_source(const std::string& role) const {
  return std::make_unique<ShardedStateSource>(rank_shards(role), directory_ + ", role " + role);
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
