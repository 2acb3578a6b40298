// SftData: dataset, sequences and sampler wired together for one dp rank.
#include "meshrun/data/data.hpp"

namespace meshrun {

namespace {

SamplerConfig sampler_config(int64_t sequences, const BatchConfig& batch, int64_t seed, int epochs,
                             const SftDataOptions& options) {
  SamplerConfig config;
  config.num_items = sequences;
  config.global_batch = batch.train;
  config.micro_batch = batch.micro_train;
  config.dp_size = options.dp_size;
  config.dp_rank = options.dp_rank;
  config.seed = seed;
  config.epochs = epochs;
  config.layout = options.layout;
  return config;
}

}  // namespace

SftData::SftData(const DataConfig& data, const BatchConfig& batch, int64_t seed, int epochs,
                 const Tokenizer& tokenizer, const SftDataOptions& options)
    : dataset_(load_sft_dataset(data, tokenizer, options.max_errors)),
      sequences_(arrange_sequences(dataset_, data.max_len, data.packing)),
      sampler_(sampler_config(sequences_.size(), batch, seed, epochs, options)),
      pad_id_(padding_id(tokenizer)) {}

SftData::SftData(const Recipe& recipe, const Tokenizer& tokenizer, const SftDataOptions& options)
    : SftData(recipe.data, recipe.batch, recipe.seed, recipe.train.epochs, tokenizer, options) {}

std::optional<SftStep> SftData::next() {
  auto step = sampler_.next();
  if (!step) return std::nullopt;
  SftStep out;
  out.epoch = step->epoch;
  out.global_step = step->global_step;
  out.micro_batches.reserve(step->micro_batches.size());
  for (const auto& rows : step->micro_batches) out.micro_batches.push_back(collate(dataset_, sequences_, rows, pad_id_));
  return out;
}

}  // namespace meshrun
