// PPO per-step metrics, the on_step hook, and the console line.
#include <fmt/format.h>

#include <cmath>

#include "meshrun/hooks/hook_batch.hpp"
#include "ppo_run.hpp"

namespace meshrun::ppo_detail {

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

namespace {

// Multi-turn episodes: turns, how they ended, observations, the
// environment's reward and time (its calls summed over the ranks).
void add_env_metrics(MetricsRecord& record, const TrajectoryBatch& batch, const Experience& experience,
                     double env_calls, double env_seconds) {
  double turns = 0, turns_max = 0, done = 0, truncated = 0, observation_tokens = 0, observations = 0, cut = 0;
  for (const Trajectory& trajectory : batch.trajectories) {
    turns += trajectory.sample.turns;
    turns_max = std::max<double>(turns_max, trajectory.sample.turns);
    done += trajectory.episode.end == EpisodeEnd::done ? 1 : 0;
    truncated += trajectory.episode.end == EpisodeEnd::truncated ? 1 : 0;
    for (uint8_t policy : trajectory.loss_mask) observation_tokens += policy ? 0 : 1;
    observations += trajectory.episode.observations;
    cut += trajectory.episode.observations_cut;
  }
  const double n = std::max<double>(1, static_cast<double>(batch.trajectories.size()));
  record.set("env/turns_mean", turns / n)
      .set("env/turns_max", turns_max)
      .set("env/done_frac", done / n)
      .set("env/truncated_frac", truncated / n)
      .set("env/observation_tokens_mean", observation_tokens / n)
      .set("env/observation_cut_frac", observations > 0 ? cut / observations : 0.0)
      .set("env/reward_mean", experience.env_reward_mean)
      .set("env/step_time_s", env_calls > 0 ? env_seconds / env_calls : 0.0)
      .set("env/time_s", env_seconds);
}

}  // namespace

StepOutcome PpoRun::step_outcome(int64_t step, const TrajectoryBatch& batch, const Experience& experience,
                                 const Parity& parity, const SamplingStats& sampling, const TrainSums& sums,
                                 int64_t generated, double rollout_seconds, const PhaseTimers& phases) {
  const RlPlan& rl = plan_.rl;
  // Loss sums live on the roles' ranks: one all-reduce brings them to rank 0.
  // The engines' counts ride along: each engine counted on its tp rank 0.
  const EngineTotals& engines = rollouts_->engine_totals();
  torch::Tensor totals = torch::tensor({sums.policy_loss, sums.clip, sums.entropy, sums.tokens_policy, sums.value_loss,
                                        sums.tokens_value, static_cast<double>(sums.tokens), sums.kl_loss,
                                        sums.actor_steps, static_cast<double>(engines.busy_slot_steps),
                                        static_cast<double>(engines.slot_steps),
                                        static_cast<double>(engines.prefix_shared_tokens),
                                        static_cast<double>(engines.preemptions),
                                        static_cast<double>(engines.env_calls), engines.env_seconds,
                                        sums.is_tokens, sums.is_ratio_sum, sums.is_clipped, sums.is_masked,
                                        sums.moe.aux_sum, sums.moe.micro_batches, sums.moe.replayed,
                                        sums.moe.flipped, sums.moe.routed},
                                       torch::kFloat64);
  share_sum(totals, world_);
  // The maxima in one collective: an engine's peak KV blocks, the largest
  // rollout importance ratio.
  torch::Tensor maxima =
      torch::tensor({static_cast<double>(engines.kv_peak_blocks), sums.is_ratio_max, sums.moe.load_max}, torch::kFloat64)
          .to(world_.device());
  world_.all_reduce(maxima, ReduceOp::max);
  maxima = maxima.cpu();
  const auto kv_peak_blocks = static_cast<int64_t>(maxima[0].item<double>());
  const double is_ratio_max = maxima[1].item<double>();
  auto t = totals.accessor<double, 1>();
  const torch::Tensor keep = batch.kept().to(torch::kBool);
  const torch::Tensor rewards = experience.rewards.cpu().masked_select(keep);
  const double reward_mean = rewards.numel() ? rewards.mean().item<double>() : 0.0;
  const double reward_std = rewards.numel() > 1 ? rewards.std(false).item<double>() : 0.0;
  const torch::Tensor lengths = batch.packed.response_mask.to(torch::kFloat).sum(1);
  const double response_len = lengths.mean().item<double>();
  // The response-length distribution (nearest-rank quantiles).
  const torch::Tensor sorted = std::get<0>(lengths.sort());
  const auto quantile = [&](double q) {
    const int64_t n = sorted.size(0);
    return n ? sorted[std::min(n - 1, static_cast<int64_t>(std::ceil(q * static_cast<double>(n))) - 1)].item<double>()
             : 0.0;
  };
  StepOutcome out;
  out.headline = reward_mean;
  out.record = MetricsRecord(step);
  MetricsRecord& record = out.record;
  record.set("reward_mean", reward_mean)
      .set("reward_std", reward_std)
      .set("kl", experience.kl)
      .set("kl_coef", kl_controller_.coef())
      .set("policy_loss", t[0] / std::max(1.0, t[8]))
      .set("clip_frac", t[1] / std::max(1.0, t[3]))
      .set("entropy", t[2] / std::max(1.0, t[3]))
      .set("response_len", response_len)
      .set("response_len/p50", quantile(0.5))
      .set("response_len/p90", quantile(0.9))
      .set("response_len/max", quantile(1.0))
      .set("rollout/slot_utilization", t[10] > 0 ? t[9] / t[10] : 0.0)
      .set("rollout/prefix_shared_tokens", static_cast<int64_t>(t[11]))
      .set("rollout/kv_peak_blocks", kv_peak_blocks)
      .set("rollout/preemptions", static_cast<int64_t>(t[12]))
      .set("rollout_is/ratio_mean", t[15] > 0 ? t[16] / t[15] : 1.0)
      .set("rollout_is/ratio_max", is_ratio_max)
      .set("rollout_is/clipped_frac", t[15] > 0 ? t[17] / t[15] : 0.0)
      .set("rollout_is/masked_frac", t[15] > 0 ? t[18] / t[15] : 0.0)
      .set("kept_samples", keep.sum().item<int64_t>())
      .set("logprob_diff_max", parity.max)
      .set("logprob_diff_mean", parity.mean)
      .set("rollout_tokens_per_s", rollout_seconds > 0 ? generated / rollout_seconds : 0.0)
      .set("rollout/tokens_per_s", rollout_seconds > 0 ? generated / rollout_seconds : 0.0)
      .set("train_tokens_per_s", phases.seconds("train") > 0 ? t[6] / phases.seconds("train") : 0.0);
  if (plan_.role(Role::critic)) record.set("value_loss", t[4] / std::max(1.0, t[5]));
  if (const RolePlan* actor = plan_.role(Role::actor); actor && actor->architecture.mixture_of_experts())
    RouterBalance::set_metrics(record, t[19], t[20], maxima[2].item<double>());
  if (rl.routing_replay) RouterBalance::set_replay_metrics(record, t[21], t[22], t[23]);
  if (rl.kl_mode == KlMode::loss) record.set("kl_loss", t[7] / std::max(1.0, t[8]));
  if (rl.dynamic_sampling)
    record.set("dynamic_sampling/rounds", static_cast<int64_t>(sampling.rounds))
        .set("dynamic_sampling/dropped_groups", sampling.dropped_groups)
        .set("dynamic_sampling/kept_groups", sampling.kept_groups);
  if (rl.overlong_buffer > 0) record.set("overlong_penalty_mean", experience.overlong_penalty_mean);
  if (rl.has_reward_model) record.set("model_reward_mean", experience.model_reward_mean);
  if (!scoring_->reward_function().empty()) record.set("hook_reward_mean", experience.hook_reward_mean);
  if (rl.env.enabled) add_env_metrics(record, batch, experience, t[13], t[14]);
  if (rl.max_staleness > 0) {
    // The share of the engines' generation hidden behind the update.
    const double hidden = async_.generate_ahead_s > 0
                              ? std::max(0.0, async_.generate_ahead_s - async_.trainer_wait_s) / async_.generate_ahead_s
                              : 0.0;
    record.set("async/staleness_mean", async_.staleness.mean)
        .set("async/staleness_max", async_.staleness.max)
        .set("async/dropped_stale", async_.staleness.dropped)
        .set("async/partial_frac", batch.trajectories.empty() ? 0.0
                                                              : static_cast<double>(async_.staleness.partial) /
                                                                    static_cast<double>(batch.size()))
        .set("async/overlap_frac", hidden)
        .set("time/trainer_wait_s", async_.trainer_wait_s)
        .set("time/engine_wait_s", async_.engine_wait_s)
        .set("time/generate_ahead_s", async_.generate_ahead_s);
  }
  phases.add_to(record);
  if (hooks_ && hooks_->has_function(plan_.hooks.on_step)) {
    std::vector<std::pair<std::string, double>> extra;
    on_rank0_or_fail_everywhere(world_, plan_.hooks.on_step, [&] {
      extra = call_on_step_hook(*hooks_, plan_.hooks.on_step, step, numbers_of(record));
    });
    for (const auto& [name, value] : extra) record.set(name, value);
  }
  out.console = fmt::format(
      "reward {:.4f} ± {:.4f} kl {:.4f} policy_loss {:.4f} clip {:.3f} response_len {:.1f} tokens/s {:.0f}",
      reward_mean, reward_std, experience.kl, t[0] / std::max(1.0, t[8]), t[1] / std::max(1.0, t[3]), response_len,
      rollout_seconds > 0 ? generated / rollout_seconds : 0.0);
  return out;
}

}  // namespace meshrun::ppo_detail
