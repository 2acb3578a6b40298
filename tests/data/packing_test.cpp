// Tests of src/data/packing.cpp: first-fit decreasing, its invariants, and
// agreement with a plain quadratic first-fit.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "meshrun/data/packing.hpp"
#include "meshrun/data/sampler.hpp"

namespace meshrun {
namespace {

// The textbook O(n × bins) first-fit decreasing, to compare with.
std::vector<std::vector<int64_t>> reference_ffd(const std::vector<int>& lengths, int capacity) {
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<int64_t>> bins;
  std::vector<int> used;
  for (const int64_t sample : order) {
    std::size_t bin = 0;
    while (bin < bins.size() && used[bin] + lengths[sample] > capacity) ++bin;
    if (bin == bins.size()) {
      bins.emplace_back();
      used.push_back(0);
    }
    bins[bin].push_back(sample);
    used[bin] += lengths[sample];
  }
  return bins;
}

TEST_CASE("first-fit decreasing on a small case") {
  const std::vector<int> lengths = {3, 7, 2, 5, 4, 1};
  const PackedSequences packed = pack_first_fit_decreasing(lengths, 8);
  // Sorted 7(#1) 5(#3) 4(#4) 3(#0) 2(#2) 1(#5): 3 joins 5, 2 joins 4, 1 joins 7.
  CHECK(packed.members == std::vector<std::vector<int64_t>>{{1, 5}, {3, 0}, {4, 2}});
  CHECK(packed.lengths == std::vector<int>{8, 8, 6});
  CHECK(packed.capacity == 8);
  CHECK(packed.size() == 3);
  CHECK(packed.tokens() == 22);
  CHECK(packed.fill_ratio() == doctest::Approx(22.0 / 24.0));
}

TEST_CASE("equal lengths keep their dataset order") {
  const std::vector<int> lengths = {2, 2, 2, 2, 2};
  const PackedSequences packed = pack_first_fit_decreasing(lengths, 4);
  CHECK(packed.members == std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4}});
}

TEST_CASE("packing matches the quadratic reference and keeps its invariants on random lengths") {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SplitMix64 rng(seed);
    const int capacity = 16 + static_cast<int>(rng.below(200));
    std::vector<int> lengths(1 + rng.below(400));
    for (int& length : lengths) length = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(capacity)));
    const PackedSequences packed = pack_first_fit_decreasing(lengths, capacity);
    CHECK(packed.members == reference_ffd(lengths, capacity));
    std::vector<int> seen(lengths.size(), 0);
    for (std::size_t s = 0; s < packed.members.size(); ++s) {
      int total = 0;
      for (const int64_t sample : packed.members[s]) {
        ++seen[static_cast<std::size_t>(sample)];
        total += lengths[static_cast<std::size_t>(sample)];
      }
      CHECK(total == packed.lengths[s]);
      CHECK(total <= capacity);
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int count) { return count == 1; }));
  }
}

TEST_CASE("without packing each sample is its own sequence") {
  const std::vector<int> lengths = {3, 1, 2};
  const PackedSequences sequences = one_sample_per_sequence(lengths, 4);
  CHECK(sequences.members == std::vector<std::vector<int64_t>>{{0}, {1}, {2}});
  CHECK(sequences.lengths == lengths);
  CHECK(sequences.fill_ratio() == doctest::Approx(0.5));
}

TEST_CASE("lengths outside [1, capacity] are refused; nothing to pack is fine") {
  const std::vector<int> too_long = {3, 9};
  CHECK_THROWS_WITH_AS(pack_first_fit_decreasing(too_long, 8), "sample 1 has 9 tokens, outside [1, 8]",
                       std::logic_error);
  const std::vector<int> empty_sample = {0};
  CHECK_THROWS_AS(one_sample_per_sequence(empty_sample, 8), std::logic_error);
  CHECK_THROWS_AS(pack_first_fit_decreasing({}, 0), std::logic_error);
  const PackedSequences none = pack_first_fit_decreasing({}, 8);
  CHECK(none.size() == 0);
  CHECK(none.fill_ratio() == 0.0);
}

}  // namespace
}  // namespace meshrun
