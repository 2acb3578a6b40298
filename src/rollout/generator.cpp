// The generation loop: slots refilled from the pending prompts as their
// sequences stop, one token per live slot per decode step.
#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>

#include "meshrun/dist/dist.hpp"
#include "meshrun/rollout/generation.hpp"

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

// One live sequence: which request, which slot, how many tokens its slot holds.
struct LiveSequence {
  size_t request = 0;
  int64_t slot = 0;
  int64_t cached = 0;  // tokens in the slot (prompt + response so far)
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

Generator::Generator(LlamaModel model, Group* tp, int64_t max_batch, int64_t max_total_tokens)
    : model_(std::move(model)), tp_(tp && tp->size() > 1 ? tp : nullptr), cache_(*model_, max_batch, max_total_tokens) {}

std::vector<GeneratedSample> Generator::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                 const SamplingOptions& options, bool use_cache) {
  if (options.max_new_tokens < 1) throw std::logic_error("max_new_tokens must be at least 1");
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto length = static_cast<int64_t>(prompts[i].size());
    if (length == 0) throw std::logic_error("prompt " + std::to_string(i) + " is empty");
    if (length + options.max_new_tokens > cache_.capacity())
      throw std::logic_error("prompt " + std::to_string(i) + " has " + std::to_string(length) +
                             " tokens; with max_new_tokens = " + std::to_string(options.max_new_tokens) +
                             " it needs " + std::to_string(length + options.max_new_tokens) +
                             " but the engine holds " + std::to_string(cache_.capacity()) + " per sequence");
  }
  torch::NoGradGuard no_grad;
  model_->eval();
  stats_ = GenerationStats{};
  stats_.max_batch = cache_.batch();
  std::vector<GeneratedSample> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) out[i].prompt = prompts[i];
  if (use_cache) generate_continuous(prompts, options, out);
  else generate_recomputing(prompts, options, out);
  return out;
}

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

void Generator::generate_continuous(const std::vector<std::vector<int32_t>>& prompts, const SamplingOptions& options,
                                    std::vector<GeneratedSample>& out) {
  const torch::Device device = model_->options().device;
  const auto ids = torch::TensorOptions().dtype(torch::kInt64);
  const bool scaled = options.temperature > 0 && options.temperature != 1.0;
  std::deque<int64_t> free_slots;
  for (int64_t slot = 0; slot < cache_.batch(); ++slot) free_slots.push_back(slot);
  std::vector<LiveSequence> live;  // in the order of `logits`' rows
  torch::Tensor logits;            // [live, vocab / tp]: each live sequence's next-token logits
  size_t next = 0;
  while (true) {
    // Admit pending prompts into the free slots; a run of identical
    // prompts is prefilled once and copied into the others' slots.
    std::vector<torch::Tensor> admitted{logits};
    while (next < prompts.size() && !free_slots.empty()) {
      size_t end = next + 1;
      while (end < prompts.size() && end - next < free_slots.size() && prompts[end] == prompts[next]) ++end;
      const auto length = static_cast<int64_t>(prompts[next].size());
      const int64_t first = free_slots.front();
      free_slots.pop_front();
      const torch::Tensor prompt = torch::tensor(std::vector<int64_t>(prompts[next].begin(), prompts[next].end()), ids)
                                       .to(device)
                                       .unsqueeze(0);
      const torch::Tensor prefilled = model_->forward_slots(prompt, {first}, {0}, cache_);
      stats_.prefilled_tokens += length;
      live.push_back({next, first, length});
      admitted.push_back(prefilled);
      for (size_t request = next + 1; request < end; ++request) {
        const int64_t slot = free_slots.front();
        free_slots.pop_front();
        cache_.copy_slot(first, slot, length);
        stats_.prefix_shared_tokens += length;
        live.push_back({request, slot, length});
        admitted.push_back(prefilled);
      }
      next = end;
    }
    if (live.empty()) break;
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

    std::vector<LiveSequence> going;
    std::vector<int64_t> kept_rows, tokens;
    for (int64_t row = 0; row < rows; ++row) {
      LiveSequence sequence = live[static_cast<size_t>(row)];
      GeneratedSample& sample = out[sequence.request];
      const auto token = static_cast<int64_t>(view[0][row]);
      sample.response.push_back(static_cast<int32_t>(token));
      sample.log_probs.push_back(static_cast<float>(view[1][row]));
      const bool eos = stops_at(options, token);
      if (eos || static_cast<int64_t>(sample.response.size()) >= options.max_new_tokens) {
        sample.stopped_at_eos = eos;
        free_slots.push_back(sequence.slot);
        continue;
      }
      going.push_back(sequence);
      kept_rows.push_back(row);
      tokens.push_back(token);
    }
    live = std::move(going);
    if (live.empty()) {
      logits = torch::Tensor();
      continue;
    }
    std::vector<int64_t> slots, past;
    for (const LiveSequence& sequence : live) {
      slots.push_back(sequence.slot);
      past.push_back(sequence.cached);
    }
    logits = model_->forward_slots(torch::tensor(tokens, ids).to(device).unsqueeze(1), slots, past, cache_);
    for (LiveSequence& sequence : live) ++sequence.cached;
  }
}

void Generator::generate_recomputing(const std::vector<std::vector<int32_t>>& prompts, const SamplingOptions& options,
                                     std::vector<GeneratedSample>& out) {
  const torch::Device device = model_->options().device;
  const bool scaled = options.temperature > 0 && options.temperature != 1.0;
  for (size_t request = 0; request < prompts.size(); ++request) {
    GeneratedSample& sample = out[request];
    std::vector<int64_t> ids(prompts[request].begin(), prompts[request].end());
    for (int64_t t = 0; t < options.max_new_tokens; ++t) {
      const torch::Tensor input = torch::tensor(ids, torch::kInt64).to(device).unsqueeze(0);
      const torch::Tensor logits = model_->forward({input, {}, {}, {}});
      const torch::Tensor last = full_vocab_logits(logits.select(1, logits.size(1) - 1));
      const double u = sample_uniform(options.seed, options.first_sample + request, static_cast<uint64_t>(t));
      const int64_t token =
          sample_next_tokens(last, options, torch::tensor(std::vector<double>{u}, torch::kFloat64)).item<int64_t>();
      const torch::Tensor scores = scaled ? last.to(torch::kFloat) / options.temperature : last.to(torch::kFloat);
      sample.response.push_back(static_cast<int32_t>(token));
      sample.log_probs.push_back(torch::log_softmax(scores, -1)[0][token].item<float>());
      ids.push_back(token);
      if (stops_at(options, token)) {
        sample.stopped_at_eos = true;
        break;
      }
    }
  }
}

}  // namespace meshrun
