// SPDX-License-Identifier: MIT
// Does a plan fit a GPU? `fits<Plan, Gpu>` as a constexpr bool, and `check_fits<Plan, Gpu>()`,
// whose compile error shows the required and available bytes and the largest components.
#pragma once

#include "plan.hpp"

namespace vramfit {

/// What a fit check found, in bytes. Structural: compilers print it in full when it is a template
/// argument, which is how a failed check shows its numbers.
struct fit_report {
  bytes required{};   ///< the most loaded rank's peak with what the metric counts beside it
  bytes available{};  ///< the GPU's capacity
  bytes weights{}, gradients{}, optimizer_states{}, master_weights{}, activations{}, kv_cache{},
      buffers{}, overhead{};
  friend constexpr bool operator==(const fit_report&, const fit_report&) = default;
  [[nodiscard]] constexpr bool fits() const { return required <= available; }
};

/// The fit report of a ledger (overheads included) on `device`, its peak counted by `metric`.
constexpr fit_report fit(const timed_ledger& ledger, const gpu& device,
                         memory_metric metric = memory_metric::nvidia_smi) {
  const memory_ledger& l = ledger.entries;
  fit_report r{};
  r.required = peak(ledger) - not_counted(l, metric);
  r.available = device.capacity;
  r.weights = total(l, component::weights);
  r.gradients = total(l, component::gradients);
  r.optimizer_states = total(l, component::optimizer_states);
  r.master_weights = total(l, component::master_weights);
  r.activations = total(l, component::activations);
  r.kv_cache = total(l, component::kv_cache);
  r.buffers = total(l, component::buffers);
  r.overhead = total(l, component::overhead);
  return r;
}

/// The fit of a training plan on GPU `device`: its most loaded rank.
constexpr fit_report fit(const training_plan_value& p, const gpu& device) {
  return fit(breakdown(p, device), device, p.overheads.metric);
}

/// The same, the allocator replayed in the buffers of `scratch`: a search that fits many plans
/// passes one to all, and each replay reuses the memory of the ones before.
constexpr fit_report fit(const training_plan_value& p, const gpu& device, replay_scratch& scratch) {
  return fit(breakdown(p, device, scratch), device, p.overheads.metric);
}

/// The fit of an inference plan on GPU `device`: its most loaded GPU.
constexpr fit_report fit(const inference_plan_value& p, const gpu& device) {
  return fit(breakdown(p, device), device, p.overheads.metric);
}

/// A training or an inference plan type.
template <class T>
concept Plan = TrainingPlan<T> || InferencePlan<T>;

/// Whether plan `P` fits `G`.
template <Plan P, Gpu G>
inline constexpr bool fits = fit(P::value, G::value).fits();

namespace detail {
/// Instantiated with the numbers, so both g++ and clang++ print them in the error.
template <fit_report Report>
struct plan_must_fit_gpu_memory {
  static_assert(Report.fits(),
                "vramfit: the plan does not fit the GPU. The numbers are in the template argument "
                "above: fit_report{required, available, weights, gradients, optimizer_states, "
                "master_weights, activations, kv_cache, buffers, overhead} in bytes "
                "(see docs/troubleshooting.md#does-not-fit)");
  static constexpr bool value = true;
};
}  // namespace detail

/// A compile error naming vramfit and showing the required and available bytes unless `Plan`
/// fits `G`: `static_assert(vramfit::check_fits<Plan, vramfit::gpus::h100_80gb>());`.
template <Plan P, Gpu G>
constexpr bool check_fits() {
  return detail::plan_must_fit_gpu_memory<fit(P::value, G::value)>::value;
}

}  // namespace vramfit
