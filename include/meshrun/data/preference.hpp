// Preference pairs (DPO): a JSONL file of prompts with a chosen and a
// rejected response → two tokenised samples per pair → this dp rank's
// micro-batches, each holding whole pairs.
//
// Each non-blank line is one JSON object with three keys (data.input_key,
// data.chosen_key, data.rejected_key):
// - the prompt: a string, or a list of {role, content} messages;
// - chosen and rejected: both strings (the assistant's reply; with a string
//   prompt they are encoded as SFT's prompt/response pairs, with a message
//   prompt they become its last, assistant message), or both lists of
//   messages that continue the prompt's list (the last one the assistant's).
// A pair's two samples are tokenised like SFT samples (dataset.hpp), so
// their loss masks cover exactly the response tokens. chosen and rejected
// being equal, of different forms, or a string prompt with message-list
// responses are errors naming the line and key, collected over the whole
// file like SFT's. Truncation keeps each sample's start; a pair either of
// whose samples keeps no response token is dropped and counted.
//
// Micro-batch layout: for m pairs, rows 0..m-1 are their chosen samples and
// rows m..2m-1 their rejected ones, in the same order; never packed. The
// sampler (sampler.hpp) counts pairs: batch.train pairs per optimizer step,
// batch.micro_train pairs per micro-batch.
#pragma once

#include <optional>
#include <vector>

#include "meshrun/data/data.hpp"
#include "meshrun/data/dataset.hpp"

namespace meshrun {

struct PreferenceRecord {
  long long line = 0;
  SftRecord chosen;
  SftRecord rejected;
};

struct PreferencePair {
  long long line = 0;
  SftSample chosen;
  SftSample rejected;
};

struct PreferenceDataset {
  std::string path;
  std::vector<PreferencePair> pairs;
  long long lines = 0;
  long long truncated = 0;  // pairs with a sample cut to max_len
  long long dropped = 0;    // pairs with a sample left without a response token
  long long identical = 0;  // pairs whose replies max_len cut to the same tokens
  // One line for the log: "N pairs from L lines (...)".
  std::string summary() const;
};

// Reads and checks every line (keys from `config`); throws DataError with
// every problem found (up to max_errors).
std::vector<PreferenceRecord> read_preference_records(const DataConfig& config,
                                                      int max_errors = kDefaultMaxDataErrors,
                                                      DataReadLimit limit = {});

// read_preference_records + tokenisation + truncation over the file, or
// the part of it `limit` allows (then, when the read stopped short and every
// pair read was dropped, the dataset is empty rather than an error).
PreferenceDataset load_preference_dataset(const DataConfig& config, const Tokenizer& tokenizer,
                                          int max_errors = kDefaultMaxDataErrors, DataReadLimit limit = {});

// The evaluation pairs ([data] eval_path) for one dp rank, in micro-batches
// of whole pairs laid out like PreferenceData's (data.hpp's eval_split).
EvalBatches preference_eval_batches(const DataConfig& data, int micro_batch, const Tokenizer& tokenizer,
                                    const SftDataOptions& options = {});

// The whole pipeline for one dp rank (every rank loads the same pairs).
class PreferenceData {
 public:
  // `batching` in pairs. Throws DataError (the file) or ConfigError naming the batch key.
  PreferenceData(const DataConfig& data, const Batching& batching, const Tokenizer& tokenizer,
                 const SftDataOptions& options = {});

  // This rank's micro-batches of the next optimizer step; nullopt at the end.
  std::optional<SftStep> next();

  SamplerState state() const { return sampler_.state(); }
  void restore(const SamplerState& state) { sampler_.restore(state); }
  const PreferenceDataset& dataset() const { return dataset_; }
  int64_t total_steps() const { return sampler_.total_steps(); }
  int grad_accum() const { return sampler_.grad_accum(); }

 private:
  PreferenceDataset dataset_;
  SftDataset samples_;         // pair i's chosen at 2i, rejected at 2i + 1
  PackedSequences sequences_;  // one sample per sequence
  DistributedSampler sampler_;
  int32_t pad_id_;
};

}  // namespace meshrun
