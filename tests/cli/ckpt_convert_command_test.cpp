// `meshrun ckpt convert`: a role's model out of a training checkpoint (here
// a ZeRO-1 engine's rank file, written as the trainers write it) becomes a
// Hugging Face directory with the engine's exact weights, in the training
// dtype or the one asked for, completed from the base model and tokenizer
// the checkpoint's recipe named; an unknown role, a corrupted checkpoint
// and a folder without checkpoints fail with a message.
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
// under `root`, with `trainer_state` as its trainer_state.json; returns the
// engine's full weights.
NamedTensors save_checkpoint(const CheckpointDir& dir, int64_t step, const std::string& trainer_state = "{}\n") {
  test::TrainedTiny tiny = test::trained_tiny_engine(1, 11);
  const train_detail::RankState state = tiny.rank_state();
  const fs::path partial = dir.begin(step);
  write_safetensors((partial / rank_file_name(0)).string(), TensorList(state.tensors.begin(), state.tensors.end()),
                    state.metadata);
  std::ofstream(partial / "trainer_state.json") << trainer_state;
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

// As the run's own output folder: the tokenizer files of the tokenizer the
// recipe recorded in the checkpoint (data.tokenizer, else the actor's
// model) and the base model's generation_config.json; without a recorded
// recipe, a derived generation_config.json and a note.
TEST_CASE("meshrun ckpt convert completes the folder from the checkpoint's recipe") {
  REQUIRE(test::meshrun_built());
  test::TempDir temp;
  const fs::path base = temp.path() / "base", tokenizer = temp.path() / "tokenizer";
  fs::create_directories(base);
  fs::create_directories(tokenizer);
  const std::string generation = "{\"eos_token_id\": [2, 7], \"temperature\": 0.6}\n";
  std::ofstream(base / "generation_config.json") << generation;
  std::ofstream(base / "tokenizer.json") << "base's";
  std::ofstream(tokenizer / "tokenizer.json") << "data's";
  std::ofstream(tokenizer / "chat_template.jinja") << "{{ messages }}";
  const auto read = [](const fs::path& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const auto trainer_state = [](const std::string& keys) {
    return "{\"recipe\": {\"fingerprint\": \"x\", \"keys\": {" + keys + "}}}\n";
  };

  SUBCASE("data.tokenizer") {
    const CheckpointDir dir((temp.path() / "with-tokenizer").string());
    save_checkpoint(dir, 2,
                    trainer_state("\"roles.actor.model\": \"'" + base.string() + "'\", \"data.tokenizer\": \"'" +
                                  tokenizer.string() + "'\""));
    const fs::path out = temp.path() / "hf";
    auto converted = test::run_meshrun({"ckpt", "convert", dir.root(), out.string()});
    REQUIRE_MESSAGE(converted.exit_code == 0, converted.err);
    CHECK(read(out / "generation_config.json") == generation);
    CHECK(read(out / "tokenizer.json") == "data's");
    CHECK(read(out / "chat_template.jinja") == "{{ messages }}");
  }
  SUBCASE("the actor's model as the tokenizer") {
    const CheckpointDir dir((temp.path() / "base-tokenizer").string());
    save_checkpoint(dir, 2,
                    trainer_state("\"roles.actor.model\": \"'" + base.string() + "'\", \"data.tokenizer\": \"''\""));
    const fs::path out = temp.path() / "hf";
    auto converted = test::run_meshrun({"ckpt", "convert", dir.root(), out.string()});
    REQUIRE_MESSAGE(converted.exit_code == 0, converted.err);
    CHECK(read(out / "tokenizer.json") == "base's");
    CHECK_FALSE(fs::exists(out / "chat_template.jinja"));
    CHECK(read(out / "generation_config.json") == generation);
  }
  SUBCASE("no recipe recorded") {
    const CheckpointDir dir((temp.path() / "no-recipe").string());
    save_checkpoint(dir, 2);
    const fs::path out = temp.path() / "hf";
    auto converted = test::run_meshrun({"ckpt", "convert", dir.root(), out.string()});
    REQUIRE_MESSAGE(converted.exit_code == 0, converted.err);
    CHECK(converted.err.find("records no recipe") != std::string::npos);
    CHECK_FALSE(fs::exists(out / "tokenizer.json"));
    const std::string derived = read(out / "generation_config.json");
    CHECK(derived.find("\"_from_model_config\": true") != std::string::npos);
  }
}

}  // namespace meshrun
