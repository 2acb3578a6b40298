// SftData: dataset, sequences and sampler wired together for one dp rank.
#include "meshrun/data/data.hpp"

namespace meshrun {

SftData::SftData(const DataConfig& data, const Batching& batching, const Tokenizer& tokenizer,
                 const SftDataOptions& options)
    : dataset_(load_sft_dataset(data, tokenizer, options.max_errors)),
      sequences_(arrange_sequences(dataset_, data.max_len, data.packing)),
      sampler_(SamplerConfig::of(batching, sequences_.size(), options.dp_size, options.dp_rank, options.layout,
                                 data.path)),
      pad_id_(padding_id(tokenizer)) {}

EvalSplit eval_split(int64_t items, int micro_batch, int dp_size, int dp_rank) {
  if (items < 1) throw ConfigError("the evaluation set is empty", "data.eval_path");
  if (micro_batch < 1 || dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size)
    throw std::logic_error("eval_split: micro_batch " + std::to_string(micro_batch) + ", rank " +
                           std::to_string(dp_rank) + " of " + std::to_string(dp_size));
  const int64_t per_rank = (items + dp_size - 1) / dp_size;  // the largest share
  const int64_t groups = (per_rank + micro_batch - 1) / micro_batch;
  EvalSplit out;
  for (int64_t g = 0; g < groups; ++g) {
    std::vector<int64_t> group;
    for (int64_t j = g * micro_batch; j < std::min<int64_t>(per_rank, (g + 1) * micro_batch); ++j) {
      const int64_t item = dp_rank + j * dp_size;
      if (item < items) group.push_back(item);
    }
    out.counted.push_back(!group.empty());
    if (group.empty()) group.push_back(0);  // a stand-in, so that every rank runs the same forwards
    out.groups.push_back(std::move(group));
  }
  return out;
}

EvalBatches sft_eval_batches(const DataConfig& data, int micro_batch, const Tokenizer& tokenizer,
                             const SftDataOptions& options) {
  DataConfig config = data;
  config.path = data.eval_path;
  const SftDataset dataset = load_sft_dataset(config, tokenizer, options.max_errors);
  const PackedSequences sequences = arrange_sequences(dataset, config.max_len, config.packing);
  const EvalSplit split = eval_split(sequences.size(), micro_batch, options.dp_size, options.dp_rank);
  EvalBatches out;
  out.counted = split.counted;
  const int32_t pad = padding_id(tokenizer);
  for (const auto& group : split.groups) out.batches.push_back(collate(dataset, sequences, group, pad));
  return out;
}

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
