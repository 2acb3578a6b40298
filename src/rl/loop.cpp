// The PPO loop (ppo_run.hpp): the run's resources and stages on this rank,
// the order of a step, and [colocate] sleep between the phases.
#include <chrono>
#include <utility>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "meshrun/data/data.hpp"
#include "meshrun/model/hf_model.hpp"
#include "ppo_run.hpp"
#include "meshrun/train/train_threads.hpp"
#include "meshrun/train/trainer_output.hpp"

namespace meshrun::ppo_detail {

std::optional<StepOutcome> PpoRun::step(int64_t step, int64_t) {
  PhaseTimers phases(steady_clock());
  StepTrace trace{phases, [this](StepPhase phase) { enter(phase); }};
  SamplingStats sampling;
  std::optional<Prefetched> ahead = std::exchange(prefetched_, std::nullopt);
  std::optional<TrajectoryBatch> collected = rollouts_->collect(
      step, [&](TrajectoryBatch& round) { scoring_->score_rewards(round, step); }, trace, sampling, std::move(ahead));
  if (!collected) return std::nullopt;
  TrajectoryBatch& batch = *collected;
  // Every trajectory's version against the weights about to be updated:
  // older than the bound, it is not trained.
  async_ = AsyncFigures{};
  if (plan_.rl.max_staleness > 0)
    async_.staleness = enforce_staleness(batch, rollouts_->policy_version(), plan_.rl.max_staleness);
  const double rollout_seconds = phases.seconds("rollout") + trace.generated_ahead_seconds;
  Scores scores;
  {
    auto timer = phases.scope("scoring");
    enter(StepPhase::scoring);
    scores = scoring_->score(batch);
  }
  const bool from_training = plan_.rl.old_log_probs_from_training;
  Parity parity;
  if (!from_training) parity = logprob_parity(batch, scores.old_log_probs);
  Experience experience =
      make_experience(batch, scores, ExperienceOptions::of(plan_.rl, plan_.step, kl_controller_.coef()),
                      plan_.rl.normalize_reward ? &moments_ : nullptr);
  if (!from_training) kl_controller_.update(experience.kl_sum_per_sample, plan_.step.samples);

  TrainSums sums;
  {
    auto timer = phases.scope("train");
    enter(StepPhase::training);
    const auto train = [&] { sums = updates_->train(batch, scores, experience, step); };
    // Even at a capped run's last step the next round is generated: the
    // checkpoint keeps it, so a longer run resumed from it is exact.
    if (plan_.rl.max_staleness > 0) train_while_generating(step, train);
    else train();
  }
  if (from_training) {
    // The actor's log-probs before the update came from the update's own
    // forward; each row was produced on one rank, so a sum gathers them.
    torch::Tensor actor = sums.actor_log_probs.defined()
                              ? sums.actor_log_probs
                              : torch::zeros({batch.size(), batch.packed.response_len}, torch::kFloat);
    torch::Tensor kl = torch::tensor({sums.kl_sum}, torch::kFloat64);
    share_sum(actor, world_);
    share_sum(kl, world_);
    parity = logprob_parity(batch, actor);
    int64_t kept = 0;
    for (const Trajectory& trajectory : batch.trajectories) kept += trajectory.kept ? 1 : 0;
    const double tokens = std::max(1.0, experience.response_mask.sum().item<double>());
    experience.kl = kl.item<double>() / tokens;
    experience.kl_sum_per_sample = kl.item<double>() / static_cast<double>(std::max<int64_t>(1, kept));
    kl_controller_.update(experience.kl_sum_per_sample, plan_.step.samples);
  }
  if (!plan_.rl.partial) {  // partial rollouts: the engines took the weights as the update ended
    auto timer = phases.scope("sync");
    enter(StepPhase::sync);
    sync_engines(rollouts_->policy_version() + 1);
  }
  return step_outcome(step, batch, experience, parity, sampling, sums, trace.generated_tokens, rollout_seconds,
                      phases);
}

int64_t PpoRun::setup() {
  const RolePlan& actor = *plan_.role(Role::actor);
  DataTokenizer loaded = load_data_tokenizer(plan_.data, actor.model);
  tokenizer_ = std::move(loaded.tokenizer);
  tokenizer_source_ = loaded.source;
  const std::optional<int32_t> eos = tokenizer_->eos_id();
  std::vector<int64_t> stop_ids = generation_stop_ids(actor.model, eos ? std::optional<int64_t>(*eos) : std::nullopt);
  if (stop_ids.size() > 1 && world_.rank() == 0)
    spdlog::info("rollout: responses end at token ids {} (the tokenizer's eos and the model's eos_token_id)",
                 fmt::join(stop_ids, ", "));
  prompts_ = load_prompt_dataset(plan_.data, *tokenizer_, plan_.rl.sampling.max_prompt_len);
  std::unique_ptr<DistributedSampler> sampler = Rollouts::prompt_sampler(plan_, prompts_);

  if (!plan_.hooks.script.empty()) hooks_ = HookScript::load(plan_.hooks.script, hook_options_of(plan_.hooks));
  const auto defined = [this](const std::string& function) { return hooks_ && hooks_->has_function(function); };
  // Hooks see batch:label(i) when the prompts carry labels.
  const HookResources hook_view{hooks_.get(), tokenizer_.get(), plan_.data.label_key.empty() ? nullptr : &prompts_,
                                plan_.step.group_size};
  Rollouts::Resources resources;
  resources.prompts = &prompts_;
  resources.tokenizer = tokenizer_.get();
  resources.hooks = hook_view;
  resources.on_rollout = defined(plan_.hooks.on_rollout) ? plan_.hooks.on_rollout : std::string();
  resources.stop_ids = std::move(stop_ids);
  resources.sampler = std::move(sampler);
  if (plan_.rl.env.enabled) {
    env_ = EnvScript::load(plan_.rl.env.script, env_options_of(plan_.hooks, plan_.rl.env.timeout_s));
    resources.env = env_.get();
  }
  rollouts_ = std::make_unique<Rollouts>(plan_, world_, device_, std::move(resources));
  const int64_t total_steps = train_detail::capped_steps(rollouts_->sampler_steps(), plan_.run);

  // The reward role's hook, else [hooks] reward when the script defines it.
  std::string reward_function = plan_.rl.reward_hook;
  if (reward_function.empty() && defined(plan_.hooks.reward)) reward_function = plan_.hooks.reward;

  roles_.build(plan_, runtime_, device_, total_steps * plan_.step.optimizer_steps);
  rollouts_->build_engines(runtime_);
  scoring_ = std::make_unique<Scoring>(plan_, roles_, world_, device_, hook_view, std::move(reward_function));
  updates_ = std::make_unique<Updates>(plan_, roles_, device_);
  kl_controller_ = KlController(plan_.rl.init_kl_coef, plan_.rl.kl_target, plan_.rl.kl_horizon);
  if (world_.rank() == 0)
    spdlog::info("ppo: {} prompts, {} steps of {} prompts × {} samples, {} optimizer steps each; advantage {}",
                 prompts_.prompts.size(), total_steps, plan_.step.prompts, plan_.step.group_size,
                 plan_.step.optimizer_steps, name_of(plan_.rl.advantage));
  return total_steps;
}

// Asynchronous rollouts: this rank's engines generate the next step's first
// round (with the weights they hold, one update behind) while its trained
// roles update; ranks hold either, so the two run at once on different
// processes, and meet in the failure check and the exchange after. Partial
// rollouts: before that, in the weights' copy, which the engines join the
// moment the update ends (MidRoundWeights), resuming their sequences on
// the new weights.
void PpoRun::train_while_generating(int64_t step, const std::function<void()>& train) {
  const std::optional<std::vector<int64_t>> next = rollouts_->next_prompts();
  const int64_t version = rollouts_->policy_version();
  const bool trains = !roles_.all().empty();
  const auto weights_after_update = [&] {
    torch::Tensor flag = torch::zeros({1}, torch::kFloat).to(world_.device());
    PendingCollective arrived = world_.all_reduce_async(flag);
    return MidRoundWeights(flag, std::move(arrived), [this, version] { sync_engines(version + 1); }, version + 1);
  };
  std::optional<MidRoundWeights> weights;
  // The engines' ranks (which train nothing: rollout.async-engines) wait
  // for the update from the start; the others once they have updated.
  if (plan_.rl.partial && !trains) weights.emplace(weights_after_update());
  EngineTotals totals;
  std::vector<ProducedSlice> produced;
  std::string failure;
  const auto seconds_since = [](std::chrono::steady_clock::time_point from) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
  };
  const auto started = std::chrono::steady_clock::now();
  double generating = 0;
  if (next) {
    try {
      produced = rollouts_->produce(*next, step + 1, 0, totals, weights ? &*weights : nullptr);
    } catch (const DistError&) {
      throw;  // the world itself failed (the weights' copy): no agreement to reach
    } catch (const std::exception& error) {
      failure = error.what();
      if (failure.empty()) failure = "failed";
    }
    generating = seconds_since(started);
  }
  train();
  // Who waited for whom: from here to the first collective after the two
  // halves (partial rollouts: the weights' copy, which a failed engine's
  // rank joins too before the failure check).
  const auto waiting = std::chrono::steady_clock::now();
  if (plan_.rl.partial) {
    if (!weights) weights.emplace(weights_after_update());
    weights->load();
  }
  on_every_rank_or_fail_everywhere(world_, "env", [&] {
    if (!failure.empty()) throw KindError<ErrorKind::hook>(failure);
  });
  const double waited = seconds_since(waiting);
  // The slowest rank of each side, in one collective.
  torch::Tensor slowest =
      torch::tensor({trains ? waited : 0.0, trains ? 0.0 : waited, generating}, torch::kFloat64).to(world_.device());
  world_.all_reduce(slowest, ReduceOp::max);
  slowest = slowest.cpu();
  async_.trainer_wait_s = slowest[0].item<double>();
  async_.engine_wait_s = slowest[1].item<double>();
  async_.generate_ahead_s = slowest[2].item<double>();
  if (!next) return;
  Prefetched ahead;
  ahead.prompt_rows = *next;
  ahead.totals = totals;
  ahead.round = rollouts_->exchange(produced, *next, version, ahead.generated_tokens);
  ahead.seconds = async_.generate_ahead_s;
  prefetched_ = std::move(ahead);
}

void PpoRun::sync_engines(int64_t version) {
  rollouts_->sync_weights(roles_, runtime_.mesh(Role::actor), version);
}

void PpoRun::enter(StepPhase phase) {
  if (!plan_.sleep) return;
  const int64_t reserved_before = StorageSleep::device_reserved_bytes(device_);
  int64_t released = 0;
  for (bool waking : {false, true}) {
    for (auto& [role, slot] : roles_.all())
      if (row_of(role).works_in(phase) == waking) waking ? slot.sleeper.wake() : void(released += slot.sleeper.sleep());
    for (StorageSleep* engine : rollouts_->sleepers())
      if (row_of(Role::rollout).works_in(phase) == waking) waking ? engine->wake() : void(released += engine->sleep());
  }
  if (released > 0) {
    // Once at info (what sleep does for this job), then at debug per phase.
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    const auto level = reported_sleep_ ? spdlog::level::debug : spdlog::level::info;
    reported_sleep_ = true;
    spdlog::log(level, "colocate sleep: {:.2f} GiB of idle roles' device memory moved to host memory entering the {} "
                "phase ({} reserved {:.2f} GiB before, {:.2f} GiB after the working roles woke)",
                released / kGiB, step_phase_name(phase), device_.str(), reserved_before / kGiB,
                StorageSleep::device_reserved_bytes(device_) / kGiB);
  }
}

}  // namespace meshrun::ppo_detail

namespace meshrun {

RunSummary run_ppo(const Plan& plan, Runtime& runtime) {
  train_detail::set_training_threads(runtime.launch(), train_detail::device_for(plan).is_cpu());
  ppo_detail::PpoRun ppo(plan, runtime, train_detail::device_for(plan));
  return train_detail::run_shell(ppo, plan.run, runtime.world());
}

}  // namespace meshrun
