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

}  // namespace vramfit::detail
