#include "train/suggest.h"

#include <algorithm>
#include <limits>

namespace braid::train {

// Optimal string alignment distance: Levenshtein plus the swap of two neighbours, the
// most common typo ("lerning_rate", "max_setps").
size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  const size_t allowed = std::clamp<size_t>(word.size() / 3, 1, 3);
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    size_t d = edit_distance(word, c);
    const size_t shorter = std::min(word.size(), c.size());
    const bool prefix =
        shorter >= 3 && (word.starts_with(c) || std::string_view(c).starts_with(word));
    if (d > allowed && !prefix) continue;
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace braid::train
