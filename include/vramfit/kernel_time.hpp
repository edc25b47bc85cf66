// SPDX-License-Identifier: MIT
// How long one kernel takes on one GPU, for the planner's step-time estimate: a matmul at its
// shape, FlashAttention, a memory-bound pass. A roofline (Williams et al. 2009, "Roofline") over
// the GPU's measured matmul ceiling and its memory bandwidth, with the wave quantisation of a
// matmul's output tiles over the GPU's multiprocessors.
#pragma once

#include <cstdint>

namespace vramfit {

/// What one GPU's kernels reach.
struct kernel_rates {
  double matmul = 0;           ///< FLOP/s of a large 16-bit matmul as the step sustains it
  double memory = 0;           ///< bytes/s of a memory-bound kernel
  double multiprocessors = 0;  ///< SMs (CUs) a grid spreads over; 0: no wave quantisation
};

namespace detail {

/// The output tile of one thread block: 128 x 128, CUTLASS's and cuBLAS's usual tile for 16-bit
/// matmuls on Ampere and Hopper (cutlass/gemm/device/default_gemm_configuration.h).
inline constexpr std::int64_t matmul_tile = 128;

/// ceil(a / b) for positive a, b. A double of 2^53 or more is a whole number already, and
/// converting it to an integer could overflow (a hostile shape reaches 1e23 tiles).
constexpr double ceil_ratio(double a, double b) {
  const double q = a / b;
  if (!(q < 9007199254740992.0)) return q;
  const auto whole = static_cast<double>(static_cast<std::int64_t>(q));
  return whole < q ? whole + 1 : whole;
}

/// The share of the machine a grid of `tiles` thread blocks keeps busy: the last wave runs
/// part-full (NVIDIA, "Matrix Multiplication Background User's Guide", wave quantization).
constexpr double wave_efficiency(double tiles, double multiprocessors) {
  if (multiprocessors <= 0 || tiles <= 0) return 1;
  return tiles / (ceil_ratio(tiles, multiprocessors) * multiprocessors);
}

}  // namespace detail

/// Seconds of `count` matmuls [m, k] x [k, n] run as one grid (a grouped GEMM for experts), in
/// elements of `element_bytes`: the slower of their FLOPs at the wave-quantised matmul rate and
/// their operands' traffic at the memory bandwidth. `ideal` drops the wave quantisation and the
/// memory bound: a lower bound.
constexpr double matmul_seconds(const kernel_rates& r, double m, double n, double k,
                                double element_bytes, double count = 1, bool ideal = false) {
  if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return 0;
  const double flops = 2 * m * n * k * count;
  if (ideal) return flops / r.matmul;
  const double tiles = detail::ceil_ratio(m, detail::matmul_tile) *
                       detail::ceil_ratio(n, detail::matmul_tile) * count;
  const double compute = flops / (r.matmul * detail::wave_efficiency(tiles, r.multiprocessors));
  const double traffic = (m * k + k * n + m * n) * element_bytes * count / r.memory;
  return compute > traffic ? compute : traffic;
}

/// The attention core of one layer on one rank: `batch` sequences of `queries` query tokens
/// against `keys` key tokens, `heads` query heads of `head_dim`.
struct attention_shape {
  double batch = 0, queries = 0, keys = 0, heads = 0, head_dim = 0;
  bool causal = true;
};
struct attention_seconds {
  double forward = 0, backward = 0;
};

/// A fused kernel (FlashAttention, cuDNN) at `forward_rate` and `backward_rate` FLOP/s: 4·q·k·d
/// FLOPs per head forward, half of it under a causal mask (masked blocks are skipped), 2.5 times
/// that backward (Dao 2023, FlashAttention-2 §3.2 and its FLOP count); one thread block per 128
/// queries and head (flash_fwd_launch_template.h).
constexpr attention_seconds fused_attention_time(const kernel_rates& r, const attention_shape& a,
                                                 double forward_rate, double backward_rate,
                                                 bool ideal = false) {
  if (a.batch <= 0 || a.queries <= 0 || a.heads <= 0) return {};
  const double flops =
      4 * a.batch * a.queries * a.keys * a.heads * a.head_dim * (a.causal ? 0.5 : 1);
  const double tiles = a.batch * a.heads * detail::ceil_ratio(a.queries, detail::matmul_tile);
  const double waves = ideal ? 1 : detail::wave_efficiency(tiles, r.multiprocessors);
  return {flops / (forward_rate * waves), 2.5 * flops / (backward_rate * waves)};
}

/// Unfused attention (eager PyTorch, Megatron-LM before FlashAttention): two batched matmuls over
/// the whole score matrix, masked or not, and the softmax's passes over it in `element_bytes`
/// (the scores written, read and the probabilities written forward; twice that backward).
constexpr attention_seconds eager_attention_time(const kernel_rates& r, const attention_shape& a,
                                                 double element_bytes, bool ideal = false) {
  const double scores = a.batch * a.heads * a.queries * a.keys;
  const double count = a.batch * a.heads;
  const double qk = matmul_seconds(r, a.queries, a.keys, a.head_dim, element_bytes, count, ideal);
  const double pv = matmul_seconds(r, a.queries, a.head_dim, a.keys, element_bytes, count, ideal);
  const double softmax = ideal ? 0 : 3 * scores * element_bytes / r.memory;
  return {qk + pv + softmax, 2 * (qk + pv + softmax)};
}

/// Seconds of a memory-bound kernel that reads and writes `bytes` in all.
constexpr double memory_seconds(const kernel_rates& r, double bytes) {
  return bytes / r.memory;
}

}  // namespace vramfit
