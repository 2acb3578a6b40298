// The generation loop: prefill the left-padded prompts, then one token per
// step until every sequence has stopped or max_new_tokens is reached.
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "meshrun/dist/dist.hpp"
#include "meshrun/rollout/generation.hpp"

namespace meshrun {

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
  at::Generator random = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  std::vector<GeneratedSample> out;
  out.reserve(prompts.size());
  const std::span<const std::vector<int32_t>> all(prompts);
  for (size_t begin = 0; begin < prompts.size(); begin += static_cast<size_t>(cache_.batch())) {
    const size_t count = std::min(prompts.size() - begin, static_cast<size_t>(cache_.batch()));
    generate_chunk(all.subspan(begin, count), options, use_cache, random, out);
  }
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

void Generator::generate_chunk(std::span<const std::vector<int32_t>> prompts, const SamplingOptions& options,
                               bool use_cache, at::Generator& random, std::vector<GeneratedSample>& out) {
  const torch::Device device = model_->options().device;
  std::vector<GeneratedSample> samples(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) samples[i].prompt = prompts[i];
  SequenceBatch packed = pack_samples(samples, options.pad_id, device);
  const int64_t batch = static_cast<int64_t>(prompts.size());
  torch::Tensor sequences = packed.sequences;
  torch::Tensor mask = packed.attention_mask;

  cache_.clear();
  torch::Tensor logits = use_cache ? model_->forward_cached({sequences, {}, {}, mask}, cache_)
                                   : model_->forward({sequences, {}, {}, mask});
  const auto bool_options = torch::TensorOptions().dtype(torch::kBool).device(device);
  torch::Tensor finished = torch::zeros({batch}, bool_options);
  std::vector<torch::Tensor> tokens, token_log_probs;
  const bool scaled = options.temperature > 0 && options.temperature != 1.0;
  const torch::Tensor stops =
      options.stop_ids.empty() ? torch::Tensor()
                               : torch::tensor(options.stop_ids, torch::TensorOptions().dtype(torch::kInt64)).to(device);
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    const torch::Tensor last = full_vocab_logits(logits.select(1, logits.size(1) - 1));
    const torch::Tensor uniforms = at::rand({batch}, random, torch::TensorOptions().dtype(torch::kFloat64));
    torch::Tensor next = sample_next_tokens(last, options, uniforms).to(torch::kInt64);
    const torch::Tensor alive = finished.logical_not();
    next = torch::where(alive, next, torch::full_like(next, options.pad_id));
    tokens.push_back(torch::stack({next, alive.to(torch::kInt64)}));
    const torch::Tensor scores = (scaled ? last.to(torch::kFloat) / options.temperature : last.to(torch::kFloat));
    token_log_probs.push_back(torch::log_softmax(scores, -1).gather(1, next.unsqueeze(1)).squeeze(1));
    if (stops.defined()) finished = finished.logical_or(at::isin(next, stops).logical_and(alive));
    if (step + 1 == options.max_new_tokens || finished.all().item<bool>()) break;
    mask = torch::cat({mask, alive.to(torch::kInt64).unsqueeze(1)}, 1);
    if (use_cache) {
      logits = model_->forward_cached({next.unsqueeze(1), {}, {}, mask}, cache_);
    } else {
      sequences = torch::cat({sequences, next.unsqueeze(1)}, 1);
      logits = model_->forward({sequences, {}, {}, mask});
    }
  }
  // One transfer for the whole chunk: [steps, 2, batch] (token, real).
  const torch::Tensor steps = torch::stack(tokens).cpu();
  const torch::Tensor step_log_probs = torch::stack(token_log_probs).cpu();
  auto view = steps.accessor<int64_t, 3>();
  auto log_prob_view = step_log_probs.accessor<float, 2>();
  for (int64_t row = 0; row < batch; ++row) {
    GeneratedSample& sample = samples[static_cast<size_t>(row)];
    for (int64_t step = 0; step < steps.size(0); ++step) {
      if (view[step][1][row] == 0) break;
      const int64_t token = view[step][0][row];
      sample.response.push_back(static_cast<int32_t>(token));
      sample.log_probs.push_back(log_prob_view[step][row]);
      if (std::find(options.stop_ids.begin(), options.stop_ids.end(), token) != options.stop_ids.end()) {
        sample.stopped_at_eos = true;
        break;
      }
    }
    out.push_back(std::move(sample));
  }
}

}  // namespace meshrun
