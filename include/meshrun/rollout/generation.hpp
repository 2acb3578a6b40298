// Generation: autoregressive sampling from a LlamaModel with continuous
// batching, the engine behind PPO's rollouts and `meshrun generate`.
//
// The KV cache holds max_batch sequence slots of max_total_tokens. A slot
// holds one sequence from position 0 (no padding); the moment a sequence
// stops (its eos, or max_new_tokens) its slot takes the next pending
// prompt, so slots do not idle while the longest response of a batch
// finishes. Consecutive identical prompts (the n samples of a GRPO group)
// are prefilled once and their keys and values copied into the group's
// other slots. Each decode step runs one token per live slot through the
// model; sampling uses temperature, top-k and top-p (temperature 0: greedy).
// Without the cache (the reference it is tested against) each sequence
// recomputes its whole prefix every step, alone.
//
// Invariants: the tokens of a sample depend only on (model, its prompt,
// options, its sample id): its randomness is its own stream, one uniform
// number per token from sample_uniform(options.seed, sample id, token
// index), drawn on the host whatever the device. So neither max_batch, nor
// the slot a sample ran in, nor what else was live changes it (up to the
// arithmetic of batched matmuls). Under tensor parallelism every rank of
// the tp group calls generate() with the same arguments; the vocab shards
// are gathered before sampling, so every rank schedules and returns the
// same tokens. The cache is allocated once; nothing grows while generating.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <torch/torch.h>

#include "meshrun/model/kv_cache.hpp"
#include "meshrun/model/model.hpp"

namespace meshrun {

class Group;

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (argmax)
  double top_p = 1.0;        // nucleus: the smallest set of tokens whose probability reaches top_p
  int top_k = -1;            // <= 0: every token
  int64_t max_new_tokens = 16;
  // A sequence stops after sampling any of these (the tokenizer's eos and
  // the model's generation_config.json ones: generation_stop_ids()).
  std::vector<int64_t> stop_ids;
  int64_t pad_id = 0;             // fills prompts on the left and finished responses
  // Ids at or above this are never sampled (a model vocabulary padded beyond
  // the tokenizer's); <= 0: the whole vocabulary.
  int64_t vocab_limit = 0;
  uint64_t seed = 0;
  // The id of the first prompt's sample (the others count up from it): a
  // sample's random stream is (seed, id), whichever engine or slot runs it.
  uint64_t first_sample = 0;
};

// The uniform number in [0, 1) a sample draws for its token `token`:
// splitmix64's finaliser over (seed, sample, token), 53 bits.
double sample_uniform(uint64_t seed, uint64_t sample, uint64_t token);

// What one generate() call did, for the rollout metrics.
struct GenerationStats {
  int64_t decode_steps = 0;       // forward passes that sampled a token for the live slots
  int64_t busy_slot_steps = 0;    // Σ over those steps of the slots live
  int64_t max_batch = 0;
  int64_t prefilled_tokens = 0;   // prompt tokens run through the model
  int64_t prefix_shared_tokens = 0;  // prompt tokens copied from a group's first sample instead
  // Mean share of the slots busy per decode step (1: every slot always full).
  double slot_utilization() const {
    return decode_steps > 0 && max_batch > 0
               ? static_cast<double>(busy_slot_steps) / static_cast<double>(decode_steps * max_batch)
               : 0.0;
  }
};

struct GeneratedSample {
  std::vector<int32_t> prompt;
  std::vector<int32_t> response;  // includes the eos token when it stopped there
  // log π(token) of each response token under the generating weights, over
  // the whole vocabulary with the temperature applied (as training computes
  // it, whatever top-k / top-p cut before sampling).
  std::vector<float> log_probs;
  bool stopped_at_eos = false;
};

// Samples packed as tensors: prompts left-padded to a common length, then
// responses right-padded.
struct SequenceBatch {
  torch::Tensor sequences;       // [n, prompt_len + response_len] int64
  torch::Tensor attention_mask;  // same shape, 1 on real tokens
  torch::Tensor response_mask;   // [n, response_len], 1 on response tokens
  int64_t prompt_len = 0;
  int64_t response_len = 0;
};
SequenceBatch pack_samples(std::span<const GeneratedSample> samples, int64_t pad_id,
                           const torch::Device& device = torch::kCPU);

// One sampling step: next-token ids [batch] from full-vocabulary logits
// [batch, vocab] and one uniform number in [0, 1) per row (inverse CDF over
// the kept tokens, in descending-probability order when top-k/top-p cut).
torch::Tensor sample_next_tokens(const torch::Tensor& logits, const SamplingOptions& options,
                                 const torch::Tensor& uniforms);

class Generator {
 public:
  // `tp`: the model's tensor-parallel group (null: tp = 1). The cache holds
  // max_batch sequences of max_total_tokens (prompt + response) each.
  Generator(LlamaModel model, Group* tp, int64_t max_batch, int64_t max_total_tokens);

  // One sample per prompt, in order. Throws std::logic_error for an empty
  // prompt or one that leaves no room for max_new_tokens (the callers size
  // the engine for their prompts and refuse empty ones first).
  std::vector<GeneratedSample> generate(const std::vector<std::vector<int32_t>>& prompts,
                                        const SamplingOptions& options, bool use_cache = true);
  // The last generate() call's figures.
  const GenerationStats& stats() const { return stats_; }

  LlamaModel& model() { return model_; }
  int64_t max_batch() const { return cache_.batch(); }
  int64_t max_total_tokens() const { return cache_.capacity(); }
  int64_t cache_bytes() const { return cache_.bytes(); }
  // The weights and the KV cache, for StorageSleep.
  std::vector<torch::Tensor> memory();

 private:
  // The continuous-batching loop over the slots.
  void generate_continuous(const std::vector<std::vector<int32_t>>& prompts, const SamplingOptions& options,
                           std::vector<GeneratedSample>& out);
  // The reference: each sequence alone, its whole prefix recomputed per token.
  void generate_recomputing(const std::vector<std::vector<int32_t>>& prompts, const SamplingOptions& options,
                            std::vector<GeneratedSample>& out);
  torch::Tensor full_vocab_logits(const torch::Tensor& last_logits);

  LlamaModel model_;
  Group* tp_;
  KvCache cache_;
  GenerationStats stats_;
};

}  // namespace meshrun
