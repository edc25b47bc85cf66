// SPDX-License-Identifier: MIT
// bitsandbytes' QuantState beside a sharded 4-bit weight: the part of a Params4bit that FSDP and
// DeepSpeed ZeRO-3 neither shard, gather nor offload (docs/sources.md#bnb-quant-state).
#pragma once

#include "ledger.hpp"
#include "local_shapes.hpp"

namespace vramfit::detail {

/// The bytes of a bitsandbytes 4-bit weight's QuantState (absmax, the nested absmax, the offset):
/// all of `f`'s storage but the packed payload, for formats whose blocks run over the flattened
/// tensor (bitsandbytes'); none for unscaled or per-row formats (GPTQ's scales are buffers).
constexpr bytes quant_state_bytes(const element_format& f, const local_shape& s) {
  if (f.level1.block == 0 || f.layout != block_layout::flattened) return {};
  // bitsandbytes nn/modules.py Params4bit._quantize: data = the packed payload, quant_state apart.
  element_format payload{};
  payload.payload_bits = f.payload_bits;
  return stored(f, s) - stored(payload, s);
}

/// The QuantStates of the frozen 4-bit weights a rank holds whole when the weights are sharded:
/// an attribute of each Params4bit (and of its Linear4bit), no parameter, so FSDP's flat
/// parameters and ZeRO-3's partitions take the packed payload alone, and CPU offload moves that
/// alone; each rank keeps every QuantState on its device for dequantize_4bit.
constexpr void add_quant_states(memory_ledger& ledger, bytes whole, std::int64_t tensors) {
  add_entry(ledger, "bitsandbytes QuantStates (absmax), whole on every rank", component::weights,
            memory_space::device, whole, tensors,
            "bitsandbytes nn/modules.py Params4bit.quant_state, Linear4bit.quant_state, "
            "fix_4bit_weight_quant_state_from_module: not parameters, so not sharded",
            lifetime::persistent);
}

}  // namespace vramfit::detail
