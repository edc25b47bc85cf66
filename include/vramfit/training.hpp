// SPDX-License-Identifier: MIT
// Training model states per GPU: weights, gradients, master weights, optimizer states and the
// buffers that come with them, for one pipeline stage of a parallel layout (ZeRO paper §3.1:
// "model states"; the activations are the other half). What a framework adds comes from
// frameworks.hpp.
#pragma once

#include <cstdint>

#include "frameworks.hpp"

namespace vramfit {

namespace detail {

/// Calls `visit(bytes, shape, copies)` for the tensors of `g` at `layer` (-1: outside the layers)
/// the optimizer updates, in the model's order: the weight, then LoRA's A and B. Routed experts
/// come twice at most, all their copies on the first: neighbouring pairs repeat after that.
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
/// `range`, in the model's order. Runs of identical layers are walked twice, all their copies on
/// the first pass: that meets every pair of neighbours.
template <class Visit>
constexpr void for_each_stage_updated_tensor(const training& t, const tensor_ledger& tensors,
                                             const stage_range& range,
                                             std::int64_t experts_per_rank, std::int64_t shards,
                                             Visit&& visit) {
  enum class side : unsigned char { before_layers, after_layers };
  auto outside = [&](side of_layers) {
    const bool before = of_layers == side::before_layers;
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
  outside(side::before_layers);
  for_each_layer_run(range.first_layer, range.first_layer + range.layers,
                     edges_of(tensors, t.finetune).at, run);
  outside(side::after_layers);
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

/// Accumulates the tensors of pipeline stage `stage` and reads how the layout shards them.
constexpr stage_model_states stage_model_states_of(const training& t, const tensor_ledger& tensors,
                                                   std::int64_t stage) {
  const layout& l = validated(t.layout, t.model);
  stage_model_states s{t, tensors, stage_of(t, stage)};
  s.experts_per_rank = t.model.is_moe() ? t.model.moe.routed_experts / l.expert : 1;
  s.n = l.shard_degree();
  check_finetuning(t.finetune, t.model, tensors);
  const std::size_t first_layers = first_layer_group(tensors);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    add_group(t, tensors[i], s.range, i < first_layers, s.experts_per_rank, s.n, s.acc);
  s.shard_optimizer = l.zero != sharding::none;
  s.shard_grads = l.zero == sharding::zero2 || l.zero == sharding::zero3;
  s.shard_weights =
      l.zero == sharding::zero3 || (l.shards_each_tensor() && l.zero == sharding::zero2);
  s.optimizer_space = space_of(l.optimizer_offload);
  s.weight_space = space_of(l.parameter_offload);
  if (l.gathers_units()) s.gathered = gathered_units_of(t, tensors, s.range, s.experts_per_rank);
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
              s.weight_space, s.shard(acc.trained_weights, acc.dim0_trained_weights, sharded),
              acc.weight_tensors, source);
  } else {
    add_entry(ledger, "weights (trained)", component::weights, s.weight_space,
              s.shard(acc.trained_weights, acc.dim0_trained_weights, sharded), acc.trained_tensors,
              source, lifetime::persistent, entry_role::trained_weights);
    // Sharded, the 4-bit weights' QuantStates stay whole on the device (quant_state.hpp).
    const bytes whole = sharded ? acc.frozen_quant_state : bytes{};
    add_entry(ledger, "weights (frozen)", component::weights, s.weight_space,
              s.shard(acc.frozen_weights - whole,
                      acc.dim0_frozen_weights - (sharded ? acc.dim0_frozen_quant_state : bytes{}),
                      sharded),
              acc.weight_tensors - acc.trained_tensors, source, lifetime::persistent,
              entry_role::frozen_weights);
    add_quant_states(ledger, whole, acc.frozen_quant_state_tensors);
  }
  add_entry(ledger, "model buffers (states)", component::weights, memory_space::device,
            acc.state_buffers, 0, "tensor ledger: stored non-parameter tensors");
  const precision& p = s.p();
  const bool nothing_to_cast =
      sharded && gathers_in_compute_format(s.l()) && p.autocast_weight_copies;
  add_entry(ledger, "autocast / fp8 weight copies", component::weights, memory_space::device,
            nothing_to_cast ? bytes{} : acc.cast_copies, 0,
            "torch.autocast weight cast cache; Transformer Engine Float8Tensor",
            p.fp8_weight_copies > 0 ? lifetime::persistent : lifetime::forward_backward);
}

/// Master weights and optimizer states; the 512-byte rounding of PyTorch's own tensors.
constexpr void add_optimizer_states(memory_ledger& ledger, const stage_model_states& s) {
  const unsharded_states& acc = s.acc;
  add_entry(ledger, s.shard_optimizer ? "master weights (partition)" : "master weights",
            component::master_weights, s.optimizer_space,
            s.shard(acc.master, acc.dim0_master, s.shard_optimizer),
            s.p().has_master() ? acc.trained_tensors : 0,
            "ZeRO paper §3.1: fp32 parameter copy, 4Ψ");
  const bool flat = flat_optimizer(s.l());
  add_entry(ledger, s.shard_optimizer ? "optimizer states (partition)" : "optimizer states",
            component::optimizer_states, s.optimizer_space,
            s.shard(acc.device_states, acc.dim0_states, s.shard_optimizer),
            flat ? 0 : acc.device_state_tensors,
            "optimizer.hpp: the optimizer's state tensors per parameter tensor");
  if (!flat) {
    add_entry(ledger, "optimizer states on the host", component::optimizer_states,
              memory_space::host, acc.host_states, acc.host_state_tensors,
              "torch.optim step counters off-device unless fused/capturable; paged states");
  }
  if (rounds_each_state_tensor(s.l())) {
    add_entry(ledger, "allocator rounding (512 B blocks)", component::overhead,
              memory_space::device, acc.rounding, 0,
              "c10 CUDACachingAllocator: every block a multiple of 512 bytes");
  }
}

/// The optimizer step's temporaries, where PyTorch's optimizer steps on the device.
constexpr void add_step_temporaries(memory_ledger& ledger, const stage_model_states& s) {
  const training& t = s.t;
  if (flat_optimizer(t.layout) || t.layout.optimizer_offload != offload_target::none) return;
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
  add_framework_gradients(ledger, s);
  add_optimizer_states(ledger, s);
  add_reduce_buffers(ledger, s);
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
