// SPDX-License-Identifier: MIT
// What one rank holds of a tensor: its shape after tensor parallelism (Megatron-LM's column, row
// and vocabulary splits), its FSDP shard along dim 0, and the bytes of either in a format. The
// geometry the model states, the activations and inference share.
#pragma once

#include <cstdint>

#include "detail/checked.hpp"
#include "dtype.hpp"
#include "model.hpp"
#include "tensors.hpp"

namespace vramfit::detail {

/// One tensor's local shape on a rank after tensor parallelism: dims [second, last] of a matrix,
/// or a vector of `last` elements (second = 0).
struct local_shape {
  std::int64_t second = 0;
  std::int64_t last = 0;
  [[nodiscard]] constexpr std::int64_t elements() const {
    return second > 0 ? checked_mul(second, last) : last;
  }
};

/// Bytes of one tensor of shape `s` in format `f`.
constexpr bytes stored(const element_format& f, const local_shape& s) {
  return storage_bytes(f, s.second > 0 ? s.second : 1, s.last);
}

/// The shard of dim 0 that the first of `n` ranks holds: ceil(dim0 / n) (FSDP's chunking).
constexpr local_shape dim0_shard(const local_shape& s, std::int64_t n) {
  return s.second > 0 ? local_shape{ceil_div(s.second, n), s.last}
                      : local_shape{0, ceil_div(s.last, n)};
}

/// KV heads a rank holds: split, or replicated when the degree exceeds them (Megatron-LM
/// transformer/attention.py: num_query_groups_per_partition; llm-analysis L886-919).
constexpr std::int64_t local_kv_heads(const model& m, std::int64_t tp) {
  return m.kv_heads >= tp ? m.kv_heads / tp : 1;
}

/// The part of one tensor of `g` that a tensor-parallel rank holds (Megatron-LM
/// tensor_parallel/layers.py: ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding).
constexpr local_shape tp_local_shape(const tensor_group& g, const model& m, std::int64_t tp) {
  local_shape s = g.rank == 2 ? local_shape{g.shape[0], g.shape[1]} : local_shape{0, g.elements()};
  if (tp == 1 || g.split == tp_split::replicated) return s;
  // The output features are dim 0 of a [out, in] weight, dim 1 of GPT-2's [in, out] Conv1D.
  std::int64_t& out = s.second == 0 ? s.last : (g.input_major ? s.last : s.second);
  std::int64_t& in = s.second == 0 ? s.last : (g.input_major ? s.second : s.last);
  switch (g.split) {
    case tp_split::vocab:  // padded to whole rows per rank: the first ranks hold the most
      out = ceil_div(out, tp);
      break;
    case tp_split::output:
      out /= tp;
      break;
    case tp_split::input:
      in /= tp;
      break;
    case tp_split::kv:
      out = out / m.kv_heads * local_kv_heads(m, tp);
      break;
    case tp_split::qkv:
      out = out / (m.heads + 2 * m.kv_heads) * (m.heads / tp + 2 * local_kv_heads(m, tp));
      break;
    case tp_split::replicated:
      break;
  }
  return s;
}

}  // namespace vramfit::detail
