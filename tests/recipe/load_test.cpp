// Tests of src/recipe/load.cpp: files, includes, --set overrides, the
// required algorithm, locations, and that every error of a recipe comes in
// one run.
#include <doctest/doctest.h>

#include <chrono>

#include "diagnostic_matchers.hpp"
#include "meshrun/error.hpp"

namespace meshrun {
namespace {

using test::has_rule;
using test::load_text;
using test::TempDir;

std::vector<Override> sets(std::initializer_list<const char*> assignments) {
  std::vector<Override> out;
  for (const char* a : assignments) out.push_back(Override{a});
  return out;
}

TEST_CASE("load_recipe_text reads a recipe and records where each key was set") {
  auto loaded = load_text(R"(algorithm = "ppo"
name = "demo"

[launch]
nodes = 2
  procs_per_node = 8

[roles.actor]
model = "builtin:tiny"
)");
  CHECK_NO_ERRORS(loaded.diagnostics);
  REQUIRE(loaded.recipe);
  const Recipe& r = *loaded.recipe;
  CHECK(r.name == "demo");
  CHECK(r.algorithm == Algorithm::ppo);
  CHECK(r.file == "recipe.toml");
  CHECK(r.included_files == std::vector<std::string>{"recipe.toml"});
  CHECK(r.launch.nodes == 2);
  CHECK(r.launch.procs_per_node == 8);
  REQUIRE(r.roles.size() == 1);
  CHECK(r.roles[0].model == "builtin:tiny");

  // Keys: where the key is written.
  CHECK(r.where("launch.nodes") == SourceLocation{"recipe.toml", 5, 1});
  CHECK(r.where("launch.procs_per_node") == SourceLocation{"recipe.toml", 6, 3});
  CHECK(r.where("roles.actor.model") == SourceLocation{"recipe.toml", 9, 1});
  // Tables: the name in the header.
  CHECK(r.where("launch") == SourceLocation{"recipe.toml", 4, 2});
  CHECK(r.where("roles.actor") == SourceLocation{"recipe.toml", 8, 8});
  // An unset key: its table's header, else the file as a whole.
  CHECK(r.where("launch.device") == SourceLocation{"recipe.toml", 4, 2});
  CHECK(r.where("roles.actor.mesh.tp") == SourceLocation{"recipe.toml", 8, 8});
  CHECK(r.where("batch.train") == SourceLocation{"recipe.toml", 0, 0});

  CHECK(r.is_set("launch.nodes"));
  CHECK(r.is_set("roles.actor"));
  CHECK_FALSE(r.is_set("launch.device"));
  CHECK_FALSE(r.is_set("batch"));
}

TEST_CASE("roles exist when their table does, in the canonical order") {
  auto loaded = load_text(R"(algorithm = "ppo"
[roles.ref]
model = "r"
[roles.actor.mesh]
tp = 1
[roles.critic]
)");
  CHECK_NO_ERRORS(loaded.diagnostics);
  REQUIRE(loaded.recipe);
  std::vector<std::string> names;
  for (const auto& role : loaded.recipe->roles) names.push_back(role.name());
  CHECK(names == std::vector<std::string>{"actor", "critic", "ref"});
  CHECK(loaded.recipe->has_role(Role::critic));
  CHECK_FALSE(loaded.recipe->has_role(Role::reward));
  CHECK(loaded.recipe->role(Role::reward) == nullptr);
}

TEST_CASE("algorithm is required, and reported at the top of the file") {
  auto loaded = load_text("[launch]\nnodes = 1\n");
  CHECK_FALSE(loaded.recipe);
  auto d = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.required", 1, 1);
  REQUIRE(d);
  CHECK(d->where.file == "recipe.toml");
  CHECK(d->message == "the recipe does not say which algorithm to run");
  CHECK(d->suggestion == "add algorithm = \"sft\" or algorithm = \"ppo\" at the top level");
  CHECK(loaded.diagnostics.error_count() == 1);

  SUBCASE("an invalid algorithm is reported once, as invalid") {
    auto invalid = load_text("algorithm = 3\n");
    CHECK_DIAGNOSTIC(invalid.diagnostics, "schema.type", 1, 13);
    CHECK_NO_DIAGNOSTIC(invalid.diagnostics, "schema.required");
  }
  SUBCASE("a misspelt algorithm is reported once, as an unknown key") {
    auto misspelt = load_text("algoritm = \"sft\"\n");
    CHECK_DIAGNOSTIC(misspelt.diagnostics, "schema.unknown-key", 1, 1);
    CHECK_NO_DIAGNOSTIC(misspelt.diagnostics, "schema.required");
  }
  SUBCASE("--set can give it") {
    auto given = load_text("[launch]\nnodes = 1\n", {"algorithm=sft"});
    CHECK_NO_ERRORS(given.diagnostics);
    REQUIRE(given.recipe);
    CHECK(given.recipe->algorithm == Algorithm::sft);
  }
}

TEST_CASE("name defaults to the recipe file's name without .toml") {
  auto loaded = load_text("algorithm = \"sft\"\n", {}, "some/dir/my-run.toml");
  REQUIRE(loaded.recipe);
  CHECK(loaded.recipe->name == "my-run");
}

TEST_CASE("errors reported earlier to the same sink do not stop a valid recipe from loading") {
  Diagnostics diagnostics;
  diagnostics.error({"other.toml", 1, 1}, "schema.type", "from an earlier recipe");
  auto recipe = load_recipe_text("algorithm = \"sft\"\n", "r.toml", {}, diagnostics);
  CHECK(recipe);
  CHECK(diagnostics.error_count() == 1);
}

TEST_CASE("invalid TOML gives no recipe and no follow-up errors") {
  auto loaded = load_text("algorithm = \"sft\"\n[launch\nnodes = 2\n");
  CHECK_FALSE(loaded.recipe);
  CHECK(loaded.diagnostics.error_count() == 1);
  CHECK(test::has_rule(loaded.diagnostics, "schema.syntax"));
  CHECK_NO_DIAGNOSTIC(loaded.diagnostics, "schema.required");
}

TEST_CASE("a missing recipe file is schema.file, located at the file as a whole") {
  TempDir dir;
  Diagnostics diagnostics;
  const std::string path = dir / "nope.toml";
  CHECK_FALSE(load_recipe(path, {}, diagnostics));
  REQUIRE(diagnostics.items().size() == 1);
  const Diagnostic& d = diagnostics.items()[0];
  CHECK(d.rule == "schema.file");
  CHECK(d.where == SourceLocation{path, 0, 0});
  CHECK(d.message == "cannot read recipe file \"" + path + "\"");

  SUBCASE("a folder is not a recipe file") {
    Diagnostics folder;
    CHECK_FALSE(load_recipe(dir.path().string(), {}, folder));
    CHECK(test::has_rule(folder, "schema.file"));
  }
}

TEST_CASE("an included base is read first and overridden key by key") {
  TempDir dir;
  dir.write("base.toml", R"(algorithm = "sft"
[launch]
nodes = 2
procs_per_node = 4
[roles.actor]
model = "base-model"
zero_stage = 2
)");
  const std::string child = dir.write("child.toml", R"(include = "base.toml"
[launch]
nodes = 1
[roles.actor]
zero_stage = 3
)");
  Diagnostics diagnostics;
  auto recipe = load_recipe(child, {}, diagnostics);
  CHECK_NO_ERRORS(diagnostics);
  REQUIRE(recipe);
  CHECK(recipe->algorithm == Algorithm::sft);
  CHECK(recipe->launch.nodes == 1);           // child
  CHECK(recipe->launch.procs_per_node == 4);  // base
  REQUIRE(recipe->role(Role::actor));
  CHECK(recipe->role(Role::actor)->model == "base-model");
  CHECK(recipe->role(Role::actor)->zero_stage == 3);
  CHECK(recipe->name == "child");
  CHECK(recipe->file == child);
  CHECK(recipe->included_files == std::vector<std::string>{child, dir / "base.toml"});
  // Each key is located in the file that set it last.
  CHECK(recipe->where("launch.nodes") == SourceLocation{child, 3, 1});
  CHECK(recipe->where("launch.procs_per_node") == SourceLocation{dir / "base.toml", 4, 1});
  CHECK(recipe->where("roles.actor.model") == SourceLocation{dir / "base.toml", 6, 1});
}

TEST_CASE("includes nest, each relative to the file that names it") {
  TempDir dir;
  dir.write("common/root.toml", R"(algorithm = "sft"
seed = 1
[launch]
nodes = 3
procs_per_node = 3
[data]
path = "root.jsonl"
)");
  dir.write("common/mid.toml", R"(include = "root.toml"
seed = 2
[launch]
nodes = 2
)");
  const std::string top = dir.write("recipes/top.toml", R"(include = "../common/mid.toml"
seed = 3
)");
  Diagnostics diagnostics;
  auto recipe = load_recipe(top, {}, diagnostics);
  CHECK_NO_ERRORS(diagnostics);
  REQUIRE(recipe);
  CHECK(recipe->seed == 3);
  CHECK(recipe->launch.nodes == 2);
  CHECK(recipe->launch.procs_per_node == 3);
  // A relative path in an included file is relative to that file.
  CHECK(recipe->data.path == dir / "common/root.jsonl");
  CHECK(recipe->included_files.size() == 3);
  CHECK(recipe->where("seed").file == top);
  CHECK(recipe->where("launch.nodes").file == dir / "common/mid.toml");
}

TEST_CASE("a list of includes is applied in order, later ones winning") {
  TempDir dir;
  dir.write("a.toml", "algorithm = \"sft\"\nseed = 1\n[launch]\nnodes = 4\n");
  dir.write("b.toml", "seed = 2\n[launch]\nprocs_per_node = 2\n");
  const std::string top = dir.write("top.toml", "include = [\"a.toml\", \"b.toml\"]\n");
  Diagnostics diagnostics;
  auto recipe = load_recipe(top, {}, diagnostics);
  CHECK_NO_ERRORS(diagnostics);
  REQUIRE(recipe);
  CHECK(recipe->seed == 2);
  CHECK(recipe->launch.nodes == 4);
  CHECK(recipe->launch.procs_per_node == 2);
  CHECK(recipe->included_files == std::vector<std::string>{top, dir / "a.toml", dir / "b.toml"});
}

TEST_CASE("an include cycle is an error at the include that closes it") {
  TempDir dir;
  const std::string a = dir.write("a.toml", "algorithm = \"sft\"\ninclude = \"b.toml\"\n");
  const std::string b = dir.write("b.toml", "seed = 1\n# b includes a\ninclude = \"a.toml\"\n");
  Diagnostics diagnostics;
  CHECK_FALSE(load_recipe(a, {}, diagnostics));
  auto d = FIND_DIAGNOSTIC(diagnostics, "schema.include", 3, 11);
  REQUIRE(d);
  CHECK(d->where.file == b);
  CHECK(d->message == "include cycle: " + a + " → " + b + " → " + a);
  CHECK(diagnostics.error_count() == 1);

  SUBCASE("a file that includes itself") {
    const std::string self = dir.write("self.toml", "algorithm = \"sft\"\ninclude = \"./self.toml\"\n");
    Diagnostics self_diagnostics;
    CHECK_FALSE(load_recipe(self, {}, self_diagnostics));
    auto s = FIND_DIAGNOSTIC(self_diagnostics, "schema.include", 2, 11);
    REQUIRE(s);
    CHECK(s->where.file == self);
    CHECK(s->message == "include cycle: " + self + " → " + self);
  }
}

TEST_CASE("an include of a device or a huge file is an error at the include, read no further than 16 MiB") {
  TempDir dir;
  const std::string a = dir.write("a.toml", "algorithm = \"sft\"\ninclude = \"/dev/zero\"\n");
  Diagnostics diagnostics;
  CHECK_FALSE(load_recipe(a, {}, diagnostics));
  auto d = FIND_DIAGNOSTIC(diagnostics, "schema.include", 2, 11);
  REQUIRE(d);
  CHECK(d->message == "recipe file \"/dev/zero\" is larger than 16 MiB: not a recipe");
  CHECK(diagnostics.error_count() == 1);
}

TEST_CASE("read_bounded: whole files up to the bound, never more") {
  TempDir dir;
  const std::string small = dir.write("small.txt", "hello");
  BoundedText read = read_bounded(small, 5);
  CHECK(read.ok());
  CHECK(read.text == "hello");
  read = read_bounded(small, 4);
  CHECK(read.status == BoundedText::Status::too_large);
  CHECK(read.text.empty());
  CHECK(read.problem(4u << 20) == "is larger than 4 MiB");
  CHECK(read_bounded(dir.path().string(), 100).status == BoundedText::Status::unreadable);
  CHECK(read_bounded((dir.path() / "missing").string(), 100).status == BoundedText::Status::unreadable);
  // An endless source stops after the bound.
  CHECK(read_bounded("/dev/zero", 3u << 20).status == BoundedText::Status::too_large);
  const std::string empty = dir.write("empty.txt", "");
  CHECK(read_bounded(empty, 0).ok());
}

TEST_CASE("the same base included twice, not in a cycle, is fine") {
  TempDir dir;
  dir.write("base.toml", "algorithm = \"sft\"\n");
  dir.write("x.toml", "include = \"base.toml\"\nseed = 5\n");
  const std::string top = dir.write("top.toml", "include = [\"base.toml\", \"x.toml\"]\n");
  Diagnostics diagnostics;
  auto recipe = load_recipe(top, {}, diagnostics);
  CHECK_NO_ERRORS(diagnostics);
  REQUIRE(recipe);
  CHECK(recipe->seed == 5);
}

TEST_CASE("a missing include is reported at the include's value") {
  TempDir dir;
  const std::string top = dir.write("top.toml", R"(algorithm = "sft"
include = ["exists.toml",
           "missing.toml"]
)");
  dir.write("exists.toml", "seed = 1\n");
  Diagnostics diagnostics;
  CHECK_FALSE(load_recipe(top, {}, diagnostics));
  auto d = FIND_DIAGNOSTIC(diagnostics, "schema.include", 3, 12);
  REQUIRE(d);
  CHECK(d->where.file == top);
  CHECK(d->message == "cannot read recipe file \"" + (dir / "missing.toml") + "\"");
  CHECK(diagnostics.error_count() == 1);
}

TEST_CASE("include must name files") {
  auto loaded = load_text("algorithm = \"sft\"\ninclude = [\"a.toml\", 3]\n");
  CHECK_FALSE(loaded.recipe);
  auto d = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.type", 2, 22);
  REQUIRE(d);
  CHECK(d->message == "include must be a file name or a list of them, got integer 3");
}

TEST_CASE("errors inside an included file are located in that file") {
  TempDir dir;
  const std::string base = dir.write("base.toml", "[launch]\nnodes = 0\n");
  const std::string top = dir.write("top.toml", "algorithm = \"sft\"\ninclude = \"base.toml\"\n");
  Diagnostics diagnostics;
  CHECK_FALSE(load_recipe(top, {}, diagnostics));
  auto d = FIND_DIAGNOSTIC(diagnostics, "schema.range", 2, 9);
  REQUIRE(d);
  CHECK(d->where.file == base);

  SUBCASE("and so is a syntax error") {
    dir.write("base.toml", "[launch]\nnodes = \n");
    Diagnostics syntax;
    CHECK_FALSE(load_recipe(top, {}, syntax));
    auto s = FIND_DIAGNOSTIC(syntax, "schema.syntax", 2, 9);
    REQUIRE(s);
    CHECK(s->where.file == base);
  }
}

TEST_CASE("--set overrides take TOML values, bare words being strings") {
  auto loaded = load_text("algorithm = \"ppo\"\n[roles.actor]\nmodel = \"m\"\n",
                          {"launch.nodes=2", "launch.timeout_minutes=2.5", "colocate.all=true",
                           "roles.actor.model=builtin:tiny", "data.input_key=\"prompt text\"",
                           "colocate.groups=[[\"actor\", \"ref\"]]", "launch.type = slurm",
                           "roles.ref.zero_stage=2"});
  auto& d = loaded.diagnostics;
  CHECK_NO_ERRORS(d);
  REQUIRE(loaded.recipe);
  const Recipe& r = *loaded.recipe;
  CHECK(r.launch.nodes == 2);
  CHECK(r.launch.timeout_minutes == 2.5);
  CHECK(r.colocate.all);
  CHECK(r.role(Role::actor)->model == "builtin:tiny");
  CHECK(r.data.input_key == "prompt text");
  CHECK(r.colocate.group_names == std::vector<std::vector<std::string>>{{"actor", "ref"}});
  CHECK(r.colocate.groups == std::vector<std::vector<Role>>{{Role::actor, Role::ref}});  // resolved once
  CHECK(r.launch.type == "slurm");
  // An override creates the role it names.
  REQUIRE(r.role(Role::ref));
  CHECK(r.role(Role::ref)->zero_stage == 2);
  CHECK(r.where("roles.ref") == SourceLocation{"--set[8]", 1, 7});
  // Overrides are located at --set[N], at the last part of the key.
  CHECK(r.where("launch.nodes") == SourceLocation{"--set[1]", 1, 8});
  CHECK(r.where("roles.actor.model") == SourceLocation{"--set[4]", 1, 13});
  CHECK(r.where("roles.actor.dtype") == SourceLocation{"recipe.toml", 2, 8});
}

TEST_CASE("--set overrides a key from an include, and later overrides win") {
  TempDir dir;
  dir.write("base.toml", "algorithm = \"sft\"\n[launch]\nnodes = 4\nprocs_per_node = 2\n");
  const std::string top = dir.write("top.toml", "include = \"base.toml\"\n[launch]\nprocs_per_node = 3\n");
  Diagnostics diagnostics;
  auto recipe = load_recipe(top, sets({"launch.nodes=2", "launch.procs_per_node=5", "launch.nodes=1"}), diagnostics);
  CHECK_NO_ERRORS(diagnostics);
  REQUIRE(recipe);
  CHECK(recipe->launch.nodes == 1);
  CHECK(recipe->launch.procs_per_node == 5);
  CHECK(recipe->where("launch.nodes").file == "--set[3]");
  CHECK(recipe->where("launch.procs_per_node").file == "--set[2]");
}

TEST_CASE("a --set relative path is relative to the working directory") {
  auto loaded = load_text("algorithm = \"sft\"\n", {"hooks.script=hooks/r.lua", "data.path=./p.jsonl"},
                          "/recipes/r.toml");
  REQUIRE(loaded.recipe);
  CHECK(loaded.recipe->hooks.script == "hooks/r.lua");
  CHECK(loaded.recipe->data.path == "p.jsonl");
}

TEST_CASE("a --set without '=' or with a malformed key is schema.override at --set[N]") {
  auto loaded = load_text("algorithm = \"sft\"\n", {"launch.nodes=2", "foo", "bad key=1", "=3"});
  CHECK_FALSE(loaded.recipe);
  auto& d = loaded.diagnostics;
  CHECK(d.error_count() == 3);
  auto foo = test::with_rule(d, "schema.override");
  REQUIRE(foo.size() == 3);
  CHECK(foo[0].where == SourceLocation{"--set[2]", 1, 1});
  CHECK(foo[0].message == "override \"foo\" is not of the form section.key=value");
  CHECK(foo[0].suggestion == "e.g. --set launch.nodes=2 or --set roles.actor.model=builtin:tiny");
  CHECK(foo[1].where == SourceLocation{"--set[3]", 1, 1});
  CHECK(foo[2].where == SourceLocation{"--set[4]", 1, 1});
}

TEST_CASE("include cannot be overridden with --set") {
  auto loaded = load_text("algorithm = \"sft\"\n", {"include=base.toml"});
  CHECK_FALSE(loaded.recipe);
  auto include = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.override", 1, 1);
  REQUIRE(include);
  CHECK(include->where.file == "--set[1]");
  CHECK(include->message == "include cannot be overridden: it decides which files are read");
}

TEST_CASE("a --set value is checked like the file, located in its argument") {
  auto loaded = load_text("algorithm = \"sft\"\n",
                          {"launch.nodes=2", "launch.nodes=two", "launch.nodez=2", "launch.device=gpu"});
  CHECK_FALSE(loaded.recipe);
  auto& d = loaded.diagnostics;
  // "launch.nodes=two": the value starts at column 14.
  auto type = test::with_rule(d, "schema.type");
  REQUIRE(type.size() == 1);
  CHECK(type[0].where == SourceLocation{"--set[2]", 1, 14});
  CHECK(type[0].message == "launch.nodes must be an integer, got string \"two\"");
  auto unknown = test::with_rule(d, "schema.unknown-key");
  REQUIRE(unknown.size() == 1);
  CHECK(unknown[0].where == SourceLocation{"--set[3]", 1, 8});
  CHECK(unknown[0].suggestion == "did you mean \"nodes\"?");
  auto choice = test::with_rule(d, "schema.choice");
  REQUIRE(choice.size() == 1);
  CHECK(choice[0].where == SourceLocation{"--set[4]", 1, 15});
  CHECK(d.error_count() == 3);
}

TEST_CASE("every error of a recipe comes in one run, sorted by position") {
  const char* text = R"(algorithm = "ppo"
seed = -3
[launch]
device = "tpu"
nodes = 0
[roles.actor]
modle = "m"
dtype = 16
[rollout]
top_p = 0
[lanch]
)";
  auto loaded = load_text(text, {"launch.procs_per_node=x"});
  CHECK_FALSE(loaded.recipe);
  const auto sorted = loaded.diagnostics.sorted();
  std::vector<std::string> where;
  for (const auto& d : sorted) where.push_back(d.where.str() + " " + d.rule);
  CHECK(where == std::vector<std::string>{
                     "--set[1]:1:23 schema.type",
                     "recipe.toml:2:8 schema.range",
                     "recipe.toml:4:10 schema.choice",
                     "recipe.toml:5:9 schema.range",
                     "recipe.toml:7:1 schema.unknown-key",
                     "recipe.toml:8:9 schema.type",
                     "recipe.toml:10:9 schema.range",
                     "recipe.toml:11:2 schema.unknown-key",
                 });
  // format() is the same order, one line per diagnostic plus help lines.
  const std::string formatted = loaded.diagnostics.format();
  size_t last = 0;
  for (const auto& d : sorted) {
    size_t at = formatted.find(d.where.str() + ": error: " + d.message);
    REQUIRE(at != std::string::npos);
    CHECK(at >= last);
    last = at;
  }
}


TEST_CASE("a --set key of 30000 characters is an override error, not a stack overflow") {
  const std::string long_key(30000, 'a');
  auto loaded = load_text("algorithm = \"sft\"\n", {long_key + "=1"});
  const auto errors = test::with_rule(loaded.diagnostics, "schema.override");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].message.ends_with("… (30002 bytes)\" is not of the form section.key=value"));
  CHECK_FALSE(loaded.recipe);
  // Malformed keys still fail by their form; a well-formed long one by its length.
  for (const char* key : {"a..b", ".a", "a.", "a b", "a.b!", "launch.nodes.", ""}) {
    INFO("key \"" << key << "\"");
    CHECK(has_rule(load_text("algorithm = \"sft\"\n", {std::string(key) + "=1"}).diagnostics, "schema.override"));
  }
  auto fine = load_text("algorithm = \"sft\"\n", {" launch.nodes = 2", "roles.actor.model=builtin:tiny"});
  CHECK_NO_ERRORS(fine.diagnostics);
}

TEST_CASE("includes that double at every level stop at 64 files, at the include past them") {
  TempDir dir;
  // e0 includes e1 twice, e1 includes e2 twice, ...: 2^42 reads unbounded.
  for (int i = 0; i < 42; ++i) {
    const std::string next = "e" + std::to_string(i + 1) + ".toml";
    dir.write("e" + std::to_string(i) + ".toml", "include = [\"" + next + "\", \"" + next + "\"]\n");
  }
  dir.write("e42.toml", "algorithm = \"sft\"\n");
  const auto start = std::chrono::steady_clock::now();
  Diagnostics diagnostics;
  auto recipe = load_recipe(dir / "e0.toml", {}, diagnostics);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_FALSE(recipe);
  const auto errors = test::with_rule(diagnostics, "schema.include");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].message.find("more than 64 recipe files") != std::string::npos);
  CHECK(errors[0].where.line == 1);
}

TEST_CASE("a base included twice is applied at each place it is named, parsed once") {
  TempDir dir;
  dir.write("base.toml", "algorithm = \"sft\"\nseed = 1\n");
  dir.write("x.toml", "include = \"base.toml\"\nseed = 5\n");
  dir.write("y.toml", "include = \"base.toml\"\n");
  // x sets 5, then y applies base's 1 again after it: the last entry wins.
  const std::string top = dir.write("top.toml", "include = [\"x.toml\", \"y.toml\"]\n");
  Diagnostics diagnostics;
  auto recipe = load_recipe(top, {}, diagnostics);
  CHECK_NO_ERRORS(diagnostics);
  REQUIRE(recipe);
  CHECK(recipe->seed == 1);
  CHECK(recipe->included_files.size() == 5);
}

}  // namespace
}  // namespace meshrun
