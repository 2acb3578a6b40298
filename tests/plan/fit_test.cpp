// Slot peaks (with and without colocate.sleep) and fit verdicts.
#include <doctest/doctest.h>

#include "plan_fixtures.hpp"

using namespace meshrun;
using namespace plan_test;

namespace {

// Llama-2-70B PPO on 4 nodes × 8 × 80 GiB: each role one node of 8, ZeRO-3,
// bf16, micro_train 2, gradient checkpointing, 1024 + 1024 tokens; two tp4
// engines share the actor's node and sleep while it trains.
Recipe llama70b_ppo(bool offload) {
  Recipe recipe = ppo_recipe("meta-llama/Llama-2-70b-hf", 4, 8, 1);
  recipe.launch.memory_gb = 80;
  recipe.batch.micro_train = 2;
  recipe.batch.train = 64;
  recipe.rollout.max_prompt_len = 1024;
  recipe.rollout.max_new_tokens = 1024;
  recipe.rollout.engines = 2;
  recipe.rollout.tensor_parallel = 4;
  recipe.colocate.groups = {{Role::actor, Role::rollout}};
  recipe.colocate.sleep = true;
  for (auto& r : recipe.roles) {
    r.zero_stage = 3;
    r.dtype = "bf16";
    r.gradient_checkpointing = true;
    r.offload = offload;
  }
  return recipe;
}

}  // namespace

TEST_CASE("Llama-2-70B PPO without optimizer offload: actor and critic do not fit") {
  Recipe recipe = llama70b_ppo(false);
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);

  const RolePlan& actor = *plan.role(Role::actor);
  CHECK(actor.parameter_count == 68'976'648'192);
  // ZeRO-3's largest unit U, a decoder layer: 2 · 8192² + 2 · 8192 · 1024
  // + 3 · 8192 · 28672 + 2 · 8192 = 855,654,400.
  CHECK(actor.memory.parameters == 17'244'162'048 + 2 * int64_t{855'654'400});  // 2N / 8 + the gathered unit
  // The fp32 shard 4N / 8, the unit's gradient, two fp32 copies being
  // reduced and their outputs (4 / 8 each).
  CHECK(actor.memory.gradients == 34'488'324'096 + (2 + 2 * 4 + 1) * int64_t{855'654'400});
  CHECK(actor.memory.optimizer == 103'464'972'288);  // 12N / 8: 96.36 GiB on its own
  // t = 2 × 2048: 80 × t × 8192 × 2 + t × 165,888 × 2.
  CHECK(actor.memory.activations == 5'368'709'120 + 1'358'954'496);
  CHECK(actor.memory.logits == 786'432'000);  // t × 32000 × (2 + 4)
  CHECK(actor.memory.total() == 174'908'803'072);  // 162.90 GiB
  CHECK(actor.gradient_accumulation == 4);  // 64 / (2 × 8)

  const RolePlan& critic = *plan.role(Role::critic);
  CHECK(critic.memory.optimizer == 103'071'768'576);  // 12 × 68,714,512,384 / 8
  CHECK(critic.memory.total() == 173'532'565'504);   // 161.61 GiB

  const FitVerdict* actor_verdict = verdict_of(plan, "actor");
  REQUIRE(actor_verdict);
  CHECK_FALSE(actor_verdict->fits);
  CHECK(actor_verdict->capacity_bytes == 80 * kGiB);
  CHECK(actor_verdict->peak_bytes == 174'908'803'072);
  CHECK(actor_verdict->margin_bytes() == 80 * kGiB - 174'908'803'072);
  CHECK_FALSE(verdict_of(plan, "critic")->fits);
  CHECK(verdict_of(plan, "ref")->fits);
  CHECK(verdict_of(plan, "reward")->fits);
  CHECK(verdict_of(plan, "engine 0")->fits);  // asleep while the actor trains

  int memory_errors = 0;
  for (const auto& d : diagnostics.items()) {
    CHECK(d.rule == "plan.memory");
    memory_errors += d.rule == "plan.memory";
  }
  CHECK(memory_errors == 2);
  const Diagnostic* d = find_rule(diagnostics, "plan.memory");
  REQUIRE(d);
  CHECK(d->where == recipe.where("roles.actor"));
  CHECK(d->message.find("actor needs 162.90 GiB per process on 80.00 GiB devices (82.90 GiB over)") == 0);
  CHECK(d->message.find("parameters 17.65, gradients 40.89, optimizer 96.36") != std::string::npos);
  CHECK(d->suggestion.find("roles.actor.offload = true") != std::string::npos);
}

TEST_CASE("Llama-2-70B PPO with optimizer offload fits") {
  Recipe recipe = llama70b_ppo(true);
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  CHECK(diagnostics.empty());

  const RolePlan& actor = *plan.role(Role::actor);
  CHECK(actor.memory.optimizer == 0);
  CHECK(actor.memory.optimizer_host == 103'464'972'288);
  CHECK(actor.memory.total() == 71'443'830'784);  // 66.54 GiB
  CHECK(plan.role(Role::critic)->memory.total() == 70'460'796'928);  // 65.62 GiB

  // The engine reserves 0.9 × 80 GiB; with sleep the actor's slots peak at that.
  const EnginePlan& engine = plan.engines[0];
  CHECK(engine.memory.parameters == 34'488'324'096);  // 2N / 4
  CHECK(engine.memory.kv_cache == 41'747'345'408);
  CHECK(engine.kv_bytes_per_token == 2 * 80 * 2 * 128 * 2);
  CHECK(engine.kv_cache_tokens == 509'611);
  CHECK(engine.kv_cache_sequences == 248);
  CHECK(plan.slots[0].peak_bytes == 77'309'411'328);

  for (const auto& v : plan.verdicts) CHECK_MESSAGE(v.fits, v.who);
  // With sleep each owner is judged by itself: the engine sleeps while the actor trains.
  CHECK(verdict_of(plan, "actor")->peak_bytes == 71'443'830'784);
  CHECK(verdict_of(plan, "actor")->margin_bytes() == 80 * kGiB - 71'443'830'784);
  CHECK(verdict_of(plan, "engine 0")->peak_bytes == 77'309'411'328);
  CHECK(verdict_of(plan, "critic")->peak_bytes == 70'460'796'928);
  CHECK(plan.verdicts.size() == 6);  // four roles, two engines
}

TEST_CASE("colocated owners add up unless they sleep") {
  Recipe recipe = ppo_recipe("builtin:small", 1, 4, 1);
  recipe.rollout.max_prompt_len = 512;  // builtin:small has a 1024-token context
  recipe.rollout.max_new_tokens = 512;
  recipe.roles.erase(recipe.roles.begin() + 1, recipe.roles.begin() + 3);  // actor and ref
  recipe.colocate.groups = {{Role::actor, Role::ref}};
  recipe.rollout.engines = 0;
  Diagnostics diagnostics;
  Plan summed = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const int64_t actor = summed.role(Role::actor)->memory.total();
  const int64_t ref = summed.role(Role::ref)->memory.total();
  CHECK(summed.slots[2].peak_bytes == actor + ref);
  CHECK(verdict_of(summed, "ref")->peak_bytes == actor + ref);

  recipe.colocate.sleep = true;
  Plan sleeping = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  CHECK(sleeping.sleep);
  CHECK(sleeping.slots[2].peak_bytes == std::max(actor, ref));
  CHECK(verdict_of(sleeping, "ref")->peak_bytes == ref);
  CHECK(diagnostics.empty());
}

TEST_CASE("engines that do not fit their budget or the device") {
  Diagnostics diagnostics;
  SUBCASE("memory_utilization too low for the weights") {
    Recipe recipe = llama70b_ppo(true);
    recipe.rollout.memory_utilization = 0.3;  // 24 GiB < 32.12 GiB of weights
    Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
    const FitVerdict* v = verdict_of(plan, "engine 1");
    REQUIRE(v);
    CHECK_FALSE(v->fits);
    CHECK(v->reason.find("memory_utilization leaves 24.00 GiB") != std::string::npos);
    CHECK(plan.engines[1].memory.kv_cache == 0);
    const Diagnostic* d = find_rule(diagnostics, "plan.memory");
    REQUIRE(d);
    CHECK(d->where == recipe.where("rollout"));
    CHECK(d->message.find("engine 0 needs") == 0);
    CHECK(d->message.find("(likewise 1 more engine(s))") != std::string::npos);
    CHECK(diagnostics.error_count() == 1);
  }
  SUBCASE("colocated without sleep: engine and actor together exceed the device") {
    Recipe recipe = llama70b_ppo(true);
    recipe.colocate.sleep = false;
    Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
    CHECK(plan.slots[0].peak_bytes == 77'309'411'328 + 71'443'830'784);
    CHECK_FALSE(verdict_of(plan, "actor")->fits);
    CHECK_FALSE(verdict_of(plan, "engine 0")->fits);
    CHECK(diagnostics.error_count() == 2);  // the actor, and the engines once
    const Diagnostic* actor = find_rule(diagnostics, "plan.memory");
    REQUIRE(actor);
    CHECK(actor->message.find("with engine 0 on the same slots") != std::string::npos);
    CHECK(actor->suggestion.find("colocate.sleep = true") != std::string::npos);
  }
}

TEST_CASE("a verdict without known device memory judges nothing") {
  Recipe recipe = sft_recipe("Llama-2-70b", 2);
  std::string error;
  Diagnostics diagnostics;
  Plan plan = make_plan(recipe, *ClusterShape::parse("1x2:cpu", error), diagnostics);
  CHECK(diagnostics.empty());
  REQUIRE(plan.verdicts.size() == 1);
  CHECK(plan.verdicts[0].fits);
  CHECK(plan.verdicts[0].capacity_bytes == 0);
  CHECK(plan.verdicts[0].peak_bytes > 0);
}
