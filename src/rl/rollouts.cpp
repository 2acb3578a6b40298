// The Rollouts stage (rollouts.hpp): engines generate their slices of the
// step, on_rollout, dynamic sampling's rounds, and the actor → engine
// weight sync.
#include "rollouts.hpp"

#include <spdlog/spdlog.h>

#include "meshrun/data/data.hpp"
#include "meshrun/dist/mesh.hpp"
#include "meshrun/model/hf_model.hpp"
#include "episodes.hpp"
#include "roles.hpp"
#include "meshrun/train/batching.hpp"
#include "meshrun/train/trainer_output.hpp"

namespace meshrun::ppo_detail {

namespace {

// Whether the kept trajectories of rows [first, first + size) got different
// rewards (a group whose rewards are all equal teaches a group baseline
// nothing). In float, as the rewards are shared.
bool informative(const torch::Tensor& total, const torch::Tensor& keep, int64_t first, int64_t size) {
  const torch::Tensor kept = total.narrow(0, first, size).masked_select(keep.narrow(0, first, size).gt(0));
  return kept.numel() >= 2 && (kept.max() - kept.min()).item<float>() > 0;
}

}  // namespace

void GroupPicker::add_round(const TrajectoryBatch& round) {
  ++stats_.rounds;
  const torch::Tensor total = round.total_rewards();
  const torch::Tensor keep = round.kept();
  const auto group_of = [&](int64_t first) {
    return std::span<const Trajectory>(round.trajectories).subspan(static_cast<size_t>(first),
                                                                   static_cast<size_t>(group_size_));
  };
  for (int64_t first = 0; first + group_size_ <= round.size(); first += group_size_) {
    if (informative(total, keep, first, group_size_)) {
      if (!full()) picked_.insert(picked_.end(), group_of(first).begin(), group_of(first).end());
    } else {
      ++stats_.dropped_groups;
      if (static_cast<int64_t>(spare_.size()) < wanted_ * group_size_) {
        for (const Trajectory& trajectory : group_of(first)) {
          spare_.push_back(trajectory);
          spare_.back().kept = false;  // a filler weighs nothing
        }
      }
    }
  }
}

std::vector<Trajectory> GroupPicker::take() {
  stats_.kept_groups = static_cast<int64_t>(picked_.size()) / group_size_;
  // The step keeps its shape: spare groups fill the places.
  for (size_t i = 0; !full() && i < spare_.size(); ++i) picked_.push_back(spare_[i]);
  return std::move(picked_);
}

Rollouts::Rollouts(const Plan& plan, Group& world, torch::Device device, Resources resources)
    : plan_(plan), world_(world), device_(device), resources_(std::move(resources)) {
  sampler_ = std::move(resources_.sampler);
  if (!sampler_ && resources_.prompts) sampler_ = prompt_sampler(plan_, *resources_.prompts);
}

std::unique_ptr<DistributedSampler> Rollouts::prompt_sampler(const Plan& plan, const PromptDataset& prompts) {
  // Every rank draws the same prompts (the engines split the samples).
  return std::make_unique<DistributedSampler>(
      SamplerConfig::of(train_detail::batching_of(plan), static_cast<int64_t>(prompts.prompts.size()),
                        /*dp_size=*/1, /*dp_rank=*/0, ShardLayout::strided, plan.data.path));
}

int64_t Rollouts::sampler_steps() const { return sampler_->total_steps(); }

void Rollouts::build_engines(Runtime& runtime) {
  const RolePlan& actor = *plan_.role(Role::actor);
  for (auto [index, group] : runtime.engine_groups()) {
    const EnginePlan& plan = plan_.engines.at(static_cast<size_t>(index));
    ModelOptions options;
    options.tensor_parallel = group->size() > 1 ? group : nullptr;
    options.dtype = torch_dtype_of(actor.dtype);
    options.device = device_;
    torch::manual_seed(plan_.run.seed);
    Engine engine;
    engine.index = index;
    engine.group = group;
    // The plan sized the engine: its live sequences and its paged KV pool.
    engine.generator = std::make_unique<Generator>(load_hf_model(actor.model, options), options.tensor_parallel,
                                                   plan.max_batch, plan_.rl.sequence_tokens(), plan.kv_pool_tokens(),
                                                   plan.kv_block_size, plan.prefill_chunk, plan.decode_graphs);
    engine.sleeper = std::make_unique<StorageSleep>();
    engine.sleeper->add(engine.generator->memory());
    // The graphs hold the addresses sleep frees, and memory of their own.
    engine.sleeper->before_sleep([generator = engine.generator.get()] { generator->release_decode_graphs(); });
    engines_.push_back(std::move(engine));
  }
}

RouteShape Rollouts::route_shape() const {
  if (!plan_.rl.routing_replay) return {};
  const Architecture& actor = plan_.role(Role::actor)->architecture;
  return RouteShape{static_cast<int32_t>(actor.sparse_layers()), static_cast<int32_t>(actor.experts_per_token)};
}

SamplingOptions Rollouts::sampling_options(int64_t step, int round, int64_t first_sample) const {
  const SamplingPlan& sampling = plan_.rl.sampling;
  SamplingOptions options;
  options.record_routes = plan_.rl.routing_replay;
  options.temperature = sampling.temperature;
  options.top_p = sampling.top_p;
  options.top_k = sampling.top_k;
  options.max_new_tokens = sampling.max_new_tokens;
  options.stop_ids = resources_.stop_ids;
  options.pad_id = resources_.tokenizer->pad_id().value_or(0);
  options.vocab_limit = resources_.tokenizer->vocab_size();
  // Round 0 is every step's one round without dynamic sampling. Each
  // sample's stream is (this seed, its row in the step's samples), so the
  // tokens do not depend on how many engines split the step.
  // Mixed in unsigned arithmetic, which wraps where a seed near 2^63 would
  // overflow; ordinary seeds give the same values as signed arithmetic.
  const auto mixed = static_cast<std::uint64_t>(plan_.run.seed) + 1000003ULL * static_cast<std::uint64_t>(step) +
                     7919ULL * static_cast<std::uint64_t>(round);
  options.seed = data_seed(static_cast<long long>(mixed), 0);
  options.first_sample = static_cast<uint64_t>(first_sample);
  return options;
}

TrajectoryBatch Rollouts::generate(const std::vector<int64_t>& prompt_rows, int64_t step, int round,
                                   int64_t& generated_tokens) {
  std::vector<ProducedSlice> produced;
  const auto run_engines = [&] { produced = produce(prompt_rows, step, round, engine_totals_); };
  // An environment's failure on one rank stops every rank (the others
  // would wait for its samples in the exchange).
  if (resources_.env) on_every_rank_or_fail_everywhere(world_, "env", run_engines);
  else run_engines();
  return exchange(produced, prompt_rows, policy_version_, generated_tokens);
}

std::optional<std::vector<int64_t>> Rollouts::next_prompts() {
  std::optional<SamplerStep> prompts = sampler_->next();
  if (!prompts) return std::nullopt;
  return prompts->micro_batches.front();
}

void MidRoundWeights::load() {
  if (loaded_) return;
  arrived_.wait();
  copy_();
  loaded_ = true;
}

namespace {

// One engine's view of the weights arriving mid-round: its tp ranks agree
// on whether they have (each saw its own flag collective finish), so they
// load them at the same step.
class EngineWeightUpdates final : public WeightUpdates {
 public:
  EngineWeightUpdates(MidRoundWeights& weights, Group& group) : weights_(weights), group_(group) {}
  bool waiting() override {
    if (weights_.loaded()) return false;
    bool arrived = weights_.arrived();
    if (group_.size() > 1) {
      torch::Tensor any = torch::tensor({arrived ? 1.0f : 0.0f}).to(group_.device());
      group_.all_reduce(any, ReduceOp::max);
      arrived = any.item<float>() > 0;
    }
    return arrived;
  }
  int64_t load() override {
    weights_.load();
    return weights_.version();
  }
  int64_t version() const override { return weights_.version(); }

 private:
  MidRoundWeights& weights_;
  Group& group_;
};

}  // namespace

std::vector<ProducedSlice> Rollouts::produce(const std::vector<int64_t>& prompt_rows, int64_t step, int round,
                                             EngineTotals& totals, MidRoundWeights* weights) {
  const int64_t n = plan_.step.group_size;
  const int64_t samples = static_cast<int64_t>(prompt_rows.size()) * n;
  const int engines = static_cast<int>(plan_.engines.size());
  std::vector<ProducedSlice> produced;
  for (auto& engine : engines_) {
    const RowRange rows = slice_of(samples, engines, engine.index);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<Episodes::Start> starts;
    for (int64_t row = rows.begin; row < rows.end; ++row) {
      const Prompt& prompt = resources_.prompts->prompts[static_cast<size_t>(prompt_rows[static_cast<size_t>(row / n)])];
      prompts.push_back(prompt.ids);
      if (resources_.env) starts.push_back(Episodes::Start{&prompt, row + 1, row % n + 1});
    }
    std::unique_ptr<Episodes> episodes;
    if (resources_.env)
      episodes = std::make_unique<Episodes>(*resources_.env, *resources_.tokenizer, plan_.rl.env, starts);
    std::optional<EngineWeightUpdates> updates;
    if (weights) updates.emplace(*weights, *engine.group);
    auto out = engine.generator->generate(prompts, sampling_options(step, round, rows.begin), true, episodes.get(),
                                          updates ? &*updates : nullptr);
    if (episodes) {
      totals.env_calls += episodes->env_calls();
      totals.env_seconds += episodes->env_seconds();
    }
    if (engine.group->rank() == 0) {
      const GenerationStats& stats = engine.generator->stats();
      totals.decode_steps += stats.decode_steps;
      totals.busy_slot_steps += stats.busy_slot_steps;
      totals.slot_steps += stats.decode_steps * stats.max_batch;
      totals.prefix_shared_tokens += stats.prefix_shared_tokens;
      totals.kv_peak_blocks = std::max(totals.kv_peak_blocks, stats.kv_peak_blocks);
      totals.preemptions += stats.preemptions;
      produced.push_back(ProducedSlice{rows.begin, std::move(out),
                                       episodes ? episodes->records() : std::vector<EpisodeRecord>{}});
    }
  }
  return produced;
}

TrajectoryBatch Rollouts::exchange(const std::vector<ProducedSlice>& produced, const std::vector<int64_t>& prompt_rows,
                                   int64_t version, int64_t& generated_tokens) {
  const int64_t n = plan_.step.group_size;
  const int64_t samples = static_cast<int64_t>(prompt_rows.size()) * n;
  TrajectoryBatch batch;
  batch.trajectories =
      share_trajectories(produced, samples, plan_.rl.sampling.max_prompt_len, plan_.rl.response_tokens(),
                         plan_.rl.env.enabled, plan_.rl.partial, world_, route_shape());
  for (int64_t row = 0; row < samples; ++row) {
    Trajectory& trajectory = batch.trajectories[static_cast<size_t>(row)];
    trajectory.prompt_row = prompt_rows[static_cast<size_t>(row / n)];
    // A partial rollout's oldest token sets its staleness.
    const auto& versions = trajectory.sample.versions;
    trajectory.policy_version = versions.empty() ? version : *std::min_element(versions.begin(), versions.end());
    // The tokens the engines sampled (an episode's observations were not).
    const auto& mask = trajectory.loss_mask;
    generated_tokens += mask.empty() ? trajectory.response_length() : std::count(mask.begin(), mask.end(), uint8_t{1});
  }
  batch.pack(resources_.tokenizer->pad_id().value_or(0), device_);
  return batch;
}

StalenessStats enforce_staleness(TrajectoryBatch& batch, int64_t trainer_version, int64_t max_staleness) {
  StalenessStats stats;
  double sum = 0;
  for (Trajectory& trajectory : batch.trajectories) {
    const int64_t staleness = trainer_version - trajectory.policy_version;
    sum += static_cast<double>(staleness);
    stats.max = std::max(stats.max, staleness);
    const auto& versions = trajectory.sample.versions;
    if (!versions.empty() && *std::max_element(versions.begin(), versions.end()) != trajectory.policy_version)
      ++stats.partial;
    if (staleness > max_staleness && trajectory.kept) {
      trajectory.kept = false;  // older than the bound allows: never trained on
      ++stats.dropped;
    }
  }
  stats.mean = batch.trajectories.empty() ? 0.0 : sum / static_cast<double>(batch.trajectories.size());
  return stats;
}

void Rollouts::apply_on_rollout(TrajectoryBatch& batch, int64_t step) {
  const std::string& function = resources_.on_rollout;
  std::vector<uint8_t> keep(batch.trajectories.size(), 1);
  on_rank0_or_fail_everywhere(world_, function, [&] {
    call_on_rollout(resources_.hooks.context(step, RowRange{0, batch.size()}), function, batch.trajectories, keep);
  });
  // Rank 0's (possibly rewritten) responses and keep flags to everyone.
  const int64_t n = batch.size();
  const int64_t width = batch.packed.response_len;
  torch::Tensor state = torch::zeros({n, width + 1}, torch::kInt64);
  if (world_.rank() == 0) {
    auto view = state.accessor<int64_t, 2>();
    for (int64_t row = 0; row < n; ++row) {
      const auto& response = batch.trajectories[static_cast<size_t>(row)].sample.response;
      for (size_t t = 0; t < response.size(); ++t) view[row][static_cast<int64_t>(t)] = response[t];
      view[row][width] = keep[static_cast<size_t>(row)];
    }
  }
  torch::Tensor shared = state.to(world_.device());
  world_.broadcast(shared, 0);
  state = shared.cpu();
  auto view = state.accessor<int64_t, 2>();
  for (int64_t row = 0; row < n; ++row) {
    Trajectory& trajectory = batch.trajectories[static_cast<size_t>(row)];
    auto& response = trajectory.sample.response;
    bool rewritten = false;
    for (size_t t = 0; t < response.size(); ++t) {
      const auto token = static_cast<int32_t>(view[row][static_cast<int64_t>(t)]);
      rewritten = rewritten || token != response[t];
      response[t] = token;
    }
    // The behaviour log-probs and routes were of the engine's own tokens:
    // unknown now (the rewritten sample routes itself).
    if (rewritten) {
      trajectory.sample.log_probs.clear();
      trajectory.sample.routes.clear();
    }
    trajectory.kept = view[row][width] != 0;
  }
  batch.pack(resources_.tokenizer->pad_id().value_or(0), device_);
}

std::optional<TrajectoryBatch> Rollouts::collect(int64_t step, const ScoreRound& score, StepTrace& trace,
                                                 SamplingStats& stats, std::optional<Prefetched> first) {
  std::optional<std::vector<int64_t>> prompts = first ? std::optional(first->prompt_rows) : next_prompts();
  if (!prompts) return std::nullopt;
  engine_totals_ = first ? first->totals : EngineTotals{};
  if (first) {
    trace.generated_tokens += first->generated_tokens;
    trace.generated_ahead_seconds = first->seconds;
  }
  const auto round_of = [&](const std::vector<int64_t>& rows, int round) {
    TrajectoryBatch batch;
    if (round == 0 && first) {
      batch = std::move(first->round);
    } else {
      auto timer = trace.phases.scope("rollout");
      trace.enter(StepPhase::rollout);
      batch = generate(rows, step, round, trace.generated_tokens);
    }
    if (resources_.hooks.script && !resources_.on_rollout.empty()) {
      auto timer = trace.phases.scope("hooks");
      apply_on_rollout(batch, step);
    }
    {
      auto timer = trace.phases.scope("scoring");
      trace.enter(StepPhase::scoring);
      score(batch);
    }
    return batch;
  };
  if (!plan_.rl.dynamic_sampling) {
    stats = SamplingStats{};
    return round_of(*prompts, 0);
  }
  // DAPO: rounds of new prompts until batch.rollout informative prompt
  // groups are collected or max_sample_rounds have run; the step's shape
  // stays fixed by filling the remaining places with uninformative groups
  // kept out of every loss.
  const int64_t wanted = plan_.step.prompts;
  GroupPicker picker(plan_.step.group_size, wanted);
  for (int round = 0;; ++round) {
    picker.add_round(round_of(*prompts, round));
    if (picker.full() || round + 1 >= plan_.rl.max_sample_rounds) break;
    prompts = next_prompts();
    if (!prompts) break;
  }
  TrajectoryBatch out;
  out.trajectories = picker.take();
  stats = picker.stats();
  if (stats.kept_groups < wanted && world_.rank() == 0)
    spdlog::info("step {}: dynamic sampling found {} informative prompts of {} in {} rounds ({} dropped); training "
                 "on them",
                 step, stats.kept_groups, wanted, stats.rounds, stats.dropped_groups);
  out.pack(resources_.tokenizer->pad_id().value_or(0), device_);
  return out;
}

// The actor's new weights (with LoRA: merged) into every engine: gathered on the actor ranks;
// an engine whose ranks all hold the actor copies its shards locally,
// others receive them by broadcast from the actor's first rank.
void Rollouts::sync_weights(RoleSlots& roles, const DeviceMesh& actor_mesh, int64_t version) {
  NamedTensors full;
  if (RoleSlot* actor = roles.find(Role::actor))
    full = train_detail::merged_weights(*actor->engine, *actor->model, actor->config->model);
  bool all_local = true;
  for (const auto& engine : plan_.engines)
    for (int rank : engine.ranks) all_local = all_local && actor_mesh.contains(rank);
  std::vector<LlamaModel*> models;
  for (auto& engine : engines_) models.push_back(&engine.generator->model());
  send_weights_to_engines(std::move(full), all_local ? ParameterShapes{} : parameter_list(roles), all_local,
                          actor_mesh.ranks().front(), models, world_);
  policy_version_ = version;
}

// (name, full shape) of every actor parameter, from the actor's model
// config, in a fixed order known to every rank.
ParameterShapes Rollouts::parameter_list(RoleSlots& roles) {
  if (parameter_list_.empty()) {
    ModelOptions options;
    options.initialize = false;
    if (RoleSlot* actor = roles.find(Role::actor)) options.config = (*actor->model)->config();
    else if (!engines_.empty()) options.config = engines_.front().generator->model()->config();
    else options.config = static_cast<const ModelConfig&>(plan_.role(Role::actor)->architecture);
    LlamaModel skeleton(options);
    for (const auto& spec : skeleton->parameter_specs()) parameter_list_.emplace_back(spec.name, spec.full_shape);
  }
  return parameter_list_;
}

SamplerState Rollouts::sampler_state() const { return sampler_->state(); }
void Rollouts::restore_sampler(const SamplerState& state) { sampler_->restore(state); }

std::vector<StorageSleep*> Rollouts::sleepers() {
  std::vector<StorageSleep*> out;
  for (auto& engine : engines_) out.push_back(engine.sleeper.get());
  return out;
}

}  // namespace meshrun::ppo_detail
