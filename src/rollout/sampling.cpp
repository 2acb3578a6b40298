// Next-token sampling by inverse CDF: one uniform number per row picks the
// token where the cumulative probability first exceeds it. Drawing exactly
// one number per row per step, whatever the options, keeps runs with and
// without the KV cache (and across tp ranks) on the same random stream.
#include <limits>
#include <stdexcept>
#include <string>

#include "meshrun/rollout/generation.hpp"

namespace meshrun {

torch::Tensor sample_next_tokens(const torch::Tensor& logits, const SamplingOptions& options,
                                 const torch::Tensor& uniforms) {
  if (logits.dim() != 2) throw std::logic_error("sampling needs logits [batch, vocab]");
  torch::Tensor scores = logits.to(torch::kFloat);
  const int64_t vocab = scores.size(1);
  if (options.vocab_limit > 0 && options.vocab_limit < vocab)
    scores = scores.narrow(1, 0, options.vocab_limit);
  if (options.temperature <= 0) return scores.argmax(-1);

  const torch::Tensor probabilities = torch::softmax(scores / options.temperature, -1);
  const torch::Tensor u = uniforms.to(probabilities.device(), torch::kFloat).unsqueeze(1);
  const bool cut = options.top_k > 0 || options.top_p < 1.0;
  if (!cut) {
    const torch::Tensor cdf = probabilities.cumsum(-1);
    const torch::Tensor index = (cdf <= u * cdf.narrow(1, cdf.size(1) - 1, 1)).sum(-1);
    return index.clamp_max(probabilities.size(1) - 1);
  }
  auto [sorted, order] = probabilities.sort(-1, /*descending=*/true);
  if (options.top_k > 0 && options.top_k < sorted.size(1)) sorted.narrow(1, options.top_k, sorted.size(1) - options.top_k).zero_();
  if (options.top_p < 1.0) {
    // Keep a token while the mass before it is below top_p: the first token
    // always stays, and the set stops at the first that reaches top_p.
    const torch::Tensor before = sorted.cumsum(-1) - sorted;
    sorted = sorted * before.lt(options.top_p);
  }
  const torch::Tensor cdf = sorted.cumsum(-1);
  const torch::Tensor kept = sorted.gt(0).sum(-1, /*keepdim=*/true);
  const torch::Tensor choice = torch::minimum((cdf <= u * cdf.narrow(1, cdf.size(1) - 1, 1)).sum(-1, true), kept - 1);
  return order.gather(1, choice).squeeze(1);
}

}  // namespace meshrun
