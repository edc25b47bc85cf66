// SPDX-License-Identifier: MIT
// Optimizers and the state tensors they allocate per parameter tensor, to the byte, as the
// reference implementations create them (torch.optim, bitsandbytes, Muon).
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "detail/name.hpp"
#include "detail/tag.hpp"
#include "dtype.hpp"
#include "error.hpp"

namespace vramfit {

enum class optimizer_kind : unsigned char {
  sgd,
  adam,
  adagrad,
  rmsprop,
  adadelta,
  adamax,
  nadam,
  radam,
  rprop,
  lion,
  adafactor,
  adam_8bit,
  muon,
};

/// How the update runs (torch/optim/optimizer.py, _default_to_fused_or_foreach).
enum class optimizer_impl : unsigned char {
  automatic,  ///< what the implementation picks on CUDA (see default_implementation)
  foreach,    ///< _foreach_* ops over all tensors at once, with list-sized temporaries
  fused,      ///< one fused kernel, no temporaries, step counters on the device
  for_loop,   ///< one tensor at a time (foreach=False)
};

constexpr const char* to_string(optimizer_impl i) {
  constexpr const char* names[] = {"automatic", "foreach", "fused", "for-loop"};
  return names[static_cast<int>(i)];
}

/// Options shared by the optimizer types, e.g. `adamw<optimizer_options{.impl =
/// optimizer_impl::fused}>`.
struct optimizer_options {
  bool amsgrad = false;   ///< Adam/AdamW: keep max_exp_avg_sq too
  bool momentum = false;  ///< SGD, RMSprop: keep a momentum buffer
  bool centered = false;  ///< RMSprop: keep grad_avg too
  optimizer_impl impl = optimizer_impl::automatic;
  /// capturable=True keeps the step counters on the device, as fused does; otherwise torch.optim
  /// keeps them on the host (torch/optim/adam.py, _init_group).
  bool capturable = false;
  bool paged = false;  ///< bitsandbytes paged optimizers: states in host (unified) memory
  /// One optimizer per parameter stepped by its post-accumulate-grad hook, which then frees the
  /// gradient (torchtune optimizer_in_bwd, training/_optimizer_in_backward.py): no step at the
  /// end and no full set of gradients.
  bool in_backward = false;
  /// zero_grad(set_to_none): true frees the gradients after the step (torch >= 2.0's default);
  /// false zeroes them in place (torch < 2.0's default, pytorch/pytorch#92731), so they stay
  /// allocated between steps and each backward adds its new gradients into them.
  bool set_to_none = true;
  element_format states{};  ///< payload 0: states like the tensor the optimizer updates
  friend constexpr bool operator==(const optimizer_options&, const optimizer_options&) = default;
};

/// A structural description of an optimizer.
struct optimizer {
  char name[32] = {};
  optimizer_kind kind = optimizer_kind::sgd;
  std::int64_t moments = 0;  ///< full-size state tensors per parameter tensor
  std::int64_t scalars = 0;  ///< 0-d fp32 state tensors per parameter tensor (step, mu_product)
  optimizer_options options{};
};

/// A type that names an optimizer.
template <class T>
concept Optimizer = detail::tag_of<T, optimizer>;

/// The default update: torch.optim's foreach on CUDA (fused only when asked), but Adafactor's
/// for-loop unless foreach=True (torch/optim/_adafactor.py); Lion (lion-pytorch) and Muon loop
/// over the tensors; bitsandbytes updates in its own fused kernels.
constexpr optimizer_impl default_implementation(optimizer_kind k) {
  switch (k) {
    case optimizer_kind::adafactor:
    case optimizer_kind::lion:
    case optimizer_kind::muon:
      return optimizer_impl::for_loop;
    case optimizer_kind::adam_8bit:
      return optimizer_impl::fused;
    default:
      return optimizer_impl::foreach;
  }
}

/// Whether the optimizer's library offers `impl`: torch.optim has foreach and for-loop versions of
/// each optimizer and fused kernels for Adam(W), SGD and Adagrad (optimizer.py, _fused_doc); the
/// others come one way only.
constexpr bool offers(optimizer_kind k, optimizer_impl impl) {
  if (impl == optimizer_impl::automatic || impl == default_implementation(k)) return true;
  switch (k) {
    case optimizer_kind::lion:
    case optimizer_kind::muon:
    case optimizer_kind::adam_8bit:
      return false;
    case optimizer_kind::adam:
    case optimizer_kind::sgd:
    case optimizer_kind::adagrad:
      return true;
    default:
      return impl != optimizer_impl::fused;
  }
}

namespace detail {
namespace rules {
[[noreturn]] inline void optimizer_must_have_the_option(const char* name, const char* option) {
  raise(std::string(name) + " has no " + option +
        " (amsgrad: adam, adamw; momentum: sgd, rmsprop; centered: rmsprop)");
}
[[noreturn]] inline void optimizer_must_offer_the_implementation(const char* name,
                                                                 optimizer_impl impl) {
  raise(std::string(name) + " has no " + to_string(impl) +
        " implementation (fused: adam, adamw, sgd, adagrad; lion, muon and the 8-bit optimizers "
        "come one way only)");
}
}  // namespace rules

/// Whether `kind` has the option: amsgrad (torch.optim.Adam/AdamW), momentum (SGD, RMSprop),
/// centered (RMSprop).
constexpr bool has_option(optimizer_kind kind, const char* option) {
  const std::string_view o = option;
  if (o == "amsgrad") return kind == optimizer_kind::adam;
  if (o == "momentum") return kind == optimizer_kind::sgd || kind == optimizer_kind::rmsprop;
  return o == "centered" && kind == optimizer_kind::rmsprop;
}

constexpr optimizer make_optimizer(const char* name, optimizer_kind kind, std::int64_t moments,
                                   std::int64_t scalars, optimizer_options o) {
  if (!offers(kind, o.impl)) rules::optimizer_must_offer_the_implementation(name, o.impl);
  for (const auto& [set, option] :
       {std::pair{o.amsgrad, "amsgrad"}, std::pair{o.momentum, "momentum"},
        std::pair{o.centered, "centered"}})
    if (set && !has_option(kind, option)) rules::optimizer_must_have_the_option(name, option);
  if (o.impl == optimizer_impl::automatic) o.impl = default_implementation(kind);
  optimizer opt{{}, kind, moments, scalars, o};
  const bool chosen = o.impl != default_implementation(kind);
  copy_name(opt.name, name, o.paged ? " (paged)" : "",
            !chosen                             ? ""
            : o.impl == optimizer_impl::fused   ? " (fused)"
            : o.impl == optimizer_impl::foreach ? " (foreach)"
                                                : " (for-loop)");
  return opt;
}
}  // namespace detail

/// `opt` run by `impl` (automatic: its default), e.g. Adafactor with foreach=True.
constexpr optimizer with_implementation(const optimizer& opt, optimizer_impl impl) {
  optimizer_options o = opt.options;
  o.impl = impl;
  char base[sizeof opt.name] = {};  // the name without a previous implementation's suffix
  detail::copy_prefix(base, opt.name, std::string_view(opt.name).find(' '));
  return detail::make_optimizer(base, opt.kind, opt.moments, opt.scalars, o);
}

/// `opt` with its optional states switched on or off: Adam's and AdamW's amsgrad
/// (max_exp_avg_sq), SGD's and RMSprop's momentum (momentum_buffer), RMSprop's centered
/// (grad_avg); an option the optimizer does not have is an error.
constexpr optimizer with_state_options(const optimizer& opt, bool amsgrad, bool momentum,
                                       bool centered) {
  optimizer_options o = opt.options;
  o.amsgrad = amsgrad;
  o.momentum = momentum;
  o.centered = centered;
  char base[sizeof opt.name] = {};  // the name without "+option" or an implementation's suffix
  detail::copy_prefix(base, opt.name, std::string_view(opt.name).find_first_of(" +"));
  for (const auto& [set, option] : {std::pair{amsgrad, "amsgrad"}, std::pair{momentum, "momentum"},
                                    std::pair{centered, "centered"}})
    if (set && !detail::has_option(opt.kind, option))
      detail::rules::optimizer_must_have_the_option(base, option);
  std::int64_t tensors = opt.moments;
  if (opt.kind == optimizer_kind::sgd) tensors = momentum ? 1 : 0;
  if (opt.kind == optimizer_kind::adam) tensors = amsgrad ? 3 : 2;
  if (opt.kind == optimizer_kind::rmsprop) tensors = 1 + (momentum ? 1 : 0) + (centered ? 1 : 0);
  char name[sizeof opt.name] = {};
  detail::copy_name(name, base,
                    amsgrad    ? "+amsgrad"
                    : momentum ? "+momentum"
                               : "",
                    centered ? "+centered" : "");
  return detail::make_optimizer(name, opt.kind, tensors, opt.scalars, o);
}

// Each line: the state tensors the implementation creates for one parameter tensor.
/// torch.optim.SGD: momentum_buffer when momentum > 0, nothing otherwise.
template <optimizer_options O = optimizer_options{}>
struct sgd {
  static constexpr optimizer value = detail::make_optimizer(
      O.momentum ? "sgd+momentum" : "sgd", optimizer_kind::sgd, O.momentum ? 1 : 0, 0, O);
};
/// torch.optim.Adam: step, exp_avg, exp_avg_sq (+ max_exp_avg_sq with amsgrad).
template <optimizer_options O = optimizer_options{}>
struct adam {
  static constexpr optimizer value = detail::make_optimizer(
      O.amsgrad ? "adam+amsgrad" : "adam", optimizer_kind::adam, O.amsgrad ? 3 : 2, 1, O);
};
/// torch.optim.AdamW: the same states as Adam.
template <optimizer_options O = optimizer_options{}>
struct adamw {
  static constexpr optimizer value = detail::make_optimizer(
      O.amsgrad ? "adamw+amsgrad" : "adamw", optimizer_kind::adam, O.amsgrad ? 3 : 2, 1, O);
};
/// torch.optim.Adagrad: step, sum.
template <optimizer_options O = optimizer_options{}>
struct adagrad {
  static constexpr optimizer value =
      detail::make_optimizer("adagrad", optimizer_kind::adagrad, 1, 1, O);
};
/// torch.optim.RMSprop: step, square_avg (+ momentum_buffer, + grad_avg when centered).
template <optimizer_options O = optimizer_options{}>
struct rmsprop {
  static constexpr optimizer value = detail::make_optimizer(
      "rmsprop", optimizer_kind::rmsprop, 1 + (O.momentum ? 1 : 0) + (O.centered ? 1 : 0), 1, O);
};
/// torch.optim.Adadelta: step, square_avg, acc_delta.
template <optimizer_options O = optimizer_options{}>
struct adadelta {
  static constexpr optimizer value =
      detail::make_optimizer("adadelta", optimizer_kind::adadelta, 2, 1, O);
};
/// torch.optim.Adamax: step, exp_avg, exp_inf.
template <optimizer_options O = optimizer_options{}>
struct adamax {
  static constexpr optimizer value =
      detail::make_optimizer("adamax", optimizer_kind::adamax, 2, 1, O);
};
/// torch.optim.NAdam: step, mu_product, exp_avg, exp_avg_sq.
template <optimizer_options O = optimizer_options{}>
struct nadam {
  static constexpr optimizer value =
      detail::make_optimizer("nadam", optimizer_kind::nadam, 2, 2, O);
};
/// torch.optim.RAdam: step, exp_avg, exp_avg_sq.
template <optimizer_options O = optimizer_options{}>
struct radam {
  static constexpr optimizer value =
      detail::make_optimizer("radam", optimizer_kind::radam, 2, 1, O);
};
/// torch.optim.Rprop: step, prev, step_size.
template <optimizer_options O = optimizer_options{}>
struct rprop {
  static constexpr optimizer value =
      detail::make_optimizer("rprop", optimizer_kind::rprop, 2, 1, O);
};
/// Lion (Chen et al. 2023; lion-pytorch): exp_avg only.
template <optimizer_options O = optimizer_options{}>
struct lion {
  static constexpr optimizer value = detail::make_optimizer("lion", optimizer_kind::lion, 1, 0, O);
};
/// torch.optim.Adafactor: step, and a factored second moment: row_var and col_var for tensors
/// of two or more dimensions, a full variance for vectors.
template <optimizer_options O = optimizer_options{}>
struct adafactor {
  static constexpr optimizer value =
      detail::make_optimizer("adafactor", optimizer_kind::adafactor, 0, 1, O);
};
/// bitsandbytes Adam8bit/AdamW8bit (Dettmers et al. 2022): uint8 state1 and state2 with one fp32
/// absmax per 256 elements; tensors under 4096 elements keep fp32 states (min_8bit_size).
template <optimizer_options O = optimizer_options{}>
struct adamw_8bit {
  static constexpr optimizer value =
      detail::make_optimizer("adamw-8bit", optimizer_kind::adam_8bit, 2, 0, O);
};
/// Muon (Jordan et al. 2024, MuonWithAuxAdam): a momentum buffer for the hidden matrices; the
/// embedding, head and vector parameters use the auxiliary Adam (exp_avg, exp_avg_sq).
template <optimizer_options O = optimizer_options{}>
struct muon {
  static constexpr optimizer value = detail::make_optimizer("muon", optimizer_kind::muon, 1, 0, O);
};

/// The shape facts the state formulas need about one parameter tensor.
struct tensor_shape {
  std::int64_t elements = 0;
  std::int64_t last = 0;    ///< size of the last dimension (the input features of a linear)
  std::int64_t second = 0;  ///< size of the second-to-last dimension; 0 for vectors
  bool matrix_in_hidden_layers = false;  ///< a 2-D weight outside embedding and head (Muon)
};

/// Where one parameter tensor's optimizer states live.
struct state_size {
  bytes device{};
  bytes host{};
  std::int64_t device_tensors = 0;
  std::int64_t host_tensors = 0;
};

/// The state tensors `opt` allocates for one parameter tensor whose updated copy (master or
/// weight) is stored as `updated`.
constexpr state_size optimizer_state(const optimizer& opt, const tensor_shape& t,
                                     const element_format& updated) {
  const element_format& like = opt.options.states.payload_bits > 0 ? opt.options.states : updated;
  const std::int64_t n = t.elements;
  bytes states{};
  std::int64_t tensors = 0;
  switch (opt.kind) {
    case optimizer_kind::adafactor:
      // row_var has the shape with the last dimension 1, col_var with the second-to-last 1
      // (torch/optim/_adafactor.py, _init_group); vectors keep one full variance.
      if (t.second > 0) {
        states = storage_bytes(like, n / t.last) + storage_bytes(like, n / t.second);
        tensors = 2;
      } else {
        states = storage_bytes(like, n);
        tensors = 1;
      }
      break;
    case optimizer_kind::adam_8bit:
      // bitsandbytes Optimizer2State.init_state: uint8 state1/state2 and an fp32 absmax per 256
      // elements each, for tensors of at least min_8bit_size = 4096 elements; fp32 states below.
      if (n >= 4096) {
        states = 2 * (storage_bytes(uint8::value, n) + bytes{4 * detail::ceil_div(n, 256)});
        tensors = 4;
      } else {
        states = 2 * storage_bytes(fp32::value, n);
        tensors = 2;
      }
      break;
    case optimizer_kind::muon:
      tensors = t.matrix_in_hidden_layers ? 1 : 2;  // momentum_buffer, or the auxiliary Adam's
      states = storage_bytes(like, n) * tensors;
      break;
    default:
      tensors = opt.moments;
      states = tensors > 0 ? storage_bytes(like, n) * tensors : bytes{};
      break;
  }
  state_size s{};
  (opt.options.paged ? s.host : s.device) += states;
  (opt.options.paged ? s.host_tensors : s.device_tensors) += tensors;
  // The 0-d fp32 scalars (step, mu_product): on the device only when fused or capturable.
  const bool on_device = opt.options.impl == optimizer_impl::fused || opt.options.capturable;
  (on_device ? s.device : s.host) += bytes{4 * opt.scalars};
  (on_device ? s.device_tensors : s.host_tensors) += opt.scalars;
  return s;
}

/// One update step's temporaries beyond params, gradients and states (step 2 on), in the update's
/// format: torch.optim's foreach functions allocate whole lists at once, its for-loops per tensor,
/// a temporary bound to a local name living until the next tensor rebinds it.
struct step_scratch {
  std::int64_t lists = 0;       ///< foreach: lists as large as all updated tensors together
  std::int64_t current = 0;     ///< for-loop: copies of the tensor being updated
  std::int64_t previous = 0;    ///< for-loop: copies of the previous tensor, still bound
  bool larger_of_pair = false;  ///< for-loop: + a copy of the larger of the two (Adadelta)
  std::int64_t largest = 0;     ///< copies of the largest tensor (Rprop foreach: torch.where)
  bool largest_mask = false;    ///< + a bool mask of the largest tensor (Rprop foreach)
  /// For-loop Adafactor: a matrix's column norm needs its reduction's staging buffer beside the
  /// row and column means, more than the tensor-sized temporary for small matrices
  /// (column_norm_staging).
  bool column_norm = false;
};

/// The fp32 staging buffer and semaphores of a CUDA reduction over dim -2 of rows x cols: from 256
/// values per thread, 4 B x cols x ctas x 32 x 4, ctas taken for an H100 SXM's 132 SMs (ATen
/// Reduce.cuh setReduceConfig; H100 measurements: docs/sources.md#torch-optim).
constexpr bytes column_norm_staging(std::int64_t rows, std::int64_t cols) {
  const std::int64_t per_thread = detail::ceil_div(rows, 4);
  if (per_thread < 256) return {};
  constexpr std::int64_t resident_blocks = 132 * 16;
  const std::int64_t grid_x = detail::ceil_div(cols, 4 * 32);
  std::int64_t ctas = detail::ceil_div(resident_blocks, grid_x);
  if (detail::ceil_div(per_thread, 16) < ctas) ctas = detail::ceil_div(per_thread, 16);
  if (detail::ceil_div(per_thread, 256) > ctas) ctas = detail::ceil_div(per_thread, 256);
  const std::int64_t semaphores = detail::ceil_div(4 * grid_x, 512) * 512;
  return bytes{detail::checked_add(detail::checked_mul(512 * ctas, cols), semaphores)};
}

/// What `opt` allocates while it steps, by implementation (torch 2.11 torch/optim/*.py: each
/// line's _multi_tensor_* / _single_tensor_* statements; fused kernels update in place).
constexpr step_scratch step_scratch_of(const optimizer& opt) {
  const optimizer_impl impl = opt.options.impl == optimizer_impl::automatic
                                  ? default_implementation(opt.kind)
                                  : opt.options.impl;
  if (impl == optimizer_impl::fused) return {};
  const bool foreach = impl == optimizer_impl::foreach;
  switch (opt.kind) {
    case optimizer_kind::adam:   // exp_avg_sq_sqrt = _foreach_sqrt(...); for-loop: denom =
    case optimizer_kind::nadam:  // (exp_avg_sq.sqrt() / c).add_(eps): sqrt, quotient, last denom
      return foreach ? step_scratch{.lists = 1} : step_scratch{.current = 2, .previous = 1};
    case optimizer_kind::radam:  // buffer = _foreach_sqrt; for-loop (step >= 6): exp_avg / c,
      // its product with lr, exp_avg_sq.sqrt() and the adaptive rate at once
      return foreach ? step_scratch{.lists = 1} : step_scratch{.current = 4};
    case optimizer_kind::rmsprop:  // avg = _foreach_sqrt / square_avg.sqrt()
      return foreach ? step_scratch{.lists = 1} : step_scratch{.current = 1, .previous = 1};
    case optimizer_kind::adafactor:  // foreach: var_estimates; for-loop: var_estimate (carried)
      return foreach ? step_scratch{.lists = 1}
                     : step_scratch{.current = 1, .previous = 1, .column_norm = true};
    case optimizer_kind::adamax:  // _foreach_abs(grads) / grad.abs().add_(eps), unnamed
      return foreach ? step_scratch{.lists = 1} : step_scratch{.current = 1};
    case optimizer_kind::adagrad:  // std = _foreach_sqrt(sums), numerator = _foreach_mul(grads)
      return foreach ? step_scratch{.lists = 2} : step_scratch{.current = 1, .previous = 1};
    case optimizer_kind::adadelta:  // std and deltas: two lists / two loop-carried tensors
      return foreach ? step_scratch{.lists = 2}
                     : step_scratch{.current = 1, .previous = 1, .larger_of_pair = true};
    case optimizer_kind::rprop:  // signs = _foreach_mul; torch.where per tensor with its mask
      return foreach ? step_scratch{.lists = 1, .largest = 1, .largest_mask = true}
                     : step_scratch{.current = 3};  // grad.mul(prev).sign(), grad.clone(), sign
    case optimizer_kind::lion:  // lion-pytorch update_fn: exp_avg.clone().mul_(b1).add(grad)
      return {.current = 2};
    case optimizer_kind::muon:  // MuonWithAuxAdam adam_update: buf1c, buf2c, sqrt + eps and the
      // quotient, and the previous tensor's update (Newton-Schulz's X Xt products left out)
      return {.current = 4, .previous = 1};
    default:  // SGD (in place without weight decay), bitsandbytes (in-place kernels)
      return {};
  }
}

}  // namespace vramfit
