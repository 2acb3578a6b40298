// The human-readable plan contains every part a user needs.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "plan_fixtures.hpp"

using namespace meshrun;
using namespace plan_test;

TEST_CASE("text plan of a colocated PPO run") {
  Recipe recipe = ppo_recipe("meta-llama/Llama-2-70b-hf", 2, 8, 1);
  recipe.colocate.groups = {{Role::actor, Role::rollout}, {Role::critic, Role::reward, Role::ref}};
  recipe.colocate.sleep = true;
  recipe.rollout.engines = 2;
  recipe.rollout.tensor_parallel = 4;
  for (auto& r : recipe.roles) {
    r.zero_stage = 3;
    r.mesh.tp = 4;
    r.gradient_checkpointing = true;
  }
  role_of(recipe, "actor").offload = true;
  Diagnostics diagnostics;
  const std::string text = format_plan_text(make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics));
  INFO(text);

  CHECK(contains(text, "Plan for ppo on 2 node(s) × 8 cuda process(es) (world size 16), 80.00 GiB per device"));
  CHECK(contains(text, "colocate.sleep"));
  // Slot table: one row per node, cells joined by '+', aligned columns.
  CHECK(contains(text, "  node  0                  1                  2"));
  CHECK(contains(text, "  0     actor+engine0      actor+engine0"));
  CHECK(contains(text, "actor+engine1"));
  CHECK(contains(text, "1     critic+reward+ref"));
  // Role sections.
  CHECK(contains(text, "Role actor (trained)"));
  CHECK(contains(text, "meta-llama/Llama-2-70b-hf -> Llama-2-70b (built-in table; not in the local Hugging Face cache), 68.98B parameters"));
  CHECK(contains(text, "0-7 (8 processes, node 0)"));
  CHECK(contains(text, "dp=2 sp=1 tp=4"));
  CHECK(contains(text, "[0 1 2 3] [4 5 6 7]\n"));
  CHECK(contains(text, "[0 4] [1 5] [2 6] [3 7]\n"));
  CHECK(contains(text, "gradient accumulation:"));
  CHECK(contains(text, "ZeRO-3, bf16, gradient checkpointing, optimizer offload"));
  CHECK(contains(text, "memory per process (micro-batch 1 × 2048 tokens)"));
  CHECK(contains(text, "offloaded to CPU memory"));
  CHECK(contains(text, "GiB without gradient checkpointing)"));
  CHECK(contains(text, "Role ref (inference)"));
  CHECK(contains(text, "8-15 (8 processes, node 1)"));
  // Engines.
  CHECK(contains(text, "Rollout engines (2, tensor_parallel 4, Llama-2-70b in bf16)"));
  CHECK(contains(text, "engine 1:  ranks [4 5 6 7]  node 0"));
  CHECK(contains(text, "KV cache:"));
  CHECK(contains(text, "sequences per engine"));
  CHECK(contains(text, "KV pool: "));
  CHECK(contains(text, "blocks of 16 tokens"));
  CHECK(contains(text, "prefill chunks of 512 tokens"));
  // Verdicts.
  CHECK(contains(text, "Verdict\n"));
  CHECK(contains(text, "actor:"));
  CHECK(contains(text, "engines 0-1:  fits ("));
  CHECK(contains(text, "GiB to spare)"));
}

TEST_CASE("text and JSON plans show the async checkpoint snapshot beside the total") {
  Recipe recipe = ppo_recipe("meta-llama/Llama-2-70b-hf", 2, 8, 1);
  recipe.checkpoint.async = true;
  for (auto& r : recipe.roles) r.zero_stage = 3;
  Diagnostics diagnostics;
  const Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const std::string text = format_plan_text(plan);
  INFO(text);
  CHECK(contains(text, "GiB checkpoint snapshot in CPU memory while saving)"));
  CHECK(contains(format_plan_json(plan), "\"checkpoint_host\""));
  recipe.checkpoint.async = false;
  const std::string sync_text = format_plan_text(make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics));
  CHECK_FALSE(contains(sync_text, "checkpoint snapshot"));
}

TEST_CASE("text and JSON plans show DPO's reference: its model, its row, its weights in CPU memory under sleep") {
  Recipe recipe = sft_recipe("meta-llama/Llama-2-7b-hf", 8);
  recipe.algorithm = Algorithm::dpo;
  recipe.roles[0].zero_stage = 3;
  recipe.roles.push_back(role("ref", "meta-llama/Llama-2-13b-hf", 0, 0));
  recipe.colocate.sleep = true;
  Diagnostics diagnostics;
  const Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const std::string text = format_plan_text(plan);
  INFO(text);
  CHECK(contains(text, "reference:              meta-llama/Llama-2-13b-hf -> Llama-2-13b, "));
  CHECK(contains(text, "frozen, on these processes"));
  CHECK(contains(text, "GiB of weights in CPU memory while training)"));
  const nlohmann::json j = nlohmann::json::parse(format_plan_json(plan));
  const nlohmann::json& actor = j["roles"][0];
  CHECK(actor["reference"]["model"] == "meta-llama/Llama-2-13b-hf");
  CHECK(actor["reference"]["architecture"]["name"] == "Llama-2-13b");
  CHECK(actor["reference"]["parameter_count"] == plan.role(Role::actor)->reference_parameter_count);
  CHECK(actor["memory"]["reference_host"] == 2 * plan.role(Role::actor)->reference_parameter_count);
  CHECK(actor["memory"]["total"] == plan.role(Role::actor)->memory.total());
}

TEST_CASE("text verdicts of a plan that does not fit, and of unknown device memory") {
  Recipe recipe = sft_recipe("Llama-2-70b", 8);
  Diagnostics diagnostics;
  const std::string over = format_plan_text(make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics));
  CHECK(contains(over, "actor:  does NOT fit ("));
  CHECK(contains(over, "GiB over 80.00 GiB)"));

  std::string error;
  const std::string unknown = format_plan_text(make_plan(recipe, *ClusterShape::parse("1x8:cpu", error), diagnostics));
  CHECK(contains(unknown, "device memory unknown"));
  CHECK(contains(unknown, "(device memory unknown: no verdict)"));
}

TEST_CASE("large clusters abbreviate groups and collapse identical nodes") {
  Recipe recipe = sft_recipe("builtin:tiny", 8);
  recipe.launch.nodes = 64;
  recipe.roles[0].nodes = 64;
  Diagnostics diagnostics;
  const std::string text = format_plan_text(make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics));
  CHECK(contains(text, "0-63  actor  actor"));
  CHECK(contains(text, "0-511 (512 processes, nodes 0-63)"));
  CHECK(contains(text, "... (512 ranks)]"));
  CHECK(contains(text, "... (512 groups)"));
}

TEST_CASE("unplaced roles and unformed meshes are said so") {
  Recipe recipe = sft_recipe("builtin:tiny", 6);
  recipe.roles[0].mesh.tp = 4;
  Diagnostics diagnostics;
  std::string text = format_plan_text(make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics));
  CHECK(contains(text, "not formed"));
  CHECK(contains(text, "nothing to judge"));

  std::string error;
  text = format_plan_text(make_plan(recipe, *ClusterShape::parse("1x4", error), diagnostics));
  CHECK(contains(text, "not placed"));
}
