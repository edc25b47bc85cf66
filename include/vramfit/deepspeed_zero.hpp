// SPDX-License-Identifier: MIT
// DeepSpeed ZeRO (stage_1_and_2.py, stage3.py): its gradient buffers, fp32 gradient copies,
// reduce bucket and gathered parameters (docs/sources.md#deepspeed-zero). frameworks.hpp asks it;
// deepspeed_estimate.hpp is DeepSpeed's own estimator, a different thing.
#pragma once

#include <limits>
#include <vector>

#include "model_state_parts.hpp"

namespace vramfit::detail {

/// DeepSpeed's gradients where they are not autograd's: ZeRO-3's flat partition buffer, or the
/// staging buffers of ZeRO-1/2 offloading the optimizer. False when neither applies
/// (docs/sources.md#deepspeed-zero: "gradients").
constexpr bool add_deepspeed_gradient_buffers(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  const precision& p = s.p();
  if (l.zero == sharding::zero3) {
    // One flat buffer for the run, in the gradient-accumulation dtype (the policy's gradient
    // format here), each bucket reduce-scattered into it.
    add_entry(ledger, "gradient partitions (flat buffer)", component::gradients,
              s.shard_grads ? s.optimizer_space : memory_space::device,
              divide_up(s.acc.gradients, s.n), 1,
              "DeepSpeed stage3.py _setup_for_real_optimizer: grad_partitions_flat_buffer");
    return true;
  }
  if (!s.shard_optimizer || l.optimizer_offload == offload_target::none) return false;
  // Offloading the optimizer, gradients go to the host through a staging buffer of the largest
  // parameter, and the step's 16-bit result comes back through a pinned copy of the partition.
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

/// The fp32 gradients DeepSpeed's step makes of one group's (ZeRO-3: one sub-group's) partition,
/// flattened then cast, until that group's step ends; offloaded, a pinned host buffer for the run
/// (docs/sources.md#deepspeed-zero: "step").
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

/// The reduce buffer of reduce_bucket_size elements in the gradients' format whatever the
/// model's size (a second one with overlap_comm; ZeRO-3 keeps one for the run), and the copy each
/// reduction makes of at most a bucket of gradients (docs/sources.md#deepspeed-zero: "buckets").
constexpr void add_deepspeed_reduce_bucket(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  if (!s.shard_optimizer) return;
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

/// ZeRO-3's gathered parameters as DeepSpeed's estimator counts them: 4 x the largest layer
/// (weights and gradients), for the implementations that name no coordinator of their own.
constexpr void add_zero3_gathered_parameters(memory_ledger& ledger, const stage_model_states& s) {
  const precision& p = s.p();
  add_entry(
      ledger, "gathered largest layer (weights + gradients)", component::buffers,
      memory_space::device,
      (storage_bytes(p.weights, 1) + storage_bytes(p.gradients, 1)) * s.acc.largest_tensor_elements,
      0, "DeepSpeed stage3.py estimator: 4 x largest layer parameters", lifetime::forward_backward);
}

// DeepSpeed ZeRO-3's gathering at run time: what partitioned_param_coordinator.py holds gathered,
// in closed form over the step's modules (docs/sources.md#deepspeed-zero: "gathering").

/// A parameter as ZeRO-3's coordinator counts it.
struct zero3_parameter {
  std::int64_t numel = 0;   ///< ds_numel: its elements (this tensor-parallel rank's)
  bytes size{};             ///< its bytes gathered
  element_format format{};  ///< its format
  bool persistent = false;  ///< ds_persist: never partitioned away, gathered for the run
};

/// Calls `visit(parameter)` for the parameters of `g` at `layer` (-1: outside the layers) in the
/// order its module runs them: the tensor (a packed expert tensor one parameter over this rank's
/// experts, as transformers 5 stores them), then LoRA's A and B.
template <class Visit>
constexpr void for_each_zero3_parameter(const training& t, const tensor_group& g,
                                        std::int64_t layer, std::int64_t experts_per_rank,
                                        Visit&& visit) {
  if (g.role != tensor_role::parameter) return;
  const std::int64_t threshold = t.layout.zero3_persistence_threshold;
  tensor_block one = block_of(g);
  if (layer >= 0) one = {layer, 1, 0, g.experts};
  const std::int64_t copies = g.kind == tensor_kind::expert ? experts_per_rank : 1;
  one.expert_count = copies;
  const local_shape shape = tp_local_shape(g, t.model, t.layout.tensor);
  const std::int64_t trained = trained_tensors(t.finetune, g, one);
  const element_format& weights = t.precision.weights;
  const element_format& frozen = frozen_format(t, g);
  const std::int64_t numel = checked_mul(shape.elements(), copies);
  visit(zero3_parameter{
      // A 4-bit weight's partition and gather hold its packed payload (quant_state.hpp).
      numel,
      stored(weights, shape) * trained +
          (frozen_stored(frozen, shape) - quant_state_bytes(frozen, shape)) * (copies - trained),
      trained > 0 ? weights : frozen, numel <= threshold});
  if (lora_elements(t.finetune, g) == 0) return;
  const lora_adapters lora = lora_adapters_of(t, g, shape);
  for (const local_shape& adapter : {lora.a, lora.b}) {
    const std::int64_t n = checked_mul(adapter.elements(), copies);
    visit(zero3_parameter{n, stored(lora.format, adapter) * copies, lora.format, n <= threshold});
  }
}

/// What ZeRO-3's coordinator holds gathered over a step of a stage, in elements: `most` at once,
/// from what bounds it (docs/sources.md#deepspeed-zero: "gathering").
struct zero3_gathering {
  std::int64_t all = 0;       ///< the parameters not persistent: the most there is to gather
  std::int64_t crossing = 0;  ///< the largest of them a prefetch can end on
  std::int64_t reused = 0;    ///< the most held without prefetch: what the reuse distance keeps
  std::int64_t most = 0;      ///< the most gathered at once
  bytes peak{};               ///< `most` in the widest format gathered
  std::int64_t persistent_numel = 0, persistent_tensors = 0;
  bytes persistent{};  ///< the persistent parameters' bytes
};

/// The most ZeRO-3's coordinator holds gathered over a step of stage `range` (one forward, one
/// backward), from partitioned_param_coordinator.py:
/// - A module's fetch all-gathers what it lacks (fetch_sub_module), whatever is gathered.
/// - Then, trace complete, it prefetches from the trace while the elements being prefetched are
///   fewer than min(max_live_parameters - __n_available_params, prefetch_bucket_size): a
///   prefetch stops on the parameter that reaches that, so it leaves fewer than max_live plus
///   that parameter gathered; none with a bucket or max_live of 0.
/// - Its release (release_sub_module, __params_to_release) keeps a persistent parameter, one
///   whose later use the prefetcher passed, and one used again within max_reuse_distance
///   elements of the modules between. In a step each parameter's next use is its backward,
///   after every module after it in forward has run twice, so a suffix of the forward stays
///   gathered into backward: those whose elements after them, twice, are fewer than the
///   distance (the head, whose backward comes next, whenever the distance is above 0). A tied
///   embedding is kept from the embedding to the head, and to its own backward, when the
///   forward between is within the distance: it is then never released.
/// Without prefetch that is exactly what is held: the module's parameter and the suffix (`reused`,
/// the most at the turn to backward, or the largest parameter alone). With it, either the
/// prefetcher stopped under max_live on a parameter (at most max_live - 1 + the largest
/// parameter that is ever released), or it found max_live held and the module's fetch adds to
/// what the reuse distance keeps (at most `reused`); never more than every parameter. The
/// prefetch bucket sets how fast the prefetcher gets ahead, which hangs on the modules without
/// parameters too (each fetch prefetches), which vramfit does not list: the bound does not use
/// it.
constexpr zero3_gathering zero3_gathering_of(const training& t, const tensor_ledger& tensors,
                                             const stage_range& range,
                                             std::int64_t experts_per_rank) {
  const layout& l = t.layout;
  zero3_gathering out{};
  // The forward's modules: the tensors before the layers, the layers' runs, those after them,
  // and a tied head (the token embedding's parameter again).
  const std::size_t first_layers = first_layer_group(tensors);
  static_vector<layer_range, 2 * tensor_ledger::capacity + 16> runs{};
  for_each_layer_run(range.first_layer, range.first_layer + range.layers,
                     edges_of(tensors, t.finetune).at, [&](std::int64_t first, std::int64_t count) {
                       runs.push_back({first, count});
                     });
  auto outside = [&](bool before, auto&& visit) {
    for (std::size_t i = before ? 0 : first_layers; i < (before ? first_layers : tensors.size());
         ++i) {
      const tensor_group& g = tensors[i];
      if (g.layer_count == 0 && stage_holds(t.model, g, range, before))
        for_each_zero3_parameter(t, g, -1, experts_per_rank, [&](const zero3_parameter& z) {
          visit(z, g.kind == tensor_kind::embedding && g.split == tp_split::vocab);
        });
    }
  };
  // Totals, the largest, the widest format, the persistent, and the token embedding.
  zero3_parameter embedding{};
  bool embedding_found = false;
  std::int64_t forward = 0, largest_other = 0;
  element_format widest{};
  bytes widest_bytes{};
  auto count = [&](const zero3_parameter& z, std::int64_t copies, bool token_embedding) {
    forward = checked_add(forward, checked_mul(z.numel, copies));
    if (token_embedding && !embedding_found) {
      embedding = z;
      embedding_found = true;
    } else if (!z.persistent && z.numel > largest_other) {
      largest_other = z.numel;
    }
    if (z.persistent) {
      out.persistent_numel = checked_add(out.persistent_numel, checked_mul(z.numel, copies));
      out.persistent_tensors = checked_add(out.persistent_tensors, copies);
      out.persistent += z.size * copies;
      return;
    }
    out.all = checked_add(out.all, checked_mul(z.numel, copies));
    const bytes per = storage_bytes(z.format, std::int64_t{1} << 20);
    if (per > widest_bytes) {
      widest = z.format;
      widest_bytes = per;
    }
  };
  outside(true, [&](const zero3_parameter& z, bool token) { count(z, 1, token); });
  for (const layer_range& r : runs)
    for (const tensor_group& g : tensors)
      if (g.in_layer(r.first))
        for_each_zero3_parameter(t, g, r.first, experts_per_rank,
                                 [&](const zero3_parameter& z) { count(z, r.count, false); });
  outside(false, [&](const zero3_parameter& z, bool) { count(z, 1, false); });
  const std::int64_t reuse = l.zero3_reuse_distance_elements;
  const bool tied = t.model.tied_embeddings && range.last && embedding_found;
  const std::int64_t embedding_gathered = embedding.persistent ? 0 : embedding.numel;
  // A tied embedding is held from the embedding's forward to its backward when the forward
  // between it and the head (every module but the two) is within the reuse distance.
  const bool held = tied && forward - embedding.numel < reuse;
  out.crossing = held || embedding_gathered < largest_other ? largest_other : embedding_gathered;
  // The suffix the reuse distance keeps: walked from the head back while the elements after a
  // parameter, twice, are under the distance (after <= (distance - 1) / 2).
  const std::int64_t within = reuse > 0 ? (reuse - 1) / 2 : -1;
  std::int64_t after = 0, kept = 0;
  bool open = true;
  auto walk = [&](const zero3_parameter& z) {
    if (!open || after > within) {
      open = false;
      return;
    }
    if (!z.persistent) kept = checked_add(kept, z.numel);
    after = checked_add(after, z.numel);
  };
  if (tied) walk(embedding);  // the head: its backward is the next module
  static_vector<zero3_parameter, 3 * tensor_ledger::capacity> layer{};
  auto reversed = [&](auto&& visit_groups) {
    layer.clear();
    visit_groups([&](const zero3_parameter& z) { layer.push_back(z); });
    for (std::size_t i = layer.size(); i-- > 0;) walk(layer[i]);
  };
  reversed([&](auto&& add) { outside(false, [&](const zero3_parameter& z, bool) { add(z); }); });
  for (std::size_t i = runs.size(); i-- > 0 && open;) {
    const layer_range& r = runs[i];
    std::int64_t per_layer = 0, gathered = 0, first = -1;
    for (const tensor_group& g : tensors)
      if (g.in_layer(r.first))
        for_each_zero3_parameter(t, g, r.first, experts_per_rank, [&](const zero3_parameter& z) {
          if (first < 0) first = z.numel;
          per_layer = checked_add(per_layer, z.numel);
          if (!z.persistent) gathered = checked_add(gathered, z.numel);
        });
    if (per_layer == 0) continue;
    // Whole layers kept: the layer's first parameter has the layer's other elements after it.
    const std::int64_t room = within - after - (per_layer - first);
    std::int64_t whole = room < 0 ? 0 : room / per_layer + 1;
    if (whole > r.count) whole = r.count;
    kept = checked_add(kept, checked_mul(whole, gathered));
    after = checked_add(after, checked_mul(whole, per_layer));
    if (whole < r.count)
      reversed([&](auto&& add) {
        for (const tensor_group& g : tensors)
          if (g.in_layer(r.first)) for_each_zero3_parameter(t, g, r.first, experts_per_rank, add);
      });
  }
  // Before the layers: a tied embedding's next use is the head, counted there.
  reversed([&](auto&& add) {
    outside(true, [&](const zero3_parameter& z, bool token) {
      if (!(tied && token)) add(z);
    });
  });
  out.reused = kept;
  if (largest_other > out.reused) out.reused = largest_other;
  if (embedding_gathered > out.reused) out.reused = embedding_gathered;
  if (held && embedding_gathered + largest_other > out.reused)
    out.reused = embedding_gathered + largest_other;
  out.most = out.reused;
  if (l.zero3_prefetch_bucket_elements > 0 && l.zero3_max_live_elements > 0) {
    const std::int64_t live = l.zero3_max_live_elements - 1;
    const std::int64_t filled = out.crossing > std::numeric_limits<std::int64_t>::max() - live
                                    ? std::numeric_limits<std::int64_t>::max()
                                    : live + out.crossing;
    if (filled > out.most) out.most = filled;
    if (out.all < out.most) out.most = out.all;
  }
  out.peak = out.most > 0 ? storage_bytes(widest, out.most) : bytes{};
  return out;
}

/// DeepSpeed ZeRO-3's gathered parameters (docs/sources.md#deepspeed-zero: "gathering"): the
/// persistent parameters, gathered for the run; the most the coordinator holds gathered at once
/// over the step, from forward to the end of backward; a parameter's full gradient until its
/// reduce hook copies it into the bucket. On one rank with the partitions on the device nothing
/// is gathered: a parameter is its partition (partition_parameters.py _no_gather_coalesced).
constexpr void add_deepspeed_zero3_gathering(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  const bool memory = s.n > 1 || l.parameter_offload != offload_target::none;
  const zero3_gathering g = zero3_gathering_of(s.t, s.tensors, s.range, s.experts_per_rank);
  add_entry(ledger, "ZeRO-3 persistent parameters (gathered for the run)", component::weights,
            memory_space::device, memory ? g.persistent : bytes{}, g.persistent_tensors,
            "DeepSpeed parameter_offload.py mark_persistent_parameters: numel <= "
            "stage3_param_persistence_threshold (1e5); stage3.py _post_step gathers them");
  add_entry(ledger, "ZeRO-3 gathered parameters (fetched, prefetched and kept)", component::buffers,
            memory_space::device, memory ? g.peak : bytes{}, 0,
            "DeepSpeed partitioned_param_coordinator.py fetch_sub_module, release_sub_module: "
            "max_live_parameters, prefetch_bucket_size, max_reuse_distance",
            lifetime::forward_backward, entry_role::gathered_parameters);
  // Autograd's gradient is in the parameter's format; held with the gathered parameters (it
  // comes first with the head's backward, before the layers').
  add_entry(ledger, "a parameter's full gradient until its reduce hook (the largest)",
            component::buffers, memory_space::device,
            elements_in(s.p().weights, s.acc.largest_tensor_elements), 1,
            "DeepSpeed stage3.py __add_grad_to_ipg_bucket: param.grad copied into the bucket",
            lifetime::forward_backward);
}

/// Of ZeRO-3's gathered parameters (`buffer` bytes), what the all-gather stream allocates: all of
/// them. The coordinator all-gathers and waits under its __allgather_stream, a stream of its own
/// with overlap_comm, which ZeRO-3 turns on (parameter_offload.py; zero/config.py
/// overlap_comm_valid), so both the all-gather outputs and the copies out of them come from that
/// stream's pool.
constexpr bytes deepspeed_gathered_on_side_stream(const layout& l, bytes buffer) {
  return l.zero == sharding::zero3 ? buffer : bytes{};
}

/// ZeRO-1 reduces the accumulated `gradients` into this rank's partition at the boundary and drops
/// the others before its step (docs/sources.md#deepspeed-zero: "step"): the bytes dropped.
template <class Add>
constexpr bytes deepspeed_zero1_reduce(const layout& l, int gradient_entry, bytes gradients,
                                       Add&& add) {
  if (l.zero != sharding::zero1) return {};
  const bytes dropped = gradients - divide_up(gradients, l.shard_degree());
  add("gradients reduced into the ZeRO-1 partition", gradient_entry, -dropped);
  return dropped;
}

}  // namespace vramfit::detail
