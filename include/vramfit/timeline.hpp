// SPDX-License-Identifier: MIT
// The whole-step timeline: one training step of the most loaded rank as an ordered list of
// allocations and frees (forward layer by layer, the loss, backward in reverse, the optimizer step,
// zero_grad), whose maximum is the step's peak. Identical layers form runs whose peak is found in
// closed form, so a 1,000,000-layer model costs what a 2-layer one does.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "activations.hpp"

namespace vramfit {

/// The phases of a step, as the step tracer (tests/validation/step_trace.py) names them.
enum class step_phase : unsigned char { forward, loss, backward, optimizer, zero_grad };

constexpr const char* to_string(step_phase p) {
  constexpr const char* names[] = {"forward", "loss", "backward", "optimizer", "zero_grad"};
  return names[static_cast<int>(p)];
}

/// The kinds of tensor a layer's step allocates, as the timeline frees and allocates them.
/// A half's backward working set is the gradient entering its core (`core_gradient`: the down
/// projection's input gradient, eager softmax's fp32 gradient) and what the core makes from it;
/// eager attention's 16-bit score gradients come before and after it (layer_backward_working).
enum class layer_tensor : unsigned char {
  gradient,
  cast,
  saved,
  kept_input,
  core_gradient,
  working,
  gradient_before_core,
  gradient_after_core,
  value_gradient,           ///< eager attention's V gradient, which waits through the core
  parallel_input_gradient,  ///< a parallel block's MLP input gradient, which waits likewise
  output_gradient,          ///< eager attention's o_proj input gradient, read by the value matmul
  stream_gradient,          ///< the residual stream's: one tensor through the layers, not one each
  weighting_gradient,       ///< an MoE combine's gradients, before the experts'
  dequantized,              ///< a 4-bit weight's compute-format copy for one matmul (bitsandbytes)
  dequantize_scales,        ///< the fp32 absmax beside it in forward
  recompute_working,        ///< what a recompute holds beside its saved tensors (QLoRA's)
  kernel_workspace,         ///< a fused attention kernel's, inside its backward only
};

/// Tensors of one layer: `count` of `size` bytes each, of `kind`, in the attention (part 0) or MLP
/// (part 1) half.
struct layer_piece {
  layer_tensor kind = layer_tensor::saved;
  int part = 0;
  bool output_linear = false;  ///< of the half's output linear (o_proj, down_proj)
  bool selective = false;      ///< a saved tensor that selective recompute drops and recomputes
  bool cached = false;         ///< an autocast copy of a trained weight (cached to the region end)
  freed_at freed = freed_at::half_end;  ///< a saved tensor's free in its half's backward
  bytes size{};
  std::int64_t count = 1;
};

/// Which of a layer's tensors a timeline event allocates or frees: a kind, and where a field is
/// 0 or 1 only the pieces whose flag is that (-1: any).
struct piece_filter {
  layer_tensor kind = layer_tensor::saved;
  std::int8_t part = -1, output_linear = -1, selective = -1, cached = -1;
  std::optional<freed_at> freed{};

  [[nodiscard]] constexpr bool takes(const layer_piece& x) const {
    auto matches = [](std::int8_t want, bool flag) { return want < 0 || (want == 1) == flag; };
    return x.kind == kind && (part < 0 || part == x.part) &&
           matches(output_linear, x.output_linear) && matches(selective, x.selective) &&
           matches(cached, x.cached) && (!freed || *freed == x.freed);
  }
};

constexpr piece_filter pieces_of(layer_tensor kind, int part = -1, int output_linear = -1) {
  return {kind, static_cast<std::int8_t>(part), static_cast<std::int8_t>(output_linear)};
}

/// The CUDA stream an allocation is made on: the caching allocator keeps a pool per stream, and a
/// freed block goes back to its allocating stream's pool (CUDACachingAllocator.cpp get_free_block,
/// free_block), so a side stream never reuses the default stream's cache, nor the other way round.
enum class alloc_stream : unsigned char {
  main,            ///< the default (compute) stream
  reduce_scatter,  ///< the stream gradients are reduce-scattered on (frameworks.hpp)
  all_gather,      ///< the stream sharded parameters are all-gathered on
};

/// One allocation (delta > 0) or free (delta < 0) of the step, repeated over `layers` consecutive
/// layers from `first_layer` (forward: ascending; backward: descending) when first_layer >= 0.
/// Consecutive events of one phase with the same layer run form that run's per-layer pattern.
struct timeline_event {
  const char* what = "";  ///< a string literal
  step_phase phase = step_phase::forward;
  std::int64_t micro_batch = 0;  ///< 0: the first of the step; 1: each later one (all alike)
  std::int64_t first_layer = -1;
  std::int64_t layers = 0;
  bytes delta{};
  int entry = -1;  ///< the ledger entry whose bytes these are
  moment region = moment::end_of_forward;
  /// Of a layer run: which of the layer's tensors (for_each_layer_tensor) these bytes are.
  std::optional<piece_filter> pieces{};
  /// The stream an allocation is made on (a free goes to the pool its block came from).
  alloc_stream stream = alloc_stream::main;
  /// New gradients that backward adds into .grad tensors that exist, or their free once added:
  /// under zero_grad(set_to_none=False) the first step's first micro-batch makes them the .grad
  /// tensors, which stay (reserved_memory.hpp replays that step so).
  bool new_gradient = false;
};

/// Events of a step: at most about 56 outside the layers, and per layer run and micro-batch pass
/// 2 in forward and at most 50 in backward (step_writer); DeepSeek-V3's stage has 71. A vector,
/// as a timeline lives within one evaluation: a fixed capacity would be zeroed on every build.
using timeline_events = std::vector<timeline_event>;

/// Where a step peaks: after event `event`, in layer `layer` of its run (-1 outside layers).
struct step_peak {
  std::size_t event = 0;
  std::int64_t layer = -1;
  bytes alive{};
};

/// Layer runs of a stage: cut at each of the ledger's layer edges and where full recompute stops,
/// so at most one more than those cuts.
inline constexpr std::size_t max_layer_runs = decltype(layer_edges{}.at)::capacity + 2;

/// A run of identical layers of the stage [first, first + count), and whether each is fully
/// recomputed.
struct timeline_run {
  std::int64_t first = 0, count = 0;
  bool full = false;
};

/// How the stage's layers hold their tensors (for_each_layer_tensor's arguments).
struct layer_context {
  std::int64_t experts_per_rank = 1, shards = 1;
  bool sharded_grads = false;
};

/// A step's timeline: its ledger (each entry as large as it grows in the step) and each entry's
/// device bytes at the peak, its events, what is allocated when it starts (steady state: the
/// optimizer states exist) and its peak; its layer runs, which the events of layers refer to.
struct step_timeline {
  memory_ledger ledger{};
  detail::static_vector<bytes, memory_ledger::capacity> at_peak{};
  timeline_events events{};
  bytes at_start{};
  step_peak peak{};
  detail::static_vector<timeline_run, max_layer_runs> runs{};
  layer_context layers{};
  /// What record_stream frees keep reserved, not allocated: the replay holds it, the events not.
  detail::deferred_frees deferred{};
};

namespace detail {

/// Calls `visit(layer_piece)` for each tensor kind of one layer (gradients, autocast copies, saved
/// tensors, a recomputed input, backward's working set), split as autograd's reverse order frees
/// and allocates them: the MLP half first, each half from its output linear.
template <class Visit>
constexpr void for_each_layer_tensor(const training& t, const activation_options& o,
                                     const tensor_ledger& tensors, std::int64_t layer,
                                     std::int64_t experts_per_rank, std::int64_t shards,
                                     bool sharded_grads, bool full_recompute, Visit&& visit) {
  const model& m = t.model;
  const layout& l = t.layout;
  const bool moe = m.is_moe_layer(layer);
  for (const tensor_group& g : tensors) {
    if (!g.in_layer(layer)) continue;
    unsharded_states acc{};
    constexpr bool before_layers = false;
    add_group(t, g, {.first_layer = layer, .layers = 1, .first = false, .last = false},
              before_layers, experts_per_rank, shards, acc, group_parts::sizes);
    const int part = g.kind == tensor_kind::attention ? 0 : 1;
    const bool out = g.split == tp_split::input && g.rank == 2;
    // One tensor per weight (per routed expert, unless the code stacks them): its gradient and
    // its autocast copy.
    auto each = [&](layer_piece piece, bytes all, std::int64_t count) {
      if (all == bytes{}) return;
      if (count < 1) count = 1;
      const bytes size{all.count / count};
      piece.part = part;
      piece.output_linear = out;
      piece.size = size;
      piece.count = count - 1;
      visit(piece);
      piece.size = all - size * (count - 1);
      piece.count = 1;
      visit(piece);
    };
    const std::int64_t per =
        g.kind == tensor_kind::expert && stacks_experts(o.code) ? experts_per_rank : 1;
    each({.kind = layer_tensor::gradient},
         rank_share(acc.gradients, acc.dim0_gradients, l, sharded_grads),
         acc.trained_tensors / per);
    each({.kind = layer_tensor::cast, .cached = true}, acc.cast_copies - acc.frozen_cast_copies,
         acc.trained_tensors / per);
    each({.kind = layer_tensor::cast}, acc.frozen_cast_copies,
         (acc.weight_tensors - acc.trained_tensors) / per);
  }
  const bool input_grad = !layer_input_frozen(m, o, t.finetune, layer);
  for (const saved_tensor& x :
       layer_saved_tensors(m, t.precision, o, l, moe, t.finetune, input_grad))
    visit(layer_piece{
        .kind = layer_tensor::saved,
        .part = static_cast<int>(x.part),
        .output_linear = x.output_linear_input,
        .selective = o.recompute == recompute_kind::selective && x.recomputed_by_selective,
        .freed = x.freed,
        .size = x.size,
        .count = 1});
  if (full_recompute) {
    visit(layer_piece{
        .kind = layer_tensor::kept_input,
        .part = 0,
        .size = layer_activation_bytes(m, t.precision, o, l, moe, checkpoint_policy(o), t.finetune),
        .count = 1});
    visit(
        layer_piece{.kind = layer_tensor::recompute_working,
                    .part = 1,
                    .size = detail::qlora_recompute_working(m, t.precision, o, l, t.finetune, moe),
                    .count = 1});
  }
  // The backward's working tensors: the core's incoming gradient, then the rest as two of one
  // size: the gated MLP's mm and two products, the eager softmax's gradient, output and kernel
  // buffer, or o_proj's input gradient, then dQ, dK and dV.
  const layer_backward_working w = layer_backward_bytes(m, t.precision, o, l, moe);
  for (int part : {0, 1}) {
    const bytes all = part ? w.mlp : w.attention;
    const bytes incoming = part ? bytes{all.count / 3} : w.attention_incoming;
    const bytes half{(all - incoming).count / 2};
    visit(layer_piece{.kind = layer_tensor::core_gradient, .part = part, .size = incoming});
    visit(layer_piece{.kind = layer_tensor::working, .part = part, .size = half});
    visit(layer_piece{.kind = layer_tensor::working, .part = part, .size = all - incoming - half});
  }
  visit(layer_piece{.kind = layer_tensor::kernel_workspace, .size = w.attention_workspace});
  visit(layer_piece{.kind = layer_tensor::gradient_before_core,
                    .size = w.score_gradient,
                    .count = w.gradients_before});
  visit(layer_piece{.kind = layer_tensor::gradient_after_core,
                    .size = w.score_gradient,
                    .count = w.gradients_after});
  visit(layer_piece{.kind = layer_tensor::value_gradient, .size = w.value_gradient});
  visit(layer_piece{.kind = layer_tensor::output_gradient, .size = w.output_gradient});
  visit(layer_piece{
      .kind = layer_tensor::parallel_input_gradient, .part = 1, .size = w.parallel_input_gradient});
  visit(layer_piece{.kind = layer_tensor::stream_gradient, .size = w.stream_gradient});
  if (w.weighting_tensors > 0)
    visit(layer_piece{.kind = layer_tensor::weighting_gradient,
                      .part = 1,
                      .size = bytes{w.weighting.count / w.weighting_tensors},
                      .count = w.weighting_tensors});
  // bitsandbytes dequantizes for the input's gradient only when the input needs one.
  dequantized_weights d = dequantized_in_layer(t, tensors, layer);
  if (!input_grad) d.weight[0][0] = bytes{};
  for (int part : {0, 1})
    for (bool out : {false, true})
      visit(layer_piece{.kind = layer_tensor::dequantized,
                        .part = part,
                        .output_linear = out,
                        .size = d.weight[part][out]});
  visit(layer_piece{.kind = layer_tensor::dequantize_scales,
                    .part = 1,
                    .output_linear = true,
                    .size = d.scales,
                    .count = 2});
}

/// One layer's tensors summed the way the timeline uses them.
struct layer_pattern {
  bytes grads_out[2]{}, grads_rest[2]{};  ///< [layer_part]
  bytes saved_out[2]{}, saved_rest[2]{};
  bytes saved_core_start[2]{}, saved_core_end[2]{};  ///< freed around the working set (freed_at)
  bytes selective[2]{};  ///< saved tensors that selective recompute drops and recomputes
  bytes casts_out[2]{}, casts_rest[2]{};  ///< autocast weight copies
  bytes cached_casts{};  ///< of trained weights: autocast's cache holds them to the region's end
  bytes kept_input{};    ///< a fully recomputed layer: its input, kept from forward
  bytes recompute_working{};  ///< what its recompute holds beside them (qlora_recompute_working)
  bytes kernel_workspace{};  ///< the fused attention's, in its backward (fused_attention_workspace)
  bool full = false;
  layer_backward_working working{};  ///< with each core's incoming gradient, also apart:
  bytes core_gradient[2]{};          ///< [layer_part]
  /// Eager attention's score gradients before and after its core.
  bytes score_gradients_before{}, score_gradients_after{};
  /// Gradients that wait through the attention's core (layer_backward_working).
  bytes value_gradient{}, parallel_input_gradient{};
  bytes output_gradient{};     ///< eager attention's o_proj input gradient
  bytes stream_gradient{};     ///< the residual stream's (step_writer::stream_gradient)
  bytes weighting_gradient{};  ///< an MoE's combine (layer_backward_working::weighting)
  bytes dequantized[2][2]{};   ///< [layer_part][output linear] (dequantized_in_layer)
  bytes dequantize_scales{};
};

/// The sums of `p` a saved tensor `x` counts in, by when its half's backward frees it.
constexpr bytes (&saved_by_free(layer_pattern& p, const layer_piece& x))[2] {
  if (x.output_linear) return p.saved_out;
  switch (x.freed) {
    case freed_at::core_start:
      return p.saved_core_start;
    case freed_at::core_end:
      return p.saved_core_end;
    case freed_at::half_end:
      break;
  }
  return p.saved_rest;
}

constexpr layer_pattern pattern_of(const training& t, const activation_options& o,
                                   const tensor_ledger& tensors, std::int64_t layer,
                                   std::int64_t experts_per_rank, std::int64_t shards,
                                   bool sharded_grads, bool full_recompute) {
  layer_pattern p{};
  p.full = full_recompute;
  for_each_layer_tensor(t, o, tensors, layer, experts_per_rank, shards, sharded_grads,
                        full_recompute, [&](const layer_piece& x) {
                          const bytes all = x.size * x.count;
                          const int part = x.part;
                          switch (x.kind) {
                            case layer_tensor::gradient:
                              (x.output_linear ? p.grads_out : p.grads_rest)[part] += all;
                              break;
                            case layer_tensor::cast:
                              (x.output_linear ? p.casts_out : p.casts_rest)[part] += all;
                              if (x.cached) p.cached_casts += all;
                              break;
                            case layer_tensor::saved:
                              if (x.selective) p.selective[part] += all;
                              saved_by_free(p, x)[part] += all;
                              break;
                            case layer_tensor::kept_input:
                              p.kept_input += all;
                              break;
                            case layer_tensor::recompute_working:
                              p.recompute_working += all;
                              break;
                            case layer_tensor::kernel_workspace:
                              p.kernel_workspace += all;
                              break;
                            case layer_tensor::core_gradient:
                              p.core_gradient[part] += all;
                              [[fallthrough]];
                            case layer_tensor::working:
                              (part ? p.working.mlp : p.working.attention) += all;
                              break;
                            case layer_tensor::gradient_before_core:
                              p.score_gradients_before += all;
                              break;
                            case layer_tensor::gradient_after_core:
                              p.score_gradients_after += all;
                              break;
                            case layer_tensor::value_gradient:
                              p.value_gradient += all;
                              break;
                            case layer_tensor::parallel_input_gradient:
                              p.parallel_input_gradient += all;
                              break;
                            case layer_tensor::output_gradient:
                              p.output_gradient += all;
                              break;
                            case layer_tensor::stream_gradient:
                              p.stream_gradient = all;
                              break;
                            case layer_tensor::weighting_gradient:
                              p.weighting_gradient = all;
                              break;
                            case layer_tensor::dequantized:
                              p.dequantized[part][x.output_linear] = all;
                              break;
                            case layer_tensor::dequantize_scales:
                              p.dequantize_scales = all;
                              break;
                          }
                        });
  return p;
}

/// What one half of a layer saves.
constexpr bytes saved_total(const layer_pattern& p, int part) {
  return p.saved_out[part] + p.saved_core_start[part] + p.saved_core_end[part] + p.saved_rest[part];
}

/// What the forward keeps of a layer: everything it saves, or only its input when recomputed.
constexpr bytes forward_kept(const layer_pattern& p) {
  if (p.full) return p.kept_input;
  bytes sum{};
  for (int part : {0, 1}) sum += saved_total(p, part) - p.selective[part];
  return sum;
}

/// Which of a layer's tensors forward keeps: see forward_kept().
constexpr piece_filter kept_by_forward(const layer_pattern& p) {
  piece_filter kept = pieces_of(p.full ? layer_tensor::kept_input : layer_tensor::saved);
  kept.selective = 0;
  return kept;
}

constexpr bytes saved_total(const layer_pattern& p) {
  return saved_total(p, 0) + saved_total(p, 1);
}

constexpr bytes casts_total(const layer_pattern& p) {
  bytes sum{};
  for (int part : {0, 1}) sum += p.casts_out[part] + p.casts_rest[part];
  return sum;
}

/// Appends events and tracks the phase, micro-batch and moment they belong to.
struct event_writer {
  const memory_ledger& ledger;
  timeline_events& events;
  step_phase phase = step_phase::forward;
  std::int64_t micro_batch = 0;
  moment region = moment::end_of_forward;
  /// Sharded gradients made on a side stream: their entry (-1: none) and stream.
  int side_gradients = -1;
  alloc_stream gradient_stream = alloc_stream::main;
  bool new_gradient = false;  ///< the events written are timeline_event::new_gradient

  constexpr void add(const char* what, int entry, bytes delta, std::int64_t first_layer = -1,
                     std::int64_t layers = 0, std::optional<piece_filter> pieces = {},
                     alloc_stream stream = alloc_stream::main) {
    if (entry < 0 || delta == bytes{} || layers < 0) return;
    if (ledger[static_cast<std::size_t>(entry)].space != memory_space::device) return;
    if (entry == side_gradients && delta > bytes{} && phase == step_phase::backward)
      stream = gradient_stream;
    events.push_back({what, phase, micro_batch, first_layer, layers, delta, entry, region, pieces,
                      stream, new_gradient});
  }

  /// Allocates (sign 1) or frees (sign -1) every entry of lifetime `when` that `select` takes.
  template <class Select>
  constexpr void add_each(lifetime when, std::int64_t sign, Select&& select) {
    for (std::size_t i = 0; i < ledger.size(); ++i)
      if (ledger[i].lifetime == when && select(static_cast<int>(i)))
        add(ledger[i].name, static_cast<int>(i), ledger[i].size * sign);
  }
};

constexpr int entry_where(const memory_ledger& l, component c, lifetime when) {
  for (std::size_t i = 0; i < l.size(); ++i)
    if (l[i].component == c && l[i].lifetime == when) return static_cast<int>(i);
  return -1;
}

/// A run of identical layers [first, first + count) of the stage.
struct layer_run {
  std::int64_t first = 0, count = 0;
  layer_pattern pattern{};
};
/// A vector, not a static_vector: zeroing max_layer_runs patterns cost a sixth of a fit.
using layer_runs = std::vector<layer_run>;

/// Whether `b` continues the layer run pattern of `a`.
constexpr bool same_run(const timeline_event& a, const timeline_event& b) {
  return a.first_layer >= 0 && a.first_layer == b.first_layer && a.layers == b.layers &&
         a.phase == b.phase && a.micro_batch == b.micro_batch;
}

/// The layer of `e`'s run in its `rep`-th repetition (backward runs go down).
constexpr std::int64_t layer_at(const timeline_event& e, std::int64_t rep) {
  if (e.first_layer < 0) return -1;
  return e.phase == step_phase::backward ? e.first_layer + e.layers - 1 - rep : e.first_layer + rep;
}

/// Calls `visit(begin, end, repetitions, change)` for each pattern of events, in order, with the
/// total change of one repetition.
template <class Visit>
constexpr void for_each_pattern(const timeline_events& events, Visit&& visit) {
  for (std::size_t i = 0; i < events.size();) {
    std::size_t j = i + 1;
    while (j < events.size() && same_run(events[i], events[j])) ++j;
    bytes change{};
    for (std::size_t e = i; e < j; ++e) change += events[e].delta;
    visit(i, j, events[i].first_layer >= 0 ? events[i].layers : std::int64_t{1}, change);
    i = j;
  }
}

/// The highest total over the events. A pattern repeated k times changes the total by the same d
/// each time, so its highest point is in the first repetition (d <= 0) or the last (d > 0).
constexpr step_peak find_peak(const step_timeline& tl) {
  step_peak best{0, -1, tl.at_start};
  bytes alive = tl.at_start;
  bool found = false;
  for_each_pattern(tl.events, [&](std::size_t begin, std::size_t end, std::int64_t k, bytes d) {
    const std::int64_t rep = d > bytes{} ? k - 1 : 0;
    bytes here = alive + d * rep;
    for (std::size_t e = begin; e < end; ++e) {
      here += tl.events[e].delta;
      if (!found || here > best.alive) best = {e, layer_at(tl.events[e], rep), here};
      found = true;
    }
    alive += d * k;
  });
  return best;
}

/// Sets each entry's bytes at the peak (as the events left them there), and a transient device
/// entry's size to the most it holds at once in the step: a one-layer buffer may hold less than
/// its largest layer type, on a stage without that type or as its halves come and go.
constexpr void time_entries(step_timeline& tl) {
  bytes alive[memory_ledger::capacity]{}, most[memory_ledger::capacity]{},
      at[memory_ledger::capacity]{};
  for (std::size_t i = 0; i < tl.ledger.size(); ++i)
    if (tl.ledger[i].lifetime == lifetime::persistent)
      alive[i] = most[i] = at[i] = tl.ledger[i].size;
  // Per entry, over one repetition of a pattern: its change, its highest running change, its
  // running change up to the peak event, and 1 + the pattern's first event that names it.
  bytes change[memory_ledger::capacity]{}, high[memory_ledger::capacity]{},
      upto[memory_ledger::capacity]{};
  std::size_t named_first[memory_ledger::capacity]{};
  for_each_pattern(tl.events, [&](std::size_t begin, std::size_t end, std::int64_t k, bytes d) {
    const bool peak_here = tl.peak.event >= begin && tl.peak.event < end;
    const std::int64_t peak_rep = d > bytes{} ? k - 1 : 0;
    for (std::size_t e = begin; e < end; ++e) {
      const auto x = static_cast<std::size_t>(tl.events[e].entry);
      if (named_first[x] <= begin) {  // last named by an earlier pattern
        named_first[x] = e + 1;
        change[x] = high[x] = upto[x] = bytes{};
      }
      change[x] += tl.events[e].delta;
      if (change[x] > high[x]) high[x] = change[x];
      if (e <= tl.peak.event) upto[x] = change[x];
    }
    for (std::size_t e = begin; e < end; ++e) {
      const auto x = static_cast<std::size_t>(tl.events[e].entry);
      if (named_first[x] != e + 1) continue;  // each entry once
      const bytes top = alive[x] + (change[x] > bytes{} ? change[x] * (k - 1) : bytes{}) + high[x];
      if (top > most[x]) most[x] = top;
      if (peak_here) at[x] = alive[x] + change[x] * peak_rep + upto[x];
      alive[x] += change[x] * k;
    }
    if (tl.peak.event >= end)
      for (std::size_t i = 0; i < tl.ledger.size(); ++i) at[i] = alive[i];
  });
  for (std::size_t i = 0; i < tl.ledger.size(); ++i) {
    memory_entry& e = tl.ledger[i];
    if (e.lifetime != lifetime::persistent && e.space == memory_space::device) e.size = most[i];
    tl.at_peak.push_back(e.space == memory_space::device ? at[i] : bytes{});
  }
}

/// The gradients of the tensors after the layers (`all` bytes, a tied head's `tied` among them)
/// one tensor each, in backward's order: the tied head's, the head's, the final norm's. One
/// block where they do not add up.
using head_gradients = static_vector<bytes, 8>;
constexpr head_gradients head_gradient_tensors(const training& t, const tensor_ledger& tensors,
                                               const stage_range& range, bytes all, bytes tied,
                                               const layer_context& layers) {
  head_gradients out{};
  if (range.last) {
    head_gradients after_layers{};
    bool past_layers = false;
    for (const tensor_group& g : tensors) {
      past_layers = past_layers || g.layer_count > 0;
      if (!past_layers || g.layer_count > 0 || after_layers.size() == after_layers.capacity)
        continue;
      unsharded_states acc{};
      constexpr bool before_layers = false;
      add_group(t, g, {.first_layer = 0, .layers = 0, .first = range.first, .last = true},
                before_layers, layers.experts_per_rank, layers.shards, acc, group_parts::sizes);
      const bytes share =
          rank_share(acc.gradients, acc.dim0_gradients, t.layout, layers.sharded_grads);
      if (share > bytes{}) after_layers.push_back(share);
    }
    if (tied > bytes{}) out.push_back(tied);
    for (std::size_t i = after_layers.size(); i-- > 0 && out.size() < out.capacity;)
      out.push_back(after_layers[i]);
    bytes sum{};
    for (bytes b : out) sum += b;
    if (sum != all) out = {};
  }
  if (out.empty() && all > bytes{}) out.push_back(all);
  return out;
}

/// The ledger entries a step's events allocate and free, by their role in the step (-1: none).
struct step_roles {
  int saved, embedding_inputs, logits, working, recomputed, reloaded, casts, gradients,
      head_and_loss, logits_gradient, dequantized;
  int step;  ///< an optimizer in backward: one tensor's step temporaries
};

constexpr step_roles step_roles_of(const memory_ledger& ledger, bool in_backward) {
  return {entry_with(ledger, entry_role::saved_activations),
          entry_with(ledger, entry_role::embedding_inputs),
          entry_with(ledger, entry_role::logits),
          entry_with(ledger, entry_role::activation_gradients),
          entry_with(ledger, entry_role::recomputed_layer),
          entry_with(ledger, entry_role::reloaded_layer),
          entry_where(ledger, component::weights, lifetime::forward_backward),
          entry_where(ledger, component::gradients, lifetime::gradients),
          entry_where(ledger, component::activations, lifetime::until_head_backward),
          entry_where(ledger, component::activations, lifetime::backward),
          entry_with(ledger, entry_role::dequantized_weight),
          in_backward ? entry_where(ledger, component::buffers, lifetime::layer_backward) : -1};
}

/// The stage's layer runs, cut at the ledger's edges and where full recompute stops, each with
/// its layer's pattern; also listed in the timeline (tl.runs).
constexpr layer_runs layer_runs_of(const training& t, const activation_options& o,
                                   const tensor_ledger& tensors, const stage_range& range,
                                   step_timeline& tl) {
  static_vector<std::int64_t, max_layer_runs> cuts{};
  const std::int64_t end = range.first_layer + range.layers;
  const std::int64_t recompute_end = range.first_layer + checkpointed_layers(o, range.layers);
  for (std::int64_t cut : edges_of(tensors, t.finetune).at) cuts.push_back(cut);
  cuts.push_back(recompute_end);
  // The model's first layer over a frozen input is a run of its own (layer_input_frozen()).
  if (layer_input_frozen(t.model, o, t.finetune, range.first_layer))
    cuts.push_back(range.first_layer + 1);
  const layer_context& c = tl.layers;
  layer_runs runs;
  runs.reserve(cuts.size() + 1);
  for_each_layer_run(range.first_layer, end, cuts, [&](std::int64_t first, std::int64_t count) {
    runs.push_back({first, count,
                    pattern_of(t, o, tensors, first, c.experts_per_rank, c.shards, c.sharded_grads,
                               first < recompute_end)});
    tl.runs.push_back({first, count, first < recompute_end});
  });
  return runs;
}

/// The gradients outside the layers, split the way backward makes them: the head's (after the
/// loss) and the embeddings' (at the end), a tied embedding's with the head's; and the autocast
/// copies outside the layers: the embeddings' (ViT's patch convolution's weight) and the head's.
struct outside_layers {
  bool grads_per_layer = true;  ///< the layers' gradients fit the entry (else all come at once)
  bytes head_grads{}, tied_grads{}, untied_embedding_grads{};
  bytes embedding_casts{}, head_casts{};
  head_gradients head_pieces{};  ///< head_grads as backward allocates them
};

constexpr outside_layers outside_layers_of(const training& t, const tensor_ledger& tensors,
                                           const stage_range& range, const layer_runs& runs,
                                           const layer_context& c, bytes all_grads,
                                           bytes all_casts) {
  bytes layer_casts{}, layer_grads{};
  for (const layer_run& r : runs) {
    layer_casts += casts_total(r.pattern) * r.count;
    for (int part : {0, 1})
      layer_grads += (r.pattern.grads_out[part] + r.pattern.grads_rest[part]) * r.count;
  }
  outside_layers out{};
  out.grads_per_layer = layer_grads <= all_grads;
  const bytes grads = out.grads_per_layer ? all_grads - layer_grads : all_grads;
  const bytes casts = all_casts > layer_casts ? all_casts - layer_casts : bytes{};
  // The embeddings' share (the tensors before the first layer group, on the first stage). A tied
  // token embedding's is the head's and comes with it; the autograd engine holds it in the
  // leaf's input buffer until the embedding adds its own.
  bytes embedding{};
  if (range.first) {
    for (const tensor_group& g : tensors) {
      if (g.layer_count > 0) break;
      unsharded_states acc{};
      constexpr bool before_layers = true;
      add_group(t, g, {.first_layer = 0, .layers = 0, .first = true, .last = range.last},
                before_layers, c.experts_per_rank, c.shards, acc, group_parts::sizes);
      // A tied embedding's copy is the head's weight's, made by the head.
      if (g.split != tp_split::vocab) out.embedding_casts += acc.cast_copies;
      if (!out.grads_per_layer) continue;
      const bytes share = rank_share(acc.gradients, acc.dim0_gradients, t.layout, c.sharded_grads);
      embedding += share;
      if (t.model.tied_embeddings && g.split == tp_split::vocab) out.tied_grads += share;
    }
    if (embedding > grads) embedding = grads;
    if (out.tied_grads > embedding) out.tied_grads = embedding;
    if (out.embedding_casts > casts) out.embedding_casts = casts;
  }
  out.head_casts = casts - out.embedding_casts;
  out.head_grads = grads - embedding + out.tied_grads;
  out.untied_embedding_grads = embedding - out.tied_grads;
  out.head_pieces = head_gradient_tensors(t, tensors, range, out.head_grads, out.tied_grads, c);
  return out;
}

/// Writes the events of one training step into a timeline, phase by phase.
struct step_writer {
  const training& t;
  const activation_options& o;
  step_timeline& tl;
  const step_roles& e;
  const layer_runs& runs;
  const outside_layers& outside;
  event_writer w{tl.ledger, tl.events};
  int gathered = -1;      ///< the gathered parameters (entry_role::gathered_parameters)
  bytes gathered_side{};  ///< of them, what a side stream allocates
  int root_grads = -1;    ///< the root unit's gradients (entry_role::root_gradients)
  /// The unsharded gradients added up until the last micro-batch reduces them
  /// (entry_role::accumulated_gradients; none: each micro-batch reduces its own).
  int accumulated = -1;
  bool units = false;           ///< units gathered and reduced one by one (layout::gathers_units)
  gathered_units unit_bytes{};  ///< then what they hold unsharded
  bool units_released = false;  ///< the gathered units and layer gradients freed at the root

  [[nodiscard]] constexpr bytes size_of(int entry) const {
    return entry < 0 ? bytes{} : tl.ledger[static_cast<std::size_t>(entry)].size;
  }
  [[nodiscard]] constexpr bytes first_tensor(int entry) const {
    return entry < 0 ? bytes{} : tl.ledger[static_cast<std::size_t>(entry)].first_tensor;
  }
  [[nodiscard]] constexpr bool in_backward() const { return t.optimizer.options.in_backward; }
  /// Working buffers of sharded weights (gathered units) live from forward to the end of
  /// backward.
  [[nodiscard]] constexpr bool is_buffer(int i) const {
    return tl.ledger[static_cast<std::size_t>(i)].component == component::buffers;
  }
  /// The buffers of the layers' backward, but the root unit's gradients, which come with the
  /// head's and the embeddings' backward.
  [[nodiscard]] constexpr bool is_backward_buffer(int i) const {
    return is_buffer(i) && i != root_grads;
  }
  /// The writer's add for the frameworks' events (frameworks.hpp): what, entry, bytes.
  [[nodiscard]] constexpr auto adder() {
    return [this](const char* what, int entry, bytes delta) { w.add(what, entry, delta); };
  }
  /// Whether a micro-batch's new gradients are added into .grad tensors that exist: a later
  /// micro-batch's, and every one's when zero_grad(set_to_none=False) keeps them between steps.
  [[nodiscard]] constexpr bool adds_into_gradients(bool first_pass) const {
    return !first_pass || !t.optimizer.options.set_to_none;
  }
  /// Where a micro-batch's new gradients go: the gradients, or a working buffer that backward
  /// adds into them.
  [[nodiscard]] constexpr int gradient_entry(bool first_pass) const {
    return adds_into_gradients(first_pass) ? e.working : e.gradients;
  }
  /// A micro-batch's new gradients (`delta` > 0) where gradient_entry() says, or (`delta` < 0)
  /// their free once added into .grad tensors that exist; marked as new_gradient then.
  constexpr void new_gradients(bool first_pass, const char* what, bytes delta,
                               std::int64_t first = -1, std::int64_t count = 0,
                               std::optional<piece_filter> pieces = {}) {
    const bool added = adds_into_gradients(first_pass);
    if (delta < bytes{} && !added) return;  // they are the gradients: zero_grad frees them
    w.new_gradient = added;
    w.add(what, gradient_entry(first_pass), delta, first, count, pieces);
    w.new_gradient = false;
  }

  /// Allocates (sign 1) or frees (sign -1) the buffers that live from forward to the end of
  /// backward; the gathered parameters in two: what a side stream allocates, and the rest.
  constexpr void forward_backward_buffers(std::int64_t sign) {
    for (std::size_t i = 0; i < tl.ledger.size(); ++i) {
      const int x = static_cast<int>(i);
      if (tl.ledger[i].lifetime != lifetime::forward_backward || !is_buffer(x)) continue;
      if (x != gathered || gathered_side == bytes{}) {
        w.add(tl.ledger[i].name, x, tl.ledger[i].size * sign);
        continue;
      }
      w.add(tl.ledger[i].name, x, gathered_side * sign, -1, 0, {}, alloc_stream::all_gather);
      w.add(tl.ledger[i].name, x, (size_of(x) - gathered_side) * sign);
    }
  }

  /// After gradients of `grads` bytes are accumulated: under an optimizer in backward
  /// (torchtune optimizer_in_bwd), their step and zero_grad (set_to_none) right away.
  constexpr void stepped(bytes grads, std::int64_t first = -1, std::int64_t count = 0,
                         std::optional<piece_filter> pieces = {}) {
    if (!in_backward() || grads == bytes{}) return;
    w.add("optimizer step in backward", e.step, size_of(e.step), first, count);
    w.add("optimizer step in backward", e.step, -size_of(e.step), first, count);
    w.add("gradients freed after their step", e.gradients, -grads, first, count, pieces);
  }

  /// Forward: the inputs and tables, then each layer's autocast copies and saved tensors.
  constexpr void forward(bool first_pass) {
    w.phase = step_phase::forward;
    w.region = moment::end_of_forward;
    auto not_logits = [&](int i) { return i != e.logits; };
    if (first_pass) {
      bytes own_saved{};
      for (const layer_run& r : runs) own_saved += forward_kept(r.pattern) * r.count;
      const bytes all = size_of(e.saved);
      w.add("activations of earlier in-flight micro-batches", e.saved,
            all > own_saved ? all - own_saved : bytes{});
      forward_backward_buffers(1);
    }
    w.add("input ids, positions and rotary tables", e.embedding_inputs,
          size_of(e.embedding_inputs));
    w.add("embedding weight copies", e.casts, outside.embedding_casts);
    w.add_each(lifetime::forward, 1, not_logits);
    for (const layer_run& r : runs) {
      // A checkpointed layer's autograd keeps nothing: only the cache's copies stay.
      piece_filter cached = pieces_of(layer_tensor::cast);
      cached.cached = r.pattern.full ? 1 : -1;
      w.add("autocast weight copies", e.casts,
            r.pattern.full ? r.pattern.cached_casts : casts_total(r.pattern), r.first, r.count,
            cached);
      w.add("saved activations", e.saved, forward_kept(r.pattern), r.first, r.count,
            kept_by_forward(r.pattern));
      dequantized_forward(r);
    }
    w.add_each(lifetime::forward, -1, not_logits);
  }

  /// A 4-bit layer's last matmul in forward (and in its recompute), the MLP's output linear, over
  /// a dequantized copy of its weight and two fp32 absmax (dequantized_in_layer); by then the
  /// layer has saved nearly all it saves.
  constexpr void dequantized_forward(const layer_run& r) {
    const layer_pattern& p = r.pattern;
    auto add = [&](const char* what, bytes delta, piece_filter pieces) {
      w.add(what, e.dequantized, delta, r.first, r.count, pieces);
    };
    const piece_filter scales = pieces_of(layer_tensor::dequantize_scales);
    const piece_filter weight = pieces_of(layer_tensor::dequantized, 1, 1);
    add("4-bit matmul: absmax dequantized", p.dequantize_scales, scales);
    add("4-bit matmul: weight dequantized", p.dequantized[1][1], weight);
    add("4-bit matmul: absmax dequantized", -p.dequantize_scales, scales);
    add("4-bit matmul: weight dequantized", -p.dequantized[1][1], weight);
  }

  /// The bytes of the head-and-loss entry made before the logits: all of it, or without the
  /// log-probabilities when they are a tensor of their own.
  [[nodiscard]] constexpr bytes head_inputs() const {
    const bytes apart = first_tensor(e.head_and_loss);
    return apart > bytes{} ? apart : size_of(e.head_and_loss);
  }

  /// The loss: the head's casts, what the norm, head and loss keep, the logits while it runs.
  constexpr void loss() {
    w.phase = step_phase::loss;
    w.add("head weight copies", e.casts, outside.head_casts);
    // cross_entropy makes its log-probabilities from the logits' fp32 copy, before they go.
    w.add("final norm and head input", e.head_and_loss, head_inputs());
    w.add("logits", e.logits, size_of(e.logits));
    w.add("log-probabilities", e.head_and_loss, size_of(e.head_and_loss) - head_inputs());
    w.add("logits", e.logits, -size_of(e.logits));
    // Leaving the autocast region clears its weight-cast cache: a checkpointed layer's autograd
    // kept none of its casts, so they go now and come back with its recompute
    // (torch/utils/checkpoint.py restores the autocast state around the recomputation).
    for (const layer_run& r : runs)
      if (r.pattern.full)
        w.add("autocast cache cleared", e.casts, -r.pattern.cached_casts * r.count);
  }

  /// Backward through the loss and the head, to the last layer's output gradient.
  constexpr void head_backward(bool first_pass) {
    w.phase = step_phase::backward;
    w.region = moment::start_of_backward;
    // Made whole with the first backward, where the layers' share in fact grows layer by layer:
    // later micro-batches, which hold as many in-flight activations, find all of it.
    if (first_pass)
      w.add("unsharded gradients added up over the micro-batches", accumulated,
            size_of(accumulated));
    auto add_head_gradients = [&] {
      if (defers_root_gradients())
        return defer_head_gradients(unit_bytes, root_entries(first_pass), adder());
      for (bytes piece : outside.head_pieces)
        new_gradients(first_pass, "head and final norm gradients", piece);
    };
    const bytes loss_gradients = size_of(e.logits_gradient);
    if (o.loss == loss_kind::vocab_parallel) {
      // Megatron's gradient is its saved softmax, changed in place; the cast to the logits'
      // format is the one new tensor, and the softmax goes once it is made.
      w.add("logits gradient (cast to the logits' format)", e.logits_gradient, loss_gradients);
      w.add("softmax (the logits gradient, in place)", e.head_and_loss,
            -(size_of(e.head_and_loss) - head_inputs()));
      add_head_gradients();
      w.add("logits gradient (cast to the logits' format)", e.logits_gradient, -loss_gradients);
      w.add("final norm and head input", e.head_and_loss, -head_inputs());
    } else if (first_tensor(e.head_and_loss) > bytes{}) {
      // As traced (docs/gpu-measurements.md): nll_loss's gradient, then log_softmax's; the first
      // goes with the log-probabilities; the fp32 copy's backward casts the second to the logits'
      // 16-bit gradient, which lm_head's backward reads after the second has gone.
      const bytes nll{loss_gradients.count / 2};
      const bytes log_softmax = loss_gradients - nll;
      const bytes logits_16bit = first_tensor(e.logits);  // zero: the logits are the fp32 ones
      w.add("loss gradients", e.logits_gradient, nll);
      w.add("loss gradients", e.logits_gradient, log_softmax);
      w.add("loss gradients", e.logits_gradient, -nll);
      w.add("log-probabilities", e.head_and_loss, -(size_of(e.head_and_loss) - head_inputs()));
      w.add("logits gradient (16-bit)", e.logits_gradient, logits_16bit);
      w.add("loss gradients", e.logits_gradient, -log_softmax);
      add_head_gradients();
      w.add("logits gradient (16-bit)", e.logits_gradient, -logits_16bit);
      w.add("final norm and head input", e.head_and_loss, -head_inputs());
    } else {
      w.add("loss gradients", e.logits_gradient, loss_gradients);
      w.add("loss gradients", e.logits_gradient, -loss_gradients);
      w.add("final norm, head input and log-probabilities", e.head_and_loss,
            -size_of(e.head_and_loss));
      add_head_gradients();
    }
    if (!defers_root_gradients())
      new_gradients(first_pass, "head and final norm gradients", -outside.head_grads);
    // A tied head's gradient waits in the leaf's input buffer for the embedding's share.
    stepped(outside.head_grads - outside.tied_grads);
    w.add("residual stream gradient", e.working, stream_gradient());
    // The head's weight copies were saved for its input gradient: its backward frees them.
    w.add("head weight copies", e.casts, -outside.head_casts);
  }

  /// The residual stream's gradient (layer_backward_working::stream_gradient), from the head's
  /// backward to the embeddings'.
  [[nodiscard]] constexpr bytes stream_gradient() const {
    return runs.empty() ? bytes{} : runs.front().pattern.stream_gradient;
  }

  /// One half (part 0: attention, 1: MLP) of a layer run's backward: its output linear, its
  /// working set, the rest of its weights; each frees what it read.
  constexpr void half_backward(const layer_run& r, int part, bool first_pass, int layer_saved) {
    const layer_pattern& p = r.pattern;
    auto add = [&](const char* what, int entry, bytes delta, piece_filter pieces) {
      w.add(what, entry, delta, r.first, r.count, pieces);
    };
    const bool per_layer = outside.grads_per_layer;
    const bytes grads = per_layer ? p.grads_out[part] + p.grads_rest[part] : bytes{};
    const bytes grads_out = per_layer ? p.grads_out[part] : bytes{};
    const bytes grads_rest = per_layer ? p.grads_rest[part] : bytes{};
    piece_filter selective = pieces_of(layer_tensor::saved, part);
    selective.selective = 1;
    if (!p.full)
      add("recomputed by selective recompute", layer_saved, p.selective[part], selective);
    if (part) {  // an MoE's combine comes after its experts (torchtitan's fp32 weighting)
      add("MoE combine backward", e.working, p.weighting_gradient,
          pieces_of(layer_tensor::weighting_gradient));
      add("MoE combine backward", e.working, -p.weighting_gradient,
          pieces_of(layer_tensor::weighting_gradient));
    }
    new_gradients(
        first_pass,
        part ? "MLP output linear: weight gradients" : "attention output linear: weight gradients",
        grads_out, r.first, r.count, pieces_of(layer_tensor::gradient, part, 1));
    stepped(grads_out, r.first, r.count, pieces_of(layer_tensor::gradient, part, 1));
    // Eager attention: o_proj's input gradient, which the value matmul's backward reads.
    if (!part)
      add("attention output linear: input gradient", e.working, p.output_gradient,
          pieces_of(layer_tensor::output_gradient));
    add(part ? "MLP output linear: input freed" : "attention output linear: input freed",
        layer_saved, -p.saved_out[part], pieces_of(layer_tensor::saved, part, 1));
    // A linear's weight copy is saved for its input gradient and goes with its backward.
    add(part ? "MLP output linear: weight copy freed"
             : "attention output linear: weight copy freed",
        e.casts, -p.casts_out[part], pieces_of(layer_tensor::cast, part, 1));
    // What the ops around the working set read last (freed_at): eager attention's value matmul
    // frees its inputs before the softmax's backward, which frees its output.
    auto freed = [&](freed_at when) {
      piece_filter f = pieces_of(layer_tensor::saved, part, 0);
      f.freed = when;
      return f;
    };
    // The core's incoming gradient comes first: eager attention's fp32 softmax gradient is cast
    // from the value matmul's 16-bit one, which is allocated before that matmul's inputs go and
    // freed after the cast (traced on an H200: docs/timeline.md).
    const char* working_name = part ? "MLP backward working set" : "attention backward working set";
    const bytes incoming = p.core_gradient[part];
    const bytes working_set = (part ? p.working.mlp : p.working.attention) - incoming;
    // Eager attention's only (part 0): its 16-bit score gradients and what its core frees.
    const bytes before = part ? bytes{} : p.score_gradients_before;
    const bytes after = part ? bytes{} : p.score_gradients_after;
    // Its V gradient comes first (traced on an H200: docs/timeline.md), then the score gradient;
    // then its inputs and its incoming gradient go.
    if (!part)
      add("attention value matmul: V gradient (waits through the core)", e.working,
          p.value_gradient, pieces_of(layer_tensor::value_gradient));
    add("attention value matmul: score gradient", e.working, before,
        pieces_of(layer_tensor::gradient_before_core));
    add("attention value matmul: inputs freed", layer_saved, -p.saved_core_start[part],
        freed(freed_at::core_start));
    if (!part)
      add("attention output linear: input gradient", e.working, -p.output_gradient,
          pieces_of(layer_tensor::output_gradient));
    // A 4-bit output linear's input gradient is computed over its weight dequantized, and the
    // other linears' (gate and up, Q, K and V) beside the core's remaining gradients.
    auto dequantized = [&](bool out, int sign) {
      add(out ? "4-bit output linear: weight dequantized for the input gradient"
              : "4-bit input linears: weight dequantized for the input gradient",
          e.dequantized, p.dequantized[part][out] * sign,
          pieces_of(layer_tensor::dequantized, part, out));
    };
    dequantized(true, 1);
    add(working_name, e.working, incoming, pieces_of(layer_tensor::core_gradient, part));
    dequantized(true, -1);
    add("attention value matmul: score gradient", e.working, -before,
        pieces_of(layer_tensor::gradient_before_core));
    add(working_name, e.working, working_set, pieces_of(layer_tensor::working, part));
    if (!part) {  // the fused kernel's workspace, then its incoming gradient, go as it returns
      add("attention kernel: backward workspace", e.working, p.kernel_workspace,
          pieces_of(layer_tensor::kernel_workspace));
      add("attention kernel: backward workspace", e.working, -p.kernel_workspace,
          pieces_of(layer_tensor::kernel_workspace));
    }
    add(working_name, e.working, -incoming, pieces_of(layer_tensor::core_gradient, part));
    dequantized(false, 1);
    dequantized(false, -1);
    const bool eager_core = !part && p.score_gradients_before + p.score_gradients_after > bytes{};
    add(part         ? "MLP product or activation: inputs freed"
        : eager_core ? "attention softmax: output freed"
                     : "attention SDPA: its inputs and output freed",
        layer_saved, -p.saved_core_end[part], freed(freed_at::core_end));
    add("attention scores: gradients cast and scaled", e.working, after,
        pieces_of(layer_tensor::gradient_after_core));
    add(working_name, e.working, -working_set, pieces_of(layer_tensor::working, part));
    add("attention scores: gradients cast and scaled", e.working, -after,
        pieces_of(layer_tensor::gradient_after_core));
    if (!part)
      add("attention value matmul: V gradient (waits through the core)", e.working,
          -p.value_gradient, pieces_of(layer_tensor::value_gradient));
    new_gradients(first_pass, part ? "MLP weight gradients" : "attention weight gradients",
                  grads_rest, r.first, r.count, pieces_of(layer_tensor::gradient, part, 0));
    stepped(grads_rest, r.first, r.count, pieces_of(layer_tensor::gradient, part, 0));
    add(part ? "MLP saved tensors freed" : "attention saved tensors freed", layer_saved,
        -p.saved_rest[part], freed(freed_at::half_end));
    add(part ? "MLP weight copies freed" : "attention weight copies freed", e.casts,
        -p.casts_rest[part], pieces_of(layer_tensor::cast, part, 0));
    // A parallel block's MLP input gradient waits for the attention's in its norm's input buffer.
    add("parallel block: MLP input gradient (waits for the attention's)", e.working,
        part ? p.parallel_input_gradient : -p.parallel_input_gradient,
        pieces_of(layer_tensor::parallel_input_gradient));
    new_gradients(first_pass, "new weight gradients added into .grad", -grads, r.first, r.count,
                  pieces_of(layer_tensor::gradient, part));
  }

  /// A layer run's backward: what it reads comes back (recomputed, or from the host), then the
  /// MLP half and the attention half.
  constexpr void layer_backward(const layer_run& r, bool first_pass) {
    const layer_pattern& p = r.pattern;
    auto add = [&](const char* what, int entry, bytes delta, piece_filter pieces) {
      w.add(what, entry, delta, r.first, r.count, pieces);
    };
    // Selective checkpoint contexts need use_reentrant=False (torch/utils/checkpoint.py).
    const bool held = p.full && o.reentrant_checkpoint && o.recompute != recompute_kind::op_sac;
    // What the layer's backward reads and frees: its recompute, what offloading brings back
    // from the host (its forward kept it there), or what autograd kept on the device.
    const int layer_saved = p.full ? e.recomputed : o.offload ? e.reloaded : e.saved;
    if (!p.full && o.offload)
      add("saved tensors brought back from the host", e.reloaded, forward_kept(p),
          kept_by_forward(p));
    if (p.full) {
      add("recomputed layer", e.recomputed, saved_total(p), pieces_of(layer_tensor::saved));
      add("QLoRA recompute: adapter outputs and the layer's locals", e.recomputed,
          p.recompute_working, pieces_of(layer_tensor::recompute_working));
      add("QLoRA recompute: adapter outputs and the layer's locals", e.recomputed,
          -p.recompute_working, pieces_of(layer_tensor::recompute_working));
      add("recomputed layer's autocast weight copies", e.casts, casts_total(p),
          pieces_of(layer_tensor::cast));
      dequantized_forward(r);
      // torch/utils/checkpoint.py CheckpointFunction.backward: its grad argument lives until
      // the inner torch.autograd.backward returns.
      if (held)
        add("reentrant checkpoint: output gradient held", e.working, p.kept_input,
            pieces_of(layer_tensor::kept_input));
    }
    for (int part : {1, 0}) half_backward(r, part, first_pass, layer_saved);
    if (held)
      add("reentrant checkpoint: output gradient held", e.working, -p.kept_input,
          pieces_of(layer_tensor::kept_input));
    if (p.full)
      add("checkpointed layer input freed", e.saved, -p.kept_input,
          pieces_of(layer_tensor::kept_input));
  }

  /// The embeddings' gradients; a tied one already exists (the head's): the engine's input
  /// buffer adds embedding_dense_backward's output to it out of place (traced on an H200), and
  /// the sum becomes the gradient.
  constexpr void embedding_backward(bool first_pass) {
    w.region = moment::end_of_backward;
    w.add("residual stream gradient", e.working, -stream_gradient());
    const bytes tied = outside.tied_grads, untied = outside.untied_embedding_grads;
    if (!defers_root_gradients()) {
      w.add("embedding gradient (added into the tied head's)", e.working, tied);
      if (!adds_into_gradients(first_pass)) {
        w.add("tied gradient: the head's plus the embedding's", e.gradients, tied);
        w.add("tied gradient: the head's plus the embedding's", e.gradients, -tied);
      }
      w.add("embedding gradient (added into the tied head's)", e.working, -tied);
      new_gradients(first_pass, "embedding gradients", untied);
      new_gradients(first_pass, "embedding gradients", -untied);
    }
    stepped(tied + untied);
    w.add("input ids, positions and rotary tables", e.embedding_inputs,
          -size_of(e.embedding_inputs));
    // The convolution's backward frees the weight copy it saved for its input gradient.
    w.add("embedding weight copies", e.casts, -outside.embedding_casts);
    const bool last_pass = !first_pass || o.micro_batches == 1;
    if (units && last_pass) release_backward_buffers();
    if (defers_root_gradients() && accumulated >= 0 && !last_pass)
      root_accumulate(unit_bytes, root_entries(first_pass), adder());
    else if (defers_root_gradients())
      root_post_backward(unit_bytes, root_entries(first_pass),
                         outside.head_grads + outside.untied_embedding_grads, first_pass, adder());
    if (last_pass)
      w.add("unsharded gradients reduced after the last micro-batch", accumulated,
            -size_of(accumulated));
  }

  /// Where the root unit's gradient events go.
  [[nodiscard]] constexpr root_gradient_entries root_entries(bool first_pass) const {
    return {root_grads, gradient_entry(first_pass), e.working};
  }
  /// Whether the root's sharded gradients come at its post-backward (with an optimizer in
  /// backward, each gradient is stepped as it comes, as without units).
  [[nodiscard]] constexpr bool defers_root_gradients() const {
    return units && root_grads >= 0 && !in_backward();
  }

  /// The buffers of the forward and the layers' backward freed: at the optimizer step, or with
  /// units at the root's post-backward of the last micro-batch, every layer having been
  /// resharded and reduced before (frameworks.hpp).
  constexpr void release_backward_buffers() {
    if (units_released) return;
    forward_backward_buffers(-1);
    w.add_each(lifetime::backward_pass, -1, [&](int i) { return is_backward_buffer(i); });
    units_released = true;
  }

  enum class pass : unsigned char { first, later };
  /// One micro-batch's forward and backward (the first, or each later one: all alike).
  constexpr void micro_batch(pass which) {
    const bool first_pass = which == pass::first;
    w.micro_batch = first_pass ? 0 : 1;
    forward(first_pass);
    loss();
    head_backward(first_pass);
    w.region = moment::layer_backward;
    if (first_pass)
      w.add_each(lifetime::backward_pass, 1, [&](int i) { return is_backward_buffer(i); });
    for (std::size_t i = runs.size(); i-- > 0;) layer_backward(runs[i], first_pass);
    embedding_backward(first_pass);
  }

  /// The optimizer step and its temporaries; zero_grad(set_to_none=True) frees the gradients
  /// (set_to_none=False zeroes them in place: their entry persists).
  constexpr void optimizer_step() {
    release_backward_buffers();
    w.phase = step_phase::optimizer;
    w.region = moment::optimizer_step;
    const bytes grads = size_of(e.gradients);
    const bytes reduced_away = reduced_before_step(t.layout, e.gradients, grads, adder());
    auto any = [](int) { return true; };
    w.add_each(lifetime::optimizer_step, 1, any);
    w.add_each(lifetime::optimizer_step, -1, any);
    w.phase = step_phase::zero_grad;
    w.region = moment::end_of_backward;
    if (!in_backward()) w.add("gradients freed", e.gradients, -(grads - reduced_away));
  }
};

}  // namespace detail

namespace detail {
/// Step timelines built at run time on this thread: what the tests count (one per estimate).
inline thread_local std::int64_t timelines_built = 0;
}  // namespace detail

/// The timeline of one training step on a GPU of pipeline stage `stage`, the model's tensor
/// ledger given.
constexpr step_timeline step_timeline_of(const training& t, const activation_options& o,
                                         std::int64_t stage, const tensor_ledger& tensors) {
  using namespace detail;
  if (!std::is_constant_evaluated()) ++timelines_built;
  const layout& l = validated(t.layout, t.model);
  step_timeline tl{};
  const stage_model_states states = stage_model_states_of(t, tensors, stage);
  tl.ledger = step_entries_of(t, o, states, stage);
  const stage_range range = stage_of(t, stage);
  const step_roles roles = step_roles_of(tl.ledger, t.optimizer.options.in_backward);
  tl.layers = {t.model.is_moe() ? t.model.moe.routed_experts / l.expert : 1, l.shard_degree(),
               roles.gradients >= 0 && (l.zero == sharding::zero2 || l.zero == sharding::zero3)};
  const layer_runs runs = layer_runs_of(t, o, tensors, range, tl);
  auto size_of = [&](int e) {
    return e < 0 ? bytes{} : tl.ledger[static_cast<std::size_t>(e)].size;
  };
  // The gradients backward makes: the step's, or those zero_grad(set_to_none=False) keeps, to
  // which each backward adds as many new ones.
  const int gradients = t.optimizer.options.set_to_none
                            ? roles.gradients
                            : entry_where(tl.ledger, component::gradients, lifetime::persistent);
  const outside_layers outside = outside_layers_of(t, tensors, range, runs, tl.layers,
                                                   size_of(gradients), size_of(roles.casts));
  for (const memory_entry& e : tl.ledger)
    if (e.space == memory_space::device && e.lifetime == lifetime::persistent)
      tl.at_start += e.size;

  step_writer writer{t, o, tl, roles, runs, outside};
  writer.units = l.gathers_units();
  if (writer.units) {
    writer.unit_bytes = states.gathered;
    tl.deferred = deferred_frees_of(l, states.gathered, range.layers);
  }
  writer.root_grads = entry_with(tl.ledger, entry_role::root_gradients);
  writer.accumulated = entry_with(tl.ledger, entry_role::accumulated_gradients);
  writer.gathered = entry_with(tl.ledger, entry_role::gathered_parameters);
  if (writer.gathered >= 0)
    writer.gathered_side = gathered_on_side_stream(l, writer.unit_bytes, size_of(writer.gathered));
  if (gradients_on_side_stream(l, tl.layers.sharded_grads)) {
    writer.w.side_gradients = roles.gradients;
    writer.w.gradient_stream = alloc_stream::reduce_scatter;
  }
  writer.micro_batch(step_writer::pass::first);
  if (o.micro_batches > 1) writer.micro_batch(step_writer::pass::later);
  writer.optimizer_step();
  tl.peak = find_peak(tl);
  time_entries(tl);
  return tl;
}

/// The timeline of one training step on a GPU of pipeline stage `stage`.
constexpr step_timeline step_timeline_of(const training& t, const activation_options& o,
                                         std::int64_t stage = 0) {
  return step_timeline_of(t, o, stage, tensors(t.model));
}

/// Calls `visit(event, index, layer, alive)` after each event of the step, in order, with the
/// total allocated after it: every layer of a run of at most `expand` layers, else the run's first
/// and last layers only (the ones between change the total by the same amount each).
template <class Visit>
constexpr void for_each_event(const step_timeline& tl, std::int64_t expand, Visit&& visit) {
  bytes alive = tl.at_start;
  detail::for_each_pattern(tl.events,
                           [&](std::size_t begin, std::size_t end, std::int64_t k, bytes d) {
                             for (std::int64_t rep = 0; rep < k; ++rep) {
                               if (k > expand && rep == 1) rep = k - 1;  // skip to the last layer
                               bytes here = alive + d * rep;
                               for (std::size_t e = begin; e < end; ++e) {
                                 here += tl.events[e].delta;
                                 visit(tl.events[e], e, detail::layer_at(tl.events[e], rep), here);
                               }
                             }
                             alive += d * k;
                           });
}

/// The step's ledger seen at its peak: the timeline's.
constexpr timed_ledger ledger_of(const step_timeline& tl) {
  const moment region =
      tl.events.empty() ? moment::end_of_forward : tl.events[tl.peak.event].region;
  return {.entries = tl.ledger, .at_peak = tl.at_peak, .peak_at = region};
}

/// Everything one training step keeps on a GPU of pipeline stage `stage`, seen at the step's peak.
constexpr timed_ledger training_step(const training& t, const activation_options& o,
                                     std::int64_t stage = 0) {
  return ledger_of(step_timeline_of(t, o, stage));
}

}  // namespace vramfit
