// SPDX-License-Identifier: MIT
// --from torchtitan job.toml: torchtitan's TOML job file (the schema of torchtitan v0.2.2's
// torchtitan/config/job_config.py JobConfig, the last release that reads TOML) as vramfit's
// options, each key as torchtitan's train.py and its parallelize functions use it
// (docs/from.md#--from-torchtitan). Line numbers are v0.2.2's (commit 73a0e69).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inputs.hpp"
#include "launcher_file.hpp"

namespace vramfit::cli {

namespace detail_torchtitan {

/// A flavor of torchtitan's model registry as vramfit knows it.
struct flavor {
  std::string_view name, flavor, model;  ///< model.name, model.flavor, vramfit's --model
  std::int64_t layers;                   ///< n_layers, for the pipeline split
  bool sdpa = true;                      ///< attn_type "sdpa" (else flex or varlen)
};

/// The flavors whose shapes are a vramfit preset or a Hugging Face model: train_spec.model_args
/// [flavor] (train.py L138-151) in models/llama3/__init__.py L51-99, qwen3/__init__.py
/// L46-190, deepseek_v3/__init__.py L78-155 (flex attention; "16B" is DeepSeek-V2-Lite's
/// shape, whatever hf_assets_path names), gpt_oss/__init__.py L47-76.
inline constexpr flavor flavors[] = {
    {"llama3", "8B", "llama-3-8b", 32},
    {"llama3", "8B_flex", "llama-3-8b", 32, false},
    {"llama3", "8B_varlen", "llama-3-8b", 32, false},
    {"llama3", "70B", "llama-3-70b", 80},
    {"llama3", "405B", "llama-3.1-405b", 126},
    {"qwen3", "0.6B", "qwen3-0.6b", 28},
    {"qwen3", "1.7B", "Qwen/Qwen3-1.7B", 28},
    {"qwen3", "4B", "Qwen/Qwen3-4B", 36},
    {"qwen3", "8B", "qwen3-8b", 36},
    {"qwen3", "14B", "Qwen/Qwen3-14B", 40},
    {"qwen3", "32B", "Qwen/Qwen3-32B", 64},
    {"qwen3", "30B-A3B", "qwen3-30b-a3b", 48},
    {"qwen3", "235B-A22B", "Qwen/Qwen3-235B-A22B", 94},
    {"deepseek_v3", "16B", "deepseek-ai/DeepSeek-V2-Lite", 27, false},
    {"deepseek_v3", "236B", "deepseek-v2", 60, false},
    {"deepseek_v3", "671B", "deepseek-v3", 61, false},
    {"gpt_oss", "20b", "gpt-oss-20b", 24},
    {"gpt_oss", "120b", "gpt-oss-120b", 36},
};

/// JobConfig's sections (config/job_config.py JobConfig L1000-1024).
inline constexpr std::string_view sections[] = {"job",
                                                "profiling",
                                                "metrics",
                                                "model",
                                                "optimizer",
                                                "lr_scheduler",
                                                "training",
                                                "parallelism",
                                                "checkpoint",
                                                "activation_checkpoint",
                                                "compile",
                                                "quantize",
                                                "comm",
                                                "memory_estimation",
                                                "fault_tolerance",
                                                "experimental",
                                                "validation",
                                                "debug"};

/// The resolved degrees (distributed/parallel_dims.py ParallelDims._validate L35-59); shard is
/// -1 while it is "the GPUs left", which the file does not hold.
struct degrees {
  std::int64_t replicate = 1, shard = -1, context = 1, tensor = 1, pipeline = 1, expert = 1;
  /// FSDP2 is applied when shard > 1 or context > 1 (parallel_dims.py fsdp_enabled); a shard
  /// of -1 is taken as more than one GPU.
  [[nodiscard]] bool fsdp() const { return shard != 1 || context > 1; }
};

/// A list[str] field: TOML arrays only (a string would be iterated per character).
inline std::vector<std::string> strings(launcher_keys& k, std::string_view key) {
  std::vector<std::string> list;
  const nlohmann::json* v = k.find(key);
  if (!v) return list;
  if (!v->is_array()) k.refuse(key, "must be an array of text, got " + detail::shown(*v));
  for (const nlohmann::json& s : *v) {
    if (!s.is_string()) k.refuse(key, "must be an array of text, got " + detail::shown(*v));
    list.push_back(s.get<std::string>());
  }
  return list;
}

inline bool holds(const std::vector<std::string>& list, std::string_view s) {
  for (const std::string& x : list)
    if (x == s) return true;
  return false;
}

/// The file's sections: config/manager.py _dict_to_dataclass refuses any JobConfig lacks
/// ("Invalid field names in ... data"), unless job.custom_config_module merges a subclass.
inline void check_sections(const launcher_keys& k, const nlohmann::json& document) {
  const auto names = [&document](const char* section, const char* key) {
    const auto it = document.find(section);
    return it != document.end() && it->is_object() && it->contains(key);
  };  // experimental.custom_args_module: its deprecated alias
  const bool custom =
      names("job", "custom_config_module") || names("experimental", "custom_args_module");
  bool known = false;
  for (const auto& [name, value] : document.items()) {
    bool listed = false;
    for (const std::string_view s : sections) listed = listed || s == name;
    if (!value.is_object())
      k.refuse(name,
               "is not a section of torchtitan's JobConfig ([job], [model], [training], "
               "[parallelism], ...): is this a torchtitan job file?");
    if (!listed && !custom)
      k.refuse(name,
               "is not a section of torchtitan's JobConfig: torchtitan refuses it "
               "(\"Invalid field names\")");
    known = known || listed;
  }
  if (!known)
    k.refuse("",
             "holds no section of torchtitan's JobConfig ([job], [model], [training], "
             "[parallelism], ...): not a torchtitan job file");
}

/// model.name and model.flavor as a vramfit --model (train.py L138-151: the shape is
/// train_spec.model_args[flavor], never hf_assets_path's); the flavor, or nothing.
inline const flavor* model(launcher_keys& k) {
  const std::string name = k.text("model.name").value_or("llama3");  // job_config.py L99-105
  const std::string kind = k.text("model.flavor").value_or("debugmodel");
  const std::string named = "'" + shown_value(name) + "' flavor '" + shown_value(kind) + "'";
  // models/llama4: Llama 4 Scout and Maverick, a model_type vramfit's hf_config does not read.
  if (name == "llama4")
    k.refuse("model.name", "llama4 (Llama 4, flavor '" + shown_value(kind) +
                               "') is not a model vramfit can read (model_type 'llama4')");
  if (name == "flux")  // models/flux: a diffusion model
    k.refuse("model.name", "flux is a diffusion model: vramfit trains language models");
  k.no_effect({"model.hf_assets_path", "model.tokenizer_path", "model.print_after_conversion"});
  const std::string spec = name == "llama3_ft" ? "llama3" : name;  // llama3's args, fault-tolerant
  for (const flavor& f : flavors)
    if (f.name == spec && f.flavor == kind) {
      k.set("--model", std::string(f.model), "model.flavor");
      return &f;
    }
  k.unmodeled(k.find("model.flavor") ? "model.flavor" : "model.name",
              "torchtitan's " + named +
                  " has no vramfit preset: give --model (a preset, a Hugging Face id or a "
                  "config.json of the same shape)");
  return nullptr;
}

/// model.converters and their [quantize.*] sections: torchao's float8 and MX linears and
/// grouped GEMMs (protocols/model_converter.py L62; components/quantization/float8.py, mx.py).
inline void converters(launcher_keys& k) {
  const std::vector<std::string> names = strings(k, "model.converters");
  for (const std::string& c : names)
    if (c != "quantize.linear.float8" && c != "quantize.grouped_mm.float8" &&
        c != "quantize.linear.mx" && c != "quantize.grouped_mm.mx" && c != "float8" && c != "mx")
      k.refuse("model.converters",
               "names no registered converter: '" + shown_value(c) +
                   "' (torchtitan raises KeyError; known: quantize.linear.float8, "
                   "quantize.grouped_mm.float8, quantize.linear.mx, quantize.grouped_mm.mx)");
  if (holds(names, "float8") || holds(names, "mx"))
    k.unmodeled("model.converters",
                "\"float8\"/\"mx\" are torchtitan v0.1's names (v0.2 raises KeyError: "
                "quantize.linear.float8, quantize.linear.mx); fp8/MX linears not modeled");
  else
    k.unmodeled("model.converters",
                "torchao's fp8/MX casts (saved for backward instead of bf16, fp8 all-gather if "
                "enabled) are not modeled: vramfit's --precision fp8 is Transformer Engine's");
  for (const char* section : {"quantize.linear.float8", "quantize.grouped_mm.float8",
                              "quantize.linear.mx", "quantize.grouped_mm.mx"}) {
    const std::string_view old = std::string_view(section).ends_with("linear.float8") ? "float8"
                                 : std::string_view(section).ends_with("linear.mx")   ? "mx"
                                                                                      : "";
    if (holds(names, section) || (!old.empty() && holds(names, old)))
      k.unmodeled(section, "its converter is in model.converters: not modeled");
    else
      k.no_effect({section});  // inert without its converter
  }
}

/// The degrees, as parallel_dims.py _validate checks them.
inline degrees degrees_of(launcher_keys& k) {
  const std::int64_t most = largest_count;
  degrees d;
  // job_config.py Parallelism L313-472; "Parallelism degree should be >= 1, except for dp_shard"
  d.replicate = k.integer("parallelism.data_parallel_replicate_degree", 1, most).value_or(1);
  d.shard = k.integer("parallelism.data_parallel_shard_degree", -1, most).value_or(-1);
  if (d.shard == 0)
    k.refuse("parallelism.data_parallel_shard_degree",
             "must be -1 or >= 1, got 0 (torchtitan: \"dp_shard must -1 or >=1.\")");
  d.context = k.integer("parallelism.context_parallel_degree", 1, most).value_or(1);
  d.tensor = k.integer("parallelism.tensor_parallel_degree", 1, most).value_or(1);
  d.pipeline = k.integer("parallelism.pipeline_parallel_degree", 1, most).value_or(1);
  d.expert = k.integer("parallelism.expert_parallel_degree", 1, most).value_or(1);
  return d;
}

/// The data-parallel layout (models/llama3/infra/parallelize.py L125-156, apply_fsdp
/// L313-355): FSDP2 per block, HSDP with a replicate degree, DDP without sharding.
inline void data_parallel(launcher_keys& k, const degrees& d) {
  const char* shard = "parallelism.data_parallel_shard_degree";
  const char* policy_key = "parallelism.fsdp_reshard_after_forward";
  if (d.shard > 0) {
    k.set("--dp", std::to_string(d.replicate * d.shard), shard);
  } else {
    k.unmodeled(shard,
                "-1 is the GPUs left after the other degrees (world / (replicate x cp x tp x "
                "pp)), and the file does not hold the GPU count: give --dp (replicate x shard), "
                "or use vramfit plan --gpus N; FSDP is taken as on");
  }
  const std::string policy = k.choice(policy_key, {"default", "always", "never"},
                                      " (torchtitan: \"Invalid reshard_after_forward_policy\")")
                                 .value_or("default");
  if (!d.fsdp()) {
    k.no_effect({policy_key});
    if (d.replicate > 1 && (d.tensor > 1 || d.pipeline > 1))  // parallelize.py L148-151
      k.refuse("parallelism.data_parallel_replicate_degree",
               "> 1 without sharding is DDP, which torchtitan refuses with tensor or pipeline "
               "parallelism (\"DDP has not supported > 1D parallelism\")");
    return;  // DDP (replicate, bucket_cap_mb=100) or one GPU: plain --dp
  }
  // apply_fsdp: "default" reshards unless pipelined ("For PP, by default do not reshard").
  const bool reshard = policy == "always" || (policy == "default" && d.pipeline == 1);
  const std::string policy_source =
      k.find(policy_key) ? policy_key : "(default: parallelism.fsdp_reshard_after_forward default)";
  if (d.replicate == 1) {
    k.set("--fsdp", "full", shard);
    k.set("--fsdp-version", "2", shard);
    if (!reshard)  // true is vramfit's default (and all that plan searches)
      k.set("--reshard-after-forward", "false", policy_source);
    return;
  }
  k.set("--fsdp", "hybrid", "parallelism.data_parallel_replicate_degree");  // HSDP
  if (d.shard > 0) k.set("--fsdp-group", std::to_string(d.shard), shard);
  k.set("--fsdp-version", "2", shard);
  if (!reshard)
    k.unmodeled(policy_key,
                "units kept gathered to their backward under HSDP: vramfit's hybrid sharding "
                "reshards after forward");
}

/// Tensor, context and expert parallelism (parallelize.py apply_tp L161-253: sequence-parallel
/// norms and loss-parallel logits; parallel_dims.py L58-59, L136-138).
inline void model_parallel(launcher_keys& k, const degrees& d, const flavor* f,
                           std::int64_t seq_len, bool model_compiled) {
  if (d.tensor > 1) {
    k.set("--tp", std::to_string(d.tensor), "parallelism.tensor_parallel_degree");
    k.set("--sp", "true", "parallelism.tensor_parallel_degree");  // SequenceParallel, Shard(1)
  }
  if (d.context > 1)
    k.set("--cp", std::to_string(d.context), "parallelism.context_parallel_degree");
  if (d.pipeline > 1)
    k.set("--pp", std::to_string(d.pipeline), "parallelism.pipeline_parallel_degree");
  if (d.expert > 1) k.set("--ep", std::to_string(d.expert), "parallelism.expert_parallel_degree");
  // parallel_dims.py seq_len_divisor: tp * 2 * cp (parallelize.py L69-74)
  if (seq_len % (d.tensor * 2 * d.context) != 0)
    k.refuse("training.seq_len", std::to_string(seq_len) +
                                     " must be divisible by the product of TP degree (" +
                                     std::to_string(d.tensor) + ") and 2 * CP degree (" +
                                     std::to_string(d.context) + "), as torchtitan asserts");
  if (d.context > 1 && f && !f->sdpa)  // deepseek_v3/infra/parallelize.py L67-73
    k.refuse("parallelism.context_parallel_degree",
             "> 1 with the flavor '" + std::string(f->flavor) +
                 "': \"Context Parallel only supports SDPA attention\" (flex/varlen flavors)");
  const bool loss_unparallel = k.boolean("parallelism.disable_loss_parallel").value_or(false);
  if (loss_unparallel && d.tensor > 1)
    k.unmodeled("parallelism.disable_loss_parallel",
                "full-vocabulary logits on every TP rank: vramfit divides them by --tp");
  const bool async_tp = k.boolean("parallelism.enable_async_tensor_parallel").value_or(false);
  if (async_tp && d.tensor > 1 && !model_compiled)  // distributed/tensor_parallel.py L20-23
    k.refuse("parallelism.enable_async_tensor_parallel",
             "needs a compiled model: \"Async TP requires 'model' in --compile.components and "
             "--compile.enable\"");
  if (async_tp && d.tensor > 1)  // inductor's micro-pipelined TP over symmetric memory
    k.set("--tp-comm-overlap", "async-tp", "parallelism.enable_async_tensor_parallel");
  const auto rotate =
      k.choice("parallelism.context_parallel_rotate_method", {"allgather", "alltoall"});
  if (rotate == "alltoall" && d.context > 1)
    k.unmodeled("parallelism.context_parallel_rotate_method",
                "alltoall passes one K/V shard at a time: vramfit gathers all (allgather)");
  const auto balancer = k.text("parallelism.context_parallel_load_balancer");
  if (balancer && balancer->empty())  // job_config.py L439-444
    k.refuse("parallelism.context_parallel_load_balancer",
             "cannot be an empty string (torchtitan: \"Use None to disable load balancing\")");
  const std::int64_t etp =
      k.integer("parallelism.expert_tensor_parallel_degree", 1, largest_count).value_or(1);
  if (d.expert > 1 && etp != d.tensor && etp != 1)
    k.refuse("parallelism.expert_tensor_parallel_degree",
             std::to_string(etp) + ": \"Currently we only support ETP=TP or ETP=1\"");
  if (d.expert > 1 && etp == 1 && d.tensor > 1)
    k.unmodeled("parallelism.expert_tensor_parallel_degree",
                "1 with --tp: routed experts not split over TP; vramfit splits them as MLPs");
  const auto backend = k.choice("parallelism.expert_parallel_comm_backend", {"standard", "deepep"});
  if (backend == "deepep" && d.expert > 1)
    k.unmodeled("parallelism.expert_parallel_comm_backend", "DeepEP's buffers are not modeled");
}

/// Layers per pipeline rank: torchtitan's stages (distributed/pipeline_parallel.py
/// generate_llm_fqn_per_model_part L236-344, or module_fqns_per_model_part's `layers.N`),
/// stage s on rank s mod P (loop schedules), summed per rank.
inline std::vector<std::int64_t> rank_layers(launcher_keys& k, std::int64_t ranks,
                                             std::int64_t stages, std::int64_t layers,
                                             std::int64_t first, std::int64_t last) {
  std::vector<std::int64_t> per_stage;
  const char* parts_key = "parallelism.module_fqns_per_model_part";
  if (const nlohmann::json* parts = k.find(parts_key)) {
    if (!parts->is_array() || static_cast<std::int64_t>(parts->size()) != stages)
      k.refuse(parts_key,
               "must list " + std::to_string(stages) + " model parts (arrays of module names)");
    for (const nlohmann::json& part : *parts) {
      if (!part.is_array()) k.refuse(parts_key, "must hold arrays of module names");
      std::int64_t n = 0;
      for (const nlohmann::json& m : part) {
        if (!m.is_string()) k.refuse(parts_key, "must hold arrays of module names");
        n += m.get<std::string>().starts_with("layers.") ? 1 : 0;
      }
      per_stage.push_back(n);
    }
  } else {
    const std::int64_t effective = layers + first + last;
    if (stages > effective)
      k.refuse("parallelism.pipeline_parallel_degree",
               "\"Number of stages (" + std::to_string(stages) +
                   ") cannot be greater than effective layers (" + std::to_string(effective) +
                   ")\"");
    const std::int64_t each = effective / stages, extra = effective % stages;
    if (first > each || last > each)
      k.refuse(first > each ? "parallelism.pipeline_parallel_first_stage_less_layers"
                            : "parallelism.pipeline_parallel_last_stage_less_layers",
               "exceeds the minimum layers per stage (" + std::to_string(each) +
                   "), as torchtitan refuses");
    for (std::int64_t s = 0; s < stages; ++s)
      per_stage.push_back(each + (s < extra ? 1 : 0) - (s == 0 ? first : 0) -
                          (s == stages - 1 ? last : 0));
  }
  std::vector<std::int64_t> per_rank(static_cast<std::size_t>(ranks), 0);
  for (std::size_t s = 0; s < per_stage.size(); ++s) per_rank[s % per_rank.size()] += per_stage[s];
  for (const std::int64_t n : per_rank)
    if (n < 1)
      k.refuse("parallelism.pipeline_parallel_degree",
               "leaves a pipeline rank without layers, which vramfit cannot model");
  return per_rank;
}

/// The batch without a pipeline: one micro-batch of local_batch_size, accumulated to
/// global_batch_size (job_config.py Training L253-261, train.py L195-215).
inline void batch(launcher_keys& k, const degrees& d, std::int64_t local, bool local_given,
                  std::optional<std::int64_t> global) {
  k.set("--micro-batch", std::to_string(local),
        local_given ? "training.local_batch_size" : "(default: training.local_batch_size 8)");
  if (!global) return;  // one micro-batch per step
  if (*global < 0) {
    k.set("--grad-accum", "1", "training.global_batch_size");  // local x dp
  } else if (d.shard > 0) {
    const std::int64_t dp = d.replicate * d.shard;
    if (*global % (local * dp) != 0)
      k.refuse("training.global_batch_size",
               "\"global batch size must be multiple of local batch size times data-parallel "
               "degree (" +
                   std::to_string(*global) + " % (" + std::to_string(local) + " * " +
                   std::to_string(dp) + ") != 0)\"");
    k.set("--grad-accum", std::to_string(*global / (local * dp)), "training.global_batch_size");
  } else {
    k.unmodeled("training.global_batch_size",
                "accumulates global / (local x dp) micro-batches, and the file does not hold "
                "dp (data_parallel_shard_degree -1): give --grad-accum");
  }
}

/// The pipeline (distributed/pipeline_parallel.py pipeline_llm, build_pipeline_schedule
/// L186-231) and the batch (job_config.py Training L253-261, train.py L195-215).
inline void batch_and_pipeline(launcher_keys& k, const degrees& d, const flavor* f) {
  const std::int64_t most = largest_count;
  const auto local_given = k.integer("training.local_batch_size", 1, most);
  const std::int64_t local = local_given.value_or(8);
  const auto global = k.integer("training.global_batch_size", -most, most);
  if (global && *global == 0)
    k.refuse("training.global_batch_size", "must be positive, or negative for local x dp, got 0");
  const char* pp_keys[] = {"parallelism.pipeline_parallel_schedule",
                           "parallelism.pipeline_parallel_schedule_csv",
                           "parallelism.pipeline_parallel_microbatch_size",
                           "parallelism.pipeline_parallel_layers_per_stage",
                           "parallelism.pipeline_parallel_first_stage_less_layers",
                           "parallelism.pipeline_parallel_last_stage_less_layers",
                           "parallelism.module_fqns_per_model_part",
                           "parallelism.pipeline_parallel_expert_parallel_overlap"};
  if (d.pipeline == 1) {
    for (const char* key : pp_keys) k.no_effect({key});  // inert without a pipeline
    return batch(k, d, local, local_given.has_value(), global);
  }
  // A step's G outer accumulation steps run the pipeline one after another: no memory.
  k.no_effect({"training.global_batch_size"});
  const auto csv = k.text("parallelism.pipeline_parallel_schedule_csv");
  if (csv && !csv->empty())
    k.refuse("parallelism.pipeline_parallel_schedule_csv",
             "names a custom schedule, which vramfit cannot model");
  // torch.distributed.pipelining get_schedule_class: the name, case-insensitive.
  const auto schedule = k.text("parallelism.pipeline_parallel_schedule");
  const std::string given = schedule.value_or("1F1B");  // vramfit's default too
  const std::string name = lower_case(given);
  const bool multi = name == "interleaved1f1b";
  if (name != "1f1b" && name != "gpipe" && !multi) {
    for (const char* other : {"loopedbfs", "interleavedzerobubble", "zbvzerobubble", "dualpipev",
                              "pipelineschedulesingle", "pipelineschedulemulti"})
      if (name == other)
        k.refuse("parallelism.pipeline_parallel_schedule",
                 "\"" + shown_value(given) +
                     "\" is not modeled by vramfit (1F1B, GPipe or Interleaved1F1B)");
    k.refuse("parallelism.pipeline_parallel_schedule",
             "\"" + shown_value(given) + "\": torch raises \"Unknown schedule name\"");
  }
  if (schedule)
    k.set("--schedule", multi ? "interleaved" : name, "parallelism.pipeline_parallel_schedule");
  k.no_effect({"parallelism.pipeline_parallel_expert_parallel_overlap"});  // DualPipeV only
  const std::int64_t mbs =
      k.integer("parallelism.pipeline_parallel_microbatch_size", 1, most).value_or(1);
  if (local % mbs != 0)  // pipeline_parallel.py L188-200
    k.refuse("parallelism.pipeline_parallel_microbatch_size",
             "\"Batch size " + std::to_string(local) + " must be divisible by microbatch_size " +
                 std::to_string(mbs) + "\"");
  k.set("--micro-batch", std::to_string(mbs), "parallelism.pipeline_parallel_microbatch_size");
  k.set("--grad-accum", std::to_string(local / mbs), "training.local_batch_size");
  const std::int64_t first =
      k.integer("parallelism.pipeline_parallel_first_stage_less_layers", 0, most).value_or(1);
  const std::int64_t last =
      k.integer("parallelism.pipeline_parallel_last_stage_less_layers", 0, most).value_or(1);
  // pipeline_parallel.py L71-109: virtual stages from layers_per_stage, else 1 or 2 per rank.
  const auto per_stage = k.integer("parallelism.pipeline_parallel_layers_per_stage", 1, most);
  std::int64_t per_rank = multi ? 2 : 1;
  if (per_stage && !f) {
    k.unmodeled("parallelism.pipeline_parallel_layers_per_stage",
                "the stages follow from the model's layers, not known here: give "
                "--virtual-stages and --pp-stages");
  } else if (per_stage) {
    const std::int64_t stages = (f->layers + first + last + *per_stage - 1) / *per_stage;
    if (stages % d.pipeline != 0)
      k.refuse("parallelism.pipeline_parallel_layers_per_stage",
               "gives " + std::to_string(stages) +
                   " stages: \"Number of virtual stages must be divisible "
                   "by pipeline parallel size (" +
                   std::to_string(d.pipeline) + ")\"");
    per_rank = stages / d.pipeline;
    if (!multi && per_rank != 1)
      k.refuse("parallelism.pipeline_parallel_layers_per_stage",
               "\"Single stage schedule requires exactly 1 stage per rank\", got " +
                   std::to_string(per_rank));
    if (multi && per_rank < 2)
      k.refuse("parallelism.pipeline_parallel_layers_per_stage",
               "\"Multi-stage schedule requires at least 2 stages per rank\", got 1");
  }
  if (multi)
    k.set("--virtual-stages", std::to_string(per_rank), "parallelism.pipeline_parallel_schedule");
  if (!f) {
    k.unmodeled("parallelism.module_fqns_per_model_part",
                "the split of a model not known here: give --pp-stages");
    return;
  }
  std::string list;
  for (const std::int64_t n :
       rank_layers(k, d.pipeline, d.pipeline * per_rank, f->layers, first, last))
    list += (list.empty() ? "" : ",") + std::to_string(n);
  k.set("--pp-stages", list,
        k.find("parallelism.module_fqns_per_model_part") ? "parallelism.module_fqns_per_model_part"
                                                         : "parallelism.pipeline_parallel_degree");
}

/// training.dtype and the FSDP2 MixedPrecisionPolicy (train.py L147-151; parallelize.py
/// L131-139; distributed/utils.py maybe_enable_amp L243-263), and CPU offload (apply_fsdp
/// L315-317).
inline void precision(launcher_keys& k, const degrees& d) {
  const auto dtype = k.choice("training.dtype", {"float32", "bfloat16", "float16"});
  const auto mp = k.choice("training.mixed_precision_param", {"float32", "bfloat16", "float16"});
  const auto reduce =
      k.choice("training.mixed_precision_reduce", {"float32", "bfloat16", "float16"});
  if (reduce && *reduce != "float32" && d.fsdp())
    k.unmodeled("training.mixed_precision_reduce",
                "gradients reduced in 16 bits: vramfit reduces FSDP2's in fp32");
  const std::string param = mp.value_or("bfloat16");
  const std::string mp_source =
      mp ? "training.mixed_precision_param" : "(default: training.mixed_precision_param bfloat16)";
  if (dtype && *dtype != "float32") {  // the model built in 16 bits: no fp32 copy anywhere
    k.set("--precision", *dtype == "bfloat16" ? "bf16" : "fp16", "training.dtype");
  } else if (!d.fsdp() && (d.tensor > 1 || d.pipeline > 1)) {
    // "Mixed precision training with TP or PP is only supported when FSDP/HSDP/CP is enabled."
    k.set("--precision", "fp32", "parallelism.tensor_parallel_degree");
  } else {  // FSDP2's param_dtype, or torch.autocast on one GPU or under DDP
    k.set("--precision",
          param == "bfloat16"  ? "amp-bf16"
          : param == "float16" ? "amp-fp16"
                               : "fp32",
          mp_source);
  }
  if (k.boolean("training.enable_cpu_offload").value_or(false)) {
    if (!d.fsdp())
      k.refuse("training.enable_cpu_offload",
               "without FSDP only initializes the model on the CPU: not a GPU plan");
    k.set("--offload", "all", "training.enable_cpu_offload");  // CPUOffloadPolicy()
  }
}

/// [activation_checkpoint] (distributed/activation_checkpoint.py apply_ac L194-249,
/// _apply_layer_sac L27-49); job_config.py ActivationCheckpoint L652-717: mode "selective",
/// selective_ac_option "2" when the section leaves them out.
inline void recompute(launcher_keys& k, bool compiled) {
  const auto mode_given = k.text("activation_checkpoint.mode");
  const std::string mode = mode_given.value_or("selective");
  const nlohmann::json* raw = k.find("activation_checkpoint.selective_ac_option");
  if (raw && !raw->is_string())  // a str field: an integer reaches .isdigit() and fails
    k.refuse("activation_checkpoint.selective_ac_option",
             "must be text ('op' or a quoted layer frequency such as \"2\"), got " +
                 detail::shown(*raw));
  const std::string option = raw ? raw->get<std::string>() : "2";
  const std::string source =
      mode_given ? "activation_checkpoint.mode" : "(default: activation_checkpoint.mode selective)";
  const std::string option_source = raw ? "activation_checkpoint.selective_ac_option"
                                        : "(default: activation_checkpoint.selective_ac_option 2)";
  k.no_effect({"activation_checkpoint.preserve_rng_state",
               "activation_checkpoint.determinism_check", "activation_checkpoint.debug"});
  if (mode == "memory_budget")
    k.refuse("activation_checkpoint.mode",
             compiled ? "memory_budget: the compiler's partitioner decides what is saved, which "
                        "vramfit cannot model"
                      : "memory_budget: \"Memory budget mode requires model to be compiled\"");
  k.no_effect({"activation_checkpoint.memory_budget",
               "activation_checkpoint.visualize_memory_budget_pareto"});
  k.unmodeled("activation_checkpoint.early_stop",
              "recomputation stops early: at most one layer's recompute less");
  if (mode == "none" || mode == "full") {
    k.set("--recompute", mode, source);
    return;
  }
  if (mode != "selective")
    k.refuse("activation_checkpoint.mode",
             "\"" + shown_value(mode) + "\": \"Invalid AC mode\" (none, full, selective)");
  if (option == "op") {
    k.set("--recompute", "op-sac", option_source);
    const auto forced =
        strings(k, "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns");
    if (forced.size() != 1 || forced[0] != "moe.router.gate")
      k.unmodeled("activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns",
                  "vramfit's op-sac recomputes the router's matmul (moe.router.gate) only");
    return;
  }
  k.no_effect({"activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns"});
  if (option.empty() || option.find_first_not_of("0123456789") != std::string::npos ||
      option.size() > 9)
    k.refuse("activation_checkpoint.selective_ac_option",
             "\"" + shown_value(option) +
                 "\": \"Valid options: 'op' or a positive int representing layer frequency\"");
  const std::int64_t every = std::stoll(option);
  k.set("--recompute", "full", option_source);  // blocks wrapped whole (_apply_full_ac)
  if (every >= 2) k.set("--recompute-every", std::to_string(every), option_source);
}

/// [optimizer] (components/optimizer.py build_optimizers L277-320).
inline void optimizer(launcher_keys& k, const degrees& d) {
  if (const auto name = k.text("optimizer.name")) {
    if (*name != "AdamW" && *name != "Adam")
      k.refuse("optimizer.name", "\"" + shown_value(*name) +
                                     "\": torchtitan has AdamW and Adam (\"Optimizer not added\")");
    k.set("--optimizer", *name == "AdamW" ? "adamw" : "adam", "optimizer.name");
  }
  if (const auto impl = k.choice("optimizer.implementation", {"fused", "foreach", "for-loop"}))
    k.set("--optimizer-impl", *impl, "optimizer.implementation");
  if (k.boolean("optimizer.early_step_in_backward").value_or(false)) {
    if (d.pipeline > 1 || d.expert > 1)
      k.refuse("optimizer.early_step_in_backward",
               d.pipeline > 1 ? "\"Optimizers in backward is not supported with Pipeline "
                                "Parallel.\""
                              : "\"Optimizers in backward is not supported with Expert "
                                "Parallel.\"");
    k.set("--optimizer-in-backward", "true", "optimizer.early_step_in_backward");
  }
  k.no_effect({"optimizer.lr", "optimizer.beta1", "optimizer.beta2", "optimizer.eps",
               "optimizer.weight_decay", "lr_scheduler"});  // scalars
}

/// Sections with no GPU memory of their own, or whose effect vramfit does not model.
inline void others(launcher_keys& k) {
  if (k.boolean("checkpoint.create_seed_checkpoint").value_or(false))  // train.py L180-183
    k.refuse("checkpoint.create_seed_checkpoint",
             "true builds the model on the CPU and trains nothing (torchtitan: NGPU=1)");
  // distributed/utils.py init_distributed
  if (k.choice("comm.mode", {"default", "fake_backend", "local_tensor"}) == "local_tensor")
    k.refuse("comm.mode", "local_tensor runs every rank on one GPU: not a per-GPU plan");
  if (k.boolean("validation.enable").value_or(false))  // job_config.py L949-982
    k.unmodeled("validation",
                "a no-grad forward and loss between steps with its own batch "
                "shape (default 8 x 2048 tokens) is not modeled");
  else
    k.no_effect({"validation"});
  if (k.boolean("fault_tolerance.enable").value_or(false))
    k.unmodeled("fault_tolerance",
                "TorchFT replica groups (DiLoCo keeps extra parameter copies) are not modeled");
  else
    k.no_effect({"fault_tolerance"});
  if (k.boolean("debug.deterministic").value_or(false))
    k.unmodeled("debug.deterministic",
                "CUBLAS_WORKSPACE_CONFIG=:4096:8: cuBLAS's workspace is not modeled");
  if (k.boolean("debug.moe_force_load_balance").value_or(false))
    k.unmodeled("debug.moe_force_load_balance",
                "round-robin routing: vramfit's routing assumption applies");
  if (const auto module = k.text("experimental.custom_import"); module && !module->empty())
    k.unmodeled("experimental.custom_import",
                "imports a module that may register a model or change the training");
  // Host-side or scalars: logging, profiling traces, checkpoints (staged on the host), the
  // data loader (packs to exactly seq_len), gradient clipping's norms, Python's GC.
  k.no_effect({"job", "profiling", "metrics", "checkpoint", "comm", "memory_estimation",
               "experimental.custom_args_module", "debug.seed", "debug.deterministic_warn_only",
               "training.dataset", "training.dataset_path", "training.steps", "training.max_norm",
               "training.gc_freq", "training.gc_debug", "training.dataloader"});
}

}  // namespace detail_torchtitan

/// The options a torchtitan job file sets, and its keys that change no memory or are not
/// modeled.
inline void translate_torchtitan(launcher_keys& k) {
  using namespace detail_torchtitan;
  check_sections(k, k.document());
  const flavor* f = model(k);
  converters(k);
  const bool compiled = k.boolean("compile.enable").value_or(false);
  const std::vector<std::string> parts = strings(k, "compile.components");
  const bool model_compiled = compiled && (!k.find("compile.components") || holds(parts, "model"));
  if (compiled)  // parallelize.py apply_compile L256-269; components/loss.py L20-36
    k.unmodeled("compile.enable",
                "torch.compile is not modeled: compiled blocks save fewer activations, and a "
                "compiled loss fuses the fp32 upcast (--loss fp32-upcast is an upper bound)");
  else
    k.no_effect({"compile"});
  k.no_effect({"compile.backend"});
  const degrees d = degrees_of(k);
  const std::int64_t seq_len = k.integer("training.seq_len", 1, largest_count).value_or(2048);
  if (k.find("training.seq_len")) k.set("--seq-len", std::to_string(seq_len), "training.seq_len");
  data_parallel(k, d);
  model_parallel(k, d, f, seq_len, model_compiled);
  batch_and_pipeline(k, d, f);
  precision(k, d);
  recompute(k, compiled);
  optimizer(k, d);
  others(k);
  // run_train.sh exports PYTORCH_ALLOC_CONF="expandable_segments:True" for every run.
  k.set("--expandable-segments", "true", "(default: run_train.sh PYTORCH_ALLOC_CONF)");
}

}  // namespace vramfit::cli
