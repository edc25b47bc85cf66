// SPDX-License-Identifier: MIT
// Optimizers and the state tensors they allocate per parameter tensor, to the byte, as the
// reference implementations create them (torch.optim, bitsandbytes, Muon).
#pragma once

#include <concepts>
#include <cstdint>
#include <type_traits>

#include "detail/name.hpp"
#include "dtype.hpp"

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

/// How torch.optim runs the update (torch/optim/optimizer.py, _default_to_fused_or_foreach).
enum class optimizer_impl : unsigned char {
  foreach,   ///< the CUDA default: _foreach_* ops over all tensors, with list-sized temporaries
  fused,     ///< one fused kernel, no temporaries, step counters on the device
  for_loop,  ///< one tensor at a time (foreach=False)
};

/// Options shared by the optimizer types, e.g. `adamw<optimizer_options{.impl =
/// optimizer_impl::fused}>`.
struct optimizer_options {
  bool amsgrad = false;   ///< Adam/AdamW: keep max_exp_avg_sq too
  bool momentum = false;  ///< SGD, RMSprop: keep a momentum buffer
  bool centered = false;  ///< RMSprop: keep grad_avg too
  optimizer_impl impl = optimizer_impl::foreach;
  /// capturable=True keeps the step counters on the device, as fused does; otherwise torch.optim
  /// keeps them on the host (torch/optim/adam.py, _init_group).
  bool capturable = false;
  bool paged = false;       ///< bitsandbytes paged optimizers: states in host (unified) memory
  element_format states{};  ///< payload 0: states like the tensor the optimizer updates
  friend constexpr bool operator==(const optimizer_options&, const optimizer_options&) = default;
};

/// A structural description of an optimizer.
struct optimizer {
  char name[24] = {};
  optimizer_kind kind = optimizer_kind::sgd;
  std::int64_t moments = 0;  ///< full-size state tensors per parameter tensor
  std::int64_t scalars = 0;  ///< 0-d fp32 state tensors per parameter tensor (step, mu_product)
  optimizer_options options{};
};

/// A type that names an optimizer.
template <class T>
concept Optimizer = requires {
  { T::value } -> std::convertible_to<optimizer>;
}
&&std::same_as<std::remove_cvref_t<decltype(T::value)>, optimizer>;

namespace detail {
constexpr optimizer make_optimizer(const char* name, optimizer_kind kind, std::int64_t moments,
                                   std::int64_t scalars, const optimizer_options& o) {
  optimizer opt{{}, kind, moments, scalars, o};
  copy_name(opt.name, name, o.paged ? " (paged)" : "");
  return opt;
}
}  // namespace detail

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

}  // namespace vramfit
