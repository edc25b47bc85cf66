// SPDX-License-Identifier: MIT
// DeepSpeed's own ZeRO-3 estimate, for comparison with what its optimizer really allocates
// (model_states() with shard_implementation::deepspeed). The estimate counts 18 bytes per
// parameter on the devices, fp32 gradients for the whole partition and no buckets; stage3.py
// keeps 16-bit gradient partitions, buckets, and fp32 gradients one sub-group at a time during
// the step (docs/training.md, "DeepSpeed").
#pragma once

#include <cstdint>

#include "detail/checked.hpp"
#include "error.hpp"
#include "parallel.hpp"
#include "units.hpp"

namespace vramfit {

/// What DeepSpeed's estimator prints: bytes per GPU and per node's CPU memory.
struct deepspeed_estimate {
  bytes per_gpu{};
  bytes per_node_cpu{};
};

/// deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs, with its default
/// additional_buffer_factor of 1.5, in exact integers (Python's float products floored).
constexpr deepspeed_estimate deepspeed_zero3_estimate(std::int64_t params,
                                                      std::int64_t largest_layer_params,
                                                      std::int64_t gpus_per_node,
                                                      std::int64_t nodes, bool offload_optimizer,
                                                      bool offload_params, bool zero_init) {
  using detail::checked_mul;
  if (gpus_per_node <= 0)
    detail::rules::parallel_degree_must_be_positive("GPUs per node", gpus_per_node);
  if (nodes <= 0) detail::rules::parallel_degree_must_be_positive("node", nodes);
  if (params < 0 || largest_layer_params < 0 || largest_layer_params > params)
    detail::raise("DeepSpeed's estimate needs 0 <= largest layer (" +
                  detail::str(largest_layer_params) + ") <= parameters (" + detail::str(params) +
                  ")");
  const std::int64_t gpus = checked_mul(gpus_per_node, nodes);
  const std::int64_t largest_layer = checked_mul(4, largest_layer_params);
  // cpu_mem = params x max(4 x gpus_per_node, k / nodes) x 1.5, or without the max under zero_init.
  auto per_node = [&](std::int64_t k, bool with_max) {
    const std::int64_t a = checked_mul(checked_mul(params, k), 3) / (2 * nodes);
    const std::int64_t b = checked_mul(checked_mul(params, checked_mul(4, gpus_per_node)), 3) / 2;
    return bytes{with_max && b > a ? b : a};
  };
  if (offload_optimizer && offload_params) return {bytes{largest_layer}, per_node(18, !zero_init)};
  if (offload_optimizer)
    return {bytes{largest_layer + checked_mul(2, params) / gpus}, per_node(16, !zero_init)};
  const std::int64_t kept = zero_init ? largest_layer_params : params;
  return {bytes{largest_layer + checked_mul(18, params) / gpus},
          bytes{checked_mul(checked_mul(kept, checked_mul(4, gpus_per_node)), 3) / 2}};
}

}  // namespace vramfit
