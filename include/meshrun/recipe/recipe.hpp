// Recipe: the typed form of a meshrun TOML recipe, after `include` and
// `--set` overrides, with the source location of every key that was set.
//
// This is the single source of truth that lint, plan and the runtime read.
// Each section struct maps one-to-one onto a [section] of the file; every
// key's meaning, default and checks are documented where the key is bound to
// its field, in src/recipe/schema.cpp (docs/recipes.md is generated from it).
// Invariants after a successful load_recipe(): every value has the right type
// and lies in its documented range; relative paths have been made absolute
// against the directory of the file that set them; role placement defaults
// have been resolved. Cross-field rules (mesh, batch, roles, ...) are checked
// by validate_recipe(), not by the loader.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "meshrun/recipe/diagnostics.hpp"
#include "meshrun/recipe/algorithms.hpp"
#include "meshrun/recipe/lora_targets.hpp"
#include "meshrun/recipe/roles.hpp"

namespace meshrun {

// Upper bounds of the cluster `plan --cluster` may describe (nodes ×
// procs_per_node stays an int) and of launch.memory_gb: a device's bytes
// stay an int64 with room for sums (1 PiB is far past any accelerator or host).
inline constexpr int kMaxNodes = 65536;
inline constexpr int kMaxProcsPerNode = 1024;
inline constexpr double kMaxDeviceMemoryGb = 1 << 20;

struct LaunchConfig {
  std::string type = "auto";  // local | ray | torchrun | horovod | slurm | mpi | auto
  int nodes = 1;
  int procs_per_node = 1;
  std::string device = "cuda";  // cuda | cpu
  std::string backend = "auto";  // nccl | gloo | auto
  double timeout_minutes = 30;
  int master_port = 29500;
  int max_restarts = 0;
  double restart_delay = 3;  // seconds between a failure and the restart
  double memory_gb = 0;  // per device; 0 = 80 for cuda, unknown for cpu
  std::string address;   // a Ray cluster's job server (http://host:port); empty: RAY_ADDRESS
};

struct MeshConfig {
  int tp = 1;
  int sp = 1;
  int dp = -1;  // -1: inferred from the role's process count
  int ep = 1;   // expert parallelism, within dp (MeshPlan)
};

struct BatchConfig {
  int micro_train = 1;
  int train = 8;
  int micro_rollout = 1;
  int rollout = 8;
  int n_samples_per_prompt = 1;
};

struct RoleConfig {
  Role role = Role::actor;  // its kRoles row: the loader resolves [roles.NAME] once
  std::string model;
  int nodes = 0;           // 0 until resolved: defaults to [launch] nodes
  int procs_per_node = 0;  // 0 until resolved: defaults to [launch] procs_per_node
  int zero_stage = 0;
  std::string dtype = "bf16";  // bf16 | fp16 | fp32
  double learning_rate = 1e-5;
  std::string lr_scheduler = "cosine";  // cosine | linear | constant
  double warmup_ratio = 0.03;           // of the role's optimizer steps
  double min_lr_ratio = 0.1;            // cosine/linear end point, as a fraction of learning_rate
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;
  double max_norm = 1.0;  // gradient clipping by global norm; 0 disables
  bool gradient_checkpointing = false;
  bool offload = false;
  int lora_rank = 0;  // 0: no adapters, the whole model trains
  double lora_alpha = 16;
  std::vector<std::string> lora_targets{std::begin(kLoraTargets), std::end(kLoraTargets)};  // every projection
  double lora_dropout = 0;
  // Mixtures of experts: the weight of the routers' load-balancing loss;
  // -1: the model's config.json router_aux_loss_coef.
  double router_aux_loss_coef = -1;
  MeshConfig mesh;  // resolved: [roles.NAME.mesh] keys over [mesh] keys
  std::string hook;                // reward role only: Lua function instead of a model

  // 64-bit: nodes and procs_per_node fit an int, their product need not.
  int64_t processes() const { return int64_t{nodes} * procs_per_node; }
  // The recipe's [roles.NAME], for keys and messages: role_name(role).
  std::string name() const { return std::string(role_name(role)); }
};

struct RolloutConfig {
  int engines = 1;
  int tensor_parallel = 1;
  double memory_utilization = 0.9;
  int max_prompt_len = 1024;
  int max_new_tokens = 1024;
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = -1;  // -1: disabled
  int max_batch = 0;      // live sequences per engine; 0: the engine's share of a step
  int kv_cache_mb = 0;    // per process; 0: memory_utilization's budget, else max_batch whole sequences
  int kv_block_size = 16;
  int prefill_chunk = 512;  // tokens a step prefills beside the decodes; 0: whole prompts
  bool cuda_graphs = true;  // decode steps captured as CUDA graphs where they can be (vLLM's enforce_eager = false)
  // 0: synchronous steps; N ≥ 1: the engines generate the next step's
  // samples while the trainer updates (one step ahead), and samples more
  // than N policy versions old are not trained.
  int max_staleness = 0;
  // Asynchronous RL: new weights interrupt in-flight sequences, which
  // resume on them (true), or the sequences finish on the old (false).
  bool partial = false;
};

struct ColocateConfig {
  bool all = false;
  // colocate.groups as written: role names, and "rollout". Only lint's
  // colocate.unknown-role rule and the resolved recipe read the names.
  std::vector<std::vector<std::string>> group_names;
  // The same groups as rows, resolved once by the loader (a name no row
  // has is left out): what colocation and placement read.
  std::vector<std::vector<Role>> groups;
  bool sleep = false;
};

struct PpoConfig {
  double init_kl_coef = 0.01;
  double kl_target = 0;  // 0: fixed KL coefficient
  double kl_horizon = 10000;
  KlEstimator kl_estimator = KlEstimator::k1;
  double gamma = 1.0;
  double lambd = 0.95;
  double eps_clip = 0.2;
  double eps_clip_high = -1;  // the loader sets eps_clip when the recipe does not
  double dual_clip = 0;       // 0: off
  double value_clip = 0.5;
  double entropy_coef = 0.0;
  AdvantageEstimator advantage = AdvantageEstimator::gae;
  PolicyLoss policy_loss = PolicyLoss::ppo;
  LossAggregation loss_agg = LossAggregation::token_mean;
  KlMode kl_mode = KlMode::reward;
  RolloutCorrection rollout_correction = RolloutCorrection::none;
  double rollout_is_cap = 2.0;   // tis: the importance weights' cap
  double rollout_is_low = 0.5;   // seq-mask, icepop: the ratio band kept
  double rollout_is_high = 2.0;
  bool routing_replay = false;
  bool dynamic_sampling = false;
  int max_sample_rounds = 3;
  int overlong_buffer = 0;  // 0: no overlong penalty
  double overlong_penalty = 1.0;
  bool normalize_reward = false;
  double reward_clip = 10.0;  // 0: no clipping
  int max_epochs = 1;
  int num_episodes = 1;

  // The upper clip bound of the policy ratio: 1 + clip_high().
  // A PpoConfig built in code (tests) may leave eps_clip_high unset.
  double clip_high() const { return eps_clip_high < 0 ? eps_clip : eps_clip_high; }
};

struct DpoConfig {
  double beta = 0.1;
  DpoLoss loss = DpoLoss::sigmoid;
  double label_smoothing = 0;  // cDPO's ε, sigmoid loss only
};

struct DataConfig {
  std::string path;
  std::string input_key = "input";
  std::string output_key = "output";
  std::string eval_path;  // empty: no evaluation set
  std::string chosen_key = "chosen";      // preference pairs (DPO)
  std::string rejected_key = "rejected";  // preference pairs (DPO)
  std::string messages_key = "messages";  // chat-style samples, rendered by the chat template
  std::string label_key;  // empty: prompts carry no label
  std::string tokenizer;  // empty: the actor's model (builtin presets: byte-level)
  int max_len = 2048;
  bool packing = false;
  LossTurns loss_turns = LossTurns::all;  // SFT chat samples
  // Extra chat template variables ({"enable_thinking":false}) as canonical
  // JSON text of an object; empty: none.
  std::string chat_template_kwargs;
};

struct TrainConfig {
  int epochs = 1;         // SFT: passes over the dataset
  long long max_steps = -1;  // -1: no limit beyond epochs / episodes
  int eval_steps = 0;        // 0: evaluate after the last step only (with data.eval_path)
  double bucket_mb = 25;  // data-parallel gradient bucket size
  // Optimizer steps in a row with non-finite gradients (that fp16 loss
  // scaling can no longer back off from) before the run stops; -1: never.
  int max_skipped_steps = 10;
};

struct CheckpointConfig {
  std::string path = "checkpoints";
  int save_steps = -1;  // -1: never (only at the end)
  int keep_last = 3;
  double max_size_gb = 0;  // 0: no size limit
  bool save_value_network = false;
  bool save_hf = false;
  std::string load = "auto";  // auto | never | require
  std::string output = "output";
  bool async = false;  // write in a background thread while training goes on
};

struct HooksConfig {
  std::string script;  // empty: no hooks
  std::string reward = "reward";
  std::string on_rollout = "on_rollout";
  std::string on_step = "on_step";
  bool sandbox = true;
  long long instruction_limit = 100'000'000;
  double timeout_s = 60;   // wall clock per hook call
  long long memory_limit_mb = 256;  // what the script's Lua state may hold
  bool parallel = false;   // reward hooks on every rank, each over its share
};

// Multi-turn episodes: a Lua environment answers each model turn with an
// observation appended to the episode (empty script: single-turn RL).
struct EnvConfig {
  std::string script;  // empty: no environment
  int max_turns = 1;   // model turns per episode
  int max_observation_tokens = 256;  // an observation is cut to this many tokens
  // prompt + every turn and observation; 0: max_prompt_len + max_turns ×
  // (max_new_tokens + max_observation_tokens).
  int max_episode_tokens = 0;
  std::string observation_role = "tool";  // chat role of observations (chat prompts)
  double timeout_s = 10;  // wall clock per env call
};

struct LoggingConfig {
  int steps = 1;
  std::string dir = "logs";
  bool tensorboard = false;  // events.out.tfevents.* beside metrics.jsonl
};

// The recipe's role names ([roles.NAME]), in placement order: every row of
// kRoles but the rollout engines' (configured by [rollout]).
inline constexpr std::array<std::string_view, kRoles.size() - 1> kRoleNames = [] {
  std::array<std::string_view, kRoles.size() - 1> names{};
  std::size_t next = 0;
  for (const RoleRow& row : kRoles)
    if (row.role != Role::rollout) names[next++] = row.name;
  return names;
}();

struct Recipe {
  std::string name;
  Algorithm algorithm = Algorithm::sft;
  long long seed = 42;
  std::string file;  // the top-level recipe file, as given
  std::vector<std::string> included_files;  // every file read, top-level first

  LaunchConfig launch;
  MeshConfig mesh;
  BatchConfig batch;
  std::vector<RoleConfig> roles;  // present roles, in kRoleNames order
  RolloutConfig rollout;
  ColocateConfig colocate;
  PpoConfig ppo;
  DpoConfig dpo;
  DataConfig data;
  TrainConfig train;
  CheckpointConfig checkpoint;
  HooksConfig hooks;
  EnvConfig env;
  LoggingConfig logging;

  // The [roles.NAME] section of a row; null when the recipe has none (always
  // for Role::rollout: the engines are [rollout]).
  const RoleConfig* role(Role role) const;
  bool has_role(Role role) const { return this->role(role) != nullptr; }
  // The location of a dotted key ("launch.nodes", "roles.actor.mesh.tp").
  // For a key that was not set: its table's header, else the nearest
  // enclosing table's, else the top-level file as a whole.
  SourceLocation where(std::string_view dotted_key) const;
  // Whether the key was set in a file or by --set (not a default).
  bool is_set(std::string_view dotted_key) const;

  // Filled by the loader: dotted key (or table path) -> where it was set.
  std::map<std::string, SourceLocation, std::less<>> locations;
};

// Whether the recipe runs multi-turn episodes ([env] script set).
inline bool has_env(const Recipe& recipe) { return !recipe.env.script.empty(); }

// One `--set section.key=value` override, in command-line order.
struct Override {
  std::string assignment;  // "section.key=value"
};

// Reads `path`, its includes and the overrides into a Recipe. Problems are
// reported to `diagnostics` (all of them, not just the first); the Recipe is
// returned only when there was no error.
std::optional<Recipe> load_recipe(const std::string& path, const std::vector<Override>& overrides,
                                  Diagnostics& diagnostics);

// The same from text already in memory (`file_name` is used in locations and
// to resolve relative paths and includes).
std::optional<Recipe> load_recipe_text(std::string_view text, const std::string& file_name,
                                       const std::vector<Override>& overrides,
                                       Diagnostics& diagnostics);

// Cross-field rules (mesh, batch, roles, colocate, checkpoint, launch, data).
// Schema-level checks have already run in the loader. Hook scripts and the
// plan are checked by lint_recipe() (lint.hpp), which calls this.
void validate_recipe(const Recipe& recipe, Diagnostics& diagnostics);

}  // namespace meshrun
