// SPDX-License-Identifier: MIT
// Precision policies: in which format training keeps its weights, gradients, master copy and
// activations. Optimizer states follow the tensor the optimizer updates (the master copy when
// there is one), as PyTorch allocates them (torch.zeros_like).
#pragma once

#include <string>
#include <string_view>

#include "detail/name.hpp"
#include "detail/tag.hpp"
#include "dtype.hpp"
#include "error.hpp"

namespace vramfit {

/// A structural description of a precision policy.
struct precision {
  char name[28] = {};
  element_format weights{};    ///< the module's parameters, what forward reads
  element_format gradients{};  ///< gradients as accumulated
  element_format master{};     ///< a separate master copy the optimizer updates; payload 0: none
  element_format compute{};    ///< activations and matmul inputs
  /// Autocast keeps a compute-format copy of each matmul weight alive from forward through
  /// backward (torch.autocast's weight cast cache), transient but part of the peak.
  bool autocast_weight_copies = false;
  /// Transformer Engine FP8 keeps an FP8 copy of each matmul weight and its transpose.
  std::int64_t fp8_weight_copies = 0;

  [[nodiscard]] constexpr bool has_master() const { return master.payload_bits > 0; }
  /// The format of what the optimizer updates, and so of its states.
  [[nodiscard]] constexpr const element_format& updated() const {
    return has_master() ? master : weights;
  }
};

namespace detail {
constexpr precision named(precision p, const char* family, const char* detail_name,
                          const char* suffix = "") {
  copy_name(p.name, family, detail_name, suffix);
  return p;
}
}  // namespace detail

/// A type that names a precision policy.
template <class T>
concept Precision = detail::tag_of<T, precision>;

/// Everything in fp32: 4 B weights + 4 B gradients per parameter.
struct fp32_training {
  static constexpr precision value{"fp32", fp32::value, fp32::value, {}, fp32::value};
};

/// torch.autocast mixed precision: fp32 weights, gradients and optimizer states, 16-bit compute,
/// and 16-bit copies of the matmul weights during forward and backward (HF "Model training
/// anatomy": 6 B weights = 4 fp32 + 2 half, 4 B gradients, 8 B AdamW: 18 B per parameter).
template <StorageDtype Half = bf16>
struct amp {
  static constexpr precision value = detail::named({.weights = fp32::value,
                                                    .gradients = fp32::value,
                                                    .compute = Half::value,
                                                    .autocast_weight_copies = true},
                                                   "amp-", Half::value.name);
};

/// Pure 16-bit training: weights, gradients and optimizer states in 16 bit (torchtune dtype bf16,
/// Lightning "bf16-true"): 2 + 2 + 4 B per parameter with AdamW.
template <StorageDtype Half = bf16>
struct pure {
  static constexpr precision value =
      detail::named({"", Half::value, Half::value, {}, Half::value}, "pure-", Half::value.name);
};

/// 16-bit weights with an fp32 master copy. With fp32 gradients this is Megatron's bf16 recipe
/// (2 + 4 + 4 + 8 = 18 B per parameter with Adam; Megatron dist_optimizer.md); with 16-bit
/// gradients it is the ZeRO paper's mixed-precision Adam (2 + 2 + 12 = 16 B).
template <StorageDtype Half = bf16, StorageDtype Grad = fp32>
struct mixed {
  static constexpr precision value =
      detail::named({"", Half::value, Grad::value, fp32::value, Half::value}, "mixed-",
                    Half::value.name, Grad::value.payload_bits == 32 ? "" : "-16bit-grads");
};

/// FP8 compute with 16-bit master weights (Transformer Engine): bf16 weights updated directly,
/// bf16 gradients, and an FP8 copy of each matmul weight plus its transpose (TE Float8Tensor).
struct fp8_compute {
  static constexpr precision value{.name = "fp8",
                                   .weights = bf16::value,
                                   .gradients = bf16::value,
                                   .master = {},
                                   .compute = fp8_e4m3::value,
                                   .autocast_weight_copies = false,
                                   .fp8_weight_copies = 2};
};

namespace detail::rules {
[[noreturn]] inline void gradients_take_the_parameters_format(const char* policy,
                                                              const char* weights,
                                                              const char* asked) {
  raise(std::string("gradients_take_the_parameters_format: under ") + policy +
        " autograd accumulates each .grad in its parameter's format (" + weights + "), not " +
        asked +
        "; a 16-bit policy with an fp32 master chooses (Megatron's fp32 "
        "main_grad, DeepSpeed's 16-bit partitions)");
}
[[noreturn]] inline void gradient_format_must_be_a_plain_float(const char* name) {
  raise(std::string("gradients are accumulated in a plain float format (fp32, bf16, fp16), "
                    "not ") +
        name);
}
}  // namespace detail::rules

/// `p` with its gradients kept in `g`: a choice only where an fp32 master separates the
/// gradients from the parameters (Megatron-LM accumulates fp32 main_grad, DeepSpeed and the
/// ZeRO paper 16-bit gradients); otherwise autograd's .grad has its parameter's format.
constexpr precision with_gradients(precision p, const element_format& g) {
  if (!g.storable || g.level1.block > 0 || g.payload_bits < 16)
    detail::rules::gradient_format_must_be_a_plain_float(g.name);
  const std::string_view asked = g.name;
  if (!p.has_master() && asked != p.weights.name)
    detail::rules::gradients_take_the_parameters_format(p.name, p.weights.name, g.name);
  if (asked == p.gradients.name) return p;
  // Named as mixed<> names its policies: "-16bit-grads" when they are the weights' format.
  char base[sizeof p.name] = {};
  detail::copy_prefix(base, p.name, std::string_view(p.name).find("-16bit-grads"));
  p.gradients = g;
  if (g.payload_bits == 32) return detail::named(p, base, "");
  if (asked == p.weights.name) return detail::named(p, base, "-16bit-grads");
  char suffix[sizeof p.name] = {};
  detail::copy_name(suffix, "-", g.name, "-grads");
  return detail::named(p, base, suffix);
}

}  // namespace vramfit
