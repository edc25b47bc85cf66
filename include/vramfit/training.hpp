// SPDX-License-Identifier: MIT
// Training model states per GPU: weights, gradients, master weights, optimizer states and the
// buffers that come with them, for one pipeline stage of a parallel layout (ZeRO paper §3.1:
// "model states"; the activations are the other half).
#pragma once

#include <cstdint>

#include "finetune.hpp"
#include "ledger.hpp"
#include "local_shapes.hpp"
#include "optimizer.hpp"
#include "parallel.hpp"
#include "precision.hpp"
#include "stages.hpp"
#include "tensors.hpp"

namespace vramfit {

/// Everything that decides the model states: structural, so it can be a template argument.
struct training {
  vramfit::model model{};
  vramfit::precision precision{};
  vramfit::optimizer optimizer{};
  finetuning finetune = full_finetune::value;
  vramfit::layout layout{};
};

namespace detail {

/// What rounding a tensor of `b` bytes up to the caching allocator's 512-byte blocks adds
/// (c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize = 512).
constexpr bytes allocator_rounding(bytes b) {
  return bytes{checked_mul(ceil_div(b.count, 512), 512)} - b;
}

/// A weight or bias of a linear layer (a matmul operand; norms and embeddings are not).
constexpr bool is_linear_parameter(const tensor_group& g) {
  return g.kind == tensor_kind::attention || g.kind == tensor_kind::mlp ||
         g.kind == tensor_kind::expert || g.kind == tensor_kind::router ||
         g.kind == tensor_kind::head;
}

/// The format a frozen tensor is kept in.
constexpr const element_format& frozen_format(const training& t, const tensor_group& g) {
  const finetuning& f = t.finetune;
  if (f.quantized_base.payload_bits > 0 && g.rank == 2 && is_linear_parameter(g) &&
      g.kind != tensor_kind::head)
    return f.quantized_base;
  if (f.unquantized_base.payload_bits > 0) return f.unquantized_base;
  return t.precision.weights;
}

/// Model-state bytes before sharding, split into what data parallelism may shard.
struct unsharded_states {
  bytes trained_weights{}, frozen_weights{}, state_buffers{}, gradients{}, master{};
  bytes device_states{}, host_states{}, cast_copies{}, largest_tensor_16bit{};
  /// The autocast copies of frozen weights: cast per call, not cached (autocast_mode.cpp
  /// cached_cast caches leaf tensors that require grad only).
  bytes frozen_cast_copies{};
  // The same quantities sharded tensor by tensor along dim 0 (FSDP).
  /// What PyTorch's caching allocator adds by rounding each tensor up to 512 bytes.
  bytes rounding{};
  bytes fsdp_trained_weights{}, fsdp_frozen_weights{}, fsdp_gradients{}, fsdp_master{},
      fsdp_states{};
  std::int64_t trained_elements = 0, frozen_elements = 0, trained_tensors = 0, weight_tensors = 0;
  std::int64_t device_state_tensors = 0, host_state_tensors = 0;
  std::int64_t largest_tensor_elements = 0;
};

struct stage_range {
  std::int64_t first_layer, layers;
  bool first, last;
};

/// Whether pipeline stage `stage` holds `g`, a tensor outside the layers: embeddings (the tensors
/// before the first layer group) on the first stage, the rest on the last (Megatron-LM:
/// pre_process / post_process); a tied embedding is also needed by the head, so the last stage
/// keeps its own copy (Megatron-LM: shared_embedding_or_output_weight).
constexpr bool stage_holds(const model& m, const tensor_group& g, const stage_range& stage,
                           bool before_layers) {
  if (!before_layers) return stage.last;
  return stage.first || (stage.last && m.tied_embeddings && g.split == tp_split::vocab);
}

/// LoRA's two adapters on a weight of local shape `shape`: A [r, in] and B [out, r], in the
/// adapters' format (the weights' unless given).
struct lora_adapters {
  local_shape a, b;
  element_format format;
};
constexpr lora_adapters lora_adapters_of(const training& t, const tensor_group& g,
                                         const local_shape& shape) {
  const std::int64_t r = t.finetune.lora.rank;
  const std::int64_t out = g.input_major ? shape.last : shape.second;
  const std::int64_t in = g.input_major ? shape.second : shape.last;
  const element_format& f = t.finetune.lora.adapters;
  return {{r, in}, {out, r}, f.payload_bits > 0 ? f : t.precision.weights};
}

/// Whether FSDP2 with mixed precision shards the fp32 master as the parameter itself
/// (MixedPrecisionPolicy: the 16-bit parameters exist only while a unit is gathered).
constexpr bool fsdp2_master_shards(const training& t) {
  return t.layout.implementation == shard_implementation::fsdp && t.layout.fsdp_version == 2 &&
         t.precision.has_master();
}

/// The format of FSDP's sharded gradients: the sharded parameter's under FSDP2.
constexpr const element_format& sharded_gradient_format(const training& t) {
  return fsdp2_master_shards(t) ? t.precision.master : t.precision.gradients;
}

/// The copies of `g` that pipeline stage `stage` and expert rank 0 hold: the layers of the stage,
/// or, for a tensor outside the layers, one copy where stage_holds says so.
constexpr tensor_block stage_block(const model& m, const tensor_group& g, const stage_range& stage,
                                   bool before_layers, std::int64_t experts_per_rank) {
  tensor_block block = block_of(g);
  if (g.layer_count > 0) {
    block.layer_count = overlap(g.first_layer, g.layer_count, stage.first_layer, stage.layers);
    block.first_layer = g.first_layer > stage.first_layer ? g.first_layer : stage.first_layer;
  } else {
    block.layer_count = stage_holds(m, g, stage, before_layers) ? 1 : 0;
  }
  if (g.kind == tensor_kind::expert) block.expert_count = experts_per_rank;
  return block;
}

/// Accumulates the optimizer states of `count` trained tensors of shape `s` (and of its FSDP
/// shard), whose updated copy is stored as `updated`.
constexpr void add_optimizer_states(unsharded_states& acc, const training& t, const tensor_group& g,
                                    std::int64_t count, const local_shape& s,
                                    const local_shape& shard, const element_format& updated) {
  const bool hidden_matrix =
      s.second > 0 && g.kind != tensor_kind::embedding && g.kind != tensor_kind::head;
  const state_size states =
      optimizer_state(t.optimizer, {s.elements(), s.last, s.second, hidden_matrix}, updated);
  acc.device_states += states.device * count;
  // Each state tensor is its own allocation; they are equal in size but for the 0-d scalars.
  if (states.device_tensors > 0) {
    const std::int64_t scalars =
        t.optimizer.options.impl == optimizer_impl::fused || t.optimizer.options.capturable
            ? t.optimizer.scalars
            : 0;
    const std::int64_t moments = states.device_tensors - scalars;
    const bytes moment =
        moments > 0 ? divide_up(states.device - bytes{4 * scalars}, moments) : bytes{};
    acc.rounding +=
        (allocator_rounding(moment) * moments + allocator_rounding(bytes{4}) * scalars) * count;
  }
  acc.host_states += states.host * count;
  acc.device_state_tensors =
      checked_add(acc.device_state_tensors, checked_mul(states.device_tensors, count));
  acc.host_state_tensors =
      checked_add(acc.host_state_tensors, checked_mul(states.host_tensors, count));
  acc.fsdp_states +=
      optimizer_state(t.optimizer, {shard.elements(), shard.last, shard.second, hidden_matrix},
                      updated)
          .device *
      count;
}

/// Accumulates `count` trained tensors of `g` of shape `s` stored as `weight`: the weight, its
/// gradient, master copy and optimizer states. FSDP2's sharded parameter is the fp32 master
/// itself, its sharded gradient in that format. A tensor in a format of its own (peft's fp32
/// adapters over a 16-bit base) is trained as a plain tensor of it: its gradient and torch.optim's
/// states (zeros_like) in that format, no master copy.
constexpr void add_trained(unsharded_states& acc, const training& t, const tensor_group& g,
                           std::int64_t count, const local_shape& s, const element_format& weight,
                           std::int64_t shards) {
  if (count == 0) return;
  const precision& p = t.precision;
  const bool master_shards = fsdp2_master_shards(t);
  const bool own = !(weight == p.weights);
  const element_format& gradient = own ? weight : p.gradients;
  const local_shape shard = dim0_shard(s, shards);
  acc.trained_elements = checked_add(acc.trained_elements, checked_mul(count, s.elements()));
  acc.trained_tensors = checked_add(acc.trained_tensors, count);
  acc.trained_weights += stored(weight, s) * count;
  acc.rounding += allocator_rounding(stored(weight, s)) * count;
  acc.fsdp_trained_weights += stored(master_shards && !own ? p.master : weight, shard) * count;
  acc.gradients += stored(gradient, s) * count;
  acc.rounding += allocator_rounding(stored(gradient, s)) * count;
  acc.fsdp_gradients += stored(own ? weight : sharded_gradient_format(t), shard) * count;
  if (p.has_master() && !own) {
    acc.master += stored(p.master, s) * count;
    acc.rounding += allocator_rounding(stored(p.master, s)) * count;
    if (!master_shards) acc.fsdp_master += stored(p.master, shard) * count;
  }
  add_optimizer_states(acc, t, g, count, s, shard, own ? weight : p.updated());
}

/// Accumulates the `frozen` of `copies` tensors of `g` (shape `shape`) that are not trained, and
/// the compute-format copies autocast (or FP8) makes of all of them.
constexpr void add_frozen(unsharded_states& acc, const training& t, const tensor_group& g,
                          std::int64_t copies, std::int64_t frozen, const local_shape& shape,
                          std::int64_t shards) {
  const precision& p = t.precision;
  const std::int64_t n = shape.elements();
  acc.weight_tensors = checked_add(acc.weight_tensors, copies);
  acc.frozen_elements = checked_add(acc.frozen_elements, checked_mul(n, frozen));
  acc.frozen_weights += stored(frozen_format(t, g), shape) * frozen;
  acc.rounding += allocator_rounding(stored(frozen_format(t, g), shape)) * frozen;
  acc.fsdp_frozen_weights += stored(frozen_format(t, g), dim0_shard(shape, shards)) * frozen;
  if (n > acc.largest_tensor_elements) acc.largest_tensor_elements = n;
  // Autocast caches a compute-format copy of every linear weight and bias (frozen ones too; a
  // tied embedding is the head's weight); FP8 keeps copies of the matmul weights.
  if (is_linear_parameter(g) || (g.split == tp_split::vocab && t.model.tied_embeddings)) {
    if (p.autocast_weight_copies) {
      acc.cast_copies += stored(p.compute, shape) * copies;
      acc.frozen_cast_copies += stored(p.compute, shape) * frozen;
    }
    if (p.fp8_weight_copies > 0 && g.rank == 2)
      acc.cast_copies += stored(fp8_e4m3::value, shape) * checked_mul(copies, p.fp8_weight_copies);
  }
}

/// Accumulates the tensors of `g` that pipeline stage `stage` and expert rank 0 hold.
constexpr void add_group(const training& t, const tensor_group& g, const stage_range& stage,
                         bool before_layers, std::int64_t experts_per_rank, std::int64_t shards,
                         unsharded_states& acc) {
  const tensor_block block = stage_block(t.model, g, stage, before_layers, experts_per_rank);
  const std::int64_t copies = checked_mul(block.layer_count, block.expert_count);
  if (copies == 0) return;
  const local_shape shape = tp_local_shape(g, t.model, t.layout.tensor);
  if (g.role == tensor_role::state) {
    if (g.in_memory)
      acc.state_buffers += bytes_for_bits(checked_mul(shape.elements(), g.state_bits)) * copies;
    return;
  }
  const std::int64_t trained = trained_tensors(t.finetune, g, block);
  add_frozen(acc, t, g, copies, copies - trained, shape, shards);
  add_trained(acc, t, g, trained, shape, t.precision.weights, shards);
  // LoRA's adapters on the layer's local shape.
  if (lora_elements(t.finetune, g) > 0) {
    const lora_adapters lora = lora_adapters_of(t, g, shape);
    acc.weight_tensors = checked_add(acc.weight_tensors, checked_mul(2, copies));
    add_trained(acc, t, g, copies, lora.a, lora.format, shards);
    add_trained(acc, t, g, copies, lora.b, lora.format, shards);
  }
}

/// The bytes of a sharded quantity a rank keeps: all of them, or its shard (FSDP tensor by tensor,
/// `fsdp_shard`; flat implementations a 1/N of one padded buffer).
constexpr bytes rank_share(bytes full, bytes fsdp_shard, const layout& l, bool sharded) {
  if (!sharded) return full;
  return l.implementation == shard_implementation::fsdp ? fsdp_shard
                                                        : divide_up(full, l.shard_degree());
}

/// Calls `visit(bytes, shape, copies)` for the tensors of `g` at `layer` (-1: a tensor outside
/// the layers) that the optimizer updates, in the order the model registers them: the weight when
/// trained, then LoRA's A and B (peft LoraLayer). Routed experts come twice at most with all their
/// copies on the first: the pairs of neighbours repeat after that.
template <class Visit>
constexpr void for_each_updated_tensor(const training& t, const tensor_group& g, std::int64_t layer,
                                       std::int64_t experts_per_rank, std::int64_t shards,
                                       Visit&& visit) {
  if (g.role != tensor_role::parameter) return;
  tensor_block one = block_of(g);
  if (layer >= 0) one = {layer, 1, 0, g.experts};
  if (g.kind == tensor_kind::expert) one.expert_count = experts_per_rank;
  const precision& p = t.precision;
  const local_shape shape = tp_local_shape(g, t.model, t.layout.tensor);
  auto updated = [&](const element_format& weight, const local_shape& s, std::int64_t copies) {
    const local_shape shard = dim0_shard(s, shards);
    const element_format& f = p.has_master() && weight == p.weights ? p.master : weight;
    for (std::int64_t c = 0; c < (copies < 2 ? copies : 2); ++c)
      visit(stored(f, shard), shard, c == 0 ? copies : 0);
  };
  updated(p.weights, shape, trained_tensors(t.finetune, g, one));
  if (lora_elements(t.finetune, g) > 0) {
    const lora_adapters lora = lora_adapters_of(t, g, shape);
    for (std::int64_t e = 0; e < (one.expert_count < 2 ? one.expert_count : 2); ++e) {
      updated(lora.format, lora.a, e == 0 ? one.expert_count : 0);
      updated(lora.format, lora.b, e == 0 ? one.expert_count : 0);
    }
  }
}

/// Calls `visit(bytes, shape, copies)` for every tensor the optimizer updates on a rank of stage
/// `range`, in the model's order: the tensors before the layers, the layers, those after. Runs
/// of identical layers are walked twice, with all their copies on the first pass: that meets
/// every pair of neighbours.
template <class Visit>
constexpr void for_each_stage_updated_tensor(const training& t, const tensor_ledger& tensors,
                                             const stage_range& range,
                                             std::int64_t experts_per_rank, std::int64_t shards,
                                             Visit&& visit) {
  auto outside = [&](bool before) {
    bool seen_layers = false;
    for (const tensor_group& g : tensors) {
      seen_layers = seen_layers || g.layer_count > 0;
      if (g.layer_count == 0 && seen_layers != before && stage_holds(t.model, g, range, before))
        for_each_updated_tensor(t, g, -1, experts_per_rank, shards, visit);
    }
  };
  auto run = [&](std::int64_t first, std::int64_t count) {
    for (std::int64_t rep = 0; rep < (count < 2 ? count : 2); ++rep)
      for (const tensor_group& g : tensors)
        if (g.in_layer(first))
          for_each_updated_tensor(t, g, first, experts_per_rank, shards,
                                  [&](bytes b, const local_shape& shape, std::int64_t copies) {
                                    visit(b, shape,
                                          rep == 0 ? checked_mul(copies, count) : std::int64_t{0});
                                  });
  };
  outside(true);
  for_each_layer_run(range.first_layer, range.first_layer + range.layers,
                     edges_of(tensors, t.finetune).at, run);
  outside(false);
}

/// The optimizer step's temporaries, tensor by tensor in the model's order (step_scratch_of):
/// foreach lists of all the updated tensors, or the most that one tensor and the one before it
/// need.
struct step_temporaries_scan {
  step_scratch s;
  bytes all{}, largest{}, pair{}, previous{}, previous_column_mean{}, single{};
  std::int64_t largest_elements = 0;

  /// Each temporary is its own allocator block.
  static constexpr bytes block(bytes b) { return b + allocator_rounding(b); }

  constexpr void add(bytes b, const local_shape& shape, std::int64_t copies) {
    b = block(b);
    all += b * copies;
    if (b > largest) largest = b;
    if (shape.elements() > largest_elements) largest_elements = shape.elements();
    bytes current = b * s.current;
    if (s.column_norm && shape.second > 0) {
      // _single_tensor_adafactor: row_mean, col_mean and the old col_mean while the column norm
      // runs; they are in the tensor's format.
      const bytes element{b.count / shape.elements()};
      const bytes column_mean = block(element * shape.last);
      const bytes norm = column_norm_staging(shape.second, shape.last) +
                         block(element * shape.second) + column_mean + previous_column_mean;
      if (norm > current) current = norm;
      previous_column_mean = column_mean;
    }
    const bytes here = current + previous * s.previous +
                       (s.larger_of_pair ? (b > previous ? b : previous) : bytes{});
    if (here > pair) pair = here;
    previous = b;
    const bytes alone = b * (s.lists + s.largest) + current + (s.larger_of_pair ? b : bytes{}) +
                        (s.largest_mask ? bytes{shape.elements()} : bytes{});
    if (alone > single) single = alone;
  }

  /// All the step's temporaries at once; an optimizer in backward steps one tensor at a time,
  /// each with its own optimizer: the most any one tensor's step takes.
  [[nodiscard]] constexpr bytes peak(bool one_tensor) const {
    if (one_tensor) return single;
    return all * s.lists + largest * s.largest +
           (s.largest_mask ? bytes{largest_elements} : bytes{}) + pair;
  }
};

/// The optimizer step's temporaries on a rank of stage `range`.
constexpr bytes step_temporaries(const training& t, const tensor_ledger& tensors,
                                 const stage_range& range, std::int64_t experts_per_rank,
                                 std::int64_t shards) {
  step_temporaries_scan scan{step_scratch_of(t.optimizer)};
  for_each_stage_updated_tensor(
      t, tensors, range, experts_per_rank, shards,
      [&](bytes b, const local_shape& shape, std::int64_t copies) { scan.add(b, shape, copies); });
  return scan.peak(t.optimizer.options.in_backward);
}

/// Bytes of `n` elements in format `f`, none for none (a unit or stage may train nothing).
constexpr bytes elements_in(const element_format& f, std::int64_t n) {
  return n > 0 ? storage_bytes(f, n) : bytes{};
}

/// What an FSDP unit gathers: its trained elements (gathered in the compute format, each with a
/// gradient) and its frozen weights as stored (a quantized base is gathered quantized).
struct fsdp_unit {
  std::int64_t trained = 0;
  bytes frozen{};
};

/// FSDP's units on a stage: each transformer layer is a unit (transformer_auto_wrap_policy,
/// torchtitan's per-block fully_shard), and the tensors outside the layers that the stage holds
/// form the root unit.
struct fsdp_units {
  fsdp_unit root;
  std::int64_t root_head_trained = 0;  ///< of the root's, after the layers (final norm, head)
  fsdp_unit layer;                     ///< the largest layer unit
};

/// The root and the largest layer unit of a stage. A layer's unit changes only at the edges of
/// the ledger's layer groups, so only the stage's first layer and the edges inside it are
/// compared, by what a unit holds in backward: gathered weights and their gradients.
constexpr fsdp_units fsdp_units_of(const training& t, const tensor_ledger& tensors,
                                   const stage_range& stage, std::int64_t experts_per_rank) {
  const element_format& compute = t.precision.compute;
  const std::size_t first_layers = first_layer_group(tensors);
  // The root's tensors (all, or those after the layers), or layer `layer`'s.
  auto unit = [&](std::int64_t layer, bool root, bool after_layers_only = false) {
    unsharded_states acc{};
    const stage_range only =
        root ? stage_range{0, 0, stage.first, stage.last} : stage_range{layer, 1, false, false};
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const tensor_group& g = tensors[i];
      const bool before = i < first_layers;
      if (root ? g.layer_count == 0 && !(after_layers_only && before) : g.in_layer(layer))
        add_group(t, g, only, before, experts_per_rank, 1, acc);
    }
    return fsdp_unit{acc.trained_elements, acc.frozen_weights};
  };
  auto size = [&](const fsdp_unit& u) { return elements_in(compute, u.trained) * 2 + u.frozen; };
  const std::int64_t end = stage.first_layer + stage.layers;
  fsdp_units units{unit(0, true), unit(0, true, true).trained, {}};
  std::int64_t considered[2 * tensor_ledger::capacity + 1] = {};  // each edge once
  std::size_t edges = 0;
  auto consider = [&](std::int64_t layer) {
    if (layer < stage.first_layer || layer >= end) return;
    for (std::size_t i = 0; i < edges; ++i)
      if (considered[i] == layer) return;
    considered[edges++] = layer;
    const fsdp_unit u = unit(layer, false);
    if (size(u) > size(units.layer)) units.layer = u;
  };
  consider(stage.first_layer);
  for (const tensor_group& g : tensors) {
    if (g.layer_count == 0) continue;
    consider(g.first_layer);
    consider(g.first_layer + g.layer_count);
  }
  return units;
}

/// What FSDP holds unsharded beside the shards.
struct fsdp_gathered {
  bytes root, layer;        ///< a unit's gathered parameters (compute format; frozen as stored)
  std::int64_t layers = 1;  ///< layer units gathered at once: the current and the prefetched
  bytes layer_gradients;    ///< a layer's unsharded gradients and what reducing them copies
  bytes root_gradients;     ///< the root's, at its post-backward
  bytes root_unsharded_gradients;  ///< of them, the unsharded (the rest: the reduce copy)
  bytes root_head_gradients;       ///< of the unsharded, what the head's backward makes
};

/// The root stays gathered around the layers: FSDP1 does not reshard the root after forward
/// (_runtime_utils.py _post_forward_reshard) and FSDP2 gathers it in its pre-forward and again
/// in its pre-backward (_fsdp_param_group.py pre_forward, pre_backward), so its parameters are
/// there through every layer's forward and backward. A layer is gathered with the next one
/// prefetched (FSDP1 BACKWARD_PRE, FSDP2's implicit prefetch); on one rank nothing is gathered
/// ahead (FSDP1 runs NO_SHARD; FSDP2's unshard all-gathers nothing and each unit's parameters
/// are copied in its own wait_for_unshard, traced: tests/validation/gpu/h200/traces/*fsdp2*).
/// A unit's gradients are reduced at its post-backward, the root's last (FSDP2's root
/// post-backward runs in the final callback, _fsdp_state.py _root_post_backward_final_callback):
/// until then FSDP2 holds the head's unsharded gradients from the head's backward, while FSDP1's
/// root flat parameter gets its whole flat gradient there (autograd accumulates into the flat
/// parameter the views belong to).
constexpr fsdp_gathered fsdp_gathered_of(const training& t, const tensor_ledger& tensors,
                                         const stage_range& stage, std::int64_t experts_per_rank) {
  const layout& l = t.layout;
  const precision& p = t.precision;
  const fsdp_units units = fsdp_units_of(t, tensors, stage, experts_per_rank);
  // FSDP2's foreach_reduce (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py) copies
  // the unit's unsharded gradients (compute format) into a reduce-scatter buffer in the
  // sharded gradients' format; FSDP1 reduces its flat gradient itself.
  auto unsharded = [&](std::int64_t trained) {
    return elements_in(l.fsdp_version == 2 ? p.compute : p.gradients, trained);
  };
  auto gradients = [&](const fsdp_unit& u) {
    return unsharded(u.trained) +
           (l.fsdp_version == 2 ? elements_in(sharded_gradient_format(t), u.trained) : bytes{});
  };
  auto gathered = [&](const fsdp_unit& u) { return elements_in(p.compute, u.trained) + u.frozen; };
  const bool prefetched = l.fsdp_prefetch && l.shard_degree() > 1;
  const bytes root = unsharded(units.root.trained);
  return {
      gathered(units.root), gathered(units.layer), prefetched ? 2 : 1, gradients(units.layer),
      gradients(units.root), root,
      // A tied head's weight is the embedding: its gradient comes with the head's backward.
      l.fsdp_version == 2 && !t.model.tied_embeddings ? unsharded(units.root_head_trained) : root};
}

}  // namespace detail

/// Layers, and whether it is the first or the last, of pipeline stage `stage`.
constexpr detail::stage_range stage_of(const training& t, std::int64_t stage) {
  const layout& l = t.layout;
  return {l.first_layer_of_stage(t.model.layers, stage), l.layers_of_stage(t.model.layers, stage),
          stage == 0, stage == l.pipeline - 1};
}

namespace detail {

/// Where offloaded model states live.
constexpr memory_space space_of(offload_target o) {
  return o == offload_target::none  ? memory_space::device
         : o == offload_target::cpu ? memory_space::host
                                    : memory_space::nvme;
}

/// A stage's model states before sharding, and how the layout shards and places them: what the
/// parts of model_states (weights, gradients, optimizer states, buffers) decide by.
struct stage_model_states {
  const training& t;
  const tensor_ledger& tensors;
  stage_range range;
  std::int64_t experts_per_rank = 1;
  std::int64_t n = 1;  ///< the ranks that shard the states (layout::shard_degree)
  unsharded_states acc{};
  bool fsdp = false, deepspeed = false, megatron = false;
  bool shard_optimizer = false, shard_grads = false;
  /// FSDP keeps sharded parameters at rest under both FULL_SHARD and SHARD_GRAD_OP; they differ
  /// in how long the gathered (compute-format) parameters live.
  bool shard_weights = false;
  memory_space optimizer_space = memory_space::device, weight_space = memory_space::device;
  fsdp_gathered gathered{};  ///< FSDP's units, when full sharding gathers them one by one

  [[nodiscard]] constexpr const layout& l() const { return t.layout; }
  [[nodiscard]] constexpr const precision& p() const { return t.precision; }
  [[nodiscard]] constexpr bytes shard(bytes full, bytes fsdp_shard, bool sharded) const {
    return rank_share(full, fsdp_shard, t.layout, sharded);
  }
};

/// Accumulates the tensors of pipeline stage `stage` and reads how the layout shards them.
constexpr stage_model_states stage_model_states_of(const training& t, const tensor_ledger& tensors,
                                                   std::int64_t stage,
                                                   const fsdp_gathered* gathered = nullptr) {
  const layout& l = validated(t.layout, t.model);
  stage_model_states s{t, tensors, stage_of(t, stage)};
  s.experts_per_rank = t.model.is_moe() ? t.model.moe.routed_experts / l.expert : 1;
  s.n = l.shard_degree();
  check_finetuning(t.finetune, t.model, tensors);
  const std::size_t first_layers = first_layer_group(tensors);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    add_group(t, tensors[i], s.range, i < first_layers, s.experts_per_rank, s.n, s.acc);
  s.fsdp = l.implementation == shard_implementation::fsdp;
  s.deepspeed = l.implementation == shard_implementation::deepspeed;
  s.megatron = l.implementation == shard_implementation::megatron;
  s.shard_optimizer = l.zero != sharding::none;
  s.shard_grads = l.zero == sharding::zero2 || l.zero == sharding::zero3;
  s.shard_weights = l.zero == sharding::zero3 || (s.fsdp && l.zero == sharding::zero2);
  s.optimizer_space = space_of(l.optimizer_offload);
  s.weight_space = space_of(l.parameter_offload);
  if (s.fsdp && l.zero == sharding::zero3)
    s.gathered = gathered ? *gathered : fsdp_gathered_of(t, tensors, s.range, s.experts_per_rank);
  return s;
}

/// Weights: one entry, or trained and frozen apart when part of the model is frozen; the
/// model's stored buffers; the compute-format copies autocast or FP8 keeps.
constexpr void add_weights(memory_ledger& ledger, const stage_model_states& s) {
  const unsharded_states& acc = s.acc;
  const bool sharded = s.shard_weights;
  const char* source =
      sharded ? "ZeRO paper §5.3 (P_os+g+p): 2Ψ/N_d" : "tensor ledger x weight format";
  if (acc.frozen_weights == bytes{}) {
    add_entry(ledger, sharded ? "weights (ZeRO-3 partition)" : "weights", component::weights,
              s.weight_space, s.shard(acc.trained_weights, acc.fsdp_trained_weights, sharded),
              acc.weight_tensors, source);
  } else {
    add_entry(ledger, "weights (trained)", component::weights, s.weight_space,
              s.shard(acc.trained_weights, acc.fsdp_trained_weights, sharded), acc.trained_tensors,
              source);
    add_entry(ledger, "weights (frozen)", component::weights, s.weight_space,
              s.shard(acc.frozen_weights, acc.fsdp_frozen_weights, sharded),
              acc.weight_tensors - acc.trained_tensors, source);
  }
  add_entry(ledger, "model buffers (states)", component::weights, memory_space::device,
            acc.state_buffers, 0, "tensor ledger: stored non-parameter tensors");
  // Under FSDP the gathered parameters are already in the compute format (MixedPrecision
  // param_dtype): autocast finds nothing to cast.
  const precision& p = s.p();
  add_entry(ledger, "autocast / fp8 weight copies", component::weights, memory_space::device,
            s.fsdp && sharded && p.autocast_weight_copies ? bytes{} : acc.cast_copies, 0,
            "torch.autocast weight cast cache; Transformer Engine Float8Tensor",
            p.fp8_weight_copies > 0 ? lifetime::persistent : lifetime::forward_backward);
}

/// DeepSpeed's gradients where they are not autograd's: ZeRO-3's flat partition buffer, or the
/// staging buffers of ZeRO-1/2 offloading the optimizer. False when neither applies.
constexpr bool add_deepspeed_gradient_buffers(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  const precision& p = s.p();
  if (!s.deepspeed) return false;
  if (l.zero == sharding::zero3) {
    // DeepSpeed ZeRO-3 allocates its gradient partitions once, as one flat buffer in the
    // gradient-accumulation dtype (the model's with ZeRO, engine.py get_data_types: the policy's
    // gradient format here; bf16-fp32-master-16bit-grads is DeepSpeed's default), and
    // reduce-scatters each bucket into it (stage3.py grad_partitions_flat_buffer).
    add_entry(ledger, "gradient partitions (flat buffer)", component::gradients,
              s.shard_grads ? s.optimizer_space : memory_space::device,
              divide_up(s.acc.gradients, s.n), 1,
              "DeepSpeed stage3.py _setup_for_real_optimizer: grad_partitions_flat_buffer");
    return true;
  }
  if (!s.shard_optimizer || l.optimizer_offload == offload_target::none) return false;
  // ZeRO-1/2 offloading the optimizer: backward's gradients (all of them under ZeRO-1) pass
  // through a staging buffer of the largest parameter into the host's fp32 gradients, and the
  // step's bf16 result goes back through a pinned host copy of the parameter partition
  // (stage_1_and_2.py temp_grad_buffer_for_gpu_offload, param_buffer_of_bit16_for_cpu_offload).
  if (l.zero == sharding::zero1)
    add_entry(ledger, "gradients", component::gradients, memory_space::device, s.acc.gradients,
              s.acc.trained_tensors, "DeepSpeed ZeRO-1: autograd gradients until the boundary");
  add_entry(ledger, "gradient staging buffer (largest parameter)", component::buffers,
            memory_space::device, elements_in(p.gradients, s.acc.largest_tensor_elements), 1,
            "DeepSpeed stage_1_and_2.py temp_grad_buffer_for_gpu_offload");
  add_entry(ledger, "16-bit parameter partition (pinned copy)", component::weights,
            s.optimizer_space, divide_up(storage_bytes(p.weights, s.acc.trained_elements), s.n), 1,
            "DeepSpeed stage_1_and_2.py param_buffer_of_bit16_for_cpu_offload_groups");
  return true;
}

/// The fp32 gradients DeepSpeed's step makes: it flattens one parameter group's (ZeRO-3: one
/// sub-group's) gradient partition and casts it to fp32 for the optimizer; both copies live while
/// the cast runs, the fp32 one until that group's step ends (stage_1_and_2.py step, stage3.py
/// _prepare_fp32_grad_for_sub_group). Offloaded, the fp32 gradients are a pinned host buffer kept
/// for the whole run (subgroup_gradient_buffer).
constexpr void add_deepspeed_fp32_gradients(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  const precision& p = s.p();
  const std::int64_t trained = s.acc.trained_elements;
  const std::int64_t partition = s.shard_optimizer ? ceil_div(trained, s.n) : trained;
  const std::int64_t sub_group = l.zero3_sub_group_elements;
  const std::int64_t group =
      l.zero == sharding::zero3 && sub_group > 0 && sub_group < partition ? sub_group : partition;
  const bool cast = p.gradients.payload_bits < 32;
  const bool offloaded = l.optimizer_offload != offload_target::none;
  const bytes fp32_grads{checked_mul(offloaded ? partition : group, 4)};
  const bytes flat = elements_in(p.gradients, group);
  add_entry(
      ledger,
      offloaded ? "fp32 gradient partition" : "gradients flattened and cast to fp32 (one group)",
      component::gradients, s.optimizer_space,
      offloaded ? fp32_grads : (cast ? fp32_grads + flat : flat), 1,
      "DeepSpeed stage_1_and_2.py step / stage3.py _prepare_fp32_grad_for_sub_group",
      offloaded ? lifetime::persistent : lifetime::optimizer_step);
}

/// Gradients: autograd's (or their partition), then the fp32 copies the optimizer steps on.
constexpr void add_gradients(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  const precision& p = s.p();
  if (!add_deepspeed_gradient_buffers(ledger, s)) {
    const auto space = s.shard_grads && l.optimizer_offload != offload_target::none
                           ? s.optimizer_space
                           : memory_space::device;
    add_entry(ledger, s.shard_grads ? "gradients (partition)" : "gradients", component::gradients,
              space, s.shard(s.acc.gradients, s.acc.fsdp_gradients, s.shard_grads && !s.megatron),
              s.acc.trained_tensors,
              s.megatron ? "Megatron-LM dist_optimizer.md: full fp32 main grads"
                         : "ZeRO paper §5.2 (P_os+g): 2Ψ/N_d");
  }
  if (s.megatron && p.has_master() && p.gradients.payload_bits < 32) {
    // The optimizer steps on fp32 copies of the 16-bit gradients, sharded like its states.
    const bytes fp32_grads{checked_mul(s.acc.trained_elements, 4)};
    add_entry(ledger, s.shard_optimizer ? "fp32 gradient partition" : "fp32 gradient copy",
              component::gradients, s.optimizer_space,
              s.shard_optimizer ? divide_up(fp32_grads, s.n) : fp32_grads, 1,
              "Megatron-LM dist_optimizer.md: fp16 20 B, 4 + 16/d");
  }
  if (s.deepspeed && p.has_master()) add_deepspeed_fp32_gradients(ledger, s);
}

/// Master weights and optimizer states; the 512-byte rounding of PyTorch's own tensors.
constexpr void add_optimizer_states(memory_ledger& ledger, const stage_model_states& s) {
  const unsharded_states& acc = s.acc;
  add_entry(ledger, s.shard_optimizer ? "master weights (partition)" : "master weights",
            component::master_weights, s.optimizer_space,
            s.shard(acc.master, acc.fsdp_master, s.shard_optimizer),
            s.p().has_master() ? acc.trained_tensors : 0,
            "ZeRO paper §3.1: fp32 parameter copy, 4Ψ");
  const bool flat_optimizer = s.deepspeed || s.megatron;  // FusedAdam: no per-tensor step tensors
  add_entry(ledger, s.shard_optimizer ? "optimizer states (partition)" : "optimizer states",
            component::optimizer_states, s.optimizer_space,
            s.shard(acc.device_states, acc.fsdp_states, s.shard_optimizer),
            flat_optimizer ? 0 : acc.device_state_tensors,
            "optimizer.hpp: the optimizer's state tensors per parameter tensor");
  if (!flat_optimizer) {
    add_entry(ledger, "optimizer states on the host", component::optimizer_states,
              memory_space::host, acc.host_states, acc.host_state_tensors,
              "torch.optim step counters off-device unless fused/capturable; paged states");
  }
  // PyTorch allocates each tensor on its own: the caching allocator rounds each up to 512 bytes.
  // DeepSpeed and Megatron keep flat buffers, and sharded tensors are counted as shards.
  const layout& l = s.l();
  if (l.zero == sharding::none && (l.implementation == shard_implementation::unnamed ||
                                   l.implementation == shard_implementation::paper)) {
    add_entry(ledger, "allocator rounding (512 B blocks)", component::overhead,
              memory_space::device, acc.rounding, 0,
              "c10 CUDACachingAllocator: every block a multiple of 512 bytes");
  }
}

/// The buckets gradients are reduced through: DDP's copies, DeepSpeed's reduce bucket.
constexpr void add_reduce_buckets(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  if (l.zero == sharding::none && l.data * l.context > 1 && !s.megatron && !l.ddp_bucket_view) {
    add_entry(
        ledger, "DDP gradient buckets", component::buffers, memory_space::device, s.acc.gradients,
        0, "PyTorch DDP Reducer: bucket copies of all gradients (gradient_as_bucket_view=False)");
  }
  if (!s.deepspeed || !s.shard_optimizer) return;
  // The reduce buffer of reduce_bucket_size elements in the gradients' dtype, whatever the
  // model's size (stage_1_and_2.py backward: buf_0 = torch.empty(int(self.reduce_bucket_size)),
  // and buf_1 with overlap_comm, each backward; stage3.py __ipg_bucket_flat_buffer, for the whole
  // run), and the flattened (ZeRO-3: concatenated) copy each reduction makes of the gradients in
  // it, at most a bucket of them (allreduce_bucket; coalesced_collectives.py
  // reduce_scatter_coalesced: torch.cat).
  const std::int64_t trained = s.acc.trained_elements;
  const std::int64_t filled =
      trained < l.zero_reduce_bucket_elements ? trained : l.zero_reduce_bucket_elements;
  const bytes buffer = elements_in(s.p().gradients, l.zero_reduce_bucket_elements);
  const bytes copy = elements_in(s.p().gradients, filled);
  const bool kept = l.zero == sharding::zero3;
  add_entry(ledger, "ZeRO reduce bucket", component::buffers, memory_space::device,
            kept ? buffer : buffer * (l.zero_overlap_comm ? 2 : 1) + copy, 1,
            "DeepSpeed contiguous_gradients: reduce_bucket_size elements (default 5e8)",
            kept ? lifetime::persistent : lifetime::backward_pass);
  if (kept)
    add_entry(ledger, "ZeRO-3 reduce-scatter copy of the bucket", component::buffers,
              memory_space::device, copy, 0,
              "DeepSpeed coalesced_collectives.py reduce_scatter_coalesced: torch.cat",
              lifetime::backward_pass);
}

/// FSDP's gathered units: the root and the current and prefetched layers, or all units kept
/// gathered after forward (reshard_after_forward); a layer's unsharded gradients in backward, and
/// the root's until its post-backward.
constexpr void add_fsdp_gathered_units(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  const precision& p = s.p();
  const fsdp_gathered& g = s.gathered;
  // reshard_after_forward=False keeps every unit gathered from its forward to its backward,
  // an int N keeps a 1/N share of each (FSDP2 fully_shard); the units are then not gathered
  // again, or gathered from that share.
  const std::int64_t kept_ranks = l.reshard_after_forward;
  if (kept_ranks > 0) {
    const bytes all = elements_in(p.compute, s.acc.trained_elements) + s.acc.frozen_weights;
    add_entry(ledger, "parameters kept gathered after forward (reshard_after_forward)",
              component::buffers, memory_space::device, divide_up(all, kept_ranks), 0,
              "FSDP2 fully_shard reshard_after_forward: False keeps units unsharded, an int "
              "resharded to that many ranks",
              lifetime::forward_backward);
  }
  if (kept_ranks != 1) {
    add_entry(ledger,
              g.layers == 2 ? "gathered FSDP units (root + current and prefetched layers)"
                            : "gathered FSDP units (root + current layer)",
              component::buffers, memory_space::device, g.root + g.layer * g.layers, 0,
              "FSDP paper (Zhao et al. 2023) §3.2: the units gathered at once",
              lifetime::forward_backward, entry_role::fsdp_gathered);
  }
  add_entry(ledger, "FSDP layer gradients (unsharded, and their reduce-scatter copy)",
            component::buffers, memory_space::device, g.layer_gradients, 0,
            "FSDP2 _fsdp_collectives.py foreach_reduce; FSDP1 _runtime_utils.py "
            "_post_backward_hook",
            lifetime::backward_pass);
  // The step timeline makes them in the head's and the embeddings' backward.
  add_entry(ledger, "FSDP root gradients (unsharded, to its post-backward)", component::buffers,
            memory_space::device, g.root_gradients, 0,
            "FSDP2 _fsdp_state.py _root_post_backward_final_callback: the root reduced last",
            lifetime::backward_pass, entry_role::fsdp_root_gradients);
}

/// The parameters sharded weights are gathered into: FSDP's units, SHARD_GRAD_OP's whole
/// model, or ZeRO-3's largest layer and prefetch bucket.
constexpr void add_gathered_parameters(memory_ledger& ledger, const stage_model_states& s) {
  if (!s.shard_weights) return;
  const layout& l = s.l();
  const precision& p = s.p();
  if (s.fsdp && l.zero == sharding::zero2) {
    const std::int64_t params = checked_add(s.acc.trained_elements, s.acc.frozen_elements);
    add_entry(ledger, "unsharded parameters (shard grad op)", component::buffers,
              memory_space::device, storage_bytes(p.compute, params), 0,
              "PyTorch FSDP SHARD_GRAD_OP: parameters stay gathered from forward to backward",
              lifetime::forward_backward, entry_role::fsdp_gathered);
    return;
  }
  if (s.fsdp) return add_fsdp_gathered_units(ledger, s);
  if (s.deepspeed) {
    add_entry(ledger, "ZeRO-3 prefetch bucket", component::buffers, memory_space::device,
              storage_bytes(p.weights, 1) * l.zero3_prefetch_bucket_elements, 0,
              "DeepSpeed stage3_prefetch_bucket_size (default 5e7 elements)",
              lifetime::forward_backward);
  }
  add_entry(
      ledger, "gathered largest layer (weights + gradients)", component::buffers,
      memory_space::device,
      (storage_bytes(p.weights, 1) + storage_bytes(p.gradients, 1)) * s.acc.largest_tensor_elements,
      0, "DeepSpeed stage3.py estimator: 4 x largest layer parameters", lifetime::forward_backward);
}

/// The optimizer step's temporaries, where PyTorch's optimizer steps on the device.
constexpr void add_step_temporaries(memory_ledger& ledger, const stage_model_states& s) {
  const training& t = s.t;
  if (s.deepspeed || s.megatron || t.layout.optimizer_offload != offload_target::none) return;
  const bool in_backward = t.optimizer.options.in_backward;
  add_entry(
      ledger,
      in_backward ? "optimizer step temporaries (one tensor, in backward)"
                  : "optimizer step temporaries",
      component::buffers, memory_space::device,
      step_temporaries(t, s.tensors, s.range, s.experts_per_rank, s.shard_optimizer ? s.n : 1),
      // A foreach list holds one tensor per updated tensor.
      in_backward ? 1 : checked_mul(step_scratch_of(t.optimizer).lists, s.acc.trained_tensors),
      "optimizer.hpp step_scratch_of: torch/optim _multi_tensor_* / _single_tensor_*",
      in_backward ? lifetime::layer_backward : lifetime::optimizer_step);
}

/// The model-state ledger of a stage's states.
constexpr memory_ledger model_states_of(const stage_model_states& s) {
  memory_ledger ledger{};
  add_weights(ledger, s);
  add_gradients(ledger, s);
  add_optimizer_states(ledger, s);
  add_reduce_buckets(ledger, s);
  add_gathered_parameters(ledger, s);
  add_step_temporaries(ledger, s);
  return ledger;
}
}  // namespace detail

/// The model-state ledger of one GPU on pipeline stage `stage` (every tensor-, data-, context-
/// and expert-parallel rank of a stage holds the same model states; with an uneven vocabulary
/// split the first tensor-parallel rank holds the most, and that is the one given).
constexpr memory_ledger model_states(const training& t, const tensor_ledger& model_tensors,
                                     std::int64_t stage) {
  return detail::model_states_of(detail::stage_model_states_of(t, model_tensors, stage));
}

/// Parameters the fine-tuning mode trains in the whole model: the selected tensors, or the LoRA
/// adapters (r x (in + out) per targeted weight).
constexpr std::int64_t trainable_parameters(const finetuning& f,
                                            const tensor_ledger& model_tensors) {
  std::int64_t n = 0;
  for (const tensor_group& g : model_tensors) {
    const std::int64_t copies = g.tensor_count();
    n = detail::checked_add(
        n, detail::checked_mul(trained_tensors(f, g, detail::block_of(g)), g.elements()));
    n = detail::checked_add(n, detail::checked_mul(lora_elements(f, g), copies));
  }
  return n;
}

/// Host bytes one process needs while the model is built, before sharding: the whole model in
/// fp32 (from_pretrained, then partition), or with DeepSpeed's zero.Init only the largest tensor,
/// which is partitioned as soon as it is built (DeepSpeed stage3.py estimators: 4 x params, or
/// 4 x largest layer params, per process).
constexpr bytes host_bytes_at_load(const tensor_ledger& model_tensors, bool zero_init) {
  std::int64_t largest = 0;
  for (const tensor_group& g : model_tensors)
    if (g.role == tensor_role::parameter && g.elements() > largest) largest = g.elements();
  return bytes{detail::checked_mul(4, zero_init ? largest : parameters(model_tensors))};
}

/// The model states of stage `stage`, from the model's own tensor ledger.
constexpr memory_ledger model_states(const training& t, std::int64_t stage = 0) {
  return model_states(t, tensors(t.model), stage);
}

/// The pipeline stage whose GPUs need the most (the first of equals): the most loaded rank.
constexpr stage_states most_loaded_stage(const training& t) {
  const tensor_ledger model_tensors = tensors(t.model);
  return most_loaded(t.layout, t.model, edges_of(model_tensors, t.finetune),
                     [&](std::int64_t s) { return model_states(t, model_tensors, s); });
}

}  // namespace vramfit
