// SPDX-License-Identifier: MIT
// Reserved memory: the step timeline's allocations and frees, tensor by tensor, replayed through
// the simulated caching allocator, step after step until what it reserves stops growing.
#pragma once

#include <cstdint>
#include <vector>

#include "caching_allocator.hpp"
#include "timeline.hpp"

namespace vramfit {

/// What the caching allocator holds over training steps of one rank.
struct reserved_memory_estimate {
  bytes reserved{};   ///< peak reserved bytes in the steady state (reserved_bytes.all.peak)
  bytes allocated{};  ///< peak allocated bytes then (blocks at their rounded sizes)
  bytes largest_free_at_peak{};  ///< the largest cached free block at the allocated peak
  bytes first_step_reserved{};   ///< the first step's peak reserved
  /// The step after which reserved stays (1: the first step reserved it all); at most
  /// `reserved_steps_simulated`.
  std::int64_t stable_step = 1;
  /// Whether long layer runs were followed from shorter ones (their allocator state repeats).
  bool extrapolated = false;
  std::int64_t out_of_memory = 0;  ///< requests the device limit refused
};

/// Steps simulated before reserved memory is taken as stable.
inline constexpr std::int64_t reserved_steps_simulated = 4;

namespace detail {

/// A tensor the replay holds: its ledger entry, its layer (-1 outside the layers), its bytes and
/// the allocator's handle.
struct live_tensor {
  std::int64_t layer = -1;
  bytes size{};
  int handle = -1;
};

/// The sizes of a layer's tensors that `filter` takes, one per tensor.
constexpr std::vector<bytes> sizes_of(const std::vector<layer_piece>& pieces,
                                      const piece_filter& filter) {
  std::vector<bytes> sizes;
  for (const layer_piece& x : pieces)
    if (filter.takes(x))
      for (std::int64_t i = 0; i < x.count; ++i) sizes.push_back(x.size);
  return sizes;
}

/// `n` tensors sharing `total` bytes (the last takes the remainder).
constexpr std::vector<bytes> split_even(bytes total, std::int64_t n) {
  if (n < 1) n = 1;
  const bytes each{total.count / n};
  std::vector<bytes> sizes(static_cast<std::size_t>(n), each);
  sizes.back() += total - each * n;
  return sizes;
}

/// One replay of training steps with each layer run cut to `counts[r]` layers.
class step_replay {
 public:
  constexpr step_replay(const training& t, const activation_options& o, const step_timeline& tl,
                        std::int64_t stage, const alloc_conf& conf, allocator_limits limits,
                        const std::vector<std::int64_t>& counts)
      : t_(t), tl_(tl), alloc_(conf, limits), counts_(counts), live_(tl.ledger.size()) {
    const tensor_ledger tensors = vramfit::tensors(t.model);
    for (const timeline_run& r : tl.runs) {
      std::vector<layer_piece> pieces;
      for_each_layer_tensor(t, o, tensors, r.first, tl.layers.experts_per_rank, tl.layers.shards,
                            tl.layers.sharded_grads, r.full, [&](const layer_piece& x) {
                              if (x.count > 0 && x.size > bytes{}) pieces.push_back(x);
                            });
      run_pieces_.push_back(pieces);
    }
    parameters(t, stage);
  }

  /// Runs `steps` training steps; reserved peaks per step.
  constexpr std::vector<bytes> run(std::int64_t steps, reserved_memory_estimate& out) {
    std::vector<bytes> reserved;
    set_up(false);
    for (std::int64_t step = 1; step <= steps; ++step) {
      alloc_.reset_peaks();
      replay_step(step == 1);
      reserved.push_back(alloc_.stats().peak_reserved);
      if (step == 1) out.first_step_reserved = alloc_.stats().peak_reserved;
    }
    out.reserved = alloc_.stats().peak_reserved;
    out.allocated = alloc_.stats().peak_allocated;
    out.largest_free_at_peak = alloc_.stats().largest_free_at_peak;
    out.out_of_memory = alloc_.stats().oom;
    return reserved;
  }

 private:
  /// A parameter tensor of the stage: its elements, and its layer run (-1: outside the layers).
  struct parameter {
    std::int64_t elements = 0, layer = -1;
  };

  const training& t_;
  const step_timeline& tl_;
  caching_allocator alloc_;
  std::vector<std::int64_t> counts_;
  std::vector<std::vector<live_tensor>> live_;  ///< per ledger entry, in allocation order
  std::vector<std::vector<layer_piece>> run_pieces_;
  std::vector<parameter> parameters_;
  std::int64_t parameter_elements_ = 0, parameter_tensors_ = 0;  ///< of the stage, runs uncut

  [[nodiscard]] constexpr std::size_t run_of(std::int64_t layer) const {
    for (std::size_t r = 0; r < tl_.runs.size(); ++r)
      if (layer >= tl_.runs[r].first && layer < tl_.runs[r].first + tl_.runs[r].count) return r;
    return tl_.runs.size();
  }

  /// The stage's parameter tensors in the order the model registers them (optimizers and
  /// set-up follow it), their layers within the cut runs.
  constexpr void parameters(const training& t, std::int64_t stage) {
    const stage_range range = stage_of(t, stage);
    bool before_layers = true;
    for (const tensor_group& g : vramfit::tensors(t.model)) {
      before_layers = before_layers && g.layer_count == 0;
      if (g.role != tensor_role::parameter || !g.in_memory) continue;
      const std::int64_t copies = g.experts > 1 ? g.experts / t.layout.expert : std::int64_t{1};
      if (g.layer_count == 0) {
        if (!stage_holds(t.model, g, range, before_layers)) continue;
        parameter_elements_ += g.elements() * copies;
        parameter_tensors_ += copies;
        for (std::int64_t c = 0; c < copies; ++c) parameters_.push_back({g.elements(), -1});
        continue;
      }
      const std::int64_t first =
          g.first_layer > range.first_layer ? g.first_layer : range.first_layer;
      const std::int64_t end = g.first_layer + g.layer_count < range.first_layer + range.layers
                                   ? g.first_layer + g.layer_count
                                   : range.first_layer + range.layers;
      if (end <= first) continue;
      parameter_elements_ += checked_mul(g.elements() * copies, end - first);
      parameter_tensors_ += copies * (end - first);
      for (std::int64_t layer = first; layer < end; ++layer) {
        const std::size_t r = run_of(layer);
        if (r < tl_.runs.size() && layer >= tl_.runs[r].first + counts_[r]) {
          layer = tl_.runs[r].first + tl_.runs[r].count - 1;  // past the cut: the run's end
          continue;
        }
        for (std::int64_t c = 0; c < copies; ++c) parameters_.push_back({g.elements(), layer});
      }
    }
  }

  constexpr void hold(int entry, std::int64_t layer, bytes size, int stream = 0) {
    live_[static_cast<std::size_t>(entry)].push_back({layer, size, alloc_.allocate(size, stream)});
  }

  /// Frees the most recent tensor of `entry` in `layer` of `size` bytes, or if there is none
  /// (a later micro-batch's gradient added into one that exists), `size` of its latest.
  constexpr void drop(int entry, std::int64_t layer, bytes size) {
    std::vector<live_tensor>& held = live_[static_cast<std::size_t>(entry)];
    for (std::size_t i = held.size(); i-- > 0;)
      if (held[i].layer == layer && held[i].size == size) {
        alloc_.release(held[i].handle);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    drop_bytes(entry, size);
  }

  /// Frees the most recent tensors of `entry` until `total` bytes have gone.
  constexpr void drop_bytes(int entry, bytes total) {
    std::vector<live_tensor>& held = live_[static_cast<std::size_t>(entry)];
    while (total > bytes{} && !held.empty()) {
      total -= held.back().size;
      alloc_.release(held.back().handle);
      held.pop_back();
    }
  }

  /// Allocates the `total` bytes of `entry` made of `tensors` tensors: per parameter tensor
  /// (`tensors` a multiple of the stage's parameter tensors, such as Adam's two states or a
  /// foreach list), each its share by elements, in the model's order; else as equal tensors.
  constexpr void hold_all(int entry, bytes total, std::int64_t tensors) {
    if (parameter_tensors_ == 0 || tensors < parameter_tensors_ || tensors % parameter_tensors_) {
      for (bytes size : split_even(total, tensors)) hold(entry, -1, size);
      return;
    }
    for (const parameter& p : parameters_) {
      const bytes share{checked_mul(total.count / parameter_elements_, p.elements) +
                        total.count % parameter_elements_ * p.elements / parameter_elements_};
      for (bytes size : split_even(share, tensors / parameter_tensors_)) hold(entry, p.layer, size);
    }
  }

  /// The persistent tensors of the stage's device entries. The optimizer states come with the
  /// first step (torch.optim creates them in step()) unless `states`.
  constexpr void set_up(bool states) {
    for (std::size_t i = 0; i < tl_.ledger.size(); ++i) {
      const memory_entry& e = tl_.ledger[i];
      if (e.space != memory_space::device || e.lifetime != lifetime::persistent) continue;
      const bool lazy = e.component == component::optimizer_states && lazy_states();
      if (lazy == states) hold_all(static_cast<int>(i), e.size, e.tensors);
    }
  }

  /// PyTorch's optimizers create their states in the first step(); DeepSpeed at initialisation.
  [[nodiscard]] constexpr bool lazy_states() const {
    return t_.layout.implementation != shard_implementation::deepspeed &&
           !t_.optimizer.options.in_backward;
  }

  constexpr void replay_step(bool first_step) {
    bool states_made = !first_step || !lazy_states();
    for (std::size_t i = 0; i < tl_.events.size();) {
      const timeline_event& e = tl_.events[i];
      if (!states_made && e.phase == step_phase::optimizer) {
        set_up(true);
        states_made = true;
      }
      std::size_t j = i + 1;
      while (j < tl_.events.size() && same_run(e, tl_.events[j])) ++j;
      if (e.first_layer < 0) {
        replay(e, -1);
      } else {
        const std::size_t r = run_of(e.first_layer);
        const std::int64_t layers = r < tl_.runs.size() ? counts_[r] : e.layers;
        for (std::int64_t rep = 0; rep < layers; ++rep) {
          const std::int64_t layer = e.phase == step_phase::backward
                                         ? e.first_layer + layers - 1 - rep
                                         : e.first_layer + rep;
          for (std::size_t k = i; k < j; ++k) replay(tl_.events[k], layer);
        }
      }
      i = j;
    }
    if (!states_made) set_up(true);
  }

  /// One event: its tensors allocated or freed.
  constexpr void replay(const timeline_event& e, std::int64_t layer) {
    const std::size_t entry = static_cast<std::size_t>(e.entry);
    const bool allocates = e.delta > bytes{};
    const bytes total = allocates ? e.delta : -e.delta;
    std::vector<bytes> sizes;
    if (e.pieces && layer >= 0) {
      sizes = sizes_of(run_pieces_[run_of(layer)], *e.pieces);
      bytes sum{};
      for (bytes s : sizes) sum += s;
      if (sum != total) sizes = {total};
    } else if (allocates) {
      const memory_entry& x = tl_.ledger[entry];
      hold_all(e.entry, total, x.tensors > 1 && x.size == total ? x.tensors : 1);
      return;
    } else {
      drop_bytes(e.entry, total);
      return;
    }
    for (bytes size : sizes) {
      if (allocates)
        hold(e.entry, layer, size);
      else
        drop(e.entry, layer, size);
    }
  }
};

}  // namespace detail

/// Runs of at most this many layers are replayed layer by layer; a longer one is replayed at
/// three lengths `period` apart, congruent to its own, and followed from them when each period
/// adds the same (the allocator's state repeats with the layers' tensors).
inline constexpr std::int64_t replayed_layers = 48;
inline constexpr std::int64_t replay_period = 12;

/// The caching allocator over `reserved_steps_simulated` training steps of pipeline stage
/// `stage`, replaying its timeline tensor by tensor: the first step creates the optimizer states
/// in its step, later ones start with them and with the cache the earlier left.
constexpr reserved_memory_estimate reserved_memory(const training& t, const activation_options& o,
                                                   const alloc_conf& conf = {},
                                                   std::int64_t stage = 0,
                                                   allocator_limits limits = {}) {
  const step_timeline tl = step_timeline_of(t, o, stage);
  auto simulate = [&](const std::vector<std::int64_t>& counts) {
    reserved_memory_estimate out{};
    detail::step_replay replay(t, o, tl, stage, conf, limits, counts);
    const std::vector<bytes> per_step = replay.run(reserved_steps_simulated, out);
    out.stable_step = reserved_steps_simulated;
    while (out.stable_step > 1 &&
           per_step[static_cast<std::size_t>(out.stable_step - 2)] == per_step.back())
      --out.stable_step;
    return out;
  };
  std::vector<std::int64_t> base;
  for (const timeline_run& r : tl.runs)
    base.push_back(r.count <= replayed_layers ? r.count
                                              : 2 * replay_period + r.count % replay_period);
  const reserved_memory_estimate at_base = simulate(base);
  reserved_memory_estimate result = at_base;
  for (std::size_t r = 0; r < base.size(); ++r) {
    const std::int64_t n = tl.runs[r].count;
    if (n <= replayed_layers) continue;
    std::vector<std::int64_t> longer = base;
    longer[r] += replay_period;
    const reserved_memory_estimate one = simulate(longer);
    longer[r] += replay_period;
    const reserved_memory_estimate two = simulate(longer);
    // Per period, the larger of the two increments (equal when the state repeats).
    auto step_of = [](bytes a, bytes b, bytes c) { return b - a > c - b ? b - a : c - b; };
    const std::int64_t periods = (n - base[r]) / replay_period;
    result.reserved += step_of(at_base.reserved, one.reserved, two.reserved) * periods;
    result.allocated += step_of(at_base.allocated, one.allocated, two.allocated) * periods;
    result.first_step_reserved +=
        step_of(at_base.first_step_reserved, one.first_step_reserved, two.first_step_reserved) *
        periods;
    result.extrapolated = true;
  }
  return result;
}

}  // namespace vramfit
