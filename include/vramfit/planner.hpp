// SPDX-License-Identifier: MIT
// Planners: the largest micro-batch, the longest sequence, the smallest data-parallel degree, and
// a search over layouts that returns the cheapest configuration that fits, with why the others
// were rejected. All constexpr, so a launcher can static_assert on them.
#pragma once

#include <cstdint>

#include "detail/search.hpp"
#include "detail/static_vector.hpp"
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

/// The longest sequence (up to `limit`, a multiple of `step`) with which the plan fits `g`; 0
/// when none does.
constexpr std::int64_t max_sequence(training_plan_value p, const gpu& g,
                                    std::int64_t limit = std::int64_t{1} << 22,
                                    std::int64_t step = 128) {
  if (step <= 0) detail::rules::batch_shape_must_be_positive("sequence step", step);
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

/// Why a candidate layout was not chosen.
enum class rejection : unsigned char {
  chosen,
  does_not_fit,
  breaks_a_rule,  ///< e.g. the TP degree does not divide the heads
  costlier,       ///< comes after the chosen one in cost order (not evaluated)
};

/// One layout the search tried.
struct candidate {
  vramfit::layout layout{};
  recompute_kind recompute = recompute_kind::none;
  bytes required{};
  rejection verdict = rejection::does_not_fit;
  const char* rule = "";  ///< the rule it breaks, for rejection::breaks_a_rule
};

/// What the search considers: the GPUs it may use and the knobs it may turn.
struct search_space {
  std::int64_t gpus = 8;          ///< the world size: every candidate uses all of them
  std::int64_t max_tensor = 8;    ///< tensor-parallel degrees 1, 2, 4, ... up to this
  std::int64_t max_pipeline = 4;  ///< pipeline degrees 1, 2, 4, ... up to this
  bool try_offload = true;        ///< ZeRO-Offload of the optimizer as a last resort
  shard_implementation sharding = shard_implementation::deepspeed;  ///< ZeRO's or FSDP's
};

/// The candidates tried, in the order of their cost, and the index of the chosen one (-1: none
/// fits). Cost, from cheapest, a policy rather than a measurement: no offload before offload;
/// less model parallelism (TP x PP, with less TP first) before more; no recompute before
/// selective before full; a lower ZeRO stage before a higher one.
struct search_result {
  /// The first candidates in cost order, as many as a constant expression keeps cheaply; the
  /// chosen one is always among them (it takes the last place when the list is full).
  static constexpr std::size_t listed = 160;
  detail::static_vector<candidate, listed> candidates{};
  std::int64_t unlisted = 0;  ///< candidates tried but not listed
  std::int64_t chosen = -1;

  constexpr void add(const candidate& c) {
    if (candidates.size() < listed) {
      candidates.push_back(c);
    } else {
      ++unlisted;
      if (c.verdict != rejection::chosen) return;
      candidates[candidates.size() - 1] = c;
    }
    if (c.verdict == rejection::chosen) chosen = static_cast<std::int64_t>(candidates.size()) - 1;
  }
};

/// Searches layouts of `space.gpus` GPUs for `plan` (its model, precision, optimizer, fine-tuning
/// and batch) on `g`, cheapest first; the first that fits is chosen.
constexpr search_result search_layouts(const training_plan_value& plan, const gpu& g,
                                       const search_space& space = {}) {
  search_result r{};
  const model& m = plan.setup.model;
  const recompute_kind recomputes[] = {recompute_kind::none, recompute_kind::selective,
                                       recompute_kind::full};
  for (const bool offloaded : {false, true}) {
    if (offloaded && !space.try_offload) continue;
    // Powers of two 2^k up to the GPUs: at most 63 of them, none past 2^62.
    for (int k = 0; k < 63 && (std::int64_t{1} << k) <= space.gpus; ++k) {
      const std::int64_t model_parallel = std::int64_t{1} << k;
      for (int j = 0; j <= k && (std::int64_t{1} << j) <= space.max_tensor; ++j) {
        const std::int64_t tp = std::int64_t{1} << j;
        const std::int64_t pp = model_parallel / tp;
        if (pp > space.max_pipeline || space.gpus % model_parallel != 0) continue;
        for (const recompute_kind rc : recomputes) {
          for (int stage = 0; stage <= 3; ++stage) {
            training_plan_value p = plan;
            layout& l = p.setup.layout;
            l = layout{};
            l.data = space.gpus / model_parallel;
            l.tensor = tp;
            l.pipeline = pp;
            l.zero = static_cast<sharding>(stage);
            l.implementation = space.sharding;
            if (l.data == 1 && stage > 0) continue;  // nothing to shard over
            if (offloaded) {
              if (stage == 0) continue;  // ZeRO-Offload needs a ZeRO stage
              l.optimizer_offload = offload_target::cpu;
            }
            p.batch.recompute = rc;
            candidate c{l, rc, bytes{}, rejection::breaks_a_rule};
            if (const layout_violation v = check_layout(l, m); v.rule != layout_rule::none) {
              c.rule = to_string(v.rule);
            } else {
              // After the choice, a candidate is costlier whether it fits or not: not evaluated
              // (required stays 0), which keeps compile-time searches short.
              if (r.chosen >= 0) {
                c.verdict = rejection::costlier;
              } else {
                c.required = fit(p, g).required;
                c.verdict = c.required > g.capacity ? rejection::does_not_fit : rejection::chosen;
              }
            }
            r.add(c);
          }
        }
      }
    }
  }
  return r;
}

}  // namespace vramfit
