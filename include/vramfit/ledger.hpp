// SPDX-License-Identifier: MIT
// The memory ledger: named entries (component, where it lives, bytes, tensors, source) from which
// totals, per-rank peaks and every report derive.
#pragma once

#include <cstdint>
#include <iterator>

#include "detail/static_vector.hpp"
#include "model.hpp"
#include "units.hpp"

namespace vramfit {

/// What an entry is, in the vocabulary of the ZeRO paper (model states) and beyond.
enum class component : unsigned char {
  weights,
  gradients,
  optimizer_states,
  master_weights,
  activations,
  kv_cache,
  buffers,
  overhead,  ///< the last: component_count follows it
};
inline constexpr int component_count = static_cast<int>(component::overhead) + 1;

constexpr const char* to_string(component c) {
  constexpr const char* names[component_count] = {
      "weights",     "gradients", "optimizer_states", "master_weights",
      "activations", "kv_cache",  "buffers",          "overhead"};
  return names[static_cast<int>(c)];
}

/// Where the bytes live.
enum class memory_space : unsigned char { device, host, nvme };

/// When the bytes are allocated (see peak() for the timeline).
enum class lifetime : unsigned char {
  persistent,        ///< from set-up to the end of training
  forward_backward,  ///< from forward to backward (saved activations, gathered layers, casts)
  optimizer_step,    ///< during the optimizer step (its temporaries)
  backward,          ///< transient at the start of backward (the logits' gradient)
  gradients,         ///< from backward through the optimizer step (gradients set to None)
  forward,           ///< transient during forward only (the eager attention mask)
  /// From forward to the backward of the loss and the head, which comes before every layer's
  /// (what the final norm, the head and the loss saved).
  until_head_backward,
  layer_backward,  ///< transient while a layer's backward runs (its gradients, its recompute)
  /// From the layers' backward to its end (communication buckets set up by the first gradient
  /// hook and released after backward).
  backward_pass,
};

constexpr const char* to_string(lifetime l) {
  constexpr const char* names[] = {
      "persistent", "forward/backward",          "optimizer step",   "backward",     "gradients",
      "forward",    "until the head's backward", "layers' backward", "backward pass"};
  static_assert(std::size(names) == static_cast<std::size_t>(lifetime::backward_pass) + 1,
                "a name for every lifetime");
  return names[static_cast<int>(l)];
}

/// The moments of a training step's timeline at which memory can peak.
enum class moment : unsigned char {
  end_of_forward,     ///< everything forward kept, plus its own transients (the loss's logits)
  start_of_backward,  ///< everything forward kept, plus the loss's gradients
  /// The first layer's backward: the layers' saved activations, one layer's gradients and its
  /// recompute; the loss and the head have freed what they kept. Later layers hold fewer saved
  /// activations and more gradients: that end of the range is end_of_backward.
  layer_backward,
  end_of_backward,  ///< the gradients, and what forward kept besides activations
  optimizer_step,   ///< the gradients and the step's temporaries
};

/// Every moment, in the order of the step.
inline constexpr moment moments[] = {moment::end_of_forward, moment::start_of_backward,
                                     moment::layer_backward, moment::end_of_backward,
                                     moment::optimizer_step};

constexpr const char* to_string(moment m) {
  constexpr const char* names[std::size(moments)] = {"end of forward", "start of backward",
                                                     "layers' backward", "end of backward",
                                                     "optimizer step"};
  return names[static_cast<int>(m)];
}

/// What an entry is to the step timeline and the tools, beside its component: set where the
/// entry is written, so that nothing finds an entry by the text it prints.
enum class entry_role : unsigned char {
  none,
  saved_activations,     ///< the layers' saved tensors, over the micro-batches kept
  embedding_inputs,      ///< what the embeddings keep for backward, and rotary tables
  logits,                ///< the loss's logits in forward
  activation_gradients,  ///< one layer's activation gradients in backward
  recomputed_layer,      ///< a layer's recomputed tensors (full recompute)
  reloaded_layer,        ///< a layer brought back from the host (activation offload)
  gathered_parameters,   ///< sharded parameters gathered: units at once, or the whole model
  root_gradients,        ///< the root unit's unsharded gradients, reduced last
  allocator_reserve,     ///< what the caching allocator reserves beyond the tensors
};

/// One line of a ledger. Names and sources are string literals: a ledger is cheap to build in a
/// constant expression and is never a template argument.
struct memory_entry {
  const char* name = "";
  vramfit::component component = component::weights;
  memory_space space = memory_space::device;
  vramfit::lifetime lifetime = lifetime::persistent;
  entry_role role = entry_role::none;
  bytes size{};
  std::int64_t tensors = 0;  ///< allocations behind the bytes (0 when not tensor-shaped)
  /// Of tensors of different sizes, the first allocated (the others share the rest equally);
  /// zero when they are alike.
  bytes first_tensor{};
  const char* source = "";  ///< where the formula comes from
  /// Set by the step timeline (timeline.hpp): the bytes of this entry alive at the step's peak,
  /// and the moment that peak belongs to. Untimed ledgers derive both from the lifetimes.
  bool timed = false;
  bytes at_peak{};
  moment peak_at = moment::end_of_forward;
};

/// A GPU's entries. Each add_entry call site adds at most one: 27 for the model states
/// (training.hpp), 9 for a step's activations (activations.hpp), 5 for the runtime overheads
/// (overheads.hpp), 41 in all; inference's ledger holds fewer.
using memory_ledger = detail::static_vector<memory_entry, 41>;

/// Appends an entry unless it is empty.
constexpr void add_entry(memory_ledger& ledger, const char* name, component what,
                         memory_space space, bytes size, std::int64_t tensors, const char* source,
                         lifetime when = lifetime::persistent, entry_role role = entry_role::none) {
  if (size == bytes{}) return;
  ledger.push_back({.name = name,
                    .component = what,
                    .space = space,
                    .lifetime = when,
                    .role = role,
                    .size = size,
                    .tensors = tensors,
                    .source = source});
}

/// The index of the entry of role `role`, or -1.
constexpr int entry_with(const memory_ledger& ledger, entry_role role) {
  for (std::size_t i = 0; i < ledger.size(); ++i)
    if (ledger[i].role == role) return static_cast<int>(i);
  return -1;
}

/// Bytes of the entries in `space`, optionally of one component.
constexpr bytes total(const memory_ledger& ledger, memory_space space = memory_space::device) {
  bytes sum{};
  for (const memory_entry& e : ledger)
    if (e.space == space) sum += e.size;
  return sum;
}
constexpr bytes total(const memory_ledger& ledger, component what,
                      memory_space space = memory_space::device) {
  bytes sum{};
  for (const memory_entry& e : ledger)
    if (e.space == space && e.component == what) sum += e.size;
  return sum;
}

/// Whether entry `e` is allocated at moment `m`.
constexpr bool alive_at(const memory_entry& e, moment m) {
  switch (e.lifetime) {
    case lifetime::persistent:
      return true;
    case lifetime::forward_backward:
      return m == moment::end_of_forward || m == moment::start_of_backward ||
             m == moment::layer_backward ||
             (m == moment::end_of_backward && e.component != component::activations);
    case lifetime::until_head_backward:
      return m == moment::end_of_forward || m == moment::start_of_backward;
    case lifetime::layer_backward:
      return m == moment::layer_backward;
    case lifetime::backward_pass:
      return m == moment::layer_backward || m == moment::end_of_backward;
    case lifetime::forward:
      return m == moment::end_of_forward;
    case lifetime::backward:
      return m == moment::start_of_backward;
    case lifetime::gradients:
      return m == moment::end_of_backward || m == moment::optimizer_step;
    case lifetime::optimizer_step:
      return m == moment::optimizer_step;
  }
  return false;
}

/// Device bytes allocated at moment `m`.
constexpr bytes total_at(const memory_ledger& ledger, moment m) {
  bytes sum{};
  for (const memory_entry& e : ledger)
    if (e.space == memory_space::device && alive_at(e, m)) sum += e.size;
  return sum;
}

/// Whether the step timeline has set what each entry holds at the peak.
constexpr bool is_timed(const memory_ledger& ledger) {
  for (const memory_entry& e : ledger)
    if (e.timed) return true;
  return false;
}

/// The moment of the step with the most device bytes (the first of equals); for a timed ledger,
/// the moment its timeline's peak event belongs to.
constexpr moment peak_moment(const memory_ledger& ledger) {
  for (const memory_entry& e : ledger)
    if (e.timed) return e.peak_at;
  moment most = moments[0];
  for (moment m : moments)
    if (total_at(ledger, m) > total_at(ledger, most)) most = m;
  return most;
}

/// The bytes of `e` allocated at the peak at `m`: what the timeline found for a timed entry; for
/// the others, all of them or none by their lifetime (entries appended after the timeline, such as
/// runtime overheads, are persistent).
constexpr bytes at_peak(const memory_entry& e, moment m) {
  if (e.timed) return e.at_peak;
  return alive_at(e, m) ? e.size : bytes{};
}

/// The device peak of one training step: the bytes at its fullest moment, not a sum of maxima.
constexpr bytes peak(const memory_ledger& ledger) {
  const moment m = peak_moment(ledger);
  bytes sum{};
  for (const memory_entry& e : ledger)
    if (e.space == memory_space::device) sum += at_peak(e, m);
  return sum;
}

/// Appends every entry of `more`.
constexpr void append(memory_ledger& ledger, const memory_ledger& more) {
  for (const memory_entry& e : more) ledger.push_back(e);
}

}  // namespace vramfit
