// `meshrun ckpt convert`: a role's model out of a training checkpoint (here
// a ZeRO-1 engine's rank file, written as the trainers write it) becomes a
// Hugging Face directory with the engine's exact weights, in the training
// dtype or the one asked for; an unknown role, a corrupted checkpoint and a
// folder without checkpoints fail with a message.
#include "tests/dist/torch_doctest.hpp"

#include <filesystem>
#include <fstream>

#include "lint/run_meshrun.hpp"
#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/train/checkpoint_state.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/model/safetensors.hpp"
#include "support/temp_dir.hpp"
#include "tests/train/trained_tiny_engine.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

// Trains builtin:tiny one step and commits its state as checkpoint `step`
// under `root`; returns the engine's full weights.
NamedTensors save_checkpoint(const CheckpointDir& dir, int64_t step) {
  test::TrainedTiny tiny = test::trained_tiny_engine(1, 11);
  const train_detail::RankState state = tiny.rank_state();
  const fs::path partial = dir.begin(step);
  write_safetensors((partial / rank_file_name(0)).string(), TensorList(state.tensors.begin(), state.tensors.end()),
                    state.metadata);
  std::ofstream(partial / "trainer_state.json") << "{}\n";
  CheckpointManifest info;
  info.algorithm = "sft";
  info.layout = "world 1; actor dp 1 tp 1 zero 1 fp32";
  dir.commit(step, info);
  return tiny.engine->gather_full_parameters();
}

}  // namespace

TEST_CASE("meshrun ckpt convert writes a checkpoint's role as a Hugging Face directory") {
  REQUIRE(test::meshrun_built());
  test::TempDir temp;
  const CheckpointDir dir((temp.path() / "checkpoints").string());
  const NamedTensors weights = save_checkpoint(dir, 4);

  const std::string out = (temp.path() / "hf").string();
  auto converted = test::run_meshrun({"ckpt", "convert", dir.root(), out});
  REQUIRE_MESSAGE(converted.exit_code == 0, converted.err);
  CHECK(converted.out.find("actor of " + dir.final_path(4)) != std::string::npos);
  LlamaModel loaded = load_hf_model(out, ModelOptions{});
  const auto loaded_weights = gather_full_state(loaded);
  REQUIRE(loaded_weights.size() == weights.size());
  for (const auto& [name, tensor] : weights) {
    CAPTURE(name);
    CHECK(loaded_weights.at(name).equal(tensor));
  }

  const std::string half = (temp.path() / "hf-bf16").string();
  auto bf16 = test::run_meshrun({"ckpt", "convert", dir.final_path(4), half, "--dtype", "bf16"});
  REQUIRE_MESSAGE(bf16.exit_code == 0, bf16.err);
  CHECK(read_model_config(half + "/config.json").torch_dtype == "bfloat16");
  CHECK(SafetensorsCheckpoint(half).entry("model.norm.weight").dtype == "BF16");

  auto critic = test::run_meshrun({"ckpt", "convert", dir.root(), out, "--role", "critic"});
  CHECK(critic.exit_code == 1);
  CHECK(critic.err.find("holds no role 'critic' (it holds: actor)") != std::string::npos);

  std::ofstream(fs::path(dir.final_path(4)) / rank_file_name(0), std::ios::in | std::ios::out) << "garbage";
  auto corrupted = test::run_meshrun({"ckpt", "convert", dir.final_path(4), out});
  CHECK(corrupted.exit_code == 1);
  CHECK(corrupted.err.find("fails verification") != std::string::npos);
  auto none_left = test::run_meshrun({"ckpt", "convert", dir.root(), out});
  CHECK(none_left.exit_code == 1);
  CHECK(none_left.err.find("no complete checkpoint") != std::string::npos);

  auto nothing = test::run_meshrun({"ckpt", "convert", (temp.path() / "nothing").string(), out});
  CHECK(nothing.exit_code == 1);
  CHECK(nothing.err.find("is neither a checkpoint nor a folder of checkpoints") != std::string::npos);
}

}  // namespace meshrun
