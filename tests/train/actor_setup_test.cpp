// The actor-only runners' shared setup (src/train/actor_setup.hpp): the
// actor's slot on a world of one, the vocabulary check, and the planned
// steps with max_steps and a dataset smaller than one batch.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/model/hf_model.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "src/train/actor_setup.hpp"
#include "tests/dist/world_of_one.hpp"

using namespace meshrun;

TEST_CASE("the actor's slot: its role, mesh and groups on the rank that holds it") {
  Diagnostics diagnostics;
  const auto recipe = load_recipe_text(
      "algorithm = \"sft\"\n[launch]\nprocs_per_node = 1\ndevice = \"cpu\"\nbackend = \"gloo\"\n"
      "[roles.actor]\nmodel = \"builtin:tiny\"\ndtype = \"fp32\"\n",
      "sft.toml", {}, diagnostics);
  REQUIRE_MESSAGE(recipe, diagnostics.format());
  const Plan plan = make_plan(*recipe, ClusterShape::from_recipe(*recipe), diagnostics);
  auto runtime = test::world_of_one();
  runtime->build_groups(plan);
  const train_detail::ActorSlot actor = train_detail::ActorSlot::of(plan, *runtime);
  CHECK(actor.role.role == Role::actor);
  CHECK(&actor.mesh == &runtime->mesh("actor"));
  REQUIRE(actor.dp);
  CHECK(actor.dp->size() == 1);
  CHECK(actor.tp == nullptr);
  CHECK(actor.sp == nullptr);
  runtime->shutdown();
}

TEST_CASE("a tokenizer with ids the model cannot embed is refused naming both") {
  ModelOptions options;
  options.config = *builtin_model_config("builtin:tiny");
  const LlamaModel model(options);
  const auto bytes = make_byte_tokenizer();
  CHECK_NOTHROW(train_detail::check_vocabulary(model, *bytes, "builtin:tiny"));
  options.config.vocab = 100;
  const LlamaModel small(options);
  CHECK_THROWS_WITH_AS(train_detail::check_vocabulary(small, *bytes, "small"),
                       doctest::Contains("tokens but the model small only 100"), ModelLoadError);
}

TEST_CASE("planned steps: the data's, capped by max_steps; none is a located recipe error") {
  RunPlan run;
  CHECK(train_detail::planned_steps(12, run, "d.jsonl", 8, "sequences") == 12);
  run.max_steps = 5;
  CHECK(train_detail::planned_steps(12, run, "d.jsonl", 8, "sequences") == 5);
  try {
    train_detail::planned_steps(0, run, "d.jsonl", 8, "pairs");
    FAIL("no error");
  } catch (const Error& error) {
    CHECK(error.kind() == ErrorKind::config);
    CHECK(error.recipe_key() == "batch.train");
    CHECK(std::string(error.what()) == "the dataset d.jsonl gives no complete global batch of 8 pairs");
  }
}
