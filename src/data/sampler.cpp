// DistributedSampler: global batches out of the epoch's permutation, each
// rank's share split into micro-batches.
#include <numeric>
#include <stdexcept>
#include <string>

#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/data/sampler.hpp"
#include "meshrun/error.hpp"
#include "meshrun/recipe/step_arithmetic.hpp"

namespace meshrun {

namespace {

// A recipe value that makes the sampler impossible: the error names its key.
void require_recipe(bool condition, const std::string& message, const char* key, const char* rule = "") {
  if (!condition) throw ConfigError("sampler: " + message, key, rule);
}

// What the caller computed (ranks, indices): a failure is a meshrun bug.
void require_internal(bool condition, const std::string& message) {
  if (!condition) throw std::logic_error("sampler: " + message);
}

// A saved state that does not fit this run.
void require_state(bool condition, const std::string& message) {
  if (!condition) throw CheckpointError("sampler: " + message);
}

const char* items_word(BatchItems items) {
  switch (items) {
    case BatchItems::sequences: return "sequences";
    case BatchItems::pairs: return "pairs";
    case BatchItems::prompts: return "prompts";
  }
  return "items";
}

}  // namespace

ConfigError too_few_items(BatchItems items, int64_t count, int64_t batch, const std::string& source) {
  const std::string named = source.empty() ? "" : " " + source;
  const std::string counted = std::to_string(count) + " " + items_word(items);
  if (items == BatchItems::prompts)
    return ConfigError("the prompt file" + named + " has " + counted + ", fewer than one rollout batch (batch.rollout = " +
                           std::to_string(batch) + ")",
                       "batch.rollout", "batch.rollout-prompts");
  return ConfigError("the dataset" + named + " has " + counted + ", fewer than one global batch (batch.train = " +
                         std::to_string(batch) + ")",
                     "batch.train");
}

SamplerConfig SamplerConfig::of(const Batching& batching, int64_t num_items, int dp_size, int dp_rank,
                                ShardLayout layout, std::string source) {
  SamplerConfig config;
  config.num_items = num_items;
  config.global_batch = batching.global_batch;
  config.micro_batch = batching.micro_batch;
  config.dp_size = dp_size;
  config.dp_rank = dp_rank;
  config.seed = batching.seed;
  config.epochs = batching.epochs;
  config.layout = layout;
  config.items = batching.items;
  config.source = std::move(source);
  return config;
}

DistributedSampler::DistributedSampler(SamplerConfig config) : config_(config) {
  require_internal(config_.dp_size >= 1, "dp size must be at least 1, got " + std::to_string(config_.dp_size));
  require_internal(config_.dp_rank >= 0 && config_.dp_rank < config_.dp_size,
                   "dp rank " + std::to_string(config_.dp_rank) + " is outside [0, " +
                       std::to_string(config_.dp_size) + ")");
  require_recipe(config_.micro_batch >= 1,
                 "batch.micro_train must be at least 1, got " + std::to_string(config_.micro_batch),
                 "batch.micro_train", "schema.range");
  require_recipe(config_.global_batch >= 1,
                 "batch.train must be at least 1, got " + std::to_string(config_.global_batch), "batch.train",
                 "schema.range");
  const int64_t per_pass = step_arithmetic::items_per_pass(config_.micro_batch, config_.dp_size);
  require_recipe(step_arithmetic::splits_into_passes(config_.global_batch, config_.micro_batch, config_.dp_size),
                 "batch.train (" + std::to_string(config_.global_batch) +
                     ") must be a multiple of batch.micro_train × dp (" + std::to_string(config_.micro_batch) +
                     " × " + std::to_string(config_.dp_size) + " = " + std::to_string(per_pass) + ")",
                 "batch.train", "batch.train-divisible");
  const bool prompts = config_.items == BatchItems::prompts;
  require_recipe(config_.epochs >= 1, "epochs must be at least 1, got " + std::to_string(config_.epochs),
                 prompts ? "ppo.num_episodes" : "train.epochs", "schema.range");
  if (config_.num_items < config_.global_batch)
    throw too_few_items(config_.items, config_.num_items, config_.global_batch, config_.source);
}

int DistributedSampler::grad_accum() const {
  return static_cast<int>(
      step_arithmetic::gradient_accumulation(config_.global_batch, config_.micro_batch, config_.dp_size));
}

int64_t DistributedSampler::steps_per_epoch() const { return config_.num_items / config_.global_batch; }

int64_t DistributedSampler::total_steps() const { return steps_per_epoch() * config_.epochs; }

int64_t DistributedSampler::dropped_per_epoch() const { return config_.num_items % config_.global_batch; }

bool DistributedSampler::done() const { return epoch_ >= config_.epochs; }

int64_t DistributedSampler::global_step() const {
  return epoch_ * steps_per_epoch() + position_ / config_.global_batch;
}

const std::vector<int64_t>& DistributedSampler::permutation(int64_t epoch) {
  if (cached_epoch_ != epoch) {
    if (config_.shuffle) {
      cached_permutation_ = epoch_permutation(config_.num_items, static_cast<uint64_t>(config_.seed), epoch);
    } else {
      cached_permutation_.resize(static_cast<std::size_t>(config_.num_items));
      std::iota(cached_permutation_.begin(), cached_permutation_.end(), int64_t{0});
    }
    cached_epoch_ = epoch;
  }
  return cached_permutation_;
}

std::vector<int64_t> DistributedSampler::global_batch(int64_t epoch, int64_t step_in_epoch) {
  require_internal(epoch >= 0 && step_in_epoch >= 0 && step_in_epoch < steps_per_epoch(),
                   "no global batch " + std::to_string(step_in_epoch) + " in epoch " + std::to_string(epoch));
  const auto& order = permutation(epoch);
  const auto begin = order.begin() + step_in_epoch * config_.global_batch;
  return {begin, begin + config_.global_batch};
}

std::optional<SamplerStep> DistributedSampler::next() {
  if (done()) return std::nullopt;
  SamplerStep step;
  step.epoch = epoch_;
  step.step_in_epoch = position_ / config_.global_batch;
  step.global_step = global_step();
  const std::vector<int64_t> batch = global_batch(epoch_, step.step_in_epoch);

  const int per_rank = config_.global_batch / config_.dp_size;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<std::size_t>(per_rank));
  for (int i = 0; i < per_rank; ++i) {
    const int index = config_.layout == ShardLayout::strided ? config_.dp_rank + i * config_.dp_size
                                                             : config_.dp_rank * per_rank + i;
    mine.push_back(batch[static_cast<std::size_t>(index)]);
  }
  for (int start = 0; start < per_rank; start += config_.micro_batch) {
    step.micro_batches.emplace_back(mine.begin() + start, mine.begin() + start + config_.micro_batch);
  }

  position_ += config_.global_batch;
  if (position_ / config_.global_batch >= steps_per_epoch()) {
    ++epoch_;
    position_ = 0;
  }
  return step;
}

SamplerState DistributedSampler::state() const {
  return SamplerState{epoch_, position_, config_.num_items, config_.global_batch, config_.seed};
}

void DistributedSampler::restore(const SamplerState& state) {
  if (state.num_items >= 0) {
    require_state(state.num_items == config_.num_items,
                  "the saved state is for " + std::to_string(state.num_items) + " sequences, this dataset has " +
                      std::to_string(config_.num_items) + " (the data, max_len or packing changed)");
  }
  if (state.global_batch >= 0) {
    require_recipe(state.global_batch == config_.global_batch,
                   "the saved state is for batch.train = " + std::to_string(state.global_batch) + ", this run has " +
                       std::to_string(config_.global_batch),
                   "batch.train");
  }
  if (state.seed) {
    require_recipe(*state.seed == config_.seed,
                   "the saved state is for seed " + std::to_string(*state.seed) + ", this run has " +
                       std::to_string(config_.seed),
                   "seed");
  }
  require_state(state.epoch >= 0 && state.epoch <= config_.epochs,
                "saved epoch " + std::to_string(state.epoch) + " is outside [0, " + std::to_string(config_.epochs) +
                    "]");
  const int64_t epoch_items = steps_per_epoch() * config_.global_batch;
  require_state(state.position >= 0 && state.position <= epoch_items && state.position % config_.global_batch == 0,
                "saved position " + std::to_string(state.position) + " is not a multiple of batch.train (" +
                    std::to_string(config_.global_batch) + ") in [0, " + std::to_string(epoch_items) + "]");
  require_state(state.epoch < config_.epochs || state.position == 0,
                "saved position " + std::to_string(state.position) + " lies past the last epoch");
  epoch_ = state.epoch;
  position_ = state.position;
  if (position_ == epoch_items) {  // the end of an epoch is the start of the next
    ++epoch_;
    position_ = 0;
  }
}

}  // namespace meshrun
