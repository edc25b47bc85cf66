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
  trained_weights,       ///< the weights trained, where some are frozen
  frozen_weights,        ///< the weights not trained, where some are trained
  saved_activations,     ///< the layers' saved tensors, over the micro-batches kept
  embedding_inputs,      ///< what the embeddings keep for backward, and rotary tables
  logits,                ///< the loss's logits in forward
  activation_gradients,  ///< one layer's activation gradients in backward
  recomputed_layer,      ///< a layer's recomputed tensors (full recompute)
  reloaded_layer,        ///< a layer brought back from the host (activation offload)
  dequantized_weight,    ///< a 4-bit weight dequantized for one matmul (bitsandbytes)
  gathered_parameters,   ///< sharded parameters gathered: units at once, or the whole model
  root_gradients,        ///< the root unit's unsharded gradients, reduced last
  unit_gradients,        ///< a layer unit's unsharded gradients in backward, until reduced
  /// Unsharded gradients added up over the micro-batches, reduced after the last (FSDP2 under
  /// torch.distributed.pipelining)
  accumulated_gradients,
  allocator_reserve,  ///< what the caching allocator reserves beyond the tensors
  outside_allocator,  ///< the CUDA context, library workspaces, NCCL's buffers
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
};

/// A GPU's entries. Each add_entry call site adds at most one, but NCCL's, one per communicator
/// kind: 27 for the model states (training.hpp), 12 for a step's activations (activations.hpp),
/// 11 for the runtime overheads (overheads.hpp: 6 of them NCCL's; plan.hpp: Transformer Engine's
/// workspace), 50 in all; inference's ledger holds fewer.
using memory_ledger = detail::static_vector<memory_entry, 50>;

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

/// The bytes of the entry of role `role`, zero when there is none.
constexpr bytes size_of(const memory_ledger& ledger, entry_role role) {
  const int at = entry_with(ledger, role);
  return at < 0 ? bytes{} : ledger[static_cast<std::size_t>(at)].size;
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

/// The moment of the step with the most device bytes by the entries' lifetimes (the first of
/// equals).
constexpr moment peak_moment(const memory_ledger& ledger) {
  moment most = moments[0];
  for (moment m : moments)
    if (total_at(ledger, m) > total_at(ledger, most)) most = m;
  return most;
}

/// The device peak of a ledger by its entries' lifetimes: the bytes at its fullest moment, not a
/// sum of maxima. A training step's peak is its timeline's (timed_ledger).
constexpr bytes peak(const memory_ledger& ledger) {
  return total_at(ledger, peak_moment(ledger));
}

/// A ledger and what each entry holds at the peak: a view of a training step's timeline
/// (timeline.hpp's ledger_of), or of a ledger without one by its lifetimes (by_lifetimes).
struct timed_ledger {
  memory_ledger entries{};
  detail::static_vector<bytes, memory_ledger::capacity> at_peak{};  ///< device bytes, per entry
  moment peak_at = moment::end_of_forward;  ///< the moment of the step the peak falls in
};

/// Appends `more`, each entry's bytes at the peak by its lifetime (runtime overheads are
/// persistent: all of them).
constexpr void append(timed_ledger& ledger, const memory_ledger& more) {
  for (const memory_entry& e : more) {
    ledger.entries.push_back(e);
    const bool at_peak = e.space == memory_space::device && alive_at(e, ledger.peak_at);
    ledger.at_peak.push_back(at_peak ? e.size : bytes{});
  }
}

/// A ledger without a timeline seen at its peak moment by the entries' lifetimes.
constexpr timed_ledger by_lifetimes(const memory_ledger& ledger) {
  timed_ledger out{.peak_at = peak_moment(ledger)};
  append(out, ledger);
  return out;
}

/// The device bytes at the peak.
constexpr bytes peak(const timed_ledger& ledger) {
  bytes sum{};
  for (bytes b : ledger.at_peak) sum += b;
  return sum;
}

/// The device bytes of one component at the peak.
constexpr bytes at_peak(const timed_ledger& ledger, component what) {
  bytes sum{};
  for (std::size_t i = 0; i < ledger.entries.size(); ++i)
    if (ledger.entries[i].component == what) sum += ledger.at_peak[i];
  return sum;
}

/// Appends every entry of `more`.
constexpr void append(memory_ledger& ledger, const memory_ledger& more) {
  for (const memory_entry& e : more) ledger.push_back(e);
}

}  // namespace vramfit
