// SPDX-License-Identifier: MIT
// What each training framework can run: the combinations of parallelism and pipeline schedule
// that DeepSpeed, Megatron-LM, torchtitan and FSDP1 (through accelerate) support, one rule each,
// read from their code. The layout search ranks only what the framework of a candidate runs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "activations.hpp"
#include "parallel.hpp"

namespace vramfit {

/// A framework whose runnable layouts the planner ranks. What all of them support beside these
/// rules: DeepSpeed runs TP through a Megatron mpu (Megatron-DeepSpeed), PP (ZeRO-0/1 only:
/// check_layout's deepspeed_forbids_zero2_or_3_with_pipeline_parallel) and DeepSpeed-MoE's EP
/// within the data-parallel ranks (utils/groups.py _create_expert_and_data_parallel); Megatron-LM
/// runs TP, SP, PP with or without interleaving, CP and EP, its distributed optimizer sharding
/// over DP x CP (core/distributed/param_and_grad_buffer.py:
/// get_data_parallel_group(with_context_parallel=True)); torchtitan runs FSDP2 and HSDP sharding
/// over dp_shard x CP, TP, PP with every schedule of torch.distributed.pipelining, CP and EP.
enum class framework : unsigned char {
  deepspeed,   ///< DeepSpeed's engine and pipeline engine
  megatron,    ///< Megatron-LM (Megatron-Core)
  torchtitan,  ///< torchtitan v0.2.2: FSDP2 (fully_shard), HSDP, DDP
  fsdp1,       ///< PyTorch FSDP1 (FullyShardedDataParallel) or DDP through accelerate
};
inline constexpr std::size_t framework_count = static_cast<std::size_t>(framework::fsdp1) + 1;

/// The framework that runs FSDP of `fsdp_version` in the search: FSDP2 is torchtitan's, FSDP1
/// accelerate's.
constexpr framework fsdp_framework(std::int64_t fsdp_version) {
  return fsdp_version == 2 ? framework::torchtitan : framework::fsdp1;
}

/// What a framework cannot run, X(rule, the rule in a few words), in the order
/// check_support tests them.
#define VRAMFIT_SUPPORT_RULES(X)                                                       \
  X(deepspeed_has_no_ring_context_parallel,                                            \
    "DeepSpeed has no ring context parallelism (Ulysses only)")                        \
  X(deepspeed_pipeline_runs_one_f_one_b, "DeepSpeed's pipeline engine runs 1F1B only") \
  X(megatron_has_no_gpipe, "Megatron-LM has no GPipe schedule")                        \
  X(torchtitan_sequence_must_divide_by_tp_and_2cp,                                     \
    "torchtitan needs the sequence divisible by TP x 2 CP")                            \
  X(torchtitan_tensor_parallel_is_sequence_parallel,                                   \
    "torchtitan's TP is always sequence parallel")                                     \
  X(torchtitan_ddp_runs_alone, "torchtitan's DDP has no TP, PP, CP or EP beside it")   \
  X(fsdp1_is_data_parallel_only, "FSDP1 (accelerate) has no TP, PP, CP or EP")         \
  X(op_sac_is_torchtitans, "op-level selective recompute is torchtitan's")             \
  X(attention_recompute_is_megatrons,                                                  \
    "selective (attention) recompute is Megatron-LM's and Megatron-DeepSpeed's")       \
  X(fsdp1_recomputes_every_layer, "FSDP1 (accelerate) recomputes every layer or none") \
  X(userbuffers_are_megatrons,                                                         \
    "TP overlap through Transformer Engine's userbuffers is Megatron-Core's")          \
  X(async_tp_is_torchtitans, "AsyncTP is torchtitan's")

#define VRAMFIT_SUPPORT_RULE_NAME(rule, text) rule,
#define VRAMFIT_SUPPORT_RULE_ONE(...) +1
/// A rule of what a framework runs.
enum class support_rule : unsigned char { none, VRAMFIT_SUPPORT_RULES(VRAMFIT_SUPPORT_RULE_NAME) };
inline constexpr std::size_t support_rule_count = 1 VRAMFIT_SUPPORT_RULES(VRAMFIT_SUPPORT_RULE_ONE);
#undef VRAMFIT_SUPPORT_RULE_ONE
#undef VRAMFIT_SUPPORT_RULE_NAME

/// The rule in a few words, for reports.
constexpr const char* to_string(support_rule r) {
#define VRAMFIT_SUPPORT_RULE_TEXT(rule, text) text,
  constexpr const char* text[support_rule_count] = {
      "supported", VRAMFIT_SUPPORT_RULES(VRAMFIT_SUPPORT_RULE_TEXT)};
#undef VRAMFIT_SUPPORT_RULE_TEXT
  return text[static_cast<int>(r)];
}
#undef VRAMFIT_SUPPORT_RULES

/// The recompute rule of framework `f` that batch options `b` break. Megatron-LM recomputes the
/// attention core (--recompute-granularity selective) or whole layers, all or the first N of a
/// stage (--recompute-num-layers; megatron/training/arguments.py), as Megatron-DeepSpeed does
/// (megatron/arguments.py); torchtitan whole layers (mode "full", or "selective" of every N-th
/// layer) or its op-level policy (selective_ac_option "op"; distributed/activation_checkpoint.py
/// apply_ac); accelerate's FSDP1 every layer of the wrapped class (fsdp_activation_checkpointing:
/// accelerator.py prepare_model, apply_activation_checkpointing), as transformers'
/// gradient_checkpointing_enable does.
constexpr support_rule check_recompute(framework f, const activation_options& b) {
  using enum support_rule;
  if (b.recompute == recompute_kind::op_sac && f != framework::torchtitan)
    return op_sac_is_torchtitans;
  if (b.recompute == recompute_kind::selective &&
      (f == framework::torchtitan || f == framework::fsdp1))
    return attention_recompute_is_megatrons;
  if (f == framework::fsdp1 && b.recompute == recompute_kind::full && b.recompute_layers > 0)
    return fsdp1_recomputes_every_layer;
  return none;
}

/// The first rule of framework `f` that layout `l` run with batch options `b` (its sequence,
/// schedule, virtual stages and recompute) breaks; none when `f` runs it. The layout's own rules
/// are check_layout's.
constexpr support_rule check_support(framework f, const layout& l, const activation_options& b) {
  using enum support_rule;
  if (const support_rule r = check_recompute(f, b); r != none) return r;
  // Megatron-LM --tp-comm-overlap (training/initialize.py _initialize_tp_communicators);
  // torchtitan enable_async_tensor_parallel (distributed/tensor_parallel.py maybe_enable_async_tp).
  if (l.tp_overlap == tp_comm_overlap::userbuffers && f != framework::megatron)
    return userbuffers_are_megatrons;
  if (l.tp_overlap == tp_comm_overlap::async_tp && f != framework::torchtitan)
    return async_tp_is_torchtitans;
  const bool pipelined = l.pipeline > 1;
  const bool interleaved = b.virtual_stages > 1 || b.schedule == pipeline_schedule::interleaved;
  switch (f) {
    case framework::deepspeed:
      // deepspeed/sequence/layer.py DistributedAttention: Ulysses' all-to-all; no ring attention.
      if (l.context > 1) return deepspeed_has_no_ring_context_parallel;
      // runtime/pipe/engine.py PipelineEngine.train_batch: schedule.TrainSchedule, 1F1B only.
      if (pipelined && (interleaved || b.schedule == pipeline_schedule::gpipe))
        return deepspeed_pipeline_runs_one_f_one_b;
      return none;
    case framework::megatron:
      // core/pipeline_parallel/schedules.py get_forward_backward_func: 1F1B or interleaved 1F1B.
      if (pipelined && !interleaved && b.schedule == pipeline_schedule::gpipe)
        return megatron_has_no_gpipe;
      return none;
    case framework::torchtitan:
      // models/llama3/infra/parallelize.py parallelize_llama: seq_len % (tp * 2 * cp) asserted.
      if (b.sequence % (l.tensor * 2 * l.context) != 0)
        return torchtitan_sequence_must_divide_by_tp_and_2cp;
      // models/llama3/infra/parallelize.py apply_tp: the norms' plan is SequenceParallel().
      if (l.tensor > 1 && !l.sequence) return torchtitan_tensor_parallel_is_sequence_parallel;
      // parallelize_llama: DDP raises "DDP has not supported > 1D parallelism"; CP (and EP, from
      // dp_shard x cp) turns FSDP on (distributed/parallel_dims.py fsdp_enabled).
      if (l.zero == sharding::none &&
          (l.context > 1 || l.expert > 1 || (l.data > 1 && (l.tensor > 1 || pipelined))))
        return torchtitan_ddp_runs_alone;
      return none;
    case framework::fsdp1:
      // accelerate parallelism_config.py _validate_accelerator: an FSDP1 run takes no TP or CP
      // (FSDP version 2 only); accelerate pipelines only inference (inference.py prepare_pippy).
      if (l.tensor > 1 || pipelined || l.context > 1 || l.expert > 1)
        return fsdp1_is_data_parallel_only;
      return none;
  }
  return none;
}

}  // namespace vramfit
