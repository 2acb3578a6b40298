// Packing: arranging tokenised samples into training sequences of at most
// max_len tokens.
//
// Packing runs once over the whole dataset, before sampling, and is a pure
// function of the sample lengths, so every data-parallel rank computes the
// same sequences and the sampler shuffles sequences, not samples. The
// algorithm is first-fit decreasing: samples sorted by length, longest
// first (ties: lower index first), each put into the first sequence with
// room, a new one opened when none has. Within a sequence the samples keep
// the order they were placed in. Without packing, each sample is its own
// sequence, in dataset order.
//
// Invariants: every sample index appears in exactly one sequence; a
// sequence's length (sum of its samples' lengths) is <= capacity.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

namespace meshrun {

struct SftDataset;

struct PackedSequences {
  int capacity = 0;                           // max_len
  std::vector<std::vector<int64_t>> members;  // sample indices of each sequence
  std::vector<int> lengths;                   // tokens of each sequence

  int64_t size() const { return static_cast<int64_t>(members.size()); }
  long long tokens() const;
  // tokens / (sequences × capacity): how little padding packing leaves.
  double fill_ratio() const;
};

// Throws std::logic_error for a length outside [1, capacity] (the dataset
// truncates every sample to the capacity first).
PackedSequences pack_first_fit_decreasing(std::span<const int> lengths, int capacity);
PackedSequences one_sample_per_sequence(std::span<const int> lengths, int capacity);

// The dataset's samples, packed or one per sequence.
PackedSequences arrange_sequences(const SftDataset& dataset, int max_len, bool packing);

}  // namespace meshrun
