// The actor-only runners' shared setup (meshrun/train/actor_setup.hpp): the
// actor's slot on a world of one, the vocabulary check, and the planned
// steps with max_steps and a dataset smaller than one batch.
#include <tuple>

#include "tests/dist/torch_doctest.hpp"

#include "meshrun/model/hf_model.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "meshrun/data/sampler.hpp"
#include "meshrun/train/actor_setup.hpp"
#include "meshrun/train/batching.hpp"
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
  CHECK(&actor.mesh == &runtime->mesh(Role::actor));
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

TEST_CASE("planned steps: the data's, capped by max_steps; none is the sampler's refusal, located at the batch key") {
  RunPlan run;
  CHECK(train_detail::planned_steps(12, run) == 12);
  run.max_steps = 5;
  CHECK(train_detail::planned_steps(12, run) == 5);
  // A sampler never gives zero steps: it refuses the data first.
  CHECK_THROWS_AS(train_detail::planned_steps(0, run), std::logic_error);
  for (const auto& [items, key, text] :
       {std::tuple{BatchItems::pairs, "batch.train", "the dataset d.jsonl has 3 pairs, fewer than one global batch (batch.train = 8)"},
        std::tuple{BatchItems::prompts, "batch.rollout",
                   "the prompt file d.jsonl has 3 prompts, fewer than one rollout batch (batch.rollout = 8)"}}) {
    try {
      DistributedSampler(SamplerConfig::of(Batching{8, 8, 1, 42, items}, 3, 1, 0, ShardLayout::strided, "d.jsonl"));
      FAIL("no error");
    } catch (const Error& error) {
      CHECK(error.kind() == ErrorKind::config);
      CHECK(error.recipe_key() == key);
      CHECK(std::string(error.what()) == text);
    }
  }
}TEST_CASE("batching: the loaders' sizes come from the plan's step, by the algorithm's data shape") {
  const auto plan_of = [](const std::string& text) {
    Diagnostics diagnostics;
    const auto recipe = load_recipe_text(text, "b.toml", {}, diagnostics);
    REQUIRE_MESSAGE(recipe, diagnostics.format());
    return make_plan(*recipe, ClusterShape::from_recipe(*recipe), diagnostics);
  };
  const std::string common = "seed = 9\n[launch]\ndevice = \"cpu\"\n[roles.actor]\nmodel = \"builtin:tiny\"\n";
  const Batching sft = train_detail::batching_of(
      plan_of("algorithm = \"sft\"\n" + common + "[batch]\ntrain = 6\nmicro_train = 3\n[train]\nepochs = 2\n"));
  CHECK(sft.items == BatchItems::sequences);
  CHECK(sft.global_batch == 6);
  CHECK(sft.micro_batch == 3);
  CHECK(sft.epochs == 2);
  CHECK(sft.seed == 9);
  const Batching dpo = train_detail::batching_of(
      plan_of("algorithm = \"dpo\"\n" + common + "[batch]\ntrain = 4\nmicro_train = 2\n"));
  CHECK(dpo.items == BatchItems::pairs);
  CHECK(dpo.global_batch == 4);
  CHECK(dpo.micro_batch == 2);
  const Batching ppo = train_detail::batching_of(plan_of(
      "algorithm = \"ppo\"\n" + common +
      "[batch]\nrollout = 5\nn_samples_per_prompt = 2\ntrain = 10\n[ppo]\nnum_episodes = 3\n"));
  CHECK(ppo.items == BatchItems::prompts);
  CHECK(ppo.global_batch == 5);
  CHECK(ppo.micro_batch == 5);
  CHECK(ppo.epochs == 3);
  CHECK(ppo.seed == 9);
}


