// Plan: where every role and rollout engine runs, each role's device mesh,
// gradient accumulation, and the memory each process needs.
//
// make_plan() is a pure function of (recipe, cluster shape); lint checks it,
// `meshrun plan` prints it, and every rank at run time computes the same plan
// and trusts it. Ranks are numbered node-major: rank = node * procs_per_node +
// local index. Within a role's mesh, coordinates vary tp fastest, then sp,
// then dp, so a tp group holds consecutive ranks of the role (one node when
// tp ≤ procs_per_node). Memory figures are in bytes; the formulas are in
// docs/planning.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshrun/arch/lora.hpp"
#include "meshrun/arch/architecture.hpp"
#include "meshrun/plan/settings.hpp"
#include "meshrun/recipe/diagnostics.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/recipe/resolved.hpp"
#include "meshrun/recipe/roles.hpp"

namespace meshrun {

// The most processes make_plan() lays out: 65,536, four times the largest
// published training jobs (16,384 GPUs). A plan holds, and its text and
// JSON print, every slot, so a typo like nodes = 100000000 is refused first
// (fuzz/recipe_fuzz.cpp: 2^18 slots took 14 s and 1.2 GiB with the JSON).
inline constexpr int64_t kMaxPlanSlots = int64_t{1} << 16;

struct ClusterShape {
  int nodes = 1;
  int procs_per_node = 1;
  DeviceKind device = DeviceKind::cuda;
  double memory_gb = 0;  // GiB per device (per process slot on cpu); 0: unknown

  // "NODESxPROCS[:DEVICE[:MEM_GB]]", e.g. "4x8:cuda:80". nullopt + error on bad text.
  static std::optional<ClusterShape> parse(const std::string& text, std::string& error);
  // From the recipe's [launch] section. memory_gb 0 on cuda becomes
  // `visible_memory_gb` when positive (the GPU this process sees), else 80.
  static ClusterShape from_recipe(const Recipe& recipe, double visible_memory_gb = 0);
  // 64-bit: two ints in range can still multiply past one (the planner
  // refuses more than kMaxPlanSlots).
  int64_t world_size() const { return int64_t{nodes} * procs_per_node; }
};

struct MeshPlan {
  int dp = 1, sp = 1, tp = 1;
  // Expert parallelism, inside dp: the dp coordinates g × ep .. g × ep + ep - 1
  // (same sp, tp) form an ep group that splits a mixture's experts (ep rank
  // = dp % ep); the ranks holding the same experts and tp shard, (dp / ep) ×
  // sp of them, form an expert replica group, over which expert gradients
  // are reduced and ZeRO-sharded. Both lists are empty when ep is 1.
  int ep = 1;
  std::vector<int> ranks;  // global ranks of the role, mesh order; empty: no mesh formed
  std::vector<std::vector<int>> dp_groups, sp_groups, tp_groups;  // global ranks
  std::vector<std::vector<int>> ep_groups, expert_replica_groups;
  struct Coordinate { int dp = 0, sp = 0, tp = 0; };
  Coordinate coordinate_of(int global_rank) const;  // throws std::logic_error if not in the mesh
  int rank_at(Coordinate c) const;
};

struct MemoryEstimate {
  int64_t parameters = 0;     // bytes on the device
  int64_t gradients = 0;
  int64_t optimizer = 0;      // on the device
  int64_t optimizer_host = 0; // offloaded to CPU memory
  // [checkpoint] async: the snapshot of this process's training state
  // (fp32 master weights and Adam moments) held in CPU memory while a
  // background thread writes it.
  int64_t checkpoint_host = 0;
  int64_t activations = 0;
  int64_t logits = 0;
  int64_t kv_cache = 0;       // rollout engines
  int64_t overhead = 0;       // runtime context, buffers
  // A frozen reference computed on the trained role's own processes (DPO):
  // what it adds to the device peak (its weights; with colocate.sleep only
  // what its forward pass needs beyond the training activations it never
  // meets), and its weights in CPU memory while they sleep.
  int64_t reference = 0;
  int64_t reference_host = 0;
  int64_t total() const {
    return parameters + gradients + optimizer + activations + logits + kv_cache + overhead + reference;
  }
};

// Gradient reductions a training engine keeps in flight at once, each
// holding its bucket's fp32 copy (src/train/engine_core.hpp): two let one
// bucket's communication overlap the next one's backward. The planner
// counts their memory (src/plan/memory.cpp).
inline constexpr int kGradientReductionsInFlight = 2;

// A trained role's optimizer, resolved from its [roles.NAME] keys: what
// its TrainEngine is built with (EngineOptions::from_plan).
struct OptimizerPlan {
  double learning_rate = 0;
  LrScheduleKind lr_scheduler = LrScheduleKind::cosine;
  double warmup_ratio = 0;   // of the role's optimizer steps
  double min_lr_ratio = 0;
  double weight_decay = 0;
  double adam_beta1 = 0, adam_beta2 = 0, adam_eps = 0;
  double max_norm = 0;  // 0: no clipping
  double bucket_mb = 0;  // [train] bucket_mb: dp gradient buckets
  int max_skipped_steps = 10;  // [train] max_skipped_steps; -1: never stop
};

struct RolePlan {
  Role role = Role::actor;
  std::string name;  // role_name(role): the recipe's [roles.NAME]
  std::string model;  // the recipe's value, as given
  bool trained = false;
  // The settings the memory estimate and the role's engine depend on,
  // resolved from the recipe; the runners build the role from these.
  int zero_stage = 0;
  Precision dtype = Precision::bf16;
  bool offload = false;
  bool gradient_checkpointing = false;
  int micro_batch = 1;          // sequences: batch.micro_train (trained) or batch.micro_rollout, × the
                                // algorithm's sequences per item (a preference pair is 2)
  int64_t sequence_length = 0;  // tokens per sequence the estimate assumes
  std::vector<int> ranks;  // global ranks, ascending
  MeshPlan mesh;
  int gradient_accumulation = 1;  // trained roles
  OptimizerPlan optimizer;        // trained roles
  int64_t parameter_count = 0;
  // Mixtures of experts: the load-balancing loss weight (roles.NAME's
  // router_aux_loss_coef, else the model's); 0 for a dense model.
  double router_aux_loss_coef = 0;
  // [roles.NAME] lora_*: adapters trained on a frozen base; the optimizer
  // state, gradients and checkpoints hold the adapters only.
  LoraSettings lora;
  int64_t adapter_parameter_count = 0;
  // The frozen reference the role computes on its own processes and mesh
  // (algorithms whose row has ref_with_actor: [roles.ref] model, else the
  // role's own model); empty for the others. Its weights take the role's
  // dtype and tp split, never its LoRA adapters or ZeRO sharding.
  std::string reference_model;
  bool reference_named = false;  // by [roles.ref] (else the role's own initial weights)
  // With LoRA on the role's own model, the reference is the role's frozen
  // base with its adapters off: no second copy of the weights.
  bool reference_shares_base = false;
  Architecture reference_architecture;
  // The reference is the model the role starts from (same weights source),
  // so its architecture and checks are the role's own.
  bool reference_is_own_model() const { return !reference_model.empty() && reference_model == model; }
  int64_t reference_parameter_count = 0;
  Architecture architecture;
  MemoryEstimate memory;  // per process
  // Trained roles: memory.activations under both settings of
  // gradient_checkpointing, so the plan can show what switching would change.
  int64_t activations_checkpointed = 0;
  int64_t activations_not_checkpointed = 0;
};

// A role's LoRA settings as the recipe gives them (rank 0: none).
LoraSettings lora_of(const RoleConfig& role);

struct EnginePlan {
  int index = 0;
  std::vector<int> ranks;  // tensor_parallel ranks on one node
  int64_t kv_cache_tokens = 0;  // tokens memory_utilization's budget holds per engine (0: capacity unknown)
  int64_t kv_cache_sequences = 0;  // of max_prompt_len + max_new_tokens
  // What the engine allocates and schedules: at most max_batch live
  // sequences (rollout.max_batch, else its share of a step), a pool of
  // kv_pool_blocks blocks of kv_block_size tokens (rollout.kv_cache_mb,
  // else the budget's, at most max_batch whole sequences).
  int64_t max_batch = 0;
  int64_t kv_block_size = 0;
  int64_t kv_pool_blocks = 0;
  int64_t prefill_chunk = 0;  // rollout.prefill_chunk (0: whole prompts)
  int64_t kv_pool_tokens() const { return kv_pool_blocks * kv_block_size; }
  // Decode steps captured as CUDA graphs (rollout.cuda_graphs on a CUDA
  // cluster, for a model decode_graph_blocker() admits); otherwise eager,
  // and why.
  bool decode_graphs = false;
  std::string eager_reason;
  int64_t kv_bytes_per_token = 0;  // per process
  int64_t budget_bytes = 0;  // memory_utilization × capacity; 0 when capacity is unknown
  MemoryEstimate memory;  // per process
};

struct SlotPlan {
  int rank = 0, node = 0, local = 0;
  std::vector<std::string> owners;  // "actor", "ref", "engine 0", ...
  int64_t peak_bytes = 0;  // with sleep: the largest owner; otherwise the sum
};

struct FitVerdict {
  std::string who;  // role name or "engine N"
  bool fits = true;
  // What is resident while it runs: the worst slot it occupies, or with
  // colocate.sleep its own total (the other owners sleep in CPU memory).
  int64_t peak_bytes = 0;
  int64_t capacity_bytes = 0;  // 0: unknown (no verdict)
  std::string reason;  // why it does not fit, with the figures; empty when it fits
  int64_t margin_bytes() const { return capacity_bytes - peak_bytes; }
};

// The resolved shape of one training step, the one place the runners read
// it from (and `meshrun plan` prints it).
struct StepPlan {
  int64_t prompts = 0;          // RL: batch.rollout prompts per step; 0 for SFT
  int64_t group_size = 1;       // RL: samples per prompt (n_samples_per_prompt)
  int64_t samples = 0;          // RL: prompts × group_size; SFT: batch.train sequences
  int64_t train_batch = 0;      // samples per optimizer step (batch.train)
  int epochs = 1;               // RL: passes over a step's samples (ppo.max_epochs)
  int64_t optimizer_steps = 1;  // per step: ⌊samples / train_batch⌋ × epochs (0: lint's error); 1 for SFT
  int64_t untrained = 0;        // RL: samples % train_batch, left out of every pass (lint warns)
  int64_t micro_scoring = 0;    // RL: samples per scoring forward per rank, every role (batch.micro_rollout)
  int micro_batch = 1;          // items (sequences, pairs) per micro-step per rank (batch.micro_train)
  int data_epochs = 1;          // SFT, DPO, RM: passes over the dataset (train.epochs)

  // From the recipe (batch and [ppo] settings) and its algorithm's row.
  static StepPlan from_recipe(const Recipe& recipe);
};

// How rollout engines sample, resolved from [rollout]: what the rollout
// stage's engines are given every round.
struct SamplingPlan {
  double temperature = 1.0;  // scoring and training divide logits by it too (as the engines sampled)
  double top_p = 1.0;
  int top_k = -1;  // -1: off
  int64_t max_prompt_len = 0;
  int64_t max_new_tokens = 0;
};

// Multi-turn episodes, resolved from [env] (enabled false: single-turn):
// what the rollout stage's episode driver reads.
struct EnvPlan {
  bool enabled = false;
  std::string script;                  // absolute
  int max_turns = 1;
  int64_t max_observation_tokens = 0;
  int64_t max_episode_tokens = 0;      // resolved (step_arithmetic::episode_tokens)
  std::string observation_role;
  double timeout_s = 0;

  static EnvPlan from_recipe(const Recipe& recipe);
};

// The resolved settings of an RL step ([ppo], [rollout], the algorithm's
// advantage row and the roles present): the one place the RL stages read
// them from (and `meshrun plan` prints them). Unused (enabled false) for
// the algorithms without rollouts.
struct RlPlan {
  bool enabled = false;
  SamplingPlan sampling;
  EnvPlan env;
  // The most tokens a trajectory holds (prompt and response) and its
  // response: max_prompt_len + max_new_tokens and max_new_tokens, or a
  // multi-turn episode's max_episode_tokens and what is left of it after
  // a prompt of one token.
  int64_t sequence_tokens() const {
    return env.enabled ? env.max_episode_tokens : sampling.max_prompt_len + sampling.max_new_tokens;
  }
  int64_t response_tokens() const { return env.enabled ? env.max_episode_tokens - 1 : sampling.max_new_tokens; }
  // The most tokens the policy samples for one trajectory (every turn's
  // max_new_tokens): the constant Dr. GRPO's loss_agg divides by.
  int64_t policy_tokens() const { return sampling.max_new_tokens * (env.enabled ? env.max_turns : 1); }
  // Rollouts: DAPO's dynamic sampling draws up to max_sample_rounds rounds
  // for informative prompt groups; num_episodes passes over the prompts.
  bool dynamic_sampling = false;
  int max_sample_rounds = 1;
  int num_episodes = 1;
  // Asynchronous rollouts (rollout.max_staleness ≥ 1): the engines
  // generate a step ahead while the trainer updates; older samples than
  // max_staleness versions are dropped.
  int64_t max_staleness = 0;
  // Partial rollouts (rollout.partial): the update's weights reach the
  // engines as it ends, interrupting the sequences in flight.
  bool partial = false;
  // Scoring: the reward function the hook script must define (the reward
  // role's `hook`; empty: [hooks] reward, used when the script has it).
  std::string reward_hook;
  bool hooks_parallel = false;
  bool has_ref = false;          // a ref model computes the KL's reference log-probs
  bool has_critic = false;
  bool has_reward_model = false;
  // A step's samples are consumed by one optimizer step (one epoch, train
  // batch = the step's samples) and nothing before the update needs the
  // actor's log-probs (no KL in the reward): the "old" log-probs are then
  // the training forward's own, detached (TRL's num_iterations = 1), and
  // Scoring runs no actor forward. The engine's log-probs still give the
  // parity metric, against the training forward's.
  bool old_log_probs_from_training = false;
  // Experience.
  AdvantageEstimator advantage = AdvantageEstimator::gae;
  double gamma = 1.0, lambd = 0.95;
  double reward_clip = 0;          // 0: none
  bool normalize_reward = false;
  int64_t overlong_buffer = 0;     // 0: no overlong penalty
  double overlong_penalty = 1.0;
  KlMode kl_mode = KlMode::reward;
  KlEstimator kl_estimator = KlEstimator::k1;
  double init_kl_coef = 0;         // the fixed coefficient, or the adaptive controller's start
  double kl_target = 0;            // 0: fixed
  double kl_horizon = 10000;
  // Updates.
  PolicyLoss policy_loss = PolicyLoss::ppo;
  double clip_low = 0.2, clip_high = 0.2;  // the ratio is clipped to [1 - low, 1 + high]
  double dual_clip = 0;                    // 0: off
  LossAggregation loss_agg = LossAggregation::token_mean;
  RolloutCorrection rollout_correction = RolloutCorrection::none;
  double rollout_is_cap = 2.0, rollout_is_low = 0.5, rollout_is_high = 2.0;
  // R3: the engines record each token's experts and the actor's forwards
  // (old log-probs and updates) take them instead of routing again.
  bool routing_replay = false;
  double entropy_coef = 0;
  double value_clip = 0.5;  // <= 0: unclipped

  static RlPlan from_recipe(const Recipe& recipe);
};

// Where [checkpoint] load points the run shell at start-up.
enum class ResumePolicy { automatic, never, require };
// "auto", "never", "require": the recipe's names.
const char* resume_policy_name(ResumePolicy policy);
std::optional<ResumePolicy> resume_policy_named(std::string_view name);

// What the run shell does around the steps, resolved from [checkpoint],
// [logging] and train.max_steps: the one place the shell and the
// checkpointer read them from (and `meshrun plan` prints them).
struct RunPlan {
  std::string recipe_file;         // recorded in each checkpoint's manifest with its checksum
  std::string algorithm;           // the algorithm's name, for the manifest
  long long seed = 0;              // the recipe's seed: initial weights, sampling, shuffles
  std::string checkpoint_path;     // the checkpoint root
  int save_every = 0;              // steps between checkpoints; 0: only after the last step
  int keep_last = 0;               // checkpoints kept (older ones rotated away)
  int64_t max_checkpoint_bytes = 0;  // 0: no size limit
  ResumePolicy resume = ResumePolicy::automatic;
  bool async_checkpoints = false;  // written in the background while training goes on
  bool save_hf = false;            // trained roles as Hugging Face directories in each checkpoint
  bool save_value_network = false; // ... the critic too
  std::string output;              // the final model's directory
  std::string log_dir;             // metrics.jsonl
  int log_every = 1;               // steps between metrics rows (and the last step)
  bool tensorboard = false;        // the rows also as TensorBoard scalars
  bool evaluates = false;          // [data] eval_path is set
  int eval_every = 0;              // steps between evaluations; 0: after the last step only
  int64_t max_steps = 0;           // 0: as many steps as the data gives
  // The resolved recipe (recipe/resolved.hpp): written to
  // log_dir/resolved.toml, its keys kept in checkpoints so that a resume
  // under another recipe names the keys that changed.
  std::string resolved_toml;
  std::vector<ResolvedKey> recipe_keys;
  std::string recipe_fingerprint;

  static RunPlan from_recipe(const Recipe& recipe);
  // Whether a checkpoint is saved after `step` (1-based; `last`: the run's final step).
  bool saves_after(int64_t step, bool last) const { return last || (save_every > 0 && step % save_every == 0); }
  bool logs_after(int64_t step, bool last) const { return last || step % log_every == 0; }
  // Whether the evaluation set is scored after `step` ([data] eval_path set).
  bool evaluates_after(int64_t step, bool last) const {
    return evaluates && (last || (eval_every > 0 && step % eval_every == 0));
  }
};

struct Plan {
  ClusterShape cluster;
  Algorithm algorithm = Algorithm::sft;
  StepPlan step;
  RlPlan rl;
  RunPlan run;
  std::vector<SlotPlan> slots;  // world_size entries, by rank
  std::vector<RolePlan> roles;
  std::vector<EnginePlan> engines;
  std::vector<FitVerdict> verdicts;
  bool sleep = false;
  // The sections the runners read as the recipe gives them (the schema
  // checked each value; paths are absolute): the dataset and its fields,
  // the hook script, DPO's loss.
  DataConfig data;
  HooksConfig hooks;
  DpoConfig dpo;

  const RolePlan* role(Role role) const;
};

// Builds the plan. Placement failures, unresolvable models and memory that
// does not fit are reported to `diagnostics` (located at the recipe keys that
// cause them); the returned Plan is as complete as the recipe allows.
Plan make_plan(const Recipe& recipe, const ClusterShape& cluster, Diagnostics& diagnostics);

// Human-readable tables (slots, meshes, memory, verdicts) and JSON.
std::string format_plan_text(const Plan& plan);
std::string format_plan_json(const Plan& plan);

}  // namespace meshrun
