// The generation loop: slots refilled from the pending prompts as their
// sequences stop, one token per live slot per decode step.
#include <algorithm>
#include <deque>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "meshrun/dist/dist.hpp"
#include "meshrun/rollout/generation.hpp"
#include "meshrun/rollout/kv_blocks.hpp"
#include "decode_graphs.hpp"

namespace meshrun {

namespace {

// splitmix64's finaliser (Steele, Lea, Flood 2014): a bijection of 64-bit
// words whose outputs look independent for consecutive inputs. A counter-
// based stream (no state to carry between steps) is what lets a sample draw
// the same numbers whatever slot or step it runs in.
uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One live sequence: which request, the blocks holding its tokens and the
// token it feeds next. `live` keeps them in the order they went live, so
// its last is the newest (the one preemption takes first).
struct LiveSequence {
  size_t request = 0;
  KvBlockTable table;  // table.tokens: tokens in the cache
  int64_t next_token = 0;
};

// An admitted request whose input (prompt, and after a preemption the
// response so far) is going through the model a chunk at a time; `group`:
// the identical fresh prompts that fork its blocks when it completes.
struct Prefilling {
  LiveSequence sequence;
  std::vector<int64_t> input;
  int64_t done = 0;
  std::vector<size_t> group;
};

bool stops_at(const SamplingOptions& options, int64_t token) {
  return std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end();
}

}  // namespace

double sample_uniform(uint64_t seed, uint64_t sample, uint64_t token) {
  const uint64_t stream = mix64(seed + 0x9e3779b97f4a7c15ULL * (sample + 1));
  const uint64_t word = mix64(stream + 0xd1b54a32d192ed03ULL * (token + 1));
  return static_cast<double>(word >> 11) * 0x1.0p-53;
}

namespace {

int64_t pool_blocks(int64_t max_batch, int64_t max_total_tokens, int64_t kv_tokens, int64_t block_size) {
  if (max_batch < 1 || max_total_tokens < 1 || block_size < 1 || kv_tokens < 0)
    throw std::logic_error("an engine of " + std::to_string(max_batch) + " sequences of " +
                           std::to_string(max_total_tokens) + " tokens, a pool of " + std::to_string(kv_tokens) +
                           " tokens in blocks of " + std::to_string(block_size));
  return kv_tokens > 0 ? KvBlockPool::blocks_for(kv_tokens, block_size)
                       : max_batch * KvBlockPool::blocks_for(max_total_tokens, block_size);
}

}  // namespace

Generator::Generator(LlamaModel model, Group* tp, int64_t max_batch, int64_t max_total_tokens, int64_t kv_tokens,
                     int64_t block_size, int64_t prefill_chunk, bool decode_graphs)
    : model_(std::move(model)),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      max_batch_(max_batch),
      max_total_tokens_(max_total_tokens),
      prefill_chunk_(std::max<int64_t>(0, prefill_chunk)),
      pool_(pool_blocks(max_batch, max_total_tokens, kv_tokens, block_size), block_size),
      // With decode graphs: one block past the pool's, which it never hands
      // out, for the padding rows of a fixed-shape step to write to.
      cache_(*model_, pool_.total_blocks() + (decode_graphs ? 1 : 0), block_size) {
  if (!decode_graphs) return;
  if (const std::string blocker = decode_graph_blocker(model_->config(), tp_ ? tp_->size() : 1); !blocker.empty())
    throw std::logic_error("decode graphs asked of a model they cannot serve: " + blocker);
  graphs_ = std::make_unique<rollout_detail::DecodeGraphs>(
      max_batch_, KvBlockPool::blocks_for(max_total_tokens_, block_size), pool_.total_blocks());
}

Generator::~Generator() = default;

void Generator::release_decode_graphs() {
  if (graphs_) graphs_->release();
}

std::vector<GeneratedSample> Generator::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                 const SamplingOptions& options, bool use_cache, TurnHandler* turns,
                                                 WeightUpdates* updates) {
  if (options.max_new_tokens < 1) throw std::logic_error("max_new_tokens must be at least 1");
  // A single turn needs room for all its tokens; an episode, for its first
  // token (it ends at max_total_tokens), and the pool for a whole episode.
  const int64_t wanted = turns ? 1 : options.max_new_tokens;
  if (turns && pool_.blocks_for(max_total_tokens_) > pool_.total_blocks())
    throw std::logic_error("episodes of " + std::to_string(max_total_tokens_) + " tokens need " +
                           std::to_string(pool_.blocks_for(max_total_tokens_)) + " KV blocks but the pool holds " +
                           std::to_string(pool_.total_blocks()));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto length = static_cast<int64_t>(prompts[i].size());
    if (length == 0) throw std::logic_error("prompt " + std::to_string(i) + " is empty");
    // Checked here, on the host: forward_paged does not read device ids back.
    const int64_t vocab = model_->config().vocab;
    for (const int32_t id : prompts[i])
      if (id < 0 || id >= vocab)
        throw ModelInputError("prompt " + std::to_string(i) + " holds token id " + std::to_string(id) +
                              ", outside the vocabulary [0, " + std::to_string(vocab) + ")");
    if (length + wanted > max_total_tokens_)
      throw std::logic_error("prompt " + std::to_string(i) + " has " + std::to_string(length) +
                             " tokens; with max_new_tokens = " + std::to_string(options.max_new_tokens) +
                             " it needs " + std::to_string(length + wanted) +
                             " but the engine holds " + std::to_string(max_total_tokens_) + " per sequence");
    if (pool_.blocks_for(length + wanted) > pool_.total_blocks())
      throw std::logic_error("prompt " + std::to_string(i) + " with max_new_tokens = " +
                             std::to_string(options.max_new_tokens) + " needs " +
                             std::to_string(length + wanted) + " tokens but the KV pool holds " +
                             std::to_string(pool_.total_blocks() * pool_.block_size()));
  }
  torch::NoGradGuard no_grad;
  model_->eval();
  stats_ = GenerationStats{};
  stats_.max_batch = max_batch_;
  stats_.kv_blocks = pool_.total_blocks();
  pool_.reset_peak();
  std::vector<GeneratedSample> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) out[i].prompt = prompts[i];
  try {
    if (use_cache) generate_continuous(options, turns, updates, out);
    else generate_recomputing(options, turns, updates, out);
  } catch (...) {
    pool_.clear();  // the tables that held blocks are gone with the loop
    throw;
  }
  stats_.kv_peak_blocks = pool_.peak_used_blocks();
  return out;
}

namespace {

// Appends an episode's observation after its turn (context tokens: no
// log-prob, not the policy's) and starts its next turn.
void append_observation(GeneratedSample& sample, const TurnEnd& end, int64_t room, int64_t vocab,
                        const WeightUpdates* updates) {
  if (static_cast<int64_t>(end.observation.size()) >= room)
    throw std::logic_error("an episode's observation of " + std::to_string(end.observation.size()) +
                           " tokens where " + std::to_string(room) + " remain (the next turn needs one)");
  for (const int32_t id : end.observation)
    if (id < 0 || id >= vocab)
      throw ModelInputError("an episode's observation holds token id " + std::to_string(id) +
                            ", outside the vocabulary [0, " + std::to_string(vocab) + ")");
  sample.response.insert(sample.response.end(), end.observation.begin(), end.observation.end());
  sample.log_probs.resize(sample.response.size(), 0.0f);
  sample.policy_mask.resize(sample.response.size(), 0);
  if (updates) sample.versions.resize(sample.response.size(), updates->version());
  ++sample.turns;
}

}  // namespace

std::vector<torch::Tensor> Generator::memory() {
  std::vector<torch::Tensor> tensors = model_->parameters();
  for (int64_t layer = 0; layer < cache_.layers(); ++layer) {
    tensors.push_back(cache_.keys(layer));
    tensors.push_back(cache_.values(layer));
  }
  return tensors;
}

torch::Tensor Generator::full_vocab_logits(const torch::Tensor& last_logits) {
  if (!tp_) return last_logits;
  // Shards are [batch, vocab / tp]; gathering along dim 0 needs vocab first.
  return tp_->all_gather_into_tensor(last_logits.t().contiguous()).t();
}

namespace {

// Routing replay's recording (SamplingOptions::record_routes): while alive,
// the model appends each forward's expert choices to `captured`; store()
// moves them into the samples, token i of the forward being position
// positions[i] of out[requests[i]].
class RouteRecorder {
 public:
  RouteRecorder(LlamaModel& model, bool wanted) : model_(model) {
    const ModelConfig& c = model->config();
    if (!wanted || !c.mixture_of_experts()) return;
    // The samples keep them as int16 (ample for every published mixture).
    if (c.experts > std::numeric_limits<int16_t>::max())
      throw ModelConfigError("routing replay records experts as int16; the model has " + std::to_string(c.experts));
    layers_ = static_cast<int32_t>(c.sparse_layers());
    picks_ = static_cast<int32_t>(c.experts_per_token);
    model_->capture_routes(&captured_);
  }
  ~RouteRecorder() {
    if (layers_ > 0) model_->capture_routes(nullptr);
  }
  RouteRecorder(const RouteRecorder&) = delete;
  RouteRecorder& operator=(const RouteRecorder&) = delete;

  void store(const std::vector<size_t>& requests, const std::vector<int64_t>& positions,
             std::vector<GeneratedSample>& out) {
    if (layers_ == 0) return;
    if (captured_.size() != static_cast<size_t>(layers_))
      throw std::logic_error("routing replay: " + std::to_string(captured_.size()) + " sparse layers recorded, the model has " +
                             std::to_string(layers_));
    const torch::Tensor host = torch::stack(captured_).to(torch::kInt16).cpu().contiguous();  // [layers, tokens, k]
    captured_.clear();
    const auto* value = host.const_data_ptr<int16_t>();
    const int64_t tokens = host.size(1);
    if (tokens != static_cast<int64_t>(requests.size())) throw std::logic_error("routing replay: tokens and requests differ");
    const size_t width = static_cast<size_t>(layers_) * static_cast<size_t>(picks_);
    for (int64_t i = 0; i < tokens; ++i) {
      GeneratedSample& sample = out[requests[static_cast<size_t>(i)]];
      sample.route_layers = layers_;
      sample.route_k = picks_;
      const size_t at = static_cast<size_t>(positions[static_cast<size_t>(i)]) * width;
      if (sample.routes.size() < at + width) sample.routes.resize(at + width, -1);
      for (int32_t l = 0; l < layers_; ++l)
        for (int32_t j = 0; j < picks_; ++j) sample.routes[at + static_cast<size_t>(l * picks_ + j)] = value[(l * tokens + i) * picks_ + j];
    }
  }

 private:
  LlamaModel& model_;
  std::vector<torch::Tensor> captured_;
  int32_t layers_ = 0, picks_ = 0;
};

}  // namespace

void Generator::generate_continuous(const SamplingOptions& options, TurnHandler* turns, WeightUpdates* updates,
                                    std::vector<GeneratedSample>& out) {
  const torch::Device device = model_->options().device;
  RouteRecorder routes(model_, options.record_routes);
  const auto ids = torch::TensorOptions().dtype(torch::kInt64);
  const bool scaled = options.temperature > 0 && options.temperature != 1.0;
  // Fixed-shape decode steps; not while recording routes (a dense model has none to record).
  rollout_detail::DecodeGraphs* graphs = options.record_routes ? nullptr : graphs_.get();
  if (graphs) graphs->bind(memory());
  // Requests not live, in the order they are admitted: the prompts in
  // order, a preempted request back at the front (the oldest first).
  std::deque<size_t> pending;
  for (size_t request = 0; request < out.size(); ++request) pending.push_back(request);
  // Where each request's current turn began in its response (episodes).
  std::vector<int64_t> turn_begin(out.size(), 0);
  std::vector<LiveSequence> live;  // in admission order, the order of `logits`' rows
  std::deque<Prefilling> prefilling;  // admitted, their input not yet all through the model
  torch::Tensor logits;            // [live, vocab / tp]: each live sequence's next-token logits
  const auto block_tables = [&](const std::vector<const KvBlockTable*>& tables) {
    size_t widest = 0;
    for (const KvBlockTable* table : tables) widest = std::max(widest, table->blocks.size());
    std::vector<int64_t> flat(tables.size() * widest, 0);  // block 0 pads: any valid block, masked
    for (size_t row = 0; row < tables.size(); ++row)
      std::copy(tables[row]->blocks.begin(), tables[row]->blocks.end(), flat.begin() + static_cast<std::ptrdiff_t>(row * widest));
    return torch::tensor(flat, ids).view({static_cast<int64_t>(tables.size()), static_cast<int64_t>(widest)});
  };
  while (true) {
    if (between_steps_) between_steps_();
    // Partial rollouts: new weights make every cached key and value stale,
    // so each sequence gives its blocks back and waits at the front of the
    // queue, in the order it was admitted, to prefill its prompt and
    // response so far with the new weights (as after a preemption).
    if (updates && updates->waiting()) {
      updates->load();
      if (graphs) graphs->bind(memory());  // weights loaded out of place move the graphs' inputs
      ++stats_.weight_loads;
      std::vector<size_t> resumed;
      for (LiveSequence& sequence : live) {
        pool_.release(sequence.table);
        resumed.push_back(sequence.request);
      }
      for (Prefilling& p : prefilling) {
        pool_.release(p.sequence.table);
        resumed.push_back(p.sequence.request);
        resumed.insert(resumed.end(), p.group.begin(), p.group.end());
      }
      for (const size_t request : resumed) stats_.interrupted += out[request].response.empty() ? 0 : 1;
      live.clear();
      prefilling.clear();
      logits = torch::Tensor();
      for (auto request = resumed.rbegin(); request != resumed.rend(); ++request) pending.push_front(*request);
    }
    // Admit pending requests while places are free and the pool has room
    // for the prompt and its first token; first come, first served. A
    // request's blocks are reserved at once; its prompt (and, resumed after
    // preemption, what it had generated) is prefilled in chunks below. A run
    // of identical fresh prompts (a group's samples) is prefilled once and
    // the others fork its blocks when it completes.
    const auto places = [&] {
      size_t used = live.size();
      for (const Prefilling& p : prefilling) used += 1 + p.group.size();
      return static_cast<int64_t>(used);
    };
    while (!pending.empty() && places() < max_batch_) {
      const size_t first = pending.front();
      const GeneratedSample& head = out[first];
      std::vector<int64_t> input(head.prompt.begin(), head.prompt.end());
      input.insert(input.end(), head.response.begin(), head.response.end());  // a preempted one resumes
      const auto length = static_cast<int64_t>(input.size());
      if (pool_.free_blocks() < pool_.blocks_for(length + 1)) break;
      Prefilling entry{LiveSequence{first, {}, 0}, std::move(input), 0, {}};
      if (!pool_.grow(entry.sequence.table, length)) throw std::logic_error("the KV pool refused a checked grow");
      pending.pop_front();
      while (head.response.empty() && !pending.empty() && places() + 1 + static_cast<int64_t>(entry.group.size()) < max_batch_) {
        const size_t request = pending.front();
        if (!out[request].response.empty() || out[request].prompt != head.prompt) break;
        entry.group.push_back(request);
        pending.pop_front();
      }
      prefilling.push_back(std::move(entry));
    }

    // Prefill within the step's token budget (chunked prefill: the live
    // sequences' decode tokens come first, so a long prompt delays a
    // decode step by at most one chunk); a prompt that completes joins the
    // live ones with its next-token logits, and its group forks its blocks.
    std::vector<torch::Tensor> admitted{logits};
    int64_t budget = prefill_chunk_ > 0 ? std::max<int64_t>(1, prefill_chunk_ - static_cast<int64_t>(live.size()))
                                        : std::numeric_limits<int64_t>::max();
    while (!prefilling.empty() && budget > 0) {
      Prefilling& p = prefilling.front();
      const auto length = static_cast<int64_t>(p.input.size());
      const int64_t chunk = std::min(length - p.done, budget);
      const std::vector<int64_t> piece(p.input.begin() + p.done, p.input.begin() + p.done + chunk);
      const torch::Tensor prefilled = model_->forward_paged(torch::tensor(piece, ids).to(device).unsqueeze(0),
                                                            {p.done}, block_tables({&p.sequence.table}), cache_);
      {
        std::vector<int64_t> positions(static_cast<size_t>(chunk));
        std::iota(positions.begin(), positions.end(), p.done);
        routes.store(std::vector<size_t>(static_cast<size_t>(chunk), p.sequence.request), positions, out);
      }
      stats_.prefilled_tokens += chunk;
      ++stats_.prefill_chunks;
      p.done += chunk;
      budget -= chunk;
      if (p.done < length) break;
      const KvBlockTable prompt_table = p.sequence.table;
      live.push_back(std::move(p.sequence));
      admitted.push_back(prefilled);
      std::vector<size_t> refused;
      for (const size_t request : p.group) {
        LiveSequence sample{request, {}, 0};
        std::optional<KvBlockCopy> copy;
        if (!refused.empty() || !pool_.fork(prompt_table, sample.table, copy)) {
          refused.push_back(request);
          continue;
        }
        if (copy) cache_.copy_block(copy->from, copy->to, copy->tokens);
        out[request].routes = out[p.sequence.request].routes;  // the shared prompt's
        out[request].route_layers = out[p.sequence.request].route_layers;
        out[request].route_k = out[p.sequence.request].route_k;
        stats_.prefix_shared_tokens += length;
        live.push_back(std::move(sample));
        admitted.push_back(prefilled);
      }
      // Samples the pool could not fork for wait at the front, in order.
      for (auto request = refused.rbegin(); request != refused.rend(); ++request) pending.push_front(*request);
      prefilling.pop_front();
    }
    if (live.empty()) {
      if (prefilling.empty() && pending.empty()) break;
      logits = torch::Tensor();
      continue;
    }
    if (admitted.size() > 1) {
      if (!admitted.front().defined()) admitted.erase(admitted.begin());
      logits = torch::cat(admitted, 0);
    }

    // One token for every live sequence, each from its own random stream.
    const auto rows = static_cast<int64_t>(live.size());
    std::vector<double> uniforms(live.size());
    for (size_t row = 0; row < live.size(); ++row) {
      const size_t request = live[row].request;
      uniforms[row] = sample_uniform(options.seed, options.first_sample + request, out[request].response.size());
    }
    const torch::Tensor last = full_vocab_logits(logits);
    const torch::Tensor chosen =
        sample_next_tokens(last, options, torch::tensor(uniforms, torch::kFloat64)).to(torch::kInt64);
    const torch::Tensor scores = scaled ? last.to(torch::kFloat) / options.temperature : last.to(torch::kFloat);
    const torch::Tensor log_probs = torch::log_softmax(scores, -1).gather(1, chosen.unsqueeze(1)).squeeze(1);
    // The step's one host sync: the tokens decide which sequences stop.
    const torch::Tensor host = torch::stack({chosen.to(torch::kFloat64), log_probs.to(torch::kFloat64)}).cpu();
    auto view = host.accessor<double, 2>();
    ++stats_.decode_steps;
    stats_.busy_slot_steps += rows;

    std::vector<LiveSequence> going, continuing;
    for (int64_t row = 0; row < rows; ++row) {
      LiveSequence& sequence = live[static_cast<size_t>(row)];
      GeneratedSample& sample = out[sequence.request];
      const auto token = static_cast<int64_t>(view[0][row]);
      sample.response.push_back(static_cast<int32_t>(token));
      sample.log_probs.push_back(static_cast<float>(view[1][row]));
      if (turns) sample.policy_mask.push_back(1);
      if (updates) sample.versions.push_back(updates->version());
      const bool eos = stops_at(options, token);
      const auto total = static_cast<int64_t>(sample.prompt.size() + sample.response.size());
      const int64_t turn_tokens = static_cast<int64_t>(sample.response.size()) - turn_begin[sequence.request];
      if (eos || turn_tokens >= options.max_new_tokens || total >= max_total_tokens_) {
        sample.stopped_at_eos = eos;
        const TurnEnd end = turns ? turns->end_turn(sequence.request, sample, turn_begin[sequence.request],
                                                    max_total_tokens_ - total)
                                  : TurnEnd{};
        if (end.finished) {
          pool_.release(sequence.table);
          continue;
        }
        append_observation(sample, end, max_total_tokens_ - total, model_->config().vocab, updates);
        turn_begin[sequence.request] = static_cast<int64_t>(sample.response.size());
        continuing.push_back(std::move(sequence));  // its turn's last token and the observation to prefill
        continue;
      }
      sequence.next_token = token;
      going.push_back(std::move(sequence));
    }
    // Room for each one's next token, the oldest first; when the pool runs
    // dry the newest live sequence is preempted: its blocks freed, its
    // request back at the front of the queue, resumed later by prefilling
    // its prompt and what it has generated (its random stream is indexed by
    // token, so it samples what it would have).
    size_t keep = going.size();
    for (size_t i = 0; i < keep;) {
      if (pool_.grow(going[i].table, 1)) {
        ++i;
        continue;
      }
      LiveSequence& victim = going[--keep];
      pool_.release(victim.table);
      pending.push_front(victim.request);
      ++stats_.preemptions;
    }
    going.resize(keep);
    // An episode's next turn: what its cache lacks (the turn's last token
    // and the observation) is prefilled like a prompt, its blocks kept;
    // without room it waits at the front like a preempted sequence.
    for (LiveSequence& sequence : continuing) {
      const GeneratedSample& sample = out[sequence.request];
      std::vector<int64_t> input(sample.prompt.begin(), sample.prompt.end());
      input.insert(input.end(), sample.response.begin(), sample.response.end());
      const int64_t cached = sequence.table.tokens;
      if (!pool_.grow(sequence.table, static_cast<int64_t>(input.size()) - cached)) {
        pool_.release(sequence.table);
        pending.push_front(sequence.request);
        ++stats_.preemptions;
        continue;
      }
      prefilling.push_back(Prefilling{std::move(sequence), std::move(input), cached, {}});
    }
    live = std::move(going);
    if (live.empty()) {
      logits = torch::Tensor();
      continue;
    }
    std::vector<int64_t> tokens, past;
    std::vector<size_t> requests;
    std::vector<const KvBlockTable*> tables;
    for (const LiveSequence& sequence : live) {
      tokens.push_back(sequence.next_token);
      past.push_back(sequence.table.tokens - 1);
      requests.push_back(sequence.request);
      tables.push_back(&sequence.table);
    }
    if (graphs) {
      logits = graphs->step(*model_, cache_, tokens, past, tables);
      ++stats_.graph_steps;
    } else {
      logits = model_->forward_paged(torch::tensor(tokens, ids).to(device).unsqueeze(1), past, block_tables(tables),
                                     cache_);
    }
    routes.store(requests, past, out);
  }
}

void Generator::generate_recomputing(const SamplingOptions& options, TurnHandler* turns, WeightUpdates* updates,
                                     std::vector<GeneratedSample>& out) {
  const torch::Device device = model_->options().device;
  const bool scaled = options.temperature > 0 && options.temperature != 1.0;
  RouteRecorder routes(model_, options.record_routes);
  for (size_t request = 0; request < out.size(); ++request) {
    GeneratedSample& sample = out[request];
    std::vector<int64_t> ids(sample.prompt.begin(), sample.prompt.end());
    int64_t turn_begin = 0;
    while (true) {
      // Nothing is cached: new weights apply from the next token on.
      if (updates && updates->waiting()) {
        updates->load();
        ++stats_.weight_loads;
        stats_.interrupted += sample.response.empty() ? 0 : 1;
      }
      const torch::Tensor input = torch::tensor(ids, torch::kInt64).to(device).unsqueeze(0);
      const torch::Tensor logits = model_->forward({input, {}, {}, {}});
      {
        std::vector<int64_t> positions(ids.size());
        std::iota(positions.begin(), positions.end(), 0);
        routes.store(std::vector<size_t>(ids.size(), request), positions, out);
      }
      const torch::Tensor last = full_vocab_logits(logits.select(1, logits.size(1) - 1));
      const double u = sample_uniform(options.seed, options.first_sample + request, sample.response.size());
      const int64_t token =
          sample_next_tokens(last, options, torch::tensor(std::vector<double>{u}, torch::kFloat64)).item<int64_t>();
      const torch::Tensor scores = scaled ? last.to(torch::kFloat) / options.temperature : last.to(torch::kFloat);
      sample.response.push_back(static_cast<int32_t>(token));
      sample.log_probs.push_back(torch::log_softmax(scores, -1)[0][token].item<float>());
      if (turns) sample.policy_mask.push_back(1);
      if (updates) sample.versions.push_back(updates->version());
      ids.push_back(token);
      const bool eos = stops_at(options, token);
      const auto total = static_cast<int64_t>(ids.size());
      if (!eos && static_cast<int64_t>(sample.response.size()) - turn_begin < options.max_new_tokens &&
          total < max_total_tokens_)
        continue;
      sample.stopped_at_eos = eos;
      const TurnEnd end = turns ? turns->end_turn(request, sample, turn_begin, max_total_tokens_ - total) : TurnEnd{};
      if (end.finished) break;
      append_observation(sample, end, max_total_tokens_ - total, model_->config().vocab, updates);
      ids.insert(ids.end(), end.observation.begin(), end.observation.end());
      turn_begin = static_cast<int64_t>(sample.response.size());
    }
  }
}

}  // namespace meshrun
