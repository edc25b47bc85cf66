// SPDX-License-Identifier: MIT
// Planners: the largest micro-batch, the longest sequence, the smallest data-parallel degree (the
// layout search is layout_search.hpp). All constexpr, so a launcher can static_assert on them.
#pragma once

#include <cstdint>

#include "detail/search.hpp"
#include "fit.hpp"

namespace vramfit {

/// The largest micro-batch (up to `limit`) with which the plan fits `g`; 0 when none does.
constexpr std::int64_t max_micro_batch(training_plan_value p, const gpu& g,
                                       std::int64_t limit = 4096) {
  return detail::largest_fitting(1, limit, [&](std::int64_t b) {
    p.batch.micro_batch = b;
    return fit(p, g).fits();
  });
}

/// The longest sequence (up to `limit`) with which the plan fits `g`, 0 when none does: a
/// multiple of `step` (0: of what context and sequence parallelism split the sequence by) within
/// a learned position table; a ViT's is its image's tokens, or 0.
constexpr std::int64_t max_sequence(training_plan_value p, const gpu& g,
                                    std::int64_t limit = std::int64_t{1} << 22,
                                    std::int64_t step = 0) {
  if (step < 0)
    detail::rules::batch_shape_must_be_positive("sequence step (or 0: the parallel split)", step);
  const model& m = p.setup.model;
  const layout& l = validated(p.setup.layout, m);
  if (m.family == family::vit) {
    p.batch.sequence = m.max_positions;
    return m.max_positions <= limit && fit(p, g).fits() ? m.max_positions : 0;
  }
  if (m.positions == position_kind::learned && m.max_positions < limit) limit = m.max_positions;
  if (step == 0) step = l.context * (l.sequence ? l.tensor : 1);
  return step * detail::largest_fitting(1, limit / step, [&](std::int64_t n) {
           p.batch.sequence = n * step;
           return fit(p, g).fits();
         });
}

/// The smallest data-parallel degree (1, 2, 4, ... up to `limit`) with which the plan's sharding
/// fits `g`; 0 when none does.
constexpr std::int64_t min_data_parallel(training_plan_value p, const gpu& g,
                                         std::int64_t limit = 1024) {
  for (std::int64_t n = 1; n <= limit; n *= 2) {
    p.setup.layout.data = n;
    if (p.setup.layout.shard_group <= n && fit(p, g).fits()) return n;
    if (n > limit / 2) break;  // the next degree passes the limit (and may not fit in 64 bits)
  }
  return 0;
}

}  // namespace vramfit
