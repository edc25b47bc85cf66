// SPDX-License-Identifier: MIT
// The plan a user trains for a layout search's candidate, built from the candidate's fields alone
// (not with the search's own code), so that tests can check the figures the search reports.
#pragma once

#include <vramfit/layout_search.hpp>

namespace vramfit::testing {
inline training_plan_value trained_as(training_plan_value base, const plan_candidate& c) {
  base.setup.layout = c.layout;
  base.batch.recompute = c.recompute;
  base.batch.recompute_layers = c.recompute == recompute_kind::full ? c.recompute_layers : -1;
  base.batch.micro_batch = c.micro_batch;
  base.batch.micro_batches = c.micro_batches;
  base.batch.virtual_stages = c.virtual_stages;
  if (c.virtual_stages > 1) base.batch.schedule = pipeline_schedule::interleaved;
  return base;
}
}  // namespace vramfit::testing
