// TrainingCheckpointer in a world of one: a synchronous save and its resume
// (the rank file's tensors and the random state come back), an async save
// that is committed only by poll()/finish() and writes the same bytes, a
// failed background write reported at finish() with nothing committed, and
// a checkpoint of another layout resumed by resharding.
#include "tests/dist/torch_doctest.hpp"

#include <filesystem>

#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/train/training_checkpoint.hpp"
#include "support/temp_dir.hpp"
#include "tests/dist/world_of_one.hpp"
#include "tests/train/trained_tiny_engine.hpp"

namespace meshrun {
namespace {

using namespace std::chrono_literals;
using train_detail::RankState;
using train_detail::TrainingCheckpointer;

using test::world_of_one;

Recipe recipe_in(const std::filesystem::path& folder, bool async) {
  Recipe recipe;
  recipe.file = "test";
  recipe.algorithm = meshrun::Algorithm::sft;
  recipe.checkpoint.path = (folder / "checkpoints").string();
  recipe.checkpoint.keep_last = 5;
  recipe.checkpoint.async = async;
  return recipe;
}

using test::TrainedTiny;
using test::trained_tiny_engine;

TrainedTiny tiny_engine(int zero_stage, int seed = 5) {
  return trained_tiny_engine(zero_stage, seed, zero_stage == 0 ? 0.05 : 25);
}

RankState state_of(TrainedTiny& tiny) { return tiny.rank_state(); }

}  // namespace

TEST_CASE("a synchronous save resumes with its tensors and random state") {
  test::TempDir temp;
  auto runtime = world_of_one();
  const Recipe recipe = recipe_in(temp.path(), false);
  TrainingCheckpointer checkpointer(RunPlan::from_recipe(recipe), runtime->world(), "world 1; actor zero 1");
  TrainedTiny tiny = tiny_engine(1);
  const RankState state = state_of(tiny);
  const torch::Tensor draw = torch::rand({4});  // what comes after the saved random state
  checkpointer.save(3, state, {{"step", 3}});
  CHECK_FALSE(checkpointer.pending_step());
  CHECK(checkpointer.dir().complete_steps() == std::vector<int64_t>{3});

  auto point = checkpointer.resume();
  REQUIRE(point);
  CHECK(point->step == 3);
  CHECK(point->trainer.at("step") == 3);
  CHECK_FALSE(point->reshard_from);
  CHECK(point->tensors.at("actor/bucket.0.master").equal(state.tensors.at("actor/bucket.0.master")));
  point->restore_rng_states(torch::kCPU);
  CHECK(torch::rand({4}).equal(draw));
  runtime->shutdown();
}

TEST_CASE("an async save is committed by poll or finish once written, with the bytes of a synchronous one") {
  test::TempDir temp;
  auto runtime = world_of_one();
  TrainedTiny tiny = tiny_engine(0);
  const RankState state = state_of(tiny);

  const Recipe sync_recipe = recipe_in(temp.path() / "sync", false);
  TrainingCheckpointer sync(RunPlan::from_recipe(sync_recipe), runtime->world(), "layout");
  sync.save(1, state, {{"step", 1}});

  const Recipe async_recipe = recipe_in(temp.path() / "async", true);
  TrainingCheckpointer async(RunPlan::from_recipe(async_recipe), runtime->world(), "layout");
  async.save(1, state, {{"step", 1}});
  CHECK(async.pending_step() == 1);
  for (int i = 0; i < 500 && async.pending_step(); ++i) {
    async.poll();
    std::this_thread::sleep_for(10ms);
  }
  CHECK_FALSE(async.pending_step());
  REQUIRE(async.dir().complete_steps() == std::vector<int64_t>{1});
  const auto sync_files = sync.dir().manifest(1).files, async_files = async.dir().manifest(1).files;
  REQUIRE(sync_files.size() == async_files.size());
  for (size_t i = 0; i < sync_files.size(); ++i) {
    CHECK(sync_files[i].name == async_files[i].name);
    CHECK(sync_files[i].xxh3 == async_files[i].xxh3);
  }

  // A second save finishes the first; finish() commits the last.
  async.save(2, state, {{"step", 2}});
  async.save(3, state, {{"step", 3}});
  async.finish();
  CHECK(async.dir().complete_steps() == std::vector<int64_t>{1, 2, 3});
  CHECK(async.dir().verify(3).empty());
  runtime->shutdown();
}

TEST_CASE("a failed background write is reported and commits nothing") {
  test::TempDir temp;
  auto runtime = world_of_one();
  TrainedTiny tiny = tiny_engine(1);
  const Recipe recipe = recipe_in(temp.path(), true);
  {
    TrainingCheckpointer checkpointer(RunPlan::from_recipe(recipe), runtime->world(), "layout");
    checkpointer.save(4, state_of(tiny), {{"step", 4}},
                      [](const std::string&) { throw std::runtime_error("disk full (simulated)"); });
    CHECK_THROWS_WITH_AS(checkpointer.finish(),
                         doctest::Contains("checkpoint of step 4 could not be written: disk full (simulated)"),
                         CheckpointError);
    CHECK_FALSE(checkpointer.pending_step());
    CHECK(checkpointer.dir().complete_steps().empty());
    CHECK(std::filesystem::exists(checkpointer.dir().partial_path(4)));
  }
  TrainingCheckpointer next_start(RunPlan::from_recipe(recipe), runtime->world(), "layout");
  CHECK_FALSE(next_start.resume());
  CHECK_FALSE(std::filesystem::exists(next_start.dir().partial_path(4)));
  runtime->shutdown();
}

TEST_CASE("a checkpoint of another layout is resumed by resharding its full state") {
  test::TempDir temp;
  auto runtime = world_of_one();
  const Recipe recipe = recipe_in(temp.path(), false);
  TrainedTiny saved = tiny_engine(0);
  {
    TrainingCheckpointer checkpointer(RunPlan::from_recipe(recipe), runtime->world(), "world 1; actor zero 0, small buckets");
    checkpointer.save(7, state_of(saved), {{"step", 7}});
  }
  TrainingCheckpointer checkpointer(RunPlan::from_recipe(recipe), runtime->world(), "world 1; actor zero 3");
  auto point = checkpointer.resume();
  REQUIRE(point);
  REQUIRE(point->reshard_from);
  CHECK(point->saved_layout == "world 1; actor zero 0, small buckets");
  CHECK(point->tensors.count("rng/cpu") == 1);
  CHECK(point->tensors.count("actor/step") == 0);
  TrainedTiny target = tiny_engine(3, /*seed=*/99);
  point->restore_engine("actor", *target.engine);
  const FullTrainingState expected = saved.engine->gather_full_state(), got = target.engine->gather_full_state();
  CHECK(got.step == expected.step);
  for (const auto& [name, tensor] : expected.parameters) {
    CAPTURE(name);
    CHECK(got.parameters.at(name).equal(tensor));
    CHECK(got.exp_avg_sq.at(name).equal(expected.exp_avg_sq.at(name)));
  }
  runtime->shutdown();
}

}  // namespace meshrun

namespace meshrun {

TEST_CASE("trainer_state.json's fields are read by name: missing, mistyped or out of range names the file and key") {
  train_detail::ResumePoint point;
  point.trainer_file = "/ckpt/global_step_2/trainer_state.json";
  point.trainer = nlohmann::json::parse(
      R"({"kl_coef": 0.05, "reward_count": 7, "reward_m2": -1.0, "policy_version": "3", "huge": 18446744073709551615})",
      nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  CHECK(point.trainer_number("kl_coef", 0) == 0.05);
  CHECK(point.trainer_integer("reward_count", 0) == 7);
  CHECK_THROWS_WITH_AS(point.trainer_field("sampler"),
                       "/ckpt/global_step_2/trainer_state.json: \"sampler\" is missing", CheckpointError);
  CHECK_THROWS_WITH_AS(point.trainer_number("reward_m2", 0),
                       "/ckpt/global_step_2/trainer_state.json: \"reward_m2\" is -1.0, not a finite number ≥ 0",
                       CheckpointError);
  CHECK_THROWS_WITH_AS(point.trainer_integer("policy_version", 0),
                       "/ckpt/global_step_2/trainer_state.json: \"policy_version\" is \"3\", not a whole number ≥ 0",
                       CheckpointError);
  CHECK_THROWS_AS(point.trainer_integer("reward_count", 8), CheckpointError);
  CHECK_THROWS_AS(point.trainer_integer("huge", 0), CheckpointError);
  CHECK_THROWS_AS(point.trainer_integer("kl_coef", 0), CheckpointError);  // a fraction
}

}  // namespace meshrun
