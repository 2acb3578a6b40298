// The PPO loop (include/meshrun/ppo.hpp): roles on this rank, rollout,
// scoring, experience, updates, weight sync, metrics.
#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <spdlog/spdlog.h>

#include "meshrun/hf_model.hpp"
#include "meshrun/hook_batch.hpp"
#include "meshrun/mesh.hpp"
#include "meshrun/metrics.hpp"
#include "meshrun/plan.hpp"
#include "meshrun/ppo.hpp"
#include "meshrun/prompts.hpp"
#include "meshrun/sampler.hpp"
#include "meshrun/storage_sleep.hpp"
#include "meshrun/train_engine.hpp"
#include "ppo_internal.hpp"
#include "train_threads.hpp"
#include "training_checkpoint.hpp"

namespace meshrun {
namespace {

using namespace ppo_detail;
using train_detail::TrainingCheckpointer;

torch::Device device_for(const Recipe& recipe) {
  if (recipe.launch.device == "cuda") return torch::Device(torch::kCUDA, static_cast<int8_t>(dist::local_rank()));
  return torch::Device(torch::kCPU);
}

// The numeric metrics of a record (booleans as 0/1), for on_step.
std::vector<std::pair<std::string, double>> numbers_of(const MetricsRecord& record) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, value] : record.values()) {
    if (const double* number = std::get_if<double>(&value)) out.emplace_back(name, *number);
    else if (const int64_t* integer = std::get_if<int64_t>(&value)) out.emplace_back(name, static_cast<double>(*integer));
    else if (const bool* flag = std::get_if<bool>(&value)) out.emplace_back(name, *flag ? 1.0 : 0.0);
  }
  return out;
}

// A role's model on this rank: trained (engine) or frozen (model only).
struct RoleSlot {
  const RoleConfig* config = nullptr;
  DeviceMesh* mesh = nullptr;
  Group* dp = nullptr;
  Group* tp = nullptr;
  std::optional<LlamaModel> model;
  std::unique_ptr<TrainEngine> engine;
  StorageSleep sleeper;  // [colocate] sleep
  // This rank writes the role's results for its dp slice (first tp and sp rank).
  bool produces() const { return mesh->coordinate(MeshAxis::tp) == 0 && mesh->coordinate(MeshAxis::sp) == 0; }
  RowRange rows(int64_t count) const { return slice_of(count, dp->size(), dp->rank()); }
};

struct RolloutEngine {
  int index = 0;
  Group* group = nullptr;
  std::unique_ptr<Generator> generator;
  std::unique_ptr<StorageSleep> sleeper;
};

// Who works in each phase; with [colocate] sleep everyone else sleeps.
enum class Phase { rollout, scoring, training, sync };

class PpoRun {
 public:
  PpoRun(const Recipe& recipe, const Plan& plan, Runtime& runtime)
      : recipe_(recipe),
        plan_(plan),
        runtime_(runtime),
        world_(runtime.world()),
        device_(device_for(recipe)) {}

  PpoSummary run() {
    setup();
    const int64_t samples_per_step = static_cast<int64_t>(recipe_.batch.rollout) * recipe_.batch.n_samples_per_prompt;
    PpoSummary summary;
    TrainingCheckpointer checkpointer(recipe_, world_, layout());
    const int64_t first_step = resume(checkpointer, summary);
    const std::string metrics_path = (std::filesystem::path(recipe_.logging.dir) / "metrics.jsonl").string();
    if (world_.rank() == 0) MetricsWriter::keep_steps_up_to(metrics_path, first_step - 1);
    metrics_ = std::make_unique<MetricsWriter>(recipe_.logging.dir, world_.rank() == 0);
    for (int64_t step = first_step; step <= total_steps_; ++step) {
      PhaseTimers phases(steady_clock());
      std::optional<SamplerStep> prompts_step = sampler_->next();
      if (!prompts_step) break;
      Rollout rollout;
      int64_t generated = 0;
      {
        auto timer = phases.scope("rollout");
        enter(Phase::rollout);
        rollout = generate(prompts_step->micro_batches.front(), step, samples_per_step, generated);
      }
      const double rollout_seconds = phases.seconds("rollout");
      if (hooks_ && hooks_->has_function(recipe_.hooks.on_rollout)) {
        auto timer = phases.scope("hooks");
        apply_on_rollout(rollout, step);
      }
      Scores scores;
      {
        auto timer = phases.scope("scoring");
        enter(Phase::scoring);
        scores = score(rollout, step);
      }
      ExperienceOptions options = experience_options();
      Experience experience = make_experience(rollout, scores, options, recipe_.ppo.normalize_reward ? &moments_ : nullptr);
      kl_controller_.update(experience.kl_sum_per_sample, samples_per_step);

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
      const double reward_mean = log_step(step, rollout, experience, sums, generated, rollout_seconds, phases);
      if (step == 1) summary.first_reward = reward_mean;
      summary.last_reward = reward_mean;
      summary.steps = step;
      if (checkpointer.due(step, step == total_steps_)) {
        enter(Phase::training);
        save_checkpoint(checkpointer, step, summary);
      }
    }
    enter(Phase::training);
    save_output();
    summary.output_dir = recipe_.checkpoint.output;
    summary.metrics_path = metrics_->path();
    return summary;
  }

 private:
  struct TrainSums {
    double policy_loss = 0, clip = 0, entropy = 0, tokens_policy = 0, value_loss = 0, tokens_value = 0;
    long long tokens = 0;  // processed in training, this rank's actor share (for throughput)
  };

  void setup() {
    const std::string tokenizer_source = recipe_.data.tokenizer.empty() ? recipe_.role("actor")->model : recipe_.data.tokenizer;
    tokenizer_ = load_tokenizer(tokenizer_source);
    tokenizer_source_ = tokenizer_source;
    prompts_ = load_prompt_dataset(recipe_.data, *tokenizer_, recipe_.rollout.max_prompt_len);
    SamplerConfig sampler;
    sampler.num_items = static_cast<int64_t>(prompts_.prompts.size());
    sampler.global_batch = recipe_.batch.rollout;
    sampler.micro_batch = recipe_.batch.rollout;
    sampler.seed = recipe_.seed;
    sampler.epochs = recipe_.ppo.num_episodes;
    if (sampler.num_items < recipe_.batch.rollout)
      throw std::runtime_error("the prompt file " + recipe_.data.path + " has " + std::to_string(sampler.num_items) +
                               " prompts, fewer than one rollout batch (batch.rollout = " +
                               std::to_string(recipe_.batch.rollout) + ")");
    sampler_ = std::make_unique<DistributedSampler>(sampler);
    total_steps_ = sampler_->total_steps();
    if (recipe_.train.max_steps > 0) total_steps_ = std::min<int64_t>(total_steps_, recipe_.train.max_steps);

    const int64_t samples = static_cast<int64_t>(recipe_.batch.rollout) * recipe_.batch.n_samples_per_prompt;
    optimizer_steps_per_step_ = std::max<int64_t>(1, samples / recipe_.batch.train) * recipe_.ppo.max_epochs;
    if (samples % recipe_.batch.train != 0 && world_.rank() == 0)
      spdlog::warn("ppo: {} samples per step are not a multiple of batch.train = {}; the last {} of each pass are "
                   "not trained on",
                   samples, recipe_.batch.train, samples % recipe_.batch.train);

    if (!recipe_.hooks.script.empty()) {
      HookOptions options;
      options.sandbox = recipe_.hooks.sandbox;
      options.instruction_limit = recipe_.hooks.instruction_limit;
      hooks_ = HookScript::load(recipe_.hooks.script, options);
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
                   prompts_.prompts.size(), total_steps_, recipe_.batch.rollout, recipe_.batch.n_samples_per_prompt,
                   optimizer_steps_per_step_, recipe_.ppo.advantage);
  }

  void setup_role(const std::string& name) {
    const RoleConfig* config = recipe_.role(name);
    if (!config || config->model.empty()) return;
    DeviceMesh& mesh = runtime_.mesh(name);
    if (!mesh.holds_this_rank()) return;
    if (mesh.sp() > 1)
      throw std::runtime_error("sequence parallelism (roles." + name + " mesh sp = " + std::to_string(mesh.sp()) +
                               ") is not supported by the PPO trainer yet; use dp and tp");
    RoleSlot& slot = roles_[name];
    slot.config = config;
    slot.mesh = &mesh;
    slot.dp = &mesh.group(MeshAxis::dp);
    slot.tp = mesh.tp() > 1 ? &mesh.group(MeshAxis::tp) : nullptr;
    ModelOptions options;
    options.tensor_parallel = slot.tp;
    options.dtype = dtype_from_recipe_name(config->dtype);
    options.device = device_;
    options.gradient_checkpointing = config->gradient_checkpointing;
    options.head = (name == "critic" || name == "reward") ? ModelHead::value : ModelHead::language_model;
    torch::manual_seed(recipe_.seed);
    LlamaModel model = load_hf_model(config->model, options);
    if (name == "actor" || name == "critic") {
      slot.engine = std::make_unique<TrainEngine>(
          model, mesh, EngineOptions::from_recipe(*config, recipe_.train, total_steps_ * optimizer_steps_per_step_));
    } else {
      model->eval();
      for (auto& parameter : model->parameters()) parameter.set_requires_grad(false);
    }
    slot.model = model;
    slot.sleeper.add(slot.engine ? slot.engine->memory() : model->parameters());
  }

  void setup_engines() {
    const RoleConfig& actor = *recipe_.role("actor");
    const int64_t samples = static_cast<int64_t>(recipe_.batch.rollout) * recipe_.batch.n_samples_per_prompt;
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

  // What the rank files of a checkpoint depend on: every trained role's
  // mesh and ZeRO stage.
  std::string layout() const {
    std::string text = "world " + std::to_string(world_.size());
    for (const char* name : {"actor", "critic"}) {
      const RoleConfig* role = recipe_.role(name);
      if (!role) continue;
      const MeshPlan& mesh = plan_.role(name)->mesh;
      text += std::string("; ") + name + " dp " + std::to_string(mesh.dp) + " tp " + std::to_string(mesh.tp) +
              " zero " + std::to_string(role->zero_stage) + " " + role->dtype;
    }
    return text;
  }

  // The step to start at: 1, or the one after the checkpoint resumed from
  // (engines then get the restored actor's weights).
  int64_t resume(TrainingCheckpointer& checkpointer, PpoSummary& summary) {
    auto point = checkpointer.resume();
    if (!point) return 1;
    enter(Phase::training);
    for (auto& [name, slot] : roles_)
      if (slot.engine) slot.engine->load_local_state(train_detail::with_prefix_removed(point->tensors, name));
    train_detail::set_cpu_rng_state(point->tensors.at("rng/cpu"));
    const nlohmann::json& trainer = point->trainer;
    sampler_->restore(SamplerState::from_json(trainer.at("sampler").dump()));
    kl_controller_.set_coef(trainer.at("kl_coef").get<double>());
    moments_.restore(trainer.at("reward_mean").get<double>(), trainer.at("reward_m2").get<double>(),
                     trainer.at("reward_count").get<int64_t>());
    summary.first_reward = trainer.value("first_reward", 0.0);
    summary.last_reward = trainer.value("last_reward", 0.0);
    summary.steps = point->step;
    enter(Phase::sync);
    sync_engines();
    return point->step + 1;
  }

  void save_checkpoint(TrainingCheckpointer& checkpointer, int64_t step, const PpoSummary& summary) {
    NamedTensors tensors;
    for (auto& [name, slot] : roles_)
      if (slot.engine)
        for (auto& [key, tensor] : slot.engine->local_state()) tensors[name + "/" + key] = tensor;
    tensors["rng/cpu"] = train_detail::cpu_rng_state();
    const nlohmann::json trainer = {{"step", step},
                                    {"sampler", nlohmann::json::parse(sampler_->state().to_json())},
                                    {"kl_coef", kl_controller_.coef()},
                                    {"reward_mean", moments_.mean()},
                                    {"reward_m2", moments_.m2()},
                                    {"reward_count", moments_.count()},
                                    {"first_reward", summary.first_reward},
                                    {"last_reward", summary.last_reward}};
    // save_hf: the actor (and with save_value_network the critic) as
    // Hugging Face directories; gathering is collective on their ranks.
    NamedTensors actor_full, critic_full;
    auto actor = roles_.find("actor");
    auto critic = roles_.find("critic");
    if (recipe_.checkpoint.save_hf && actor != roles_.end()) actor_full = actor->second.engine->gather_full_parameters();
    if (recipe_.checkpoint.save_hf && recipe_.checkpoint.save_value_network && critic != roles_.end())
      critic_full = critic->second.engine->gather_full_parameters();
    checkpointer.save(step, tensors, trainer, [&](const std::string& directory) {
      if (!recipe_.checkpoint.save_hf) return;
      // Written by each role's first rank, which holds the gathered weights.
      const auto write = [&](const char* name, const NamedTensors& full) {
        auto slot = roles_.find(name);
        if (slot == roles_.end() || full.empty() || world_.rank() != runtime_.mesh(name).ranks().front()) return;
        SaveModelOptions options;
        options.dtype = dtype_from_recipe_name(slot->second.config->dtype);
        const LlamaModel& model = *slot->second.model;
        save_hf_model((std::filesystem::path(directory) / "hf" / name).string(), model->options().config,
                      model->options().head, full, options);
      };
      write("actor", actor_full);
      write("critic", critic_full);
    });
  }

  // With [colocate] sleep, the roles and engines idle in `phase` move their
  // memory to the CPU (first, so the peak stays low) and the working ones
  // come back.
  void enter(Phase phase) {
    if (!recipe_.colocate.sleep) return;
    const auto works = [phase](const std::string& role) {
      switch (phase) {
        case Phase::rollout: return role == "engine";
        case Phase::scoring: return role != "engine";
        case Phase::training: return role == "actor" || role == "critic";
        case Phase::sync: return role == "actor" || role == "engine";
      }
      return false;
    };
    for (bool waking : {false, true}) {
      for (auto& [name, slot] : roles_)
        if (works(name) == waking) waking ? slot.sleeper.wake() : slot.sleeper.sleep();
      for (auto& engine : engines_)
        if (works("engine") == waking) waking ? engine.sleeper->wake() : engine.sleeper->sleep();
    }
  }

  SamplingOptions sampling_options(int64_t step, int engine) const {
    SamplingOptions options;
    options.temperature = recipe_.rollout.temperature;
    options.top_p = recipe_.rollout.top_p;
    options.top_k = recipe_.rollout.top_k;
    options.max_new_tokens = recipe_.rollout.max_new_tokens;
    options.eos_id = tokenizer_->eos_id();
    options.pad_id = tokenizer_->pad_id().value_or(0);
    options.vocab_limit = tokenizer_->vocab_size();
    options.seed = data_seed(recipe_.seed + 1000003LL * step, engine);
    return options;
  }

  // Engine e generates the samples of its slice of the step's prompts; the
  // exchange gives every rank all of them.
  Rollout generate(const std::vector<int64_t>& prompt_indices, int64_t step, int64_t samples, int64_t& generated) {
    const int n = recipe_.batch.n_samples_per_prompt;
    const int engines = static_cast<int>(plan_.engines.size());
    std::vector<std::pair<int64_t, std::vector<GeneratedSample>>> produced;
    for (auto& engine : engines_) {
      const RowRange rows = slice_of(samples, engines, engine.index);
      std::vector<std::vector<int32_t>> prompts;
      for (int64_t row = rows.begin; row < rows.end; ++row)
        prompts.push_back(prompts_.prompts[static_cast<size_t>(prompt_indices[static_cast<size_t>(row / n)])].ids);
      auto out = engine.generator->generate(prompts, sampling_options(step, engine.index));
      if (engine.group->rank() == 0) produced.emplace_back(rows.begin, std::move(out));
    }
    Rollout rollout;
    rollout.samples = share_samples(produced, samples, recipe_.rollout.max_prompt_len, recipe_.rollout.max_new_tokens, world_);
    for (const auto& sample : rollout.samples) generated += static_cast<int64_t>(sample.response.size());
    rollout.keep = torch::ones({samples}, torch::kFloat);
    rollout.batch = pack_samples(rollout.samples, tokenizer_->pad_id().value_or(0), device_);
    return rollout;
  }

  void apply_on_rollout(Rollout& rollout, int64_t step) {
    std::vector<uint8_t> keep(rollout.samples.size(), 1);
    on_rank0_or_fail_everywhere(world_, recipe_.hooks.on_rollout, [&] {
      call_on_rollout(hook_context(step), recipe_.hooks.on_rollout, rollout.samples, keep);
    });
    // Rank 0's (possibly rewritten) responses and keep flags to everyone.
    const int64_t n = static_cast<int64_t>(rollout.samples.size());
    const int64_t width = rollout.batch.response_len;
    torch::Tensor state = torch::zeros({n, width + 1}, torch::kInt64);
    if (world_.rank() == 0) {
      auto view = state.accessor<int64_t, 2>();
      for (int64_t row = 0; row < n; ++row) {
        const auto& response = rollout.samples[static_cast<size_t>(row)].response;
        for (size_t t = 0; t < response.size(); ++t) view[row][static_cast<int64_t>(t)] = response[t];
        view[row][width] = keep[static_cast<size_t>(row)];
      }
    }
    torch::Tensor shared = state.to(world_.device());
    world_.broadcast(shared, 0);
    state = shared.cpu();
    auto view = state.accessor<int64_t, 2>();
    for (int64_t row = 0; row < n; ++row) {
      auto& response = rollout.samples[static_cast<size_t>(row)].response;
      for (size_t t = 0; t < response.size(); ++t) response[t] = static_cast<int32_t>(view[row][static_cast<int64_t>(t)]);
      rollout.keep[row] = static_cast<float>(view[row][width]);
    }
    rollout.batch = pack_samples(rollout.samples, tokenizer_->pad_id().value_or(0), device_);
  }

  HookContext hook_context(int64_t step) const {
    HookContext context;
    context.script = hooks_.get();
    context.tokenizer = tokenizer_.get();
    context.step = step;
    context.n_samples_per_prompt = recipe_.batch.n_samples_per_prompt;
    return context;
  }

  // Logits of the response positions (the token at prompt_len + t is
  // predicted at prompt_len + t - 1), as log-probs of the sampled tokens.
  torch::Tensor response_log_probs(const torch::Tensor& logits, const SequenceBatch& batch, const torch::Tensor& rows,
                                   Group* tp) const {
    const int64_t p = batch.prompt_len, r = batch.response_len;
    torch::Tensor scaled = logits.narrow(1, p - 1, r);
    if (recipe_.rollout.temperature > 0 && recipe_.rollout.temperature != 1.0) scaled = scaled / recipe_.rollout.temperature;
    const torch::Tensor targets = batch.sequences.index_select(0, rows).narrow(1, p, r);
    return vocab_parallel_log_probs(scaled, targets, tp);
  }

  ModelInputs inputs_for(const SequenceBatch& batch, const torch::Tensor& rows) const {
    return ModelInputs{batch.sequences.index_select(0, rows), {}, {}, batch.attention_mask.index_select(0, rows)};
  }

  // Each role scores its dp slice in micro_rollout chunks; one all-reduce
  // gives everyone every row.
  Scores score(const Rollout& rollout, int64_t step) {
    const SequenceBatch& batch = rollout.batch;
    const int64_t n = batch.sequences.size(0), r = batch.response_len;
    torch::Tensor per_token = torch::zeros({3, n, r}, torch::kFloat);
    torch::Tensor per_sample = torch::zeros({n}, torch::kFloat);
    torch::NoGradGuard no_grad;
    for (auto& [name, slot] : roles_) {
      const RowRange range = slot.rows(n);
      for (int64_t begin = range.begin; begin < range.end; begin += recipe_.batch.micro_rollout) {
        const int64_t end = std::min<int64_t>(range.end, begin + recipe_.batch.micro_rollout);
        const torch::Tensor rows = torch::arange(begin, end, torch::TensorOptions().dtype(torch::kInt64).device(device_));
        const ModelInputs inputs = inputs_for(batch, rows);
        torch::Tensor out;
        if (name == "actor") {
          slot.engine->eval();
          out = response_log_probs(slot.engine->forward(inputs), batch, rows, slot.tp);
        } else if (name == "ref") {
          out = response_log_probs((*slot.model)->forward(inputs), batch, rows, slot.tp);
        } else if (name == "critic") {
          slot.engine->eval();
          out = slot.engine->forward(inputs).narrow(1, batch.prompt_len - 1, r);
        } else {  // reward model: its score at each sequence's last real token
          const torch::Tensor last = (batch.prompt_len + batch.response_mask.index_select(0, rows).sum(1) - 1).unsqueeze(1);
          out = (*slot.model)->forward(inputs).gather(1, last).squeeze(1);
        }
        if (!slot.produces()) continue;
        out = out.to(torch::kCPU, torch::kFloat);
        if (name == "reward") per_sample.narrow(0, begin, end - begin).copy_(out);
        else per_token[name == "actor" ? 0 : name == "ref" ? 1 : 2].narrow(0, begin, end - begin).copy_(out);
      }
    }
    torch::Tensor flat = torch::cat({per_token.view(-1), per_sample});
    share_sum(flat, world_);
    Scores scores;
    scores.old_log_probs = flat.narrow(0, 0, n * r).view({n, r}).to(device_);
    scores.ref_log_probs = flat.narrow(0, n * r, n * r).view({n, r}).to(device_);
    scores.values = flat.narrow(0, 2 * n * r, n * r).view({n, r}).to(device_);
    scores.model_rewards = flat.narrow(0, 3 * n * r, n).to(device_);
    scores.hook_rewards = torch::zeros({n}, torch::kFloat);
    if (!reward_function_.empty()) {
      torch::Tensor hook_rewards = torch::zeros({n}, torch::kFloat64);
      on_rank0_or_fail_everywhere(world_, reward_function_, [&] {
        const std::vector<double> values = call_reward(hook_context(step), reward_function_, rollout.samples, scores.model_rewards);
        std::copy(values.begin(), values.end(), hook_rewards.data_ptr<double>());
      });
      torch::Tensor shared = hook_rewards.to(world_.device());
      world_.broadcast(shared, 0);
      scores.hook_rewards = shared.to(torch::kCPU, torch::kFloat);
    }
    scores.hook_rewards = scores.hook_rewards.to(device_);
    return scores;
  }

  ExperienceOptions experience_options() const {
    ExperienceOptions options;
    options.advantage = recipe_.ppo.advantage;
    options.group_size = recipe_.batch.n_samples_per_prompt;
    options.kl_coef = kl_controller_.coef();
    options.kl_estimator = recipe_.ppo.kl_estimator;
    options.gamma = recipe_.ppo.gamma;
    options.lambd = recipe_.ppo.lambd;
    options.reward_clip = recipe_.ppo.reward_clip;
    options.has_ref = recipe_.has_role("ref") && !recipe_.role("ref")->model.empty();
    return options;
  }

  // max_epochs passes; each takes batch.train samples per optimizer step in
  // an order shuffled from (seed, step, epoch), the same on every rank.
  TrainSums train(const Rollout& rollout, const Scores& scores, const Experience& experience, int64_t step) {
    TrainSums sums;
    const SequenceBatch& batch = rollout.batch;
    const int64_t n = batch.sequences.size(0);
    const int64_t per_step = recipe_.batch.train;
    for (int epoch = 0; epoch < recipe_.ppo.max_epochs; ++epoch) {
      torch::manual_seed(static_cast<uint64_t>(data_seed(recipe_.seed + 7919LL * step, epoch)));
      const torch::Tensor order = torch::randperm(n, torch::kInt64).to(device_);
      for (int64_t begin = 0; begin + per_step <= n; begin += per_step) {
        const torch::Tensor chunk = order.narrow(0, begin, per_step);
        const double tokens = std::max(1.0, experience.response_mask.index_select(0, chunk).sum().item<double>());
        for (auto& [name, slot] : roles_) {
          if (!slot.engine) continue;
          const RowRange local = slot.rows(per_step);
          slot.engine->train();
          for (int64_t micro = local.begin; micro < local.end; micro += recipe_.batch.micro_train) {
            const int64_t end = std::min(local.end, micro + recipe_.batch.micro_train);
            const torch::Tensor rows = chunk.narrow(0, micro, end - micro);
            const bool last = end == local.end;
            if (name == "actor") train_actor_micro(slot, batch, scores, experience, rows, tokens, last, sums);
            else train_critic_micro(slot, batch, scores, experience, rows, tokens, last, sums);
          }
          slot.engine->step();
        }
      }
    }
    return sums;
  }

  void train_actor_micro(RoleSlot& slot, const SequenceBatch& batch, const Scores& scores, const Experience& experience,
                         const torch::Tensor& rows, double tokens, bool last, TrainSums& sums) {
    const torch::Tensor logits = slot.engine->forward(inputs_for(batch, rows));
    const torch::Tensor log_probs = response_log_probs(logits, batch, rows, slot.tp);
    const torch::Tensor mask = experience.response_mask.index_select(0, rows);
    PolicyLoss policy = clipped_policy_loss(log_probs, scores.old_log_probs.index_select(0, rows),
                                            experience.advantages.index_select(0, rows), mask, recipe_.ppo.eps_clip);
    torch::Tensor loss = policy.loss.sum();
    const torch::Tensor entropy =
        vocab_parallel_entropy(logits.narrow(1, batch.prompt_len - 1, batch.response_len), slot.tp) * mask;
    if (recipe_.ppo.entropy_coef > 0) loss = loss - recipe_.ppo.entropy_coef * entropy.sum();
    // Token mean over the global batch; the engine averages over dp.
    slot.engine->backward(loss * (slot.dp->size() / tokens), last);
    if (slot.produces()) {
      sums.policy_loss += policy.loss.sum().item<double>();
      sums.clip += policy.clipped.sum().item<double>();
      sums.entropy += entropy.detach().sum().item<double>();
      sums.tokens_policy += mask.sum().item<double>();
    }
    sums.tokens += batch.attention_mask.index_select(0, rows).sum().item<int64_t>();
  }

  void train_critic_micro(RoleSlot& slot, const SequenceBatch& batch, const Scores& scores, const Experience& experience,
                          const torch::Tensor& rows, double tokens, bool last, TrainSums& sums) {
    const torch::Tensor values = slot.engine->forward(inputs_for(batch, rows)).narrow(1, batch.prompt_len - 1, batch.response_len);
    const torch::Tensor mask = experience.response_mask.index_select(0, rows);
    const torch::Tensor loss = clipped_value_loss(values, scores.values.index_select(0, rows),
                                                  experience.returns.index_select(0, rows), mask, recipe_.ppo.value_clip);
    slot.engine->backward(loss.sum() * (slot.dp->size() / tokens), last);
    if (slot.produces()) {
      sums.value_loss += loss.sum().item<double>();
      sums.tokens_value += mask.sum().item<double>();
    }
  }

  // The actor's new weights into every engine: gathered on the actor ranks;
  // an engine whose ranks all hold the actor copies its shards locally,
  // others receive them by broadcast from the actor's first rank.
  void sync_engines() {
    NamedTensors full;
    auto actor = roles_.find("actor");
    if (actor != roles_.end()) full = actor->second.engine->gather_full_parameters();
    const DeviceMesh& actor_mesh = runtime_.mesh("actor");
    bool all_local = true;
    for (const auto& engine : plan_.engines)
      for (int rank : engine.ranks) all_local = all_local && actor_mesh.contains(rank);
    std::vector<LlamaModel*> models;
    for (auto& engine : engines_) models.push_back(&engine.generator->model());
    send_weights_to_engines(std::move(full), all_local ? ParameterShapes{} : parameter_list(), all_local,
                            actor_mesh.ranks().front(), models, world_);
  }

  // (name, full shape) of every actor parameter, from the plan's model
  // config, in a fixed order known to every rank.
  ParameterShapes parameter_list() {
    if (parameter_list_.empty()) {
      ModelOptions options;
      options.initialize = false;
      options.config = actor_config();
      LlamaModel skeleton(options);
      for (const auto& spec : skeleton->parameter_specs()) parameter_list_.emplace_back(spec.name, spec.full_shape);
    }
    return parameter_list_;
  }

  ModelConfig actor_config() {
    auto actor = roles_.find("actor");
    if (actor != roles_.end()) return (*actor->second.model)->config();
    if (!engines_.empty()) return engines_.front().generator->model()->config();
    return static_cast<const ModelConfig&>(plan_.role("actor")->architecture);
  }

  double log_step(int64_t step, const Rollout& rollout, const Experience& experience, TrainSums sums, int64_t generated,
                  double rollout_seconds, const PhaseTimers& phases) {
    // Loss sums live on the roles' ranks: one all-reduce brings them to rank 0.
    torch::Tensor totals = torch::tensor({sums.policy_loss, sums.clip, sums.entropy, sums.tokens_policy, sums.value_loss,
                                          sums.tokens_value, static_cast<double>(sums.tokens)},
                                         torch::kFloat64);
    share_sum(totals, world_);
    auto t = totals.accessor<double, 1>();
    const torch::Tensor keep = rollout.keep.to(torch::kBool);
    const torch::Tensor rewards = experience.rewards.cpu().masked_select(keep);
    const double reward_mean = rewards.numel() ? rewards.mean().item<double>() : 0.0;
    const double reward_std = rewards.numel() > 1 ? rewards.std(false).item<double>() : 0.0;
    const double response_len = rollout.batch.response_mask.to(torch::kFloat).sum(1).mean().item<double>();
    MetricsRecord record(step);
    record.set("reward_mean", reward_mean)
        .set("reward_std", reward_std)
        .set("kl", experience.kl)
        .set("kl_coef", kl_controller_.coef())
        .set("policy_loss", t[0] / std::max(1.0, t[3]))
        .set("clip_frac", t[1] / std::max(1.0, t[3]))
        .set("entropy", t[2] / std::max(1.0, t[3]))
        .set("response_len", response_len)
        .set("kept_samples", keep.sum().item<int64_t>())
        .set("rollout_tokens_per_s", rollout_seconds > 0 ? generated / rollout_seconds : 0.0)
        .set("train_tokens_per_s", phases.seconds("train") > 0 ? t[6] / phases.seconds("train") : 0.0);
    if (recipe_.has_role("critic")) record.set("value_loss", t[4] / std::max(1.0, t[5]));
    const RoleConfig* reward_role = recipe_.role("reward");
    if (reward_role && !reward_role->model.empty()) record.set("model_reward_mean", experience.model_reward_mean);
    if (!reward_function_.empty()) record.set("hook_reward_mean", experience.hook_reward_mean);
    phases.add_to(record);
    if (hooks_ && hooks_->has_function(recipe_.hooks.on_step)) {
      std::vector<std::pair<std::string, double>> extra;
      on_rank0_or_fail_everywhere(world_, recipe_.hooks.on_step, [&] {
        extra = call_on_step_hook(*hooks_, recipe_.hooks.on_step, step, numbers_of(record));
      });
      for (const auto& [name, value] : extra) record.set(name, value);
    }
    metrics_->write(record);
    if (world_.rank() == 0)
      spdlog::info("step {} reward {:.4f} ± {:.4f} kl {:.4f} policy_loss {:.4f} clip {:.3f} response_len {:.1f}", step,
                   reward_mean, reward_std, experience.kl, t[0] / std::max(1.0, t[3]), t[1] / std::max(1.0, t[3]),
                   response_len);
    return reward_mean;
  }

  void save_output() {
    auto actor = roles_.find("actor");
    NamedTensors full;
    if (actor != roles_.end()) full = actor->second.engine->gather_full_parameters();
    if (world_.rank() == runtime_.mesh("actor").ranks().front()) {
      SaveModelOptions options;
      options.dtype = dtype_from_recipe_name(actor->second.config->dtype);
      const LlamaModel& model = *actor->second.model;
      save_hf_model(recipe_.checkpoint.output, model->options().config, model->options().head, full, options);
      for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json"}) {
        std::error_code error;
        const auto from = std::filesystem::path(tokenizer_source_) / name;
        if (std::filesystem::is_directory(tokenizer_source_, error) && std::filesystem::exists(from, error))
          std::filesystem::copy_file(from, std::filesystem::path(recipe_.checkpoint.output) / name,
                                     std::filesystem::copy_options::overwrite_existing);
      }
      spdlog::info("ppo: actor written to {}", recipe_.checkpoint.output);
    }
    world_.barrier();
  }

  const Recipe& recipe_;
  const Plan& plan_;
  Runtime& runtime_;
  Group& world_;
  torch::Device device_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string tokenizer_source_;
  PromptDataset prompts_;
  std::unique_ptr<DistributedSampler> sampler_;
  int64_t total_steps_ = 0;
  int64_t optimizer_steps_per_step_ = 1;
  std::unique_ptr<HookScript> hooks_;
  std::string reward_function_;
  std::map<std::string, RoleSlot> roles_;
  std::vector<RolloutEngine> engines_;
  KlController kl_controller_{0, 0, 1};
  RunningMoments moments_;
  ParameterShapes parameter_list_;
};

}  // namespace

PpoSummary run_ppo(const Recipe& recipe, const Plan& plan, Runtime& runtime) {
  train_detail::set_training_threads(runtime.launch());
  return PpoRun(recipe, plan, runtime).run();
}

}  // namespace meshrun
