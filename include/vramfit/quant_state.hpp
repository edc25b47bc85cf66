// SPDX-License-Identifier: MIT
// bitsandbytes' QuantState beside a sharded 4-bit weight: the part of a Params4bit that FSDP and
// DeepSpeed ZeRO-3 neither shard, gather nor offload (docs/sources.md#bnb-quant-state).
#pragma once

#include "ledger.hpp"
#include "local_shapes.hpp"

namespace vramfit::detail {

/// bitsandbytes' QuantState of one weight, tensor by tensor (functional.py quantize_4bit and
/// quantize_blockwise, 0.46 and later): the absmax of each block; the 4-bit code (get_4bit_type: 16
/// fp32 values, made for each weight); with double quantization the absmax's mean (offset, a 0-dim
/// fp32 tensor), state2's absmax and state2's code (a copy of the 256-value dynamic map:
/// code.to(A.device, copy=True)). Each is an allocation of its own. None for formats whose scales
/// are not blocks over the flattened tensor (GPTQ's scales are buffers).
struct quant_state_tensors {
  bytes size[5]{};
  int count = 0;

  [[nodiscard]] constexpr bytes total() const {
    bytes sum{};
    for (int i = 0; i < count; ++i) sum += size[i];
    return sum;
  }
};

constexpr quant_state_tensors quant_state_of(const element_format& f, const local_shape& s) {
  quant_state_tensors q{};
  if (f.level1.block == 0 || f.layout != block_layout::flattened) return q;
  auto add = [&q](std::int64_t b) { q.size[q.count++] = bytes{b}; };
  const std::int64_t blocks = ceil_div(s.elements(), f.level1.block);
  add(level_storage(f.level1, blocks));
  if (f.payload_bits == 4) add(16 * 4);  // get_4bit_type's NF4 or FP4 values
  if (f.per_tensor_bits > 0) add(ceil_div(f.per_tensor_bits, 8));
  if (f.level2.block > 0) {
    add(level_storage(f.level2, ceil_div(blocks, f.level2.block)));
    add(256 * 4);  // create_dynamic_map's 256 values
  }
  return q;
}

/// The bytes of a bitsandbytes weight's QuantState: all its tensors (quant_state_of).
constexpr bytes quant_state_bytes(const element_format& f, const local_shape& s) {
  return quant_state_of(f, s).total();
}

/// A frozen weight's bytes in `f`: the packed payload and its QuantState for bitsandbytes' formats
/// (bitsandbytes nn/modules.py Params4bit._quantize: data = the payload, quant_state apart), the
/// storage otherwise.
constexpr bytes frozen_stored(const element_format& f, const local_shape& s) {
  const quant_state_tensors q = quant_state_of(f, s);
  if (q.count == 0) return stored(f, s);
  element_format payload{};
  payload.payload_bits = f.payload_bits;
  return stored(payload, s) + q.total();
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
