// Generation: batched autoregressive sampling from a LlamaModel, the engine
// behind PPO's rollouts and `meshrun generate`.
//
// Prompts are left-padded into one batch (positions count real tokens, so
// padding changes nothing); each step samples one token per sequence with
// temperature, top-k and top-p (temperature 0: greedy), and a sequence stops
// at its eos token or after max_new_tokens. With the KV cache (the default)
// each step runs only the new token through the model; without it, the
// whole prefix is recomputed every step (the reference the cache is tested
// and benchmarked against). Both draw the same random numbers in the same
// order, so they give the same tokens.
//
// Invariants: deterministic for a given (model, prompts, options, seed):
// the randomness is one uniform number per sequence per step from a private
// generator seeded with options.seed, drawn on the CPU whatever the device.
// Under tensor parallelism every rank of the tp group must call generate()
// with the same arguments; the vocab shards are gathered before sampling, so
// every rank returns the same tokens. The KV cache is allocated once, for
// max_batch sequences of max_total_tokens; larger prompt sets run in chunks.
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

  LlamaModel& model() { return model_; }
  int64_t max_batch() const { return cache_.batch(); }
  int64_t max_total_tokens() const { return cache_.capacity(); }
  int64_t cache_bytes() const { return cache_.bytes(); }
  // The weights and the KV cache, for StorageSleep.
  std::vector<torch::Tensor> memory();

 private:
  // Generates one chunk (at most max_batch prompts), drawing from `random`.
  void generate_chunk(std::span<const std::vector<int32_t>> prompts, const SamplingOptions& options, bool use_cache,
                      at::Generator& random, std::vector<GeneratedSample>& out);
  torch::Tensor full_vocab_logits(const torch::Tensor& last_logits);

  LlamaModel model_;
  Group* tp_;
  KvCache cache_;
};

}  // namespace meshrun
