// Tests of the rule tables (include/meshrun/recipe/rules.hpp: recipe/'s
// rows in src/recipe/rules.cpp, lint's in src/lint/lint_rules.cpp): the
// catalogue of rule ids that diagnostics name and docs/recipes.md lists, and
// each row's check. (That the ids reported by the code are catalogued is
// checked in schema_test.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "diagnostic_matchers.hpp"
#include "meshrun/lint/lint.hpp"
#include "meshrun/recipe/rules.hpp"
#include "meshrun/recipe/schema.hpp"

namespace meshrun {
namespace {

TEST_CASE("rule ids are unique and named group.rule") {
  std::set<std::string> ids;
  const std::set<std::string> groups = {"schema", "launch", "mesh", "batch", "roles",
                                        "rollout", "colocate", "data", "hooks", "env", "plan", "ppo", "dpo", "lora", "moe",
                                        "checkpoint"};
  for (const RuleRow* row : rule_catalog()) {
    const RuleRow& rule = *row;
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
  for (const RuleRow* row : rule_catalog()) {
    const RuleRow& rule = *row;
    for (const auto& key : rule.keys) {
      INFO("rule " << rule.id << " reads " << key);
      CHECK((schema.find_key(key) != nullptr || schema.find_section(key) != nullptr));
    }
  }
}

TEST_CASE("cross-field rules name the keys they read, so the docs can list them") {
  for (const RuleRow* row : rule_catalog()) {
    const RuleRow& rule = *row;
    if (rule.id.rfind("schema.", 0) == 0) continue;  // apply to every key
    INFO("rule " << rule.id);
    CHECK_FALSE(rule.keys.empty());
  }
  const RuleRow* product = find_rule("mesh.product");
  REQUIRE(product);
  CHECK(std::find(product->keys.begin(), product->keys.end(), "roles.*.mesh.dp") != product->keys.end());
  CHECK(std::find(product->keys.begin(), product->keys.end(), "mesh.dp") != product->keys.end());
}

TEST_CASE("two tables of one row type: recipe/'s pure rules, lint's probes, and the rules reported elsewhere") {
  for (const RuleRow& row : recipe_rules()) {
    INFO("rule " << row.id);
    // recipe/ holds the schema's rows and the pure rules, nothing that looks at the machine.
    CHECK((row.stage == RuleStage::schema || row.stage == RuleStage::recipe));
    CHECK((row.check != nullptr) == (row.stage == RuleStage::recipe));
    CHECK((row.pass != RulePass::none) == (row.stage == RuleStage::recipe));
  }
  for (const RuleRow& row : lint_rules()) {
    INFO("rule " << row.id);
    CHECK((row.stage == RuleStage::probe || row.stage == RuleStage::plan || row.stage == RuleStage::run));
    CHECK((row.check != nullptr) == (row.stage == RuleStage::probe));
  }
  // The catalogue is both, recipe/'s rows first, and finds each by its id.
  const auto& catalog = rule_catalog();
  REQUIRE(catalog.size() == recipe_rules().size() + lint_rules().size());
  CHECK(catalog.front() == &recipe_rules().front());
  CHECK(catalog.back() == &lint_rules().back());
  for (const RuleRow* row : catalog) CHECK(find_rule(row->id) == row);
}

TEST_CASE("rows checked together name one check, stand together and share a pass") {
  for (const std::vector<RuleRow>* table : {&recipe_rules(), &lint_rules()}) {
    for (size_t i = 0; i < table->size(); ++i) {
      const RuleRow& row = (*table)[i];
      if (!row.check) continue;
      INFO("rule " << row.id);
      // The rows after the first one with this check that have it too follow it directly.
      bool left = false;
      for (size_t j = i + 1; j < table->size(); ++j) {
        const bool same = (*table)[j].check == row.check;
        if (same) {
          CHECK_FALSE(left);
          CHECK((*table)[j].pass == row.pass);
        }
        left = left || !same;
      }
    }
  }
}

TEST_CASE("each check reports the ids of the rows that name it") {
  // The broken recipes of the lint tests, each with a few overrides that
  // break more rules, checked by one check at a time.
  std::vector<std::string> files;
  for (const char* folder : {"/tests/lint/broken", "/tests/lint/valid", "/recipes"})
    for (const auto& entry : std::filesystem::directory_iterator(std::string(MESHRUN_SOURCE_DIR) + folder))
      if (entry.path().extension() == ".toml") files.push_back(entry.path().string());
  const std::vector<std::vector<Override>> variants = {
      {},
      {{"mesh.tp=3"}, {"mesh.sp=2"}, {"colocate.groups=[[\"actor\",\"actor\"],[\"ghost\"]]"}, {"colocate.all=true"}},
      {{"launch.device=\"cpu\""}, {"launch.backend=\"nccl\""}, {"launch.type=\"local\""}, {"launch.nodes=2"},
       {"batch.train=7"}, {"ppo.dual_clip=0.5"}, {"ppo.kl_mode=\"loss\""}, {"data.label_key=\"y\""},
       {"roles.actor.lora_rank=4"}, {"roles.actor.lora_targets=[\"q_proj\",\"q_proj\",\"qproj\"]"},
       {"hooks.on_step=\"missing\""}, {"data.packing=true"}, {"dpo.label_smoothing=0.1"}, {"dpo.loss=\"ipo\""}},
  };
  std::set<std::string> reported;
  for (const std::string& file : files) {
    for (const auto& overrides : variants) {
      Diagnostics load;
      const std::optional<Recipe> recipe = load_recipe(file, overrides, load);
      if (!recipe) continue;
      for (const std::vector<RuleRow>* table : {&recipe_rules(), &lint_rules()}) {
        for (const RuleRow& row : *table) {
          if (!row.check) continue;
          std::set<std::string> mine;
          for (const RuleRow& other : *table)
            if (other.check == row.check) mine.insert(other.id);
          if (mine.count("hooks.script")) mine.insert("roles.reward-required");  // the script is the reward source
          Diagnostics diagnostics;
          row.check(*recipe, diagnostics);
          for (const Diagnostic& d : diagnostics.items()) {
            INFO(file << ": the check of " << row.id << " reported " << d.rule << ": " << d.message);
            CHECK(mine.count(d.rule) == 1);
            reported.insert(d.rule);
          }
        }
      }
    }
  }
  CHECK(reported.size() > 25);  // the corpus reaches most rules
}

TEST_CASE("validate_recipe runs the pure rows pass by pass: launch, roles, colocation, fit, mesh, batch, ...") {
  // Every diagnostic at one place, so the order of reporting is the order of output.
  Diagnostics diagnostics;
  const auto recipe = load_recipe_text("algorithm = \"ppo\"\n[roles.actor]\nmodel = \"builtin:tiny\"\n", "r.toml",
                                       {{"launch.device=\"cpu\""}, {"launch.backend=\"nccl\""}}, diagnostics);
  REQUIRE(recipe);
  Recipe shared = *recipe;
  shared.locations.clear();  // every key at the file as a whole
  shared.launch.procs_per_node = 1;
  shared.roles.front().procs_per_node = 3;
  shared.mesh.tp = shared.roles.front().mesh.tp = 2;
  validate_recipe(shared, diagnostics);
  std::vector<RulePass> passes;
  for (const Diagnostic& d : diagnostics.items()) {
    const RuleRow* row = find_rule(d.rule);
    REQUIRE(row);
    passes.push_back(row->pass);
  }
  CHECK(passes.size() > 3);
  CHECK(std::is_sorted(passes.begin(), passes.end()));
}

}  // namespace
}  // namespace meshrun
