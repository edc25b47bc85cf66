// SPDX-License-Identifier: MIT
// --from torchtune recipe.yaml: a torchtune recipe config as vramfit's options, each key as the
// recipes read it (pytorch/torchtune @ bd2a0fc7: recipes/full_finetune_single_device.py,
// full_finetune_distributed.py, lora_finetune_single_device.py, lora_finetune_distributed.py;
// docs/from.md#--from-torchtune). The file names neither the recipe nor the GPU count: LoRA comes
// from the model builder, the GPUs from the user's --dp.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "inputs.hpp"
#include "launcher_file.hpp"

namespace vramfit::cli {

namespace detail_torchtune {

/// The last part of a dotpath: "torchtune.models.llama3_1.lora_llama3_1_8b" -> "lora_llama3_1_8b".
inline std::string last_part(const std::string& dotpath) {
  return dotpath.substr(dotpath.rfind('.') + 1);
}

/// A model builder's vramfit preset, after its lora_/qlora_ prefix is stripped (the builders of
/// torchtune/models/<family>/_model_builders.py whose shapes equal a preset's).
inline const char* preset_of(std::string_view builder) {
  struct row {
    const char *builder, *preset;
  };
  static constexpr row rows[] = {
      {"llama3_1_8b", "llama-3-8b"},
      {"llama3_8b", "llama-3-8b"},
      {"llama3_1_70b", "llama-3-70b"},
      {"llama3_70b", "llama-3-70b"},
      {"llama3_3_70b", "llama-3-70b"},
      {"llama3_1_405b", "llama-3.1-405b"},
      {"llama2_7b", "llama-2-7b"},
      {"llama2_13b", "llama-2-13b"},
      {"llama2_70b", "llama-2-70b"},
      {"mistral_7b", "mistral-7b"},
      {"qwen2_5_0_5b", "qwen2.5-0.5b"},
      {"qwen2_5_7b_base", "qwen2.5-7b"},
      {"qwen2_5_7b_instruct", "qwen2.5-7b"},
      {"qwen2_5_72b_base", "qwen2.5-72b"},
      {"qwen2_5_72b_instruct", "qwen2.5-72b"},
      {"qwen3_0_6b_base", "qwen3-0.6b"},
      {"qwen3_0_6b_instruct", "qwen3-0.6b"},
      {"qwen3_8b_base", "qwen3-8b"},
      {"qwen3_8b_instruct", "qwen3-8b"},
      {"gemma2_2b", "gemma-2-2b"},
      {"gemma2_9b", "gemma-2-9b"},
      {"gemma2_27b", "gemma-2-27b"},
      {"phi3_mini", "phi-3-mini"},
  };
  for (const row& r : rows)
    if (builder == r.builder) return r.preset;
  return nullptr;
}

/// model: the builder names the architecture (config.instantiate(cfg.model)); a lora_/qlora_
/// builder and its lora_* arguments the adapters (_component_builders.py lora_llama3_attention,
/// modules/peft/lora.py LoRALinear). Returns whether the recipe is a LoRA one.
inline bool model(launcher_keys& k, const std::string& dtype) {
  const auto component = k.text("model._component_");
  if (!component)
    k.refuse("model._component_", "is required: torchtune builds the model from it (cfg.model)");
  std::string builder = last_part(*component);
  const bool qlora_builder = builder.starts_with("qlora_");
  const bool lora = qlora_builder || builder.starts_with("lora_");
  if (lora) builder = builder.substr(builder.find('_') + 1);
  if (const char* preset = preset_of(builder)) {
    k.set("--model", preset, "model._component_");
    if (builder == "mistral_7b")
      k.unmodeled("model._component_",
                  "torchtune's Mistral has no sliding window (mistral/_component_builders.py); "
                  "the preset's 4096-token window masks longer sequences");
  } else if (const auto dir = k.text("checkpointer.checkpoint_dir");
             dir && std::filesystem::is_regular_file(std::filesystem::path(*dir) / "config.json")) {
    // FullModelHFCheckpointer reads <checkpoint_dir>/config.json (_checkpointer.py).
    k.set("--model", (std::filesystem::path(*dir) / "config.json").string(),
          "checkpointer.checkpoint_dir");
  } else {
    k.unmodeled("model._component_",
                "no vramfit preset has this builder's shapes: give --model (a preset, a "
                "config.json or a Hugging Face id)");
  }
  if (!lora) {
    for (const char* key : {"model.lora_rank", "model.lora_attn_modules", "model.apply_lora_to_mlp",
                            "model.apply_lora_to_output", "model.quantize_base", "model.use_dora"})
      if (k.find(key))
        k.refuse(key, "is not an argument of " + *component + " (a lora_ builder's)");
    return false;
  }
  // lora_finetune_*.py read lora_rank, lora_attn_modules, apply_lora_to_mlp as cfg_model.x.
  const auto rank = k.integer("model.lora_rank", 1, largest_count);
  if (!rank) k.refuse("model.lora_rank", "is required by the LoRA recipes (cfg_model.lora_rank)");
  k.set("--lora-rank", std::to_string(*rank), "model.lora_rank");
  const nlohmann::json* modules = k.find("model.lora_attn_modules");
  if (!modules || !modules->is_array())
    k.refuse(
        "model.lora_attn_modules",
        "must be a list of q_proj, k_proj, v_proj and output_proj (cfg_model.lora_attn_modules)");
  std::string targets;
  for (const nlohmann::json& m : *modules) {
    const std::string name = m.is_string() ? m.get<std::string>() : std::string();
    if (name != "q_proj" && name != "k_proj" && name != "v_proj" && name != "output_proj")
      k.refuse("model.lora_attn_modules", "holds " + detail::shown(m) +
                                              ": torchtune's LoRA attention modules are q_proj, "
                                              "k_proj, v_proj and output_proj");
    targets += (targets.empty() ? "" : ",") + (name == "output_proj" ? "o_proj" : name);
  }
  const auto mlp = k.boolean("model.apply_lora_to_mlp");
  if (!mlp)
    k.refuse("model.apply_lora_to_mlp",
             "is required by the LoRA recipes (cfg_model.apply_lora_to_mlp)");
  // modules/feed_forward.py: w1 gate_proj, w2 down_proj, w3 up_proj.
  if (*mlp) targets += std::string(targets.empty() ? "" : ",") + "gate_proj,up_proj,down_proj";
  // _component_builders.py: apply_lora_to_output makes the head a LoRALinear.
  if (k.boolean("model.apply_lora_to_output").value_or(false))
    targets += std::string(targets.empty() ? "" : ",") + "lm_head";
  if (targets.empty())
    k.refuse("model.lora_attn_modules", "is empty and no MLP or head is adapted: no LoRA weights");
  k.set("--lora-targets", targets, "model.lora_attn_modules");
  // The adapters are built under training.set_default_dtype(dtype), as the base weights.
  k.set("--lora-dtype", dtype, "dtype");
  // qlora_* = partial(lora_*, quantize_base=True): NF4 base weights (to_nf4, FrozenNF4Linear).
  if (qlora_builder || k.boolean("model.quantize_base").value_or(false))
    k.set("--qlora", "true", qlora_builder ? "model._component_" : "model.quantize_base");
  if (k.boolean("model.use_dora").value_or(false))
    k.refuse("model.use_dora", "DoRA (DoRALinear's magnitude and weight norm) is not modeled");
  if (const auto dropout = k.number("model.lora_dropout"); dropout && *dropout > 0)
    k.unmodeled("model.lora_dropout",
                "nn.Dropout before lora_a keeps a mask and a dropped copy of each adapted "
                "module's input (lora.py); --dropout is the model's own");
  k.no_effect({"model.lora_alpha"});  // a scale, no tensor
  return true;
}

/// dtype as training/precision.py get_dtype reads it; pure bf16 with no fp32 master (the
/// recipes' docstrings: "all activations, gradients and optimizer states are in bfloat16").
inline std::string dtype(launcher_keys& k) {
  const auto d = k.text("dtype");
  if (!d) return "fp32";  // get_dtype(None) is fp32
  if (*d == "fp16")
    k.refuse("dtype",
             "fp16: \"full fp16 training is not supported with this recipe. Please use "
             "bf16 or fp32 instead.\"");
  if (*d == "fp64") k.refuse("dtype", "fp64 is not modeled");
  if (*d != "bf16" && *d != "fp32")
    k.refuse("dtype",
             "must be one of fp16, bf16, fp32, fp64 (get_dtype), got \"" + shown_value(*d) + "\"");
  return *d;
}

/// optimizer: config.instantiate(cfg.optimizer, params). torch.optim's fused/foreach as
/// torch/optim/adam.py picks them: foreach only when both are None, else for-loop unless set.
inline void optimizer(launcher_keys& k, const std::string& dtype) {
  const auto component = k.text("optimizer._component_");
  if (!component) k.refuse("optimizer._component_", "is required (cfg.optimizer)");
  k.no_effect({"optimizer.lr", "optimizer.weight_decay", "optimizer.betas", "optimizer.eps",
               "optimizer.maximize", "optimizer.capturable", "optimizer.differentiable"});
  const std::string name = last_part(*component);
  const std::string lower = lower_case(name);
  if (component->starts_with("torch.optim.")) {
    static constexpr const char* torch_optimizers[] = {"adamw",   "adam",     "sgd",    "adagrad",
                                                       "rmsprop", "adadelta", "adamax", "nadam",
                                                       "radam",   "rprop"};
    bool known = false;
    for (const char* o : torch_optimizers) known = known || lower == o;
    if (!known) {
      k.unmodeled("optimizer._component_",
                  "vramfit models no " + *component + "; it takes --optimizer's value or default");
      return;
    }
    k.set("--optimizer", lower, "optimizer._component_");
    const auto fused = k.boolean("optimizer.fused");
    const auto foreach = k.boolean("optimizer.foreach");
    if (fused.value_or(false) && foreach.value_or(false))
      k.refuse("optimizer.fused",
               "and foreach are both true: \"`fused` and `foreach` cannot be "
               "`True` together.\"");
    if (fused.value_or(false))
      k.set("--optimizer-impl", "fused", "optimizer.fused");
    else if (foreach.value_or(false))
      k.set("--optimizer-impl", "foreach", "optimizer.foreach");
    else if (fused || foreach)  // an explicit False: torch does not pick foreach
      k.set("--optimizer-impl", "for-loop", fused ? "optimizer.fused" : "optimizer.foreach");
    else  // both None: _default_to_fused_or_foreach picks foreach on CUDA
      k.set("--optimizer-impl", "foreach", "(default: optimizer.fused and foreach None)");
    if ((lower == "adam" || lower == "adamw") && k.boolean("optimizer.amsgrad").value_or(false))
      k.set("--amsgrad", "true", "optimizer.amsgrad");
    if (lower == "sgd" || lower == "rmsprop")
      if (const auto m = k.number("optimizer.momentum"); m && *m > 0)
        k.set("--momentum", std::to_string(*m), "optimizer.momentum");
    if (lower == "rmsprop" && k.boolean("optimizer.centered").value_or(false))
      k.set("--centered", "true", "optimizer.centered");
    return;
  }
  if (component->starts_with("bitsandbytes.optim.")) {
    if (name == "PagedAdamW8bit") {
      k.set("--optimizer", "paged-adamw-8bit", "optimizer._component_");
    } else if (name == "AdamW8bit" || name == "Adam8bit") {
      k.set("--optimizer", "adamw-8bit", "optimizer._component_");
    } else if (name == "PagedAdamW" || name == "PagedAdamW32bit" || name == "AdamW" ||
               name == "AdamW32bit") {
      // bnb's Optimizer2State.init_state: 32-bit states are fp32 whatever the parameters.
      k.set("--optimizer", "adamw", "optimizer._component_");
      if (dtype != "fp32")
        k.unmodeled(
            "optimizer._component_",
            "bitsandbytes' 32-bit states are fp32 over bf16 parameters (twice what "
            "--optimizer adamw keeps under --precision bf16), paged in CUDA managed memory");
    } else {
      k.unmodeled("optimizer._component_",
                  "vramfit models no " + *component + "; it takes --optimizer's value or default");
      return;
    }
    for (const char* key :
         {"optimizer.optim_bits", "optimizer.min_8bit_size", "optimizer.percentile_clipping",
          "optimizer.block_wise", "optimizer.is_paged"})
      k.unmodeled(key,
                  "vramfit keeps bitsandbytes' class defaults (8-bit blocks of 256, "
                  "min_8bit_size 4096)");
    return;
  }
  k.unmodeled("optimizer._component_",
              "vramfit models no " + *component + "; it takes --optimizer's value or default");
}

/// Activation checkpointing: enable_activation_checkpointing wraps every
/// TransformerSelfAttentionLayer NO_REENTRANT (training/memory.py set_activation_checkpointing);
/// full_finetune_distributed.py's ac_mode/ac_option apply only when it is False (l.659-670).
inline bool recompute(launcher_keys& k, bool full) {
  const auto enabled = k.boolean("enable_activation_checkpointing");
  const auto mode = full ? k.text("ac_mode") : std::nullopt;
  if (!full)
    k.unmodeled("ac_mode", "read by full_finetune_distributed.py only: the LoRA recipes ignore it");
  if (!full) k.unmodeled("ac_option", "read by full_finetune_distributed.py only");
  std::string key = enabled ? "enable_activation_checkpointing"
                            : "(default: enable_activation_checkpointing False)";
  bool on = enabled.value_or(false);
  std::int64_t every = 1;
  if (mode) {
    key = "ac_mode";
    if (on) {
      on = false;  // both set: neither wrapper is applied (l.667)
      k.find("ac_option");
    } else if (*mode == "full") {
      on = true;
      k.find("ac_option");
    } else if (*mode == "selective") {
      // activations.py checkpoint_wrapper: every_x_layer = int(ac_style); 0 and 1 wrap all.
      const nlohmann::json* option = k.find("ac_option");
      if (!option || !option->is_number_integer() || option->get<std::int64_t>() < 0)
        k.refuse("ac_option",
                 "must be a whole number of layers with ac_mode selective "
                 "(int(ac_style) in training/activations.py), got " +
                     (option ? detail::shown(*option) : std::string("none")));
      on = true;
      every = std::max<std::int64_t>(option->get<std::int64_t>(), 1);
    } else {
      k.refuse("ac_mode",
               "must be full or selective (training/activations.py: \"Unknown AC "
               "type or AC config.\"), got \"" +
                   shown_value(*mode) + "\"");
    }
  }
  k.set("--recompute", on ? "full" : "none", key);
  if (on) k.set("--non-reentrant", "true", key);
  if (every > 1) k.set("--recompute-every", std::to_string(every), "ac_option");
  return on;
}

/// Activation offloading (training/_activation_offloading.py get_act_offloading_ctx_manager).
inline void offloading(launcher_keys& k, bool checkpointing) {
  const auto offload = k.boolean("enable_activation_offloading");
  if (offload && *offload && !checkpointing)
    k.refuse("enable_activation_offloading",
             "\"should only be True when enable_activation_checkpointing is True\"");
  if (offload)
    k.set("--activation-offload", *offload ? "cpu" : "none", "enable_activation_offloading");
  if (k.boolean("activation_offloading_use_streams").value_or(true) && offload.value_or(false))
    k.unmodeled("activation_offloading_use_streams",
                "with streams, up to 5 tensors being copied stay on the GPU (max_fwd_stash_size)");
}

/// FSDP2 and the other parallel dimensions (training/_distributed.py ParallelDims, shard_model).
/// A file that holds a key only the distributed recipes read is for them, and they shard every
/// layer with FSDP2 over the user's --dp; any other file is a single-device recipe's.
inline void parallel(launcher_keys& k, bool lora) {
  std::string why;
  for (const char* key :
       {"fsdp_cpu_offload", "fsdp_reshard_after_forward", "custom_sharded_layers",
        "tensor_parallel_dim", "tensor_parallel_plan", "data_parallel_shard_dim",
        "data_parallel_replicate_dim", "context_parallel_dim", "dataset_val", "ac_mode"})
    if (why.empty() && k.find(key)) why = key;
  if (why.empty()) return;  // a single-device recipe's file: the user's --dp alone
  const std::string key = "(" + why + ": a distributed recipe's file)";
  k.set("--fsdp", "full", key);
  k.set("--fsdp-version", "2", key);
  const nlohmann::json* reshard = k.find("fsdp_reshard_after_forward");
  if (reshard && !reshard->is_boolean() && !reshard->is_number_integer())
    k.refuse("fsdp_reshard_after_forward",
             "must be true, false or a rank count, got " + detail::shown(*reshard));
  k.set("--reshard-after-forward",
        !reshard                ? "true"
        : reshard->is_boolean() ? (reshard->get<bool>() ? "true" : "false")
                                : std::to_string(reshard->get<std::int64_t>()),
        reshard ? "fsdp_reshard_after_forward" : "(default: fsdp_reshard_after_forward True)");
  if (k.boolean("fsdp_cpu_offload").value_or(false))
    k.set("--offload", "all", "fsdp_cpu_offload");  // CPUOffloadPolicy (shard_model)
  const nlohmann::json* custom = k.find("custom_sharded_layers");
  if (custom && !custom->empty())
    k.unmodeled("custom_sharded_layers",
                "these modules get their own FSDP unit and reshard after forward; vramfit keeps "
                "embeddings and head in the root unit, gathered through the step");
  const auto tp = k.integer("tensor_parallel_dim", 1, largest_count).value_or(1);
  if (tp > 1) {
    if (lora)
      k.refuse("tensor_parallel_dim",
               "must be 1: \"Tensor parallelism is not supported in this "
               "recipe.\" (lora_finetune_distributed.py)");
    const auto plan = k.text("tensor_parallel_plan._component_");
    if (!plan)
      k.refuse("tensor_parallel_plan",
               "is required with tensor_parallel_dim above 1: \"Tensor "
               "Parallel plan needs to be provided\"");
    k.set("--tp", std::to_string(tp), "tensor_parallel_dim");
    k.set("--sp", "true",
          "tensor_parallel_plan._component_");  // base_llama_tp_plan: SequenceParallel
    if (last_part(*plan) != "base_llama_tp_plan")
      k.unmodeled("tensor_parallel_plan._component_",
                  "vramfit models base_llama_tp_plan's sharding (sequence-parallel norms)");
  } else {
    k.no_effect({"tensor_parallel_plan"});  // unused at tensor_parallel_dim 1
  }
  if (const auto cp = k.integer("context_parallel_dim", 1, largest_count); cp && *cp > 1)
    k.set("--cp", std::to_string(*cp), "context_parallel_dim");
  k.unmodeled("context_parallel_rotate_method", "how ring attention exchanges K and V");
  if (k.integer("data_parallel_replicate_dim", 1, largest_count).value_or(1) > 1)
    k.unmodeled("data_parallel_replicate_dim",
                "HSDP: give --fsdp hybrid --fsdp-group <ranks per shard group>");
  if (k.integer("data_parallel_shard_dim", -1, largest_count).value_or(-1) != -1)
    k.unmodeled("data_parallel_shard_dim", "vramfit shards over all of --dp");
}

/// The sequence: tokenizer.max_seq_len truncates (and pads each pack to it when packed,
/// datasets/_packed.py); the collate pads a batch to its longest sample.
inline void sequence(launcher_keys& k) {
  const nlohmann::json* dataset = k.find("dataset");
  bool packed = false, unpacked = false;
  const auto check = [&](const nlohmann::json& d) {
    const auto it = d.is_object() ? d.find("packed") : d.end();
    if (d.is_object() && it != d.end() && !it->is_null() && !it->is_boolean())
      k.refuse("dataset.packed", "must be true or false, got " + detail::shown(*it));
    (d.is_object() && it != d.end() && it->is_boolean() && it->get<bool>() ? packed : unpacked) =
        true;
  };
  if (dataset && dataset->is_array())
    for (const nlohmann::json& d : *dataset) check(d);
  else if (dataset)
    check(*dataset);
  if (packed && unpacked)
    k.refuse("dataset",
             "\"ConcatDataset can't process a mix of packed and non-packed "
             "datasets.\"");
  const auto length = k.integer("tokenizer.max_seq_len", 1, largest_count);
  if (packed && !length)
    k.refuse("tokenizer.max_seq_len",
             "is null: \"PackedDataset requires a max_seq_len to be set on the tokenizer.\"");
  if (length) k.set("--seq-len", std::to_string(*length), "tokenizer.max_seq_len");
  if (packed)
    k.unmodeled("dataset.packed", "flex attention with a BlockMask, modeled as --attention sdpa");
  k.no_effect({"tokenizer._component_", "tokenizer.path", "tokenizer.merges_file",
               "tokenizer.vocab_path", "tokenizer.special_tokens_path", "tokenizer.prompt_template",
               "tokenizer.truncation_type"});
}

/// loss: the chunked losses of modules/loss (num_output_chunks 8), or torch's own.
inline void loss(launcher_keys& k) {
  const auto component = k.text("loss._component_");
  if (!component) return;
  const std::string name = last_part(*component);
  if (name == "LinearCrossEntropyLoss")
    k.set("--loss", "linear-chunked", "loss._component_");
  else if (name == "CEWithChunkedOutputLoss")
    k.set("--loss", "chunked-output", "loss._component_");
  else if (*component == "torch.nn.CrossEntropyLoss")
    k.set("--loss", "native", "loss._component_");  // full bf16 logits, no upcast
  else
    k.refuse("loss._component_",
             "must be LinearCrossEntropyLoss, CEWithChunkedOutputLoss or "
             "torch.nn.CrossEntropyLoss (the fine-tuning recipes' losses), got \"" +
                 shown_value(*component) + "\"");
  if (k.integer("loss.num_output_chunks", 1, largest_count).value_or(8) != 8)
    k.unmodeled("loss.num_output_chunks", "vramfit models 8 chunks");
  if (k.boolean("loss.mask_ignored_tokens").value_or(false))
    k.unmodeled("loss.mask_ignored_tokens",
                "ignored tokens are dropped before the head: fewer logits than vramfit counts");
  k.no_effect({"loss.ignore_index"});
}

}  // namespace detail_torchtune

/// The options a torchtune recipe config sets, and its keys that change no memory or are not
/// modeled. Every option that the recipes' code default sets apart from --framework torchtune's
/// preset is given explicitly.
inline void translate_torchtune(launcher_keys& k) {
  namespace d = detail_torchtune;
  const std::string dtype = d::dtype(k);
  k.set("--precision", dtype, k.find("dtype") ? "dtype" : "(default: dtype null, fp32)");
  const bool lora = d::model(k, dtype);
  d::optimizer(k, dtype);
  // The batch, per data-parallel rank (StatefulDistributedSampler(num_replicas=dp_degree)).
  if (const auto b = k.integer("batch_size", 1, largest_count))
    k.set("--micro-batch", std::to_string(*b), "batch_size");
  const auto steps = k.integer("gradient_accumulation_steps", 1, largest_count);
  if (steps) k.set("--grad-accum", std::to_string(*steps), "gradient_accumulation_steps");
  // optimizer_in_bwd: read by the full recipes only (FS cfg.optimizer_in_bwd, FD False).
  const auto in_bwd = k.boolean("optimizer_in_bwd");
  const nlohmann::json* clip = k.find("clip_grad_norm");
  if (!lora) {
    if (in_bwd.value_or(false) && steps.value_or(1) > 1)
      k.refuse("optimizer_in_bwd",
               "with gradient_accumulation_steps above 1: \"Gradient "
               "accumulation is not supported with optimizer_in_bwd\"");
    if (in_bwd.value_or(false) && clip)
      k.refuse("optimizer_in_bwd",
               "with clip_grad_norm set: \"Gradient clipping is not "
               "supported with optimizer_in_bwd\"");
    k.set("--optimizer-in-backward", in_bwd.value_or(false) ? "true" : "false",
          in_bwd ? "optimizer_in_bwd" : "(default: optimizer_in_bwd False)");
  } else if (in_bwd.value_or(false)) {
    k.unmodeled("optimizer_in_bwd",
                "the LoRA recipes do not read it: the step runs after backward");
  }
  const bool checkpointing = d::recompute(k, !lora);
  d::offloading(k, checkpointing);
  d::loss(k);
  d::sequence(k);
  // modules/attention.py MultiHeadAttention.forward expands K and V to every query head before
  // SDPA: vramfit's sdpa.
  k.set("--attention", "sdpa", "(modules/attention.py: K and V repeated per head)");
  d::parallel(k, lora);
  if (const auto device = k.text("device"); device && *device != "cuda")
    k.refuse("device",
             "must be cuda: vramfit models CUDA GPUs, got \"" + shown_value(*device) + "\"");
  const nlohmann::json* compile = k.find("compile");
  if (compile && !(compile->is_boolean() && !compile->get<bool>()))
    k.unmodeled("compile", "torch.compile fuses kernels and frees some activations");
  if (k.boolean("enable_fp8_training").value_or(false))
    k.unmodeled(
        "enable_fp8_training",
        "torchao Float8Linear with dynamic scaling (not Transformer Engine's --precision fp8)");
  k.unmodeled("fp8_recipe_name", "torchao's float8 recipe");
  if (k.boolean("resize_token_embeddings").value_or(false))
    k.unmodeled("resize_token_embeddings", "embedding and head resized to the tokenizer's vocab");
  if (const auto collate = k.text("collate_fn");
      collate && d::last_part(*collate) != "padded_collate_sft")
    k.unmodeled("collate_fn", "vramfit models padded_collate_sft's batches");
  if (k.find("run_val_every_n_steps") && !k.find("dataset_val"))
    k.refuse("run_val_every_n_steps", "is set but dataset_val is not configured");
  // Checkpoints, data plumbing, the schedule, logging and profiling (host-side or scalars);
  // validation runs forward-only under no_grad, below the training peak.
  k.no_effect({"output_dir",
               "checkpointer",
               "resume_from_checkpoint",
               "save_adapter_weights_only",
               "save_every_n_steps",
               "enable_async_checkpointing",
               "low_cpu_ram",
               "shuffle",
               "seed",
               "dataset_val",
               "batch_size_val",
               "run_val_every_n_steps",
               "epochs",
               "max_steps_per_epoch",
               "lr_scheduler",
               "clip_grad_norm",
               "cudnn_deterministic_mode",
               "metric_logger",
               "log_every_n_steps",
               "log_peak_memory_stats",
               "log_level",
               "profiler",
               "device"});
}

}  // namespace vramfit::cli
