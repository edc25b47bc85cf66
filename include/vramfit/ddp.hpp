// SPDX-License-Identifier: MIT
// PyTorch DistributedDataParallel: the buckets its Reducer copies gradients into
// (docs/sources.md#pytorch-ddp). frameworks.hpp asks it.
#pragma once

#include "model_state_parts.hpp"

namespace vramfit::detail {

/// A bucket copy of every gradient, unsharded past one rank, unless gradient_as_bucket_view.
constexpr void add_ddp_buckets(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  if (l.zero != sharding::none || l.data * l.context < 2 || l.ddp_bucket_view) return;
  add_entry(ledger, "DDP gradient buckets", component::buffers, memory_space::device,
            s.acc.gradients, 0,
            "PyTorch DDP Reducer: bucket copies of all gradients (gradient_as_bucket_view=False)");
}

}  // namespace vramfit::detail
