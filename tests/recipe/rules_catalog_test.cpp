// Tests of src/recipe/rules_catalog.cpp: the catalogue of rule ids that
// diagnostics name and docs/recipes.md lists. (That the ids reported by the
// code are catalogued is checked in schema_test.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "meshrun/recipe/schema.hpp"

namespace meshrun {
namespace {

TEST_CASE("rule ids are unique and named group.rule") {
  std::set<std::string> ids;
  const std::set<std::string> groups = {"schema", "launch", "mesh", "batch", "roles",
                                        "rollout", "colocate", "data", "hooks", "plan", "ppo", "dpo", "lora"};
  for (const auto& rule : recipe_schema().rules) {
    INFO("rule " << rule.id);
    CHECK(ids.insert(rule.id).second);
    const size_t dot = rule.id.find('.');
    REQUIRE(dot != std::string::npos);
    CHECK(groups.count(rule.id.substr(0, dot)));
    CHECK(rule.id.find_first_not_of("abcdefghijklmnopqrstuvwxyz.-") == std::string::npos);
    CHECK_FALSE(rule.summary.empty());
    CHECK(rule.summary.back() == '.');
  }
}

TEST_CASE("every key a rule reads is a key or a table of the schema") {
  const Schema& schema = recipe_schema();
  for (const auto& rule : schema.rules) {
    for (const auto& key : rule.keys) {
      INFO("rule " << rule.id << " reads " << key);
      CHECK((schema.find_key(key) != nullptr || schema.find_section(key) != nullptr));
    }
  }
}

TEST_CASE("cross-field rules name the keys they read, so the docs can list them") {
  const Schema& schema = recipe_schema();
  for (const auto& rule : schema.rules) {
    if (rule.id.rfind("schema.", 0) == 0) continue;  // apply to every key
    INFO("rule " << rule.id);
    CHECK_FALSE(rule.keys.empty());
  }
  const RuleSpec* product = schema.find_rule("mesh.product");
  REQUIRE(product);
  CHECK(std::find(product->keys.begin(), product->keys.end(), "roles.*.mesh.dp") != product->keys.end());
  CHECK(std::find(product->keys.begin(), product->keys.end(), "mesh.dp") != product->keys.end());
}

}  // namespace
}  // namespace meshrun
