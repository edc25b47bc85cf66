// SPDX-License-Identifier: MIT
// --from hf-trainer args.yaml: a Hugging Face TrainingArguments / TRL SFTConfig + ModelConfig file
// (what HfArgumentParser.parse_yaml_file and TrlParser read), and --from accelerate
// accelerate.yaml: accelerate's ClusterConfig YAML (`accelerate config`), as vramfit's options.
// Sources: transformers training_args.py, trainer.py, trainer_optimizer.py; TRL
// trainer/sft_config.py, base_config.py, model_config.py, sft_trainer.py; accelerate
// commands/config/config_args.py, commands/launch.py, utils/dataclasses.py (docs/from.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "choices.hpp"
#include "from_deepspeed.hpp"
#include "inputs.hpp"
#include "launcher_file.hpp"

namespace vramfit::cli {

namespace detail_hf_trainer {

/// A boolean as accelerate's and transformers' str_to_bool reads it (a YAML boolean, or
/// y/yes/t/true/on/1, n/no/f/false/off/0 in any case): utils/environment.py str_to_bool.
inline std::optional<bool> truth(launcher_keys& k, std::string_view key) {
  const nlohmann::json* v = k.find(key);
  if (!v) return std::nullopt;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_string() || v->is_number_integer()) {
    const std::string s = v->is_string() ? v->get<std::string>() : v->dump();
    for (const char* yes : {"y", "yes", "t", "true", "on", "1"})
      if (same_name(s, yes)) return true;
    for (const char* no : {"n", "no", "f", "false", "off", "0"})
      if (same_name(s, no)) return false;
  }
  k.refuse(key, "must be true or false, got " + detail::shown(*v) + " (invalid truth value)");
}

/// FSDP1's BackwardPrefetch as accelerate's FullyShardedDataParallelPlugin.__post_init__ reads it
/// (utils/dataclasses.py): NO_PREFETCH (None), BACKWARD_PRE or BACKWARD_POST in any case
/// (utils/constants.py FSDP_BACKWARD_PREFETCH), or the enum's value 1 or 2 as digits; anything else
/// raises there (BackwardPrefetch[...]). `numbers`: a YAML integer counts as its digits, as
/// accelerate launch passes str() of it on (utils/launch.py prepare_multi_gpu_env); transformers
/// calls .upper() on the value, text only. vramfit's --backward-prefetch word, if the key is given.
inline std::optional<std::string> backward_prefetch(launcher_keys& k, std::string_view key,
                                                    bool numbers) {
  const nlohmann::json* v = k.find(key);
  if (!v) return std::nullopt;
  if (v->is_string() || (numbers && v->is_number_integer())) {
    const std::string s = v->is_string() ? v->get<std::string>() : v->dump();
    if (same_name(s, "NO_PREFETCH")) return "none";
    if (same_name(s, "BACKWARD_PRE")) return "pre";
    if (same_name(s, "BACKWARD_POST")) return "post";
    const std::size_t digits = s.find_first_not_of('0');  // BackwardPrefetch(int(s)): 1 or 2
    if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos &&
        digits != std::string::npos && s.size() - digits == 1 &&
        (s[digits] == '1' || s[digits] == '2'))
      return s[digits] == '1' ? "pre" : "post";
  }
  k.refuse(key, "must be BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH, got " + detail::shown(*v) +
                    " (accelerate's rule)");
}

/// fsdp_config's backward_prefetch, forward_prefetch and limit_all_gathers under FSDP1, as
/// transformers hands them to FullyShardedDataParallelPlugin (training_args.py _process_fsdp_args:
/// backward_prefetch NO_PREFETCH and forward_prefetch false when absent, limit_all_gathers only
/// when given, else the plugin's True). Transformers 4.x (`legacy`) set them through FSDP_*
/// variables the same way, but limit_all_gathers as written (trainer.py
/// create_accelerator_and_postprocess setattr), which FSDP tests for truth: any text but "" is
/// true. NO_SHARD all-gathers nothing.
inline void fsdp1_gathering(launcher_keys& k, const std::string& prefetch_key,
                            const std::string& forward_key, const std::string& limit_key,
                            bool sharded, bool legacy) {
  const auto prefetch = backward_prefetch(k, prefetch_key, false);
  const bool forward = truth(k, forward_key).value_or(false);
  const nlohmann::json* limit_value = k.find(limit_key);
  const bool limit = legacy && limit_value && limit_value->is_string()
                         ? !limit_value->get_ref<const std::string&>().empty()
                         : truth(k, limit_key).value_or(true);
  if (!sharded) {
    k.no_effect({prefetch_key, forward_key, limit_key});
    return;
  }
  k.set("--backward-prefetch", prefetch.value_or("none"),
        prefetch ? std::string_view(prefetch_key)
                 : std::string_view("(default: fsdp_config.backward_prefetch NO_PREFETCH)"));
  if (forward) k.set("--forward-prefetch", "true", forward_key);
  if (!limit) k.set("--limit-all-gathers", "false", limit_key);
}

/// Where a file of the other kinds would say so: accelerate's ClusterConfig always holds
/// distributed_type (config_args.py process_config), a DeepSpeed JSON zero_optimization or its
/// batch keys. Neither is a TrainingArguments, SFTConfig or ModelConfig field.
inline void refuse_other_kinds(launcher_keys& k, std::string_view kind) {
  if (kind != "accelerate" && k.find("distributed_type"))
    k.refuse("distributed_type",
             "is accelerate's: this is an accelerate config, give "
             "--from accelerate FILE");
  for (const char* key :
       {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size"})
    if (k.find(key))
      k.refuse(key, "is DeepSpeed's: this is a DeepSpeed config, give --from deepspeed FILE");
}

/// How the run is distributed, for the precision: accelerate upcasts trainable parameters to
/// fp32 under FSDP (accelerator.py, utils/fsdp_utils.py "Upcast to fp32 master weights"); the
/// DeepSpeed engine keeps 16-bit parameters with an fp32 master (DeepSpeedPlugin).
enum class sharding { none, fsdp, deepspeed };

/// --precision from the bf16/fp16 flags (at most one; training_args.py _validate_args refuses
/// both) over weights loaded as `weights` ("fp32", "bf16" or "fp16").
inline std::string precision(bool bf16, bool fp16, sharding s, std::string_view weights) {
  if (s == sharding::deepspeed)
    return bf16 ? "bf16-fp32-master-16bit-grads" : fp16 ? "fp16-fp32-master" : "fp32";
  if (s == sharding::fsdp || weights == "fp32")
    return bf16 ? "amp-bf16" : fp16 ? "amp-fp16" : "fp32";
  return std::string(weights);  // 16-bit weights: parameters, gradients and AdamW's states alike
}

/// The why for a DeepSpeed config the file names: --from takes one file.
inline std::string deepspeed_why(const nlohmann::json* v) {
  const std::string file =
      v && v->is_string() ? "'" + shown_value(v->get<std::string>()) + "'" : "FILE";
  return std::string(v && v->is_object() ? "an inline DeepSpeed config; save it as FILE.json and"
                                         : "a DeepSpeed config that --from cannot follow (one "
                                           "--from per line):") +
         " run vramfit train --from deepspeed " + file +
         " with the options above (ZeRO, buckets and offload come from it; leave out --optimizer "
         "when it has an optimizer block)";
}

/// Which TRL a file is written for: the legacy names pin an era whose defaults differ
/// (max_seq_length: TRL <= 0.19, sft_config.py at v0.19.0; torch_dtype: TRL <= 0.26,
/// model_config.py at v0.26.0, with transformers 4.x).
enum class era { current, trl_0_26, trl_0_19 };

struct run {
  bool trl = false;  ///< a TRL script's file (SFTConfig/ModelConfig keys), not a plain Trainer's
  era at = era::current;
  bool fsdp = false;
};

/// The model: ModelConfig model_name_or_path (+ model_revision), a Hub id read from the local
/// cache as --model reads it, or a local folder's config.json (trl/trainer/utils.py
/// create_model_from_path).
inline void model(launcher_keys& k) {
  const auto name = k.text("model_name_or_path");
  const auto revision = k.text("model_revision");
  if (!name) return;
  std::error_code ec;
  if (std::filesystem::is_directory(*name, ec))
    k.set("--model", (std::filesystem::path(*name) / "config.json").string(), "model_name_or_path");
  else
    k.set("--model", *name + (revision && *revision != "main" ? "@" + *revision : ""),
          "model_name_or_path");
}

/// `fsdp` (training_args.py FSDPOption: a list, or words split on spaces; True is full_shard in
/// transformers 5) and `fsdp_config` (its keys with or without the fsdp_ prefix: k[5:]), as
/// _process_fsdp_args and _apply_legacy_fsdp_to_config read them. FSDP2 is the default since
/// transformers #45640; transformers 4.x (the legacy eras) defaults to FSDP1.
inline bool fsdp(launcher_keys& k, const run& r) {
  const nlohmann::json* v = k.find("fsdp");
  std::vector<std::string> words;
  if (v && v->is_boolean()) {
    if (v->get<bool>()) words.emplace_back("full_shard");
  } else if (v && v->is_string()) {
    std::istringstream in(v->get<std::string>());
    for (std::string w; in >> w;) words.push_back(w);
  } else if (v && v->is_array()) {
    for (const nlohmann::json& w : *v)
      if (w.is_string())
        words.push_back(w.get<std::string>());
      else
        k.refuse("fsdp", "must list FSDP options as text, got " + detail::shown(w));
  } else if (v) {
    k.refuse("fsdp", "must be true, text or a list of FSDP options, got " + detail::shown(*v));
  }
  if (words.empty()) {
    k.no_effect({"fsdp_config"});  // read only with fsdp on
    return false;
  }
  const auto has = [&words](std::string_view w) {
    for (const std::string& x : words)
      if (x == w) return true;
    return false;
  };
  for (const std::string& w : words)
    if (w != "full_shard" && w != "shard_grad_op" && w != "no_shard" && w != "hybrid_shard" &&
        w != "hybrid_shard_zero2" && w != "offload" && w != "auto_wrap")
      k.refuse("fsdp", "holds '" + shown_value(w) +
                           "': not an FSDPOption (full_shard, shard_grad_op, no_shard, "
                           "hybrid_shard, hybrid_shard_zero2, offload, auto_wrap)");
  if (has("full_shard") && has("shard_grad_op"))
    k.refuse("fsdp", "full_shard is not compatible with shard_grad_op (transformers' rule)");
  const bool strategy = has("full_shard") || has("shard_grad_op") || has("no_shard") ||
                        has("hybrid_shard") || has("hybrid_shard_zero2");
  if (has("offload") && !strategy)
    k.refuse("fsdp",
             "offload can't work on its own: it needs full_shard or shard_grad_op, "
             "e.g. \"full_shard offload\" (transformers' rule)");
  if (const nlohmann::json* c = k.find("fsdp_config"); c && c->is_string())
    k.unmodeled("fsdp_config", "a JSON file vramfit does not open: give its keys inline");
  const auto key = [&k](const char* name) {  // fsdp_config.fsdp_x or fsdp_config.x
    const std::string prefixed = std::string("fsdp_config.fsdp_") + name;
    return k.find(prefixed) ? prefixed : std::string("fsdp_config.") + name;
  };
  const std::string version_key = key("version");
  const auto version = k.integer(version_key, 1, 2).value_or(r.at == era::current ? 2 : 1);
  const std::string why_version = r.at == era::current
                                      ? "(default: fsdp_config.version 2, transformers 5)"
                                      : "(default: fsdp_config.version 1, transformers 4)";
  k.set("--fsdp-version", std::to_string(version),
        k.find(version_key) ? std::string_view(version_key) : std::string_view(why_version));
  const std::string reshard_key = key("reshard_after_forward");
  if (version == 2) {
    if (has("no_shard") || has("hybrid_shard") || has("hybrid_shard_zero2"))
      k.refuse("fsdp",
               "no_shard and hybrid_shard are only available with FSDP1: set "
               "fsdp_config version 1 (transformers' rule)");
    const nlohmann::json* raf = k.find(reshard_key);
    if (raf && !raf->is_boolean() && !raf->is_string())
      k.refuse(reshard_key,
               "must be a bool with FSDP2 (accelerate's rule), got " + detail::shown(*raf));
    const bool reshard = raf ? truth(k, reshard_key).value_or(true) : !has("shard_grad_op");
    k.set("--fsdp", "full", "fsdp");
    k.set("--reshard-after-forward", reshard ? "true" : "false", raf ? reshard_key : "fsdp");
    // _process_fsdp_args passes them to accelerate with FSDP1 only (so accelerate's "not yet
    // implemented in FSDP2", raised for a forward_prefetch it is given, is not reached).
    for (const char* name : {"backward_prefetch", "forward_prefetch", "limit_all_gathers"})
      k.unmodeled(key(name),
                  "FSDP2 ignores it: transformers passes it on with FSDP1 only (fully_shard "
                  "prefetches one unit and has no rate limiter)");
  } else {
    const char* fsdp_word = has("shard_grad_op")  ? "grad-op"
                            : has("no_shard")     ? "none"
                            : has("hybrid_shard") ? "hybrid"
                                                  : "full";
    k.set("--fsdp", fsdp_word, "fsdp");
    if (has("hybrid_shard_zero2"))
      k.unmodeled("fsdp",
                  "HYBRID_SHARD_ZERO2 (gradients and states sharded in a node, "
                  "parameters gathered): vramfit models it as full sharding");
    k.unmodeled(reshard_key, "FSDP1 takes the sharding strategy from fsdp");
    fsdp1_gathering(k, key("backward_prefetch"), key("forward_prefetch"), key("limit_all_gathers"),
                    std::string_view(fsdp_word) != "none", r.at != era::current);
  }
  if (has("offload") || truth(k, key("cpu_offload")).value_or(false))
    k.set("--offload", "all", has("offload") ? "fsdp" : key("cpu_offload"));
  // Units: TRANSFORMER_BASED_WRAP's decoder layers are what vramfit models.
  if (const auto policy = k.text(key("auto_wrap_policy"));
      policy && *policy != "TRANSFORMER_BASED_WRAP")
    k.unmodeled(key("auto_wrap_policy"),
                "units other than the decoder layers (vramfit gathers "
                "one layer at a time)");
  const auto min_params = k.integer(key("min_num_params"), 0, std::int64_t{1} << 60);
  if (min_params && *min_params > 0 && k.find(key("transformer_layer_cls_to_wrap")))
    k.refuse(key("min_num_params"),
             "and transformer_layer_cls_to_wrap are mutually exclusive "
             "(transformers' rule)");
  if (min_params && *min_params > 0)
    k.unmodeled(key("min_num_params"), "size-based units instead of the decoder layers");
  k.no_effect({"fsdp_config.transformer_layer_cls_to_wrap",
               "fsdp_config.fsdp_transformer_layer_cls_to_wrap"});
  if (truth(k, key("cpu_ram_efficient_loading")).value_or(false) &&
      !truth(k, key("sync_module_states")).value_or(true))
    k.refuse(key("sync_module_states"),
             "must be true when cpu_ram_efficient_loading is true (transformers' rule)");
  for (const char* name : {"xla", "xla_fsdp_v2", "xla_fsdp_grad_ckpt", "xla_fsdp_settings"})
    if (k.find(std::string("fsdp_config.") + name))
      k.refuse(std::string("fsdp_config.") + name, "is PyTorch/XLA's (TPU): not a GPU run");
  // Loading and saving, not the step.
  k.no_effect({"fsdp_config.use_orig_params", "fsdp_config.fsdp_use_orig_params",
               "fsdp_config.cpu_ram_efficient_loading",
               "fsdp_config.fsdp_cpu_ram_efficient_loading", "fsdp_config.sync_module_states",
               "fsdp_config.fsdp_sync_module_states", "fsdp_config.state_dict_type",
               "fsdp_config.fsdp_state_dict_type"});
  return true;
}

/// Weights, flags and sharding to --precision (training_args.py bf16/fp16; TRL base_config.py
/// bf16 None is "not fp16"; TRL model_config.py dtype "float32", create_model_from_path).
inline void precision(launcher_keys& k, const run& r, sharding s) {
  const auto fp16 = k.boolean("fp16");
  const auto bf16_given = k.boolean("bf16");
  const bool bf16 = bf16_given.value_or(r.trl && !fp16.value_or(false));
  if (bf16 && fp16.value_or(false))
    k.refuse("bf16",
             "and fp16 are both true: at most one of fp16 and bf16 can be True "
             "(transformers' rule)");
  std::string weights = "fp32", weights_key;
  for (const char* key : {"dtype", "torch_dtype"})
    if (const auto d = k.text(key)) {
      weights_key = key;
      if (*d == "bfloat16")
        weights = "bf16";
      else if (*d == "float16" || *d == "half")
        weights = "fp16";
      else if (*d == "auto")
        k.unmodeled(key,
                    "the checkpoint's own dtype (config.json): vramfit takes fp32 weights "
                    "under the flags; give --precision bf16 for a bf16 checkpoint");
      else if (*d != "float32" && *d != "float")
        k.refuse(key, "must be 'auto' or a torch.dtype such as 'float32' (TRL's rule), got '" +
                          shown_value(*d) + "'");
    }
  if (truth(k, "load_in_4bit").value_or(false)) weights = "fp32";  // --qlora holds the base
  if (s == sharding::none && weights == "fp16" && fp16.value_or(false))
    k.refuse("fp16",
             "over float16 weights: torch's GradScaler refuses (Attempting to unscale "
             "FP16 gradients)");
  const std::string p = precision(bf16, fp16.value_or(false), s, weights);
  const std::string flag_key = fp16.value_or(false) ? "fp16"
                               : bf16_given         ? "bf16"
                               : r.trl              ? "(default: bf16 true unless fp16, TRL)"
                                                    : "(default: bf16 false, fp16 false)";
  k.set("--precision", p,
        s == sharding::none && weights != "fp32" ? std::string_view(weights_key)
                                                 : std::string_view(flag_key));
  for (const char* key :
       {"bf16_full_eval", "fp16_full_eval", "per_device_eval_batch_size", "eval_accumulation_steps",
        "prediction_loss_only", "eval_do_concat_batches", "batch_eval_metrics"})
    k.unmodeled(key, "evaluation's memory, not the training step's");
}

/// The batch, the length and packing (TrainingArguments per_device_train_batch_size default 8;
/// TRL SFTConfig max_length 1024, packing, padding_free; sft_trainer.py: padding-free when
/// packing with bfd or bfd_split, the batch flattened into one row), and the attention
/// (ModelConfig attn_implementation; TRL's collator passes a padding mask unless padding-free).
inline void batch(launcher_keys& k, const run& r) {
  const auto micro = k.integer("per_device_train_batch_size", 1, largest_count);
  const std::int64_t b = micro.value_or(8);
  if (const auto ga = k.integer("gradient_accumulation_steps", 1, largest_count))
    k.set("--grad-accum", std::to_string(*ga), "gradient_accumulation_steps");
  if (const auto dp = k.integer("num_processes", 1, largest_count))  // trl's launch key
    k.set("--dp", std::to_string(*dp), "num_processes");
  const auto legacy = k.integer("max_seq_length", 1, largest_count);
  const auto given = k.integer("max_length", 1, largest_count);
  const std::int64_t length = legacy.value_or(given.value_or(1024));
  const std::string length_key = legacy  ? "max_seq_length"
                                 : given ? "max_length"
                                         : "(default: max_length 1024, TRL)";
  const bool packing = k.boolean("packing").value_or(false);
  const std::string strategy =
      k.choice("packing_strategy", {"bfd", "bfd_split", "wrapped"}).value_or("bfd");
  const bool padding_free = k.boolean("padding_free").value_or(false);
  if (padding_free && !packing)
    k.refuse("padding_free",
             "without packing does not enforce max_length: enable packing "
             "(TRL's rule)");
  const bool flat = padding_free || (packing && strategy != "wrapped");
  std::int64_t rounded = length;
  if (const auto m = k.integer("pad_to_multiple_of", 1, largest_count))
    rounded = (length + *m - 1) / *m * *m;
  const char* flat_key = padding_free ? "padding_free" : "packing";
  if (flat) {
    k.set("--micro-batch", "1", flat_key);
    k.set("--seq-len", std::to_string(b * rounded), flat_key);
  } else {
    k.set("--micro-batch", std::to_string(b),
          micro ? "per_device_train_batch_size" : "(default: per_device_train_batch_size 8)");
    if (r.trl) k.set("--seq-len", std::to_string(rounded), length_key);
  }
  const auto attention = k.text("attn_implementation");
  if (attention && (attention->starts_with("flash_attention") ||
                    attention->starts_with("kernels-community/flash-attn") ||
                    attention->starts_with("kernels-community/vllm-flash-attn")))
    k.set("--attention", "flash", "attn_implementation");
  else if (attention && *attention == "eager")
    k.set("--attention", "eager", "attn_implementation");
  else if (attention && *attention != "sdpa")
    k.unmodeled("attn_implementation",
                "an attention vramfit does not model: it takes "
                "--attention's value");
  else if (r.trl)
    k.set("--attention", flat ? "flash" : "sdpa",
          attention ? "attn_implementation" : "(default: attn_implementation sdpa)");
}

/// gradient_checkpointing (TRL's default True, SFTConfig since v0.22) and its use_reentrant
/// (False by default since transformers 5, #43203, and TRL sets it for older ones:
/// sft_trainer.py), or FSDP's own activation_checkpointing; trainer.py refuses both.
inline void recompute(launcher_keys& k, const run& r) {
  const bool fsdp_ac =
      r.fsdp && (truth(k, "fsdp_config.activation_checkpointing").value_or(false) ||
                 truth(k, "fsdp_config.fsdp_activation_checkpointing").value_or(false));
  const auto gc = k.boolean("gradient_checkpointing");
  const bool on = gc.value_or(r.trl && r.at != era::trl_0_19);
  if (fsdp_ac && on)
    k.refuse("fsdp_config.activation_checkpointing",
             "and gradient_checkpointing can't be set to True simultaneously (transformers' "
             "rule; TRL's gradient_checkpointing defaults to true)");
  if (fsdp_ac) {  // accelerate wraps each layer with a non-reentrant checkpoint_wrapper
    k.set("--recompute", "full", "fsdp_config.activation_checkpointing");
    k.set("--non-reentrant", "true", "fsdp_config.activation_checkpointing");
  }
  if (!on) {
    k.no_effect({"gradient_checkpointing_kwargs"});
    return;
  }
  k.set("--recompute", "full",
        gc ? "gradient_checkpointing" : "(default: gradient_checkpointing true, TRL)");
  const auto reentrant = k.boolean("gradient_checkpointing_kwargs.use_reentrant");
  if (!reentrant.value_or(false))
    k.set("--non-reentrant", "true",
          reentrant ? "gradient_checkpointing_kwargs.use_reentrant"
                    : "(default: gradient_checkpointing_kwargs.use_reentrant false)");
}

/// optim as trainer_optimizer.py get_optimizer_cls_and_kwargs builds it (choices.hpp
/// hf_optimizers); its default adamw_torch_fused with torch >= 2.8 (training_args.py
/// default_optim), adamw_torch in the legacy eras (the preset's).
inline void optimizer(launcher_keys& k, const run& r) {
  k.unmodeled("optim_args", "the optimizer's own arguments (GaLore rank, torchao block size)");
  k.unmodeled("optim_target_modules", "GaLore/APOLLO low-rank states");
  const auto optim = k.text("optim");
  if (!optim) {
    if (r.at == era::current)
      k.set("--optimizer", "adamw-fused", "(default: optim adamw_torch_fused, torch >= 2.8)");
    return;
  }
  for (const alias& a : hf_optimizers)
    if (same_name(*optim, a.name)) {
      if (a.choice)
        k.set("--optimizer", a.choice, "optim");
      else
        k.unmodeled("optim", std::string(a.why) + ": vramfit takes --optimizer's value");
      return;
    }
  for (const char* same : {"sgd", "adagrad", "rmsprop", "adafactor"})  // _get_sgd, ...
    if (same_name(*optim, same)) return k.set("--optimizer", same, "optim");
  k.refuse("optim", "'" + shown_value(*optim) + "' is not a valid OptimizerNames");
}

/// The loss: TRL's loss_type (chunked_nll by default since v1.7, nll before; sft_config.py) or
/// Liger's fused linear cross-entropy (use_liger_kernel); a plain Trainer's is the model's.
inline void loss(launcher_keys& k, const run& r) {
  const bool liger = k.boolean("use_liger_kernel").value_or(false);
  const auto type =
      liger ? k.text("loss_type") : k.choice("loss_type", {"nll", "dft", "chunked_nll"});
  if (liger && type == "chunked_nll")
    k.refuse("loss_type", "chunked_nll is not compatible with use_liger_kernel (TRL's rule)");
  if (liger) {
    k.set("--loss", "fused-chunked", "use_liger_kernel");
    k.unmodeled("use_liger_kernel", "Liger's RMSNorm, SwiGLU and RoPE kernels save less");
  } else if (type && *type != "chunked_nll") {
    k.set("--loss", "fp32-upcast", "loss_type");  // ForCausalLMLoss upcasts the logits
  } else if (type || (r.trl && r.at == era::current)) {
    k.set("--loss", "fused-chunked", type ? "loss_type" : "(default: loss_type chunked_nll, TRL)");
  }
  k.unmodeled("liger_kernel_config", "which Liger kernels run");
}

/// LoRA and QLoRA: ModelConfig use_peft, lora_r (16), lora_target_modules (peft's per-model
/// mapping when absent, as --lora-targets' default), load_in_4bit
/// (trl/trainer/utils.py get_peft_config, get_quantization_config). The adapters are fp32
/// (PEFT autocast_adapter_dtype, and TRL <= 0.25's kbit preparation), or bf16 over a 4-bit
/// base since TRL 0.26 (sft_trainer.py).
inline void peft(launcher_keys& k, const run& r) {
  const bool use = k.boolean("use_peft").value_or(false);
  const bool q4 = truth(k, "load_in_4bit").value_or(false);
  const bool q8 = k.boolean("load_in_8bit").value_or(false);
  if (q4 && q8)
    k.refuse("load_in_8bit",
             "and load_in_4bit: you can't use 8 bit and 4 bit precision at the "
             "same time (TRL's rule)");
  if ((q4 || q8) && !use)
    k.refuse(q4 ? "load_in_4bit" : "load_in_8bit",
             "without use_peft: you cannot perform fine-tuning on purely quantized models "
             "(transformers' rule)");
  if (q8) k.unmodeled("load_in_8bit", "an int8 base: vramfit's LoRA base is 16-bit or NF4");
  const char* lora[] = {"lora_r",
                        "lora_alpha",
                        "lora_dropout",
                        "lora_target_modules",
                        "lora_modules_to_save",
                        "lora_task_type",
                        "use_rslora",
                        "use_dora",
                        "lora_target_parameters",
                        "use_bnb_nested_quant",
                        "bnb_4bit_quant_type",
                        "bnb_4bit_quant_storage"};
  if (!use) {
    for (const char* key : lora) k.no_effect({key});  // get_peft_config returns None
    return;
  }
  const auto rank = k.integer("lora_r", 1, largest_count);
  k.set("--lora-rank", std::to_string(rank.value_or(16)), rank ? "lora_r" : "(default: lora_r 16)");
  const nlohmann::json* targets = k.find("lora_target_modules");
  std::string list;
  if (targets && targets->is_string()) {
    list = targets->get<std::string>();
  } else if (targets && targets->is_array() && !targets->empty()) {
    for (const nlohmann::json& t : *targets) {
      if (!t.is_string())
        k.refuse("lora_target_modules", "must list module names, got " + detail::shown(t));
      list += (list.empty() ? "" : ",") + t.get<std::string>();
    }
  } else if (targets) {
    k.refuse("lora_target_modules",
             "must be a module name or a list of them, got " + detail::shown(*targets));
  }
  if (targets) k.set("--lora-targets", list, "lora_target_modules");  // else peft's per model
  if (q4) k.set("--qlora", "true", "load_in_4bit");
  k.set("--lora-dtype", q4 && r.at == era::current ? "bf16" : "fp32",
        q4 ? "load_in_4bit" : "use_peft");
  if (q4) {
    if (!k.boolean("use_bnb_nested_quant").value_or(true))
      k.unmodeled("use_bnb_nested_quant",
                  "NF4 without double quantization: fp32 absmax per 64 "
                  "weights, about 0.37 bit per weight more than vramfit's");
    if (k.choice("bnb_4bit_quant_type", {"nf4", "fp4"}) == "fp4")
      k.unmodeled("bnb_4bit_quant_type", "FP4 instead of NF4 (same size)");
  }
  k.unmodeled("bnb_4bit_quant_storage", "the 4-bit weights' storage dtype");
  if (k.number("lora_dropout").value_or(0) > 0)
    k.unmodeled("lora_dropout",
                "PEFT keeps a dropout mask and a dropped copy of each adapted "
                "linear's input");
  if (k.boolean("use_dora").value_or(false))
    k.unmodeled("use_dora", "DoRA's magnitude vector and its extra activations");
  k.unmodeled("lora_modules_to_save", "trained full copies of these modules (try --trainable)");
  k.unmodeled("lora_target_parameters", "LoRA on parameters (MoE experts)");
  k.no_effect({"lora_alpha", "use_rslora", "lora_task_type"});  // a scale, not a size
}

/// Keys vramfit does not model, with what they change.
inline void unmodeled(launcher_keys& k) {
  for (const char* key : {"torch_compile", "torch_compile_backend", "torch_compile_mode"})
    k.unmodeled(key, "torch.compile changes what is saved (inductor) and may add CUDA graph pools");
  if (k.boolean("use_cpu").value_or(false)) k.refuse("use_cpu", "is true: not a GPU run");
  k.unmodeled("torch_empty_cache_steps",
              "empties the cache between steps: reserved memory, "
              "not the step's peak");
  if (k.boolean("auto_find_batch_size").value_or(false))
    k.unmodeled("auto_find_batch_size",
                "halves the batch on out-of-memory at run time: vramfit "
                "estimates per_device_train_batch_size");
  if (k.number("label_smoothing_factor").value_or(0) > 0)
    k.unmodeled("label_smoothing_factor", "LabelSmoother's log_softmax over all the logits");
  k.unmodeled("neftune_noise_alpha", "a noise tensor on the embeddings' output");
  k.unmodeled("ddp_bucket_cap_mb", "DDP's gradient buckets");
  k.unmodeled("accelerator_config", "accelerate's batch splitting and accumulation");
  if (k.boolean("activation_offloading").value_or(false))
    k.set("--activation-offload", "cpu", "activation_offloading");  // TRL: torchtune's
  for (const char* key : {"completion_only_loss", "assistant_only_loss"})
    if (k.boolean(key).value_or(false))
      k.unmodeled(key, "masked tokens skip chunked_nll's head: less loss memory");
  k.unmodeled("router_aux_loss_coef", "the router logits kept for the auxiliary loss");
  k.unmodeled("model_init_kwargs",
              "trl sft overwrites it; vramfit reads dtype and "
              "attn_implementation as top-level keys");
  k.unmodeled("accelerate_config",
              "accelerate's config, which --from cannot follow (one --from "
              "per line): run vramfit train --from accelerate FILE with "
              "the options above");
  k.unmodeled("debug", "transformers' debug hooks");
  k.unmodeled("parallelism_config", "give the accelerate config's parallelism_config");
  if (const auto conf = k.text("env.PYTORCH_CUDA_ALLOC_CONF"))  // TrlParser exports env
    k.set("--alloc-conf", *conf, "env.PYTORCH_CUDA_ALLOC_CONF");
}

/// Keys that change no GPU memory of a step (training_args.py, TRL sft_config.py,
/// model_config.py, scripts/utils.py ScriptArguments, alignment-handbook configs.py).
inline void no_effect(launcher_keys& k) {
  k.no_effect({"output_dir",
               "overwrite_output_dir",
               "logging_dir",
               "run_name",
               "project",
               "trackio_space_id",
               "push_to_hub",
               "hub_token",
               "hub_private_repo",
               "hub_model_id",
               "hub_strategy",
               "hub_always_push",
               "hub_revision",
               "resume_from_checkpoint",
               "learning_rate",
               "lr_scheduler_type",
               "lr_scheduler_kwargs",
               "warmup_steps",
               "warmup_ratio",
               "weight_decay",
               "adam_beta1",
               "adam_beta2",
               "adam_epsilon",
               "max_grad_norm",
               "num_train_epochs",
               "max_steps",
               "logging_strategy",
               "logging_steps",
               "logging_first_step",
               "log_on_each_node",
               "logging_nan_inf_filter",
               "log_level",
               "log_level_replica",
               "disable_tqdm",
               "report_to",
               "include_num_input_tokens_seen",
               "skip_memory_metrics",
               "average_tokens_across_devices",
               "include_for_metrics",
               "eval_strategy",
               "evaluation_strategy",
               "eval_steps",
               "eval_delay",
               "eval_on_start",
               "do_train",
               "do_eval",
               "do_predict",
               "eval_use_gather_object",
               "eval_packing",
               "save_strategy",
               "save_steps",
               "save_total_limit",
               "save_on_each_node",
               "save_only_model",
               "save_safetensors",
               "enable_jit_checkpoint",
               "load_best_model_at_end",
               "metric_for_best_model",
               "greater_is_better",
               "restore_callback_states_from_checkpoint",
               "ignore_data_skip",
               "seed",
               "data_seed",
               "full_determinism",
               "dataloader_drop_last",
               "dataloader_num_workers",
               "dataloader_pin_memory",
               "dataloader_persistent_workers",
               "dataloader_prefetch_factor",
               "remove_unused_columns",
               "label_names",
               "train_sampling_strategy",
               "length_column_name",
               "group_by_length",
               "ddp_find_unused_parameters",
               "ddp_broadcast_buffers",
               "ddp_static_graph",
               "ddp_backend",
               "ddp_timeout",
               "local_rank",
               "tf32",
               "use_cache",
               "dataset_name",
               "dataset_config",
               "dataset_train_split",
               "dataset_test_split",
               "dataset_streaming",
               "ignore_bias_buffers",
               "datasets",
               "streaming",
               "test_split_size",
               "dataset_text_field",
               "dataset_kwargs",
               "dataset_num_proc",
               "eos_token",
               "pad_token",
               "truncation_mode",
               "shuffle_dataset",
               "chat_template_path",
               "trust_remote_code",
               "chat_template",
               "dataset_mixture",
               "env"});
}

}  // namespace detail_hf_trainer

/// The options a TrainingArguments / TRL SFTConfig file sets, and its keys that change no memory
/// or are not modeled.
inline void translate_hf_trainer(launcher_keys& k) {
  namespace d = detail_hf_trainer;
  d::refuse_other_kinds(k, "hf-trainer");
  d::run r;
  // A TRL script's file: a key of SFTConfig, ModelConfig or ScriptArguments that
  // TrainingArguments lacks (trl/scripts/sft.py parses all four).
  for (const char* key :
       {"model_name_or_path", "max_length", "max_seq_length", "packing", "padding_free", "use_peft",
        "load_in_4bit", "loss_type", "dtype", "torch_dtype", "attn_implementation", "dataset_name",
        "dataset_mixture", "dataset_text_field", "completion_only_loss", "assistant_only_loss"})
    r.trl = r.trl || k.find(key);
  r.at = k.find("max_seq_length") ? d::era::trl_0_19
         : k.find("torch_dtype")  ? d::era::trl_0_26
                                  : d::era::current;
  d::model(k);
  r.fsdp = d::fsdp(k, r);
  const nlohmann::json* ds = k.find("deepspeed");
  if (ds) k.unmodeled("deepspeed", d::deepspeed_why(ds));
  d::precision(k, r, ds ? d::sharding::deepspeed : r.fsdp ? d::sharding::fsdp : d::sharding::none);
  d::batch(k, r);
  d::recompute(k, r);
  d::optimizer(k, r);
  d::loss(k, r);
  d::peft(k, r);
  d::unmodeled(k);
  d::no_effect(k);
}

namespace detail_accelerate {

/// fsdp_config (distributed_type FSDP): launch copies fsdp_config.x to --fsdp_x, the env FSDP_X
/// that FullyShardedDataParallelPlugin.__post_init__ reads (utils/dataclasses.py, launch.py).
inline void fsdp(launcher_keys& k, std::int64_t processes, std::int64_t machines,
                 std::int64_t hsdp_group) {
  const auto version = k.integer("fsdp_config.fsdp_version", 1, 2).value_or(1);
  k.set("--fsdp-version", std::to_string(version),
        k.find("fsdp_config.fsdp_version") ? "fsdp_config.fsdp_version"
                                           : "(default: fsdp_config.fsdp_version 1)");
  using detail_hf_trainer::backward_prefetch, detail_hf_trainer::truth;
  if (hsdp_group > 0) {  // parallelism_config's replicate x shard: HSDP
    k.set("--fsdp", "hybrid", "parallelism_config.parallelism_config_dp_replicate_size");
    k.set("--fsdp-group", std::to_string(hsdp_group),
          "parallelism_config.parallelism_config_dp_shard_size");
  }
  if (version == 2) {
    if (hsdp_group == 0) k.set("--fsdp", "full", "distributed_type");
    const nlohmann::json* raf = k.find("fsdp_config.fsdp_reshard_after_forward");
    if (raf && !raf->is_boolean() &&
        !(raf->is_string() && (same_name(raf->get<std::string>(), "true") ||
                               same_name(raf->get<std::string>(), "false"))))
      k.refuse("fsdp_config.fsdp_reshard_after_forward",
               "set to " + detail::shown(*raf) +
                   ": this is not supported with FSDP2, please set to a bool (accelerate's rule)");
    if (raf)
      k.set("--reshard-after-forward",
            truth(k, "fsdp_config.fsdp_reshard_after_forward").value() ? "true" : "false",
            "fsdp_config.fsdp_reshard_after_forward");
    k.unmodeled("fsdp_config.fsdp_sharding_strategy",
                "FSDP1's: FSDP2 reads "
                "fsdp_reshard_after_forward");
    // Launch always sets FSDP_FORWARD_PREFETCH, which the plugin reads with FSDP1 only: its "not
    // yet implemented in FSDP2" is raised for a forward_prefetch a script gives it, not for this.
    k.unmodeled("fsdp_config.fsdp_forward_prefetch",
                "FSDP2 ignores it: accelerate reads it with FSDP1 only (fully_shard prefetches "
                "one unit)");
    // The plugin reads FSDP_BACKWARD_PREFETCH whatever the version, then with FSDP2 warns
    // "backward_prefetch is not supported in FSDP2" and sets it to None.
    if (backward_prefetch(k, "fsdp_config.fsdp_backward_prefetch", true))
      k.unmodeled("fsdp_config.fsdp_backward_prefetch",
                  "FSDP2 ignores it: accelerate sets backward prefetch to None (fully_shard "
                  "prefetches one unit)");
  } else {
    const std::string s =
        k.choice("fsdp_config.fsdp_sharding_strategy",
                 {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"})
            .value_or("FULL_SHARD");
    const char* key = k.find("fsdp_config.fsdp_sharding_strategy")
                          ? "fsdp_config.fsdp_sharding_strategy"
                          : "(default: fsdp_config.fsdp_sharding_strategy FULL_SHARD)";
    if (hsdp_group == 0)
      k.set("--fsdp",
            s == "SHARD_GRAD_OP"  ? "grad-op"
            : s == "NO_SHARD"     ? "none"
            : s == "HYBRID_SHARD" ? "hybrid"
                                  : "full",
            key);
    if (hsdp_group == 0 && s == "HYBRID_SHARD" && machines > 1 && processes % machines == 0)
      k.set("--fsdp-group", std::to_string(processes / machines), "num_machines");
    if (s == "HYBRID_SHARD_ZERO2")
      k.unmodeled("fsdp_config.fsdp_sharding_strategy",
                  "HYBRID_SHARD_ZERO2 (parameters gathered in a node): vramfit models full "
                  "sharding");
    k.unmodeled("fsdp_config.fsdp_reshard_after_forward",
                "FSDP1 ignores it: the launcher always sets fsdp_sharding_strategy (default "
                "FULL_SHARD), which wins");
    // FSDP_BACKWARD_PREFETCH is set only when given, and the plugin's backward_prefetch is then
    // None (NO_PREFETCH); FSDP_FORWARD_PREFETCH defaults to false (launch.py, utils/launch.py
    // prepare_multi_gpu_env, utils/dataclasses.py FullyShardedDataParallelPlugin.__post_init__).
    const char* prefetch_key = "fsdp_config.fsdp_backward_prefetch";
    const auto prefetch = backward_prefetch(k, prefetch_key, true);
    const bool forward = truth(k, "fsdp_config.fsdp_forward_prefetch").value_or(false);
    if (hsdp_group == 0 && s == "NO_SHARD") {  // all-gathers nothing
      k.no_effect({prefetch_key, "fsdp_config.fsdp_forward_prefetch"});
    } else {
      k.set("--backward-prefetch", prefetch.value_or("none"),
            prefetch ? prefetch_key : "(default: fsdp_config.fsdp_backward_prefetch NO_PREFETCH)");
      if (forward) k.set("--forward-prefetch", "true", "fsdp_config.fsdp_forward_prefetch");
    }
  }
  if (truth(k, "fsdp_config.fsdp_offload_params").value_or(false))
    k.set("--offload", "all", "fsdp_config.fsdp_offload_params");
  if (truth(k, "fsdp_config.fsdp_activation_checkpointing").value_or(false)) {
    k.set("--recompute", "full", "fsdp_config.fsdp_activation_checkpointing");
    k.set("--non-reentrant", "true", "fsdp_config.fsdp_activation_checkpointing");
  }
  const auto policy = k.text("fsdp_config.fsdp_auto_wrap_policy");
  if (policy && *policy != "TRANSFORMER_BASED_WRAP")
    k.unmodeled("fsdp_config.fsdp_auto_wrap_policy",
                "units other than the decoder layers (vramfit gathers one layer at a time)");
  k.unmodeled("fsdp_config.fsdp_min_num_params", "size-based units (SIZE_BASED_WRAP)");
  // Not passed on by launch (no FSDP_LIMIT_ALL_GATHERS in utils/launch.py prepare_multi_gpu_env):
  // the plugin keeps limit_all_gathers=True, vramfit's default.
  k.unmodeled("fsdp_config.fsdp_limit_all_gathers",
              "accelerate launch does not pass it on: the plugin keeps limit_all_gathers=True");
  k.unmodeled("fsdp_config.fsdp_backward_prefetch_policy",
              "accelerate < 1.0's name for fsdp_backward_prefetch, dropped in accelerate 1.0 "
              "(#3098): launch ignores it; rename it fsdp_backward_prefetch");
  k.unmodeled("fsdp_config.fsdp_ignored_modules", "modules left unsharded");
  if (truth(k, "fsdp_config.fsdp_cpu_ram_efficient_loading").value_or(false) &&
      !truth(k, "fsdp_config.fsdp_sync_module_states").value_or(true))
    k.refuse("fsdp_config.fsdp_sync_module_states",
             "must be true with fsdp_cpu_ram_efficient_loading (accelerate's rule)");
  // Granularity as modeled (the decoder layers), loading and saving.
  k.no_effect({"fsdp_config.fsdp_transformer_layer_cls_to_wrap", "fsdp_config.fsdp_use_orig_params",
               "fsdp_config.fsdp_cpu_ram_efficient_loading", "fsdp_config.fsdp_sync_module_states",
               "fsdp_config.fsdp_state_dict_type"});
}

/// deepspeed_config (distributed_type DEEPSPEED): DeepSpeedPlugin.__post_init__'s ZeRO stage
/// (2 when absent), offload devices and accumulation; a deepspeed_config_file replaces them
/// (DeepSpeedPlugin._deepspeed_config_checks refuses both).
inline void deepspeed(launcher_keys& k) {
  if (const nlohmann::json* file = k.find("deepspeed_config.deepspeed_config_file")) {
    for (const char* key :
         {"deepspeed_config.zero_stage", "deepspeed_config.offload_optimizer_device",
          "deepspeed_config.offload_param_device", "deepspeed_config.gradient_accumulation_steps",
          "deepspeed_config.gradient_clipping", "deepspeed_config.zero3_save_16bit_model"})
      if (k.find(key))
        k.refuse(key,
                 "is ignored when using deepspeed_config_file: specify it in the DeepSpeed "
                 "config file (accelerate's rule)");
    k.unmodeled("deepspeed_config.deepspeed_config_file", detail_hf_trainer::deepspeed_why(file));
    return;
  }
  const auto stage = k.integer("deepspeed_config.zero_stage", 0, 3);
  k.set("--zero", std::to_string(stage.value_or(2)),
        stage ? "deepspeed_config.zero_stage" : "(default: deepspeed_config.zero_stage 2)");
  k.set("--zero-impl", "deepspeed", "distributed_type");
  using detail_deepspeed::offload_device;  // "" for none
  const std::string optimizer = offload_device(k, "deepspeed_config.offload_optimizer_device");
  const std::string params = offload_device(k, "deepspeed_config.offload_param_device");
  if (!optimizer.empty()) {
    k.set("--offload", !params.empty() && stage == 3 ? "all" : "optimizer",
          "deepspeed_config.offload_optimizer_device");
    k.set("--offload-to", optimizer, "deepspeed_config.offload_optimizer_device");
  } else if (!params.empty()) {
    k.unmodeled("deepspeed_config.offload_param_device",
                "the parameters offloaded without the optimizer: vramfit offloads them only "
                "with it (--offload all)");
  }
  const nlohmann::json* ga = k.find("deepspeed_config.gradient_accumulation_steps");
  if (ga && !(ga->is_string() && ga->get<std::string>() == "auto"))
    k.set("--grad-accum",
          std::to_string(
              k.integer("deepspeed_config.gradient_accumulation_steps", 1, largest_count).value()),
          "deepspeed_config.gradient_accumulation_steps");
  k.unmodeled("deepspeed_config.deepspeed_moe_layer_cls_names", "ZeRO-3 leaf modules");
  k.no_effect(
      {"deepspeed_config.gradient_clipping", "deepspeed_config.zero3_init_flag",
       "deepspeed_config.zero3_save_16bit_model", "deepspeed_config.deepspeed_multinode_launcher",
       "deepspeed_config.deepspeed_hostfile", "deepspeed_config.deepspeed_inclusion_filter",
       "deepspeed_config.deepspeed_exclusion_filter",
       "deepspeed_config.offload_optimizer_nvme_path", "deepspeed_config.offload_param_nvme_path"});
}

/// mixed_precision (launch.py; YAML's unquoted no is false): autocast over the script's fp32
/// model, FSDP's fp32 upcast, or DeepSpeed's bf16/fp16 engine (set_mixed_precision: fp8 is bf16).
inline void precision(launcher_keys& k, bool fsdp, bool deepspeed) {
  namespace h = detail_hf_trainer;
  const nlohmann::json* mp = k.find("mixed_precision");
  const bool yaml_no = mp && mp->is_boolean() && !mp->get<bool>();
  const std::string m =
      yaml_no ? "no" : k.choice("mixed_precision", {"no", "fp16", "bf16", "fp8"}).value_or("no");
  const char* mp_key = mp ? "mixed_precision" : "(default: mixed_precision no)";
  if (m == "fp8" && !deepspeed) {
    k.set("--precision", "fp8", mp_key);
  } else {
    k.set("--precision",
          h::precision(m == "bf16" || m == "fp8", m == "fp16",
                       deepspeed ? h::sharding::deepspeed
                       : fsdp    ? h::sharding::fsdp
                                 : h::sharding::none,
                       "fp32"),
          mp_key);
    if (deepspeed && m == "fp16") k.set("--grad-dtype", "fp16", mp_key);
  }
}

}  // namespace detail_accelerate

/// The options accelerate's config YAML sets (commands/config/config_args.py ClusterConfig,
/// as launch.py passes it on), and its keys that change no memory or are not modeled.
inline void translate_accelerate(launcher_keys& k) {
  namespace d = detail_accelerate;
  namespace h = detail_hf_trainer;
  h::refuse_other_kinds(k, "accelerate");
  const auto type = k.text("distributed_type");
  if (!type)
    k.refuse("distributed_type", "must be specified in the config file (accelerate's rule)");
  if (h::truth(k, "use_cpu").value_or(false)) k.refuse("use_cpu", "is true: not a GPU run");
  const bool fsdp = *type == "FSDP", deepspeed = *type == "DEEPSPEED";
  if (*type == "MEGATRON_LM")
    k.refuse("distributed_type",
             "MEGATRON_LM: give vramfit train --framework megatron with "
             "--tp, --pp and --dp");
  if (*type != "NO" && *type != "MULTI_GPU" && !fsdp && !deepspeed)
    k.refuse("distributed_type", "'" + shown_value(*type) +
                                     "' is not a CUDA GPU run: vramfit reads NO, MULTI_GPU, FSDP "
                                     "and DEEPSPEED");
  // num_processes: the total processes (launch.py); -1 means "pass --num_processes".
  const auto processes = k.integer("num_processes", -1, largest_count);
  const auto machines = k.integer("num_machines", 1, largest_count).value_or(1);
  std::int64_t per_replica = 1;  // parallelism_config: tp x cp share the processes
  for (const char* name : {"tp", "cp"}) {
    const std::string key = std::string("parallelism_config.parallelism_config_") + name + "_size";
    if (const auto n = k.integer(key, 1, largest_count)) {
      per_replica *= *n;
      if (*n > 1) k.set(std::string("--") + name, std::to_string(*n), key);
    }
  }
  const auto replicate =
      k.integer("parallelism_config.parallelism_config_dp_replicate_size", 1, largest_count);
  const auto shard =
      k.integer("parallelism_config.parallelism_config_dp_shard_size", 1, largest_count);
  if (processes && *processes > 0 && (replicate || shard || per_replica > 1)) {
    const std::int64_t total = replicate.value_or(1) * shard.value_or(1) * per_replica;
    if ((replicate || shard) ? total != *processes : *processes % per_replica != 0)
      k.refuse("num_processes", "does not match ParallelismConfig total_size " +
                                    std::to_string(total) + " (accelerate's rule)");
  }
  if (processes && *processes > 0)
    k.set("--dp", std::to_string(*type == "NO" ? 1 : *processes / per_replica), "num_processes");
  else
    k.unmodeled("num_processes", "-1: give --dp (accelerate: pass --num_processes)");
  if (fsdp) {
    d::fsdp(k, processes.value_or(1), machines,
            replicate.value_or(1) > 1 && shard.value_or(1) > 1 ? *shard : 0);
  } else {
    k.no_effect({"fsdp_config"});
  }
  if (deepspeed)
    d::deepspeed(k);
  else
    k.no_effect({"deepspeed_config"});
  if (const auto sp = k.integer("parallelism_config.parallelism_config_sp_size", 1, largest_count);
      sp && *sp > 1)
    k.unmodeled("parallelism_config.parallelism_config_sp_size",
                "DeepSpeed ALST/Ulysses sequence parallelism (vramfit's --sp is Megatron's)");
  d::precision(k, fsdp, deepspeed);
  k.unmodeled("fp8_config", "FP8 recipe details (with mixed_precision fp8)");
  k.unmodeled("dynamo_config", "torch.compile changes what is saved and may add CUDA graph pools");
  k.no_effect({"compute_environment",
               "machine_rank",
               "main_process_ip",
               "main_process_port",
               "rdzv_backend",
               "same_network",
               "main_training_function",
               "gpu_ids",
               "enable_cpu_affinity",
               "debug",
               "downcast_bf16",
               "tpu_env",
               "tpu_use_cluster",
               "tpu_use_sudo",
               "tpu_name",
               "tpu_zone",
               "commands",
               "command_file",
               "mpirun_config",
               "ipex_config",
               "megatron_lm_config"});
}

}  // namespace vramfit::cli
