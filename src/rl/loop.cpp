// The PPO loop (include/meshrun/rl/ppo.hpp): roles and engines on this rank,
// the sequence of phases of a step, and [colocate] sleep between them.
#include <fmt/ranges.h>

#include "meshrun/data/data.hpp"
#include "ppo_run.hpp"

namespace meshrun::ppo_detail {

std::optional<StepOutcome> PpoRun::step(int64_t step, int64_t) {
  const StepPlan& shape = plan_.step;
  PhaseTimers phases(steady_clock());
  std::optional<SamplerStep> prompts_step = sampler_->next();
  if (!prompts_step) return std::nullopt;
  int64_t generated = 0;
  Collected collected = collect(step, prompts_step->micro_batches.front(), phases, generated);
  const Rollout& rollout = collected.rollout;
  const double rollout_seconds = phases.seconds("rollout");
  Scores scores;
  {
    auto timer = phases.scope("scoring");
    enter(Phase::scoring);
    scores = score(rollout, collected.rewards);
  }
  const Parity parity = logprob_parity(rollout, scores.old_log_probs);
  ExperienceOptions options = experience_options();
  Experience experience = make_experience(rollout, scores, options, recipe_.ppo.normalize_reward ? &moments_ : nullptr);
  kl_controller_.update(experience.kl_sum_per_sample, shape.samples);

  TrainSums sums;
  {
    auto timer = phases.scope("train");
    enter(Phase::training);
    sums = train(rollout, scores, experience, step);
  }
  {
    auto timer = phases.scope("sync");
    enter(Phase::sync);
    sync_engines();
  }
  return step_outcome(step, rollout, experience, parity, collected.stats, sums, generated, rollout_seconds, phases);
}

PpoRun::Round PpoRun::sample_round(const std::vector<int64_t>& prompts, int64_t step, int round, PhaseTimers& phases,
                                   int64_t& generated) {
  Round out;
  {
    auto timer = phases.scope("rollout");
    enter(Phase::rollout);
    out.rollout = generate(prompts, step, round, generated);
  }
  if (hooks_ && hooks_->has_function(recipe_.hooks.on_rollout)) {
    auto timer = phases.scope("hooks");
    apply_on_rollout(out.rollout, step);
  }
  {
    auto timer = phases.scope("scoring");
    enter(Phase::scoring);
    out.rewards = score_rewards(out.rollout, step);
  }
  return out;
}

namespace {

// Whole prompt groups picked from the rounds of a step, in order.
struct GroupPicks {
  std::vector<GeneratedSample> samples;
  std::vector<int64_t> prompt_rows;
  std::vector<float> keep, model, hook;
  int64_t groups = 0;

  void add(const Rollout& rollout, const SampleRewards& rewards, int64_t first, int64_t size, bool kept) {
    const auto keep_of = rollout.keep.to(torch::kCPU, torch::kFloat).contiguous();
    for (int64_t row = first; row < first + size; ++row) {
      samples.push_back(rollout.samples[static_cast<size_t>(row)]);
      prompt_rows.push_back(rollout.prompt_rows[static_cast<size_t>(row)]);
      keep.push_back(kept ? keep_of.data_ptr<float>()[row] : 0.0f);
      model.push_back(rewards.model[row].item<float>());
      hook.push_back(rewards.hook[row].item<float>());
    }
    ++groups;
  }

  // Group g of `other` (rows [g × size, (g + 1) × size)), as it was picked there.
  void add_group_of(const GroupPicks& other, int64_t g, int64_t size) {
    const auto from = [g, size](const auto& values) { return values.begin() + g * size; };
    samples.insert(samples.end(), from(other.samples), from(other.samples) + size);
    prompt_rows.insert(prompt_rows.end(), from(other.prompt_rows), from(other.prompt_rows) + size);
    keep.insert(keep.end(), from(other.keep), from(other.keep) + size);
    model.insert(model.end(), from(other.model), from(other.model) + size);
    hook.insert(hook.end(), from(other.hook), from(other.hook) + size);
    ++groups;
  }
};

// Whether the kept samples of rows [first, first + size) got different
// rewards (a group whose rewards are all equal teaches a group baseline nothing).
bool informative(const torch::Tensor& total, const torch::Tensor& keep, int64_t first, int64_t size) {
  const torch::Tensor kept = total.narrow(0, first, size).masked_select(keep.narrow(0, first, size).gt(0));
  return kept.numel() >= 2 && (kept.max() - kept.min()).item<float>() > 0;
}

}  // namespace

// Without dynamic sampling: one round. With it (DAPO): rounds of new
// prompts until batch.rollout informative prompt groups are collected or
// max_sample_rounds have run; the step's shape stays fixed by filling the
// remaining places with uninformative groups kept out of every loss.
PpoRun::Collected PpoRun::collect(int64_t step, std::vector<int64_t> prompts, PhaseTimers& phases, int64_t& generated) {
  Collected out;
  if (!recipe_.ppo.dynamic_sampling) {
    Round round = sample_round(prompts, step, 0, phases, generated);
    out.rollout = std::move(round.rollout);
    out.rewards = std::move(round.rewards);
    return out;
  }
  const int64_t group = plan_.step.group_size, wanted = plan_.step.prompts;
  GroupPicks picked, spare;
  out.stats.rounds = 0;
  for (int round = 0;; ++round) {
    Round sampled = sample_round(prompts, step, round, phases, generated);
    ++out.stats.rounds;
    const torch::Tensor total = sampled.rewards.model + sampled.rewards.hook;
    const torch::Tensor keep = sampled.rollout.keep.to(torch::kCPU, torch::kFloat);
    for (int64_t first = 0; first < total.size(0); first += group) {
      if (informative(total, keep, first, group)) {
        if (picked.groups < wanted) picked.add(sampled.rollout, sampled.rewards, first, group, true);
      } else {
        ++out.stats.dropped_groups;
        if (spare.groups < wanted) spare.add(sampled.rollout, sampled.rewards, first, group, false);
      }
    }
    if (picked.groups >= wanted || round + 1 >= recipe_.ppo.max_sample_rounds) break;
    std::optional<SamplerStep> more = sampler_->next();
    if (!more) break;
    prompts = more->micro_batches.front();
  }
  out.stats.kept_groups = picked.groups;
  if (picked.groups < wanted && world_.rank() == 0)
    spdlog::info("step {}: dynamic sampling found {} informative prompts of {} in {} rounds ({} dropped); training "
                 "on them",
                 step, picked.groups, wanted, out.stats.rounds, out.stats.dropped_groups);
  // The step keeps its shape: spare groups (picked with keep 0) fill the
  // places, weighing nothing.
  for (int64_t g = 0; picked.groups < wanted; ++g) picked.add_group_of(spare, g, group);
  out.rollout.samples = std::move(picked.samples);
  out.rollout.prompt_rows = std::move(picked.prompt_rows);
  out.rollout.keep = torch::tensor(picked.keep);
  out.rollout.batch = pack_samples(out.rollout.samples, tokenizer_->pad_id().value_or(0), device_);
  out.rewards.model = torch::tensor(picked.model);
  out.rewards.hook = torch::tensor(picked.hook);
  return out;
}

int64_t PpoRun::setup() {
  DataTokenizer loaded = load_data_tokenizer(recipe_.data, plan_.role("actor")->model);
  tokenizer_ = std::move(loaded.tokenizer);
  tokenizer_source_ = loaded.source;
  const std::optional<int32_t> eos = tokenizer_->eos_id();
  stop_ids_ = generation_stop_ids(plan_.role("actor")->model, eos ? std::optional<int64_t>(*eos) : std::nullopt);
  if (stop_ids_.size() > 1 && world_.rank() == 0)
    spdlog::info("rollout: responses end at token ids {} (the tokenizer's eos and the model's eos_token_id)",
                 fmt::join(stop_ids_, ", "));
  prompts_ = load_prompt_dataset(recipe_.data, *tokenizer_, recipe_.rollout.max_prompt_len);
  SamplerConfig sampler;
  sampler.num_items = static_cast<int64_t>(prompts_.prompts.size());
  sampler.global_batch = plan_.step.prompts;
  sampler.micro_batch = plan_.step.prompts;
  sampler.seed = recipe_.seed;
  sampler.epochs = recipe_.ppo.num_episodes;
  if (sampler.num_items < plan_.step.prompts)
    throw ConfigError("the prompt file " + recipe_.data.path + " has " + std::to_string(sampler.num_items) +
                          " prompts, fewer than one rollout batch (batch.rollout = " +
                          std::to_string(plan_.step.prompts) + ")",
                      "batch.rollout", "batch.rollout-prompts");
  sampler_ = std::make_unique<DistributedSampler>(sampler);
  total_steps_ = sampler_->total_steps();
  if (plan_.run.max_steps > 0) total_steps_ = std::min(total_steps_, plan_.run.max_steps);

  if (!recipe_.hooks.script.empty()) {
    hooks_ = HookScript::load(recipe_.hooks.script, hook_options_of(recipe_.hooks));
  }
  const RoleConfig* reward = recipe_.role("reward");
  if (reward && !reward->hook.empty()) reward_function_ = reward->hook;
  else if (hooks_ && hooks_->has_function(recipe_.hooks.reward)) reward_function_ = recipe_.hooks.reward;

  // Every role starts from the recipe seed, so actor and ref (and the
  // engines) built from the same preset hold the same weights.
  for (const char* name : {"actor", "critic", "ref", "reward"}) setup_role(name);
  setup_engines();
  kl_controller_ = KlController(recipe_.ppo.init_kl_coef, recipe_.ppo.kl_target, recipe_.ppo.kl_horizon);
  if (world_.rank() == 0)
    spdlog::info("ppo: {} prompts, {} steps of {} prompts × {} samples, {} optimizer steps each; advantage {}",
                 prompts_.prompts.size(), total_steps_, plan_.step.prompts, plan_.step.group_size,
                 plan_.step.optimizer_steps, name_of(recipe_.ppo.advantage));
  return total_steps_;
}

void PpoRun::setup_role(const std::string& name) {
  const RolePlan* config = plan_.role(name);
  if (!config || config->model.empty()) return;
  DeviceMesh& mesh = runtime_.mesh(name);
  if (!mesh.holds_this_rank()) return;
  RoleSlot& slot = roles_[name];
  slot.config = config;
  slot.mesh = &mesh;
  slot.dp = &mesh.group(MeshAxis::dp);
  slot.tp = mesh.tp() > 1 ? &mesh.group(MeshAxis::tp) : nullptr;
  slot.sp = mesh.sp() > 1 ? &mesh.group(MeshAxis::sp) : nullptr;
  ModelOptions options = train_detail::model_options_for(*config, mesh, device_);
  options.head = (name == "critic" || name == "reward") ? ModelHead::value : ModelHead::language_model;
  torch::manual_seed(recipe_.seed);
  LlamaModel model = load_hf_model(config->model, options);
  if (config->trained) {
    slot.engine = std::make_unique<TrainEngine>(
        model, mesh, EngineOptions::from_plan(*config, total_steps_ * plan_.step.optimizer_steps));
  } else {
    model->eval();
    for (auto& parameter : model->parameters()) parameter.set_requires_grad(false);
  }
  slot.model = model;
  slot.sleeper.add(slot.engine ? slot.engine->memory() : model->parameters());
}

void PpoRun::setup_engines() {
  const RolePlan& actor = *plan_.role("actor");
  const int64_t samples = plan_.step.samples;
  for (auto [index, group] : runtime_.engine_groups()) {
    const EnginePlan& plan = plan_.engines.at(static_cast<size_t>(index));
    const int64_t share = slice_of(samples, static_cast<int>(plan_.engines.size()), index).size();
    // The KV cache holds what the plan's memory budget allows, at most the
    // engine's whole share of a step.
    const int64_t batch = std::max<int64_t>(1, plan.kv_cache_sequences > 0 ? std::min(plan.kv_cache_sequences, share) : share);
    ModelOptions options;
    options.tensor_parallel = group->size() > 1 ? group : nullptr;
    options.dtype = dtype_from_recipe_name(actor.dtype);
    options.device = device_;
    torch::manual_seed(recipe_.seed);
    RolloutEngine engine;
    engine.index = index;
    engine.group = group;
    engine.generator = std::make_unique<Generator>(load_hf_model(actor.model, options), options.tensor_parallel, batch,
                                                   recipe_.rollout.max_prompt_len + recipe_.rollout.max_new_tokens);
    engine.sleeper = std::make_unique<StorageSleep>();
    engine.sleeper->add(engine.generator->memory());
    engines_.push_back(std::move(engine));
  }
}

// With [colocate] sleep, the roles and engines idle in `phase` move their
// memory to the CPU (first, so the peak stays low) and the working ones
// come back.
void PpoRun::enter(Phase phase) {
  if (!plan_.sleep) return;
  const auto works = [phase](const std::string& role) {
    switch (phase) {
      case Phase::rollout: return role == "engine";
      case Phase::scoring: return role != "engine";
      case Phase::training: return role == "actor" || role == "critic";
      case Phase::sync: return role == "actor" || role == "engine";
    }
    return false;
  };
  const int64_t reserved_before = StorageSleep::device_reserved_bytes(device_);
  int64_t released = 0;
  for (bool waking : {false, true}) {
    for (auto& [name, slot] : roles_)
      if (works(name) == waking) waking ? slot.sleeper.wake() : void(released += slot.sleeper.sleep());
    for (auto& engine : engines_)
      if (works("engine") == waking) waking ? engine.sleeper->wake() : void(released += engine.sleeper->sleep());
  }
  if (released > 0) {
    // Once at info (what sleep does for this job), then at debug per phase.
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    const auto level = reported_sleep_ ? spdlog::level::debug : spdlog::level::info;
    reported_sleep_ = true;
    spdlog::log(level, "colocate sleep: {:.2f} GiB of idle roles' device memory moved to host memory entering the {} "
                "phase ({} reserved {:.2f} GiB before, {:.2f} GiB after the working roles woke)",
                released / kGiB, phase_name(phase), device_.str(), reserved_before / kGiB,
                StorageSleep::device_reserved_bytes(device_) / kGiB);
  }
}

}  // namespace meshrun::ppo_detail

namespace meshrun {

RunSummary run_ppo(const Recipe& recipe, const Plan& plan, Runtime& runtime) {
  train_detail::set_training_threads(runtime.launch());
  ppo_detail::PpoRun ppo(recipe, plan, runtime);
  return train_detail::run_shell(ppo, plan.run, runtime.world());
}

}  // namespace meshrun
