// Tests of src/data/rng.cpp against the published splitmix64 outputs and an
// independent Python implementation (permutation_reference.py prints the
// expected values below), so the data order is the same on every platform.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "meshrun/data/sampler.hpp"

namespace meshrun {
namespace {

TEST_CASE("splitmix64 gives the reference outputs for seed 1234567") {
  SplitMix64 rng(1234567);
  CHECK(rng.next() == 6457827717110365317ULL);
  CHECK(rng.next() == 3203168211198807973ULL);
  CHECK(rng.next() == 9817491932198370423ULL);
  CHECK(rng.next() == 4593380528125082431ULL);
  CHECK(rng.next() == 16408922859458223821ULL);
}

TEST_CASE("epoch permutations match the Python reference") {
  CHECK(epoch_permutation(10, 42, 0) == std::vector<int64_t>{4, 2, 1, 8, 5, 3, 9, 7, 6, 0});
  CHECK(epoch_permutation(10, 42, 1) == std::vector<int64_t>{8, 1, 3, 4, 6, 0, 5, 9, 2, 7});
  CHECK(epoch_permutation(12, 7, 3) == std::vector<int64_t>{2, 10, 4, 6, 1, 9, 3, 11, 8, 0, 7, 5});
  CHECK(epoch_permutation(5, static_cast<uint64_t>(-1), 2) == std::vector<int64_t>{4, 0, 3, 2, 1});
}

TEST_CASE("a permutation holds every index once; seeds and epochs change it") {
  const auto order = epoch_permutation(1000, 3, 5);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(sorted == identity);
  CHECK(order != identity);
  CHECK(epoch_permutation(1000, 3, 6) != order);
  CHECK(epoch_permutation(1000, 4, 5) != order);
  CHECK(epoch_permutation(1000, 3, 5) == order);
  CHECK(epoch_permutation(0, 1, 0).empty());
  CHECK(epoch_permutation(1, 1, 0) == std::vector<int64_t>{0});
  CHECK_THROWS_AS(epoch_permutation(-1, 1, 0), std::logic_error);
}

TEST_CASE("below stays in range and reaches every value") {
  SplitMix64 rng(99);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 7000; ++i) {
    const uint64_t value = rng.below(7);
    REQUIRE(value < 7);
    ++counts[value];
  }
  for (const int count : counts) CHECK(count > 800);  // 1000 expected each
  CHECK(rng.below(1) == 0);
  CHECK_THROWS_AS(rng.below(0), std::logic_error);
}

}  // namespace
}  // namespace meshrun
