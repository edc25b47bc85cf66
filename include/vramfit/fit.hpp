// SPDX-License-Identifier: MIT
// Does a plan fit a GPU? `fits<Plan, Gpu>` as a constexpr bool, and `check_fits<Plan, Gpu>()`,
// whose compile error shows the required and available bytes and the largest components.
#pragma once

#include "plan.hpp"

namespace vramfit {

/// What a fit check found, in bytes. Structural: compilers print it in full when it is a template
/// argument, which is how a failed check shows its numbers.
struct fit_report {
  bytes required{};   ///< the most loaded rank's peak plus runtime overheads
  bytes available{};  ///< the GPU's capacity
  bytes weights{}, gradients{}, optimizer_states{}, master_weights{}, activations{}, buffers{},
      overhead{};
  friend constexpr bool operator==(const fit_report&, const fit_report&) = default;
  [[nodiscard]] constexpr bool fits() const { return required <= available; }
};

/// The fit of plan `p` on GPU `g`.
constexpr fit_report fit(const training_plan_value& p, const gpu& g) {
  const memory_ledger l = breakdown(p, g);
  fit_report r{};
  r.required = peak(l);
  r.available = g.capacity;
  r.weights = total(l, component::weights);
  r.gradients = total(l, component::gradients);
  r.optimizer_states = total(l, component::optimizer_states);
  r.master_weights = total(l, component::master_weights);
  r.activations = total(l, component::activations);
  r.buffers = total(l, component::buffers);
  r.overhead = total(l, component::overhead);
  return r;
}

/// Whether `Plan` fits `G`.
template <TrainingPlan Plan, Gpu G>
inline constexpr bool fits = fit(Plan::value, G::value).fits();

namespace detail {
/// Instantiated with the numbers, so both g++ and clang++ print them in the error.
template <fit_report Report>
struct plan_must_fit_gpu_memory {
  static_assert(Report.fits(),
                "vramfit: the plan does not fit the GPU. The numbers are in the template argument "
                "above: fit_report{required, available, weights, gradients, optimizer_states, "
                "master_weights, activations, buffers, overhead} in bytes "
                "(see docs/troubleshooting.md#does-not-fit)");
  static constexpr bool value = true;
};
}  // namespace detail

/// A compile error naming vramfit and showing the required and available bytes unless `Plan`
/// fits `G`: `static_assert(vramfit::check_fits<Plan, vramfit::gpus::h100_80gb>());`.
template <TrainingPlan Plan, Gpu G>
constexpr bool check_fits() {
  return detail::plan_must_fit_gpu_memory<fit(Plan::value, G::value)>::value;
}

}  // namespace vramfit
