// Reassembly of engine shards into full state (meshrun/train/checkpoint_state.hpp):
// hand-made shards of a dp 2 x tp 2 layout and of ZeRO stage 0, missing and
// inconsistent ranks, and a real engine's rank file read back through
// CheckpointReader (state, model config and head, random state).
#include "tests/dist/torch_doctest.hpp"

#include <filesystem>

#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/train/checkpoint_state.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/model/safetensors.hpp"
#include "support/temp_dir.hpp"
#include "tests/train/trained_tiny_engine.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

// A parameter w [4, 2] split over tp 2 along dim 0 and a replicated b [3]:
// each tp rank's flat bucket is w's local [2, 2] then b, 7 elements padded
// to 8; at ZeRO stage >= 1 dp rank r owns [4r, 4r + 4).
const torch::Tensor kW = torch::arange(8, torch::kFloat32).view({4, 2});
const torch::Tensor kB = torch::tensor({10.f, 11.f, 12.f});

struct FakeRank {
  ShardMap map;
  std::map<std::string, torch::Tensor> tensors;
  int loads = 0;
};

FakeRank fake_rank(int dp_rank, int dp_size, int tp_rank, int zero_stage) {
  FakeRank rank;
  rank.map.dp_rank = dp_rank;
  rank.map.dp_size = dp_size;
  rank.map.tp_rank = tp_rank;
  rank.map.tp_size = 2;
  rank.map.zero_stage = zero_stage;
  ShardBucket bucket;
  bucket.padded_numel = 8;
  bucket.owned_begin = zero_stage == 0 ? 0 : 4 * dp_rank;
  bucket.owned_numel = zero_stage == 0 ? 8 : 4;
  bucket.entries = {{"w", 0, 4, {2, 2}, {4, 2}, 0}, {"b", 4, 3, {3}, {3}, -1}};
  rank.map.buckets = {bucket};
  const torch::Tensor flat =
      torch::cat({kW.chunk(2, 0)[tp_rank].reshape({-1}), kB, torch::zeros({1})}).narrow(0, bucket.owned_begin,
                                                                                        bucket.owned_numel);
  rank.tensors = {{"bucket.0.master", flat.clone()}, {"bucket.0.exp_avg", flat * 2}, {"bucket.0.exp_avg_sq", flat * 3},
                  {"step", torch::tensor({5}, torch::kInt64)}, {"loss_scale", torch::tensor({1.0}, torch::kFloat64)}};
  return rank;
}

std::vector<RankShards> shards_of(std::vector<FakeRank>& ranks) {
  std::vector<RankShards> shards;
  for (auto& rank : ranks)
    shards.push_back({rank.map,
                      [&rank](const std::string& key, std::int64_t start, std::int64_t length) {
                        ++rank.loads;
                        const torch::Tensor& tensor = rank.tensors.at(key);
                        if (length < 0) return tensor;
                        const std::int64_t size = tensor.size(0);
                        return tensor.narrow(0, std::min(start, size), std::min(length, std::max<std::int64_t>(0, size - start)));
                      },
                      "rank(dp " + std::to_string(rank.map.dp_rank) + ", tp " + std::to_string(rank.map.tp_rank) + ")"});
  return shards;
}

std::string assembly_error(std::vector<FakeRank> ranks) {
  try {
    assemble_full_state(shards_of(ranks), true);
  } catch (const CheckpointError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("shards of dp 2 x tp 2 at ZeRO stage 2 reassemble into the full tensors, in any order") {
  std::vector<FakeRank> ranks = {fake_rank(1, 2, 1, 2), fake_rank(0, 2, 0, 2), fake_rank(1, 2, 0, 2),
                                 fake_rank(0, 2, 1, 2)};
  const FullTrainingState state = assemble_full_state(shards_of(ranks), true);
  CHECK(state.step == 5);
  CHECK(state.loss_scale == 1.0);
  REQUIRE(state.parameters.size() == 2);
  CHECK(state.parameters.at("w").equal(kW));
  CHECK(state.parameters.at("b").equal(kB));
  CHECK(state.exp_avg.at("w").equal(kW * 2));
  CHECK(state.exp_avg_sq.at("b").equal(kB * 3));

  const FullTrainingState masters = assemble_full_state(shards_of(ranks), false);
  CHECK(masters.exp_avg.empty());
  CHECK(masters.parameters.at("w").equal(kW));
}

TEST_CASE("at ZeRO stage 0 one dp replica per tp rank is read") {
  std::vector<FakeRank> ranks = {fake_rank(0, 2, 0, 0), fake_rank(1, 2, 0, 0), fake_rank(0, 2, 1, 0),
                                 fake_rank(1, 2, 1, 0)};
  const FullTrainingState state = assemble_full_state(shards_of(ranks), false);
  CHECK(state.parameters.at("w").equal(kW));
  CHECK(state.parameters.at("b").equal(kB));
  int loads = 0;
  for (const auto& rank : ranks) loads += rank.loads;
  CHECK(loads == 2 * 2 + 2);  // w and b from one replica per tp rank, then step and loss_scale
}

TEST_CASE("missing or inconsistent ranks are refused, naming what is missing") {
  CHECK(assembly_error({fake_rank(0, 2, 0, 2), fake_rank(0, 2, 1, 2), fake_rank(1, 2, 1, 2)})
            .find("tp rank 0, bucket 0: elements [4, 7) ('b') are in no rank file") != std::string::npos);
  CHECK(assembly_error({fake_rank(1, 2, 0, 2), fake_rank(0, 2, 1, 2), fake_rank(1, 2, 1, 2)})
            .find("tp rank 0, bucket 0: elements [0, 4) ('w') are in no rank file") != std::string::npos);
  CHECK(assembly_error({fake_rank(0, 2, 0, 0)}).find("no rank file holds tp rank 1 of 2") != std::string::npos);
  CHECK(assembly_error({}).find("no rank holds") != std::string::npos);

  std::vector<FakeRank> short_shard = {fake_rank(0, 2, 0, 2), fake_rank(1, 2, 0, 2), fake_rank(0, 2, 1, 2),
                                       fake_rank(1, 2, 1, 2)};
  short_shard[1].tensors["bucket.0.master"] = torch::zeros({2});
  CHECK(assembly_error(short_shard).find("rank(dp 1, tp 0): 'bucket.0.master' is shorter than its shard map says") !=
        std::string::npos);

  std::vector<FakeRank> other_tp = {fake_rank(0, 1, 0, 0), fake_rank(0, 1, 1, 0)};
  other_tp[1].map.tp_size = 4;
  other_tp[1].map.tp_rank = 1;
  CHECK(assembly_error(other_tp).find("tp size 4") != std::string::npos);

  // Sizes a damaged map gives are held to what the files hold before anything is allocated by them.
  std::vector<FakeRank> huge_tp = {fake_rank(0, 1, 0, 0), fake_rank(0, 1, 1, 0)};
  for (auto& rank : huge_tp) rank.map.tp_size = 2147483647;
  CHECK(assembly_error(huge_tp).find("no rank file holds tp rank 2 of 2147483647") != std::string::npos);
  std::vector<FakeRank> huge_entry = {fake_rank(0, 1, 0, 0), fake_rank(0, 1, 1, 0)};
  for (auto& rank : huge_entry) {
    rank.map.buckets[0].padded_numel = int64_t{1} << 40;
    rank.map.buckets[0].entries[0].numel = int64_t{1} << 39;
  }
  CHECK(assembly_error(huge_entry).find("elements [8, 549755813888) ('w') are in no rank file") !=
        std::string::npos);
  std::vector<FakeRank> no_step = {fake_rank(0, 1, 0, 0), fake_rank(0, 1, 1, 0)};
  for (auto& rank : no_step) rank.tensors["step"] = torch::tensor({5, 6}, torch::kInt64);
  CHECK(assembly_error(no_step).find("'step' holds 2 values, not one") != std::string::npos);

  std::vector<FakeRank> wrong_shape = {fake_rank(0, 1, 0, 0), fake_rank(0, 1, 1, 0)};
  for (auto& rank : wrong_shape) rank.map.buckets[0].entries[0].full_shape = {4, 3};
  CHECK(assembly_error(wrong_shape).find("'w' reassembles to [4, 2], expected [4, 3]") != std::string::npos);
}

TEST_CASE("a real engine's rank file reads back through CheckpointReader") {
  test::TempDir temp;
  test::TrainedTiny tiny = test::trained_tiny_engine(1, 3, 0.05);
  TrainEngine& engine = *tiny.engine;
  const train_detail::RankState state = tiny.rank_state(Precision::bf16);
  const TensorList list(state.tensors.begin(), state.tensors.end());
  write_safetensors((temp.path() / rank_file_name(0)).string(), list, state.metadata);

  const CheckpointReader reader(temp.path().string());
  CHECK(reader.world_size() == 1);
  CHECK(reader.roles() == std::vector<std::string>{"actor"});
  const FullTrainingState expected = engine.gather_full_state();
  const FullTrainingState read = reader.full_state("actor");
  CHECK(read.step == 1);
  REQUIRE(read.parameters.size() == expected.parameters.size());
  for (const auto& [name, tensor] : expected.parameters) {
    CAPTURE(name);
    CHECK(read.parameters.at(name).equal(tensor));
    CHECK(read.exp_avg.at(name).equal(expected.exp_avg.at(name)));
    CHECK(read.exp_avg_sq.at(name).equal(expected.exp_avg_sq.at(name)));
  }
  const ModelConfig config = reader.model_config("actor");
  CHECK(config.hidden == tiny.model->options().config.hidden);
  CHECK(config.layers == tiny.model->options().config.layers);
  CHECK(config.torch_dtype == "bfloat16");
  CHECK(reader.model_head("actor") == ModelHead::language_model);
  CHECK(reader.tensor(0, "rng/cpu").equal(state.tensors.at("rng/cpu")));
  CHECK_FALSE(reader.has_tensor(0, "rng/cuda"));
  CHECK_THROWS_WITH_AS(reader.full_state("critic"), doctest::Contains("no rank file holds the state of role 'critic'"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS(reader.tensor(0, "nothing"), doctest::Contains("rank-0.safetensors has no tensor 'nothing'"),
                       CheckpointError);

  const fs::path gap = temp.path() / "gap";
  fs::create_directories(gap);
  fs::copy_file(temp.path() / rank_file_name(0), gap / rank_file_name(1));
  CHECK_THROWS_WITH_AS(CheckpointReader(gap.string()), doctest::Contains("but no rank-0.safetensors"), CheckpointError);
  const fs::path empty = temp.path() / "empty";
  fs::create_directories(empty);
  CHECK_THROWS_WITH_AS(CheckpointReader(empty.string()), doctest::Contains("holds no rank files"), CheckpointError);
}

}  // namespace meshrun
