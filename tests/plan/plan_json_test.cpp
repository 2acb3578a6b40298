// The JSON plan mirrors the text with integer bytes.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "plan_fixtures.hpp"

using namespace meshrun;
using namespace plan_test;
using nlohmann::json;

TEST_CASE("JSON plan of a PPO run") {
  Recipe recipe = ppo_recipe("Llama-2-7b", 4, 8, 1);
  recipe.colocate.groups = {{Role::actor, Role::rollout}};
  recipe.rollout.engines = 4;
  recipe.rollout.tensor_parallel = 2;
  role_of(recipe, "actor").zero_stage = 3;
  Diagnostics diagnostics;
  const Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  const json j = json::parse(format_plan_json(plan));

  CHECK(j["cluster"]["nodes"] == 4);
  CHECK(j["cluster"]["procs_per_node"] == 8);
  CHECK(j["cluster"]["device"] == "cuda");
  CHECK(j["cluster"]["capacity_bytes"] == 80 * kGiB);
  CHECK(j["algorithm"] == "ppo");
  CHECK(j["sleep"] == false);

  REQUIRE(j["slots"].size() == 32);
  CHECK(j["slots"][2]["owners"] == json{"actor", "engine 1"});
  CHECK(j["slots"][2]["peak_bytes"] == plan.slots[2].peak_bytes);
  CHECK(j["slots"][9]["node"] == 1);
  CHECK(j["slots"][9]["local"] == 1);

  REQUIRE(j["roles"].size() == 4);
  const json& actor = j["roles"][0];
  CHECK(actor["name"] == "actor");
  CHECK(actor["trained"] == true);
  CHECK(actor["ranks"] == json(plan.role(Role::actor)->ranks));
  CHECK(actor["mesh"]["dp"] == 8);
  CHECK(actor["mesh"]["tp_groups"].size() == 8);
  CHECK(actor["mesh"]["dp_groups"][0] == json{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(actor["gradient_accumulation"] == 1);
  CHECK(actor["parameter_count"] == 6'738'415'616);
  CHECK(actor["architecture"]["name"] == "Llama-2-7b");
  CHECK(actor["architecture"]["source"] == "built-in table");
  CHECK(actor["memory"]["parameters"] == 2'089'370'624);  // 2N / 8 and one gathered decoder layer
  CHECK(actor["memory"]["total"] == plan.role(Role::actor)->memory.total());
  CHECK(j["roles"][3]["gradient_accumulation"].is_null());  // ref is not trained
  CHECK(actor["activations_by_checkpointing"]["with"] == plan.role(Role::actor)->activations_checkpointed);
  CHECK(actor["activations_by_checkpointing"]["without"] == plan.role(Role::actor)->memory.activations);

  REQUIRE(j["engines"].size() == 4);
  CHECK(j["engines"][3]["ranks"] == json{6, 7});
  CHECK(j["engines"][3]["node"] == 0);
  CHECK(j["engines"][0]["kv_cache_tokens"] == 265'110);
  CHECK(j["engines"][0]["memory"]["kv_cache"] == plan.engines[0].memory.kv_cache);

  REQUIRE(j["verdicts"].size() == 8);
  for (const auto& v : j["verdicts"]) {
    CHECK(v["capacity_bytes"] == 80 * kGiB);
    CHECK(v["margin_bytes"].is_number_integer());
  }
  CHECK(j["verdicts"][0]["who"] == "actor");
}

TEST_CASE("JSON marks what could not be planned with null") {
  Recipe recipe = sft_recipe("no-such-model", 6);
  recipe.roles[0].mesh.tp = 4;
  Diagnostics diagnostics;
  std::string error;
  const json j = json::parse(format_plan_json(make_plan(recipe, *ClusterShape::parse("1x6:cpu", error), diagnostics)));
  CHECK(j["cluster"]["capacity_bytes"] == 0);
  CHECK(j["roles"][0]["mesh"].is_null());
  CHECK(j["roles"][0]["architecture"].is_null());
  CHECK(j["roles"][0]["memory"].is_null());
  CHECK(j["verdicts"].empty());
}
