// Tests of src/recipe/schema.cpp (and the catalogue it is built from): key
// lookup with the role wildcard, the names of a table, constraint texts, and
// that the registry is complete and consistent.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/lint/lint.hpp"
#include "meshrun/recipe/schema.hpp"

namespace meshrun {
namespace {

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST_CASE("schema_pattern replaces the role name, and only it, by *") {
  CHECK(schema_pattern("roles.actor.model") == "roles.*.model");
  CHECK(schema_pattern("roles.critic.mesh.tp") == "roles.*.mesh.tp");
  CHECK(schema_pattern("roles.ref") == "roles.*");
  CHECK(schema_pattern("roles") == "roles");
  CHECK(schema_pattern("launch.nodes") == "launch.nodes");
  CHECK(schema_pattern("mesh.tp") == "mesh.tp");
  CHECK(schema_pattern("") == "");
}

TEST_CASE("find_key finds plain keys and role keys through the wildcard") {
  const Schema& schema = recipe_schema();
  const KeySpec* nodes = schema.find_key("launch.nodes");
  REQUIRE(nodes);
  CHECK(nodes->path == "launch.nodes");
  CHECK(nodes->type == ValueType::integer);

  const KeySpec* model = schema.find_key("roles.actor.model");
  REQUIRE(model);
  CHECK(model->path == "roles.*.model");
  CHECK(schema.find_key("roles.reward.model") == model);
  CHECK(schema.find_key("roles.*.model") == model);

  const KeySpec* role_tp = schema.find_key("roles.critic.mesh.tp");
  REQUIRE(role_tp);
  CHECK(role_tp->path == "roles.*.mesh.tp");
  CHECK(schema.find_key("mesh.tp") != role_tp);

  CHECK(schema.find_key("launch.nodez") == nullptr);
  CHECK(schema.find_key("launch") == nullptr);  // a section, not a key
  CHECK(schema.find_key("roles.actor") == nullptr);
  CHECK(schema.find_key("tp") == nullptr);
}

TEST_CASE("find_section knows every table, role tables through the wildcard") {
  const Schema& schema = recipe_schema();
  REQUIRE(schema.find_section("launch"));
  CHECK(schema.find_section("launch")->path == "launch");
  REQUIRE(schema.find_section("roles.ref"));
  CHECK(schema.find_section("roles.ref")->path == "roles.*");
  REQUIRE(schema.find_section("roles.actor.mesh"));
  CHECK(schema.find_section("roles.actor.mesh")->path == "roles.*.mesh");
  REQUIRE(schema.find_section(""));  // the top level
  CHECK(schema.find_section("launch.nodes") == nullptr);
  CHECK(schema.find_section("lanch") == nullptr);
}

TEST_CASE("names_in lists the keys and sub-tables of a table, once each") {
  const Schema& schema = recipe_schema();

  SUBCASE("the top level: keys and section names") {
    auto names = schema.names_in("");
    for (const char* name : {"name", "algorithm", "seed", "include", "launch", "mesh", "batch", "roles", "rollout",
                             "colocate", "ppo", "data", "checkpoint", "hooks", "logging"})
      CHECK_MESSAGE(contains(names, name), name);
    CHECK_FALSE(contains(names, "nodes"));
    CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
  }
  SUBCASE("a section") {
    auto names = schema.names_in("launch");
    CHECK(names == std::vector<std::string>{"type", "nodes", "procs_per_node", "device", "backend",
                                            "timeout_minutes", "master_port", "max_restarts", "restart_delay",
                                            "address", "memory_gb"});
  }
  SUBCASE("[roles] holds the role names") {
    auto names = schema.names_in("roles");
    CHECK(names == std::vector<std::string>{"actor", "critic", "reward", "ref"});
  }
  SUBCASE("a concrete role holds the role keys and its mesh") {
    auto names = schema.names_in("roles.critic");
    const std::vector<std::string> expected = {
        "model",        "nodes",        "procs_per_node", "zero_stage",   "dtype",
        "learning_rate", "lr_scheduler", "warmup_ratio",   "min_lr_ratio", "weight_decay",
        "adam_beta1",   "adam_beta2",   "adam_eps",       "max_norm",     "gradient_checkpointing",
        "offload",      "lora_rank",    "lora_alpha",     "lora_targets", "lora_dropout", "router_aux_loss_coef", "hook", "mesh"};
    for (const auto& name : expected) CHECK_MESSAGE(contains(names, name), name);
    CHECK(names.size() == expected.size());
    CHECK(schema.names_in("roles.*") == names);
  }
  SUBCASE("a role's mesh and the global mesh") {
    CHECK(schema.names_in("roles.actor.mesh") == std::vector<std::string>{"tp", "sp", "dp", "ep"});
    CHECK(schema.names_in("mesh") == std::vector<std::string>{"tp", "sp", "dp", "ep"});
  }
  SUBCASE("no names in a key or an unknown table") {
    CHECK(schema.names_in("launch.nodes").empty());
    CHECK(schema.names_in("lanch").empty());
  }
}

TEST_CASE("constraint_text describes ranges, exclusive bounds, extra values and choices") {
  const Schema& schema = recipe_schema();
  auto text = [&](const char* key) {
    const KeySpec* spec = schema.find_key(key);
    REQUIRE_MESSAGE(spec, key);
    return spec->constraint_text();
  };
  CHECK(text("launch.nodes") == "≥ 1");
  CHECK(text("launch.master_port") == "≥ 1 and ≤ 65535");
  CHECK(text("launch.timeout_minutes") == "≥ 0.01 and ≤ 10080");
  CHECK(text("hooks.timeout_s") == "> 0");
  CHECK(text("rollout.top_p") == "> 0 and ≤ 1");
  CHECK(text("roles.actor.zero_stage") == "≥ 0 and ≤ 3");
  CHECK(text("mesh.dp") == "≥ 1 or -1");
  CHECK(text("rollout.top_k") == "≥ 1 or -1");
  CHECK(text("hooks.instruction_limit") == "≥ 1000");
  CHECK(text("launch.device") == "one of \"cuda\", \"cpu\"");
  CHECK(text("roles.ref.dtype") == "one of \"bf16\", \"fp16\", \"fp32\"");
  CHECK(text("roles.actor.model") == "");
  CHECK(text("roles.actor.offload") == "");

  SUBCASE("a maximum alone, and fractional bounds") {
    KeySpec spec;
    spec.max = 5;
    CHECK(spec.constraint_text() == "≤ 5");
    spec.min = 0.25;
    spec.min_exclusive = true;
    CHECK(spec.constraint_text() == "> 0.25 and ≤ 5");
    spec.also_allowed = {-1, -2};
    CHECK(spec.constraint_text() == "> 0.25 and ≤ 5 or -1 or -2");
  }
}

TEST_CASE("value_type_name") {
  CHECK(std::string(value_type_name(ValueType::boolean)) == "boolean");
  CHECK(std::string(value_type_name(ValueType::integer)) == "integer");
  CHECK(std::string(value_type_name(ValueType::number)) == "number");
  CHECK(std::string(value_type_name(ValueType::string)) == "string");
  CHECK(std::string(value_type_name(ValueType::string_list)) == "array of strings");
  CHECK(std::string(value_type_name(ValueType::string_list_list)) == "array of arrays of strings");
}

TEST_CASE("every key is documented, has a default text, and is bound to a field (include aside)") {
  const Schema& schema = recipe_schema();
  CHECK(schema.keys.size() > 60);
  std::set<std::string> paths;
  for (const auto& key : schema.keys) {
    INFO("key " << key.path);
    CHECK(paths.insert(key.path).second);  // no key registered twice
    CHECK_FALSE(key.doc.empty());
    CHECK_FALSE(key.default_text.empty());
    if (key.path == "include") {
      CHECK_FALSE(key.assign);  // handled by the loader
      CHECK(key.path_kind == PathKind::file);
    } else {
      CHECK(key.assign);
    }
    // The key's table is a documented section.
    size_t dot = key.path.rfind('.');
    std::string parent = dot == std::string::npos ? "" : key.path.substr(0, dot);
    CHECK(schema.find_section(parent) != nullptr);
    // Choices only for strings, bounds only for numbers.
    if (!key.choices.empty()) CHECK(key.type == ValueType::string);
    if (key.min || key.max) CHECK((key.type == ValueType::integer || key.type == ValueType::number));
    if (!key.also_allowed.empty()) CHECK((key.type == ValueType::integer || key.type == ValueType::number));
    if (key.path_kind != PathKind::none) CHECK(key.type == ValueType::string);
  }
}

TEST_CASE("only algorithm is required") {
  std::vector<std::string> required;
  for (const auto& key : recipe_schema().keys)
    if (key.required) required.push_back(key.path);
  CHECK(required == std::vector<std::string>{"algorithm"});
}

TEST_CASE("every section is documented and registered once") {
  std::set<std::string> paths;
  for (const auto& section : recipe_schema().sections) {
    INFO("section [" << section.path << "]");
    CHECK(paths.insert(section.path).second);
    CHECK_FALSE(section.doc.empty());
  }
  for (const char* path : {"", "launch", "mesh", "batch", "roles.*", "roles.*.mesh", "rollout", "colocate", "ppo",
                           "data", "checkpoint", "hooks", "logging"})
    CHECK_MESSAGE(paths.count(path), path);
}

TEST_CASE("rule ids reported by the code are catalogued") {
  // Each id below is reported somewhere in src/ (recipe loader and rules,
  // hook lint, planner); the docs list the catalogue, so none may be missing.
  for (const char* id :
       {"schema.syntax", "schema.unknown-key", "schema.type", "schema.range", "schema.choice", "schema.required",
        "schema.file", "schema.include", "schema.override", "launch.backend-device", "launch.local-nodes",
        "launch.ray-address",
        "mesh.product", "mesh.infer", "mesh.tp-node", "mesh.heads", "batch.train-divisible",
        "batch.rollout-divisible", "batch.group-samples", "roles.actor-required", "roles.critic-required",
        "roles.critic-unused", "roles.reward-required", "roles.model-required", "roles.hook-reward-only",
        "roles.unused", "roles.placement", "roles.fit", "rollout.tp-node", "rollout.max-length",
        "colocate.unknown-role", "colocate.duplicate", "colocate.conflict", "colocate.equal-placement",
        "colocate.engines", "data.required", "data.path", "hooks.script", "hooks.function", "hooks.needs-script",
        "plan.model", "plan.placement", "plan.memory"}) {
    const RuleRow* rule = find_rule(id);
    REQUIRE_MESSAGE(rule, id);
    CHECK(rule->id == id);
    CHECK_FALSE(rule->summary.empty());
  }
  CHECK(find_rule("mesh.nonexistent") == nullptr);
}

TEST_CASE("role names in placement order") {
  std::vector<std::string> names(std::begin(kRoleNames), std::end(kRoleNames));
  CHECK(names == std::vector<std::string>{"actor", "critic", "reward", "ref"});
}

}  // namespace
}  // namespace meshrun
