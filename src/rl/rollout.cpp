// PPO rollout phase: engines generate their slices of the step, the
// on_rollout hook, and the actor → engine weight sync.
#include "ppo_run.hpp"

namespace meshrun::ppo_detail {

SamplingOptions PpoRun::sampling_options(int64_t step, int round, int engine) const {
  SamplingOptions options;
  options.temperature = recipe_.rollout.temperature;
  options.top_p = recipe_.rollout.top_p;
  options.top_k = recipe_.rollout.top_k;
  options.max_new_tokens = recipe_.rollout.max_new_tokens;
  options.stop_ids = stop_ids_;
  options.pad_id = tokenizer_->pad_id().value_or(0);
  options.vocab_limit = tokenizer_->vocab_size();
  // Round 0 is every step's one round without dynamic sampling.
  // Mixed in unsigned arithmetic, which wraps where a seed near 2^63 would
  // overflow; ordinary seeds give the same values as signed arithmetic.
  const auto mixed = static_cast<std::uint64_t>(recipe_.seed) + 1000003ULL * static_cast<std::uint64_t>(step) +
                     7919ULL * static_cast<std::uint64_t>(round);
  options.seed = data_seed(static_cast<long long>(mixed), engine);
  return options;
}

// Engine e generates the samples of its slice of the step's prompts; the
// exchange gives every rank all of them.
Rollout PpoRun::generate(const std::vector<int64_t>& prompt_indices, int64_t step, int round, int64_t& generated) {
  const int64_t n = plan_.step.group_size;
  const int64_t samples = static_cast<int64_t>(prompt_indices.size()) * n;
  const int engines = static_cast<int>(plan_.engines.size());
  std::vector<std::pair<int64_t, std::vector<GeneratedSample>>> produced;
  Rollout rollout;
  for (int64_t row = 0; row < samples; ++row)
    rollout.prompt_rows.push_back(prompt_indices[static_cast<size_t>(row / n)]);
  for (auto& engine : engines_) {
    const RowRange rows = slice_of(samples, engines, engine.index);
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t row = rows.begin; row < rows.end; ++row)
      prompts.push_back(prompts_.prompts[static_cast<size_t>(rollout.prompt_rows[static_cast<size_t>(row)])].ids);
    auto out = engine.generator->generate(prompts, sampling_options(step, round, engine.index));
    if (engine.group->rank() == 0) produced.emplace_back(rows.begin, std::move(out));
  }
  rollout.samples = share_samples(produced, samples, recipe_.rollout.max_prompt_len, recipe_.rollout.max_new_tokens, world_);
  for (const auto& sample : rollout.samples) generated += static_cast<int64_t>(sample.response.size());
  rollout.keep = torch::ones({samples}, torch::kFloat);
  rollout.batch = pack_samples(rollout.samples, tokenizer_->pad_id().value_or(0), device_);
  return rollout;
}

void PpoRun::apply_on_rollout(Rollout& rollout, int64_t step) {
  std::vector<uint8_t> keep(rollout.samples.size(), 1);
  on_rank0_or_fail_everywhere(world_, recipe_.hooks.on_rollout, [&] {
    call_on_rollout(hook_context(step, rollout, RowRange{0, static_cast<int64_t>(rollout.samples.size())}), recipe_.hooks.on_rollout, rollout.samples, keep);
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
    GeneratedSample& sample = rollout.samples[static_cast<size_t>(row)];
    auto& response = sample.response;
    bool rewritten = false;
    for (size_t t = 0; t < response.size(); ++t) {
      const auto token = static_cast<int32_t>(view[row][static_cast<int64_t>(t)]);
      rewritten = rewritten || token != response[t];
      response[t] = token;
    }
    // The engine's log-probs were of its own tokens: none to compare now.
    if (rewritten) sample.log_probs.clear();
    rollout.keep[row] = static_cast<float>(view[row][width]);
  }
  rollout.batch = pack_samples(rollout.samples, tokenizer_->pad_id().value_or(0), device_);
}

HookContext PpoRun::hook_context(int64_t step, const Rollout& rollout, RowRange rows) const {
  HookContext context;
  context.rows = rows;
  if (!recipe_.data.label_key.empty()) {
    context.prompts = &prompts_;
    context.prompt_rows = &rollout.prompt_rows;
  }
  context.script = hooks_.get();
  context.tokenizer = tokenizer_.get();
  context.step = step;
  context.n_samples_per_prompt = plan_.step.group_size;
  return context;
}

// The actor's new weights (with LoRA: merged) into every engine: gathered on the actor ranks;
// an engine whose ranks all hold the actor copies its shards locally,
// others receive them by broadcast from the actor's first rank.
void PpoRun::sync_engines() {
  NamedTensors full;
  auto actor = roles_.find("actor");
  if (actor != roles_.end())
    full = train_detail::merged_weights(*actor->second.engine, *actor->second.model, actor->second.config->model);
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
ParameterShapes PpoRun::parameter_list() {
  if (parameter_list_.empty()) {
    ModelOptions options;
    options.initialize = false;
    options.config = actor_config();
    LlamaModel skeleton(options);
    for (const auto& spec : skeleton->parameter_specs()) parameter_list_.emplace_back(spec.name, spec.full_shape);
  }
  return parameter_list_;
}

ModelConfig PpoRun::actor_config() {
  auto actor = roles_.find("actor");
  if (actor != roles_.end()) return (*actor->second.model)->config();
  if (!engines_.empty()) return engines_.front().generator->model()->config();
  return static_cast<const ModelConfig&>(plan_.role("actor")->architecture);
}

}  // namespace meshrun::ppo_detail
