// SPDX-License-Identifier: MIT
// --from deepspeed ds_config.json: DeepSpeed's JSON config as vramfit's options, each key as
// DeepSpeed 0.19 reads it (deepspeed/runtime/config.py, runtime/zero/config.py,
// runtime/zero/offload_config.py, runtime/precision_config.py, runtime/engine.py;
// docs/from.md#--from-deepspeed). The file never names the model nor the sequence length.
#pragma once

#include <string>

#include "inputs.hpp"
#include "launcher_file.hpp"

namespace vramfit::cli {

namespace detail_deepspeed {

/// The most elements a bucket option takes here; vramfit's option checks the value itself.
inline constexpr std::int64_t largest_elements = std::int64_t{1} << 50;
/// The largest count the options take (train_setup.hpp whole_count).
inline constexpr std::int64_t largest_count = 1'000'000'000'000'000;

/// The batch, and the parallel degrees the file holds. config.py _batch_assertion requires
/// train_batch_size == micro x steps x world_size, where the world counts every rank under
/// AutoTP (tensor_parallel.autotp_size) and the data-parallel ranks of the Ulysses mesh
/// (sequence_parallel_size): given all three, the data-parallel degree is one value.
inline void batch_and_degrees(launcher_keys& k) {
  const auto micro = k.integer("train_micro_batch_size_per_gpu", 1, largest_count);
  const auto steps = k.integer("gradient_accumulation_steps", 1, largest_count);
  const auto tp = k.integer("tensor_parallel.autotp_size", 0, largest_count).value_or(0);
  const auto sp = k.integer("sequence_parallel_size", 1, largest_count).value_or(1);
  if (micro) k.set("--micro-batch", std::to_string(*micro), "train_micro_batch_size_per_gpu");
  if (steps) k.set("--grad-accum", std::to_string(*steps), "gradient_accumulation_steps");
  if (tp > 1) k.set("--tp", std::to_string(tp), "tensor_parallel.autotp_size");
  if (sp > 1) k.set("--cp", std::to_string(sp), "sequence_parallel_size");
  if (!micro || !steps || k.is_auto("train_batch_size")) {
    k.unmodeled("train_batch_size",
                "DeepSpeed derives the micro-batch or the accumulation from it and the world "
                "size, which the file does not hold: give --micro-batch and --grad-accum");
    return;
  }
  const auto total = k.integer("train_batch_size", 1, std::int64_t{1} << 60);
  if (!total) return;
  const std::int64_t per_rank = *micro * *steps * (tp > 1 ? tp : 1);
  if (*total % per_rank != 0)
    k.refuse("train_batch_size", std::to_string(*total) +
                                     " is not train_micro_batch_size_per_gpu x "
                                     "gradient_accumulation_steps" +
                                     (tp > 1 ? " x tensor_parallel.autotp_size" : "") + " (" +
                                     std::to_string(per_rank) +
                                     ") times a world size, as DeepSpeed requires");
  k.set("--dp", std::to_string(*total / per_rank), "train_batch_size");
}

/// The lower-case name of a DeepSpeed dtype (runtime/config_utils.py DtypeEnum's aliases).
inline std::string dtype_named(launcher_keys& k, const char* key, const std::string& name) {
  for (const auto& [alias, format] : {std::pair{"fp32", "fp32"},
                                      {"float32", "fp32"},
                                      {"float", "fp32"},
                                      {"torch.float32", "fp32"},
                                      {"fp16", "fp16"},
                                      {"float16", "fp16"},
                                      {"half", "fp16"},
                                      {"torch.float16", "fp16"},
                                      {"bf16", "bf16"},
                                      {"bfloat16", "bf16"},
                                      {"torch.bfloat16", "bf16"}})
    if (same_name(name, alias)) return format;
  k.refuse(key, "must be fp32, fp16 or bf16 (or a torch name of one), got \"" + shown_value(name) +
                    "\"");
}

/// bf16 or fp16: 16-bit parameters and gradients with an fp32 master (stage_1_and_2.py,
/// bf16_optimizer.py, fp16/fused_optimizer.py); neither: fp32 throughout (the deepspeed
/// preset's bf16 is then wrong, so fp32 is set).
inline void precision(launcher_keys& k) {
  if (k.is_auto("bf16.enabled") || k.is_auto("fp16.enabled")) {  // the Trainer's --bf16/--fp16
    k.find("bf16.enabled");
    k.find("fp16.enabled");
  } else {
    const bool bf16 = k.boolean("bf16.enabled").value_or(false);
    const bool fp16 = k.boolean("fp16.enabled").value_or(false);
    if (bf16 && fp16)  // config.py _initialize_params
      k.refuse("bf16.enabled", "and fp16.enabled are both true: DeepSpeed enables one");
    if (k.boolean("amp.enabled").value_or(false))  // engine.py _do_optimizer_sanity_check
      k.refuse("amp.enabled", bf16 || fp16 ? "with fp16 or bf16: DeepSpeed enables one"
                                           : "(NVIDIA apex's amp): vramfit models "
                                             "torch.autocast, --precision amp-fp16");
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
               "fp16.auto_cast", "bf16.immediate_grad_update", "bf16.check_grad_overflow", "amp"});
  // The accumulation buffer's format (engine.py get_data_types): vramfit's gradients.
  if (const auto accum = k.text("data_types.grad_accum_dtype"))
    k.set("--grad-dtype", dtype_named(k, "data_types.grad_accum_dtype", *accum),
          "data_types.grad_accum_dtype");
  for (const char* key : {"bf16.bf16_master_weights_and_grads", "bf16.bf16_optimizer_states",
                          "fp16.fp16_master_weights_and_grads"})
    k.unmodeled(key, "a 16-bit master or 16-bit optimizer states: vramfit keeps them in fp32");
}

/// Where a section offloads to: "", "cpu" or "nvme" (offload_config.py OffloadDeviceEnum).
inline std::string offload_device(launcher_keys& k, std::string_view key) {
  const auto d = k.choice(key, {"none", "cpu", "nvme"});
  return d && *d != "none" ? *d : std::string();
}

/// The stage: zero_optimization.stage, or the deprecated boolean zero_optimization (stage 1).
inline std::int64_t zero_stage(launcher_keys& k) {
  if (const nlohmann::json* z = k.find("zero_optimization"); z && z->is_boolean()) {
    k.set("--zero", z->get<bool>() ? "1" : "0", "zero_optimization");
    return z->get<bool>() ? 1 : 0;
  }
  const std::int64_t stage = k.integer("zero_optimization.stage", 0, 3).value_or(0);
  k.set("--zero", std::to_string(stage), "zero_optimization.stage");
  return stage;
}

/// ZeRO's stage, buckets and offload (zero/config.py DeepSpeedZeroConfig, offload_config.py);
/// the stage.
inline std::int64_t zero(launcher_keys& k) {
  const std::int64_t stage = zero_stage(k);
  const std::string optimizer = offload_device(k, "zero_optimization.offload_optimizer.device");
  const std::string parameters = offload_device(k, "zero_optimization.offload_param.device");
  if (stage == 0) {
    if (!optimizer.empty())  // ops/adam/cpu_adam.py step asserts its parameters are on the host
      k.refuse("zero_optimization.offload_optimizer.device", "needs ZeRO stage 1, 2 or 3");
    k.no_effect({"zero_optimization"});  // no ZeRO: none of its buffers
    return 0;
  }
  // "auto": the Trainer's sizes from the hidden size, which --reduce-bucket auto computes.
  const auto bucket = [&k](const char* key, const char* option, std::int64_t least = 1) {
    if (k.is_auto(key))
      k.set(option, "auto", key);
    else if (const auto n = k.integer(key, least, largest_elements))
      k.set(option, std::to_string(*n), key);
  };
  bucket("zero_optimization.reduce_bucket_size", "--reduce-bucket");
  // ZeRO-3's coordinator (partitioned_param_coordinator.py), read by stage 3 only; 0 is a
  // limit too (zero/config.py: ge=0).
  const char* live = "zero_optimization.stage3_max_live_parameters";
  const char* reuse = "zero_optimization.stage3_max_reuse_distance";
  const char* persistence = "zero_optimization.stage3_param_persistence_threshold";
  const char* model_persistence = "zero_optimization.stage3_model_persistence_threshold";
  if (stage < 3) {
    if (k.boolean("zero_optimization.overlap_comm").value_or(false))
      k.set("--overlap-comm", "true", "zero_optimization.overlap_comm");
    k.no_effect({live, reuse, persistence, model_persistence});
  } else {
    k.no_effect({"zero_optimization.overlap_comm"});  // ZeRO-3 reduces through one buffer
    // 0 prefetches nothing (partitioned_param_coordinator.py: prefetch_bucket_sz > 0).
    bucket("zero_optimization.stage3_prefetch_bucket_size", "--prefetch-bucket", 0);
    if (const auto g = k.integer("zero_optimization.sub_group_size", 1, largest_elements))
      k.set("--sub-group", std::to_string(*g), "zero_optimization.sub_group_size");
    for (const auto& [key, option] :
         {std::pair{live, "--max-live-parameters"}, std::pair{reuse, "--max-reuse-distance"}})
      if (const auto n = k.integer(key, 0, largest_count)) k.set(option, std::to_string(*n), key);
    // "auto": the Trainer's 10 x hidden size, which --persistence-threshold auto computes.
    if (k.is_auto(persistence))
      k.set("--persistence-threshold", "auto", persistence);
    else if (const auto n = k.integer(persistence, 0, largest_count))
      k.set("--persistence-threshold", std::to_string(*n), persistence);
    k.unmodeled(model_persistence,
                "caps the persistent parameters' total (default unlimited); vramfit keeps every "
                "parameter under the persistence threshold gathered");
  }
  const auto ratio = k.number("zero_optimization.offload_optimizer.ratio");
  if (ratio && *ratio < 1 && stage != 3)  // zero/config.py offload_ratio_check
    k.refuse("zero_optimization.offload_optimizer.ratio", "below 1 needs ZeRO stage 3");
  if (ratio && *ratio < 1)
    k.unmodeled("zero_optimization.offload_optimizer.ratio",
                "ZeRO-Offload++ keeps this share of the optimizer on the GPU; vramfit offloads "
                "all of it");
  if (!optimizer.empty()) {
    const bool all = stage == 3 && !parameters.empty();
    k.set("--offload", all ? "all" : "optimizer", "zero_optimization.offload_optimizer.device");
    k.set("--offload-to", optimizer, "zero_optimization.offload_optimizer.device");
  }
  if (!parameters.empty() && (stage < 3 || optimizer.empty()))
    k.unmodeled("zero_optimization.offload_param.device",
                stage < 3 ? "ZeRO-1 and 2 never offload parameters (engine.py passes it to "
                            "ZeRO-3 only)"
                          : "parameters offloaded without the optimizer: vramfit offloads them "
                            "with it only (--offload all)");
  if (!k.boolean("zero_optimization.contiguous_gradients").value_or(true))
    k.unmodeled("zero_optimization.contiguous_gradients",
                "false: no reduce bucket is allocated (stage_1_and_2.py setup_buckets); vramfit "
                "counts one");
  k.no_effect(
      {// Host side: pinned buffers and NVMe's swap files hold no GPU memory.
       "zero_optimization.offload_optimizer.pin_memory",
       "zero_optimization.offload_optimizer.buffer_count",
       "zero_optimization.offload_optimizer.fast_init",
       "zero_optimization.offload_optimizer.nvme_path",
       "zero_optimization.offload_optimizer.pipeline_read",
       "zero_optimization.offload_optimizer.pipeline_write",
       "zero_optimization.offload_param.pin_memory", "zero_optimization.offload_param.buffer_count",
       "zero_optimization.offload_param.buffer_size", "zero_optimization.offload_param.max_in_cpu",
       "zero_optimization.offload_param.nvme_path",
       // The partitions' shards are views of the flat buffers (runtime/utils.py
       // all_gather_dp_groups): the all-gather bucket allocates nothing.
       "zero_optimization.allgather_bucket_size", "zero_optimization.allgather_partitions",
       // The order and the checkpoint format, not the sizes.
       "zero_optimization.round_robin_gradients", "zero_optimization.elastic_checkpoint",
       "zero_optimization.load_from_fp32_weights", "zero_optimization.ignore_unused_parameters",
       "zero_optimization.reduce_scatter", "zero_optimization.use_multi_rank_bucket_allreduce",
       "zero_optimization.stage3_gather_16bit_weights_on_model_save",
       "zero_optimization.stage3_gather_fp16_weights_on_model_save",
       "zero_optimization.gather_16bit_weights_on_model_save"});
  for (const char* key :
       {"zero_optimization.zero_hpz_partition_size", "zero_optimization.zero_quantized_weights",
        "zero_optimization.zero_quantized_gradients",
        "zero_optimization.zero_quantized_nontrainable_weights",
        "zero_optimization.mics_shard_size", "zero_optimization.mics_hierarchical_params_gather"})
    k.unmodeled(key, "ZeRO++ and MiCS: a secondary partition or quantized copies");
  return stage;
}

/// optimizer.type as engine.py _configure_basic_optimizer builds it: Adam and AdamW are
/// FusedAdam (torch_adam: torch.optim's), Lion FusedLion, Muon MuonWithAuxAdam, another name
/// torch.optim's class of that name. Offloaded, the CPU versions step on the host. No section:
/// the client's optimizer (the Trainer's AdamW), vramfit's default.
inline void optimizer(launcher_keys& k, bool sharded) {
  k.no_effect({"optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps",
               "optimizer.params.weight_decay", "optimizer.params.bias_correction",
               "optimizer.params.adam_w_mode", "optimizer.legacy_fusion",
               "scheduler"});                    // a learning-rate schedule holds scalars
  if (k.find("optimizer.params.max_grad_norm"))  // engine.py _configure_basic_optimizer
    k.refuse("optimizer.params.max_grad_norm",
             "is not an optimizer parameter in DeepSpeed: "
             "gradient_clipping is");
  const auto type = k.text("optimizer.type");
  if (!type) return;
  const std::string name = lower_case(*type);
  const bool torch_adam = k.boolean("optimizer.params.torch_adam").value_or(false);
  const bool amsgrad = k.boolean("optimizer.params.amsgrad").value_or(false);
  const double momentum = k.number("optimizer.params.momentum").value_or(0);
  if (name == "adam" || name == "adamw") {
    if (amsgrad && !torch_adam)  // ops/adam/fused_adam.py
      k.refuse("optimizer.params.amsgrad", "is not supported by FusedAdam (torch_adam is)");
    k.set("--optimizer", "adamw", "optimizer.type");
    if (amsgrad) k.set("--amsgrad", "true", "optimizer.params.amsgrad");
    if (!torch_adam) k.set("--optimizer-impl", "fused", "optimizer.params.torch_adam");
    return;
  }
  if (name == "onebitadam" || name == "zerooneadam" || name == "onebitlamb") {
    if (sharded)  // engine.py _configure_zero_optimizer
      k.refuse("optimizer.type", *type + " is not compatible with ZeRO in DeepSpeed");
    k.unmodeled("optimizer.type", "1-bit optimizers' error buffers: vramfit models none");
    return;
  }
  // torch.optim's classes by vramfit's names, and DeepSpeed's fused Lion and Muon.
  const std::pair<const char*, const char*> known[] = {
      {"lion", "lion"},         {"muon", "muon"},   {"adagrad", "adagrad"}, {"rmsprop", "rmsprop"},
      {"adamax", "adamax"},     {"nadam", "nadam"}, {"radam", "radam"},     {"rprop", "rprop"},
      {"adadelta", "adadelta"}, {"sgd", "sgd"},     {"muadam", "adam"},     {"muadamw", "adamw"},
      {"musgd", "sgd"}};
  for (const auto& [deepspeed_name, vramfit_name] : known) {
    if (name != deepspeed_name) continue;
    k.set("--optimizer", vramfit_name, "optimizer.type");
    if (momentum > 0) k.set("--momentum", std::to_string(momentum), "optimizer.params.momentum");
    if (k.boolean("optimizer.params.centered").value_or(false))
      k.set("--centered", "true", "optimizer.params.centered");
    return;
  }
  k.unmodeled("optimizer.type",
              "vramfit models no " + *type + "; it takes --optimizer's value or default");
}

}  // namespace detail_deepspeed

/// The options a DeepSpeed config sets, and its keys that change no memory or are not modeled.
inline void translate_deepspeed(launcher_keys& k) {
  detail_deepspeed::batch_and_degrees(k);
  detail_deepspeed::precision(k);
  detail_deepspeed::optimizer(k, detail_deepspeed::zero(k) > 0);
  k.unmodeled("activation_checkpointing",
              "read only by models that call deepspeed.checkpointing.configure (Megatron-"
              "DeepSpeed); give --recompute for the recompute Hugging Face models do");
  k.unmodeled("communication_data_type",
              "reductions in another format cast a copy of each bucket; vramfit reduces in the "
              "gradients' format");
  k.unmodeled("sparse_gradients", "sparse embedding gradients");
  k.unmodeled("pipeline", "DeepSpeed's PipelineModule sets the stages in code: give --pp");
  if (k.boolean("torch_autocast.enabled").value_or(false))
    k.unmodeled("torch_autocast", "DeepSpeed's torch.autocast mode: give --precision amp-bf16");
  else
    k.no_effect({"torch_autocast"});
  for (const char* key :
       {"elasticity", "progressive_layer_drop", "data_efficiency", "curriculum_learning",
        "compression_training", "hybrid_engine", "compile", "expert_parallel"})
    k.unmodeled(key, "changes what a step holds in ways vramfit does not model");
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
               "disable_allgather",
               "log_level",
               "timers"});
}

}  // namespace vramfit::cli
