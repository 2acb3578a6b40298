// Tests of src/recipe/resolved.cpp: the resolved recipe loads back into the
// same values for every shipped and valid test recipe, includes and --set
// are merged, inherited and default values are written out, paths become
// absolute, and diffs name the keys that changed.
#include <doctest/doctest.h>

#include <filesystem>

#include "diagnostic_matchers.hpp"
#include "meshrun/recipe/resolved.hpp"
#include "support/temp_dir.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::string value_of(const std::vector<ResolvedKey>& keys, const std::string& key) {
  for (const ResolvedKey& k : keys)
    if (k.key == key) return k.value;
  return "(absent)";
}

// Loads `path`, writes its resolved form into `dir`, loads that back.
void check_round_trip(const std::string& path, const std::vector<Override>& overrides, const TempDir& dir) {
  CAPTURE(path);
  Diagnostics first;
  auto recipe = load_recipe(path, overrides, first);
  INFO(first.format());
  REQUIRE(recipe);
  validate_recipe(*recipe, first);
  const std::string text = resolved_recipe_toml(*recipe);
  CAPTURE(text);
  const fs::path written = dir.write(fs::path(path).stem().string() + ".resolved.toml", text);
  Diagnostics second;
  auto again = load_recipe(written.string(), {}, second);
  INFO(second.format());
  REQUIRE(again);
  validate_recipe(*again, second);
  CHECK(second.error_count() == first.error_count());
  CHECK(second.warning_count() == first.warning_count());
  const auto before = resolved_keys(*recipe), after = resolved_keys(*again);
  CHECK(diff_resolved(before, after).empty());
  CHECK(recipe_fingerprint(before) == recipe_fingerprint(after));
  // Written twice, the same text but for the file it came from.
  const std::string again_text = resolved_recipe_toml(*again);
  CHECK(again_text.substr(again_text.find("# Fingerprint")) == text.substr(text.find("# Fingerprint")));
}

TEST_CASE("every shipped and valid recipe's resolved form loads back to the same values") {
  TempDir dir;
  size_t checked = 0;
  for (const char* folder : {"/recipes", "/tests/lint/valid"}) {
    for (const auto& entry : fs::directory_iterator(std::string(MESHRUN_SOURCE_DIR) + folder)) {
      if (entry.path().extension() != ".toml") continue;
      check_round_trip(entry.path().string(), {}, dir);
      ++checked;
    }
  }
  CHECK(checked >= 6);
  check_round_trip(std::string(MESHRUN_SOURCE_DIR) + "/recipes/quickstart.toml",
                   {Override{"batch.rollout=32"}, Override{"roles.actor.learning_rate=1e-3"},
                    Override{"ppo.eps_clip_high=0.28"}},
                   dir);
}

TEST_CASE("data.chat_template_kwargs is written as an inline table that loads back, into the fingerprint") {
  TempDir dir;
  const std::string quickstart = std::string(MESHRUN_SOURCE_DIR) + "/recipes/quickstart.toml";
  const Override kwargs{R"(data.chat_template_kwargs={enable_thinking=false, "odd key"=[1, 2.5, "x\"y"], t={u={}}})"};
  check_round_trip(quickstart, {kwargs}, dir);
  Diagnostics diagnostics;
  auto with = load_recipe(quickstart, {kwargs}, diagnostics);
  auto without = load_recipe(quickstart, {}, diagnostics);
  REQUIRE(with);
  REQUIRE(without);
  const auto keys = resolved_keys(*with);
  CHECK(value_of(keys, "data.chat_template_kwargs") ==
        R"({ enable_thinking = false, 'odd key' = [1, 2.5, 'x"y'], t = { u = { } } })");
  CHECK(value_of(resolved_keys(*without), "data.chat_template_kwargs") == "(absent)");
  CHECK(recipe_fingerprint(keys) != recipe_fingerprint(resolved_keys(*without)));
}

TEST_CASE("the resolved recipe merges includes and overrides and writes defaults out") {
  TempDir dir;
  dir.write("base.toml", R"(algorithm = "ppo"
[launch]
procs_per_node = 4
[mesh]
tp = 2
[roles.actor]
model = "builtin:tiny"
learning_rate = 2e-6
[roles.ref]
model = "builtin:tiny"
[data]
path = "data/prompts.jsonl"
)");
  dir.write("run.toml", R"(include = "base.toml"
[roles.actor]
learning_rate = 3e-6
[hooks]
script = "hooks/r.lua"
)");
  Diagnostics diagnostics;
  auto recipe = load_recipe(dir / "run.toml", {Override{"roles.ref.mesh.tp=1"}}, diagnostics);
  INFO(diagnostics.format());
  REQUIRE(recipe);
  const auto keys = resolved_keys(*recipe);
  CHECK(value_of(keys, "name") == "'run'");
  CHECK(value_of(keys, "algorithm") == "'ppo'");
  CHECK(value_of(keys, "roles.actor.learning_rate") == "3e-06");
  CHECK(value_of(keys, "roles.actor.mesh.tp") == "2");  // inherited from [mesh]
  CHECK(value_of(keys, "roles.ref.mesh.tp") == "1");    // --set
  CHECK(value_of(keys, "roles.actor.procs_per_node") == "4");
  CHECK(value_of(keys, "ppo.gamma") != "(absent)");      // a default, written out
  CHECK(value_of(keys, "roles.critic.model") == "(absent)");
  CHECK(value_of(keys, "include") == "(absent)");
  CHECK(value_of(keys, "data.path") == "'" + dir / "data/prompts.jsonl" + "'");
  CHECK(value_of(keys, "hooks.script") == "'" + dir / "hooks/r.lua" + "'");
  CHECK(value_of(keys, "data.label_key") == "(absent)");  // empty, and empty by default

  const std::string text = resolved_recipe_toml(*recipe);
  CHECK(text.find("# Resolved from: " + dir / "run.toml" + " " + dir / "base.toml") !=
        std::string::npos);
  // A role's tables together, roles in their order.
  const size_t actor = text.find("\n[roles.actor]\n"), actor_mesh = text.find("\n[roles.actor.mesh]\n"),
               ref = text.find("\n[roles.ref]\n");
  CHECK(actor < actor_mesh);
  CHECK(actor_mesh < ref);
  CHECK(ref != std::string::npos);
}

TEST_CASE("diff_resolved names changed, added and removed keys; the fingerprint follows the values") {
  const std::vector<ResolvedKey> before = {{"seed", "42"}, {"train.lr", "1e-05"}, {"roles.ref.model", "\"a\""}};
  const std::vector<ResolvedKey> after = {{"seed", "42"}, {"train.lr", "2e-05"}, {"roles.critic.model", "\"b\""}};
  const auto changes = diff_resolved(before, after);
  REQUIRE(changes.size() == 3);
  CHECK(changes[0].key == "train.lr");
  CHECK(changes[0].before == "1e-05");
  CHECK(changes[0].after == "2e-05");
  CHECK(changes[1].key == "roles.critic.model");
  CHECK(changes[1].before == "(absent)");
  CHECK(changes[2].key == "roles.ref.model");
  CHECK(changes[2].after == "(absent)");
  CHECK(diff_resolved(before, before).empty());
  CHECK(recipe_fingerprint(before) == recipe_fingerprint(before));
  CHECK(recipe_fingerprint(before) != recipe_fingerprint(after));
  CHECK(recipe_fingerprint(before).size() == 32);
}

}  // namespace
}  // namespace meshrun
