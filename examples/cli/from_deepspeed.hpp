// SPDX-License-Identifier: MIT
// --from deepspeed ds_config.json: DeepSpeed's JSON config as vramfit's options, each key as
// DeepSpeed's own parser reads it (deepspeed/runtime/config.py, runtime/zero/config.py,
// runtime/zero/offload_config.py, runtime/precision_config.py; docs/from.md#deepspeed).
#pragma once

#include <string>

#include "inputs.hpp"
#include "launcher_file.hpp"

namespace vramfit::cli {

namespace detail_deepspeed {

/// The most elements a bucket option takes here; vramfit's option checks the value itself.
inline constexpr std::int64_t largest_elements = std::int64_t{1} << 50;

/// The batch: micro-batch and accumulation as given; train_batch_size with both gives the
/// data-parallel degree, as DeepSpeed's check train_batch_size == micro x steps x world_size
/// (config.py _batch_assertion) leaves it one value.
inline void batch(launcher_keys& k) {
  const auto micro = k.integer("train_micro_batch_size_per_gpu", 1, largest_count);
  const auto steps = k.integer("gradient_accumulation_steps", 1, largest_count);
  if (micro) k.set("--micro-batch", std::to_string(*micro), "train_micro_batch_size_per_gpu");
  if (steps) k.set("--grad-accum", std::to_string(*steps), "gradient_accumulation_steps");
  const std::int64_t per_rank = micro.value_or(0) * steps.value_or(0);
  if (micro && steps) {
    const auto total = k.integer("train_batch_size", 1, std::int64_t{1} << 60);
    if (!total) return;
    if (*total % per_rank != 0)
      k.refuse("train_batch_size", std::to_string(*total) +
                                       " is not train_micro_batch_size_per_gpu x "
                                       "gradient_accumulation_steps (" +
                                       std::to_string(per_rank) +
                                       ") times a world size, as DeepSpeed requires");
    k.set("--dp", std::to_string(*total / per_rank), "train_batch_size");
  } else {
    k.unmodeled("train_batch_size",
                "DeepSpeed derives the micro-batch or the accumulation from it and the world "
                "size, which the file does not hold: give --micro-batch and --grad-accum");
  }
}

/// bf16 or fp16: 16-bit parameters and gradients with an fp32 master (stage_1_and_2.py,
/// bf16_optimizer.py, fp16/fused_optimizer.py); neither: fp32 throughout. precision_config.py
/// refuses both.
inline void precision(launcher_keys& k) {
  if (k.is_auto("bf16.enabled") || k.is_auto("fp16.enabled")) {  // the Trainer's --bf16/--fp16
    k.find("bf16.enabled");
    k.find("fp16.enabled");
  } else {
    const bool bf16 = k.boolean("bf16.enabled").value_or(false);
    const bool fp16 = k.boolean("fp16.enabled").value_or(false);
    if (bf16 && fp16)
      k.refuse("bf16.enabled", "and fp16.enabled are both true: DeepSpeed allows one");
    if (fp16) k.set("--grad-dtype", "fp16", "fp16.enabled");
    k.set("--precision",
          bf16   ? "bf16-fp32-master-16bit-grads"
          : fp16 ? "fp16-fp32-master"
                 : "fp32",
          fp16 ? "fp16.enabled" : "bf16.enabled");
  }
  // Loss scaling and its schedule hold a few scalars.
  k.no_effect({"fp16.loss_scale", "fp16.initial_scale_power", "fp16.loss_scale_window",
               "fp16.hysteresis", "fp16.consecutive_hysteresis", "fp16.min_loss_scale",
               "fp16.auto_cast", "bf16.immediate_grad_update", "bf16.check_grad_overflow"});
  // data_types.grad_accum_dtype: the accumulation buffer's format (engine.py
  // get_data_types); vramfit takes the gradients' format from --grad-dtype.
  if (const auto accum = k.text("data_types.grad_accum_dtype")) {
    if (*accum == "fp32" || *accum == "bf16" || *accum == "fp16")
      k.set("--grad-dtype", *accum, "data_types.grad_accum_dtype");
    else
      k.refuse("data_types.grad_accum_dtype",
               "must be fp32, bf16 or fp16, got \"" + shown_value(*accum) + "\"");
  }
}

/// ZeRO's stage, buckets and offload (zero/config.py DeepSpeedZeroConfig, offload_config.py).
inline void zero(launcher_keys& k) {
  const std::int64_t stage = k.integer("zero_optimization.stage", 0, 3).value_or(0);
  k.set("--zero", std::to_string(stage), "zero_optimization.stage");
  if (stage == 0) {
    k.no_effect({"zero_optimization"});  // no ZeRO: none of its buffers
    return;
  }
  // "auto": the Trainer's sizes from the hidden size, which --reduce-bucket auto computes.
  const auto bucket = [&k](const char* key, const char* option) {
    if (k.is_auto(key))
      k.set(option, "auto", key);
    else if (const auto n = k.integer(key, 1, largest_elements)) {
      k.set(option, std::to_string(*n), key);
    }
  };
  bucket("zero_optimization.reduce_bucket_size", "--reduce-bucket");
  if (stage < 3) {
    if (k.boolean("zero_optimization.overlap_comm").value_or(false))
      k.set("--overlap-comm", "true", "zero_optimization.overlap_comm");
  } else {
    k.no_effect({"zero_optimization.overlap_comm"});  // ZeRO-3 reduces through one buffer
    bucket("zero_optimization.stage3_prefetch_bucket_size", "--prefetch-bucket");
    if (const auto g = k.integer("zero_optimization.sub_group_size", 1, largest_elements))
      k.set("--sub-group", std::to_string(*g), "zero_optimization.sub_group_size");
  }
  const auto device = [&k](const char* key) {
    const auto d = k.text(key);
    if (d && *d != "none" && *d != "cpu" && *d != "nvme")
      k.refuse(key, "must be none, cpu or nvme, got \"" + shown_value(*d) + "\"");
    return d && *d != "none" ? *d : std::string();
  };
  const std::string optimizer = device("zero_optimization.offload_optimizer.device");
  const std::string parameters =
      stage == 3 ? device("zero_optimization.offload_param.device") : std::string();
  if (!optimizer.empty()) {
    k.set("--offload", parameters.empty() ? "optimizer" : "all",
          "zero_optimization.offload_optimizer.device");
    k.set("--offload-to", optimizer, "zero_optimization.offload_optimizer.device");
  } else if (!parameters.empty()) {
    k.unmodeled("zero_optimization.offload_param.device",
                "the parameters offloaded without the optimizer: vramfit offloads them only "
                "with it (--offload all)");
  }
  // Host-side: pinned buffers and NVMe's swap files hold no GPU memory.
  k.no_effect(
      {"zero_optimization.offload_optimizer.pin_memory",
       "zero_optimization.offload_optimizer.buffer_count",
       "zero_optimization.offload_optimizer.fast_init",
       "zero_optimization.offload_optimizer.nvme_path",
       "zero_optimization.offload_optimizer.pipeline_read",
       "zero_optimization.offload_optimizer.pipeline_write",
       "zero_optimization.offload_param.pin_memory", "zero_optimization.offload_param.buffer_count",
       "zero_optimization.offload_param.buffer_size", "zero_optimization.offload_param.max_in_cpu",
       "zero_optimization.offload_param.nvme_path",
       // Gradients flattened into the partition as they come: the reduce bucket above.
       "zero_optimization.contiguous_gradients",
       // The order and the checkpoint format, not the sizes.
       "zero_optimization.round_robin_gradients", "zero_optimization.elastic_checkpoint",
       "zero_optimization.load_from_fp32_weights", "zero_optimization.ignore_unused_parameters",
       "zero_optimization.reduce_scatter", "zero_optimization.use_multi_rank_bucket_allreduce",
       "zero_optimization.stage3_gather_16bit_weights_on_model_save",
       "zero_optimization.stage3_gather_fp16_weights_on_model_save",
       "zero_optimization.gather_16bit_weights_on_model_save"});
  k.unmodeled("zero_optimization.offload_optimizer.ratio",
              "ZeRO-Offload++ keeps this share of the optimizer on the GPU; vramfit offloads all");
  k.unmodeled("zero_optimization.allgather_bucket_size",
              "ZeRO-1/2 all-gather the updated 16-bit partitions in buckets of this many elements");
  for (const char* key : {"zero_optimization.stage3_max_live_parameters",
                          "zero_optimization.stage3_max_reuse_distance",
                          "zero_optimization.stage3_param_persistence_threshold",
                          "zero_optimization.stage3_model_persistence_threshold"})
    k.unmodeled(key,
                "ZeRO-3 keeps gathered parameters by these limits; vramfit keeps the "
                "largest layer's and the prefetch bucket");
  for (const char* key :
       {"zero_optimization.zero_hpz_partition_size", "zero_optimization.zero_quantized_weights",
        "zero_optimization.zero_quantized_gradients",
        "zero_optimization.zero_quantized_nontrainable_weights",
        "zero_optimization.mics_shard_size", "zero_optimization.mics_hierarchical_params_gather"})
    k.unmodeled(key, "ZeRO++ and MiCS: a secondary partition or quantized copies");
}

/// optimizer.type as engine.py _configure_basic_optimizer builds it: Adam and AdamW are
/// FusedAdam (AdamW unless adam_w_mode is false; torch_adam: torch.optim's), DeepSpeedCPUAdam
/// when offloaded. No optimizer section: the client's (the Trainer's AdamW), vramfit's default.
inline void optimizer(launcher_keys& k) {
  const auto type = k.text("optimizer.type");
  k.no_effect({"optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps",
               "optimizer.params.weight_decay", "optimizer.params.bias_correction",
               "optimizer.params.adam_w_mode", "optimizer.params.momentum",
               "scheduler"});  // a learning-rate schedule holds scalars
  if (!type) return;
  const auto torch_adam = k.boolean("optimizer.params.torch_adam").value_or(false);
  std::string name;
  for (const char c : *type) name += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (name == "adam" || name == "adamw") {
    k.set("--optimizer", "adamw", "optimizer.type");
    if (!torch_adam) k.set("--optimizer-impl", "fused", "optimizer.type");
  } else if (name == "lion" || name == "adagrad") {
    k.set("--optimizer", name, "optimizer.type");
  } else {
    k.unmodeled("optimizer.type",
                "vramfit models no " + *type + "; it takes --optimizer's value or default");
  }
}

}  // namespace detail_deepspeed

/// The options a DeepSpeed config sets, and its keys that change no memory or are not modeled.
inline void translate_deepspeed(launcher_keys& k) {
  detail_deepspeed::batch(k);
  detail_deepspeed::precision(k);
  detail_deepspeed::zero(k);
  detail_deepspeed::optimizer(k);
  k.unmodeled("activation_checkpointing",
              "deepspeed.checkpointing (Megatron-DeepSpeed's models): Hugging Face models "
              "checkpoint through gradient_checkpointing, --recompute here");
  k.unmodeled("communication_data_type",
              "the format gradients are reduced in; vramfit reduces in the gradients' format");
  k.unmodeled("amp", "NVIDIA apex's amp: vramfit models torch.autocast (--precision amp-bf16)");
  k.unmodeled("sparse_gradients", "sparse embedding gradients");
  k.unmodeled("pipeline", "DeepSpeed's PipelineModule: give --pp");
  k.no_effect({"gradient_clipping",
               "steps_per_print",
               "wall_clock_breakdown",
               "dump_state",
               "memory_breakdown",
               "zero_allow_untested_optimizer",
               "zero_force_ds_cpu_optimizer",
               "prescale_gradients",
               "gradient_predivide_factor",
               "seed",
               "tensorboard",
               "wandb",
               "csv_monitor",
               "comet",
               "flops_profiler",
               "comms_logger",
               "monitor_config",
               "checkpoint",
               "aio",
               "disable_allgather"});
}

}  // namespace vramfit::cli
