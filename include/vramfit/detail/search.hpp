// SPDX-License-Identifier: MIT
// Searches over integer ranges, for the solvers and planners.
#pragma once

#include <cstdint>

namespace vramfit::detail {

/// The largest n in [lo, hi] with fits(n), given fits(lo), for a fits that holds up to some n
/// and not after.
template <class Fits>
constexpr std::int64_t bisect_fitting(std::int64_t lo, std::int64_t hi, Fits& fits) {
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// The largest n in [lo, hi] with fits(n), for a fits that holds up to some n and not after;
/// lo - 1 when fits(lo) is false or the range is empty.
template <class Fits>
constexpr std::int64_t largest_fitting(std::int64_t lo, std::int64_t hi, Fits fits) {
  if (hi < lo || !fits(lo)) return lo - 1;
  return bisect_fitting(lo, hi, fits);
}

/// For a costly fits whose answer lies at or just below `hi`: fits(hi), then steps down doubling
/// (hi - 2, hi - 6, ...) to the first n that fits, and bisects above it. An n in [lo, hi] with
/// fits(n) and, below hi, not fits(n + 1), monotone or not; lo - 1 when the steps find none.
template <class Fits>
constexpr std::int64_t largest_fitting_below(std::int64_t lo, std::int64_t hi, Fits fits) {
  if (hi < lo) return lo - 1;
  std::int64_t failed = hi + 1;  // the smallest n known not to fit
  for (std::int64_t step = 1;; step *= 2) {
    const std::int64_t n = failed - lo <= step ? lo : failed - step;
    if (fits(n)) return bisect_fitting(n, failed - 1, fits);
    if (n == lo) return lo - 1;
    failed = n;
  }
}

}  // namespace vramfit::detail
