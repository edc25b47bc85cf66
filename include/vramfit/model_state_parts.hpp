// SPDX-License-Identifier: MIT
// The vocabulary of model states: a stage's tensors summed before sharding, how a layout shards
// and places them, and the units a framework gathers one by one. training.hpp and the frameworks'
// headers (frameworks.hpp) build the ledger from it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "finetune.hpp"
#include "ledger.hpp"
#include "local_shapes.hpp"
#include "optimizer.hpp"
#include "parallel.hpp"
#include "precision.hpp"
#include "quant_state.hpp"
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

/// A convolution's weight ([out, in, kh, kw]: ViT's patch embedding), the one rank-4 tensor.
constexpr bool is_convolution_weight(const tensor_group& g) {
  return g.rank == 4;
}

/// The format a frozen tensor is kept in; `kept`: one the checkpoint's skip list keeps
/// unquantized.
constexpr const element_format& frozen_format(const training& t, const tensor_group& g,
                                              bool kept = false) {
  const finetuning& f = t.finetune;
  const bool moe_parameter = g.kind == tensor_kind::expert || g.kind == tensor_kind::router;
  if (f.quantized_base.payload_bits > 0 && g.rank == 2 && is_linear_parameter(g) && !kept &&
      (g.kind != tensor_kind::head || f.base_exceptions.converts_head) &&
      !(moe_parameter && f.base_exceptions.keeps_moe_parameters))
    return f.quantized_base;
  if (f.unquantized_base.payload_bits > 0) return f.unquantized_base;
  return t.precision.weights;
}

/// The compute-format copies that bitsandbytes' 4-bit matmul makes of its weight, one matmul at a
/// time: for the output in forward and again for the input's gradient in backward
/// (autograd/_functions.py MatMul4Bit; since 0.50 forward takes gemm_4bit's
/// _dequant_linear_fallback in backends/cuda/ops.py above 1,536 rows, and above 512 for a weight of
/// 4M values or more). The largest of each half of a layer [part: attention 0, MLP 1][output
/// linear], and the fp32 absmax that forward's fallback makes twice beside the MLP's output linear.
struct dequantized_weights {
  bytes weight[2][2]{};
  bytes scales{};
};

constexpr dequantized_weights dequantized_in_layer(const training& t, const tensor_ledger& tensors,
                                                   std::int64_t layer) {
  dequantized_weights d{};
  if (t.finetune.quantized_base.payload_bits == 0) return d;
  for (const tensor_group& g : tensors) {
    if (!g.in_layer(layer) || g.role != tensor_role::parameter || !is_linear_parameter(g)) continue;
    const element_format& f = frozen_format(t, g);
    const local_shape shape = tp_local_shape(g, t.model, t.layout.tensor);
    if (quant_state_of(f, shape).count == 0) continue;
    const int part = g.kind == tensor_kind::attention ? 0 : 1;
    const bool out = g.split == tp_split::input;
    bytes& most = d.weight[part][out];
    const bytes copy = storage_bytes(t.precision.compute, shape.elements());
    if (copy <= most) continue;
    most = copy;
    if (part == 1 && out)  // _dequant_linear_fallback: absmax_dq, then absmax_dq + offset
      d.scales = storage_bytes(fp32::value, ceil_div(shape.elements(), f.level1.block));
  }
  return d;
}

/// Model-state bytes before sharding, split into what data parallelism may shard.
struct unsharded_states {
  bytes trained_weights{}, frozen_weights{}, state_buffers{}, gradients{}, master{};
  bytes device_states{}, host_states{}, cast_copies{}, largest_tensor_16bit{};
  /// The autocast copies of frozen weights: cast per call, not cached (autocast_mode.cpp
  /// cached_cast caches leaf tensors that require grad only).
  bytes frozen_cast_copies{};
  /// Of the frozen weights, bitsandbytes' QuantStates (quant_state.hpp): whole, and those of
  /// the dim-0 shards, in `frozen_quant_state_tensors` tensors.
  bytes frozen_quant_state{}, dim0_frozen_quant_state{};
  std::int64_t frozen_quant_state_tensors = 0;
  // The same quantities sharded tensor by tensor along dim 0 (layout::shards_each_tensor).
  /// What PyTorch's caching allocator adds by rounding each tensor up to 512 bytes.
  bytes rounding{};
  bytes dim0_trained_weights{}, dim0_frozen_weights{}, dim0_gradients{}, dim0_master{},
      dim0_states{};
  std::int64_t trained_elements = 0, frozen_elements = 0, trained_tensors = 0, weight_tensors = 0;
  std::int64_t device_state_tensors = 0, host_state_tensors = 0;
  std::int64_t largest_tensor_elements = 0;
};

struct stage_range {
  std::int64_t first_layer, layers;
  bool first, last;
};

/// Whether pipeline stage `stage` holds `g`, a tensor outside the layers: embeddings on the first
/// stage, the rest on the last, which keeps its own copy of a tied embedding for the head
/// (Megatron-LM pre_process / post_process, shared_embedding_or_output_weight).
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

/// Whether the fp32 master is the sharded parameter itself (layout::master_is_the_shard).
constexpr bool master_is_sharded(const training& t) {
  return t.layout.master_is_the_shard() && t.precision.has_master();
}

/// The format of the sharded gradients: the sharded parameter's where the master is the shard.
constexpr const element_format& sharded_gradient_format(const training& t) {
  return master_is_sharded(t) ? t.precision.master : t.precision.gradients;
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

/// Accumulates the optimizer states of `count` trained tensors of shape `s` (and of its dim-0
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
  acc.dim0_states +=
      optimizer_state(t.optimizer, {shard.elements(), shard.last, shard.second, hidden_matrix},
                      updated)
          .device *
      count;
}

/// What add_group accumulates: everything, or the tensors' sizes alone (weights, gradients,
/// autocast copies and their counts), without the master copies and optimizer states that only
/// the stage's totals need (a fit sizes FSDP's units and each layer's gradients this way).
enum class group_parts : unsigned char { all, sizes };

/// Accumulates `count` trained tensors of `g` of shape `s` stored as `weight`: the weight, its
/// gradient, master copy and optimizer states. A tensor in a format of its own (peft's fp32
/// adapters over 16-bit weights) has its gradient and states in that format, and no master.
constexpr void add_trained(unsharded_states& acc, const training& t, const tensor_group& g,
                           std::int64_t count, const local_shape& s, const element_format& weight,
                           std::int64_t shards, group_parts parts = group_parts::all) {
  if (count == 0) return;
  const precision& p = t.precision;
  const bool master_shards = master_is_sharded(t);
  const bool own = !(weight == p.weights);
  const element_format& gradient = own ? weight : p.gradients;
  const local_shape shard = dim0_shard(s, shards);
  acc.trained_elements = checked_add(acc.trained_elements, checked_mul(count, s.elements()));
  acc.trained_tensors = checked_add(acc.trained_tensors, count);
  const bytes weight_bytes = stored(weight, s);
  const bytes gradient_bytes = own ? weight_bytes : stored(gradient, s);
  acc.trained_weights += weight_bytes * count;
  acc.gradients += gradient_bytes * count;
  acc.dim0_gradients += stored(own ? weight : sharded_gradient_format(t), shard) * count;
  if (parts == group_parts::sizes) return;
  acc.rounding += (allocator_rounding(weight_bytes) + allocator_rounding(gradient_bytes)) * count;
  acc.dim0_trained_weights += stored(master_shards && !own ? p.master : weight, shard) * count;
  if (p.has_master() && !own) {
    const bytes master_bytes = stored(p.master, s);
    acc.master += master_bytes * count;
    acc.rounding += allocator_rounding(master_bytes) * count;
    if (!master_shards) acc.dim0_master += stored(p.master, shard) * count;
  }
  add_optimizer_states(acc, t, g, count, s, shard, own ? weight : p.updated());
}

/// Accumulates the `frozen` of `copies` tensors of `g` (shape `shape`) that are not trained, `kept`
/// of them unquantized by the checkpoint's skip list, and the compute-format copies autocast (or
/// FP8) makes of all of them.
constexpr void add_frozen(unsharded_states& acc, const training& t, const tensor_group& g,
                          std::int64_t copies, std::int64_t frozen, std::int64_t kept,
                          const local_shape& shape, std::int64_t shards) {
  const precision& p = t.precision;
  const std::int64_t n = shape.elements();
  acc.weight_tensors = checked_add(acc.weight_tensors, copies);
  acc.frozen_elements = checked_add(acc.frozen_elements, checked_mul(n, frozen));
  for (const auto& [format, count] : {std::pair{&frozen_format(t, g), frozen - kept},
                                      std::pair{&frozen_format(t, g, true), kept}}) {
    if (count == 0) continue;
    const bytes each = frozen_stored(*format, shape);
    acc.frozen_weights += each * count;
    // Each of a QuantState's tensors is rounded on its own.
    const quant_state_tensors quant_state = quant_state_of(*format, shape);
    bytes rounding = allocator_rounding(each - quant_state.total());
    for (int i = 0; i < quant_state.count; ++i) rounding += allocator_rounding(quant_state.size[i]);
    acc.rounding += rounding * count;
    acc.dim0_frozen_weights += frozen_stored(*format, dim0_shard(shape, shards)) * count;
    acc.frozen_quant_state += quant_state.total() * count;
    acc.dim0_frozen_quant_state += quant_state_bytes(*format, dim0_shard(shape, shards)) * count;
    if (quant_state.count > 0)
      acc.frozen_quant_state_tensors =
          checked_add(acc.frozen_quant_state_tensors, checked_mul(quant_state.count, count));
  }
  if (n > acc.largest_tensor_elements) acc.largest_tensor_elements = n;
  // Autocast caches a compute-format copy of every linear weight and bias (frozen ones too; a
  // tied embedding is the head's weight) and of a convolution's weight (ViT's patch embedding:
  // conv2d is on autocast's lower-precision list, aten/src/ATen/autocast_mode.cpp); FP8 keeps
  // copies of the matmul weights. Packed routed experts are no linear's weights: grouped GEMMs
  // run outside autocast in their format, and an expert's slice, a view, is cast per call
  // (activations.hpp packed_experts_block).
  if (is_linear_parameter(g) || is_convolution_weight(g) ||
      (g.split == tp_split::vocab && t.model.tied_embeddings)) {
    if (p.autocast_weight_copies && g.kind != tensor_kind::expert) {
      acc.cast_copies += stored(p.compute, shape) * copies;
      acc.frozen_cast_copies += stored(p.compute, shape) * frozen;
    }
    if (p.fp8_weight_copies > 0 && g.rank == 2)
      acc.cast_copies += stored(fp8_e4m3::value, shape) * checked_mul(copies, p.fp8_weight_copies);
  }
}

/// Accumulates the tensors of `g` that pipeline stage `stage` and expert rank 0 hold (`parts` of
/// them).
constexpr void add_group(const training& t, const tensor_group& g, const stage_range& stage,
                         bool before_layers, std::int64_t experts_per_rank, std::int64_t shards,
                         unsharded_states& acc, group_parts parts = group_parts::all) {
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
  // LoRA trains none of the base: what the checkpoint keeps unquantized is all frozen.
  const quantization_exceptions& e = t.finetune.base_exceptions;
  std::int64_t kept = 0;
  if (e.keeps_any() && trained == 0) {
    const tensor_ledger ledger = tensors(t.model);
    kept = kept_copies(checked_for(e, ledger), index_by_name(ledger, g), g, block.first_layer,
                       block.layer_count, copies);
  }
  add_frozen(acc, t, g, copies, copies - trained, kept, shape, shards);
  add_trained(acc, t, g, trained, shape, t.precision.weights, shards, parts);
  // LoRA's adapters on the layer's local shape.
  if (lora_elements(t.finetune, g) > 0) {
    const lora_adapters lora = lora_adapters_of(t, g, shape);
    acc.weight_tensors = checked_add(acc.weight_tensors, checked_mul(2, copies));
    add_trained(acc, t, g, copies, lora.a, lora.format, shards, parts);
    add_trained(acc, t, g, copies, lora.b, lora.format, shards, parts);
  }
}

/// The bytes of a sharded quantity a rank keeps: all of them, or its shard (tensor by tensor,
/// `dim0_shard`; flat implementations a 1/N of one padded buffer).
constexpr bytes rank_share(bytes full, bytes dim0_shard, const layout& l, bool sharded) {
  if (!sharded) return full;
  return l.shards_each_tensor() ? dim0_shard : divide_up(full, l.shard_degree());
}

/// Bytes of `n` elements in format `f`, none for none (a unit or stage may train nothing).
constexpr bytes elements_in(const element_format& f, std::int64_t n) {
  return n > 0 ? storage_bytes(f, n) : bytes{};
}

/// The ledger entries the root's gradient events go to: its unsharded gradients
/// (entry_role::root_gradients), the sharded gradients and backward's working buffer.
struct root_gradient_entries {
  int unsharded = -1, sharded = -1, working = -1;
};

/// What a framework that gathers sharded parameters unit by unit holds unsharded beside the
/// shards: a root unit (the tensors outside the layers) and the layers' units.
struct gathered_units {
  bytes root, layer;        ///< a unit's gathered parameters (compute format; frozen as stored)
  std::int64_t layers = 1;  ///< layer units gathered at once: the current and the prefetched
  bytes layer_gradients;    ///< a layer's unsharded gradients and what reducing them copies
  bytes layer_unsharded_gradients;  ///< of them, the unsharded (autograd's)
  bytes root_gradients;             ///< the root's, at its post-backward
  bytes root_unsharded_gradients;   ///< of them, the unsharded (the rest: the reduce copy)
  bytes root_head_gradients;        ///< of the unsharded, what the head's backward makes
};

/// Blocks freed with another stream recorded (record_stream), which the caching allocator keeps
/// out of its pools, though no longer allocated, until that stream passes the free
/// (CUDACachingAllocator.cpp free: insert_events): `count` blocks of `each` bytes.
struct deferred_blocks {
  bytes each{};
  std::int64_t count = 0;
};

/// What a sharded framework's record_stream frees keep reserved through a step.
struct deferred_frees {
  deferred_blocks gathered;   ///< units' all-gather outputs, on the all-gather stream
  deferred_blocks gradients;  ///< units' unsharded gradients, on the compute stream in backward
};

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
  bool shard_optimizer = false, shard_grads = false;
  /// Sharded parameters at rest: ZeRO-3, or FSDP's SHARD_GRAD_OP too, which differs from full
  /// sharding in how long the gathered (compute-format) parameters live.
  bool shard_weights = false;
  memory_space optimizer_space = memory_space::device, weight_space = memory_space::device;
  /// The units gathered one by one, by a framework that does (layout::gathers_units).
  gathered_units gathered{};

  [[nodiscard]] constexpr const layout& l() const { return t.layout; }
  [[nodiscard]] constexpr const precision& p() const { return t.precision; }
  [[nodiscard]] constexpr bytes shard(bytes full, bytes dim0_shard, bool sharded) const {
    return rank_share(full, dim0_shard, t.layout, sharded);
  }
};

/// The ZeRO paper's account of autograd's gradients and their partition.
inline constexpr const char* zero_paper_gradients = "ZeRO paper §5.2 (P_os+g): 2Ψ/N_d";

/// Autograd's gradients, or this rank's partition of them where `partitioned`.
constexpr void add_autograd_gradients(memory_ledger& ledger, const stage_model_states& s,
                                      bool partitioned, const char* source) {
  const bool offloaded = s.shard_grads && s.l().optimizer_offload != offload_target::none;
  add_entry(ledger, s.shard_grads ? "gradients (partition)" : "gradients", component::gradients,
            offloaded ? s.optimizer_space : memory_space::device,
            s.shard(s.acc.gradients, s.acc.dim0_gradients, partitioned), s.acc.trained_tensors,
            source);
}

}  // namespace detail

}  // namespace vramfit
