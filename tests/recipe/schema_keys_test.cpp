// Tests of src/recipe/schema_keys.cpp: every key is bound to the right field,
// documented defaults are the struct defaults, and a minimal recipe loads
// into exactly those defaults.
#include <doctest/doctest.h>

#include "diagnostic_matchers.hpp"
#include "meshrun/recipe/schema.hpp"

namespace meshrun {
namespace {

using test::load_text;

const KeySpec& key(const char* path) {
  const KeySpec* spec = recipe_schema().find_key(path);
  REQUIRE_MESSAGE(spec, path);
  return *spec;
}

TEST_CASE("a minimal recipe loads into the struct defaults") {
  auto loaded = load_text("algorithm = \"sft\"\n", {}, "dir/minimal.toml");
  CHECK_NO_ERRORS(loaded.diagnostics);
  REQUIRE(loaded.recipe);
  const Recipe& r = *loaded.recipe;
  const Recipe defaults;

  CHECK(r.name == "minimal");  // the file name without .toml
  CHECK(r.algorithm == Algorithm::sft);
  CHECK(r.seed == defaults.seed);
  CHECK(r.file == "dir/minimal.toml");
  CHECK(r.roles.empty());

  const LaunchConfig launch;
  CHECK(r.launch.type == launch.type);
  CHECK(r.launch.nodes == launch.nodes);
  CHECK(r.launch.procs_per_node == launch.procs_per_node);
  CHECK(r.launch.device == launch.device);
  CHECK(r.launch.backend == launch.backend);
  CHECK(r.launch.timeout_minutes == launch.timeout_minutes);
  CHECK(r.launch.master_port == launch.master_port);
  CHECK(r.launch.max_restarts == launch.max_restarts);
  CHECK(r.launch.memory_gb == launch.memory_gb);

  const MeshConfig mesh;
  CHECK(r.mesh.tp == mesh.tp);
  CHECK(r.mesh.sp == mesh.sp);
  CHECK(r.mesh.dp == mesh.dp);

  const BatchConfig batch;
  CHECK(r.batch.micro_train == batch.micro_train);
  CHECK(r.batch.train == batch.train);
  CHECK(r.batch.micro_rollout == batch.micro_rollout);
  CHECK(r.batch.rollout == batch.rollout);
  CHECK(r.batch.n_samples_per_prompt == batch.n_samples_per_prompt);

  const RolloutConfig rollout;
  CHECK(r.rollout.engines == rollout.engines);
  CHECK(r.rollout.tensor_parallel == rollout.tensor_parallel);
  CHECK(r.rollout.memory_utilization == rollout.memory_utilization);
  CHECK(r.rollout.max_prompt_len == rollout.max_prompt_len);
  CHECK(r.rollout.max_new_tokens == rollout.max_new_tokens);
  CHECK(r.rollout.temperature == rollout.temperature);
  CHECK(r.rollout.top_p == rollout.top_p);
  CHECK(r.rollout.top_k == rollout.top_k);

  CHECK(r.colocate.all == ColocateConfig{}.all);
  CHECK(r.colocate.groups.empty());
  CHECK(r.colocate.sleep == ColocateConfig{}.sleep);

  const PpoConfig ppo;
  CHECK(r.ppo.init_kl_coef == ppo.init_kl_coef);
  CHECK(r.ppo.kl_target == ppo.kl_target);
  CHECK(r.ppo.kl_horizon == ppo.kl_horizon);
  CHECK(r.ppo.kl_estimator == ppo.kl_estimator);
  CHECK(r.ppo.gamma == ppo.gamma);
  CHECK(r.ppo.lambd == ppo.lambd);
  CHECK(r.ppo.eps_clip == ppo.eps_clip);
  CHECK(r.ppo.value_clip == ppo.value_clip);
  CHECK(r.ppo.entropy_coef == ppo.entropy_coef);
  CHECK(r.ppo.advantage == ppo.advantage);
  CHECK(r.ppo.normalize_reward == ppo.normalize_reward);
  CHECK(r.ppo.max_epochs == ppo.max_epochs);
  CHECK(r.ppo.num_episodes == ppo.num_episodes);

  const DataConfig data;
  CHECK(r.data.path == data.path);
  CHECK(r.data.input_key == data.input_key);
  CHECK(r.data.output_key == data.output_key);
  CHECK(r.data.max_len == data.max_len);
  CHECK(r.data.packing == data.packing);

  // Defaults are not paths set by a file, so they are not resolved.
  const CheckpointConfig checkpoint;
  CHECK(r.checkpoint.path == checkpoint.path);
  CHECK(r.checkpoint.save_steps == checkpoint.save_steps);
  CHECK(r.checkpoint.keep_last == checkpoint.keep_last);
  CHECK(r.checkpoint.max_size_gb == checkpoint.max_size_gb);
  CHECK(r.checkpoint.save_value_network == checkpoint.save_value_network);
  CHECK(r.checkpoint.save_hf == checkpoint.save_hf);
  CHECK(r.checkpoint.load == checkpoint.load);
  CHECK(r.checkpoint.output == checkpoint.output);

  const HooksConfig hooks;
  CHECK(r.hooks.script == hooks.script);
  CHECK(r.hooks.reward == hooks.reward);
  CHECK(r.hooks.on_rollout == hooks.on_rollout);
  CHECK(r.hooks.on_step == hooks.on_step);
  CHECK(r.hooks.sandbox == hooks.sandbox);
  CHECK(r.hooks.instruction_limit == hooks.instruction_limit);

  CHECK(r.logging.steps == LoggingConfig{}.steps);
  CHECK(r.logging.dir == LoggingConfig{}.dir);
}

TEST_CASE("a role without settings takes the struct defaults and the cluster's placement and mesh") {
  auto loaded = load_text(R"(algorithm = "sft"
[launch]
nodes = 2
procs_per_node = 4
[mesh]
tp = 2
[roles.actor]
)");
  CHECK_NO_ERRORS(loaded.diagnostics);
  REQUIRE(loaded.recipe);
  const RoleConfig* actor = loaded.recipe->role(Role::actor);
  REQUIRE(actor);
  const RoleConfig defaults;
  CHECK(actor->name() == "actor");
  CHECK(actor->model == defaults.model);
  CHECK(actor->zero_stage == defaults.zero_stage);
  CHECK(actor->dtype == defaults.dtype);
  CHECK(actor->learning_rate == defaults.learning_rate);
  CHECK(actor->gradient_checkpointing == defaults.gradient_checkpointing);
  CHECK(actor->offload == defaults.offload);
  CHECK(actor->hook == defaults.hook);
  // Resolved from [launch] and [mesh].
  CHECK(actor->nodes == 2);
  CHECK(actor->procs_per_node == 4);
  CHECK(actor->processes() == 8);
  CHECK(actor->mesh.tp == 2);
  CHECK(actor->mesh.sp == 1);
  CHECK(actor->mesh.dp == -1);
}

TEST_CASE("documented defaults are the struct defaults, written as TOML") {
  CHECK(key("launch.nodes").default_text == "1");
  CHECK(key("launch.type").default_text == "\"auto\"");
  CHECK(key("launch.timeout_minutes").default_text == "30");
  CHECK(key("launch.memory_gb").default_text == "0");
  CHECK(key("mesh.dp").default_text == "-1");
  CHECK(key("roles.*.learning_rate").default_text == "1e-05");
  CHECK(key("roles.*.gradient_checkpointing").default_text == "false");
  CHECK(key("hooks.sandbox").default_text == "true");
  CHECK(key("hooks.instruction_limit").default_text == "100000000");
  CHECK(key("rollout.memory_utilization").default_text == "0.9");
  CHECK(key("colocate.groups").default_text == "[]");
  CHECK(key("data.path").default_text == "\"\"");
  // Defaults that depend on other keys are described in words.
  CHECK(key("name").default_text == "the recipe file's name without .toml");
  CHECK(key("roles.*.nodes").default_text == "[launch] nodes");
  CHECK(key("roles.*.procs_per_node").default_text == "[launch] procs_per_node");
  CHECK(key("hooks.script").default_text == "none");
}

TEST_CASE("key types follow the field types") {
  CHECK(key("seed").type == ValueType::integer);
  CHECK(key("hooks.instruction_limit").type == ValueType::integer);
  CHECK(key("launch.timeout_minutes").type == ValueType::number);
  CHECK(key("launch.device").type == ValueType::string);
  CHECK(key("colocate.all").type == ValueType::boolean);
  CHECK(key("colocate.groups").type == ValueType::string_list_list);
  CHECK(key("roles.*.mesh.tp").type == ValueType::integer);
}

TEST_CASE("path kinds: files always resolve, references only when they look like paths") {
  CHECK(key("include").path_kind == PathKind::file);
  CHECK(key("hooks.script").path_kind == PathKind::file);
  CHECK(key("checkpoint.path").path_kind == PathKind::file);
  CHECK(key("checkpoint.output").path_kind == PathKind::file);
  CHECK(key("logging.dir").path_kind == PathKind::file);
  CHECK(key("roles.*.model").path_kind == PathKind::reference);
  CHECK(key("data.path").path_kind == PathKind::reference);
  CHECK(key("data.input_key").path_kind == PathKind::none);
}

TEST_CASE("each key's assign stores into its own field") {
  auto loaded = load_text(R"(algorithm = "ppo"
name = "run"
seed = 7
[launch]
type = "slurm"
nodes = 3
procs_per_node = 2
device = "cpu"
backend = "gloo"
timeout_minutes = 2.5
master_port = 1234
max_restarts = 4
memory_gb = 16
[mesh]
tp = 2
sp = 3
dp = 1
[batch]
micro_train = 2
train = 64
micro_rollout = 3
rollout = 5
n_samples_per_prompt = 6
[roles.actor]
model = "m-actor"
nodes = 1
procs_per_node = 2
zero_stage = 3
dtype = "fp32"
learning_rate = 0.5
gradient_checkpointing = true
offload = true
[roles.actor.mesh]
tp = 1
sp = 2
dp = 1
[roles.reward]
hook = "score"
[rollout]
engines = 2
tensor_parallel = 2
memory_utilization = 0.5
max_prompt_len = 11
max_new_tokens = 12
temperature = 0.7
top_p = 0.8
top_k = 50
[colocate]
groups = [["actor", "rollout"]]
sleep = true
[ppo]
init_kl_coef = 0.2
kl_target = 0.3
kl_horizon = 40
kl_estimator = "k3"
gamma = 0.5
lambd = 0.6
eps_clip = 0.7
value_clip = 0.8
entropy_coef = 0.9
advantage = "rloo"
normalize_reward = true
max_epochs = 5
num_episodes = 6
[data]
path = "prompts"
input_key = "q"
output_key = "a"
max_len = 99
packing = true
[checkpoint]
path = "/ck"
save_steps = 10
keep_last = 2
max_size_gb = 1.5
save_value_network = true
save_hf = true
load = "never"
output = "/out"
[hooks]
script = "/h/hooks.lua"
reward = "r"
on_rollout = "o"
on_step = "s"
sandbox = false
instruction_limit = 5000
[logging]
steps = 9
dir = "/logs"
)");
  CHECK_NO_ERRORS(loaded.diagnostics);
  REQUIRE(loaded.recipe);
  const Recipe& r = *loaded.recipe;
  CHECK(r.name == "run");
  CHECK(r.algorithm == Algorithm::ppo);
  CHECK(r.seed == 7);
  CHECK(r.launch.type == "slurm");
  CHECK(r.launch.nodes == 3);
  CHECK(r.launch.procs_per_node == 2);
  CHECK(r.launch.device == "cpu");
  CHECK(r.launch.backend == "gloo");
  CHECK(r.launch.timeout_minutes == 2.5);
  CHECK(r.launch.master_port == 1234);
  CHECK(r.launch.max_restarts == 4);
  CHECK(r.launch.memory_gb == 16);
  CHECK(r.mesh.tp == 2);
  CHECK(r.mesh.sp == 3);
  CHECK(r.mesh.dp == 1);
  CHECK(r.batch.micro_train == 2);
  CHECK(r.batch.train == 64);
  CHECK(r.batch.micro_rollout == 3);
  CHECK(r.batch.rollout == 5);
  CHECK(r.batch.n_samples_per_prompt == 6);

  REQUIRE(r.roles.size() == 2);
  const RoleConfig* actor = r.role(Role::actor);
  REQUIRE(actor);
  CHECK(actor->model == "m-actor");
  CHECK(actor->nodes == 1);
  CHECK(actor->procs_per_node == 2);
  CHECK(actor->zero_stage == 3);
  CHECK(actor->dtype == "fp32");
  CHECK(actor->learning_rate == 0.5);
  CHECK(actor->gradient_checkpointing);
  CHECK(actor->offload);
  CHECK(actor->mesh.tp == 1);
  CHECK(actor->mesh.sp == 2);
  CHECK(actor->mesh.dp == 1);
  const RoleConfig* reward = r.role(Role::reward);
  REQUIRE(reward);
  CHECK(reward->hook == "score");
  CHECK(reward->model.empty());
  // Not set for the reward role: from [launch] and [mesh].
  CHECK(reward->nodes == 3);
  CHECK(reward->procs_per_node == 2);
  CHECK(reward->mesh.tp == 2);
  CHECK(reward->mesh.sp == 3);
  CHECK(reward->mesh.dp == 1);
  CHECK_FALSE(reward->offload);

  CHECK(r.rollout.engines == 2);
  CHECK(r.rollout.tensor_parallel == 2);
  CHECK(r.rollout.memory_utilization == 0.5);
  CHECK(r.rollout.max_prompt_len == 11);
  CHECK(r.rollout.max_new_tokens == 12);
  CHECK(r.rollout.temperature == 0.7);
  CHECK(r.rollout.top_p == 0.8);
  CHECK(r.rollout.top_k == 50);
  CHECK_FALSE(r.colocate.all);
  CHECK(r.colocate.group_names == std::vector<std::vector<std::string>>{{"actor", "rollout"}});
  CHECK(r.colocate.groups == std::vector<std::vector<Role>>{{Role::actor, Role::rollout}});
  CHECK(r.colocate.sleep);
  CHECK(r.ppo.init_kl_coef == 0.2);
  CHECK(r.ppo.kl_target == 0.3);
  CHECK(r.ppo.kl_horizon == 40);
  CHECK(r.ppo.kl_estimator == KlEstimator::k3);
  CHECK(r.ppo.gamma == 0.5);
  CHECK(r.ppo.lambd == 0.6);
  CHECK(r.ppo.eps_clip == 0.7);
  CHECK(r.ppo.value_clip == 0.8);
  CHECK(r.ppo.entropy_coef == 0.9);
  CHECK(r.ppo.advantage == AdvantageEstimator::rloo);
  CHECK(r.ppo.normalize_reward);
  CHECK(r.ppo.max_epochs == 5);
  CHECK(r.ppo.num_episodes == 6);
  CHECK(r.data.path == "prompts");
  CHECK(r.data.input_key == "q");
  CHECK(r.data.output_key == "a");
  CHECK(r.data.max_len == 99);
  CHECK(r.data.packing);
  CHECK(r.checkpoint.path == "/ck");
  CHECK(r.checkpoint.save_steps == 10);
  CHECK(r.checkpoint.keep_last == 2);
  CHECK(r.checkpoint.max_size_gb == 1.5);
  CHECK(r.checkpoint.save_value_network);
  CHECK(r.checkpoint.save_hf);
  CHECK(r.checkpoint.load == "never");
  CHECK(r.checkpoint.output == "/out");
  CHECK(r.hooks.script == "/h/hooks.lua");
  CHECK(r.hooks.reward == "r");
  CHECK(r.hooks.on_rollout == "o");
  CHECK(r.hooks.on_step == "s");
  CHECK_FALSE(r.hooks.sandbox);
  CHECK(r.hooks.instruction_limit == 5000);
  CHECK(r.logging.steps == 9);
  CHECK(r.logging.dir == "/logs");
}

TEST_CASE("train.max_skipped_steps: 10 by default, at least 1, or -1 for never") {
  CHECK(key("train.max_skipped_steps").default_text == "10");
  CHECK(key("train.max_skipped_steps").type == ValueType::integer);
  auto set = load_text("algorithm = \"sft\"\n[train]\nmax_skipped_steps = 3\n");
  CHECK_NO_ERRORS(set.diagnostics);
  REQUIRE(set.recipe);
  CHECK(set.recipe->train.max_skipped_steps == 3);
  auto never = load_text("algorithm = \"sft\"\n", {"train.max_skipped_steps=-1"});
  CHECK_NO_ERRORS(never.diagnostics);
  REQUIRE(never.recipe);
  CHECK(never.recipe->train.max_skipped_steps == -1);
  auto zero = load_text("algorithm = \"sft\"\n[train]\nmax_skipped_steps = 0\n");
  auto found = FIND_DIAGNOSTIC(zero.diagnostics, "schema.range", 3, 21);
  REQUIRE(found);
  CHECK(found->message == "train.max_skipped_steps must be ≥ 1 or -1, got 0");
}

TEST_CASE("every key of the schema loads from a recipe that sets it") {
  // One value of the right type for each key, inside its range and among its
  // choices; roles.*. keys are set for the actor.
  const Schema& schema = recipe_schema();
  std::map<std::string, std::vector<std::string>> tables;  // table -> "key = value" lines
  for (const auto& spec : schema.keys) {
    if (spec.path == "include") continue;
    std::string path = spec.path;
    if (path.rfind("roles.*", 0) == 0) path.replace(6, 1, "actor");
    size_t dot = path.rfind('.');
    std::string table = dot == std::string::npos ? "" : path.substr(0, dot);
    std::string name = path.substr(dot == std::string::npos ? 0 : dot + 1);
    std::string value;
    switch (spec.type) {
      case ValueType::boolean: value = "true"; break;
      case ValueType::integer: value = std::to_string(static_cast<long long>(spec.min.value_or(1))); break;
      case ValueType::number:
        value = spec.max ? std::to_string(spec.max_exclusive ? *spec.max / 2 : *spec.max) : "1.0";
        break;
      case ValueType::string: value = "\"" + (spec.choices.empty() ? "x" : spec.choices.front()) + "\""; break;
      case ValueType::string_list: value = "[\"x\"]"; break;
      case ValueType::string_list_list: value = "[[\"actor\"]]"; break;
      case ValueType::table: value = "{ enable_thinking = false }"; break;
    }
    tables[table].push_back(name + " = " + value);
  }
  std::string text;
  for (const auto& line : tables[""]) text += line + "\n";
  for (const auto& [table, lines] : tables) {
    if (table.empty()) continue;
    text += "[" + table + "]\n";
    for (const auto& line : lines) text += line + "\n";
  }
  INFO(text);
  auto loaded = load_text(text);
  CHECK_NO_ERRORS(loaded.diagnostics);
  REQUIRE(loaded.recipe);
  // Every key was set, so every key has a location.
  for (const auto& spec : schema.keys) {
    if (spec.path == "include") continue;
    std::string path = spec.path;
    if (path.rfind("roles.*", 0) == 0) path.replace(6, 1, "actor");
    CHECK_MESSAGE(loaded.recipe->is_set(path), path);
  }
}

}  // namespace
}  // namespace meshrun
