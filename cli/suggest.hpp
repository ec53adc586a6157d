// "Did you mean": the known name nearest to a mistyped command or flag, for the
// one-line errors of main.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace headroom::cli {

// Edits from a to b: insertions, deletions, substitutions, and swaps of two
// neighbouring characters ("stpes" -> "steps" is one).
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  // d[i][j]: edits from a's first i characters to b's first j, three rows kept.
  std::vector<std::size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The candidate nearest to `typed`, when it is near enough to be a typo of it: at
// most 2 edits, and fewer than half of typed's characters. The first of equally near
// ones; empty when none is near enough.
inline std::string nearest_name(std::string_view typed, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::min<std::size_t>(3, (typed.size() + 1) / 2);  // must be below this
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(typed, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

// " (did you mean 'X'?)", X quoted with `quote`, for the end of an error's first
// clause; empty when nothing is near (nearest_name's empty answer).
inline std::string did_you_mean(const std::string& nearest, const std::string& quote = "'") {
  return nearest.empty() ? "" : " (did you mean " + quote + nearest + quote + "?)";
}

}  // namespace headroom::cli
