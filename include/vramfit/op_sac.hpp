// SPDX-License-Identifier: MIT
// Op-level selective activation checkpointing, torchtitan's "selective op" policy: each block runs
// under a non-reentrant checkpoint, so autograd keeps nothing of it but its input; a policy caches
// the outputs of chosen operators for backward, and the rest of the block is recomputed.
#pragma once

#include <cstdint>
#include <string_view>

#include "training.hpp"

namespace vramfit {

/// What the op-level policy caches of one layer: the matmul outputs it keeps and the matmul work
/// the recompute repeats.
struct op_sac_layer {
  /// Bytes cached per micro-batch on one rank: odd matmul outputs, attention outputs and, with
  /// sequence parallelism, reduce-scatter outputs.
  bytes cached{};
  /// Weight elements a token meets (the whole layer's, not a rank's) in the matmuls whose output
  /// is cached and in all matmuls of the layer (a routed expert's times top_k): the recompute
  /// repeats the difference.
  std::int64_t cached_weights = 0, all_weights = 0;
};

namespace detail {
constexpr bool ends_with(const tensor_name& name, std::string_view suffix) {
  const std::size_t n = name.size();
  if (n < suffix.size()) return false;
  for (std::size_t i = 0; i < suffix.size(); ++i)
    if (name[n - suffix.size() + i] != suffix[i]) return false;
  return true;
}

/// Whether group `i` of the ledger is a linear weight followed by its bias (add_linear's order).
constexpr bool has_bias(const tensor_ledger& ledger, std::size_t i) {
  if (i + 1 >= ledger.size()) return false;
  const tensor_group& w = ledger[i];
  const tensor_group& b = ledger[i + 1];
  return b.rank == 1 && b.kind == w.kind && b.first_layer == w.first_layer &&
         b.layer_count == w.layer_count && ends_with(b.name, ".bias");
}
}  // namespace detail

/// The op-level policy's cache for `layer`, `tokens` tokens per micro-batch on a rank (before
/// sequence parallelism) in `bits`-bit activations: the 1st, 3rd, ... aten.mm, SDPA, reduce_scatter
/// (torchtitan parallelize.py _save_list; what it skips: docs/sources.md#torchtitan-op-sac).
constexpr op_sac_layer op_sac_cache(const model& m, const layout& l, std::int64_t layer,
                                    std::int64_t tokens, std::int64_t bits, bool flash) {
  using detail::checked_add, detail::checked_mul;
  const tensor_ledger ledger = tensors(m);
  op_sac_layer r{};
  std::int64_t matmuls = 0;
  auto cache = [&](std::int64_t elements) {
    r.cached += bytes_for_bits(checked_mul(elements, bits));
  };
  for (std::size_t i = 0; i < ledger.size(); ++i) {
    const tensor_group& g = ledger[i];
    if (!g.in_layer(layer) || g.rank != 2 || g.role != tensor_role::parameter) continue;
    if (g.kind != tensor_kind::attention && g.kind != tensor_kind::mlp &&
        g.kind != tensor_kind::expert && g.kind != tensor_kind::router)
      continue;
    const std::int64_t weights =
        g.kind == tensor_kind::expert
            ? checked_mul(g.elements(), m.moe.top_k)  // per expert; top_k of them per token
            : g.elements();
    r.all_weights = checked_add(r.all_weights, weights);
    // Sequence parallelism: a row-parallel linear's partial sums are reduce-scattered, and the
    // policy caches the scattered output.
    if (l.sequence && g.split == tp_split::input && g.kind != tensor_kind::expert)
      cache(checked_mul(tokens / l.tensor, g.shape[0]));
    const bool mm = (g.kind == tensor_kind::attention || g.kind == tensor_kind::mlp) &&
                    !g.input_major && !detail::has_bias(ledger, i);
    if (!mm || ++matmuls % 2 == 0) continue;
    r.cached_weights = checked_add(r.cached_weights, weights);
    cache(checked_mul(tokens, detail::tp_local_shape(g, m, l.tensor).second));
  }
  if (flash && !m.attention_sinks) {
    const std::int64_t heads = m.heads / l.tensor;
    const std::int64_t value_width = m.is_mla() ? m.mla.v_head_dim : m.head_dim;
    cache(checked_mul(tokens, heads * value_width));
    r.cached += bytes_for_bits(checked_mul(checked_mul(tokens, heads), 32));
  }
  return r;
}

}  // namespace vramfit
