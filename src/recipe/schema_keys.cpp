// Every recipe key, bound to its field and documented in one place.
// docs/recipes.md is generated from these entries; keep the prose for users.
#include <cmath>
#include <limits>
#include <sstream>
#include <type_traits>

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/recipe/schema.hpp"
#include "schema_internal.hpp"

namespace meshrun::schema_detail {
namespace {

template <class T>
constexpr ValueType value_type_of() {
  if constexpr (std::is_same_v<T, bool>) return ValueType::boolean;
  else if constexpr (std::is_integral_v<T>) return ValueType::integer;
  else if constexpr (std::is_floating_point_v<T>) return ValueType::number;
  else if constexpr (std::is_same_v<T, std::string>) return ValueType::string;
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return ValueType::string_list;
  else return ValueType::string_list_list;
}

template <class T>
T convert(const Value& value) {
  if constexpr (std::is_same_v<T, bool>) return std::get<bool>(value);
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(std::get<long long>(value));
  else if constexpr (std::is_floating_point_v<T>) {
    if (auto* i = std::get_if<long long>(&value)) return static_cast<T>(*i);
    return static_cast<T>(std::get<double>(value));
  } else return std::get<T>(value);
}

template <class T>
std::string default_text_of(const T& value) {
  if constexpr (std::is_same_v<T, bool>) return value ? "true" : "false";
  else if constexpr (std::is_integral_v<T>) return std::to_string(value);
  else if constexpr (std::is_floating_point_v<T>) {
    std::ostringstream out;
    out << value;
    return out.str();
  } else if constexpr (std::is_same_v<T, std::string>) return "\"" + value + "\"";
  else return value.empty() ? "[]" : "…";
}

// Binds the keys of one section struct. `Get` returns the struct inside a
// Recipe (for roles, the role named by the second argument).
template <class Section>
class Binder {
 public:
  using Get = Section& (*)(Recipe&, std::string_view);
  Binder(Schema& schema, std::string prefix, Get get) : schema_(schema), prefix_(std::move(prefix)), get_(get) {}

  template <class T>
  KeyRef key(const std::string& name, T Section::*member, std::string doc) {
    KeySpec spec;
    spec.path = prefix_.empty() ? name : prefix_ + "." + name;
    spec.type = value_type_of<T>();
    spec.default_text = default_text_of(Section{}.*member);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      spec.field_min = std::numeric_limits<T>::min();
      spec.field_max = std::numeric_limits<T>::max();
    }
    spec.doc = std::move(doc);
    Get get = get_;
    spec.assign = [get, member](Recipe& recipe, std::string_view role, const Value& value) {
      get(recipe, role).*member = convert<T>(value);
    };
    // The getters are written once for assignment (they return a mutable
    // section); reading through them leaves the recipe untouched.
    spec.read = [get, member](const Recipe& recipe, std::string_view role) -> Value {
      const T& field = get(const_cast<Recipe&>(recipe), role).*member;
      if constexpr (std::is_same_v<T, bool>) return field;
      else if constexpr (std::is_integral_v<T>) return static_cast<long long>(field);
      else if constexpr (std::is_floating_point_v<T>) return static_cast<double>(field);
      else return field;
    };
    schema_.keys.push_back(std::move(spec));
    return KeyRef{schema_.keys.back()};
  }

  // A string key whose values are the names of a table's rows
  // (recipe/algorithms.hpp), stored as the row's enum; the doc lists each
  // row's own.
  template <class Id, class Row, std::size_t N>
  KeyRef choice(const std::string& name, Id Section::*member, const Row (&rows)[N], std::string doc) {
    KeySpec spec;
    spec.path = prefix_.empty() ? name : prefix_ + "." + name;
    spec.type = ValueType::string;
    spec.default_text = "\"" + std::string(row_of(rows, Section{}.*member).name) + "\"";
    for (const Row& row : rows) {
      spec.choices.emplace_back(row.name);
      doc += " `" + std::string(row.name) + "`: " + std::string(row.doc);
    }
    spec.doc = std::move(doc);
    Get get = get_;
    spec.assign = [get, member, &rows](Recipe& recipe, std::string_view role, const Value& value) {
      // The loader checked the value against the choices before assigning.
      const Row* row = row_named(rows, std::get<std::string>(value));
      if (!row) throw std::logic_error("schema: unchecked choice for " + std::get<std::string>(value));
      get(recipe, role).*member = row->id;
    };
    spec.read = [get, member, &rows](const Recipe& recipe, std::string_view role) -> Value {
      return std::string(row_of(rows, get(const_cast<Recipe&>(recipe), role).*member).name);
    };
    schema_.keys.push_back(std::move(spec));
    return KeyRef{schema_.keys.back()};
  }

 private:
  Schema& schema_;
  std::string prefix_;
  Get get_;
};

// The RoleConfig of [roles.NAME] (the loader created it from the row).
RoleConfig& role_config_named(Recipe& recipe, std::string_view name) {
  const std::optional<Role> row = meshrun::role_named(name);
  for (auto& role : recipe.roles)
    if (row && role.role == *row) return role;
  throw std::logic_error("role not created before assignment: " + std::string(name));
}

void section(Schema& schema, std::string path, std::string doc) {
  schema.sections.push_back({std::move(path), std::move(doc)});
}

void bind_top(Schema& s) {
  section(s, "", "Top-level keys.");
  Binder<Recipe> b(s, "", [](Recipe& r, std::string_view) -> Recipe& { return r; });
  b.key("name", &Recipe::name,
        "A name for the run, used in logs and job names.")
      .default_is("the recipe file's name without .toml");
  b.choice("algorithm", &Recipe::algorithm, kAlgorithms, "What to train.")
      .required()
      .default_is("none (required)");
  b.key("seed", &Recipe::seed,
        "Base random seed. Replicas that must agree (weight init) use it as is; data-parallel "
        "ranks offset it by their dp rank where their data must differ.")
      .min(0);
  // `include` is handled by the loader before any key is bound; it is listed
  // so that docs and suggestions know it.
  KeySpec include;
  include.path = "include";
  include.type = ValueType::string;
  include.doc =
      "A base recipe (or a list of them), path relative to this file. Its tables are read first "
      "and this file overrides them key by key. Includes may nest; cycles are errors. A base included twice "
      "is applied at each place it is named; at most 64 files are read in all.";
  include.default_text = "none";
  include.type_text = "string or array of strings";
  include.path_kind = PathKind::file;
  s.keys.push_back(std::move(include));
}

void bind_launch(Schema& s) {
  section(s, "launch", "How processes are started and how they meet.");
  Binder<LaunchConfig> b(s, "launch", [](Recipe& r, std::string_view) -> LaunchConfig& { return r.launch; });
  b.key("type", &LaunchConfig::type,
        "The launcher: `local` spawns procs_per_node workers itself; `ray` runs on a Ray cluster as one job "
        "(`meshrun submit RECIPE --ray`); `torchrun`, `horovod`, `slurm` and `mpi` read the environment those "
        "launchers set; `auto` picks the first whose variables are present.")
      .choices({"local", "ray", "torchrun", "horovod", "slurm", "mpi", "auto"});
  b.key("nodes", &LaunchConfig::nodes, "Number of nodes (machines) in the job.").min(1);
  b.key("procs_per_node", &LaunchConfig::procs_per_node,
        "Processes per node; on cuda, one per GPU.")
      .min(1);
  b.key("device", &LaunchConfig::device, "Where tensors live.")
      .choices({"cuda", "cpu"})
      .synonym("gpu", "cuda")
      .synonym("nvidia", "cuda");
  b.key("backend", &LaunchConfig::backend,
        "Collective backend; `auto` is nccl on cuda and gloo on cpu.")
      .choices({"nccl", "gloo", "auto"});
  b.key("timeout_minutes", &LaunchConfig::timeout_minutes,
        "Timeout of the rendezvous and of every collective.")
      .min(0.01)  // 0.6 s: less is no time to answer at all
      .max(10080);  // a week
  b.key("master_port", &LaunchConfig::master_port,
        "TCP port of the rendezvous store on the master node (when the launcher does not set "
        "MASTER_PORT).")
      .min(1)
      .max(65535);
  b.key("max_restarts", &LaunchConfig::max_restarts,
        "How often the local launcher (or the Ray job) restarts the workers after a failure; training resumes from the newest "
        "checkpoint. Recipe, data, hook and model errors, which a resume would repeat, are not restarted. Under "
        "SLURM, MPI or torchrun the job exits non-zero and resumes when run again.")
      .min(0);
  b.key("restart_delay", &LaunchConfig::restart_delay, "Seconds between a failure and the restart.")
      .min(0)
      .max(86400);  // a day: beyond it the seconds overflow the clock's integer (and no one waits that long)
  b.key("address", &LaunchConfig::address,
        "The Ray cluster's job server, as `ray job submit --address` takes it (the dashboard's `http://host:port`), "
        "for `meshrun submit --ray` and `meshrun plan --ray`; empty: the RAY_ADDRESS variable.");
  b.key("memory_gb", &LaunchConfig::memory_gb,
        "Memory of one device in GiB, for the plan's fit verdict. 0 means 80 on cuda; on cpu, "
        "`meshrun plan` uses the host's memory divided by procs_per_node and lint skips the check.")
      .min(0)
      .max(kMaxDeviceMemoryGb);
}

void bind_mesh(Schema& s, const std::string& prefix, MeshConfig& (*get)(Recipe&, std::string_view)) {
  Binder<MeshConfig> b(s, prefix, get);
  b.key("tp", &MeshConfig::tp, "Tensor-parallel degree: ranks that split each layer's weights.")
      .min(1);
  b.key("sp", &MeshConfig::sp, "Sequence-parallel degree: ranks that split each sequence.")
      .min(1);
  b.key("dp", &MeshConfig::dp,
        "Data-parallel degree; -1 infers it as processes / (tp × sp).")
      .min(1)
      .also_allowed({-1});
  b.key("ep", &MeshConfig::ep,
        "Expert-parallel degree, within dp: each group of ep data-parallel ranks splits a mixture of experts' "
        "experts among them and exchanges tokens with all-to-all (the attention stays dp × sp × tp). Must divide "
        "dp and the number of experts.")
      .min(1);
}

void bind_batch(Schema& s) {
  section(s, "batch", "Batch sizes, in samples (OpenRLHF's names).");
  Binder<BatchConfig> b(s, "batch", [](Recipe& r, std::string_view) -> BatchConfig& { return r.batch; });
  b.key("micro_train", &BatchConfig::micro_train,
        "Samples per process per forward/backward pass (micro_train_batch_size).")
      .min(1);
  b.key("train", &BatchConfig::train,
        "Samples per optimizer step over all data-parallel ranks (train_batch_size). Gradient "
        "accumulation = train / (micro_train × dp).")
      .min(1);
  b.key("micro_rollout", &BatchConfig::micro_rollout,
        "Samples per process per generation / experience pass (micro_rollout_batch_size).")
      .min(1);
  b.key("rollout", &BatchConfig::rollout,
        "Prompts per PPO rollout (rollout_batch_size); each yields n_samples_per_prompt samples.")
      .min(1);
  b.key("n_samples_per_prompt", &BatchConfig::n_samples_per_prompt,
        "Responses generated for each prompt.")
      .min(1);
}

void bind_roles(Schema& s) {
  section(s, "roles.*",
          "One table per model role: `[roles.actor]`, `[roles.critic]`, `[roles.reward]`, "
          "`[roles.ref]`. A role exists when its table does.");
  Binder<RoleConfig> b(s, "roles.*", &role_config_named);
  b.key("model", &RoleConfig::model,
        "A Hugging Face style model directory (config.json, safetensors), a hub name `org/name[@revision]` "
        "found in the local Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub; never "
        "downloaded; a public name not in the cache still plans from meshrun's built-in table), or a built-in "
        "preset such as `builtin:tiny`.")
      .path(PathKind::reference);
  b.key("nodes", &RoleConfig::nodes, "Nodes this role occupies.")
      .min(1)
      .default_is("[launch] nodes");
  b.key("procs_per_node", &RoleConfig::procs_per_node, "Processes of this role on each of its nodes.")
      .min(1)
      .default_is("[launch] procs_per_node");
  b.key("zero_stage", &RoleConfig::zero_stage,
        "ZeRO stage over the data-parallel ranks: 0 replicates everything, 1 shards optimizer "
        "states, 2 also gradients, 3 also parameters.")
      .min(0)
      .max(3);
  b.key("dtype", &RoleConfig::dtype, "Parameter and compute dtype (master weights stay fp32).")
      .choices({"bf16", "fp16", "fp32"});
  b.key("learning_rate", &RoleConfig::learning_rate, "Peak AdamW learning rate.").min(0);
  b.key("lr_scheduler", &RoleConfig::lr_scheduler,
        "Learning-rate schedule after warmup: cosine or linear decay to min_lr_ratio × "
        "learning_rate at the last step, or constant.")
      .choices({"cosine", "linear", "constant"});
  b.key("warmup_ratio", &RoleConfig::warmup_ratio,
        "Fraction of the optimizer steps spent warming the learning rate up linearly from 0.")
      .min(0)
      .max(1);
  b.key("min_lr_ratio", &RoleConfig::min_lr_ratio, "Final learning rate as a fraction of learning_rate.")
      .min(0)
      .max(1);
  b.key("weight_decay", &RoleConfig::weight_decay,
        "AdamW decoupled weight decay (not applied to norms and biases).")
      .min(0);
  b.key("adam_beta1", &RoleConfig::adam_beta1, "AdamW first-moment decay.").min(0).max_exclusive(1);
  b.key("adam_beta2", &RoleConfig::adam_beta2, "AdamW second-moment decay.").min(0).max_exclusive(1);
  b.key("adam_eps", &RoleConfig::adam_eps, "AdamW epsilon.").min_exclusive(0);
  b.key("max_norm", &RoleConfig::max_norm,
        "Clip gradients to this global L2 norm, measured across all shards; 0 disables clipping.")
      .min(0);
  b.key("gradient_checkpointing", &RoleConfig::gradient_checkpointing,
        "Recompute each layer's activations in backward instead of storing them.");
  b.key("offload", &RoleConfig::offload, "Keep optimizer states in CPU memory.");
  b.key("lora_rank", &RoleConfig::lora_rank,
        "LoRA adapters of this rank on lora_targets; the base weights are frozen (no gradients, no optimizer "
        "state) and checkpoint.output gets the merged model plus adapter/ in PEFT format. 0: full training.")
      .min(0);
  b.key("lora_alpha", &RoleConfig::lora_alpha, "LoRA scaling: the adapter's output is multiplied by alpha / rank.")
      .min_exclusive(0);
  b.key("lora_targets", &RoleConfig::lora_targets,
        "Projections that get adapters, by module name: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
        "down_proj.");
  b.key("lora_dropout", &RoleConfig::lora_dropout, "Dropout on the adapters' input while training.")
      .min(0)
      .max_exclusive(1);
  b.key("router_aux_loss_coef", &RoleConfig::router_aux_loss_coef,
        "Mixtures of experts (Qwen3-MoE, Mixtral, OLMoE): the weight of the routers' load-balancing loss added "
        "to the role's training loss (transformers' load_balancing_loss_func; reported as moe/aux_loss). 0 "
        "turns it off; -1: the model's.")
      .min(0)
      .also_allowed({-1})
      .default_is("the model's config.json router_aux_loss_coef");
  b.key("hook", &RoleConfig::hook,
        "reward role only: the name of a Lua function in [hooks] script that computes the whole "
        "reward, instead of a reward model. The role then takes no processes.");
  section(s, "roles.*.mesh", "Per-role mesh; keys not set here come from [mesh].");
  bind_mesh(s, "roles.*.mesh",
            [](Recipe& r, std::string_view role) -> MeshConfig& { return role_config_named(r, role).mesh; });
}

void bind_rollout(Schema& s) {
  section(s, "rollout", "The rollout (generation) engines of PPO.");
  Binder<RolloutConfig> b(s, "rollout", [](Recipe& r, std::string_view) -> RolloutConfig& { return r.rollout; });
  b.key("engines", &RolloutConfig::engines, "Number of rollout engines (vllm_num_engines).").min(1);
  b.key("tensor_parallel", &RolloutConfig::tensor_parallel,
        "Processes per engine, splitting its weights (vllm_tensor_parallel_size); all on one node.")
      .min(1);
  b.key("memory_utilization", &RolloutConfig::memory_utilization,
        "Fraction of a device's memory an engine may use for weights and KV cache "
        "(vllm_gpu_memory_utilization).")
      .min_exclusive(0)
      .max(1);
  b.key("max_prompt_len", &RolloutConfig::max_prompt_len, "Longest prompt in tokens; longer ones are truncated.").min(1);
  b.key("max_new_tokens", &RolloutConfig::max_new_tokens, "Most tokens generated per response.").min(1);
  b.key("temperature", &RolloutConfig::temperature, "Sampling temperature; 0 is greedy.").min(0);
  b.key("top_p", &RolloutConfig::top_p, "Nucleus sampling: smallest token set with this much probability.")
      .min_exclusive(0)
      .max(1);
  b.key("top_k", &RolloutConfig::top_k, "Sample among the k most likely tokens; -1 disables it.")
      .min(1)
      .also_allowed({-1});
  b.key("max_batch", &RolloutConfig::max_batch,
        "Most sequences an engine keeps live at once (vLLM's max_num_seqs); a stopped one's place goes to the "
        "next pending sample at once. 0: the engine's whole share of a step.")
      .min(0);
  b.key("kv_cache_mb", &RolloutConfig::kv_cache_mb,
        "Megabytes per process of an engine's paged KV cache. 0: on a device of known memory what "
        "memory_utilization leaves after the weights, otherwise room for max_batch whole sequences; never more "
        "than max_batch whole sequences use. Sequences that outgrow it are preempted and resumed.")
      .min(0);
  b.key("kv_block_size", &RolloutConfig::kv_block_size,
        "Tokens per block of the paged KV cache (vLLM's block_size); the samples of a prompt share its full "
        "blocks.")
      .min(1)
      .max(1024);
  b.key("prefill_chunk", &RolloutConfig::prefill_chunk,
        "Tokens an engine step spends on prompts (chunked prefill, vLLM's max_num_batched_tokens): the live "
        "sequences' decode tokens come first, the rest prefills waiting prompts a chunk at a time, so a long "
        "prompt delays decoding by at most one chunk. 0: each prompt whole at admission.")
      .min(0);
  b.key("cuda_graphs", &RolloutConfig::cuda_graphs,
        "On CUDA, each decode step runs as a CUDA graph captured per batch size (1, 2, 4, 8, then multiples of 8) "
        "and key width, the first time a step needs it, and is replayed after (vLLM's enforce_eager = false). "
        "Engines of a mixture of experts, with tensor parallelism or with dynamic or longrope rope scaling run "
        "eagerly; `meshrun plan` says which. false: every step eager.");
  b.key("max_staleness", &RolloutConfig::max_staleness,
        "Asynchronous RL: 0 runs each step's rollout, scoring and update in turn; N ≥ 1 lets the engines (on "
        "processes of their own) generate the next step's samples while the trainer updates, so a step trains "
        "on samples of a policy one update older; samples more than N versions old are never trained "
        "(async/dropped_stale). Weights reach the engines after each update.")
      .min(0)
      .max(1024);
  b.key("partial", &RolloutConfig::partial,
        "Asynchronous RL (max_staleness ≥ 1): true loads the new weights into the engines the moment an update "
        "ends, interrupting the sequences in flight, which drop their KV cache and resume on the new weights "
        "(each token records the version that sampled it; a trajectory's staleness is its oldest token's); "
        "false lets the round finish on the weights it started with and loads them after.");
}

void bind_colocate(Schema& s) {
  section(s, "colocate", "Roles that share processes (OpenRLHF's hybrid engine).");
  Binder<ColocateConfig> b(s, "colocate", [](Recipe& r, std::string_view) -> ColocateConfig& { return r.colocate; });
  b.key("all", &ColocateConfig::all,
        "Every role and the rollout engines share the same processes.");
  b.key("groups", &ColocateConfig::group_names,
        "Lists of role names that share processes, e.g. [[\"actor\",\"ref\"],[\"critic\",\"reward\"]]; "
        "\"rollout\" puts the engines in a group.");
  b.key("sleep", &ColocateConfig::sleep,
        "Move an idle role's parameters and optimizer states to CPU memory between phases, so "
        "colocated roles need the memory of the largest, not of all together.");
}

void bind_ppo(Schema& s) {
  section(s, "ppo", "PPO and its REINFORCE-family variants.");
  Binder<PpoConfig> b(s, "ppo", [](Recipe& r, std::string_view) -> PpoConfig& { return r.ppo; });
  b.key("init_kl_coef", &PpoConfig::init_kl_coef, "Initial KL penalty coefficient.").min(0);
  b.key("kl_target", &PpoConfig::kl_target, "Target KL of the adaptive controller; 0 keeps the coefficient fixed.").min(0);
  b.key("kl_horizon", &PpoConfig::kl_horizon, "Horizon of the adaptive KL controller.").min_exclusive(0);
  b.choice("kl_estimator", &PpoConfig::kl_estimator, kKlEstimators, "KL estimator (Schulman's).");
  b.choice("kl_mode", &PpoConfig::kl_mode, kKlModes, "Where the KL to the ref model goes (needs [roles.ref]).");
  b.choice("rollout_correction", &PpoConfig::rollout_correction, kRolloutCorrections,
           "How the policy loss corrects for the engines' sampling distribution π_rollout differing from the "
           "trained policy's before the update π_old (numerics, lag), per policy token by r = π_old/π_rollout; "
           "logged as rollout_is/*.");
  b.key("rollout_is_cap", &PpoConfig::rollout_is_cap, "rollout_correction \"tis\": the importance weights' cap.")
      .min(1);
  b.key("rollout_is_low", &PpoConfig::rollout_is_low,
        "rollout_correction \"seq-mask\" and \"icepop\": ratios below this leave the loss.")
      .min_exclusive(0)
      .max(1);
  b.key("rollout_is_high", &PpoConfig::rollout_is_high,
        "rollout_correction \"seq-mask\" and \"icepop\": ratios above this leave the loss.")
      .min(1);
  b.key("routing_replay", &PpoConfig::routing_replay,
        "Mixtures of experts: the engines record which experts each token went to and the actor's forwards (old "
        "log-probs and updates) use those experts, weighed by their own router, instead of routing again (R3, "
        "rollout routing replay), so routing flips between engine and trainer numerics do not move the log-probs.");
  b.key("gamma", &PpoConfig::gamma, "Discount factor.").min(0).max(1);
  b.key("lambd", &PpoConfig::lambd, "GAE lambda.").min(0).max(1);
  b.key("eps_clip", &PpoConfig::eps_clip, "Policy ratio clip range: ratios below 1 - eps_clip are clipped.")
      .min_exclusive(0);
  b.key("eps_clip_high", &PpoConfig::eps_clip_high,
        "Upper clip range (DAPO's clip-higher): ratios above 1 + eps_clip_high are clipped; at least eps_clip.")
      .min_exclusive(0)
      .default_is("ppo.eps_clip");
  b.key("dual_clip", &PpoConfig::dual_clip,
        "Dual-clip PPO: for negative advantages the loss is bounded by dual_clip × |A|; 0 disables, else > 1.")
      .min(0);
  b.choice("policy_loss", &PpoConfig::policy_loss, kPolicyLosses, "The actor's surrogate loss.");
  b.choice("loss_agg", &PpoConfig::loss_agg, kLossAggregations,
           "How per-token policy, entropy and KL-loss terms become one number.");
  b.key("value_clip", &PpoConfig::value_clip, "Value function clip range.").min_exclusive(0);
  b.key("entropy_coef", &PpoConfig::entropy_coef, "Entropy bonus coefficient.").min(0);
  b.choice("advantage", &PpoConfig::advantage, kAdvantageEstimators,
           "Advantage estimator; those that compare the samples of one prompt need n_samples_per_prompt ≥ 2.");
  b.key("dynamic_sampling", &PpoConfig::dynamic_sampling,
        "DAPO's dynamic sampling: drop prompt groups whose rewards are all equal and generate for more prompts "
        "until batch.rollout informative ones are collected or max_sample_rounds rounds have run; the step "
        "trains on what there is (logged as dynamic_sampling/*). Needs n_samples_per_prompt ≥ 2.");
  b.key("max_sample_rounds", &PpoConfig::max_sample_rounds,
        "Dynamic sampling: at most this many rounds of generation per step.")
      .min(1);
  b.key("overlong_buffer", &PpoConfig::overlong_buffer,
        "DAPO's soft overlong penalty: responses longer than max_new_tokens - overlong_buffer lose up to "
        "overlong_penalty of reward, linearly over the buffer; 0 disables.")
      .min(0);
  b.key("overlong_penalty", &PpoConfig::overlong_penalty,
        "The reward lost by a response of max_new_tokens tokens under overlong_buffer.")
      .min(0);
  b.key("normalize_reward", &PpoConfig::normalize_reward,
        "Normalise scalar rewards by their running mean and standard deviation over the run.");
  b.key("reward_clip", &PpoConfig::reward_clip,
        "Clip scalar rewards (after normalisation) to [-reward_clip, reward_clip]; 0 disables.")
      .min(0);
  b.key("max_epochs", &PpoConfig::max_epochs, "Passes over each rollout batch.").min(1);
  b.key("num_episodes", &PpoConfig::num_episodes, "Passes over the prompt dataset.").min(1);
}

void bind_dpo(Schema& s) {
  section(s, "dpo", "Direct preference optimisation (algorithm = \"dpo\").");
  Binder<DpoConfig> b(s, "dpo", [](Recipe& r, std::string_view) -> DpoConfig& { return r.dpo; });
  b.key("beta", &DpoConfig::beta,
        "Strength of the KL constraint to the reference: the implicit rewards are β × (policy − reference) "
        "log-probabilities of a response.")
      .min_exclusive(0);
  b.choice("loss", &DpoConfig::loss, kDpoLosses, "The preference loss.");
  b.key("label_smoothing", &DpoConfig::label_smoothing,
        "cDPO: the probability that a pair's preference label is flipped (sigmoid loss only).")
      .min(0)
      .max_exclusive(0.5);
}

void bind_data(Schema& s) {
  section(s, "data", "The dataset: prompt/response pairs (SFT), prompts (PPO) or preference pairs (DPO, RM).");
  Binder<DataConfig> b(s, "data", [](Recipe& r, std::string_view) -> DataConfig& { return r.data; });
  b.key("path", &DataConfig::path,
        "A JSONL file or a file of one JSON array of records (relative to the recipe), or a hub dataset "
        "`org/name[@revision]` in the local Hugging Face cache whose snapshot holds one JSON/JSONL file; meshrun "
        "never downloads. Every data key below may be a dotted path into nested objects "
        "(`reward_model.ground_truth`) when the record has no member of that exact name.")
      .path(PathKind::reference);
  b.key("input_key", &DataConfig::input_key, "JSON key of the prompt.");
  b.key("output_key", &DataConfig::output_key, "JSON key of the response (SFT).");
  b.key("eval_path", &DataConfig::eval_path,
        "An evaluation set in the training data's form (a JSONL file or a hub dataset): evaluated every "
        "train.eval_steps steps and after the last, over all of it across the dp ranks (SFT: eval_loss; DPO: "
        "eval_loss, eval_reward_accuracy, eval_reward_margin; RM: eval_loss, eval_accuracy, eval_margin).")
      .path(PathKind::reference)
      .default_is("none");
  b.key("chosen_key", &DataConfig::chosen_key,
        "JSON key of a preference pair's preferred response (DPO, RM): a string, or a list of messages that follow "
        "the prompt's.");
  b.key("rejected_key", &DataConfig::rejected_key,
        "JSON key of a preference pair's dispreferred response (DPO, RM), in the chosen response's form.");
  b.key("label_key", &DataConfig::label_key,
        "JSON key of each prompt's label (any JSON value: the reference answer of a verifiable reward). It "
        "travels with its prompt's samples; reward hooks read it with batch:label(i). Empty: no labels.")
      .default_is("none");
  b.key("messages_key", &DataConfig::messages_key,
        "JSON key of chat-style samples (a list of {role, content}); such samples are rendered "
        "with the tokenizer's chat template; data.loss_turns says which assistant messages the loss covers.");
  b.key("chat_template_kwargs", &DataConfig::chat_template_kwargs,
        "Extra variables every chat template render sees (SFT, PPO prompts, DPO/RM pairs, eval data), like "
        "transformers' apply_chat_template keyword arguments: `{ enable_thinking = false }` turns Qwen3's "
        "thinking off. Values are booleans, numbers, strings, arrays or tables (no dates), nested at most 16 "
        "deep; messages, add_generation_prompt, bos_token and eos_token are set by the renderer and refused.")
      .free_table()
      .default_is("{}");
  b.choice("loss_turns", &DataConfig::loss_turns, kLossTurns,
           "SFT chat samples: which assistant turns the loss covers.");
  b.key("tokenizer", &DataConfig::tokenizer,
        "Tokenizer: a model directory (tokenizer.json or tokenizer.model) or a hub name in the local Hugging Face "
        "cache, `builtin:bytes`, or empty for the actor's model (byte-level for built-in presets).")
      .path(PathKind::reference)
      .default_is("the actor's model");
  b.key("max_len", &DataConfig::max_len, "Longest training sequence in tokens; longer ones are truncated.").min(2);
  b.key("packing", &DataConfig::packing, "Pack several samples into one sequence (no attention across them).");
}

void bind_train(Schema& s) {
  section(s, "train", "The training loop.");
  Binder<TrainConfig> b(s, "train", [](Recipe& r, std::string_view) -> TrainConfig& { return r.train; });
  b.key("epochs", &TrainConfig::epochs, "SFT: passes over the dataset.").min(1);
  b.key("max_steps", &TrainConfig::max_steps,
        "Stop after this many optimizer steps; -1: run all epochs (SFT) or episodes (PPO).")
      .min(1)
      .also_allowed({-1});
  b.key("eval_steps", &TrainConfig::eval_steps,
        "With data.eval_path: evaluate every this many steps; 0 evaluates after the last step only.")
      .min(0);
  b.key("bucket_mb", &TrainConfig::bucket_mb,
        "Size of the gradient buckets all-reduced (or reduce-scattered) while backward runs.")
      .min_exclusive(0)
      .max(1 << 20);  // 1 TiB: a bucket larger than any model, whose element count still fits an integer
  b.key("max_skipped_steps", &TrainConfig::max_skipped_steps,
        "Consecutive optimizer steps with non-finite gradients (skipped, no update) after which the run stops "
        "with an error; -1 never stops. With fp16 a skip that still lowers the loss scale does not count, only "
        "those at the minimum scale do.")
      .min(1)
      .also_allowed({-1});
}

void bind_checkpoint(Schema& s) {
  section(s, "checkpoint", "When and where state is saved, and how a run resumes.");
  Binder<CheckpointConfig> b(s, "checkpoint", [](Recipe& r, std::string_view) -> CheckpointConfig& { return r.checkpoint; });
  b.key("path", &CheckpointConfig::path, "Folder of the checkpoints (global_step_N/ inside).").path(PathKind::file);
  b.key("save_steps", &CheckpointConfig::save_steps, "Save every this many steps; -1 saves only at the end.")
      .min(1)
      .also_allowed({-1});
  b.key("keep_last", &CheckpointConfig::keep_last, "Checkpoints kept; older ones are deleted.").min(1);
  b.key("max_size_gb", &CheckpointConfig::max_size_gb, "Delete the oldest checkpoints beyond this total size; 0: no limit.").min(0).max(1e9);
  b.key("save_value_network", &CheckpointConfig::save_value_network,
        "Also save the critic, in each checkpoint's Hugging Face copy (with save_hf).");
  b.key("save_hf", &CheckpointConfig::save_hf, "Also write the actor as a Hugging Face model directory.");
  b.key("load", &CheckpointConfig::load,
        "auto resumes from the newest complete checkpoint if any; require fails without one; "
        "never starts fresh, moving the checkpoints already in checkpoint.path into a replaced-TIME folder "
        "there (kept, not rotated against the new run's).")
      .choices({"auto", "never", "require"});
  b.key("output", &CheckpointConfig::output, "Folder of the final model (Hugging Face format).").path(PathKind::file);
  b.key("async", &CheckpointConfig::async,
        "Write checkpoints in a background thread: training stops only to snapshot the state into CPU memory "
        "(counted in the plan), and the checkpoint is committed once every rank has written its files.");
}

void bind_hooks(Schema& s) {
  section(s, "hooks", "Lua (LuaJIT) hooks.");
  Binder<HooksConfig> b(s, "hooks", [](Recipe& r, std::string_view) -> HooksConfig& { return r.hooks; });
  b.key("script", &HooksConfig::script, "The Lua script, relative to the recipe.").path(PathKind::file).default_is("none");
  b.key("reward", &HooksConfig::reward,
        "Function for the reward hook point; looked up as a global of the script or in the table "
        "it returns. When set explicitly it must exist.");
  b.key("on_rollout", &HooksConfig::on_rollout, "Function for the on_rollout hook point.");
  b.key("on_step", &HooksConfig::on_step, "Function for the on_step hook point.");
  b.key("sandbox", &HooksConfig::sandbox,
        "Run hooks without os.execute, io.popen, ffi, debug, bytecode or files outside the script's "
        "folder, with the JIT off so instruction_limit always fires (pattern matching counts too).");
  b.key("instruction_limit", &HooksConfig::instruction_limit,
        "VM instructions one hook call may run before it is stopped.")
      .min(1000);
  b.key("timeout_s", &HooksConfig::timeout_s,
        "Seconds one hook call may run before it is stopped; the error names the hook and the last "
        "sample it read.")
      .min_exclusive(0);
  b.key("memory_limit_mb", &HooksConfig::memory_limit_mb,
        "MiB the script's Lua state may hold (garbage included until collected) while a hook runs; "
        "past it the call fails with \"memory limit of N MiB exceeded\" at the script's line.")
      .min(1)
      .max(1 << 20);
  b.key("parallel", &HooksConfig::parallel,
        "Run the reward hook on every rank over its own share of the samples (whole prompt groups) "
        "instead of on rank 0 only.");
}

void bind_env(Schema& s) {
  section(s, "env",
          "Multi-turn episodes (RL): a Lua environment answers each model turn with an observation the episode "
          "continues from; only the tokens the policy sampled are in the loss.");
  Binder<EnvConfig> b(s, "env", [](Recipe& r, std::string_view) -> EnvConfig& { return r.env; });
  b.key("script", &EnvConfig::script,
        "The environment's Lua script, relative to the recipe: it defines reset(ctx) and step(state, reply, ctx) "
        "(as globals or in the table it returns) and runs in the hooks' sandbox with [hooks]' instruction and "
        "memory limits.")
      .path(PathKind::file)
      .default_is("none");
  b.key("max_turns", &EnvConfig::max_turns,
        "Model turns per episode; after the last one step() still scores the reply, then the episode ends.")
      .min(1)
      .max(1024);
  b.key("max_observation_tokens", &EnvConfig::max_observation_tokens,
        "An observation is cut to this many tokens (counted as env/observation_cut_frac).")
      .min(1);
  b.key("max_episode_tokens", &EnvConfig::max_episode_tokens,
        "Tokens of a whole episode (prompt, turns, observations); it ends when they are reached. 0: "
        "max_prompt_len + max_turns × (max_new_tokens + max_observation_tokens).")
      .min(0);
  b.key("observation_role", &EnvConfig::observation_role,
        "The chat role observations are rendered with when the prompts are chats (the chat template's delta "
        "after the model's turn).");
  b.key("timeout_s", &EnvConfig::timeout_s,
        "Seconds one env call (reset or step) may run before the run stops with its location.")
      .min_exclusive(0);
}

void bind_logging(Schema& s) {
  section(s, "logging", "Metrics.");
  Binder<LoggingConfig> b(s, "logging", [](Recipe& r, std::string_view) -> LoggingConfig& { return r.logging; });
  b.key("steps", &LoggingConfig::steps, "Log every this many steps.").min(1);
  b.key("dir", &LoggingConfig::dir, "Folder of metrics.jsonl (and TensorBoard's event files).").path(PathKind::file);
  b.key("tensorboard", &LoggingConfig::tensorboard,
        "Also write every metric as a TensorBoard scalar to events.out.tfevents.* in logging.dir.");
}

}  // namespace

void bind_all_keys(Schema& schema) {
  bind_top(schema);
  bind_launch(schema);
  section(schema, "mesh", "Device mesh of every trained role, unless [roles.NAME.mesh] overrides it.");
  bind_mesh(schema, "mesh", [](Recipe& r, std::string_view) -> MeshConfig& { return r.mesh; });
  bind_batch(schema);
  bind_roles(schema);
  bind_rollout(schema);
  bind_colocate(schema);
  bind_ppo(schema);
  bind_dpo(schema);
  bind_data(schema);
  bind_train(schema);
  bind_checkpoint(schema);
  bind_hooks(schema);
  bind_env(schema);
  bind_logging(schema);
}

}  // namespace meshrun::schema_detail
