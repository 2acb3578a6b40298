// Tests of src/recipe/schema_check.cpp: types, ranges, choices, unknown keys
// and tables with suggestions, tables where values belong (and the reverse),
// and the resolution of relative paths.
#include <doctest/doctest.h>

#include <cstdlib>

#include "src/recipe/schema_check.hpp"
#include "diagnostic_matchers.hpp"

namespace meshrun {
namespace {

using test::load_text;

TEST_CASE("a value of the wrong type is a schema.type error at the value") {
  auto loaded = load_text(R"(algorithm = "sft"
seed = "forty-two"
[launch]
procs_per_node = 2.5
device = 1
timeout_minutes = "soon"
[colocate]
all = "yes"
groups = ["actor", "ref"]
[roles.actor]
learning_rate = nan
)");
  CHECK_FALSE(loaded.recipe);
  auto& d = loaded.diagnostics;
  auto seed = FIND_DIAGNOSTIC(d, "schema.type", 2, 8);
  REQUIRE(seed);
  CHECK(seed->message == "seed must be an integer, got string \"forty-two\"");
  auto procs = FIND_DIAGNOSTIC(d, "schema.type", 4, 18);
  REQUIRE(procs);
  CHECK(procs->message == "launch.procs_per_node must be an integer, got float 2.5");
  auto device = FIND_DIAGNOSTIC(d, "schema.type", 5, 10);
  REQUIRE(device);
  CHECK(device->message == "launch.device must be a string, got integer 1");
  auto timeout = FIND_DIAGNOSTIC(d, "schema.type", 6, 19);
  REQUIRE(timeout);
  CHECK(timeout->message == "launch.timeout_minutes must be a number, got string \"soon\"");
  auto all = FIND_DIAGNOSTIC(d, "schema.type", 8, 7);
  REQUIRE(all);
  CHECK(all->message == "colocate.all must be a boolean, got string \"yes\"");
  auto groups = FIND_DIAGNOSTIC(d, "schema.type", 9, 10);
  REQUIRE(groups);
  CHECK(groups->message ==
        "colocate.groups must be an array of arrays of strings, got array containing string \"actor\"");
  auto rate = FIND_DIAGNOSTIC(d, "schema.type", 11, 17);
  REQUIRE(rate);
  CHECK(rate->message == "roles.actor.learning_rate must be a number, got float nan (not finite)");
  CHECK(d.error_count() == 7);
}

TEST_CASE("data.chat_template_kwargs is a free-form table, stored as canonical JSON") {
  const std::string expected = R"({"enable_thinking":false,"n":3,"opts":{"list":[1,2.5,"x"]}})";
  auto inline_form = load_text("algorithm = \"sft\"\n[data]\nchat_template_kwargs = { enable_thinking = false, "
                               "n = 3, opts = { list = [1, 2.5, \"x\"] } }\n");
  REQUIRE(inline_form.recipe);
  CHECK(inline_form.recipe->data.chat_template_kwargs == expected);
  auto section_form = load_text("algorithm = \"sft\"\n[data.chat_template_kwargs]\nenable_thinking = false\nn = 3\n"
                                "[data.chat_template_kwargs.opts]\nlist = [1, 2.5, \"x\"]\n");
  REQUIRE(section_form.recipe);
  CHECK(section_form.recipe->data.chat_template_kwargs == expected);
  auto set = load_text("algorithm = \"sft\"\n", {"data.chat_template_kwargs={enable_thinking=false}"});
  REQUIRE(set.recipe);
  CHECK(set.recipe->data.chat_template_kwargs == R"({"enable_thinking":false})");
  CHECK(load_text("algorithm = \"sft\"\n").recipe->data.chat_template_kwargs.empty());
}

TEST_CASE("data.chat_template_kwargs refuses non-tables, dates, reserved names and deep nesting, located") {
  auto loaded = load_text(R"(algorithm = "sft"
[data]
chat_template_kwargs = { when = 2024-01-01, ok = true, messages = [], bos_token = "x" }
)");
  CHECK_FALSE(loaded.recipe);
  auto date = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.type", 3, 33);
  REQUIRE(date);
  CHECK(date->message == "data.chat_template_kwargs values must be booleans, numbers, strings, arrays or tables, got date");
  auto messages = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.reserved", 3, 56);
  REQUIRE(messages);
  CHECK(messages->message ==
        "data.chat_template_kwargs.messages is set by the chat template renderer itself and cannot be given here");
  CHECK(FIND_DIAGNOSTIC(loaded.diagnostics, "schema.reserved", 3, 71));

  auto scalar = load_text("algorithm = \"sft\"\n[data]\nchat_template_kwargs = true\n");
  CHECK_FALSE(scalar.recipe);
  auto type = FIND_DIAGNOSTIC(scalar.diagnostics, "schema.type", 3, 24);
  REQUIRE(type);
  CHECK(type->message == "data.chat_template_kwargs must be a table, got true");

  std::string deep = "algorithm = \"sft\"\n[data]\nchat_template_kwargs = { a = ";
  for (int i = 0; i < 20; ++i) deep += "[";
  for (int i = 0; i < 20; ++i) deep += "]";
  auto nested = load_text(deep + " }\n");
  CHECK_FALSE(nested.recipe);
  bool too_deep = false;
  for (const auto& d : nested.diagnostics.items())
    too_deep = too_deep || d.message == "data.chat_template_kwargs nests more than 16 levels deep";
  CHECK(too_deep);
}

TEST_CASE("integers are accepted where numbers are expected, not the reverse") {
  auto loaded = load_text(R"(algorithm = "sft"
[launch]
timeout_minutes = 3
memory_gb = 24
)");
  CHECK_NO_ERRORS(loaded.diagnostics);
  REQUIRE(loaded.recipe);
  CHECK(loaded.recipe->launch.timeout_minutes == 3.0);
  CHECK(loaded.recipe->launch.memory_gb == 24.0);
}

TEST_CASE("arrays must hold strings") {
  auto loaded = load_text(R"(algorithm = "sft"
[colocate]
groups = [["actor", 2]]
)");
  auto d = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.type", 3, 10);
  REQUIRE(d);
  CHECK(d->message == "colocate.groups must be an array of arrays of strings, got array containing integer 2");
}

TEST_CASE("an integer beyond its field's int is a schema.range error, not a wrapped value") {
  // Found by fuzz/recipe_fuzz.cpp (fuzz/regressions/recipe/nodes-wraps-int):
  // nodes = 16666666666 was stored as -1026405036 and the rules overflowed.
  auto loaded = load_text(R"(algorithm = "sft"
[launch]
nodes = 16666666666
[roles.actor]
lora_rank = 2147483648
)");
  CHECK_FALSE(loaded.recipe);
  auto nodes = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.range", 3, 9);
  REQUIRE(nodes);
  CHECK(nodes->message == "launch.nodes must be ≥ 1 and ≤ 2147483647, got 16666666666");
  auto rank = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.range", 5, 13);
  REQUIRE(rank);
  CHECK(rank->message == "roles.actor.lora_rank must be ≥ 0 and ≤ 2147483647, got 2147483648");
  // 64-bit keys keep their whole range.
  CHECK(load_text("algorithm = \"sft\"\n[train]\nmax_steps = 9223372036854775807\n").recipe);
  // A large integer out of the documented range is shown as written.
  auto negative = load_text("algorithm = \"sft\"\n[launch]\nnodes = -4294967296\n");
  auto shown = FIND_DIAGNOSTIC(negative.diagnostics, "schema.range", 3, 9);
  REQUIRE(shown);
  CHECK(shown->message == "launch.nodes must be ≥ 1, got -4294967296");
}

TEST_CASE("a huge restart delay or bucket size is a schema.range error, not an overflowing cast") {
  auto loaded = load_text("algorithm = \"sft\"\n[launch]\nrestart_delay = 1e308\n[train]\nbucket_mb = 1e308\n");
  CHECK_FALSE(loaded.recipe);
  auto delay = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.range", 3, 17);
  REQUIRE(delay);
  CHECK(delay->message == "launch.restart_delay must be ≥ 0 and ≤ 86400, got 1e+308");
  CHECK(FIND_DIAGNOSTIC(loaded.diagnostics, "schema.range", 5, 13));
}

TEST_CASE("numbers out of range are schema.range errors naming the bounds") {
  auto loaded = load_text(R"(algorithm = "sft"
[launch]
nodes = 0
master_port = 70000
timeout_minutes = 0
[mesh]
dp = -2
[rollout]
top_p = 1.5
top_k = 0
[roles.actor]
zero_stage = 4
[hooks]
instruction_limit = 999
)");
  CHECK_FALSE(loaded.recipe);
  auto& d = loaded.diagnostics;
  auto nodes = FIND_DIAGNOSTIC(d, "schema.range", 3, 9);
  REQUIRE(nodes);
  CHECK(nodes->message == "launch.nodes must be ≥ 1, got 0");
  auto port = FIND_DIAGNOSTIC(d, "schema.range", 4, 15);
  REQUIRE(port);
  CHECK(port->message == "launch.master_port must be ≥ 1 and ≤ 65535, got 70000");
  auto timeout = FIND_DIAGNOSTIC(d, "schema.range", 5, 19);
  REQUIRE(timeout);
  CHECK(timeout->message == "launch.timeout_minutes must be ≥ 0.01 and ≤ 10080, got 0");
  auto dp = FIND_DIAGNOSTIC(d, "schema.range", 7, 6);
  REQUIRE(dp);
  CHECK(dp->message == "mesh.dp must be ≥ 1 or -1, got -2");
  auto top_p = FIND_DIAGNOSTIC(d, "schema.range", 9, 9);
  REQUIRE(top_p);
  CHECK(top_p->message == "rollout.top_p must be > 0 and ≤ 1, got 1.5");
  CHECK_DIAGNOSTIC(d, "schema.range", 10, 9);
  auto zero = FIND_DIAGNOSTIC(d, "schema.range", 12, 14);
  REQUIRE(zero);
  CHECK(zero->message == "roles.actor.zero_stage must be ≥ 0 and ≤ 3, got 4");
  CHECK_DIAGNOSTIC(d, "schema.range", 14, 21);
  CHECK(d.error_count() == 8);
}

TEST_CASE("range bounds are inclusive unless exclusive, and extra values are allowed") {
  auto loaded = load_text(R"(algorithm = "sft"
[launch]
nodes = 1
master_port = 65535
max_restarts = 0
[mesh]
dp = -1
[rollout]
top_p = 1.0
top_k = -1
memory_utilization = 1
[roles.actor]
zero_stage = 3
[hooks]
instruction_limit = 1000
)");
  CHECK_NO_ERRORS(loaded.diagnostics);
}

TEST_CASE("a string outside the choices is schema.choice, with a suggestion when one is close") {
  auto loaded = load_text(R"(algorithm = "sfft"
[launch]
backend = "ncl"
type = "kubernetes"
[roles.actor]
dtype = "bf61"
[ppo]
advantage = "GAE"
)");
  CHECK_FALSE(loaded.recipe);
  auto& d = loaded.diagnostics;
  auto algorithm = FIND_DIAGNOSTIC(d, "schema.choice", 1, 13);
  REQUIRE(algorithm);
  CHECK(algorithm->message == "algorithm must be one of \"sft\", \"ppo\", \"dpo\", \"rm\", got \"sfft\"");
  CHECK(algorithm->suggestion == "did you mean \"sft\"?");
  auto backend = FIND_DIAGNOSTIC(d, "schema.choice", 3, 11);
  REQUIRE(backend);
  CHECK(backend->suggestion == "did you mean \"nccl\"?");
  auto type = FIND_DIAGNOSTIC(d, "schema.choice", 4, 8);
  REQUIRE(type);
  CHECK(type->message ==
        "launch.type must be one of \"local\", \"ray\", \"torchrun\", \"horovod\", \"slurm\", \"mpi\", "
        "\"auto\", got \"kubernetes\"");
  CHECK(type->suggestion.empty());
  auto dtype = FIND_DIAGNOSTIC(d, "schema.choice", 6, 9);
  REQUIRE(dtype);
  CHECK(dtype->suggestion == "did you mean \"bf16\"?");
  // Choices are case-sensitive; the suggestion shows the right case.
  auto advantage = FIND_DIAGNOSTIC(d, "schema.choice", 8, 13);
  REQUIRE(advantage);
  CHECK(advantage->suggestion == "did you mean \"gae\"?");
  // The invalid algorithm is reported once, not also as missing.
  CHECK_NO_DIAGNOSTIC(d, "schema.required");
}

TEST_CASE("a synonym of a choice suggests the value it means") {
  // "gpu" is closer to "cpu" by spelling, but a user writing it means cuda.
  auto loaded = load_text(R"(algorithm = "sft"
[launch]
device = "gpu"
)");
  auto device = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.choice", 3, 10);
  REQUIRE(device);
  CHECK(device->suggestion == "did you mean \"cuda\"?");
}

TEST_CASE("an unknown key is schema.unknown-key at the key, with a suggestion from its table") {
  auto loaded = load_text(R"(algoritm = "sft"
[launch]
nodse = 2
[roles.critic]
modle = "m"
[roles.actor.mesh]
tq = 2
[mesh]
pp = 2
)");
  auto& d = loaded.diagnostics;
  auto top = FIND_DIAGNOSTIC(d, "schema.unknown-key", 1, 1);
  REQUIRE(top);
  CHECK(top->message == "unknown key \"algoritm\" in the top level");
  CHECK(top->suggestion == "did you mean \"algorithm\"?");
  auto nodes = FIND_DIAGNOSTIC(d, "schema.unknown-key", 3, 1);
  REQUIRE(nodes);
  CHECK(nodes->message == "unknown key \"nodse\" in [launch]");
  CHECK(nodes->suggestion == "did you mean \"nodes\"?");
  auto model = FIND_DIAGNOSTIC(d, "schema.unknown-key", 5, 1);
  REQUIRE(model);
  CHECK(model->message == "unknown key \"modle\" in [roles.critic]");
  CHECK(model->suggestion == "did you mean \"model\"?");
  auto tq = FIND_DIAGNOSTIC(d, "schema.unknown-key", 7, 1);
  REQUIRE(tq);
  CHECK(tq->message == "unknown key \"tq\" in [roles.actor.mesh]");
  // Two letters are too short to guess from: no "did you mean" for pp.
  auto pp = FIND_DIAGNOSTIC(d, "schema.unknown-key", 9, 1);
  REQUIRE(pp);
  CHECK(pp->message == "unknown key \"pp\" in [mesh]");
  CHECK(pp->suggestion.empty());
}

TEST_CASE("the right key in the wrong table says where it belongs") {
  auto loaded = load_text(R"(algorithm = "sft"
[launch]
tp = 2
[batch]
engines = 2
[roles.actor]
advantage = "gae"
)");
  auto& d = loaded.diagnostics;
  auto tp = FIND_DIAGNOSTIC(d, "schema.unknown-key", 3, 1);
  REQUIRE(tp);
  CHECK(tp->message == "unknown key \"tp\" in [launch]");
  CHECK(tp->suggestion == "\"tp\" is a key of [mesh]");
  auto engines = FIND_DIAGNOSTIC(d, "schema.unknown-key", 5, 1);
  REQUIRE(engines);
  CHECK(engines->suggestion == "\"engines\" is a key of [rollout]");
  auto advantage = FIND_DIAGNOSTIC(d, "schema.unknown-key", 7, 1);
  REQUIRE(advantage);
  CHECK(advantage->suggestion == "\"advantage\" is a key of [ppo]");
}

TEST_CASE("unknown tables are reported once, at the table name, and their keys not again") {
  auto loaded = load_text(R"(algorithm = "sft"
[lanch]
nodes = 2
[roles.actr]
model = "m"
[roles.actr.mesh]
tp = 2
[optimizer]
lr = 1
)");
  auto& d = loaded.diagnostics;
  auto launch = FIND_DIAGNOSTIC(d, "schema.unknown-key", 2, 2);
  REQUIRE(launch);
  CHECK(launch->message == "unknown table [lanch]");
  CHECK(launch->suggestion == "did you mean \"launch\"?");
  auto role = FIND_DIAGNOSTIC(d, "schema.unknown-key", 4, 8);
  REQUIRE(role);
  CHECK(role->message == "unknown table [roles.actr]");
  CHECK(role->suggestion == "did you mean \"actor\"?");
  auto optimizer = FIND_DIAGNOSTIC(d, "schema.unknown-key", 8, 2);
  REQUIRE(optimizer);
  CHECK(optimizer->message == "unknown table [optimizer]");
  CHECK(optimizer->suggestion.empty());
  CHECK(d.error_count() == 3);
}

TEST_CASE("a table where a value belongs, and a value where a table belongs") {
  SUBCASE("[launch.nodes] is a table header for an integer key") {
    auto loaded = load_text(R"(algorithm = "sft"
[launch.nodes]
count = 2
)");
    auto d = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.type", 2, 9);
    REQUIRE(d);
    CHECK(d->message == "launch.nodes must be an integer, got a table");
    CHECK(loaded.diagnostics.error_count() == 1);  // count is not reported as unknown
  }
  SUBCASE("an inline table for an integer key") {
    auto loaded = load_text("algorithm = \"sft\"\n[batch]\nrollout = { n = 1 }\n");
    auto d = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.type", 3, 1);
    REQUIRE(d);
    CHECK(d->message == "batch.rollout must be an integer, got a table");
  }
  SUBCASE("a value for a section") {
    auto loaded = load_text("algorithm = \"sft\"\nlaunch = 3\n");
    auto d = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.type", 2, 10);
    REQUIRE(d);
    CHECK(d->message == "[launch] is a table, got integer 3");
  }
  SUBCASE("a value for [roles] and for a role") {
    auto loaded = load_text("algorithm = \"sft\"\nroles = \"actor\"\n");
    auto d = FIND_DIAGNOSTIC(loaded.diagnostics, "schema.type", 2, 9);
    REQUIRE(d);
    CHECK(d->message == "[roles] is a table, got string \"actor\"");
    auto role = load_text("algorithm = \"sft\"\n[roles]\nactor = \"m\"\n");
    auto r = FIND_DIAGNOSTIC(role.diagnostics, "schema.type", 3, 9);
    REQUIRE(r);
    CHECK(r->message == "[roles.actor] is a table, got string \"m\"");
  }
}

TEST_CASE("every schema problem of a file is reported, and no recipe is returned") {
  auto loaded = load_text(R"(algorithm = "sft"
seed = -1
[launch]
nodes = "two"
colour = "blue"
[lanch]
)");
  CHECK_FALSE(loaded.recipe);
  CHECK(loaded.diagnostics.error_count() == 4);
  CHECK_DIAGNOSTIC(loaded.diagnostics, "schema.range", 2, 8);
  CHECK_DIAGNOSTIC(loaded.diagnostics, "schema.type", 4, 9);
  CHECK_DIAGNOSTIC(loaded.diagnostics, "schema.unknown-key", 5, 1);
  CHECK_DIAGNOSTIC(loaded.diagnostics, "schema.unknown-key", 6, 2);
}

TEST_CASE("SchemaChecker::check_entry converts values to the key's type") {
  FlatDocument document;
  Diagnostics diagnostics;
  REQUIRE(flatten_toml("seed = 3\n[launch]\nmemory_gb = 2\n[colocate]\ngroups = [[\"actor\", \"ref\"]]\n",
                       "r.toml", "/base", document, diagnostics));
  SchemaChecker checker(recipe_schema(), diagnostics);
  checker.check_tables(document);
  std::map<std::string, Value> values;
  for (const auto& entry : document.entries)
    if (auto value = checker.check_entry(entry)) values[entry.key] = *value;
  CHECK(diagnostics.empty());
  REQUIRE(values.size() == 3);
  CHECK(std::get<long long>(values["seed"]) == 3);
  CHECK(std::get<double>(values["launch.memory_gb"]) == 2.0);
  CHECK(std::get<std::vector<std::vector<std::string>>>(values["colocate.groups"]) ==
        std::vector<std::vector<std::string>>{{"actor", "ref"}});
}

TEST_CASE("resolve_recipe_path: file paths always resolve against the defining file's folder") {
  CHECK(resolve_recipe_path("hooks.lua", "/r/dir", PathKind::file) == "/r/dir/hooks.lua");
  CHECK(resolve_recipe_path("../x/./y.lua", "/r/dir", PathKind::file) == "/r/x/y.lua");
  CHECK(resolve_recipe_path("/abs//p/../q", "/r/dir", PathKind::file) == "/abs/q");
  CHECK(resolve_recipe_path("out", "recipes", PathKind::file) == "recipes/out");
  CHECK(resolve_recipe_path("out", "", PathKind::file) == "out");  // --set: the working directory
  CHECK(resolve_recipe_path("", "/r/dir", PathKind::file) == "");
  CHECK(resolve_recipe_path("hooks.lua", "/r/dir", PathKind::none) == "hooks.lua");

  SUBCASE("~/ is the home folder") {
    const char* home = std::getenv("HOME");
    if (home && *home) {
      CHECK(resolve_recipe_path("~/ck", "/r/dir", PathKind::file) ==
            (std::filesystem::path(home) / "ck").lexically_normal().string());
    }
  }
}

TEST_CASE("resolve_recipe_path: references resolve when they look like paths or exist") {
  test::TempDir dir;
  dir.write("models/llama/config.json", "{}");
  const std::string base = dir.path().string();

  CHECK(resolve_recipe_path("./m", "/r/dir", PathKind::reference) == "/r/dir/m");
  CHECK(resolve_recipe_path("../m", "/r/dir", PathKind::reference) == "/r/m");
  CHECK(resolve_recipe_path("/models/m", "/r/dir", PathKind::reference) == "/models/m");
  CHECK(resolve_recipe_path("data/train.jsonl", "/r/dir", PathKind::reference) == "/r/dir/data/train.jsonl");
  CHECK(resolve_recipe_path("prompts.json", "/r/dir", PathKind::reference) == "/r/dir/prompts.json");
  // Names stay names.
  CHECK(resolve_recipe_path("builtin:tiny", "/r/dir", PathKind::reference) == "builtin:tiny");
  CHECK(resolve_recipe_path("meta-llama/Llama-2-7b-hf", base, PathKind::reference) == "meta-llama/Llama-2-7b-hf");
  // An existing folder beside the recipe is a path.
  CHECK(resolve_recipe_path("models/llama", base, PathKind::reference) == base + "/models/llama");
}

TEST_CASE("the loader resolves relative paths against the folder of the file that sets them") {
  test::TempDir dir;
  dir.write("sub/model/config.json", "{}");
  const std::string file = dir.write("sub/r.toml", R"(algorithm = "sft"
[roles.actor]
model = "model"
[roles.ref]
model = "Qwen/Qwen2.5-7B"
[hooks]
script = "hooks/reward.lua"
[data]
path = "../data/train.jsonl"
[checkpoint]
path = "/abs/ck"
output = "out"
[logging]
dir = "./logs"
)");
  Diagnostics diagnostics;
  auto recipe = load_recipe(file, {}, diagnostics);
  CHECK_NO_ERRORS(diagnostics);
  REQUIRE(recipe);
  const std::string sub = (dir.path() / "sub").string();
  CHECK(recipe->role(Role::actor)->model == sub + "/model");
  CHECK(recipe->role(Role::ref)->model == "Qwen/Qwen2.5-7B");
  CHECK(recipe->hooks.script == sub + "/hooks/reward.lua");
  CHECK(recipe->data.path == dir.path().string() + "/data/train.jsonl");
  CHECK(recipe->checkpoint.path == "/abs/ck");
  CHECK(recipe->checkpoint.output == sub + "/out");
  CHECK(recipe->logging.dir == sub + "/logs");
}


TEST_CASE("numbers the run cannot use are schema.range errors at lint") {
  struct Case {
    const char* set;
    const char* message;
  };
  const Case cases[] = {
      {"launch.timeout_minutes=1e9", "launch.timeout_minutes must be ≥ 0.01 and ≤ 10080, got 1e+09"},
      {"launch.timeout_minutes=1e15", "launch.timeout_minutes must be ≥ 0.01 and ≤ 10080, got 1e+15"},
      {"launch.timeout_minutes=1e-300", "launch.timeout_minutes must be ≥ 0.01 and ≤ 10080, got 1e-300"},
      {"launch.memory_gb=1e10", "launch.memory_gb must be ≥ 0 and ≤ 1.04858e+06, got 1e+10"},
      {"data.max_len=1", "data.max_len must be ≥ 2, got 1"},
      {"checkpoint.max_size_gb=1e300", "checkpoint.max_size_gb must be ≥ 0 and ≤ 1e+09, got 1e+300"},
  };
  for (const Case& c : cases) {
    INFO(c.set);
    auto loaded = load_text("algorithm = \"sft\"\n", {c.set});
    CHECK_FALSE(loaded.recipe);
    const auto errors = test::with_rule(loaded.diagnostics, "schema.range");
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].message == c.message);
    CHECK(errors[0].where.file == "--set[1]");
  }
  auto fine = load_text("algorithm = \"sft\"\n",
                        {"launch.timeout_minutes=10080", "launch.timeout_minutes=0.01", "launch.memory_gb=1048576",
                         "data.max_len=2"});
  CHECK_NO_ERRORS(fine.diagnostics);
}

TEST_CASE("an unknown table under which keys nest deep is reported once, its keys not again") {
  std::string key = "x";
  for (int i = 0; i < 30; ++i) key += ".y";
  auto loaded = load_text("algorithm = \"sft\"\n[x]\n" + key.substr(2) + " = 1\n");
  CHECK(test::with_rule(loaded.diagnostics, "schema.unknown-key").size() == 1);
}

}  // namespace
}  // namespace meshrun

TEST_CASE("looks_like_path: the one rule for a value that names a file before it exists") {
  using meshrun::looks_like_path;
  CHECK(looks_like_path("/data/train.txt"));
  CHECK(looks_like_path("./prompts"));
  CHECK(looks_like_path("../prompts"));
  CHECK(looks_like_path("train.jsonl"));
  CHECK(looks_like_path("eval.json"));
  CHECK_FALSE(looks_like_path("Qwen/Qwen2.5-0.5B"));
  CHECK_FALSE(looks_like_path("builtin:tiny"));
  CHECK_FALSE(looks_like_path("data"));
}
