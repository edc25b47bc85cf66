// SPDX-License-Identifier: MIT
// Runtime overheads outside the tensors: the CUDA context, library workspaces, communication
// buffers and the caching allocator's fragmentation, as explicit policies with stated defaults
// rather than fudge factors. Every default is an assumption to calibrate; each says so.
#pragma once

#include <cstdint>
#include <optional>

#include "alloc_conf.hpp"
#include "gpu.hpp"
#include "ledger.hpp"
#include "nccl_memory.hpp"
#include "parallel.hpp"

namespace vramfit {

/// How the allocator's reserved-but-unallocated memory is found: simulated over the step timeline
/// (reserved_memory.hpp; the CLI's way, costly in a constant expression past tiny models), or a
/// share of the tensors' peak (the default: cheap, and the only way without a timeline).
enum class reserve_model : unsigned char { share, simulated };

/// The figure a verdict compares with the card: PyTorch's max_memory_allocated (the tensors'
/// blocks), max_memory_reserved (and the caching allocator's reserve beyond them), or the
/// process's memory as nvidia-smi shows it (and the CUDA context, workspaces and NCCL buffers).
enum class memory_metric : unsigned char { nvidia_smi, reserved, allocated };

/// What a process needs on a GPU besides its tensors. A value of -1 takes the default for the
/// GPU's generation.
struct runtime_overheads {
  /// The process's memory outside the caching allocator: the CUDA context, the kernels' code and
  /// cuBLAS's and cuBLASLt's handles. Default: 1343 MiB on Volta (HF "Model training anatomy",
  /// V100, CUDA 11.2, measured), 768 MiB from Ampere on (CUDA >= 11.7 loads kernels lazily,
  /// pytorch/pytorch#107667): measured 751 to 783 MiB in 159 training steps on an H100 and an H200
  /// with torch 2.11 and CUDA 13.0 (docs/gpu-measurements.md), assumed on the other GPUs.
  std::int64_t cuda_context = -1;
  /// cuBLAS workspaces: PyTorch's default 4096 KiB x 2 + 16 KiB x 8 per handle and stream, and
  /// 32 MiB on Hopper and later (c10/cuda CublasHandlePool.cpp, getChosenWorkspaceSize).
  std::int64_t cublas_workspace = -1;
  /// NCCL's buffers in all, when the job spans several GPUs. Default: NCCL's own allocation for
  /// each communicator of the layout (nccl_memory.hpp, with `nccl`'s cluster).
  std::int64_t nccl_buffers = -1;
  nccl_cluster nccl{};  ///< GPUs per node, channels, NCCL release

  /// With reserve_model::share, the caching allocator's unused reserved memory as a percentage
  /// of the tensors' peak. Default 5 %, or 1 % with expandable segments (pytorch/pytorch#137151;
  /// assumptions).
  std::int64_t fragmentation_percent = -1;
  reserve_model reserve = reserve_model::share;
  alloc_conf allocator{};  ///< PYTORCH_CUDA_ALLOC_CONF
  memory_metric metric = memory_metric::nvidia_smi;
};

/// The device bytes of `ledger` that `metric` does not count (persistent overheads, so the same
/// at every moment): the reserve's for allocated, and what sits outside the allocator.
constexpr bytes not_counted(const memory_ledger& ledger, memory_metric metric) {
  bytes out{};
  for (const memory_entry& e : ledger) {
    const bool outside = e.role == entry_role::outside_allocator;
    const bool reserve = e.role == entry_role::allocator_reserve;
    if (e.space == memory_space::device && ((metric != memory_metric::nvidia_smi && outside) ||
                                            (metric == memory_metric::allocated && reserve)))
      out += e.size;
  }
  return out;
}

/// Whether `o` has the caching allocator simulated: the simulated reserve, no fixed share given.
constexpr bool replays_allocator(const runtime_overheads& o) {
  return o.reserve == reserve_model::simulated && o.fragmentation_percent < 0;
}

/// The caching allocator's steady-state peaks, replayed over the step (reserved_memory.hpp).
struct allocator_peaks {
  bytes reserved{};
  bytes allocated{};  ///< its blocks at their rounded sizes: max_memory_allocated
};

namespace detail {
/// The ledger name of a communicator: its kind, within a node or across nodes.
constexpr const char* nccl_entry_name(const communicator& c) {
  constexpr const char* names[][2] = {
      {"NCCL: data-parallel communicator, across nodes",
       "NCCL: data-parallel communicator, within a node"},
      {"NCCL: replicate communicator (HSDP), across nodes",
       "NCCL: replicate communicator (HSDP), within a node"},
      {"NCCL: tensor-parallel communicator, across nodes",
       "NCCL: tensor-parallel communicator, within a node"},
      {"NCCL: context-parallel communicator, across nodes",
       "NCCL: context-parallel communicator, within a node"},
      {"NCCL: expert-parallel communicator, across nodes",
       "NCCL: expert-parallel communicator, within a node"},
      {"NCCL: pipeline neighbours, across nodes", "NCCL: pipeline neighbours, within a node"},
  };
  return names[static_cast<int>(c.kind)][c.within_node ? 1 : 0];
}
}  // namespace detail

/// The overheads of one process on `device` whose tensors peak at `tensors_peak`, a rank of
/// layout `l` with `neighbours` pipeline neighbours (-1: any stage's most): ledger entries of
/// component `overhead`, all persistent. `simulated`: the caching allocator's replayed peaks,
/// when known.
constexpr memory_ledger overheads(const runtime_overheads& o, const gpu& device, bytes tensors_peak,
                                  const layout& l, std::optional<allocator_peaks> simulated = {},
                                  std::int64_t neighbours = -1) {
  const bool volta = device.generation == gpu_generation::volta;
  const bytes context = o.cuda_context >= 0 ? bytes{o.cuda_context} : (volta ? 1343 : 768) * MiB;
  const bytes cublas =
      o.cublas_workspace >= 0
          ? bytes{o.cublas_workspace}
          : (device.hopper_or_later() ? 32 * MiB : bytes{4096 * 1024 * 2 + 16 * 1024 * 8});
  const std::int64_t percent = o.fragmentation_percent >= 0      ? o.fragmentation_percent
                               : o.allocator.expandable_segments ? 1
                                                                 : 5;
  memory_ledger ledger{};
  const auto space = memory_space::device;
  constexpr auto always = lifetime::persistent;
  constexpr auto outside = entry_role::outside_allocator;
  add_entry(ledger, "CUDA context", component::overhead, space, context, 0,
            volta ? "HF Model training anatomy: 1343 MiB on a V100 (measured)"
                  : "768 MiB outside the allocator with lazy loading: 751 to 783 MiB measured "
                    "on an H100 and an H200 (torch 2.11, CUDA 13.0)",
            always, outside);
  add_entry(ledger, "cuBLAS workspace", component::overhead, space, cublas, 0,
            "PyTorch CublasHandlePool.cpp default workspace size", always, outside);
  if (o.nccl_buffers >= 0) {
    if (l.world() > 1)
      add_entry(ledger, "NCCL buffers", component::overhead, space, bytes{o.nccl_buffers}, 0,
                "given (runtime_overheads::nccl_buffers)", always, outside);
  } else {
    const std::int64_t nvls_channels =
        device.generation == gpu_generation::blackwell ? nccl::nvls_channels_blackwell
        : device.generation == gpu_generation::hopper  ? nccl::nvls_channels_hopper
                                                       : 0;
    for (const communicator& c : communicators_of(l, o.nccl.gpus_per_node, neighbours))
      add_entry(ledger, detail::nccl_entry_name(c), component::overhead, space,
                nccl_bytes(c, o.nccl, nvls_channels), 0,
                "NCCL defaults per communicator: ring LL+LL128+Simple, NVLS, channels "
                "(nccl_memory.hpp)",
                always, outside);
  }
  if (simulated) {
    const bytes blocks = simulated->allocated > tensors_peak ? simulated->allocated : tensors_peak;
    add_entry(ledger, "caching allocator: blocks beyond the tensors", component::overhead, space,
              blocks - tensors_peak, 0,
              "CUDACachingAllocator rounds each block up (512 B; small remainders kept whole)",
              always);
    add_entry(ledger, "caching allocator: reserved beyond allocated", component::overhead, space,
              simulated->reserved > blocks ? simulated->reserved - blocks : bytes{}, 0,
              "CUDACachingAllocator simulated over the step's tensors (reserved_memory.hpp)",
              always, entry_role::allocator_reserve);
  } else
    add_entry(ledger, "allocator fragmentation reserve", component::overhead, space,
              divide_up(tensors_peak * percent, 100), 0,
              "assumed share of reserved-but-unallocated memory (pytorch#137151)",
              lifetime::persistent, entry_role::allocator_reserve);
  return ledger;
}

/// The same for a job of `world` GPUs whose layout is not known: one data-parallel group.
constexpr memory_ledger overheads(const runtime_overheads& o, const gpu& device, bytes tensors_peak,
                                  std::int64_t world,
                                  std::optional<allocator_peaks> simulated = {}) {
  return overheads(o, device, tensors_peak, layout{.data = world}, simulated);
}

}  // namespace vramfit
