// make_plan(): decides which roles take part, places them, resolves their
// architectures, checks what depends on the architecture (heads vs tp,
// context length), forms meshes and estimates memory, then judges the fit.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <unistd.h>

#include "meshrun/arch/hub_cache.hpp"
#include "meshrun/arch/model_config.hpp"
#include "meshrun/recipe/colocation.hpp"
#include "meshrun/recipe/step_arithmetic.hpp"
#include "plan_internal.hpp"
#include "units.hpp"

namespace meshrun {
namespace {

using namespace plan_detail;

bool is_ppo(const Recipe& recipe) { return row_of(recipe.algorithm).rollout_engines; }

using step_arithmetic::sequence_length;

// The roles that take processes (colocation.hpp decides which: SFT places
// only the actor; a reward role that is a Lua hook needs no process).
std::vector<RolePlan> participating_roles(const Recipe& recipe) {
  std::vector<RolePlan> roles;
  const auto trained = trained_roles(recipe);
  for (const RoleConfig* placed : placed_roles(recipe)) {
    const RoleConfig& config = *placed;
    RolePlan role;
    role.role = config.role;
    role.name = config.name();
    role.model = config.model;
    role.trained = std::find(trained.begin(), trained.end(), placed) != trained.end();
    role.zero_stage = config.zero_stage;
    // The schema admits only the settings' names (plan/settings.hpp).
    role.dtype = precision_named(config.dtype).value();
    role.offload = config.offload;
    role.gradient_checkpointing = config.gradient_checkpointing;
    role.lora = lora_of(config);
    // Sequences per micro-batch: a preference pair trains as two.
    role.micro_batch = (role.trained ? recipe.batch.micro_train : recipe.batch.micro_rollout) *
                       row_of(recipe.algorithm).sequences_per_item;
    if (role.trained)
      role.optimizer = {config.learning_rate, lr_schedule_kind_named(config.lr_scheduler).value(), config.warmup_ratio, config.min_lr_ratio,
                        config.weight_decay, config.adam_beta1,   config.adam_beta2,   config.adam_eps,
                        config.max_norm,      recipe.train.bucket_mb, recipe.train.max_skipped_steps};
    role.sequence_length = sequence_length(recipe);
    if (role.trained && row_of(recipe.algorithm).ref_with_actor) {
      const RoleConfig* ref = recipe.role(Role::ref);
      role.reference_named = ref && !ref->model.empty();
      role.reference_model = role.reference_named ? ref->model : config.model;
      role.reference_shares_base = role.lora.enabled() && role.reference_is_own_model();
    }
    roles.push_back(std::move(role));
  }
  return roles;
}

// A hub name (not a local path) found in the local Hugging Face cache: say
// where. One that is not cached shows in the role's architecture source
// ("not in the local Hugging Face cache"); the run then names the folder.
void note_hub_resolution(const Recipe& recipe, const std::string& model, const std::string& key,
                         Diagnostics& diagnostics) {
  std::error_code ec;
  if (!parse_hub_name(model) || std::filesystem::exists(model, ec)) return;
  const SourceResolution hub = resolve_source(model, HubRepoType::model);
  if (!hub.from_hub) return;
  diagnostics.add({Severity::note, recipe.where(key), "plan.model",
                   model + " is " + hub.path + " in the local Hugging Face cache", ""});
}

// Rollouts stop at the eos ids of the actor's config.json and
// generation_config.json, and its trained folder carries the latter: a
// malformed file fails here rather than at the first rollout or the final save.
void check_generation_files(const Recipe& recipe, const RolePlan& actor, Diagnostics& diagnostics) {
  // A public name planned from the built-in table has no files here yet.
  if (actor.model.rfind(kBuiltinModelPrefix, 0) == 0 || !resolve_source(actor.model, HubRepoType::model).error.empty())
    return;
  try {
    (void)generation_stop_ids(actor.model, std::nullopt);
  } catch (const ModelConfigError& error) {
    diagnostics.error(recipe.where("roles.actor.model"), "plan.model", std::string("actor: ") + error.what(),
                      "eos_token_id is one token id or a list of them, as transformers reads it; mend or remove "
                      "the file");
  }
}

// The key that names a role's reference model: [roles.ref] model when the
// recipe sets one, else the role's own model.
std::string reference_key(const RolePlan& role) {
  return role.reference_named ? "roles.ref.model" : "roles." + role.name + ".model";
}

// The model_type of every family meshrun builds, for messages.
std::string family_list() {
  std::string list;
  for (const ModelFamilyRow& row : kModelFamilies) list += (list.empty() ? "" : ", ") + std::string(row.model_type);
  return list;
}

// Several roles usually share one model; resolve (and complain about) each once per role.
void resolve_architectures(const Recipe& recipe, Plan& plan, Diagnostics& diagnostics) {
  std::map<std::string, std::pair<std::optional<Architecture>, std::string>> resolved;
  // The architecture of `model`, or an error at `key` (once per key).
  const auto resolve = [&](const std::string& model, const std::string& who,
                           const std::string& key) -> const Architecture* {
    auto [it, inserted] = resolved.try_emplace(model);
    if (inserted) {
      it->second.first = resolve_architecture(model, it->second.second);
      note_hub_resolution(recipe, model, key, diagnostics);
    }
    if (it->second.first) return &*it->second.first;
    // A model that is there but not buildable needs another model, not another name.
    std::error_code exists_error;
    const bool on_disk = std::filesystem::exists(model, exists_error);
    diagnostics.error(recipe.where(key), "plan.model", who + ": " + it->second.second,
                      on_disk ? "meshrun builds the decoders of " + family_list() +
                                    " (docs/planning.md); this config.json describes something else or is incomplete"
                              : "name a local model directory with a config.json, a built-in preset, or "
                                "one of the known public models");
    return nullptr;
  };
  for (RolePlan& role : plan.roles) {
    if (role.model.empty()) continue;  // roles.model-required is validation's
    const Architecture* architecture = resolve(role.model, role.name, "roles." + role.name + ".model");
    if (!architecture) continue;
    role.architecture = *architecture;
    if (role.role == Role::actor) check_generation_files(recipe, role, diagnostics);
    const bool value_head =
        row_of(role.role).head == RoleHead::value || (role.role == Role::actor && row_of(recipe.algorithm).scalar_actor);
    role.parameter_count = value_head ? role.architecture.parameters_with_value_head()
                                      : role.architecture.parameters();
    role.adapter_parameter_count = lora_parameter_count(role.architecture, role.lora);
    const double coefficient = recipe.role(role.role)->router_aux_loss_coef;
    if (role.architecture.mixture_of_experts())
      role.router_aux_loss_coef = coefficient >= 0 ? coefficient : role.architecture.router_aux_loss_coef;
    if (role.reference_model.empty()) continue;
    const std::string key = reference_key(role);
    const Architecture* reference =
        role.reference_is_own_model() ? architecture
                                      : resolve(role.reference_model, "the reference of " + role.name, key);
    if (!reference) continue;
    // The reference scores the role's own tokens: a vocabulary of another
    // size cannot line up with its log-probabilities.
    if (reference->vocab != role.architecture.vocab) {
      diagnostics.error(recipe.where(key), "plan.reference",
                        "the reference " + role.reference_model + " has a vocabulary of " +
                            std::to_string(reference->vocab) + " tokens, " + role.name + "'s " + role.model +
                            " one of " + std::to_string(role.architecture.vocab),
                        "name a reference with " + role.name + "'s tokenizer (usually the model " + role.name +
                            " starts from)");
      continue;
    }
    role.reference_architecture = *reference;
    role.reference_parameter_count = reference->parameters();
  }
}

void check_heads(const Architecture& a, int tp, const std::string& who,
                 const SourceLocation& where, const std::string& tp_key, Diagnostics& diagnostics) {
  if (tp > 1 && a.qk_norm_full_width)
    diagnostics.error(where, "mesh.qk-norm-tp",
                      who + ": " + tp_key + " = " + std::to_string(tp) + " splits the attention heads, but " + a.name +
                          " (" + std::string(model_family_row(a.family).model_type) +
                          ") normalises q and k over all heads at once, which meshrun computes on one rank only",
                      "use " + tp_key + " = 1 (scale with dp, ZeRO and sp instead)");
  if (tp > 1 && a.mixture_of_experts() && a.expert_intermediate % tp != 0)
    diagnostics.error(where, "mesh.experts",
                      who + ": " + tp_key + " = " + std::to_string(tp) + " does not divide the width " +
                          std::to_string(a.expert_intermediate) + " of " + a.name + "'s experts (" +
                          std::string(model_family_row(a.family).expert_intermediate_key) + ")",
                      "choose a tensor-parallel size that divides " + std::to_string(a.expert_intermediate));
  if (tp <= 0 || (a.heads % tp == 0 && a.kv_heads % tp == 0)) return;
  diagnostics.error(where, "mesh.heads",
                    who + ": " + tp_key + " = " + std::to_string(tp) + " does not divide the " +
                        std::to_string(a.heads) + " attention heads and " + std::to_string(a.kv_heads) +
                        " key/value heads of " + a.name,
                    "choose a tensor-parallel size that divides " + std::to_string(a.kv_heads));
}

}  // namespace

LoraSettings lora_of(const RoleConfig& role) {
  LoraSettings lora;
  lora.rank = role.lora_rank;
  lora.alpha = role.lora_alpha;
  lora.dropout = role.lora_dropout;
  lora.targets = role.lora_targets;
  return lora;
}

namespace {

// A rank above a targeted projection's smaller side adds nothing a full
// update would not, and PEFT refuses nothing: say so before a run. A model
// whose files fuse q/k/v and gate/up (Phi-3) has none of the modules the
// adapters are saved under, so PEFT could not load them onto it.
void check_lora_rank(const Recipe& recipe, const Plan& plan, Diagnostics& diagnostics) {
  for (const RolePlan& role : plan.roles) {
    if (role.architecture.name.empty() || !role.lora.enabled()) continue;
    const ModelFamilyRow& family = model_family_row(role.architecture.family);
    if (family.fused_projections) {
      diagnostics.error(recipe.where("roles." + role.name + ".lora_rank"), "lora.unsupported",
                        role.name + ": " + role.architecture.name + " is a " + std::string(family.model_type) +
                            " model, whose layers are fused qkv_proj and gate_up_proj; meshrun's LoRA adapters "
                            "are saved for unfused q/k/v and gate/up projections, which a PEFT adapter of it "
                            "cannot name",
                        "remove roles." + role.name + ".lora_rank to train the whole model");
      continue;
    }
    // PEFT adapts no expert of transformers' mixtures (their experts are
    // one tensor per layer there), so meshrun adapts none either: named on
    // purpose, an MLP projection would adapt only the dense layers.
    const std::string targets_key = "roles." + role.name + ".lora_targets";
    if (role.architecture.sparse_layers() > 0 && recipe.is_set(targets_key))
      for (const std::string& target : role.lora.targets) {
        if (target != "gate_proj" && target != "up_proj" && target != "down_proj") continue;
        diagnostics.error(recipe.where(targets_key), "lora.experts",
                          "lora_targets names " + target + ", but in " +
                              std::to_string(role.architecture.sparse_layers()) + " of the " +
                              std::to_string(role.architecture.layers) + " layers of " + role.architecture.name +
                              " the MLP is a mixture of experts, which takes no adapters",
                          "leave gate_proj, up_proj and down_proj out of lora_targets (q_proj, k_proj, v_proj and "
                          "o_proj take adapters)");
        break;
      }
    for (const std::string& target : role.lora.targets) {
      if (!is_lora_target(target)) continue;  // lora.target's
      const ProjectionShape shape = lora_projection_shape(role.architecture, target);
      const int64_t side = std::min(shape.in, shape.out);
      if (role.lora.rank <= side) continue;
      diagnostics.error(recipe.where("roles." + role.name + ".lora_rank"), "lora.rank",
                        "lora_rank = " + std::to_string(role.lora.rank) + " exceeds " + target + " of " +
                            role.architecture.name + " ([" + std::to_string(shape.out) + ", " +
                            std::to_string(shape.in) + "]): a rank is at most " + std::to_string(side),
                        "use lora_rank ≤ " + std::to_string(side) + ", or leave " + target + " out of lora_targets");
      break;
    }
  }
}

// save_value_network adds the critic to save_hf's copy of each checkpoint:
// without either it saves nothing, which the plan would otherwise promise.
void check_value_network(const Recipe& recipe, const Plan& plan, Diagnostics& diagnostics) {
  if (!recipe.checkpoint.save_value_network) return;
  const char* key = "checkpoint.save_value_network";
  if (!plan.role(Role::critic))
    diagnostics.warning(recipe.where(key), "checkpoint.value-network",
                        "save_value_network is set but the recipe has no critic to save", "remove " + std::string(key));
  else if (!recipe.checkpoint.save_hf)
    diagnostics.warning(recipe.where(key), "checkpoint.value-network",
                        "save_value_network adds the critic to each checkpoint's Hugging Face copy, which "
                        "checkpoint.save_hf = false does not write: the critic is not saved",
                        "set checkpoint.save_hf = true");
}

// A load-balancing weight on a dense model weighs nothing. -1 (the
// model's own, which a dense model does not have) is what a run's
// resolved.toml writes back: not a weight.
void check_aux_loss(const Recipe& recipe, const Plan& plan, Diagnostics& diagnostics) {
  for (const RolePlan& role : plan.roles) {
    const std::string key = "roles." + role.name + ".router_aux_loss_coef";
    if (role.architecture.name.empty() || role.architecture.mixture_of_experts() || !recipe.is_set(key)) continue;
    const RoleConfig* config = recipe.role(role.role);
    if (config && config->router_aux_loss_coef == -1) continue;
    diagnostics.warning(recipe.where(key), "moe.aux-loss",
                        role.name + ": " + role.architecture.name + " is a dense " +
                            std::string(role.architecture.model_type()) + " model: it has no routers to balance",
                        "remove " + key);
  }
}

// mesh.ep-experts and mesh.ep-dp: expert parallelism needs experts, as
// many on every ep rank (the reference a role computes on its own mesh is
// split alike), and groups of ep data-parallel ranks.
void check_expert_parallel(const Recipe& recipe, const RolePlan& role, Diagnostics& diagnostics) {
  const RoleConfig& config = *recipe.role(role.role);
  const int ep = config.mesh.ep;
  if (ep <= 1) return;
  const std::string role_key = "roles." + role.name + ".mesh.ep";
  const bool own = recipe.is_set(role_key);
  const std::string key = own ? role_key : "mesh.ep";
  if (!own && !role.architecture.mixture_of_experts()) return;  // a dense role leaves [mesh] ep alone
  if (const auto dp = step_arithmetic::data_parallel_degree(config.processes(), config.mesh); dp && *dp % ep != 0)
    diagnostics.error(recipe.where(key), "mesh.ep-dp",
                      role.name + ": " + key + " = " + std::to_string(ep) + " does not divide its dp = " +
                          std::to_string(*dp) + ": expert parallelism splits the experts over groups of ep "
                          "data-parallel ranks",
                      "use an ep that divides " + std::to_string(*dp));
  std::vector<std::pair<const Architecture*, std::string>> models{{&role.architecture, role.name}};
  if (!role.reference_architecture.name.empty() && !role.reference_is_own_model())
    models.emplace_back(&role.reference_architecture, "the reference of " + role.name);
  for (const auto& [a, who] : models) {
    if (!a->mixture_of_experts()) {
      if (a == &role.architecture)
        diagnostics.error(recipe.where(key), "mesh.ep-experts",
                          who + ": " + key + " = " + std::to_string(ep) + ", but " + a->name + " is a dense " +
                              std::string(a->model_type()) + " model: it has no experts to split",
                          "remove " + key + " (scale a dense model with dp, ZeRO, sp and tp)");
      continue;
    }
    if (a->experts % ep == 0) continue;
    diagnostics.error(recipe.where(key), "mesh.ep-experts",
                      who + ": " + key + " = " + std::to_string(ep) + " does not divide the " +
                          std::to_string(a->experts) + " experts of " + a->name + " (" +
                          std::string(model_family_row(a->family).experts_key) + ")",
                      "choose an ep that divides " + std::to_string(a->experts));
  }
}

// Routing replay replays a mixture's routers: a dense actor has none.
void check_routing_replay(const Recipe& recipe, const Plan& plan, Diagnostics& diagnostics) {
  const RolePlan* actor = plan.role(Role::actor);
  if (!is_ppo(recipe) || !recipe.ppo.routing_replay || !actor || actor->architecture.name.empty() ||
      actor->architecture.mixture_of_experts())
    return;
  diagnostics.error(recipe.where("ppo.routing_replay"), "ppo.routing-replay",
                    "routing_replay = true, but the actor's " + actor->architecture.name + " is a dense " +
                        std::string(actor->architecture.model_type()) + " model: it has no routing to replay",
                    "remove ppo.routing_replay");
}

void check_heads_of_all(const Recipe& recipe, const Plan& plan, int engine_count, Diagnostics& diagnostics) {
  for (const RolePlan& role : plan.roles) {
    if (role.architecture.name.empty()) continue;
    const std::string role_key = "roles." + role.name + ".mesh.tp";
    const std::string key = recipe.is_set(role_key) ? role_key : "mesh.tp";
    check_heads(role.architecture, recipe.role(role.role)->mesh.tp, role.name, recipe.where(key), key,
                diagnostics);
    // A reference on the role's mesh is split like the role.
    if (!role.reference_architecture.name.empty() && !role.reference_is_own_model())
      check_heads(role.reference_architecture, recipe.role(role.role)->mesh.tp,
                  "the reference of " + role.name + " (" + role.reference_model + ")",
                  recipe.where(reference_key(role)), key, diagnostics);
  }
  for (const RolePlan& role : plan.roles)
    if (!role.architecture.name.empty()) check_expert_parallel(recipe, role, diagnostics);
  const RolePlan* actor = plan.role(Role::actor);
  if (engine_count > 0 && actor && !actor->architecture.name.empty())
    check_heads(actor->architecture, recipe.rollout.tensor_parallel, "rollout engines",
                recipe.where("rollout.tensor_parallel"), "rollout.tensor_parallel", diagnostics);
}

// One warning per architecture whose context the rollout sequences exceed.
void check_rollout_length(const Recipe& recipe, const Plan& plan, Diagnostics& diagnostics) {
  if (!is_ppo(recipe)) return;
  const int64_t length = sequence_length(recipe);
  std::map<std::string, std::pair<int64_t, std::string>> too_short;  // name -> (context, roles)
  for (const RolePlan& role : plan.roles) {
    const Architecture& a = role.architecture;
    if (a.name.empty() || a.max_position <= 0 || length <= a.max_position) continue;
    auto& [context, roles] = too_short[a.name];
    context = a.max_position;
    roles += (roles.empty() ? "" : ", ") + role.name;
  }
  const bool episodes = has_env(recipe);
  for (const auto& [name, entry] : too_short)
    diagnostics.warning(
        recipe.where(episodes ? "env.max_episode_tokens" : "rollout.max_new_tokens"), "rollout.max-length",
        (episodes ? "an episode of " + std::to_string(length) + " tokens (env.max_episode_tokens)"
                  : "max_prompt_len " + std::to_string(recipe.rollout.max_prompt_len) + " + max_new_tokens " +
                        std::to_string(recipe.rollout.max_new_tokens) + " = " + std::to_string(length) + " tokens") +
            " exceed the " + std::to_string(entry.first) + "-token context of " + name + " (" + entry.second + ")",
        episodes ? "lower env.max_episode_tokens" : "shorten rollout.max_prompt_len or rollout.max_new_tokens");
}

// Bytes a rollout holds per token on every process: the token id (int64),
// the attention and response masks, and the fp32 per-token figures of the
// experience (old, reference and new log-probabilities, values, rewards,
// advantages, returns).
constexpr double kRolloutBytesPerToken = 8 + 2 + 7 * 4;

double host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size) : 0;
}

// Every process holds the whole step's rollout (the exchange gives each rank
// every engine's samples), on the device and, while it is gathered, in host
// memory: a typo such as n_samples_per_prompt = 1073741824 must be a plan
// error, not an allocation failure at the first step. In doubles: the
// product of three ints may exceed 64 bits.
void check_rollout_buffer(const Recipe& recipe, const Plan& plan, Diagnostics& diagnostics) {
  if (!is_ppo(recipe)) return;
  const double samples = static_cast<double>(recipe.batch.rollout) * recipe.batch.n_samples_per_prompt;
  const double bytes = samples * static_cast<double>(sequence_length(recipe)) * kRolloutBytesPerToken;
  const double device = static_cast<double>(capacity_bytes(plan.cluster));
  const double host = host_memory_bytes();
  const bool over_device = device > 0 && bytes > device;
  const bool over_host = host > 0 && bytes > host;
  if (!over_device && !over_host) return;
  const std::string key = recipe.is_set("batch.n_samples_per_prompt") ? "batch.n_samples_per_prompt" : "batch.rollout";
  auto gib = [](double value) {
    return value >= 0x1p62 ? std::string("more than 4 EiB") : gib_text(static_cast<int64_t>(value)) + " GiB";
  };
  diagnostics.error(recipe.where(key), "plan.rollout-memory",
                    "a step's rollout of " + std::to_string(recipe.batch.rollout) + " prompts × " +
                        std::to_string(recipe.batch.n_samples_per_prompt) + " samples × " +
                        std::to_string(sequence_length(recipe)) + " tokens needs " + gib(bytes) +
                        " on every process, more than " +
                        (over_device ? "the " + gib(device) + " device" : "the host's " + gib(host)),
                    "lower batch.rollout or batch.n_samples_per_prompt");
}

// The engine's scheduling and paged KV pool: max_batch live sequences (at
// most its share of a step's samples), a pool of what rollout.kv_cache_mb or
// the memory budget holds, capped at max_batch whole sequences (more could
// never be used), in whole blocks. Without either, the cap itself: nothing
// is preempted.
void size_engine_pool(const Recipe& recipe, int64_t samples, int engines, EnginePlan& engine) {
  const RolloutConfig& rollout = recipe.rollout;
  const int64_t share = engines > 0 ? (samples + engines - 1) / engines : samples;
  engine.max_batch = std::max<int64_t>(1, rollout.max_batch > 0 ? std::min<int64_t>(rollout.max_batch, share) : share);
  engine.kv_block_size = std::max(1, rollout.kv_block_size);
  engine.prefill_chunk = std::max(0, rollout.prefill_chunk);
  const int64_t sequence_blocks = ceil_div(sequence_length(recipe), engine.kv_block_size);
  int64_t blocks = engine.max_batch * sequence_blocks;
  if (engine.kv_bytes_per_token > 0) {
    const int64_t block_bytes = engine.kv_bytes_per_token * engine.kv_block_size;
    if (rollout.kv_cache_mb > 0)
      blocks = std::min(blocks, int64_t{rollout.kv_cache_mb} * 1024 * 1024 / block_bytes);
    else if (engine.budget_bytes > 0)
      blocks = std::min(blocks, engine.kv_cache_tokens / engine.kv_block_size);
    // A pool of its own size, or on a device of unknown size, is allocated
    // beside the weights (otherwise the engine reserves its budget, as
    // vLLM's memory_utilization does).
    if (rollout.kv_cache_mb > 0 || engine.budget_bytes == 0) engine.memory.kv_cache = blocks * block_bytes;
  }
  engine.kv_pool_blocks = blocks;
}

// Whether an engine's decode steps are CUDA graphs; the rule on the model
// is decode_graph_blocker()'s, which the engine applies too.
void resolve_decode_graphs(const Recipe& recipe, const ClusterShape& cluster, const ModelConfig& actor,
                           EnginePlan& engine) {
  std::string reason;
  if (!recipe.rollout.cuda_graphs) reason = "rollout.cuda_graphs = false";
  else if (cluster.device != DeviceKind::cuda) reason = "not on CUDA";
  else reason = decode_graph_blocker(actor, recipe.rollout.tensor_parallel);
  engine.decode_graphs = reason.empty();
  engine.eager_reason = std::move(reason);
}

// The ep a role's mesh takes: [mesh] ep applies to the roles whose model is
// a mixture of experts, and a dense one (a reference, a reward model)
// stays at 1; roles.NAME.mesh.ep is taken as written (check_expert_parallel
// refuses it on a dense model).
int resolved_ep(const Recipe& recipe, const RolePlan& role) {
  const int ep = recipe.role(role.role)->mesh.ep;
  if (ep <= 1 || recipe.is_set("roles." + role.name + ".mesh.ep")) return ep;
  return role.architecture.name.empty() || role.architecture.mixture_of_experts() ? ep : 1;
}

void form_meshes_and_estimate(const Recipe& recipe, Plan& plan) {
  const int64_t overhead = process_overhead_bytes(plan.cluster.device);
  for (RolePlan& role : plan.roles) {
    const RoleConfig& config = *recipe.role(role.role);
    if (auto mesh = build_mesh(role.ranks, config.mesh.tp, config.mesh.sp, config.mesh.dp, resolved_ep(recipe, role)))
      role.mesh = std::move(*mesh);
    if (role.mesh.ranks.empty()) continue;
    if (role.trained) {
      role.gradient_accumulation = static_cast<int>(
          step_arithmetic::gradient_accumulation(recipe.batch.train, recipe.batch.micro_train, role.mesh.dp));
    }
    if (role.architecture.name.empty()) continue;
    const WorkloadShape workload{role.micro_batch, role.sequence_length, row_of(role.role).head == RoleHead::language_model,
                                 overhead, recipe.checkpoint.async};
    if (!role.trained) {
      role.memory = inference_role_memory(role.architecture, role.parameter_count, role, role.mesh, workload);
      continue;
    }
    role.memory = trained_role_memory(role.architecture, role.parameter_count, role, role.mesh, workload);
    RolePlan switched = role;
    switched.gradient_checkpointing = !role.gradient_checkpointing;
    const int64_t other =
        trained_role_memory(role.architecture, role.parameter_count, switched, role.mesh, workload).activations;
    role.activations_checkpointed = role.gradient_checkpointing ? role.memory.activations : other;
    role.activations_not_checkpointed = role.gradient_checkpointing ? other : role.memory.activations;
    if (role.reference_parameter_count > 0 && !role.reference_shares_base)
      add_reference_memory(role.reference_architecture, role.reference_parameter_count, role, role.mesh, workload,
                           plan.sleep, role.memory);
  }

  const RolePlan* actor = plan.role(Role::actor);
  if (!actor || actor->architecture.name.empty() || recipe.rollout.tensor_parallel <= 0) return;
  const int64_t capacity = capacity_bytes(plan.cluster);
  for (EnginePlan& engine : plan.engines) {
    EngineMemory memory = engine_memory(actor->architecture, actor->dtype, recipe.rollout.tensor_parallel,
                                        recipe.rollout.memory_utilization, capacity,
                                        sequence_length(recipe), overhead);
    engine.memory = memory.memory;
    engine.kv_cache_tokens = memory.kv_cache_tokens;
    engine.kv_cache_sequences = memory.kv_cache_sequences;
    engine.kv_bytes_per_token = memory.kv_bytes_per_token;
    engine.budget_bytes = memory.budget_bytes;
    size_engine_pool(recipe, plan.step.samples, static_cast<int>(plan.engines.size()), engine);
    resolve_decode_graphs(recipe, plan.cluster, actor->architecture, engine);
  }
}

}  // namespace

StepPlan StepPlan::from_recipe(const Recipe& recipe) {
  StepPlan step;
  step.train_batch = recipe.batch.train;
  step.micro_batch = recipe.batch.micro_train;
  step.data_epochs = recipe.train.epochs;
  if (!row_of(recipe.algorithm).rollout_engines) {
    step.samples = recipe.batch.train;
    return step;
  }
  step.prompts = recipe.batch.rollout;
  step.group_size = recipe.batch.n_samples_per_prompt;
  step.samples = step_arithmetic::rollout_samples(recipe.batch);
  step.epochs = recipe.ppo.max_epochs;
  step.micro_scoring = std::max(1, recipe.batch.micro_rollout);
  step.optimizer_steps = step_arithmetic::optimizer_steps(step.samples, step.train_batch, step.epochs);
  step.untrained = step_arithmetic::leftover_samples(step.samples, step.train_batch);
  return step;
}

std::optional<ResumePolicy> resume_policy_named(std::string_view name) {
  for (const ResumePolicy policy : {ResumePolicy::automatic, ResumePolicy::never, ResumePolicy::require})
    if (name == resume_policy_name(policy)) return policy;
  return std::nullopt;
}

const char* resume_policy_name(ResumePolicy policy) {
  switch (policy) {
    case ResumePolicy::automatic: return "auto";
    case ResumePolicy::never: return "never";
    case ResumePolicy::require: return "require";
  }
  return "?";
}

RunPlan RunPlan::from_recipe(const Recipe& recipe) {
  RunPlan run;
  run.recipe_file = recipe.file;
  run.algorithm = name_of(recipe.algorithm);
  run.seed = recipe.seed;
  const CheckpointConfig& checkpoint = recipe.checkpoint;
  run.checkpoint_path = checkpoint.path;
  run.save_every = std::max(0, checkpoint.save_steps);  // -1 in the recipe: only at the end
  run.keep_last = checkpoint.keep_last;
  run.max_checkpoint_bytes = static_cast<int64_t>(checkpoint.max_size_gb * static_cast<double>(1LL << 30));
  // The schema admits only these three names (lint's checkpoint.load choice).
  run.resume = resume_policy_named(checkpoint.load).value();
  run.async_checkpoints = checkpoint.async;
  run.save_hf = checkpoint.save_hf;
  run.save_value_network = checkpoint.save_value_network;
  run.output = checkpoint.output;
  run.log_dir = recipe.logging.dir;
  run.log_every = std::max(1, recipe.logging.steps);
  run.tensorboard = recipe.logging.tensorboard;
  run.evaluates = !recipe.data.eval_path.empty() && row_of(recipe.algorithm).evaluates;
  run.eval_every = recipe.train.eval_steps;
  run.max_steps = recipe.train.max_steps > 0 ? recipe.train.max_steps : 0;
  ResolvedRecipe resolved = resolve_recipe(recipe);
  run.resolved_toml = std::move(resolved.toml);
  run.recipe_keys = std::move(resolved.keys);
  run.recipe_fingerprint = std::move(resolved.fingerprint);
  return run;
}

EnvPlan EnvPlan::from_recipe(const Recipe& recipe) {
  EnvPlan env;
  env.enabled = is_ppo(recipe) && has_env(recipe);
  if (!env.enabled) return env;
  env.script = recipe.env.script;
  env.max_turns = recipe.env.max_turns;
  env.max_observation_tokens = recipe.env.max_observation_tokens;
  env.max_episode_tokens = step_arithmetic::episode_tokens(recipe);
  env.observation_role = recipe.env.observation_role;
  env.timeout_s = recipe.env.timeout_s;
  return env;
}

RlPlan RlPlan::from_recipe(const Recipe& recipe) {
  RlPlan rl;
  rl.enabled = is_ppo(recipe);
  const RolloutConfig& rollout = recipe.rollout;
  rl.sampling = {rollout.temperature, rollout.top_p, rollout.top_k, rollout.max_prompt_len, rollout.max_new_tokens};
  rl.env = EnvPlan::from_recipe(recipe);
  const PpoConfig& ppo = recipe.ppo;
  rl.dynamic_sampling = ppo.dynamic_sampling;
  rl.max_sample_rounds = ppo.dynamic_sampling ? ppo.max_sample_rounds : 1;
  rl.num_episodes = ppo.num_episodes;
  rl.max_staleness = rollout.max_staleness;
  rl.partial = rollout.partial && rollout.max_staleness > 0;
  const auto named = [&recipe](Role role) {
    const RoleConfig* config = recipe.role(role);
    return config && !config->model.empty();
  };
  const RoleConfig* reward = recipe.role(Role::reward);
  rl.reward_hook = reward ? reward->hook : std::string();
  rl.hooks_parallel = recipe.hooks.parallel;
  rl.has_ref = named(Role::ref);
  rl.has_critic = named(Role::critic);
  rl.has_reward_model = named(Role::reward);
  rl.advantage = ppo.advantage;
  rl.gamma = ppo.gamma;
  rl.lambd = ppo.lambd;
  rl.reward_clip = ppo.reward_clip;
  rl.normalize_reward = ppo.normalize_reward;
  rl.overlong_buffer = ppo.overlong_buffer;
  rl.overlong_penalty = ppo.overlong_penalty;
  rl.kl_mode = ppo.kl_mode;
  rl.kl_estimator = ppo.kl_estimator;
  rl.init_kl_coef = ppo.init_kl_coef;
  rl.kl_target = ppo.kl_target;
  rl.kl_horizon = ppo.kl_horizon;
  rl.policy_loss = ppo.policy_loss;
  rl.rollout_correction = ppo.rollout_correction;
  rl.rollout_is_cap = ppo.rollout_is_cap;
  rl.rollout_is_low = ppo.rollout_is_low;
  rl.rollout_is_high = ppo.rollout_is_high;
  rl.routing_replay = ppo.routing_replay;
  rl.clip_low = ppo.eps_clip;
  rl.clip_high = ppo.clip_high();
  rl.dual_clip = ppo.dual_clip;
  rl.loss_agg = ppo.loss_agg;
  rl.entropy_coef = ppo.entropy_coef;
  rl.value_clip = ppo.value_clip;
  return rl;
}

const RolePlan* Plan::role(Role wanted) const {
  for (const auto& r : roles)
    if (r.role == wanted) return &r;
  return nullptr;
}

Plan make_plan(const Recipe& recipe, const ClusterShape& cluster, Diagnostics& diagnostics) {
  Plan plan;
  plan.cluster = cluster;
  plan.algorithm = recipe.algorithm;
  plan.data = recipe.data;
  plan.hooks = recipe.hooks;
  plan.dpo = recipe.dpo;
  plan.step = StepPlan::from_recipe(recipe);
  plan.rl = RlPlan::from_recipe(recipe);
  plan.rl.old_log_probs_from_training = plan.rl.enabled && plan.step.optimizer_steps == 1 && plan.step.epochs == 1 &&
                                        !(plan.rl.has_ref && plan.rl.kl_mode == KlMode::reward);
  plan.run = RunPlan::from_recipe(recipe);
  plan.sleep = recipe.colocate.sleep;
  plan.roles = participating_roles(recipe);
  if (cluster.nodes <= 0 || cluster.procs_per_node <= 0) {
    diagnostics.error(recipe.where("launch"), "plan.placement",
                      "the cluster has no slots (" + std::to_string(cluster.nodes) + " nodes × " +
                          std::to_string(cluster.procs_per_node) + " processes)");
    return plan;
  }
  // A slot is planned per process: a typo like nodes = 100000000 must be an
  // error, not gigabytes of slots (fuzz/recipe_fuzz.cpp).
  if (cluster.world_size() > kMaxPlanSlots) {
    diagnostics.error(recipe.where("launch"), "plan.placement",
                      "the cluster has " + std::to_string(cluster.world_size()) + " processes (" +
                          std::to_string(cluster.nodes) + " nodes × " + std::to_string(cluster.procs_per_node) +
                          "); meshrun plans at most " + std::to_string(kMaxPlanSlots));
    return plan;
  }
  const int engine_count =
      is_ppo(recipe) && recipe.rollout.tensor_parallel > 0 ? std::max(0, recipe.rollout.engines) : 0;

  place_processes(recipe, engine_count, plan, diagnostics);
  resolve_architectures(recipe, plan, diagnostics);
  check_heads_of_all(recipe, plan, engine_count, diagnostics);
  check_lora_rank(recipe, plan, diagnostics);
  check_aux_loss(recipe, plan, diagnostics);
  check_value_network(recipe, plan, diagnostics);
  check_routing_replay(recipe, plan, diagnostics);
  check_rollout_length(recipe, plan, diagnostics);
  check_rollout_buffer(recipe, plan, diagnostics);
  form_meshes_and_estimate(recipe, plan);
  assess_fit(recipe, plan, diagnostics);
  return plan;
}

}  // namespace meshrun
