// Next-token sampling by inverse CDF: one uniform number per row picks the
// token where the cumulative probability first exceeds it. Drawing exactly
// one number per row per step, whatever the options, keeps runs with and
// without the KV cache (and across tp ranks) on the same random stream.
//
// top-k and top-p keep every token whose probability reaches a threshold θ,
// the larger of the two cuts': top-k's is the k-th largest probability,
// top-p's the largest value v whose tokens at or above it carry at least
// top_p of the mass (so the first token always stays, and a token is cut
// once the mass of the more probable ones reaches top_p). Tokens tied at θ
// all stay, so the set never depends on how a sort orders equal values.
// The CDF then runs over the kept tokens in id order; no order of them is
// more right than another, and id order needs no sort.
//
// On the CPU (fp32) θ comes from a radix select over the probabilities'
// bits, one row per thread. Hand-written because LibTorch's only way to the
// cut is a full sort of every row, which at a 4k-128k vocabulary cost a
// decode step more than the model's forward (a 64 × 4096 sort is ~15× the
// softmax on this machine); the select reads a row about three times.
// Elsewhere (CUDA, where sorting is cheap, or other dtypes) the same rule
// runs as tensor operations; both are tested equal.
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "meshrun/rollout/generation.hpp"
#include "sampling_detail.hpp"

namespace meshrun {

namespace {

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float float_of(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Buckets per pass of the select: the walk down them is a chain of double
// additions, so fewer buckets walk faster; more make a pass's bucket
// narrower. 1024 takes a 32-bit range to one bit pattern in four passes.
constexpr uint32_t kBuckets = 1024;

// The largest value v of the candidates (probabilities, ≥ 0: their bit
// patterns order like their values) whose values at or above it reach
// `wanted` in total, by mass (by_mass) or by count; −1 when all of them
// fall short (keep everything). Each pass spreads the candidates' bit
// patterns, offset by the smallest, over at most kBuckets buckets, sums
// each bucket, walks the buckets down until the total reaches `wanted` and
// keeps only that bucket's candidates; a bucket of one bit pattern is the
// answer. Spreading by the candidates' own range, not by fixed digits of
// the bits, matters because a softmax row's values mostly share their high
// bits: fixed digits put them all in one bucket, and every addition then
// waits for the one before it. `candidates` is scratch, overwritten.
float radix_threshold(std::vector<float>& candidates, double wanted, bool by_mass) {
  std::array<double, kBuckets> weight;
  std::array<int32_t, kBuckets> count;
  double above = 0;  // what the values above the current bucket carry
  // Each pass narrows the range of bit patterns by kBuckets (10 bits) or
  // ends: 32 bits take at most four.
  for (int pass = 0; pass < 4 && !candidates.empty(); ++pass) {
    uint32_t lowest_bits = bits_of(candidates.front()), highest_bits = lowest_bits;
    for (const float value : candidates) {
      lowest_bits = std::min(lowest_bits, bits_of(value));
      highest_bits = std::max(highest_bits, bits_of(value));
    }
    int shift = 0;
    while (((highest_bits - lowest_bits) >> shift) >= kBuckets) ++shift;
    const uint32_t top = (highest_bits - lowest_bits) >> shift;
    std::fill_n(weight.begin(), top + 1, 0.0);
    std::fill_n(count.begin(), top + 1, 0);
    for (const float value : candidates) {
      const uint32_t bucket = (bits_of(value) - lowest_bits) >> shift;
      weight[bucket] += by_mass ? static_cast<double>(value) : 1.0;
      ++count[bucket];
    }
    int64_t chosen = -1, lowest = -1;
    for (int64_t bucket = top; bucket >= 0; --bucket) {
      if (count[static_cast<size_t>(bucket)] == 0) continue;
      lowest = bucket;
      if (above + weight[static_cast<size_t>(bucket)] >= wanted) {
        chosen = bucket;
        break;
      }
      above += weight[static_cast<size_t>(bucket)];
    }
    if (chosen < 0) {
      // The first pass: the whole row falls short. A later one: its
      // bucket's parts summed to a hair less than the bucket did in the
      // pass before; the threshold is then the bucket's smallest value.
      if (pass == 0 || lowest < 0) return -1.0f;
      chosen = lowest;
    }
    if (shift == 0) return float_of(lowest_bits + static_cast<uint32_t>(chosen));
    size_t kept = 0;
    for (const float value : candidates)
      if (((bits_of(value) - lowest_bits) >> shift) == static_cast<uint32_t>(chosen)) candidates[kept++] = value;
    candidates.resize(kept);
  }
  return candidates.empty() ? -1.0f : candidates.front();
}

// Tokens per block of the inverse CDF's first walk.
constexpr int64_t kCdfBlock = 64;

// The token for one row of probabilities p[0..n) and uniform u. The CDF is
// walked a block of kCdfBlock tokens at a time first (each block's kept
// mass summed with four accumulators, which run side by side where one
// running sum waits on every addition), then token by token inside the
// block where it crosses u × total.
int64_t sample_row(const float* p, int64_t n, double u, const SamplingOptions& options, std::vector<float>& scratch,
                   std::vector<double>& blocks) {
  float threshold = -1.0f;
  if (options.top_k > 0 && options.top_k < n) {
    scratch.assign(p, p + n);
    threshold = radix_threshold(scratch, static_cast<double>(options.top_k), false);
  }
  if (options.top_p < 1.0) {
    scratch.assign(p, p + n);
    threshold = std::max(threshold, radix_threshold(scratch, options.top_p, true));
  }
  const int64_t block_count = (n + kCdfBlock - 1) / kCdfBlock;
  blocks.resize(static_cast<size_t>(block_count));
  double total = 0;
  int64_t last = -1;
  for (int64_t b = 0; b < block_count; ++b) {
    const int64_t begin = b * kCdfBlock, end = std::min(n, begin + kCdfBlock);
    double lanes[4] = {0, 0, 0, 0};
    int64_t i = begin;
    for (; i + 4 <= end; i += 4)
      for (int lane = 0; lane < 4; ++lane) lanes[lane] += p[i + lane] >= threshold ? static_cast<double>(p[i + lane]) : 0.0;
    for (; i < end; ++i) lanes[0] += p[i] >= threshold ? static_cast<double>(p[i]) : 0.0;
    blocks[static_cast<size_t>(b)] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    total += blocks[static_cast<size_t>(b)];
    if (blocks[static_cast<size_t>(b)] > 0)
      for (int64_t j = end - 1; j >= begin; --j)
        if (p[j] >= threshold && p[j] > 0) {  // never a token of no probability
          last = j;
          break;
        }
  }
  if (last < 0) return n - 1;  // NaN probabilities: nothing compares; any id in range
  const double target = u * total;
  double cumulative = 0;
  int64_t b = 0;
  while (b < block_count && cumulative + blocks[static_cast<size_t>(b)] <= target) cumulative += blocks[static_cast<size_t>(b++)];
  if (b == block_count) return last;  // rounding left the target at the kept mass
  // Rounding (the block sums' order against the token walk's) can leave the
  // crossing a block later than the sums said: the walk goes on past it.
  for (int64_t i = b * kCdfBlock; i < last; ++i)
    if (p[i] >= threshold) {
      cumulative += p[i];
      if (cumulative > target) return i;
    }
  return last;
}

torch::Tensor sample_on_host(const torch::Tensor& probabilities, const SamplingOptions& options,
                             const torch::Tensor& uniforms) {
  RECORD_FUNCTION("meshrun::sample_on_host", std::vector<c10::IValue>());
  const torch::Tensor p = probabilities.contiguous();
  const torch::Tensor u = uniforms.to(torch::kFloat64).contiguous();
  const int64_t rows = p.size(0), n = p.size(1);
  torch::Tensor tokens = torch::empty({rows}, torch::kInt64);
  const float* pp = p.const_data_ptr<float>();
  const double* up = u.const_data_ptr<double>();
  int64_t* tp = tokens.data_ptr<int64_t>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch;
    std::vector<double> blocks;
    for (int64_t row = begin; row < end; ++row) tp[row] = sample_row(pp + row * n, n, up[row], options, scratch, blocks);
  });
  return tokens;
}

}  // namespace

namespace sampling_detail {

torch::Tensor sample_with_tensors(const torch::Tensor& probabilities, const SamplingOptions& options,
                                  const torch::Tensor& uniforms) {
  const int64_t n = probabilities.size(1);
  const torch::Tensor u = uniforms.to(probabilities.device(), torch::kFloat64);
  const bool cut = (options.top_k > 0 && options.top_k < n) || options.top_p < 1.0;
  torch::Tensor kept = probabilities;
  if (cut) {
    const torch::Tensor sorted = std::get<0>(probabilities.sort(-1, /*descending=*/true));
    torch::Tensor threshold = torch::full({probabilities.size(0), 1}, -1.0, probabilities.options());
    if (options.top_k > 0 && options.top_k < n) threshold = sorted.narrow(1, options.top_k - 1, 1);
    if (options.top_p < 1.0) {
      // The first sorted value whose running mass reaches top_p (the last
      // when none does); ties with it come after it in any sort order, so
      // taking its value keeps them all.
      const torch::Tensor rank = sorted.to(torch::kFloat64).cumsum(-1).lt(options.top_p).sum(-1, true).clamp_max(n - 1);
      threshold = torch::maximum(threshold, sorted.gather(1, rank));
    }
    kept = probabilities * probabilities.ge(threshold);
  }
  const torch::Tensor cdf = kept.to(torch::kFloat64).cumsum(-1);
  const torch::Tensor choice = cdf.le(u.unsqueeze(1) * cdf.narrow(1, n - 1, 1)).sum(-1);
  // Rounding can leave the target at the last kept token's cumulative mass.
  const torch::Tensor last = (kept.gt(0) * torch::arange(n, choice.options())).amax(-1);
  return torch::minimum(choice, last);
}

}  // namespace sampling_detail

torch::Tensor sample_next_tokens(const torch::Tensor& logits, const SamplingOptions& options,
                                 const torch::Tensor& uniforms) {
  if (logits.dim() != 2) throw std::logic_error("sampling needs logits [batch, vocab]");
  if (uniforms.dim() != 1 || uniforms.size(0) != logits.size(0))
    throw std::logic_error("sampling needs one uniform number per row: " + std::to_string(uniforms.numel()) +
                           " for " + std::to_string(logits.size(0)) + " rows");
  torch::Tensor scores = logits.to(torch::kFloat);
  const int64_t vocab = scores.size(1);
  if (options.vocab_limit > 0 && options.vocab_limit < vocab)
    scores = scores.narrow(1, 0, options.vocab_limit);
  if (options.temperature <= 0) return scores.argmax(-1);
  const torch::Tensor probabilities =
      torch::softmax(options.temperature == 1.0 ? scores : scores / options.temperature, -1);
  if (probabilities.device().is_cpu()) return sample_on_host(probabilities, options, uniforms);
  return sampling_detail::sample_with_tensors(probabilities, options, uniforms);
}

}  // namespace meshrun
