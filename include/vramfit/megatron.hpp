// SPDX-License-Identifier: MIT
// Megatron-LM's distributed optimizer: full-size main gradients, and fp32 copies of 16-bit ones
// sharded like the optimizer states (docs/sources.md#megatron-optimizer). frameworks.hpp asks it.
#pragma once

#include "model_state_parts.hpp"

namespace vramfit::detail {

/// The fp32 gradients the optimizer steps on, copied from 16-bit ones: one per rank, or its
/// partition under the distributed optimizer (dist_optimizer.md: fp16 20 B, 4 + 16/d).
constexpr void add_megatron_fp32_gradients(memory_ledger& ledger, const stage_model_states& s) {
  const precision& p = s.p();
  if (!p.has_master() || p.gradients.payload_bits >= 32) return;
  const bytes fp32_grads{checked_mul(s.acc.trained_elements, 4)};
  add_entry(ledger, s.shard_optimizer ? "fp32 gradient partition" : "fp32 gradient copy",
            component::gradients, s.optimizer_space,
            s.shard_optimizer ? divide_up(fp32_grads, s.n) : fp32_grads, 1,
            "Megatron-LM dist_optimizer.md: fp16 20 B, 4 + 16/d");
}

/// The gradients: full-size main gradients on every rank, and their fp32 copies.
constexpr void add_megatron_gradients(memory_ledger& ledger, const stage_model_states& s) {
  const bool partitioned = false;  // the distributed optimizer shards no main gradients
  add_autograd_gradients(ledger, s, partitioned,
                         "Megatron-LM dist_optimizer.md: full fp32 main grads");
  add_megatron_fp32_gradients(ledger, s);
}

}  // namespace vramfit::detail
