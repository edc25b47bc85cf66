// SPDX-License-Identifier: MIT
// "Did you mean": the known names closest to a mistyped one, ranked as Python's
// difflib.get_close_matches ranks them, so that the CLI and the Python module suggest alike.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vramfit::cli {

/// Characters that `a` and `b` share in difflib's matching blocks (Ratcliff/Obershelp): the
/// longest common run, earliest in `a` then in `b`, then the same on each side of it.
inline std::size_t matching_characters(std::string_view a, std::string_view b) {
  if (a.empty() || b.empty()) return 0;
  std::size_t best = 0, best_i = 0, best_j = 0;
  std::vector<std::size_t> run(b.size() + 1, 0), previous(b.size() + 1, 0);
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (std::size_t j = 0; j < b.size(); ++j) {
      run[j + 1] = a[i] == b[j] ? previous[j] + 1 : 0;
      if (run[j + 1] > best) best = run[j + 1], best_i = i + 1 - best, best_j = j + 1 - best;
    }
    std::swap(run, previous);
  }
  if (best == 0) return 0;
  return best + matching_characters(a.substr(0, best_i), b.substr(0, best_j)) +
         matching_characters(a.substr(best_i + best), b.substr(best_j + best));
}

/// SequenceMatcher(None, a, b).ratio(): 2 M / (|a| + |b|).
inline double similarity(std::string_view a, std::string_view b) {
  if (a.empty() && b.empty()) return 1.0;
  return 2.0 * static_cast<double>(matching_characters(a, b)) /
         static_cast<double>(a.size() + b.size());
}

/// `text` with A-Z lowered (names compared in any case; nothing else is changed).
inline std::string lower_case(std::string_view text) {
  std::string lower(text);
  for (char& c : lower)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return lower;
}

/// difflib.get_close_matches(word, known, n=3, cutoff=0.6), in any case: the best first, a tie
/// going to the later name as Python's heapq.nlargest on (score, name) does.
inline std::vector<std::string> close_matches(std::string_view word,
                                              const std::vector<std::string>& known,
                                              std::size_t n = 3, double cutoff = 0.6) {
  const std::string w = lower_case(word.substr(0, 200));  // a quadratic match: bounded
  std::vector<std::pair<double, std::string>> scored;
  for (const std::string& k : known) {
    const double score = similarity(w, lower_case(k));
    if (score >= cutoff) scored.emplace_back(score, k);
  }
  std::sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x > y; });
  std::vector<std::string> best;
  for (std::size_t i = 0; i < scored.size() && i < n; ++i) best.push_back(scored[i].second);
  std::vector<std::string> unique;  // a name known twice is suggested once
  for (const std::string& b : best)
    if (std::find(unique.begin(), unique.end(), b) == unique.end()) unique.push_back(b);
  return unique;
}

/// "; did you mean a or b?" for the close matches of `word`, or "" when there are none.
inline std::string did_you_mean(std::string_view word, const std::vector<std::string>& known) {
  const std::vector<std::string> close = close_matches(word, known);
  std::string text;
  for (std::size_t i = 0; i < close.size(); ++i) text += (i == 0 ? "" : " or ") + close[i];
  return text.empty() ? "" : "; did you mean " + text + "?";
}

}  // namespace vramfit::cli
