#include "bpe_model.hpp"

#include <queue>

#include "byte_level.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"

namespace meshrun::tokenizer_detail {
namespace {

constexpr size_t kCacheCapacity = 200000;
constexpr size_t kLongestCachedPiece = 128;

std::string shown(const std::string& bytes) {
  std::string out;
  for (char c : bytes) {
    const char32_t mapped = byte_level_char(static_cast<unsigned char>(c));
    if (mapped < 0x80) out += static_cast<char>(mapped);
    else out += "\\x" + std::string(1, "0123456789abcdef"[(c >> 4) & 0xF]) + "0123456789abcdef"[c & 0xF];
  }
  return out;
}

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                   std::optional<int32_t> unk_id, const std::string& origin)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges), unk_id_(unk_id) {
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string(1, static_cast<char>(b)));
    byte_ids_[static_cast<size_t>(b)] = it == vocab_.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one.
    const std::string& left = merges[rank].first;
    const std::string& right = merges[rank].second;
    auto find = [&](const std::string& token) {
      auto it = vocab_.find(token);
      if (it == vocab_.end())
        throw TokenizerError(origin + ": merge " + std::to_string(rank) + " (\"" + shown(left) + " " + shown(right) +
                             "\") names \"" + shown(token) + "\", which is not in the vocabulary");
      return it->second;
    };
    const int32_t a = find(left), b = find(right), merged = find(left + right);
    // A pair listed twice keeps its last rank, as in Hugging Face (a map
    // built from the list).
    merges_.insert_or_assign(pair_key(a, b), Merge{static_cast<int32_t>(rank), merged});
  }
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(std::string(piece));
    if (it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() <= kLongestCachedPiece;
  std::string key;
  if (cacheable) {
    key.assign(piece);
    std::lock_guard lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> piece_ids;
  merge(piece, piece_ids);
  ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::move(key), std::move(piece_ids));
  }
}

void BpeModel::merge(std::string_view piece, std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id;
    int prev, next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) {
    int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id < 0) {
      if (!unk_id_) continue;  // no unk token: the byte is dropped, as in Hugging Face
      id = *unk_id_;
    }
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, false});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int pos) {
    const int next = symbols[static_cast<size_t>(pos)].next;
    if (next < 0) return;
    auto it = merges_.find(pair_key(symbols[static_cast<size_t>(pos)].id, symbols[static_cast<size_t>(next)].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int pos = 0; pos + 1 < static_cast<int>(symbols.size()); ++pos) consider(pos);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (const Symbol& s : symbols)
    if (!s.removed) ids.push_back(s.id);
}

}  // namespace meshrun::tokenizer_detail
