// SPDX-License-Identifier: MIT
// --framework: the defaults a training or serving framework really uses, each with the file it
// comes from. They fill in the options the user leaves out; options given always win.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace vramfit::cli {

/// Which of a framework's recipes a default belongs to: its LoRA recipes may differ (torchtune),
/// and so may its FSDP under pipeline parallelism (torchtitan); `plan` searches only the sharding
/// the framework runs.
enum class recipe : unsigned char {
  any,
  full_finetune,
  lora,
  fsdp_with_pipeline,
  pipeline,
  plan,
  data_parallel,  ///< train with data or context parallelism, and min-gpus, without --zero
  fsdp1,          ///< FSDP1 sharding given (train, min-gpus): its run-time gathering options
};

/// One option a framework sets, as the command line spells it ("--recompute", "op-sac"; a flag's
/// value is "true").
struct framework_default {
  const char* option;
  const char* value;
  const char* source;
  cli::recipe recipe = recipe::any;
};

struct framework {
  const char* name;
  const char* summary;
  const char* subcommand;  ///< "train" (and plan) or "infer"
  std::span<const framework_default> defaults;
};

namespace framework_tables {
inline constexpr framework_default torchtitan[] = {
    {"--precision", "amp-bf16",
     "fp32 parameters; FSDP2 MixedPrecisionPolicy(bfloat16, float32): config/job_config.py "
     "Training.mixed_precision_param/_reduce"},
    {"--fsdp", "full",
     "distributed/parallel_dims.py: data_parallel_shard_degree -1 shards over every data-parallel "
     "rank (fsdp_enabled: dp_shard > 1 or cp > 1)",
     recipe::data_parallel},
    {"--fsdp-version", "2", "fully_shard per block: models/llama3/infra/parallelize.py apply_fsdp"},
    {"--model-code", "torchtitan",
     "its own model code: models/llama3/model.py (models/qwen3, models/deepseek_v3) on "
     "models/common (attention.py, rope.py, nn_modules.py, moe.py)"},
    {"--recompute", "op-sac",
     "models/llama3/train_configs/llama3_8b.toml: activation_checkpoint mode selective, "
     "selective_ac_option op"},
    {"--optimizer-impl", "fused", "config/job_config.py Optimizer.implementation = fused"},
    {"--non-reentrant", "true",
     "distributed/activation_checkpoint.py: ptd_checkpoint_wrapper is non-reentrant"},
    {"--reshard-after-forward", "false",
     "models/llama3/infra/parallelize.py apply_fsdp: reshard_after_forward_policy default is "
     "`not pp_enabled`",
     recipe::fsdp_with_pipeline},
    {"--pp-runtime", "torch",
     "distributed/pipeline_parallel.py: torch.distributed.pipelining's PipelineStage and schedules",
     recipe::pipeline},
    {"--sharding", "fsdp",
     "distributed/parallel_dims.py: data parallelism is FSDP2 (fully_shard), HSDP or DDP",
     recipe::plan},
};
inline constexpr framework_default torchtune[] = {
    {"--precision", "bf16", "recipes/configs/llama3_1/8B_full_single_device.yaml: dtype bf16"},
    {"--optimizer", "paged-adamw-8bit",
     "8B_full_single_device.yaml: bitsandbytes.optim.PagedAdamW8bit", recipe::full_finetune},
    {"--optimizer-in-backward", "true", "8B_full_single_device.yaml: optimizer_in_bwd True",
     recipe::full_finetune},
    {"--optimizer-impl", "fused", "8B_lora_single_device.yaml: torch.optim.AdamW fused True",
     recipe::lora},
    {"--lora-dtype", "bf16",
     "recipes/lora_finetune_single_device.py: the model, adapters included, is built under "
     "training.set_default_dtype(dtype bf16)",
     recipe::lora},
    {"--recompute", "full", "8B_full_single_device.yaml: enable_activation_checkpointing True"},
    {"--non-reentrant", "true",
     "training/_activation_checkpointing.py: checkpoint_wrapper with NO_REENTRANT"},
    {"--loss", "linear-chunked",
     "8B_full_single_device.yaml: loss LinearCrossEntropyLoss (num_output_chunks 8)"},
    {"--model-code", "torchtune",
     "models/llama3_1/_component_builders.py: torchtune's own modules (modules/attention.py, "
     "rms_norm.py, position_embeddings.py)"},
};
inline constexpr framework_default deepspeed[] = {
    {"--precision", "bf16-fp32-master-16bit-grads",
     "bf16.enabled: bf16 parameters and gradients, an fp32 master partition (runtime/zero/"
     "stage_1_and_2.py, runtime/bf16_optimizer.py)"},
    {"--zero-impl", "deepspeed", "runtime/zero/stage_1_and_2.py, stage3.py"},
    {"--sharding", "deepspeed", "runtime/zero: ZeRO stages 1 to 3", recipe::plan},
};
inline constexpr framework_default megatron[] = {
    {"--precision", "bf16-fp32-master",
     "training/arguments.py --bf16: bf16 parameters, fp32 main parameters and gradients"},
    {"--zero-impl", "megatron",
     "core/optimizer/distrib_optimizer.py (--use-distributed-optimizer with --zero 1)"},
    {"--model-code", "megatron-te",
     "core/models/gpt/gpt_layer_specs.py get_gpt_layer_with_transformer_engine_spec: the default "
     "transformer_impl transformer_engine"},
    {"--loss", "vocab-parallel",
     "core/models/common/language_module/language_module.py compute_language_model_loss: "
     "tensor_parallel.vocab_parallel_cross_entropy (cross_entropy_loss_fusion off by default)"},
    {"--sharding", "megatron", "core/optimizer/distrib_optimizer.py: the distributed optimizer",
     recipe::plan},
};
inline constexpr framework_default fsdp1[] = {
    {"--precision", "amp-bf16",
     "accelerate FullyShardedDataParallelPlugin mixed_precision bf16 over fp32 parameters"},
    {"--fsdp-version", "1", "torch/distributed/fsdp/fully_sharded_data_parallel.py"},
    {"--backward-prefetch", "none",
     "accelerate utils/dataclasses.py FullyShardedDataParallelPlugin: backward_prefetch None "
     "unless FSDP_BACKWARD_PREFETCH is set",
     recipe::fsdp1},
    {"--sharding", "fsdp", "accelerate's FSDP plugin", recipe::plan},
};
inline constexpr framework_default hf_trainer[] = {
    {"--precision", "amp-bf16", "transformers TrainingArguments bf16=True: torch.autocast"},
    {"--optimizer", "adamw", "TrainingArguments optim adamw_torch: torch.optim.AdamW"},
    {"--loss", "fp32-upcast", "modeling_llama.py LlamaForCausalLM: logits.float() in the loss"},
};
inline constexpr framework_default vllm[] = {
    {"--utilization", "92",
     "vllm/config/cache.py: gpu_memory_utilization 0.92 since vLLM 0.21 (PR #38284; 0.9 before)"},
    {"--block", "16", "vllm/config/cache.py: DEFAULT_BLOCK_SIZE 16"},
};
}  // namespace framework_tables

inline constexpr framework frameworks[] = {
    {"torchtitan", "pre-training with FSDP2, op-level SAC, fused AdamW", "train",
     framework_tables::torchtitan},
    {"torchtune", "fine-tuning: bf16, optimizer in backward, 8-bit paged AdamW, chunked loss",
     "train", framework_tables::torchtune},
    {"deepspeed", "ZeRO with bf16 parameters and an fp32 master partition", "train",
     framework_tables::deepspeed},
    {"megatron", "Megatron-LM: bf16 with fp32 main gradients, distributed optimizer", "train",
     framework_tables::megatron},
    {"fsdp1", "PyTorch FSDP1 through accelerate, bf16 mixed precision", "train",
     framework_tables::fsdp1},
    {"hf-trainer", "Hugging Face Trainer with bf16 autocast", "train",
     framework_tables::hf_trainer},
    {"vllm", "vLLM serving: 92% of the GPU, 16-token KV blocks", "infer", framework_tables::vllm},
};

}  // namespace vramfit::cli
