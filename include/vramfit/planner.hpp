// SPDX-License-Identifier: MIT
// Planners: the largest micro-batch, the longest sequence, the smallest data-parallel degree (the
// layout search is layout_search.hpp). All constexpr, so a launcher can static_assert on them.
#pragma once

#include <cstdint>

#include "detail/search.hpp"
#include "fit.hpp"

namespace vramfit {

namespace detail {

/// `p` with nothing reserved beyond its tensors' peak. It needs at most what `p` needs: the
/// allocator's reserve beyond that peak is never negative (overheads.hpp), and all else is alike.
constexpr training_plan_value without_reserve(training_plan_value p) {
  p.overheads.reserve = reserve_model::share;
  p.overheads.fragmentation_percent = 0;
  return p;
}

/// The largest n in [1, limit] with which `with(p, n)` fits `device` and n + 1 does not, 0 if none.
/// With allocator replay: below the largest n whose tensors fit, try the largest fitting with the
/// last replay's reserve until one fits, then bisect; the reserve is not monotone in n.
template <class With>
constexpr std::int64_t largest_fitting_plan(const training_plan_value& p, const gpu& device,
                                            std::int64_t limit, With with) {
  replay_scratch scratch;  // the replays' buffers, reused
  auto report = [&](const training_plan_value& q, std::int64_t n) {
    return fit(with(q, n), device, scratch);
  };
  auto fits = [&](std::int64_t n) { return report(p, n).fits(); };
  if (!replays_allocator(p.overheads)) return largest_fitting(1, limit, fits);
  const training_plan_value tensors_only = without_reserve(p);
  auto largest_with = [&](std::int64_t hi, bytes reserve) {
    return largest_fitting(1, hi, [&](std::int64_t m) {
      return report(tensors_only, m).required + reserve <= device.capacity;
    });
  };
  bytes reserve{};
  for (std::int64_t n = largest_with(limit, reserve), failed = n + 1; n >= 1;) {
    const fit_report r = report(p, n);
    if (r.fits()) return bisect_fitting(n, failed - 1, fits);
    failed = n;
    reserve = r.required - report(tensors_only, n).required;
    n = largest_with(n - 1, reserve);
    if (n < 1 && failed > 1) n = 1;  // not even one fits with that reserve: try one
  }
  return 0;
}

}  // namespace detail

/// The largest micro-batch (up to `limit`) with which the plan fits `device`; 0 when none does.
constexpr std::int64_t max_micro_batch(const training_plan_value& p, const gpu& device,
                                       std::int64_t limit = 4096) {
  return detail::largest_fitting_plan(p, device, limit, [](training_plan_value q, std::int64_t b) {
    q.batch.micro_batch = b;
    return q;
  });
}

/// The longest sequence (up to `limit`) with which the plan fits `device`, 0 when none does: a
/// multiple of `step` (0: of what context and sequence parallelism split the sequence by) within
/// a learned position table; a ViT's is its image's tokens, or 0.
constexpr std::int64_t max_sequence(training_plan_value p, const gpu& device,
                                    std::int64_t limit = std::int64_t{1} << 22,
                                    std::int64_t step = 0) {
  if (step < 0)
    detail::rules::batch_shape_must_be_positive("sequence step (or 0: the parallel split)", step);
  const model& m = p.setup.model;
  const layout& l = validated(p.setup.layout, m);
  if (m.family == family::vit) {
    p.batch.sequence = m.max_positions;
    return m.max_positions <= limit && fit(p, device).fits() ? m.max_positions : 0;
  }
  if (m.positions == position_kind::learned && m.max_positions < limit) limit = m.max_positions;
  if (step == 0) step = l.context * (l.sequence ? l.tensor : 1);
  return step * detail::largest_fitting_plan(p, device, limit / step,
                                             [step](training_plan_value q, std::int64_t n) {
                                               q.batch.sequence = n * step;
                                               return q;
                                             });
}

/// The smallest data-parallel degree (1, 2, 4, ... up to `limit`) with which the plan's sharding
/// fits `device`; 0 when none does. Each degree is tried (no monotonicity assumed); one whose
/// tensors alone do not fit is passed over without replaying the allocator.
constexpr std::int64_t min_data_parallel(training_plan_value p, const gpu& device,
                                         std::int64_t limit = 1024) {
  const bool bounded = replays_allocator(p.overheads);
  replay_scratch scratch;  // the replays' buffers, reused
  auto may_fit = [&] { return !bounded || fit(detail::without_reserve(p), device).fits(); };
  for (std::int64_t n = 1; n <= limit; n *= 2) {
    p.setup.layout.data = n;
    if (p.setup.layout.shard_group <= n && may_fit() && fit(p, device, scratch).fits()) return n;
    if (n > limit / 2) break;  // the next degree passes the limit (and may not fit in 64 bits)
  }
  return 0;
}

}  // namespace vramfit
