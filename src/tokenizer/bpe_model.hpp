// Byte-level BPE: merges applied to the bytes of one pre-token, lowest rank
// first (leftmost on ties), exactly like Hugging Face's BPE model, with its
// ignore_merges shortcut (a pre-token that is itself in the vocabulary is
// one id). Results are cached per pre-token.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace meshrun::tokenizer_detail {

class BpeModel {
 public:
  // `vocab`: raw bytes of each token → id (tokens of the byte-level
  // alphabet already converted). `merges`: pairs of raw byte strings, in
  // rank order. Throws TokenizerError naming `origin` when a merge names a
  // token that is not in the vocabulary.
  BpeModel(std::unordered_map<std::string, int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           std::optional<int32_t> unk_id, const std::string& origin);

  // Appends the ids of one pre-token.
  void encode(std::string_view piece, std::vector<int32_t>& ids) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge(std::string_view piece, std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};
  bool ignore_merges_;
  std::optional<int32_t> unk_id_;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace meshrun::tokenizer_detail
