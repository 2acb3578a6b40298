// splitmix64 and the per-epoch permutation.
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "meshrun/data/sampler.hpp"

namespace meshrun {

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::below(uint64_t bound) {
  if (bound == 0) throw std::logic_error("SplitMix64::below needs a bound of at least 1");
  // Values below `threshold` would make some residues more likely.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t value = next();
    if (value >= threshold) return value % bound;
  }
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  if (n < 0) throw std::logic_error("epoch_permutation: negative size " + std::to_string(n));
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  // The stream for (seed, epoch): the seed's and the epoch's mixed values
  // combined, so neighbouring seeds or epochs give unrelated streams.
  SplitMix64 seed_mix(seed);
  SplitMix64 epoch_mix(static_cast<uint64_t>(epoch) ^ 0xD1B54A32D192ED03ULL);
  SplitMix64 rng(seed_mix.next() ^ epoch_mix.next());
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

}  // namespace meshrun
