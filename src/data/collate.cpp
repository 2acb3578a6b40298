// collate: padded row-major arrays for one micro-batch.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "meshrun/data/data.hpp"

namespace meshrun {

int32_t padding_id(const Tokenizer& tokenizer) {
  if (const auto pad = tokenizer.pad_id()) return *pad;
  if (const auto eos = tokenizer.eos_id()) return *eos;
  return 0;
}

MicroBatch collate(const SftDataset& dataset, const PackedSequences& sequences,
                   std::span<const int64_t> sequence_indices, int32_t pad_id) {
  if (sequence_indices.empty()) throw std::logic_error("collate: a micro-batch needs at least one sequence");
  MicroBatch batch;
  batch.rows = static_cast<int>(sequence_indices.size());
  for (const int64_t index : sequence_indices) {
    if (index < 0 || index >= sequences.size()) {
      throw std::logic_error("collate: sequence " + std::to_string(index) + " is outside [0, " +
                             std::to_string(sequences.size()) + ")");
    }
    batch.length = std::max(batch.length, sequences.lengths[static_cast<std::size_t>(index)]);
  }
  const std::size_t cells = static_cast<std::size_t>(batch.rows) * static_cast<std::size_t>(batch.length);
  batch.input_ids.assign(cells, pad_id);
  batch.loss_mask.assign(cells, 0);
  batch.position_ids.assign(cells, 0);
  batch.sequence_ids.assign(cells, kPaddingSequenceId);
  batch.attention_mask.assign(cells, 0);
  batch.sequences.assign(sequence_indices.begin(), sequence_indices.end());

  for (int row = 0; row < batch.rows; ++row) {
    const auto& members = sequences.members[static_cast<std::size_t>(sequence_indices[static_cast<std::size_t>(row)])];
    int column = 0;
    int32_t sequence_id = 0;
    for (const int64_t sample_index : members) {
      if (sample_index < 0 || sample_index >= static_cast<int64_t>(dataset.samples.size())) {
        throw std::logic_error("collate: sample " + std::to_string(sample_index) + " is not in the dataset");
      }
      const SftSample& sample = dataset.samples[static_cast<std::size_t>(sample_index)];
      if (column + sample.size() > batch.length) {
        throw std::logic_error("collate: the samples of sequence " +
                               std::to_string(sequence_indices[static_cast<std::size_t>(row)]) +
                               " are longer than its recorded length");
      }
      for (int t = 0; t < sample.size(); ++t, ++column) {
        const std::size_t cell = batch.at(row, column);
        batch.input_ids[cell] = sample.input_ids[static_cast<std::size_t>(t)];
        batch.loss_mask[cell] = sample.loss_mask[static_cast<std::size_t>(t)];
        batch.position_ids[cell] = t;
        batch.sequence_ids[cell] = sequence_id;
        batch.attention_mask[cell] = 1;
      }
      batch.tokens += sample.size();
      batch.loss_tokens += sample.loss_tokens();
      ++batch.samples;
      ++sequence_id;
    }
  }
  return batch;
}

}  // namespace meshrun
