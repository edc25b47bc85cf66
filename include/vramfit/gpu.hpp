// SPDX-License-Identifier: MIT
// GPUs with their real capacity in bytes: what the driver reports as total memory, not the
// marketing figure ("80 GB" H100s report 81559 MiB). Each value names its source.
#pragma once

#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

#include "detail/name.hpp"
#include "detail/tag.hpp"
#include "units.hpp"

namespace vramfit {

enum class gpu_generation : unsigned char { volta, ampere, ada, hopper, blackwell, cdna, gaudi };

/// A structural description of a GPU.
struct gpu {
  char name[32] = {};
  bytes capacity{};  ///< total device memory as the driver reports it
  gpu_generation generation = gpu_generation::hopper;
  char source[96] = {};
  /// Dense 16-bit tensor-core peak (bf16; fp16 on Volta), TFLOP/s; 0: unknown. For the planner's
  /// step-time estimate only, never for memory.
  std::int64_t dense_tflops = 0;
  /// GPU-to-GPU bandwidth inside a node, GB/s per direction (NVLink, Infinity Fabric, or PCIe
  /// where the part has no such link); 0: unknown.
  std::int64_t link_gb_per_s = 0;
  /// The total cudaMemGetInfo reports (torch.cuda.mem_get_info()[1]), below the driver total
  /// that nvidia-smi shows by what the driver reserves; vLLM's budget starts from it. 0: unknown
  /// (taken as the capacity).
  bytes cuda_total{};
  /// The fastest 16-bit matmul measured on the part, GFLOP/s (its "maximum achievable matmul
  /// FLOPS", ml-engineering compute/accelerator/README.md); 0: unknown. Planner only.
  std::int64_t matmul_gflops = 0;
  /// Memory bandwidth, GB/s (datasheet); 0: unknown. Planner only.
  std::int64_t memory_gb_per_s = 0;
  /// Streaming multiprocessors (CUs on AMD) a kernel's thread blocks spread over; 0: unknown.
  std::int64_t multiprocessors = 0;

  /// NVIDIA compute capability 9 and later, where cuBLAS users size larger workspaces.
  [[nodiscard]] constexpr bool hopper_or_later() const {
    return generation == gpu_generation::hopper || generation == gpu_generation::blackwell;
  }
};

template <class T>
concept Gpu = detail::tag_of<T, gpu>;

/// A custom GPU in one line: `using my_card = gpu_type<gpu{"My card", 48 * GiB}>;`.
template <gpu G>
struct gpu_type {
  static constexpr gpu value = G;
};

namespace gpus {
// nvidia-smi "Total" MiB from the issues cited (MI300X: rocm-smi bytes; "nominal": a vendor's),
// dense 16-bit TFLOP/s and intra-node GB/s per direction from datasheets, and the H100 SXM's
// cudaMemGetInfo total from vLLM's logs in the llm-d runs (docs/sources.md#gpu-figures); then
// the measured matmul ceiling (ml-engineering compute/accelerator/README.md, MAMF: its v2 BF16
// table for A100 SXM, H100 SXM, MI300X; its v1 table for MI250X and Gaudi; H200 as the H100, the
// same GH100 die and clocks), memory GB/s and SMs from datasheets.

// clang-format off
struct h100_80gb : gpu_type<gpu{"H100 80GB SXM", 81559 * MiB, gpu_generation::hopper, "nvidia-smi 81559MiB (NVIDIA/nccl#1264, modal-client#2797)", 989, 450, 81080 * MiB, 794500, 3350, 132}> {};
struct h100_pcie : gpu_type<gpu{"H100 80GB PCIe", 81559 * MiB, gpu_generation::hopper, "nvidia-smi 81559MiB as the SXM part (modal-client#2797: H100)", 756, 64, {}, 0, 2000, 114}> {};
struct h100_96gb : gpu_type<gpu{"H100 96GB", 96 * GiB, gpu_generation::hopper, "nominal 96 GiB HBM3 (no driver reading found)", 989, 450, {}, 0, 0, 132}> {};
struct h100_nvl : gpu_type<gpu{"H100 NVL 94GB", bytes{99'961'274'368}, gpu_generation::hopper, "driver total 99961274368 B (fastfetch-cli/fastfetch#1658)", 835, 300, {}, 0, 3900, 132}> {};
struct h200 : gpu_type<gpu{"H200 141GB", 143771 * MiB, gpu_generation::hopper, "nvidia-smi 143771MiB (public H200 nvidia-smi logs)", 989, 450, {}, 794500, 4800, 132}> {};
struct a100_80gb : gpu_type<gpu{"A100 80GB", 81920 * MiB, gpu_generation::ampere, "nvidia-smi 81920MiB (modal-client#2797)", 312, 300, {}, 271200, 2039, 108}> {};
struct a100_40gb : gpu_type<gpu{"A100 40GB", 40960 * MiB, gpu_generation::ampere, "nvidia-smi 40960MiB (modal-client#2797)", 312, 300, {}, 271200, 1555, 108}> {};
struct l40s : gpu_type<gpu{"L40S 48GB", 46068 * MiB, gpu_generation::ada, "nvidia-smi 46068MiB (modal-client#2797)", 362, 32, {}, 0, 864, 142}> {};
struct l4 : gpu_type<gpu{"L4 24GB", 23034 * MiB, gpu_generation::ada, "nvidia-smi 23034MiB (modal-client#2797)", 121, 32, {}, 0, 300, 58}> {};
struct rtx_a6000 : gpu_type<gpu{"RTX A6000 48GB", 49140 * MiB, gpu_generation::ampere, "nvidia-smi 49140MiB (public RTX A6000 nvidia-smi logs)", 155, 32, {}, 0, 768, 84}> {};
struct rtx_4090 : gpu_type<gpu{"RTX 4090 24GB", 24564 * MiB, gpu_generation::ada, "nvidia-smi 24564MiB (RLinf/RLinf#255)", 165, 32, {}, 0, 1008, 128}> {};
struct rtx_3090 : gpu_type<gpu{"RTX 3090 24GB", 24576 * MiB, gpu_generation::ampere, "nvidia-smi 24576MiB (noonghunna/club-3090#1129)", 71, 32, {}, 0, 936, 82}> {};
struct v100_16gb : gpu_type<gpu{"V100 16GB", 16 * GiB, gpu_generation::volta, "nominal 16 GiB (no driver reading found)", 125, 150, {}, 0, 900, 80}> {};
struct v100_32gb : gpu_type<gpu{"V100 32GB", 32 * GiB, gpu_generation::volta, "nominal 32 GiB (no driver reading found)", 125, 150, {}, 0, 900, 80}> {};
struct mi300x : gpu_type<gpu{"MI300X 192GB", bytes{206'141'652'992}, gpu_generation::cdna, "rocm-smi VRAM Total 206141652992 B (ROCm legacy-rocm-build#4750)", 1307, 448, {}, 668400, 5300, 304}> {};
struct mi250x_gcd : gpu_type<gpu{"MI250X (one GCD) 64GB", 64 * GiB, gpu_generation::cdna, "nominal 128 GB per MI250X = two 64 GiB GCDs", 191, 100, {}, 147000, 1638, 110}> {};
struct gaudi2 : gpu_type<gpu{"Gaudi 2 96GB", 96 * GiB, gpu_generation::gaudi, "nominal 96 GB HBM2E (Intel spec)", 0, 0, {}, 429300, 2460, 0}> {};
struct gaudi3 : gpu_type<gpu{"Gaudi 3 128GB", 128 * GiB, gpu_generation::gaudi, "nominal 128 GB HBM2E (Intel spec)", 1835, 600, {}, 1288800, 3700, 0}> {};
// clang-format on
}  // namespace gpus

/// A GPU preset by its command-line key.
struct gpu_preset {
  const char* key;
  gpu value;
};

inline constexpr gpu_preset gpu_presets[] = {
    {"h100", gpus::h100_80gb::value},
    {"h100-pcie", gpus::h100_pcie::value},
    {"h100-96gb", gpus::h100_96gb::value},
    {"h100-nvl", gpus::h100_nvl::value},
    {"h200", gpus::h200::value},
    {"a100-80gb", gpus::a100_80gb::value},
    {"a100-40gb", gpus::a100_40gb::value},
    {"l40s", gpus::l40s::value},
    {"l4", gpus::l4::value},
    {"a6000", gpus::rtx_a6000::value},
    {"rtx-4090", gpus::rtx_4090::value},
    {"rtx-3090", gpus::rtx_3090::value},
    {"v100-16gb", gpus::v100_16gb::value},
    {"v100-32gb", gpus::v100_32gb::value},
    {"mi300x", gpus::mi300x::value},
    {"mi250x", gpus::mi250x_gcd::value},
    {"gaudi2", gpus::gaudi2::value},
    {"gaudi3", gpus::gaudi3::value},
};

namespace detail::rules {
[[noreturn]] inline void gpu_capacity_must_fit_its_name(std::string_view capacity,
                                                        std::size_t most) {
  raise("a GPU capacity is written in at most " + std::to_string(most) + " characters, got '" +
        std::string(capacity.substr(0, 40)) + (capacity.size() > 40 ? "...'" : "'"));
}
}  // namespace detail::rules

/// A GPU given by its capacity ("96GiB", "44GB"): the driver total the user reads, taken as a
/// Hopper for the runtime overheads that depend on the generation (overheads.hpp).
constexpr gpu gpu_with_capacity(std::string_view capacity) {
  constexpr std::size_t prefix = 7, most = sizeof gpu{}.name - prefix - 1;  // after "GPU of "
  if (capacity.size() > most) detail::rules::gpu_capacity_must_fit_its_name(capacity, most);
  gpu g{"GPU of ", parse_size(capacity), gpu_generation::hopper, "given by its capacity"};
  for (std::size_t i = 0; i < capacity.size(); ++i) g.name[prefix + i] = capacity[i];
  return g;
}

/// The GPU preset named `key`, or nullptr.
constexpr const gpu* find_gpu(std::string_view key) {
  for (const gpu_preset& g : gpu_presets)
    if (key == g.key) return &g.value;
  return nullptr;
}

}  // namespace vramfit
