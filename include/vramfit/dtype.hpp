// SPDX-License-Identifier: MIT
// Element formats (dtypes) with their exact storage: payload bits per element plus the block
// scales of quantized formats, rounded up to whole bytes per tensor.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "detail/tag.hpp"
#include "units.hpp"

namespace vramfit {

/// How the blocks of a block-scaled format run over a tensor.
enum class block_layout : unsigned char {
  flattened,  ///< over the flattened tensor (bitsandbytes blockwise quantization)
  per_row,    ///< along each row, i.e. the contraction dimension (GPTQ/AWQ groups, MX, NVFP4)
};

/// One level of block scaling: one scale (and optionally one zero point) per `block` items of the
/// level below (elements for the first level, first-level scales for the second).
struct scale_level {
  std::int64_t block = 0;  ///< items per scale; 0 means the level is absent
  std::int64_t scale_bits = 0;
  std::int64_t zero_bits = 0;  ///< asymmetric formats store a zero point beside each scale
  friend constexpr bool operator==(const scale_level&, const scale_level&) = default;
};

/// An exact description of how elements are stored. Structural, so it can be a template argument.
struct element_format {
  char name[24] = {};
  std::int64_t payload_bits = 0;  ///< bits of one element's own value
  scale_level level1{};
  scale_level level2{};
  std::int64_t per_tensor_bits = 0;  ///< tensor-wide constants (a global scale, an offset)
  block_layout layout = block_layout::flattened;
  bool storable = true;  ///< false for compute-only formats such as tf32

  friend constexpr bool operator==(const element_format&, const element_format&) = default;
};

/// A non-negative fraction: bits per element are rational for block-scaled formats.
struct ratio {
  std::int64_t num = 0;
  std::int64_t den = 1;
  friend constexpr bool operator==(const ratio&, const ratio&) = default;
  /// For display only.
  [[nodiscard]] constexpr double value() const {
    return static_cast<double>(num) / static_cast<double>(den);
  }
};

namespace detail {
constexpr std::int64_t gcd(std::int64_t a, std::int64_t b) {
  while (b != 0) a = std::exchange(b, a % b);
  return a;
}
constexpr ratio reduced(std::int64_t num, std::int64_t den) {
  const std::int64_t g = gcd(num, den);
  return {num / g, den / g};
}

namespace rules {
[[noreturn]] inline void compute_only_format_has_no_storage(const char* name) {
  raise(std::string(name) +
        " is a compute-only format: tensors are stored in another format (tf32 "
        "math reads and writes fp32 tensors)");
}
[[noreturn]] inline void tensor_shape_must_be_positive(std::int64_t rows, std::int64_t cols) {
  raise("a tensor shape must be positive, got " + str(rows) + " x " + str(cols));
}
}  // namespace rules

/// Scale (plus zero-point) storage of one level holding `count` scales, rounded up to whole bytes:
/// scales and zero points are tensors of their own.
constexpr std::int64_t level_storage(const scale_level& level, std::int64_t count) {
  return checked_add(ceil_div(checked_mul(count, level.scale_bits), 8),
                     ceil_div(checked_mul(count, level.zero_bits), 8));
}
}  // namespace detail

/// Exact bits per element including block-scale overhead, e.g. NF4 with double quantization:
/// 4 + 8/64 + 32/(64 * 256) = 4.126953125 (QLoRA paper, section 2: "4.127 bits").
constexpr ratio bits_per_element(const element_format& f) {
  std::int64_t num = f.payload_bits;
  std::int64_t den = 1;
  auto add = [&](std::int64_t bits, std::int64_t per) {
    num = detail::checked_add(detail::checked_mul(num, per), bits);
    den = detail::checked_mul(den, per);
  };
  if (f.level1.block > 0) add(f.level1.scale_bits + f.level1.zero_bits, f.level1.block);
  if (f.level1.block > 0 && f.level2.block > 0)
    add(f.level2.scale_bits + f.level2.zero_bits, f.level2.block);
  return detail::reduced(num, den);
}

/// Bytes that a rows x cols tensor occupies in format `f`: the packed payload rounded up to whole
/// bytes, plus each scale level's tensor, plus the tensor-wide constants.
constexpr bytes storage_bytes(const element_format& f, std::int64_t rows, std::int64_t cols) {
  using namespace detail;
  if (!f.storable) rules::compute_only_format_has_no_storage(f.name);
  if (rows <= 0 || cols <= 0) rules::tensor_shape_must_be_positive(rows, cols);
  const std::int64_t elements = checked_mul(rows, cols);
  std::int64_t total = ceil_div(checked_mul(elements, f.payload_bits), 8);
  if (f.level1.block > 0) {
    // Per row: one scale per group of each row, the last group partial (AutoGPTQ QuantLinear:
    // scales [ceil(in / group_size), out]); flattened: bitsandbytes' absmax of
    // blocks = -(n // -blocksize) (backends/cuda/ops.py quantize_4bit, quantize_blockwise).
    const std::int64_t scales = f.layout == block_layout::per_row
                                    ? checked_mul(rows, ceil_div(cols, f.level1.block))
                                    : ceil_div(elements, f.level1.block);
    total = checked_add(total, level_storage(f.level1, scales));
    if (f.level2.block > 0)
      total = checked_add(total, level_storage(f.level2, ceil_div(scales, f.level2.block)));
  }
  return bytes{checked_add(total, ceil_div(f.per_tensor_bits, 8))};
}

/// Bytes that a tensor of `elements` elements (one row) occupies in format `f`.
constexpr bytes storage_bytes(const element_format& f, std::int64_t elements) {
  return storage_bytes(f, 1, elements);
}

/// A type that names an element format: it has `static constexpr element_format value`.
template <class T>
concept Dtype = detail::tag_of<T, element_format>;

/// A format that tensors can be stored in (not compute-only).
template <class T>
concept StorageDtype = Dtype<T> && T::value.storable;

template <Dtype D>
constexpr bytes storage_bytes(std::int64_t rows, std::int64_t cols) {
  return storage_bytes(D::value, rows, cols);
}
template <Dtype D>
constexpr bytes storage_bytes(std::int64_t elements) {
  return storage_bytes(D::value, elements);
}

// --- Plain formats: the payload is the whole element. ---
struct fp64 {
  static constexpr element_format value{"fp64", 64};
};
struct fp32 {
  static constexpr element_format value{"fp32", 32};
};
/// TensorFloat-32 is a tensor-core math mode over fp32 tensors (NVIDIA A100 whitepaper): 19 bits
/// of it are used in the multiply, 32 are stored.
struct tf32 {
  static constexpr element_format value{.name = "tf32", .payload_bits = 32, .storable = false};
};
struct bf16 {
  static constexpr element_format value{"bf16", 16};
};
struct fp16 {
  static constexpr element_format value{"fp16", 16};
};
struct fp8_e4m3 {
  static constexpr element_format value{"fp8_e4m3", 8};
};
struct fp8_e5m2 {
  static constexpr element_format value{"fp8_e5m2", 8};
};
struct int8 {
  static constexpr element_format value{"int8", 8};
};
/// Two elements per byte, no scales (scales belong to group_quantized formats).
struct int4 {
  static constexpr element_format value{"int4", 4};
};
struct int64 {
  static constexpr element_format value{"int64", 64};
};
struct int32 {
  static constexpr element_format value{"int32", 32};
};
struct uint8 {
  static constexpr element_format value{"uint8", 8};
};

// --- Block-scaled formats. ---

/// NormalFloat-4 as bitsandbytes stores it: 4-bit codes, one fp32 absmax per 64 elements of the
/// flattened tensor (QLoRA paper, Dettmers et al. 2023, section 2; bitsandbytes quantize_4bit,
/// blocksize 64): 4.5 bits per element.
struct nf4 {
  static constexpr element_format value{"nf4", 4, {64, 32, 0}};
};

/// NF4 with double quantization: the absmax values are themselves quantized to 8 bits in blocks of
/// 256 with one fp32 scale each, and their fp32 mean is kept as an offset (QLoRA section 2:
/// 8/64 + 32/(64 * 256) = 0.127 bits of overhead; bitsandbytes quantize_4bit, compress_statistics).
struct nf4_double_quant {
  static constexpr element_format value{"nf4+dq", 4, {64, 8, 0}, {256, 32, 0}, 32};
};

/// bitsandbytes FP4 (bnb_4bit_quant_type="fp4", the library's default): 4-bit floating-point codes
/// stored as NF4's, with the same fp32 absmax per 64 (bitsandbytes quantize_4bit).
struct fp4 {
  static constexpr element_format value{"fp4", 4, {64, 32, 0}};
};

/// FP4 with double quantization: the absmax compressed as nf4_double_quant's.
struct fp4_double_quant {
  static constexpr element_format value{"fp4+dq", 4, {64, 8, 0}, {256, 32, 0}, 32};
};

/// OCP Microscaling MXFP4: FP4 (E2M1) elements, one E8M0 scale per 32 along the row (OCP MX spec
/// v1.0, section 5): 4.25 bits per element.
struct mxfp4 {
  static constexpr element_format value{"mxfp4", 4, {32, 8, 0}, {}, 0, block_layout::per_row};
};

/// NVIDIA NVFP4: FP4 (E2M1) elements, one FP8 E4M3 scale per 16 along the row, and one fp32 scale
/// per tensor (NVIDIA Blackwell / Transformer Engine NVFP4 recipe): 4.5 bits per element.
struct nvfp4 {
  static constexpr element_format value{"nvfp4", 4, {16, 8, 0}, {}, 32, block_layout::per_row};
};

namespace detail {
namespace rules {
[[noreturn]] inline void quantized_bits_must_be_1_to_8(int bits) {
  raise("group-quantized elements must have 1 to 8 bits, got " + str(bits));
}
[[noreturn]] inline void quantization_group_must_be_positive(int group) {
  raise("a quantization group must hold at least one element, got " + str(group));
}
}  // namespace rules

constexpr element_format group_quantized_format(int bits, int group, const element_format& scale,
                                                int zero_bits) {
  if (bits < 1 || bits > 8) rules::quantized_bits_must_be_1_to_8(bits);
  if (group < 1) rules::quantization_group_must_be_positive(group);
  element_format f{"int", bits, {group, scale.payload_bits, zero_bits}};
  f.layout = block_layout::per_row;
  // The name reads "int4 g128" (symmetric: "int4 g128 sym").
  std::size_t end = 3;
  auto append = [&](const char* text) {
    for (; *text != '\0'; ++text) f.name[end++] = *text;
  };
  auto append_number = [&](int n) {
    char digits[12] = {};
    int count = 0;
    for (; n > 0 || count == 0; n /= 10) digits[count++] = static_cast<char>('0' + n % 10);
    while (count > 0) f.name[end++] = digits[--count];
  };
  append_number(bits);
  append(" g");
  append_number(group);
  if (zero_bits == 0) append(" sym");
  return f;
}
}  // namespace detail

/// GPTQ/AWQ-style group-wise quantization: `Bits`-bit integers, one `Scale` scale and a `ZeroBits`
/// zero point (0: symmetric) per `Group` elements of a row (input dimension). Int4 checkpoints:
/// fp16 scales, 4-bit zeros packed in int32 (AutoGPTQ QuantLinear: qweight, qzeros, scales).
template <int Bits, int Group = 128, StorageDtype Scale = fp16, int ZeroBits = Bits>
struct group_quantized {
  static constexpr element_format value =
      detail::group_quantized_format(Bits, Group, Scale::value, ZeroBits);
};

/// GPTQ / AWQ 4-bit with group size 128, fp16 scales and 4-bit zero points: 4.15625 bits.
using gptq_int4 = group_quantized<4, 128>;
using awq_int4 = group_quantized<4, 128>;

}  // namespace vramfit
