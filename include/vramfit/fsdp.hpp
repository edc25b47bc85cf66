// SPDX-License-Identifier: MIT
// PyTorch FSDP (1: FullyShardedDataParallel, 2: fully_shard): the units it gathers, what they
// hold unsharded, and when (docs/sources.md#pytorch-fsdp). frameworks.hpp asks it.
#pragma once

#include "model_state_parts.hpp"

namespace vramfit::detail {

/// What an FSDP unit gathers: its trained elements (gathered in the compute format, each with a
/// gradient) and its frozen weights as stored (a quantized base is gathered quantized, its
/// QuantStates not: quant_state.hpp).
struct fsdp_unit {
  std::int64_t trained = 0;
  bytes frozen{};
};

/// FSDP's units on a stage: each transformer layer is a unit (transformer_auto_wrap_policy,
/// torchtitan's per-block fully_shard), the tensors outside the layers the root unit.
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
  enum class unit_of : unsigned char { layer, root, root_after_layers };
  auto unit = [&](std::int64_t layer, unit_of which) {
    const bool root = which != unit_of::layer;
    const bool after_layers_only = which == unit_of::root_after_layers;
    unsharded_states acc{};
    const stage_range only =
        root ? stage_range{.first_layer = 0, .layers = 0, .first = stage.first, .last = stage.last}
             : stage_range{.first_layer = layer, .layers = 1, .first = false, .last = false};
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const tensor_group& g = tensors[i];
      const bool before = i < first_layers;
      if (root ? g.layer_count == 0 && !(after_layers_only && before) : g.in_layer(layer))
        add_group(t, g, only, before, experts_per_rank, 1, acc, group_parts::sizes);
    }
    // The flat parameter holds a 4-bit weight's packed payload, not its QuantState.
    return fsdp_unit{acc.trained_elements, acc.frozen_weights - acc.frozen_quant_state};
  };
  auto size = [&](const fsdp_unit& u) { return elements_in(compute, u.trained) * 2 + u.frozen; };
  const std::int64_t end = stage.first_layer + stage.layers;
  fsdp_units units{unit(0, unit_of::root), unit(0, unit_of::root_after_layers).trained, {}};
  std::int64_t considered[2 * tensor_ledger::capacity + 1] = {};  // each edge once
  std::size_t edges = 0;
  auto consider = [&](std::int64_t layer) {
    if (layer < stage.first_layer || layer >= end) return;
    for (std::size_t i = 0; i < edges; ++i)
      if (considered[i] == layer) return;
    considered[edges++] = layer;
    const fsdp_unit u = unit(layer, unit_of::layer);
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

/// Whether FSDP reduces the gradients only after the step's last micro-batch, adding each unit's
/// unsharded gradients up until then: FSDP2 under torch.distributed.pipelining, whose stages run
/// every backward with set_requires_gradient_sync(False) (pipelining/stage.py
/// backward_maybe_with_nosync; torchtitan's pipeline schedules). The sum is kept in the
/// reduce-scatter's format (_fsdp_param.py to_accumulated_grad_if_needed: reduce_dtype).
constexpr bool fsdp_defers_reduction(const layout& l) {
  return l.gathers_units() && l.fsdp_version == 2 && l.pipeline > 1;
}

/// What FSDP holds unsharded: the root gathered around the layers, a layer with the next one
/// prefetched past one rank, and each unit's gradients until its post-backward, the root's last
/// (docs/sources.md#pytorch-fsdp: "gathering" and "reducing").
constexpr gathered_units fsdp_gathered_of(const training& t, const tensor_ledger& tensors,
                                          const stage_range& stage, std::int64_t experts_per_rank) {
  const layout& l = t.layout;
  const precision& p = t.precision;
  const fsdp_units units = fsdp_units_of(t, tensors, stage, experts_per_rank);
  // Autograd makes the gathered parameters' gradients in their format, the compute format, and a
  // second copy follows. FSDP2's foreach_reduce copies them into a reduce-scatter input in the
  // sharded gradients' format. FSDP1's split backward concatenates its views' gradients into the
  // flat gradient (_flat_param.py _use_unsharded_views), which is cast to reduce_dtype where that
  // differs (_runtime_utils.py _post_backward_hook); both moments hold two copies, the larger
  // counted.
  const element_format& reduced = sharded_gradient_format(t);
  auto unsharded = [&](std::int64_t trained) { return elements_in(p.compute, trained); };
  auto gradients = [&](const fsdp_unit& u) {
    const bytes copy = elements_in(reduced, u.trained);
    const bytes flat = unsharded(u.trained);
    return flat + (l.fsdp_version == 1 && copy < flat ? flat : copy);
  };
  auto gathered = [&](const fsdp_unit& u) { return elements_in(p.compute, u.trained) + u.frozen; };
  // FSDP2 all-gathers the next unit while the current one computes (implicit forward prefetch,
  // _fsdp_state.py backward prefetch); FSDP1 where backward_prefetch=BACKWARD_PRE or
  // forward_prefetch asks (_runtime_utils.py _prefetch_handle).
  const bool prefetched =
      l.shard_degree() > 1 &&
      (l.fsdp_version == 2 || l.fsdp_backward_prefetch == fsdp_backward_prefetch::pre ||
       l.fsdp_forward_prefetch);
  const bytes root = unsharded(units.root.trained);
  return {gathered(units.root), gathered(units.layer), prefetched ? 2 : 1, gradients(units.layer),
          unsharded(units.layer.trained), gradients(units.root), root,
          // The head's gradients wait for the root's post-backward: FSDP2's in the unsharded
          // parameters', FSDP1's in autograd's input buffer of the split that views the flat
          // parameter, which runs after the embeddings' backward (_flat_param.py
          // _use_unsharded_views; tests/validation/fsdp1_root_gradient.py). A tied head's weight is
          // the embedding: its gradient comes with the head's backward.
          !t.model.tied_embeddings ? unsharded(units.root_head_trained) : root};
}

/// What FSDP1's record_stream frees leave reserved on a stage of `layers` layer units beyond the
/// gathered units and gradients allocated (docs/allocator.md#deferred-frees). A unit's all-gather
/// output is freed with the compute stream recorded (flat_param.py _free_unsharded_flat_param), its
/// unsharded gradient with the post-backward stream (_runtime_utils.py _post_backward_hook), so a
/// block returns once the GPU has run what the CPU issued. With the rate limiter the CPU waits,
/// before each all-gather, for the free two units back (_runtime_utils.py _unshard,
/// _limiter_utils.py _FreeEventQueue, limit 2): one unit's all-gather and one unit's gradient
/// (its reduce-scatter assumed to keep pace) are outstanding. Without it the CPU is bounded by
/// nothing FSDP does: vramfit takes the bound, the step's every all-gather (two per unit) and
/// every unit's gradient outstanding, assuming a GPU-bound step.
constexpr deferred_frees fsdp1_deferred_frees(const layout& l, const gathered_units& g,
                                              std::int64_t layers) {
  if (!l.gathers_units() || l.fsdp_version != 1 || l.shard_degree() < 2) return {};
  if (l.fsdp_limit_all_gathers) return {{g.layer, 1}, {g.layer_unsharded_gradients, 1}};
  const std::int64_t all_gathers = checked_mul(2, layers);
  return {{g.layer, all_gathers > g.layers ? all_gathers - g.layers : 0},
          {g.layer_unsharded_gradients, layers - 1}};
}

/// FSDP's gathered units: the root and the current and prefetched layers, or all units kept
/// gathered after forward (reshard_after_forward); a layer's unsharded gradients in backward, and
/// the root's until its post-backward.
constexpr void add_fsdp_gathered_units(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  const precision& p = s.p();
  const gathered_units& g = s.gathered;
  // reshard_after_forward=False keeps every unit gathered from its forward to its backward, an
  // int N a 1/N share of each; the units are then not gathered again, or from that share.
  const std::int64_t kept_ranks = l.reshard_after_forward;
  if (kept_ranks > 0) {
    const bytes all = elements_in(p.compute, s.acc.trained_elements) + s.acc.frozen_weights -
                      s.acc.frozen_quant_state;
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
              lifetime::forward_backward, entry_role::gathered_parameters);
  }
  add_entry(ledger, "FSDP layer gradients (unsharded, and their reduce-scatter copy)",
            component::buffers, memory_space::device, g.layer_gradients, 0,
            "FSDP2 _fsdp_collectives.py foreach_reduce; FSDP1 _runtime_utils.py "
            "_post_backward_hook",
            lifetime::backward_pass, entry_role::unit_gradients);
  if (fsdp_defers_reduction(l))
    add_entry(ledger, "unsharded gradients added up over the micro-batches", component::gradients,
              memory_space::device,
              elements_in(sharded_gradient_format(s.t), s.acc.trained_elements),
              s.acc.trained_tensors,
              "pipelining/stage.py backward_maybe_with_nosync: no gradient sync before the last "
              "micro-batch; FSDP2 _fsdp_param.py to_accumulated_grad_if_needed: in reduce_dtype",
              lifetime::backward_pass, entry_role::accumulated_gradients);
  // The step timeline makes them in the head's and the embeddings' backward.
  add_entry(ledger, "FSDP root gradients (unsharded, to its post-backward)", component::buffers,
            memory_space::device, g.root_gradients, 0,
            "FSDP2 _fsdp_state.py _root_post_backward_final_callback: the root reduced last",
            lifetime::backward_pass, entry_role::root_gradients);
}

/// SHARD_GRAD_OP: every unit stays gathered from its forward to its backward.
constexpr void add_fsdp_shard_grad_op_parameters(memory_ledger& ledger,
                                                 const stage_model_states& s) {
  const std::int64_t params = checked_add(s.acc.trained_elements, s.acc.frozen_elements);
  add_entry(ledger, "unsharded parameters (shard grad op)", component::buffers,
            memory_space::device, storage_bytes(s.p().compute, params), 0,
            "PyTorch FSDP SHARD_GRAD_OP: parameters stay gathered from forward to backward",
            lifetime::forward_backward, entry_role::gathered_parameters);
}

/// FSDP's gathered parameters: its units under full sharding, the whole model under
/// SHARD_GRAD_OP.
constexpr void add_fsdp_gathered_parameters(memory_ledger& ledger, const stage_model_states& s) {
  if (s.l().zero == sharding::zero2) return add_fsdp_shard_grad_op_parameters(ledger, s);
  add_fsdp_gathered_units(ledger, s);
}

// FSDP's timing: what its side streams allocate, and the root's post-backward.

/// Whether backward's sharded gradients are the output of FSDP's reduce-scatter, allocated on its
/// stream: FSDP2 on one rank too (it copies), FSDP1 past one rank (on one it runs NO_SHARD)
/// (docs/sources.md#pytorch-fsdp: "streams").
constexpr bool fsdp_gradients_on_side_stream(const layout& l, bool sharded_grads) {
  return sharded_grads && (l.fsdp_version == 2 || l.shard_degree() > 1);
}

/// Of FSDP's gathered parameters (`buffer` bytes), what the all-gather stream allocates past one
/// rank: FSDP1's unsharded flat parameters (all of them under SHARD_GRAD_OP), FSDP2's all-gather
/// output of one unit, the larger (docs/sources.md#pytorch-fsdp: "streams").
constexpr bytes fsdp_gathered_on_side_stream(const layout& l, const gathered_units& g,
                                             bytes buffer) {
  if (l.shard_degree() < 2) return {};
  if (l.zero == sharding::zero2) return l.fsdp_version == 1 ? buffer : bytes{};
  if (l.zero != sharding::zero3 || l.reshard_after_forward == 1) return {};
  const bytes side = l.fsdp_version == 1 ? g.root + g.layer * g.layers
                     : g.root > g.layer  ? g.root
                                         : g.layer;
  return side <= buffer ? side : bytes{};
}

/// The head's backward under FSDP: its unsharded gradients wait for the root's post-backward.
template <class Add>
constexpr void fsdp_head_gradients(const gathered_units& g, const root_gradient_entries& at,
                                   Add&& add) {
  add("FSDP root gradients (the head's, unsharded)", at.unsharded, g.root_head_gradients);
}

/// The root's post-backward of a micro-batch before the last, where the reduction waits for the
/// last (fsdp_defers_reduction): the embeddings' unsharded gradients join the head's, and both
/// are added into the accumulated ones (_fsdp_param.py accumulate_unsharded_grad_if_needed).
template <class Add>
constexpr void fsdp_root_accumulate(const gathered_units& g, const root_gradient_entries& at,
                                    Add&& add) {
  const bytes unsharded = g.root_unsharded_gradients;
  add("FSDP root gradients (the embeddings', unsharded)", at.unsharded,
      unsharded - g.root_head_gradients);
  add("FSDP root gradients added into the accumulated ones", at.unsharded, -unsharded);
}

/// The root's post-backward, after the root is resharded: the embeddings' unsharded gradients
/// join the head's, FSDP2 copies them into the reduce-scatter input and frees them, the output
/// becomes (or is added into) the `sharded` gradients, and the input goes (traced order).
template <class Add>
constexpr void fsdp_root_post_backward(const gathered_units& g, const root_gradient_entries& at,
                                       bytes sharded, bool first_pass, Add&& add) {
  const bytes unsharded = g.root_unsharded_gradients;
  const bytes copy = g.root_gradients - unsharded;
  add("FSDP root gradients (the embeddings', unsharded)", at.unsharded,
      unsharded - g.root_head_gradients);
  add("FSDP root reduce-scatter input", at.unsharded, copy);
  add("FSDP root gradients (unsharded) freed", at.unsharded, -unsharded);
  add("root gradients (reduce-scatter output)", at.sharded, sharded);
  if (!first_pass) add("root gradients added in", at.working, -sharded);
  add("FSDP root reduce-scatter input freed", at.unsharded, -copy);
}

}  // namespace vramfit::detail
