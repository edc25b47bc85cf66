// SPDX-License-Identifier: MIT
// The parallel layout: data parallel with or without sharding (DDP, ZeRO-1/2/3, FSDP), tensor,
// sequence, pipeline, context and expert parallel, offload; its validity rules; the part types
// (`zero<3, 8>`, `tensor_parallel<2>`, ...) and their composition `parallel<...>`.
#pragma once

#include <concepts>
#include <cstdint>
#include <iterator>
#include <type_traits>

#include "detail/checked.hpp"
#include "detail/static_vector.hpp"
#include "detail/tag.hpp"
#include "model.hpp"

namespace vramfit {

/// How much of the model states data parallelism shards (ZeRO paper, Rajbhandari et al. 2019, §5).
enum class sharding : unsigned char {
  none,   ///< DDP: every rank holds everything
  zero1,  ///< optimizer states (and the master copy)
  zero2,  ///< + gradients
  zero3,  ///< + weights
};

/// Whose implementation of sharding: the bytes differ in the details.
enum class shard_implementation : unsigned char {
  unnamed,    ///< none named: plain PyTorch, valid only unsharded (a ZeRO stage names its own)
  paper,      ///< ZeRO paper Table 1: exactly the states of the precision policy, divided by N
  deepspeed,  ///< DeepSpeed: + an fp32 gradient partition; ZeRO-3 keeps no 16-bit grad partition
  megatron,   ///< Megatron distributed optimizer: master + states sharded, full fp32 main grads
  fsdp,       ///< PyTorch FSDP: each tensor sharded along dim 0; a whole layer gathered at once
};

enum class offload_target : unsigned char { none, cpu, nvme };

/// FSDP1's BackwardPrefetch: whether backward all-gathers the next unit before the current unit's
/// gradients are computed (pre, the default), after them (post), or only when it is reached (none).
enum class fsdp_backward_prefetch : unsigned char { pre, post, none };

/// TP's all-gathers and reduce-scatters run in chunks beside the matmuls they feed or drain:
/// Megatron-Core's --tp-comm-overlap, through Transformer Engine's userbuffers, or torchtitan's
/// enable_async_tensor_parallel, inductor's micro-pipelined TP over symmetric memory. Off by
/// default in both; each needs sequence parallelism (megatron/training/arguments.py asserts it;
/// torchtitan's TP is always sequence parallel).
enum class tp_comm_overlap : unsigned char { none, userbuffers, async_tp };

/// The most pipeline stages whose layers a layout can list one by one (layout::stage_layers);
/// even stages have no such limit.
inline constexpr std::size_t max_listed_stages = 64;
inline constexpr char listed_stages[] = "pipeline stages can be listed one by one";

/// The most GPUs a layout may span: data x tensor x pipeline x context.
inline constexpr std::int64_t max_world_size = std::int64_t{1} << 24;  // 16,777,216

/// A structural description of the parallel layout. World size = data x tensor x pipeline x
/// context; experts are spread over `expert` ranks within data x context.
struct layout {
  std::int64_t data = 1;
  std::int64_t tensor = 1;
  bool sequence = false;  ///< Megatron sequence parallel (needs tensor > 1)
  std::int64_t pipeline = 1;
  std::int64_t context = 1;
  std::int64_t expert = 1;
  sharding zero = sharding::none;
  /// Sharded, the implementation must be named: zero<S, N> names DeepSpeed's (as the CLI's
  /// --zero does), and a layout that would default to another would be the same words for other
  /// bytes (rule sharding_must_name_its_implementation).
  shard_implementation implementation = shard_implementation::unnamed;
  std::int64_t shard_group = 0;  ///< hybrid sharding: shard within groups of this size (0: all)
  /// Layers per pipeline stage, first to last; empty: as even as possible, earlier stages first.
  detail::static_vector<std::int64_t, max_listed_stages, listed_stages> stage_layers{};
  offload_target optimizer_offload = offload_target::none;  ///< master, states, grad partitions
  offload_target parameter_offload = offload_target::none;  ///< ZeRO-3 weight partitions
  // Communication buffers (defaults are the frameworks' defaults).
  bool ddp_bucket_view = false;  ///< DDP gradient_as_bucket_view (default False: a second copy)
  std::int64_t ddp_bucket_bytes = 25 * 1024 * 1024;        ///< DDP bucket_cap_mb = 25
  std::int64_t zero_reduce_bucket_elements = 500'000'000;  ///< DeepSpeed reduce_bucket_size
  /// DeepSpeed overlap_comm: ZeRO-1/2 reduce through a second buffer while the first fills
  /// (runtime/zero/config.py: off for ZeRO-1/2 unless set; ZeRO-3 keeps one buffer either way).
  bool zero_overlap_comm = false;
  std::int64_t zero3_prefetch_bucket_elements = 50'000'000;  ///< stage3_prefetch_bucket_size
  // DeepSpeed ZeRO-3's gathering at run time (runtime/zero/config.py, its defaults): the
  // coordinator prefetches while fewer than max_live elements are gathered, keeps a parameter
  // whose next use is within the reuse distance of elements, and never partitions a parameter
  // of at most the persistence threshold's elements (docs/sources.md#deepspeed-zero).
  std::int64_t zero3_max_live_elements = 1'000'000'000;        ///< stage3_max_live_parameters
  std::int64_t zero3_reuse_distance_elements = 1'000'000'000;  ///< stage3_max_reuse_distance
  std::int64_t zero3_persistence_threshold = 100'000;  ///< stage3_param_persistence_threshold
  /// DeepSpeed ZeRO-3 sub_group_size (runtime/zero/config.py: 1e9): the optimizer steps one
  /// sub-group of the partition at a time, with fp32 gradients for that sub-group only.
  std::int64_t zero3_sub_group_elements = 1'000'000'000;
  // FSDP1's gathering at run time (FullyShardedDataParallel's arguments, their defaults); FSDP2's
  // fully_shard prefetches one unit and frees without record_stream, so it takes none of them.
  vramfit::fsdp_backward_prefetch fsdp_backward_prefetch = fsdp_backward_prefetch::pre;
  bool fsdp_forward_prefetch = false;
  /// The rate limiter: True since torch 2.1 (pytorch/pytorch#104900), False in torch 1.12-2.0.
  bool fsdp_limit_all_gathers = true;
  /// PyTorch FSDP's API: 1 FullyShardedDataParallel (flat parameters), 2 fully_shard (per-tensor
  /// DTensors; its gradient reduction always copies into a reduce-scatter buffer).
  std::int64_t fsdp_version = 1;
  /// FSDP2 fully_shard(reshard_after_forward=...) as the ranks a unit's parameters are resharded
  /// over after its forward: 0 all the shard ranks (True, the default), 1 none (False: the unit
  /// stays gathered until its backward), N an int dividing the shard ranks.
  std::int64_t reshard_after_forward = 0;
  vramfit::tp_comm_overlap tp_overlap = tp_comm_overlap::none;

  [[nodiscard]] constexpr std::int64_t world() const {
    using detail::checked_mul;
    return checked_mul(checked_mul(data, tensor), checked_mul(pipeline, context));
  }
  /// Ranks a sharded model state is split over: the data-parallel ranks (or hybrid shard group)
  /// times the context-parallel ones, which hold the same weights (torchtitan parallel_dims.py
  /// dp_shard_cp; Megatron-LM distributed optimizer; DeepSpeed ZeRO's seq_data_parallel_group).
  [[nodiscard]] constexpr std::int64_t shard_degree() const {
    return detail::checked_mul(shard_group > 0 ? shard_group : data, context);
  }
  /// Whether each tensor is sharded on its own along dim 0 (FSDP), not as 1/N of one flat buffer.
  [[nodiscard]] constexpr bool shards_each_tensor() const {
    return implementation == shard_implementation::fsdp;
  }
  /// Whether the fp32 master is the sharded parameter itself, the 16-bit parameters existing only
  /// while gathered (FSDP2's MixedPrecisionPolicy, docs/sources.md#pytorch-fsdp).
  [[nodiscard]] constexpr bool master_is_the_shard() const {
    return implementation == shard_implementation::fsdp && fsdp_version == 2;
  }
  /// Whether full sharding gathers the parameters unit by unit (FSDP's FULL_SHARD).
  [[nodiscard]] constexpr bool gathers_units() const {
    return implementation == shard_implementation::fsdp && zero == sharding::zero3;
  }
  /// Layers of pipeline stage `stage`, and the first of them.
  [[nodiscard]] constexpr std::int64_t layers_of_stage(std::int64_t layers,
                                                       std::int64_t stage) const {
    if (!stage_layers.empty()) return stage_layers[static_cast<std::size_t>(stage)];
    return layers / pipeline + (stage < layers % pipeline ? 1 : 0);
  }
  [[nodiscard]] constexpr std::int64_t first_layer_of_stage(std::int64_t layers,
                                                            std::int64_t stage) const {
    if (stage_layers.empty()) {  // stages [0, r) hold one layer more than the rest
      const std::int64_t r = layers % pipeline;
      return detail::checked_add(detail::checked_mul(stage, layers / pipeline),
                                 stage < r ? stage : r);
    }
    std::int64_t first = 0;
    for (std::int64_t s = 0; s < stage; ++s)
      first = detail::checked_add(first, stage_layers[static_cast<std::size_t>(s)]);
    return first;
  }
};

namespace detail::rules {
[[noreturn]] inline void parallel_degree_must_be_positive(const char* what, std::int64_t value) {
  raise(std::string(what) + " parallel degree must be positive, got " + str(value));
}
[[noreturn]] inline void tensor_parallel_must_divide_attention_heads(std::int64_t tp,
                                                                     std::int64_t heads) {
  raise("tensor parallel degree " + str(tp) + " must divide the attention heads (" + str(heads) +
        ")");
}
[[noreturn]] inline void tensor_parallel_and_kv_heads_must_divide_one_another(std::int64_t tp,
                                                                              std::int64_t kv) {
  raise("tensor parallel degree " + str(tp) + " and the KV heads (" + str(kv) +
        ") must divide one another (KV heads are split, or replicated when fewer than the degree)");
}
[[noreturn]] inline void tensor_parallel_must_divide_ffn(std::int64_t tp, std::int64_t ffn) {
  raise("tensor parallel degree " + str(tp) + " must divide the FFN size (" + str(ffn) + ")");
}
[[noreturn]] inline void pipeline_stages_must_not_exceed_layers(std::int64_t pp,
                                                                std::int64_t layers) {
  raise("pipeline parallel degree " + str(pp) + " exceeds the layers (" + str(layers) + ")");
}
[[noreturn]] inline void stage_layers_must_sum_to_layers(std::int64_t sum, std::int64_t layers) {
  raise("the pipeline stages' layers sum to " +
        (sum < 0 ? "more than the model's " + str(layers)
                 : str(sum) + ", the model has " + str(layers)));
}
[[noreturn]] inline void stage_layers_must_match_pipeline_degree(std::int64_t stages,
                                                                 std::int64_t pp) {
  raise(str(stages) + " stage layer counts given for a pipeline of " + str(pp) + " stages");
}
[[noreturn]] inline void every_stage_needs_a_layer(std::int64_t stage) {
  raise("pipeline stage " + str(stage) + " has no layer");
}
[[noreturn]] inline void expert_parallel_must_divide_experts(std::int64_t ep,
                                                             std::int64_t experts) {
  raise("expert parallel degree " + str(ep) + " must divide the routed experts (" + str(experts) +
        ")");
}
[[noreturn]] inline void expert_parallel_must_divide_data_times_context(std::int64_t ep,
                                                                        std::int64_t dp_cp) {
  raise("expert parallel degree " + str(ep) + " must divide data x context parallel (" +
        str(dp_cp) + ")");
}
[[noreturn]] inline void expert_parallel_needs_a_moe_model(std::int64_t ep) {
  raise("expert parallel degree " + str(ep) + " needs a mixture-of-experts model");
}
[[noreturn]] inline void deepspeed_forbids_zero2_or_3_with_pipeline_parallel(int stage,
                                                                             std::int64_t pp) {
  raise("DeepSpeed's pipeline engine forbids ZeRO stage " + str(stage) +
        " with pipeline parallelism (degree " + str(pp) + "); use ZeRO-1");
}
[[noreturn]] inline void deepspeed_pipeline_runs_one_f_one_b(std::int64_t pp) {
  raise("DeepSpeed's pipeline engine runs the 1F1B schedule only (degree " + str(pp) +
        "): no interleaved or GPipe schedule with DeepSpeed's ZeRO");
}
[[noreturn]] inline void megatron_pipeline_runs_no_gpipe(std::int64_t pp) {
  raise("Megatron-LM's pipeline schedules are 1F1B and interleaved 1F1B (degree " + str(pp) +
        "): no GPipe schedule with its distributed optimizer");
}
[[noreturn]] inline void parameter_offload_needs_zero3() {
  raise("offloading parameters needs ZeRO-3 (or FSDP full sharding)");
}
[[noreturn]] inline void sharding_must_name_its_implementation(int stage) {
  raise("ZeRO stage " + str(stage) +
        " shards as its implementation does: name layout::implementation (paper, deepspeed, "
        "megatron or fsdp); zero<S, N> is DeepSpeed's");
}
[[noreturn]] inline void fsdp_version_must_be_1_or_2(std::int64_t version) {
  raise("the FSDP version must be 1 (FullyShardedDataParallel) or 2 (fully_shard), got " +
        str(version));
}
[[noreturn]] inline void reshard_after_forward_needs_fsdp2_full_shard() {
  raise(
      "reshard_after_forward is an option of FSDP2's fully_shard: it needs FSDP version 2 with "
      "full sharding");
}
[[noreturn]] inline void reshard_after_forward_must_divide_the_shard_ranks(std::int64_t ranks,
                                                                           std::int64_t shard) {
  raise("reshard_after_forward (" + str(ranks) +
        " ranks) must divide the ranks the parameters "
        "are sharded over (" +
        str(shard) + ")");
}
[[noreturn]] inline void fsdp1_gathering_options_need_fsdp1() {
  raise(
      "backward_prefetch, forward_prefetch and limit_all_gathers are options of FSDP1 "
      "(FullyShardedDataParallel): they need FSDP version 1 (FSDP2's fully_shard prefetches one "
      "unit and has no rate limiter)");
}
[[noreturn]] inline void world_size_must_not_exceed_the_limit(std::int64_t gpus_so_far,
                                                              std::int64_t limit) {
  raise("the layout spans more than " + str(limit) +
        " GPUs (data x tensor x pipeline x context reaches " + str(gpus_so_far) + ")");
}
[[noreturn]] inline void buffer_size_must_not_be_negative(const char* what, std::int64_t value) {
  raise(std::string(what) + " must not be negative, got " + str(value));
}
[[noreturn]] inline void shard_group_must_divide_data_parallel(std::int64_t group,
                                                               std::int64_t dp) {
  raise("the shard group (" + str(group) + ") must divide the data parallel degree (" + str(dp) +
        ")");
}
[[noreturn]] inline void sequence_parallel_needs_tensor_parallel() {
  raise("sequence parallelism splits along the tensor-parallel group: it needs tensor > 1");
}
[[noreturn]] inline void tp_comm_overlap_needs_sequence_parallel() {
  raise(
      "TP communication overlap (userbuffers or AsyncTP) chunks SP's all-gathers and "
      "reduce-scatters: it needs sequence parallelism (Megatron-LM asserts it)");
}
}  // namespace detail::rules

/// The layout rules, in the order check_layout tests them, as one table for the enum, to_string()
/// and validated(): X(rule, the rule in a few words, the arguments its error takes from the
/// violation `v`: detail::rules::rule(args...), which names the rule in a compile error).
#define VRAMFIT_LAYOUT_RULES(X)                                                                   \
  X(parallel_degree_must_be_positive, "a parallel degree is not positive", v.degree, v.a)         \
  X(world_size_must_not_exceed_the_limit, "more GPUs than the world-size limit", v.a,             \
    max_world_size)                                                                               \
  X(buffer_size_must_not_be_negative, "a buffer size or ZeRO-3 limit is negative", v.degree, v.a) \
  X(shard_group_must_divide_data_parallel, "the shard group does not divide data parallel", v.a,  \
    v.b)                                                                                          \
  X(sequence_parallel_needs_tensor_parallel, "sequence parallelism needs tensor parallelism")     \
  X(tp_comm_overlap_needs_sequence_parallel, "TP overlap needs sequence parallelism")             \
  X(tensor_parallel_must_divide_attention_heads,                                                  \
    "tensor parallel must divide the attention heads", v.a, v.b)                                  \
  X(tensor_parallel_and_kv_heads_must_divide_one_another,                                         \
    "tensor parallel and the KV heads must divide one another", v.a, v.b)                         \
  X(tensor_parallel_must_divide_ffn, "tensor parallel must divide the FFN size", v.a, v.b)        \
  X(pipeline_stages_must_not_exceed_layers, "more pipeline stages than layers", v.a, v.b)         \
  X(stage_layers_must_match_pipeline_degree,                                                      \
    "stage layer counts do not match the pipeline degree", v.a, v.b)                              \
  X(every_stage_needs_a_layer, "a pipeline stage has no layer", v.a)                              \
  X(stage_layers_must_sum_to_layers, "the stages' layers do not sum to the model's", v.a, v.b)    \
  X(expert_parallel_needs_a_moe_model, "expert parallel needs a mixture-of-experts model", v.a)   \
  X(expert_parallel_must_divide_experts, "expert parallel must divide the experts", v.a, v.b)     \
  X(expert_parallel_must_divide_data_times_context, "expert parallel must divide data x context", \
    v.a, v.b)                                                                                     \
  X(sharding_must_name_its_implementation, "a ZeRO stage without its implementation",             \
    static_cast<int>(v.a))                                                                        \
  X(deepspeed_forbids_zero2_or_3_with_pipeline_parallel,                                          \
    "DeepSpeed forbids ZeRO-2/3 with pipeline parallelism", static_cast<int>(v.a), v.b)           \
  X(fsdp_version_must_be_1_or_2, "the FSDP version is not 1 or 2", v.a)                           \
  X(reshard_after_forward_needs_fsdp2_full_shard,                                                 \
    "reshard_after_forward needs FSDP2 full sharding")                                            \
  X(reshard_after_forward_must_divide_the_shard_ranks,                                            \
    "reshard_after_forward does not divide the shard ranks", v.a, v.b)                            \
  X(fsdp1_gathering_options_need_fsdp1, "an FSDP1 gathering option without FSDP1")                \
  X(parameter_offload_needs_zero3, "parameter offload needs ZeRO-3")

#define VRAMFIT_LAYOUT_RULE_NAME(rule, ...) rule,
#define VRAMFIT_LAYOUT_RULE_ONE(...) +1
/// A layout rule, named as its error is.
enum class layout_rule : unsigned char { none, VRAMFIT_LAYOUT_RULES(VRAMFIT_LAYOUT_RULE_NAME) };
inline constexpr std::size_t layout_rule_count = 1 VRAMFIT_LAYOUT_RULES(VRAMFIT_LAYOUT_RULE_ONE);
#undef VRAMFIT_LAYOUT_RULE_ONE
#undef VRAMFIT_LAYOUT_RULE_NAME

/// The first rule a layout breaks for a model, with its numbers.
struct layout_violation {
  layout_rule rule = layout_rule::none;
  std::int64_t a = 0, b = 0;  ///< the numbers the rule's message shows
  const char* degree = "";    ///< which degree or buffer the rule is about
};

namespace detail {

/// The degrees, the world they make, the buffer sizes and the shard group.
constexpr layout_violation check_degrees(const layout& l) {
  using enum layout_rule;
  const std::int64_t degrees[] = {l.data, l.tensor, l.pipeline, l.context, l.expert};
  const char* names[] = {"data", "tensor", "pipeline", "context", "expert"};
  for (int i = 0; i < 5; ++i)
    if (degrees[i] <= 0) return {parallel_degree_must_be_positive, degrees[i], 0, names[i]};
  std::int64_t world = 1;
  for (int i = 0; i < 4; ++i) {  // each factor is positive, so the product stays below 2^48
    if (degrees[i] > max_world_size) return {world_size_must_not_exceed_the_limit, degrees[i]};
    world *= degrees[i];
    if (world > max_world_size) return {world_size_must_not_exceed_the_limit, world};
  }
  const std::int64_t buffers[] = {
      l.ddp_bucket_bytes,           l.zero_reduce_bucket_elements, l.zero3_prefetch_bucket_elements,
      l.zero3_sub_group_elements,   l.zero3_max_live_elements,     l.zero3_reuse_distance_elements,
      l.zero3_persistence_threshold};
  const char* buffer_names[] = {"the DDP bucket",
                                "the ZeRO reduce bucket",
                                "the ZeRO-3 prefetch bucket",
                                "the ZeRO-3 sub-group",
                                "the ZeRO-3 max live parameters",
                                "the ZeRO-3 max reuse distance",
                                "the ZeRO-3 persistence threshold"};
  for (int i = 0; i < 7; ++i)
    if (buffers[i] < 0) return {buffer_size_must_not_be_negative, buffers[i], 0, buffer_names[i]};
  if (l.shard_group > 0 && l.data % l.shard_group != 0)
    return {shard_group_must_divide_data_parallel, l.shard_group, l.data};
  return {};
}

/// Tensor (and sequence) parallelism against the model's heads and FFN widths.
constexpr layout_violation check_tensor_parallel(const layout& l, const model& m) {
  using enum layout_rule;
  if (l.sequence && l.tensor == 1) return {sequence_parallel_needs_tensor_parallel};
  if (l.tp_overlap != tp_comm_overlap::none && !l.sequence)
    return {tp_comm_overlap_needs_sequence_parallel};
  if (l.tensor == 1) return {};
  if (m.heads % l.tensor != 0)
    return {tensor_parallel_must_divide_attention_heads, l.tensor, m.heads};
  if (!m.is_mla() && m.kv_heads % l.tensor != 0 && l.tensor % m.kv_heads != 0)
    return {tensor_parallel_and_kv_heads_must_divide_one_another, l.tensor, m.kv_heads};
  const bool dense_layers = !m.is_moe() || m.moe.first_dense_layers > 0;
  if (dense_layers && m.ffn % l.tensor != 0)
    return {tensor_parallel_must_divide_ffn, l.tensor, m.ffn};
  if (m.is_moe() && m.moe.expert_ffn % l.tensor != 0)
    return {tensor_parallel_must_divide_ffn, l.tensor, m.moe.expert_ffn};
  return {};
}

/// Pipeline stages against the model's layers, and listed stage sizes.
constexpr layout_violation check_stages(const layout& l, const model& m) {
  using enum layout_rule;
  if (l.pipeline > m.layers) return {pipeline_stages_must_not_exceed_layers, l.pipeline, m.layers};
  if (l.stage_layers.empty()) return {};
  const auto stages = static_cast<std::int64_t>(l.stage_layers.size());
  if (stages != l.pipeline) return {stage_layers_must_match_pipeline_degree, stages, l.pipeline};
  std::int64_t sum = 0;
  for (std::int64_t s = 0; s < l.pipeline; ++s) {
    const std::int64_t layers = l.stage_layers[static_cast<std::size_t>(s)];
    if (layers <= 0) return {every_stage_needs_a_layer, s};
    // -1: more than the model has (the sum itself may not fit in 64 bits).
    if (layers > m.layers - sum) return {stage_layers_must_sum_to_layers, -1, m.layers};
    sum += layers;
  }
  if (sum != m.layers) return {stage_layers_must_sum_to_layers, sum, m.layers};
  return {};
}

/// Expert parallelism against the model's experts and the data x context ranks.
constexpr layout_violation check_expert_parallel(const layout& l, const model& m) {
  using enum layout_rule;
  if (l.expert == 1) return {};
  if (!m.is_moe()) return {expert_parallel_needs_a_moe_model, l.expert};
  if (m.moe.routed_experts % l.expert != 0)
    return {expert_parallel_must_divide_experts, l.expert, m.moe.routed_experts};
  if ((l.data * l.context) % l.expert != 0)  // below max_world_size
    return {expert_parallel_must_divide_data_times_context, l.expert, l.data * l.context};
  return {};
}

/// What the sharding implementations allow: a named one, DeepSpeed's pipeline, FSDP's versions and
/// reshard_after_forward, parameter offload.
constexpr layout_violation check_sharding(const layout& l) {
  using enum layout_rule;
  if (l.zero != sharding::none && l.implementation == shard_implementation::unnamed)
    return {sharding_must_name_its_implementation, static_cast<int>(l.zero)};
  if (l.implementation == shard_implementation::deepspeed && l.pipeline > 1 &&
      (l.zero == sharding::zero2 || l.zero == sharding::zero3))
    return {deepspeed_forbids_zero2_or_3_with_pipeline_parallel, static_cast<int>(l.zero),
            l.pipeline};
  if (l.fsdp_version != 1 && l.fsdp_version != 2)
    return {fsdp_version_must_be_1_or_2, l.fsdp_version};
  if (l.reshard_after_forward != 0) {
    if (l.fsdp_version != 2 || l.implementation != shard_implementation::fsdp ||
        l.zero != sharding::zero3)
      return {reshard_after_forward_needs_fsdp2_full_shard};
    if (l.reshard_after_forward < 0 || l.shard_degree() % l.reshard_after_forward != 0)
      return {reshard_after_forward_must_divide_the_shard_ranks, l.reshard_after_forward,
              l.shard_degree()};
  }
  const bool fsdp1_defaults = l.fsdp_backward_prefetch == fsdp_backward_prefetch::pre &&
                              !l.fsdp_forward_prefetch && l.fsdp_limit_all_gathers;
  if (!fsdp1_defaults && (l.implementation != shard_implementation::fsdp || l.fsdp_version != 1))
    return {fsdp1_gathering_options_need_fsdp1};
  if (l.parameter_offload != offload_target::none && l.zero != sharding::zero3)
    return {parameter_offload_needs_zero3};
  return {};
}

}  // namespace detail

/// The first rule `l` breaks for `m` (rule none when it is valid). The one place the rules are
/// stated: validated() raises them, planners read them.
constexpr layout_violation check_layout(const layout& l, const model& m) {
  using namespace detail;
  // In order: a later check divides by the degrees an earlier one found positive.
  layout_violation v = check_degrees(l);
  if (v.rule == layout_rule::none) v = check_tensor_parallel(l, m);
  if (v.rule == layout_rule::none) v = check_stages(l, m);
  if (v.rule == layout_rule::none) v = check_expert_parallel(l, m);
  if (v.rule == layout_rule::none) v = check_sharding(l);
  return v;
}

/// The rule in a few words, for reports.
constexpr const char* to_string(layout_rule r) {
#define VRAMFIT_LAYOUT_RULE_TEXT(rule, text, ...) text,
  constexpr const char* text[layout_rule_count] = {"valid",
                                                   VRAMFIT_LAYOUT_RULES(VRAMFIT_LAYOUT_RULE_TEXT)};
#undef VRAMFIT_LAYOUT_RULE_TEXT
  return text[static_cast<int>(r)];
}

/// Checks the layout against the model; the first broken rule is an error (a compile error
/// naming the rule in a constant expression).
constexpr const layout& validated(const layout& l, const model& m) {
  using namespace detail::rules;
  const layout_violation v = check_layout(l, m);
  switch (v.rule) {
    case layout_rule::none:
      break;
#define VRAMFIT_LAYOUT_RULE_RAISE(rule, text, ...) \
  case layout_rule::rule:                          \
    rule(__VA_ARGS__);
      VRAMFIT_LAYOUT_RULES(VRAMFIT_LAYOUT_RULE_RAISE)
#undef VRAMFIT_LAYOUT_RULE_RAISE
  }
  return l;
}

#undef VRAMFIT_LAYOUT_RULES

// --- Part types, composed with parallel<...>. Each applies itself to a layout. ---

/// What a part sets: parallel<> takes one part per axis, since a second one would overwrite the
/// first (ddp, zero, distributed_optimizer, fsdp and fully_shard all set the data-parallel ranks).
enum class layout_axis : unsigned char { data, tensor, pipeline, context, expert, offload };

/// PyTorch DistributedDataParallel over N ranks.
template <std::int64_t N, bool BucketView = false>
struct ddp {
  static constexpr layout_axis axis = layout_axis::data;
  static constexpr void apply(layout& l) {
    l.data = N;
    l.ddp_bucket_view = BucketView;
  }
};

/// ZeRO stage `Stage` over N data-parallel ranks, as `Impl` implements it.
template <int Stage, std::int64_t N, shard_implementation Impl = shard_implementation::deepspeed>
requires(Stage >= 0 && Stage <= 3) struct zero {
  static constexpr layout_axis axis = layout_axis::data;
  static constexpr void apply(layout& l) {
    l.data = N;
    l.zero = static_cast<sharding>(Stage);
    l.implementation = Impl;
  }
};

/// Megatron's distributed optimizer over N data-parallel ranks (ZeRO-1 with fp32 main grads).
template <std::int64_t N>
struct distributed_optimizer {
  static constexpr layout_axis axis = layout_axis::data;
  static constexpr void apply(layout& l) {
    l.data = N;
    l.zero = sharding::zero1;
    l.implementation = shard_implementation::megatron;
  }
};

enum class fsdp_strategy : unsigned char { full_shard, shard_grad_op, hybrid_shard, no_shard };

/// The ZeRO stage an FSDP strategy shards like (torch/distributed/fsdp/api.py ShardingStrategy:
/// SHARD_GRAD_OP keeps parameters gathered between forward and backward, as ZeRO-2; FULL_SHARD
/// and HYBRID_SHARD (within a group) as ZeRO-3; NO_SHARD as DDP).
constexpr sharding zero_stage_of(fsdp_strategy s) {
  return s == fsdp_strategy::shard_grad_op ? sharding::zero2
         : s == fsdp_strategy::no_shard    ? sharding::none
                                           : sharding::zero3;
}

/// PyTorch FSDP over N ranks; hybrid shards within groups of `Group` ranks.
template <std::int64_t N, fsdp_strategy Strategy = fsdp_strategy::full_shard,
          std::int64_t Group = 0>
struct fsdp {
  static constexpr layout_axis axis = layout_axis::data;
  static constexpr void apply(layout& l) {
    l.data = N;
    l.implementation = shard_implementation::fsdp;
    l.zero = zero_stage_of(Strategy);
    if (Strategy == fsdp_strategy::hybrid_shard) l.shard_group = Group;
  }
};

/// PyTorch FSDP2 (`fully_shard`) over N ranks with full sharding; `ReshardAfterForward` as
/// layout::reshard_after_forward (0: True, 1: False, or the ranks of an int).
template <std::int64_t N, std::int64_t ReshardAfterForward = 0>
struct fully_shard {
  static constexpr layout_axis axis = layout_axis::data;
  static constexpr void apply(layout& l) {
    fsdp<N>::apply(l);
    l.fsdp_version = 2;
    l.reshard_after_forward = ReshardAfterForward;
  }
};

template <std::int64_t N, bool Sequence = false>
struct tensor_parallel {
  static constexpr layout_axis axis = layout_axis::tensor;
  static constexpr void apply(layout& l) {
    l.tensor = N;
    l.sequence = Sequence;
  }
};

/// Pipeline parallel over N stages; `Layers...` gives each stage's layers (uneven stages).
template <std::int64_t N, std::int64_t... Layers>
requires(sizeof...(Layers) == 0 || sizeof...(Layers) == N) struct pipeline_parallel {
  static_assert(sizeof...(Layers) <= max_listed_stages,
                "vramfit: at most max_listed_stages (64) pipeline stages can be listed layer by "
                "layer; leave the list out for even stages");
  static constexpr layout_axis axis = layout_axis::pipeline;
  static constexpr void apply(layout& l) {
    l.pipeline = N;
    (l.stage_layers.push_back(Layers), ...);
  }
};

template <std::int64_t N>
struct context_parallel {
  static constexpr layout_axis axis = layout_axis::context;
  static constexpr void apply(layout& l) { l.context = N; }
};

template <std::int64_t N>
struct expert_parallel {
  static constexpr layout_axis axis = layout_axis::expert;
  static constexpr void apply(layout& l) { l.expert = N; }
};

/// Offload of the optimizer (master, states, gradient partitions) and/or the ZeRO-3 weights.
template <offload_target Optimizer, offload_target Parameters = offload_target::none>
struct offload {
  static constexpr layout_axis axis = layout_axis::offload;
  static constexpr void apply(layout& l) {
    l.optimizer_offload = Optimizer;
    l.parameter_offload = Parameters;
  }
};

template <class T>
concept LayoutPart = requires(layout& l) {
  T::apply(l);
};

namespace detail {
template <class Part>
constexpr int axis_of() {
  if constexpr (requires { Part::axis; })
    return static_cast<int>(Part::axis);
  else
    return -1;  // a part of the user's own: not checked
}
template <class... Parts>
constexpr bool one_part_per_axis() {
  const int axes[] = {-1, axis_of<Parts>()...};
  for (std::size_t i = 1; i < std::size(axes); ++i)
    for (std::size_t j = i + 1; j < std::size(axes); ++j)
      if (axes[i] >= 0 && axes[i] == axes[j]) return false;
  return true;
}
}  // namespace detail

/// A layout composed of parts: `parallel<zero<3, 8>, tensor_parallel<2>>`.
template <LayoutPart... Parts>
struct parallel {
  static_assert(detail::one_part_per_axis<Parts...>(),
                "vramfit: layout_takes_one_part_per_axis: two parts of parallel<...> set the same "
                "axis (ddp, zero, distributed_optimizer, fsdp and fully_shard all set the "
                "data-parallel ranks); the later would overwrite the earlier");
  static constexpr layout value = [] {
    layout l{};
    (Parts::apply(l), ...);
    return l;
  }();
};

/// One GPU, no parallelism.
using single_gpu = parallel<>;

template <class T>
concept Layout = detail::tag_of<T, layout>;

}  // namespace vramfit
