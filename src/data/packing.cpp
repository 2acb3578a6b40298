// First-fit-decreasing packing. "First bin with room" is found with a
// max segment tree over the bins' free space, so packing a million samples
// takes O(n log n) rather than O(n × bins).
#include "meshrun/data/packing.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "meshrun/data/dataset.hpp"

namespace meshrun {

namespace {

void check_lengths(std::span<const int> lengths, int capacity) {
  if (capacity < 1) throw std::logic_error("packing capacity must be at least 1, got " + std::to_string(capacity));
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1 || lengths[i] > capacity) {
      throw std::logic_error("sample " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                             " tokens, outside [1, " + std::to_string(capacity) + "]");
    }
  }
}

// Free space of bins 0..n-1 (all start empty, i.e. with `capacity` free);
// finds the leftmost bin with at least `need` free.
class FreeSpaceTree {
 public:
  FreeSpaceTree(std::size_t bins, int capacity) {
    while (leaves_ < bins) leaves_ *= 2;
    tree_.assign(2 * leaves_, 0);
    for (std::size_t i = 0; i < bins; ++i) tree_[leaves_ + i] = capacity;
    for (std::size_t node = leaves_ - 1; node >= 1; --node) tree_[node] = std::max(tree_[2 * node], tree_[2 * node + 1]);
  }

  std::size_t leftmost_with(int need) const {
    std::size_t node = 1;
    while (node < leaves_) node = tree_[2 * node] >= need ? 2 * node : 2 * node + 1;
    return node - leaves_;
  }

  void take(std::size_t bin, int amount) {
    std::size_t node = leaves_ + bin;
    tree_[node] -= amount;
    for (node /= 2; node >= 1; node /= 2) tree_[node] = std::max(tree_[2 * node], tree_[2 * node + 1]);
  }

 private:
  std::size_t leaves_ = 1;
  std::vector<int> tree_;
};

}  // namespace

long long PackedSequences::tokens() const { return std::accumulate(lengths.begin(), lengths.end(), 0LL); }

double PackedSequences::fill_ratio() const {
  if (members.empty() || capacity <= 0) return 0.0;
  return static_cast<double>(tokens()) / (static_cast<double>(members.size()) * capacity);
}

PackedSequences pack_first_fit_decreasing(std::span<const int> lengths, int capacity) {
  check_lengths(lengths, capacity);
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });

  PackedSequences packed;
  packed.capacity = capacity;
  if (lengths.empty()) return packed;
  FreeSpaceTree free_space(lengths.size(), capacity);  // never more bins than samples
  for (const int64_t sample : order) {
    const int length = lengths[static_cast<std::size_t>(sample)];
    const std::size_t bin = free_space.leftmost_with(length);
    free_space.take(bin, length);
    if (bin == packed.members.size()) {
      packed.members.emplace_back();
      packed.lengths.push_back(0);
    }
    packed.members[bin].push_back(sample);
    packed.lengths[bin] += length;
  }
  return packed;
}

PackedSequences one_sample_per_sequence(std::span<const int> lengths, int capacity) {
  check_lengths(lengths, capacity);
  PackedSequences sequences;
  sequences.capacity = capacity;
  sequences.lengths.assign(lengths.begin(), lengths.end());
  sequences.members.reserve(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) sequences.members.push_back({static_cast<int64_t>(i)});
  return sequences;
}

PackedSequences arrange_sequences(const SftDataset& dataset, int max_len, bool packing) {
  std::vector<int> lengths;
  lengths.reserve(dataset.samples.size());
  for (const SftSample& sample : dataset.samples) lengths.push_back(sample.size());
  return packing ? pack_first_fit_decreasing(lengths, max_len) : one_sample_per_sequence(lengths, max_len);
}

}  // namespace meshrun
