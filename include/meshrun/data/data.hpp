// SFT training data, end to end: a JSONL file → tokenised samples
// (dataset.hpp) → training sequences, packed or not (packing.hpp) → this dp
// rank's micro-batches, step by step (sampler.hpp) → MicroBatch, the plain
// row-major arrays the trainer turns into tensors.
//
// MicroBatch layout: `rows` sequences padded to `length`, the longest in the
// micro-batch; every array is rows × length, row-major. Per token:
//   input_ids       the token, or the tokenizer's pad id on padding
//   loss_mask       1 where the token is a target of the loss (a response
//                   token); 0 on prompts and padding. The next-token shift
//                   is the trainer's: the logits at t predict input_ids[t+1]
//                   and count when loss_mask[t+1] is 1.
//   position_ids    0, 1, 2, ... restarting at each sample of a packed row;
//                   0 on padding
//   sequence_ids    which sample of the row the token belongs to (0, 1, ...
//                   in packing order); -1 on padding. Attention is causal
//                   within equal sequence ids and never across them.
//   attention_mask  1 on tokens, 0 on padding
// Because a sample's first token is never a target (dataset.hpp), a shifted
// label never crosses from one sample of a packed row into the next.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <optional>
#include <span>
#include <vector>

#include "meshrun/data/dataset.hpp"
#include "meshrun/data/packing.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/data/sampler.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"

namespace meshrun {

inline constexpr int32_t kPaddingSequenceId = -1;

struct MicroBatch {
  int rows = 0;
  int length = 0;
  std::vector<int32_t> input_ids;
  std::vector<int32_t> loss_mask;
  std::vector<int32_t> position_ids;
  std::vector<int32_t> sequence_ids;
  std::vector<int32_t> attention_mask;
  long long tokens = 0;       // non-padding tokens
  long long loss_tokens = 0;  // tokens with loss_mask 1
  int samples = 0;            // samples across all rows
  std::vector<int64_t> sequences;  // the PackedSequences indices of the rows

  // Row-major index of (row, column).
  std::size_t at(int row, int column) const {
    return static_cast<std::size_t>(row) * static_cast<std::size_t>(length) + static_cast<std::size_t>(column);
  }
};

// The rows `sequence_indices` of `sequences`, padded with `pad_id`. Throws
// std::logic_error (a caller's bug) for an empty list or an index out of
// range.
MicroBatch collate(const SftDataset& dataset, const PackedSequences& sequences,
                   std::span<const int64_t> sequence_indices, int32_t pad_id);

// The pad id for collation: the tokenizer's pad, else its eos, else 0 (pad
// tokens are masked out everywhere, so their value only has to be a valid id).
int32_t padding_id(const Tokenizer& tokenizer);

// The tokenizer a run's data is rendered with: data.tokenizer, else
// `model` (the actor's), given data.chat_template_kwargs for every chat
// render. `source` is what was loaded: the output folder copies its files.
// Every runner (SFT, DPO/RM, PPO) loads through here, so that they render
// alike. Throws TokenizerError.
struct DataTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string source;
};
DataTokenizer load_data_tokenizer(const DataConfig& data, const std::string& model);
// The rule behind `source`: data.tokenizer when set, else `model`; also what
// `meshrun ckpt convert` copies tokenizer files from.
std::string data_tokenizer_source(const std::string& data_tokenizer, const std::string& model);

struct SftDataOptions {
  int dp_rank = 0;
  int dp_size = 1;
  ShardLayout layout = ShardLayout::strided;
  int max_errors = kDefaultMaxDataErrors;
};

struct SftStep {
  int64_t epoch = 0;
  int64_t global_step = 0;
  std::vector<MicroBatch> micro_batches;  // grad_accum of them
};

// An evaluation set for one dp rank: each item (sequence, or pair) once
// across the ranks, strided (rank r takes items r, r + dp, ...), in groups
// of `micro_batch`. Every rank gets the same number of groups, since the
// forward of each may be collective (ZeRO-3 gathers parameters over dp): a
// rank short of one repeats an item with `counted` false, whose results the
// caller leaves out. Throws ConfigError (data.eval_path) for an empty set
// and std::logic_error for a micro_batch < 1 or a rank out of range.
struct EvalSplit {
  std::vector<std::vector<int64_t>> groups;
  std::vector<bool> counted;
};
EvalSplit eval_split(int64_t items, int micro_batch, int dp_size, int dp_rank);

// The micro-batches of an evaluation set ([data] eval_path, tokenised and
// arranged like the training data) for one dp rank, and whether each counts.
struct EvalBatches {
  std::vector<MicroBatch> batches;
  std::vector<bool> counted;
};
// `data`'s eval_path, in micro-batches of `micro_batch` sequences.
EvalBatches sft_eval_batches(const DataConfig& data, int micro_batch, const Tokenizer& tokenizer,
                             const SftDataOptions& options = {});

// The whole pipeline for one dp rank. Every rank loads and packs the same
// file the same way, so they agree on the sequences without communicating.
class SftData {
 public:
  // Throws DataError (the file) or ConfigError naming the batch key.
  SftData(const DataConfig& data, const Batching& batching, const Tokenizer& tokenizer,
          const SftDataOptions& options = {});

  // This rank's micro-batches of the next optimizer step; nullopt at the end.
  std::optional<SftStep> next();

  SamplerState state() const { return sampler_.state(); }
  void restore(const SamplerState& state) { sampler_.restore(state); }

  const SftDataset& dataset() const { return dataset_; }
  const PackedSequences& sequences() const { return sequences_; }
  const DistributedSampler& sampler() const { return sampler_; }
  int grad_accum() const { return sampler_.grad_accum(); }
  int64_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }
  int64_t total_steps() const { return sampler_.total_steps(); }
  int32_t pad_id() const { return pad_id_; }

 private:
  SftDataset dataset_;
  PackedSequences sequences_;
  DistributedSampler sampler_;
  int32_t pad_id_;
};

}  // namespace meshrun
