// SPDX-License-Identifier: MIT
// NCCL's own device memory, communicator by communicator: which communicators a rank of a layout
// belongs to, within a node or across nodes, and the buffers NCCL's defaults allocate for each.
// Constants read in NVIDIA/nccl v2.27.3-1 (v2.21.5-1 where it differs); file:line cited at each.
// docs/sources.md#nccl-memory says what is assumed.
#pragma once

#include <cstdint>

#include "detail/checked.hpp"
#include "detail/static_vector.hpp"
#include "parallel.hpp"
#include "units.hpp"

namespace vramfit {

/// The NCCL releases whose allocation differs: 2.21 sizes NVLS buffers with 2 MiB of credits per
/// buffer; from 2.22, NCCL_RUNTIME_CONNECT connects an algorithm at its first use (init.cc:52).
enum class nccl_version : unsigned char { v2_21, v2_22_or_later };

/// What a cluster tells NCCL's memory: GPUs per node (NVLink within, network across), the ring
/// channels its topology search picks, the release.
struct nccl_cluster {
  std::int64_t gpus_per_node = 8;
  /// Ring channels per collective communicator. NCCL's topology search (graph/search.cc) picks
  /// them per topology; 24 is the earlier reading for an H100 NVSwitch node, an assumption not
  /// confirmed by a log (pin it with NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS).
  std::int64_t channels = 24;
  /// Send/receive channels per peer: 32 within an H100 node in the log of NVIDIA/nccl#1685; the
  /// same 32 assumed across nodes (an upper assumption: network peers often get fewer).
  std::int64_t channels_per_peer = 32;
  nccl_version version = nccl_version::v2_22_or_later;
  bool nvls = true;  ///< NVLink SHARP where the GPUs support it (NCCL_NVLS_ENABLE, default on)
};

namespace nccl {
// Protocol buffers of one connection (init.cc:618-620, device.h:25,93-94,110-111).
inline constexpr std::int64_t steps = 8;                              // NCCL_STEPS
inline constexpr std::int64_t ll_buffer = 8 * 512 * steps * 16;       // DEFAULT_LL_BUFFSIZE
inline constexpr std::int64_t ll128_buffer = 120 * 640 * steps * 8;   // DEFAULT_LL128_BUFFSIZE
inline constexpr std::int64_t simple_buffer = std::int64_t{1} << 22;  // DEFAULT_BUFFSIZE
/// ncclSendMem / ncclRecvMem: a union padded to MEM_ALIGN 4096 B (comm.h).
inline constexpr std::int64_t connection_header = 4096;
inline constexpr std::int64_t granule = 2097152;  // CUDA_IPC_MIN (comm.h:35), cuMem's 2 MiB
/// NVLS channels: nvls.cc:147 NVLS_NCHANNELS_SM90 16 (2.21.5 nvls.cc:232 the same 16), :149
/// NVLS_NCHANNELS_SM100_NVL 24 within a Blackwell node; :152 NVLS_CHUNKSIZE 128 KiB x NCCL_STEPS.
inline constexpr std::int64_t nvls_channels_hopper = 16;
inline constexpr std::int64_t nvls_channels_blackwell = 24;
inline constexpr std::int64_t nvls_buffer = 128 * 1024 * steps;
inline constexpr std::int64_t nvls_align_2_21 = std::int64_t{1} << 21;  // 2.21.5 nvls.cc:229

constexpr std::int64_t round_up(std::int64_t n, std::int64_t to) {
  return (n + to - 1) / to * to;
}
/// A receiving connection: header + LL + LL128 + Simple, rounded to 2 MiB (p2p.cc:445-448).
inline constexpr std::int64_t receiver =
    round_up(connection_header + ll_buffer + ll128_buffer + simple_buffer, granule);
/// A sending connection: its header alone, rounded to 2 MiB (p2p.cc:377-380; on A100 with P2P
/// read the Simple buffer moves to the sender, paths.cc:358, and the pair still takes 12 MiB).
inline constexpr std::int64_t sender = round_up(connection_header, granule);
/// initChannel's three device arrays per channel, each a 2 MiB cuMem granule (channel.cc:42-56).
inline constexpr std::int64_t channel_structures = 3 * granule;
constexpr std::int64_t pow2_up(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}
}  // namespace nccl

/// The communicators a rank holds, by what they carry.
enum class communicator_kind : unsigned char {
  data_parallel,  ///< DDP's all-reduce, or the FSDP/ZeRO shard group (with context parallel)
  replicate,      ///< HSDP's replicate group
  tensor,
  context,
  expert,
  pipeline,  ///< point-to-point with the previous and next stage
};

/// One communicator of a rank: its kind, ranks, whether they sit in one node, and how many of
/// them share this rank's node (NVLS heads).
struct communicator {
  communicator_kind kind = communicator_kind::data_parallel;
  std::int64_t ranks = 1;
  bool within_node = true;
  std::int64_t local_ranks = 1;
  std::int64_t peers = 0;  ///< pipeline: the neighbours connected point to point
};

/// A group of `size` ranks `stride` apart in the usual order (tensor innermost, then context,
/// then data/expert, pipeline outermost: Megatron-LM's default order tp-cp-ep-dp-pp, torchtitan's
/// device mesh [pp, dp_replicate, dp_shard, cp, tp]) on nodes of `gpus_per_node`.
constexpr communicator group_of(communicator_kind kind, std::int64_t size, std::int64_t stride,
                                std::int64_t gpus_per_node) {
  using detail::checked_mul;
  const std::int64_t nodes =
      stride >= gpus_per_node ? size : detail::ceil_div(checked_mul(stride, size), gpus_per_node);
  return {.kind = kind, .ranks = size, .within_node = nodes <= 1, .local_ranks = size / nodes};
}

/// The pipeline neighbours stage `stage` of `l` sends to and receives from: one at either end
/// of a pipeline (or in one of two stages), two in the middle; two everywhere when the schedule
/// interleaves, whose chunks wrap from the last stage to the first (Megatron-LM
/// p2p_communication.py, ring exchange of the virtual pipeline). `stage` -1: any stage, the most.
constexpr std::int64_t pipeline_neighbours(const layout& l, std::int64_t stage, bool interleaved) {
  if (l.pipeline <= 1) return 0;
  if (l.pipeline == 2) return 1;
  if (interleaved || stage < 0) return 2;
  return stage == 0 || stage == l.pipeline - 1 ? 1 : 2;
}

/// The communicators of more than one rank that a rank of `l` belongs to, at most one per kind;
/// its pipeline neighbours `neighbours` (pipeline_neighbours(); -1: any stage's most).
constexpr detail::static_vector<communicator, 6> communicators_of(const layout& l,
                                                                  std::int64_t gpus_per_node,
                                                                  std::int64_t neighbours = -1) {
  using detail::checked_mul;
  if (gpus_per_node <= 0)
    detail::rules::parallel_degree_must_be_positive("GPUs per node", gpus_per_node);
  detail::static_vector<communicator, 6> out{};
  const auto add = [&](communicator c) {
    if (c.ranks > 1) out.push_back(c);
  };
  const std::int64_t shard = l.shard_group > 0 ? l.shard_group : l.data;
  add(group_of(communicator_kind::tensor, l.tensor, 1, gpus_per_node));
  add(group_of(communicator_kind::context, l.context, l.tensor, gpus_per_node));
  add(group_of(communicator_kind::data_parallel, checked_mul(shard, l.context), l.tensor,
               gpus_per_node));
  if (l.shard_group > 0)
    add(group_of(communicator_kind::replicate, l.data / l.shard_group,
                 checked_mul(checked_mul(l.tensor, l.context), l.shard_group), gpus_per_node));
  add(group_of(communicator_kind::expert, l.expert, l.tensor, gpus_per_node));
  if (l.pipeline > 1) {  // a neighbour is in this node when two consecutive stages share one
    communicator p = group_of(communicator_kind::pipeline, 2,
                              checked_mul(checked_mul(l.tensor, l.context), l.data), gpus_per_node);
    p.ranks = l.pipeline;
    p.peers = neighbours >= 0 ? neighbours : pipeline_neighbours(l, -1, false);
    out.push_back(p);
  }
  return out;
}

/// What NCCL allocates for one communicator on each of its ranks, on GPUs whose NVLS takes
/// `nvls_channels` channels (0: no NVLink SHARP, before Hopper).
constexpr bytes nccl_bytes(const communicator& c, const nccl_cluster& k,
                           std::int64_t nvls_channels) {
  using detail::checked_mul;
  if (c.ranks <= 1) return {};
  if (k.channels <= 0 || k.channels_per_peer <= 0)
    detail::rules::parallel_degree_must_be_positive(
        "NCCL channels", k.channels <= 0 ? k.channels : k.channels_per_peer);
  const std::int64_t pair = nccl::receiver + nccl::sender;  // 10 MiB + 2 MiB
  if (c.kind == communicator_kind::pipeline) {
    // Send/receive: every neighbour both ways on channels_per_peer channels (paths.cc:851),
    // which initChannel sets up (paths.cc:855).
    const std::int64_t channels = nccl::pow2_up(k.channels_per_peer);
    return bytes{checked_mul(checked_mul(c.peers, channels), pair) +
                 checked_mul(channels, nccl::channel_structures)};
  }
  // A ring: one receiver and one sender per channel.
  std::int64_t total = checked_mul(k.channels, pair);
  // initChannel for the ring's channels and the send/recv channels, pow2Up (paths.cc:852-855).
  total += checked_mul(nccl::pow2_up(k.channels), nccl::channel_structures);
  if (k.nvls && nvls_channels > 0 && c.within_node && c.local_ranks > 2) {
    // NVLS (nvls.cc:160: more than two GPUs): channels x 2 x buffer x heads (nvls.cc:335-337),
    // the heads assumed one per rank of the node (not confirmed by a log),
    // in 2.21 with a 2 MiB credit per buffer (2.21.5 nvls.cc:313); from 2.22 the credits
    // (nvls.cc:404-405, 64 B each) take one 2 MiB granule.
    const std::int64_t per_buffer = k.version == nccl_version::v2_21
                                        ? nccl::nvls_buffer + nccl::nvls_align_2_21
                                        : nccl::nvls_buffer;
    total += checked_mul(checked_mul(nvls_channels * 2, per_buffer), c.local_ranks);
    if (k.version == nccl_version::v2_22_or_later) total += nccl::granule;
  }
  return bytes{total};
}

}  // namespace vramfit
