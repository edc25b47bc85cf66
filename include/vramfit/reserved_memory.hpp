// SPDX-License-Identifier: MIT
// Reserved memory: the step timeline's allocations and frees, tensor by tensor, replayed through
// the simulated caching allocator, step after step until what it reserves stops growing.
#pragma once

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "caching_allocator.hpp"
#include "timeline.hpp"

namespace vramfit {

/// What the caching allocator holds over training steps of one rank.
struct reserved_memory_estimate {
  bytes reserved{};   ///< peak reserved bytes in the steady state (reserved_bytes.all.peak)
  bytes allocated{};  ///< peak allocated bytes then (blocks at their rounded sizes)
  bytes largest_free_at_peak{};  ///< the largest cached free block at the allocated peak
  allocator_stats::pool large_at_peak{}, small_at_peak{};  ///< the two pools then
  bytes first_step_reserved{};                             ///< the first step's peak reserved
  /// The last step that reserved more (1: the first step reserved it all).
  std::int64_t stable_step = 1;
  std::int64_t out_of_memory = 0;  ///< requests the device limit refused
};

/// Steps simulated before reserved memory is taken as stable.
inline constexpr std::int64_t reserved_steps_simulated = 4;

/// How the replay may save work: `skip_repeats` leaves out what it proves would repeat exactly
/// (a step starting from the state the one before started from), `full` replays everything (the
/// tests compare the two byte for byte).
enum class replay_mode { skip_repeats, full };

namespace detail {

/// A tensor the replay holds (listed under its ledger entry): its layer (-1 outside the layers),
/// its bytes and the allocator's handle.
struct live_tensor {
  std::int64_t layer = -1;
  bytes size{};
  int handle = -1;
};

/// A parameter tensor of the stage: its elements, and its layer (-1: outside the layers).
struct replay_parameter {
  std::int64_t elements = 0, layer = -1;
};

/// The sizes of a layer's tensors that `filter` takes, one per tensor, into `sizes`.
constexpr void sizes_of(const std::vector<layer_piece>& pieces, const piece_filter& filter,
                        std::vector<bytes>& sizes) {
  for (const layer_piece& x : pieces)
    if (filter.takes(x))
      for (std::int64_t i = 0; i < x.count; ++i) sizes.push_back(x.size);
}
constexpr std::vector<bytes> sizes_of(const std::vector<layer_piece>& pieces,
                                      const piece_filter& filter) {
  std::vector<bytes> sizes;
  sizes_of(pieces, filter, sizes);
  return sizes;
}

/// Calls `take` with each of `n` tensors sharing `total` bytes (the last takes the remainder).
template <class Take>
constexpr void split_even(bytes total, std::int64_t n, Take&& take) {
  if (n < 1) n = 1;
  const bytes each{total.count / n};
  for (std::int64_t i = 1; i < n; ++i) take(each);
  take(total - each * (n - 1));
}

/// The elements and tensors of a stage's parameters, each routed expert's counted on its own
/// (as the ledger counts tensors).
struct parameter_counts {
  std::int64_t elements = 0, tensors = 0;
};

/// Writes the parameter tensors of stage `stage` into `held` in the order the model registers
/// them (optimizers and set-up follow it): one per expert, or, where `code` stacks the routed
/// experts, each weight's once per layer over the rank's experts.
constexpr parameter_counts stage_parameters(const training& t, model_code code, std::int64_t stage,
                                            std::vector<replay_parameter>& held) {
  held.clear();
  parameter_counts n{};
  const stage_range range = stage_of(t, stage);
  bool before_layers = true;
  for (const tensor_group& g : vramfit::tensors(t.model)) {
    before_layers = before_layers && g.layer_count == 0;
    if (g.role != tensor_role::parameter || !g.in_memory) continue;
    const std::int64_t copies = g.experts > 1 ? g.experts / t.layout.expert : std::int64_t{1};
    const bool stacked = g.kind == tensor_kind::expert && stacks_experts(code);
    const std::int64_t tensors = stacked ? 1 : copies;
    const std::int64_t elements = stacked ? checked_mul(g.elements(), copies) : g.elements();
    std::int64_t first = -1, end = 0;  // its layers on the stage; -1: one tensor outside them
    if (g.layer_count == 0) {
      if (!stage_holds(t.model, g, range, before_layers)) continue;
    } else {
      first = g.first_layer > range.first_layer ? g.first_layer : range.first_layer;
      end = g.first_layer + g.layer_count < range.first_layer + range.layers
                ? g.first_layer + g.layer_count
                : range.first_layer + range.layers;
      if (end <= first) continue;
    }
    const std::int64_t layers = first < 0 ? 1 : end - first;
    n.elements += checked_mul(checked_mul(g.elements(), copies), layers);
    n.tensors += checked_mul(copies, layers);
    for (std::int64_t layer = first; layer < (first < 0 ? 0 : end); ++layer)
      for (std::int64_t c = 0; c < tensors; ++c) held.push_back({elements, layer});
  }
  return n;
}

class step_replay;

}  // namespace detail

/// The buffers of the allocator's replay, kept from one replay to the next: a search that replays
/// many candidates (plan, min-gpus, the largest micro-batch) passes one, so that each replay
/// reuses the memory the ones before it took instead of allocating, and faulting in, megabytes
/// again, and starts from a copy of the state the one before reached once its persistent tensors
/// were made, when it makes the same. Opaque; its contents never change an answer.
class replay_scratch {
 public:
  constexpr replay_scratch() = default;

 private:
  friend class detail::step_replay;
  caching_allocator alloc_{};
  std::vector<std::vector<detail::live_tensor>> live_;  ///< per ledger entry
  std::vector<std::vector<bytes>> event_sizes_;         ///< per event
  std::vector<std::vector<layer_piece>> runs_;          ///< one layer's tensors per run
  std::vector<detail::replay_parameter> parameters_;
  std::vector<std::int64_t> state_, next_state_;  ///< the states steps started from
  std::vector<int> deferred_[2];
  /// The last replay's state once its persistent tensors were made (step_replay::start()), and
  /// what made them: the next replay with the same starts from a copy.
  caching_allocator start_alloc_{};
  std::vector<std::vector<detail::live_tensor>> start_live_;
  std::vector<std::int64_t> start_key_, next_start_key_;
};

namespace detail {

/// One replay of training steps of a stage, in the buffers of `scratch`.
class step_replay {
 public:
  constexpr step_replay(const training& t, const activation_options& o, const step_timeline& tl,
                        std::int64_t stage, const alloc_conf& conf, allocator_limits limits,
                        replay_mode mode, replay_scratch& scratch)
      : t_(t),
        tl_(tl),
        alloc_(scratch.alloc_),
        live_(scratch.live_),
        event_sizes_(scratch.event_sizes_),
        parameters_(scratch.parameters_),
        mode_(mode),
        deferred_(scratch.deferred_),
        state_(scratch.state_),
        next_state_(scratch.next_state_),
        scratch_(scratch) {
    alloc_.reset(conf, limits);
    live_.resize(tl.ledger.size());
    for (std::vector<live_tensor>& held : live_) held.clear();
    for (std::vector<int>& held : deferred_) held.clear();
    parameters_.clear();
    const tensor_ledger tensors = vramfit::tensors(t.model);
    std::vector<std::vector<layer_piece>>& runs = scratch.runs_;
    runs.resize(tl.runs.size());
    for (std::size_t r = 0; r < tl.runs.size(); ++r) {
      std::vector<layer_piece>& pieces = runs[r];
      pieces.clear();
      for_each_layer_tensor(t, o, tensors, tl.runs[r].first, tl.layers.experts_per_rank,
                            tl.layers.shards, tl.layers.sharded_grads, tl.runs[r].full,
                            [&](const layer_piece& x) {
                              if (x.count > 0 && x.size > bytes{}) pieces.push_back(x);
                            });
    }
    // Each layer event's tensors, one layer's (the whole bytes as one when they do not add up).
    event_sizes_.resize(tl.events.size());
    for (std::size_t i = 0; i < tl.events.size(); ++i) {
      const timeline_event& e = tl.events[i];
      std::vector<bytes>& sizes = event_sizes_[i];
      sizes.clear();
      if (e.pieces && e.first_layer >= 0) {
        sizes_of(runs[run_of(e.first_layer)], *e.pieces, sizes);
        bytes sum{};
        for (bytes size : sizes) sum += size;
        if (sum != (e.delta > bytes{} ? e.delta : -e.delta)) sizes.clear();
      }
    }
    const parameter_counts counts = stage_parameters(t, o.code, stage, parameters_);
    parameter_elements_ = counts.elements;
    parameter_tensors_ = counts.tensors;
    if (!t.optimizer.options.set_to_none)
      kept_gradients_ = entry_where(tl.ledger, component::gradients, lifetime::persistent);
  }

  /// Runs training steps until one after the second reserves nothing new.
  constexpr void run(reserved_memory_estimate& out) {
    start();
    bytes before{};
    // Deterministic replay: a step starting from its predecessor's start state repeats it and
    // ends the steps. Not compared after a step that reserved more (new segments), nor when step
    // 1 creates states: step 2 then mostly reserves more, and writing the state costs 5-10 %.
    const bool compares = mode_ == replay_mode::skip_repeats && !creates_states();
    bool saved = false;  // state_ holds the state the step before started from
    for (std::int64_t step = 1; step <= reserved_steps_simulated; ++step) {
      bool repeats = false;
      if (compares && (step == 2 || saved)) {
        const bool compared = saved;
        saved = write_state(repeats);
        repeats = repeats && compared && saved;
      } else {
        saved = false;
      }
      if (step > 2 && repeats) break;
      alloc_.reset_peaks();
      replay_step(step == 1);
      const bytes reserved = alloc_.stats().peak_reserved;
      if (step == 1) out.first_step_reserved = reserved;
      if (step > 1 && reserved == before) {
        if (step > 2) break;
      } else {
        out.stable_step = step;
        saved = false;
      }
      before = reserved;
    }
    out.reserved = alloc_.stats().peak_reserved;
    out.allocated = alloc_.stats().peak_allocated;
    out.largest_free_at_peak = alloc_.stats().largest_free_at_peak;
    out.large_at_peak = alloc_.stats().large_at_peak;
    out.small_at_peak = alloc_.stats().small_at_peak;
    out.out_of_memory = alloc_.stats().oom;
  }

 private:
  using parameter = replay_parameter;

  const training& t_;
  const step_timeline& tl_;
  caching_allocator& alloc_;
  std::vector<std::vector<live_tensor>>& live_;   ///< per ledger entry, in allocation order
  std::vector<std::vector<bytes>>& event_sizes_;  ///< per event: its tensors, when listed
  std::vector<parameter>& parameters_;
  /// The stage's parameter elements and tensors, each routed expert's counted on its own as the
  /// ledger counts them (parameters_ holds a stacked expert weight once).
  std::int64_t parameter_elements_ = 0, parameter_tensors_ = 0;
  replay_mode mode_ = replay_mode::skip_repeats;
  /// The gradients zero_grad(set_to_none=False) keeps (-1: none), which the first step makes.
  int kept_gradients_ = -1;
  bool first_step_ = false;
  /// The blocks record_stream frees hold (step_timeline::deferred): the gathered units', the
  /// gradients'.
  std::vector<int> (&deferred_)[2];
  std::vector<std::int64_t>& state_;       ///< the state this step starts from (write_state())
  std::vector<std::int64_t>& next_state_;  ///< the one before's, or a spare buffer
  replay_scratch& scratch_;                ///< for start()'s state

  /// set_up(made::at_start), or the state it reached restored when the replay before made the
  /// same persistent tensors: a search replays several micro-batches and recompute settings of
  /// one layout, and allocating its thousands of parameters and states again cost a third of
  /// the replays. The key lists every input of set_up(): the allocator's settings, the tensors
  /// held (entry, bytes, count) and the parameters they are split by.
  constexpr void start() {
    std::vector<std::int64_t>& key = scratch_.next_start_key_;
    key.clear();
    key.insert(key.end(), {static_cast<std::int64_t>(tl_.ledger.size()), parameter_elements_,
                           parameter_tensors_});
    for (std::size_t i = 0; i < tl_.ledger.size(); ++i)
      if (made_at_start(i))
        key.insert(key.end(),
                   {static_cast<std::int64_t>(i), tl_.ledger[i].size.count, tl_.ledger[i].tensors});
    for (const parameter& p : parameters_) key.insert(key.end(), {p.elements, p.layer});
    if (key == scratch_.start_key_ && alloc_.conf() == scratch_.start_alloc_.conf() &&
        alloc_.limits() == scratch_.start_alloc_.limits()) {
      alloc_ = scratch_.start_alloc_;
      live_ = scratch_.start_live_;
      return;
    }
    set_up(made::at_start);
    std::swap(scratch_.start_key_, key);
    scratch_.start_alloc_ = alloc_;
    scratch_.start_live_ = live_;
  }

  /// Writes the allocator's state and where each held tensor lies (its handle names a block,
  /// whose place is what matters) into state_, in buffers kept from step to step and from replay
  /// to replay: what state_ held moves to next_state_, and `same` says whether the two are equal,
  /// value for value. False, state_ emptied, when the allocator's state is not comparable.
  constexpr bool write_state(bool& same) {
    std::swap(state_, next_state_);
    state_.clear();
    same = false;
    if (!alloc_.append_state(state_)) return false;
    for (const std::vector<live_tensor>& held : live_) {
      state_.push_back(static_cast<std::int64_t>(held.size()));
      for (const live_tensor& x : held) {
        state_.insert(state_.end(), {x.layer, x.size.count, -1, -1});
        if (x.handle < 0) continue;  // refused: out of memory
        state_[state_.size() - 2] = alloc_.block_at(x.handle).segment;
        state_.back() = alloc_.block_at(x.handle).offset;
      }
    }
    same = state_ == next_state_;
    return true;
  }

  [[nodiscard]] constexpr std::size_t run_of(std::int64_t layer) const {
    for (std::size_t r = 0; r < tl_.runs.size(); ++r)
      if (layer >= tl_.runs[r].first && layer < tl_.runs[r].first + tl_.runs[r].count) return r;
    return tl_.runs.size();
  }

  /// Allocates a tensor of `entry` on `stream`: side streams take blocks from pools of their own.
  constexpr void hold(int entry, std::int64_t layer, bytes size,
                      alloc_stream stream = alloc_stream::main) {
    live_[static_cast<std::size_t>(entry)].push_back(
        {layer, size, alloc_.allocate(size, static_cast<int>(stream))});
  }

  /// Which of several alike tensors drop frees.
  enum class of_alike : unsigned char { latest, earliest };

  /// Frees a tensor of `entry` in `layer` of `size` bytes, or `size` of its latest if none (a later
  /// micro-batch's gradient added into one). Of several alike the latest, or the earliest: in
  /// backward a gradient dies once the next operator made its own (traced on an H200).
  constexpr void drop(int entry, std::int64_t layer, bytes size,
                      of_alike which = of_alike::latest) {
    std::vector<live_tensor>& held = live_[static_cast<std::size_t>(entry)];
    for (std::size_t k = 0; k < held.size(); ++k) {
      const std::size_t i = which == of_alike::earliest ? k : held.size() - 1 - k;
      if (held[i].layer == layer && held[i].size == size) {
        alloc_.release(held[i].handle);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
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
  /// foreach list), each its share by elements, in the model's order; else as equal tensors. A
  /// stacked expert weight's share is its experts' together.
  constexpr void hold_all(int entry, bytes total, std::int64_t tensors,
                          alloc_stream stream = alloc_stream::main) {
    if (parameter_tensors_ == 0 || tensors < parameter_tensors_ || tensors % parameter_tensors_) {
      split_even(total, tensors, [&](bytes size) { hold(entry, -1, size, stream); });
      return;
    }
    std::int64_t before = 0;  // elements of the tensors before: the shares add up to `total`
    for (const parameter& p : parameters_) {
      const bytes share{mul_div(total.count, before + p.elements, parameter_elements_) -
                        mul_div(total.count, before, parameter_elements_)};
      before += p.elements;
      split_even(share, tensors / parameter_tensors_,
                 [&](bytes size) { hold(entry, p.layer, size, stream); });
    }
  }

  /// When persistent tensors are made: at the start, or lazily in the first step.
  enum class made : unsigned char { at_start, in_first_step };

  /// The persistent tensors of the stage's device entries made `when`: the optimizer states
  /// come with the first step (torch.optim creates them in step()), the rest at the start. Kept
  /// gradients are made by the first step's backward (replay()); what it left out, if anything,
  /// comes with the states.
  constexpr void set_up(made when) {
    for (std::size_t i = 0; i < tl_.ledger.size(); ++i) {
      const memory_entry& e = tl_.ledger[i];
      if (!is_persistent(e) || made_at_start(i) != (when == made::at_start)) continue;
      if (static_cast<int>(i) != kept_gradients_) {
        hold_all(static_cast<int>(i), e.size, e.tensors);
        continue;
      }
      bytes held{};
      for (const live_tensor& x : live_[i]) held += x.size;
      if (held < e.size) hold(kept_gradients_, -1, e.size - held);
    }
  }
  [[nodiscard]] static constexpr bool is_persistent(const memory_entry& e) {
    return e.space == memory_space::device && e.lifetime == lifetime::persistent;
  }
  /// A persistent tensor made at the start, not in the first step.
  [[nodiscard]] constexpr bool made_at_start(std::size_t i) const {
    const memory_entry& e = tl_.ledger[i];
    return is_persistent(e) && !(e.component == component::optimizer_states && lazy_states()) &&
           static_cast<int>(i) != kept_gradients_;
  }

  /// Whether the first step creates optimizer states (lazily, holding bytes).
  [[nodiscard]] constexpr bool creates_states() const {
    if (!lazy_states()) return false;
    for (const memory_entry& e : tl_.ledger)
      if (e.space == memory_space::device && e.lifetime == lifetime::persistent &&
          e.component == component::optimizer_states && e.size > bytes{})
        return true;
    return false;
  }

  /// PyTorch's optimizers create their states in the first step(); DeepSpeed at initialisation.
  [[nodiscard]] constexpr bool lazy_states() const {
    return t_.layout.implementation != shard_implementation::deepspeed &&
           !t_.optimizer.options.in_backward;
  }

  constexpr void replay_step(bool first_step) {
    first_step_ = first_step;
    bool states_made = !first_step || !(lazy_states() || kept_gradients_ >= 0);
    for (std::size_t i = 0; i < tl_.events.size();) {
      const timeline_event& e = tl_.events[i];
      if (!states_made && e.phase == step_phase::optimizer) {
        set_up(made::in_first_step);
        states_made = true;
      }
      std::size_t j = i + 1;
      while (j < tl_.events.size() && same_run(e, tl_.events[j])) ++j;
      if (e.first_layer < 0) replay(i, -1);
      for (std::int64_t rep = 0; rep < e.layers && e.first_layer >= 0; ++rep)
        for (std::size_t k = i; k < j; ++k) replay(k, layer_at(e, rep));
      i = j;
    }
    if (!states_made) set_up(made::in_first_step);
    // What the step allocated and the timeline leaves standing at its end (the activations of a
    // pipeline's earlier micro-batches) goes with it.
    for (std::size_t i = 0; i < tl_.ledger.size(); ++i)
      if (tl_.ledger[i].lifetime != lifetime::persistent)
        drop_bytes(static_cast<int>(i), bytes{std::numeric_limits<std::int64_t>::max()});
  }

  /// With the first allocation of the gathered units or of a unit's gradients, the blocks that
  /// record_stream frees keep beside them (freed at once, passed later); with their free, those
  /// blocks are passed and cached.
  constexpr void deferred_frees_beside(const timeline_event& e) {
    const entry_role role = tl_.ledger[static_cast<std::size_t>(e.entry)].role;
    const bool gathered = role == entry_role::gathered_parameters;
    if (!gathered && role != entry_role::unit_gradients) return;
    const deferred_blocks& d = gathered ? tl_.deferred.gathered : tl_.deferred.gradients;
    std::vector<int>& held = deferred_[gathered ? 0 : 1];
    if (e.delta < bytes{}) {
      for (int handle : held) alloc_.complete_free(handle);
      held.clear();
      return;
    }
    if (!held.empty()) return;
    const auto stream = static_cast<int>(gathered ? alloc_stream::all_gather : alloc_stream::main);
    for (std::int64_t k = 0; k < d.count; ++k) held.push_back(alloc_.hold_freed(d.each, stream));
  }

  /// Event `i` in `layer`: its tensors allocated or freed. Without a list of its tensors, an
  /// allocation is the entry's tensors (equal ones, or per parameter), and a free takes the
  /// entry's latest tensors.
  constexpr void replay(std::size_t i, std::int64_t layer) {
    const timeline_event& e = tl_.events[i];
    const bool allocates = e.delta > bytes{};
    int entry = e.entry;
    // Under zero_grad(set_to_none=False) the first step's first micro-batch makes its new
    // gradients the .grad tensors, which stay: nothing is added into them, nothing freed.
    if (e.new_gradient && first_step_ && e.micro_batch == 0 && kept_gradients_ >= 0) {
      if (!allocates) return;
      entry = kept_gradients_;
    }
    const bytes total = allocates ? e.delta : -e.delta;
    const std::vector<bytes>& sizes = event_sizes_[i];
    const memory_entry& x = tl_.ledger[static_cast<std::size_t>(entry)];
    const bool whole = x.size == total && x.tensors > 1;  // the entry's tensors, all of them
    if (sizes.empty() && allocates && whole && x.first_tensor > bytes{}) {
      hold(entry, -1, x.first_tensor, e.stream);
      hold_all(entry, total - x.first_tensor, x.tensors - 1, e.stream);
    } else if (sizes.empty() && allocates) {
      hold_all(entry, total, whole ? x.tensors : 1, e.stream);
    } else if (sizes.empty()) {
      drop(entry, -1, total, of_alike::earliest);
    }
    for (bytes size : sizes) {
      if (allocates)
        hold(entry, layer, size, e.stream);
      else
        drop(entry, layer, size);
    }
    deferred_frees_beside(e);
  }
};

}  // namespace detail

/// The most layers a stage's replay takes, as its cost grows with them (the state after a layer
/// depends on all before, and whether the first step's states fit the freed cache is not monotone
/// in layers). Deeper stages take the fixed-share reserve.
inline constexpr std::int64_t max_replayed_layers = 1024;

namespace detail::rules {
[[noreturn]] inline void allocator_replay_needs_at_most_max_replayed_layers(std::int64_t layers) {
  raise("the caching allocator is simulated for stages of at most " + str(max_replayed_layers) +
        " layers, got " + str(layers) +
        " (take the fixed share: reserve_model::share, CLI --reserve share)");
}
}  // namespace detail::rules

/// Replays timeline `tl` of stage `stage` through the caching allocator step by step: the first
/// creates the optimizer states, which move later steps' activations to new segments, so steps run
/// until one after the second reserves nothing new, at most reserved_steps_simulated. In the
/// buffers of `scratch`, which the next replay reuses.
constexpr reserved_memory_estimate reserved_memory(const training& t, const activation_options& o,
                                                   const step_timeline& tl, const alloc_conf& conf,
                                                   std::int64_t stage, allocator_limits limits,
                                                   replay_mode mode, replay_scratch& scratch) {
  std::int64_t layers = 0;
  for (const timeline_run& r : tl.runs) layers += r.count;
  if (layers > max_replayed_layers)
    detail::rules::allocator_replay_needs_at_most_max_replayed_layers(layers);
  reserved_memory_estimate out{};
  detail::step_replay replay(t, o, tl, stage, conf, limits, mode, scratch);
  replay.run(out);
  return out;
}

/// The same in buffers of its own.
constexpr reserved_memory_estimate reserved_memory(const training& t, const activation_options& o,
                                                   const step_timeline& tl,
                                                   const alloc_conf& conf = {},
                                                   std::int64_t stage = 0,
                                                   allocator_limits limits = {},
                                                   replay_mode mode = replay_mode::skip_repeats) {
  replay_scratch scratch;
  return reserved_memory(t, o, tl, conf, stage, limits, mode, scratch);
}

/// The same, building the stage's timeline.
constexpr reserved_memory_estimate reserved_memory(const training& t, const activation_options& o,
                                                   const alloc_conf& conf = {},
                                                   std::int64_t stage = 0,
                                                   allocator_limits limits = {},
                                                   replay_mode mode = replay_mode::skip_repeats) {
  return reserved_memory(t, o, step_timeline_of(t, o, stage), conf, stage, limits, mode);
}

/// The parameter tensors of stage `stage` as the replay allocates them, in the order the model
/// registers them: each tensor's elements and layer (-1 outside the layers).
constexpr std::vector<detail::replay_parameter> replayed_parameters(const training& t,
                                                                    model_code code,
                                                                    std::int64_t stage = 0) {
  std::vector<detail::replay_parameter> held;
  detail::stage_parameters(t, code, stage, held);
  return held;
}

}  // namespace vramfit
