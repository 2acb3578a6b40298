#include "meshrun/recipe/suggest.hpp"

#include <algorithm>
#include <cctype>

namespace meshrun {

int edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      int cost = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                         std::tolower(static_cast<unsigned char>(b[j - 1]))
                     ? 0
                     : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates) {
  // Allow one edit per three characters, at least one and at most three:
  // "nodse" -> "nodes", but "tp" must not become "sp" (words shorter than
  // three characters only match up to case).
  const int allowed = word.size() < 3 ? 0 : std::clamp(static_cast<int>(word.size()) / 3, 1, 3);
  std::optional<std::string> best;
  int best_distance = allowed + 1;
  for (const auto& candidate : candidates) {
    int distance = edit_distance(word, candidate);
    if (distance < best_distance && distance < static_cast<int>(std::max(word.size(), candidate.size()))) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

}  // namespace meshrun
