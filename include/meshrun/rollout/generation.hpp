// Generation: autoregressive sampling from a LlamaModel with continuous
// batching over a paged KV cache, the engine behind PPO's rollouts and
// `meshrun generate`.
//
// Up to max_batch sequences are live at once; the moment one stops (its
// eos, or max_new_tokens) the next pending request takes its place, so the
// batch does not idle while the longest response finishes. The KV cache is
// a pool of fixed-size blocks (rollout/kv_blocks.hpp): a sequence holds the
// blocks its tokens fill, so memory follows the live tokens, and a run of
// identical prompts (the n samples of a GRPO group) is prefilled once, the
// other samples sharing its full blocks and copying only the partial last
// one. A request is admitted when the pool has room for its prompt and one
// token, and prefilled in chunks within each step's token budget, so a long
// prompt holds the live sequences' decoding back by at most one chunk per
// step; when a growing sequence finds the pool empty the newest live
// sequence is preempted (blocks freed, request re-queued first, resumed by
// prefilling its prompt and response so far). Each decode step runs one
// token per live sequence through the model; sampling uses temperature,
// top-k and top-p (temperature 0: greedy). On CUDA a decode step can run as
// a CUDA graph captured per batch bucket and key width (decode_graphs, in
// the constructor; rollout/decode_graphs.hpp). Without the cache (the
// reference it is tested against) each sequence recomputes its whole prefix
// every step, alone.
//
// Invariants: the tokens of a sample depend only on (model, its prompt,
// options, its sample id): its randomness is its own stream, one uniform
// number per token from sample_uniform(options.seed, sample id, token
// index), drawn on the host whatever the device. So neither max_batch, nor
// the pool's size, nor preemption, nor what else was live changes it (up to
// the arithmetic of batched matmuls). Under tensor parallelism every rank
// of the tp group calls generate() with the same arguments; the vocab
// shards are gathered before sampling, so every rank schedules and returns
// the same tokens. Given WeightUpdates (partial rollouts), a sample's
// tokens also depend on when new weights arrived, which its versions
// record. The pool is allocated once; nothing grows while
// generating, and every block is free again when generate() returns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <torch/torch.h>

#include "meshrun/model/paged_kv_cache.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/rollout/kv_blocks.hpp"

namespace meshrun {

class Group;
namespace rollout_detail {
class DecodeGraphs;
}

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
  // Routing replay ([ppo] routing_replay): record which experts each token
  // the engine fed went to (GeneratedSample::routes); a dense model has none.
  bool record_routes = false;
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
  int64_t prefill_chunks = 0;     // the forward passes that prefilled them
  int64_t prefix_shared_tokens = 0;  // prompt tokens a group's other samples share instead of prefilling
  int64_t kv_blocks = 0;             // the pool's blocks
  int64_t kv_peak_blocks = 0;        // the most in use at once
  int64_t preemptions = 0;           // sequences sent back to the queue for want of blocks
  int64_t weight_loads = 0;          // partial rollouts: new weights loaded mid-generation
  int64_t interrupted = 0;           // sequences with tokens of the old weights resumed on the new
  int64_t graph_steps = 0;           // decode steps run on fixed shapes (Generator's decode_graphs)
  // Mean share of the slots busy per decode step (1: every slot always full).
  double slot_utilization() const {
    return decode_steps > 0 && max_batch > 0
               ? static_cast<double>(busy_slot_steps) / static_cast<double>(decode_steps * max_batch)
               : 0.0;
  }
};

struct GeneratedSample {
  std::vector<int32_t> prompt;
  // Includes the eos token when it stopped there. In a multi-turn episode:
  // every turn and the observation tokens between them, in order.
  std::vector<int32_t> response;
  // log π(token) of each response token under the generating weights, over
  // the whole vocabulary with the temperature applied (as training computes
  // it, whatever top-k / top-p cut before sampling); 0 for observation tokens.
  std::vector<float> log_probs;
  // Per response token, 1 where the policy sampled it, 0 for observation
  // tokens; empty: every token is the policy's (a single turn).
  std::vector<uint8_t> policy_mask;
  int32_t turns = 1;  // model turns
  bool stopped_at_eos = false;  // the last turn ended at a stop id
  // Partial rollouts: per response token, the policy version of the
  // weights that sampled it (observation tokens: those live when it was
  // appended); empty when generate() was given no WeightUpdates.
  std::vector<int64_t> versions;
  // SamplingOptions::record_routes on a mixture of experts: the experts of
  // each sparse layer for every token the engine fed the model, position by
  // position from the prompt's first token (the last response token is
  // never fed): routes[(p × route_layers + l) × route_k + j] for position p,
  // sparse layer l and pick j. A multi-turn episode's observations included.
  std::vector<int16_t> routes;
  int32_t route_layers = 0, route_k = 0;
  int64_t routed_positions() const {
    return route_layers > 0 && route_k > 0 ? static_cast<int64_t>(routes.size()) / (int64_t{route_layers} * route_k) : 0;
  }
};

// Multi-turn episodes: what the engine asks when a sequence's turn ends (a
// stop id, max_new_tokens of the turn, or the sequence's token limit).
struct TurnEnd {
  bool finished = true;              // the episode is over
  std::vector<int32_t> observation;  // otherwise: tokens to append before the next turn
};
class TurnHandler {
 public:
  virtual ~TurnHandler() = default;
  // `request`: the index in generate()'s prompts; `sample`: the sequence so
  // far, its response ending with the turn, whose tokens start at
  // `turn_begin`; `room`: the tokens the sequence may still grow by. A
  // returned observation holds fewer than `room` tokens (so the next turn
  // has at least one); it may be empty.
  virtual TurnEnd end_turn(size_t request, const GeneratedSample& sample, int64_t turn_begin, int64_t room) = 0;
};

// Partial rollouts (asynchronous RL): new weights that may arrive while
// sequences are live. Between engine steps the generator asks whether they
// are waiting; if so it loads them and every live sequence drops its KV
// blocks (computed by the old weights) and resumes by prefilling its prompt
// and response so far with the new ones, as AReaL's interruptible
// generation does. Under tensor parallelism every rank of the tp group is
// asked in the same order and must answer alike.
class WeightUpdates {
 public:
  virtual ~WeightUpdates() = default;
  virtual bool waiting() = 0;
  // Loads the waiting weights into the model; returns their policy version.
  virtual int64_t load() = 0;
  // The policy version the model holds now.
  virtual int64_t version() const = 0;
};

// Samples packed as tensors: prompts left-padded to a common length, then
// responses right-padded.
struct SequenceBatch {
  torch::Tensor sequences;       // [n, prompt_len + response_len] int64
  torch::Tensor attention_mask;  // same shape, 1 on real tokens
  torch::Tensor response_mask;   // [n, response_len], 1 on response tokens
  int64_t prompt_len = 0;
  int64_t response_len = 0;
  // int64 [n, prompt_len + response_len, route layers, route k]: the
  // samples' recorded routes at their columns, -1 where none (ModelInputs::
  // routes); undefined when no sample recorded any.
  torch::Tensor routes;
};
SequenceBatch pack_samples(std::span<const GeneratedSample> samples, int64_t pad_id,
                           const torch::Device& device = torch::kCPU);
// The same for samples held elsewhere (a trajectory's), without copying them.
SequenceBatch pack_samples(std::span<const GeneratedSample* const> samples, int64_t pad_id,
                           const torch::Device& device = torch::kCPU);

// One sampling step: next-token ids [batch] from full-vocabulary logits
// [batch, vocab] and one uniform number in [0, 1) per row: inverse CDF, in
// id order, over the kept tokens (every token with top-k/top-p off; with
// them, each token whose probability reaches the larger of the k-th largest
// probability and the smallest value the top_p mass needs, ties kept).
torch::Tensor sample_next_tokens(const torch::Tensor& logits, const SamplingOptions& options,
                                 const torch::Tensor& uniforms);

class Generator {
 public:
  // `tp`: the model's tensor-parallel group (null: tp = 1). At most
  // max_batch sequences live at once, each at most max_total_tokens
  // (prompt + response). The KV pool holds kv_tokens tokens in blocks of
  // block_size (0: max_batch × max_total_tokens, so nothing is preempted).
  // A step prefills at most prefill_chunk tokens less the live sequences'
  // decode tokens (at least one; 0: whole prompts at once). With
  // decode_graphs, decode steps run on fixed shapes, captured as CUDA
  // graphs on a CUDA device (rollout/decode_graphs.hpp; elsewhere the same
  // shapes run eagerly, which is how they are tested without a GPU); the
  // cache then holds one more block, where padding rows write. Throws
  // std::logic_error for a model decode_graph_blocker() refuses.
  Generator(LlamaModel model, Group* tp, int64_t max_batch, int64_t max_total_tokens, int64_t kv_tokens = 0,
            int64_t block_size = kDefaultKvBlockSize, int64_t prefill_chunk = kDefaultPrefillChunk,
            bool decode_graphs = false);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;
  static constexpr int64_t kDefaultKvBlockSize = 16;
  static constexpr int64_t kDefaultPrefillChunk = 512;

  // One sample per prompt, in order. Throws std::logic_error for an empty
  // prompt or one that leaves no room for max_new_tokens (the callers size
  // the engine for their prompts and refuse empty ones first). With
  // `turns`, each sample is an episode: max_new_tokens bounds each turn,
  // max_total_tokens the whole sequence (a prompt needs room for one token),
  // and at each turn's end the handler says whether the episode goes on,
  // with what observation; the sequence keeps its KV blocks meanwhile and
  // prefills the observation like a prompt. Whatever the handler throws
  // leaves generate() with every block free again. With `updates`, new
  // weights may be loaded between steps (WeightUpdates) and each sample
  // records the version of every token.
  std::vector<GeneratedSample> generate(const std::vector<std::vector<int32_t>>& prompts,
                                        const SamplingOptions& options, bool use_cache = true,
                                        TurnHandler* turns = nullptr, WeightUpdates* updates = nullptr);
  // The last generate() call's figures.
  const GenerationStats& stats() const { return stats_; }
  // Run before each step of generate(), on its thread, where no parallel
  // region runs (`meshrun generate` resizes its OpenMP team there).
  void set_between_steps(std::function<void()> hook) { between_steps_ = std::move(hook); }

  LlamaModel& model() { return model_; }
  int64_t max_batch() const { return max_batch_; }
  int64_t max_total_tokens() const { return max_total_tokens_; }
  int64_t kv_pool_tokens() const { return pool_.total_blocks() * pool_.block_size(); }
  int64_t cache_bytes() const { return cache_.bytes(); }
  const KvBlockPool& kv_pool() const { return pool_; }
  // The weights and the KV cache, for StorageSleep.
  std::vector<torch::Tensor> memory();
  // Drops the decode graphs and their memory (before the engine sleeps:
  // they hold the addresses sleep frees); the next steps capture anew.
  void release_decode_graphs();
  // Null without decode_graphs.
  const rollout_detail::DecodeGraphs* decode_graphs() const { return graphs_.get(); }

 private:
  // The continuous-batching loop over the slots.
  void generate_continuous(const SamplingOptions& options, TurnHandler* turns, WeightUpdates* updates,
                           std::vector<GeneratedSample>& out);
  // The reference: each sequence alone, its whole prefix recomputed per token.
  void generate_recomputing(const SamplingOptions& options, TurnHandler* turns, WeightUpdates* updates,
                            std::vector<GeneratedSample>& out);
  torch::Tensor full_vocab_logits(const torch::Tensor& last_logits);

  LlamaModel model_;
  Group* tp_;
  int64_t max_batch_, max_total_tokens_, prefill_chunk_;
  KvBlockPool pool_;
  PagedKvCache cache_;
  GenerationStats stats_;
  std::unique_ptr<rollout_detail::DecodeGraphs> graphs_;
  std::function<void()> between_steps_;
};

}  // namespace meshrun
