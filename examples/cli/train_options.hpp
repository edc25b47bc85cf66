// SPDX-License-Identifier: MIT
// `vramfit train`'s options (plan reads the same ones), their registration and --framework's
// defaults for them.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ecosystem_aliases.hpp"
#include "inputs.hpp"

namespace vramfit::cli {

/// Everything `vramfit train` reads.
struct train_options {
  std::string model = "llama-3-8b";
  vramfit::precision precision = mixed<bf16>::value;
  std::optional<element_format> grad_dtype;  ///< unset: the policy's own
  vramfit::optimizer optimizer = adamw<>::value;
  std::string framework;  ///< its defaults fill in what is not given (frameworks.hpp)
  std::optional<vramfit::optimizer_impl> optimizer_impl;  ///< unset: what its library picks
  bool optimizer_in_backward = false;
  bool keep_grads = false;  ///< zero_grad(set_to_none=False)
  bool amsgrad = false, centered = false;
  std::optional<double> momentum;
  std::int64_t micro_batch = 1;
  std::int64_t seq_len = 0;  ///< 0: the model's default_sequence()
  std::int64_t grad_accum = 1;
  attention_kind attention = attention_kind::flash;
  vramfit::model_code model_code = model_code::hf;
  bool model_code_given = false;                  ///< by the user, not by --framework
  std::optional<experts_implementation> experts;  ///< an MoE model's; unset: grouped_mm
  bool expert_linears = false;  ///< an MoE's experts and router as nn.Linear (transformers 4)
  std::optional<double> dropout;
  recompute_kind recompute = recompute_kind::none;
  std::int64_t recompute_layers = -1;
  std::int64_t recompute_every = 0;
  bool non_reentrant = false;
  bool activation_offload = false;
  loss_kind loss = loss_kind::fp32_upcast;
  std::int64_t dp = 1;
  std::optional<int> zero;
  shard_implementation zero_impl = shard_implementation::deepspeed;
  std::optional<std::string> reduce_bucket;    ///< DeepSpeed reduce_bucket_size; unset: 5e8
  std::optional<std::string> prefetch_bucket;  ///< DeepSpeed stage3_prefetch_bucket_size; 5e7
  std::optional<std::string> sub_group;        ///< DeepSpeed sub_group_size; unset: 1e9
  std::optional<std::string> max_live;         ///< DeepSpeed stage3_max_live_parameters; 1e9
  std::optional<std::string> reuse_distance;   ///< DeepSpeed stage3_max_reuse_distance; 1e9
  std::optional<std::string> persistence;      ///< stage3_param_persistence_threshold; 1e5
  bool overlap_comm = false;
  std::optional<fsdp_strategy> fsdp;
  std::int64_t fsdp_group = 0;
  std::int64_t fsdp_version = 1;
  std::string reshard_after_forward;
  fsdp_backward_prefetch backward_prefetch = fsdp_backward_prefetch::pre;
  bool forward_prefetch = false;
  bool limit_all_gathers = true;
  std::int64_t tp = 1;
  bool sp = false;
  tp_comm_overlap tp_overlap = tp_comm_overlap::none;
  std::int64_t pp = 1;
  std::vector<std::int64_t> pp_stages;
  pipeline_schedule schedule = pipeline_schedule::one_f_one_b;
  std::int64_t virtual_stages = 1;
  pipeline_runtime pp_runtime = pipeline_runtime::megatron;
  std::int64_t cp = 1;
  std::int64_t ep = 1;
  offload_mode offload = offload_mode::none;
  offload_target offload_to = offload_target::cpu;
  std::int64_t lora_rank = 0;
  std::optional<std::string> lora_targets;  ///< unset: peft's per-model default (QLoRA: all-linear)
  bool qlora = false;
  bool explain = false;  ///< train only: the saved tensors of a layer instead of the estimate
  std::optional<std::vector<std::string>> dtypes;  ///< train only: a row per precision
  /// Not an option: the model's config.json quantization_config (for_model sets it).
  std::optional<weight_layout> checkpoint;
  std::optional<element_format> lora_dtype;  ///< unset: peft's (fp32 adapters over 16-bit ones)
  std::vector<std::string> trainable;
  std::string gpu = "h100";
  bool expandable_segments = false;
  std::string alloc_conf;
  std::optional<reserve_model> reserve;  ///< unset: simulated, share with a percentage
  std::int64_t fragmentation_percent = -1;
  std::int64_t gpus_per_node = 8;  ///< plan: its own --gpus-per-node (plan_space.hpp)
  std::int64_t nccl_channels = nccl_cluster{}.channels;
  nccl_version nccl = nccl_version::v2_22_or_later;
  memory_metric metric = memory_metric::nvidia_smi;
  output_format format = output_format::table;
  std::optional<sweep_axis> sweep;
  std::int64_t sweep_max = 0;
  bool check = false;
  bool timeline = false;
};

/// The model, its precision and its optimizer.
inline void add_model_options(CLI::App& cmd, train_options& o) {
  cmd.add_option(
         "--model,-m", o.model,
         "A preset (see `vramfit models`), a config.json path or its text, or a Hugging Face "
         "id (org/name[@revision]) in the local Hugging Face cache")
      ->capture_default_str();
  cmd.add_option("--framework", o.framework,
                 "torchtitan, torchtune, deepspeed, megatron, fsdp1 or hf-trainer: its defaults "
                 "for the options not given (vramfit frameworks lists them)");
  add_choice(cmd, "--precision", o.precision, precisions, "precision",
             choice_list(precisions) + " (torch dtypes too: bfloat16 is bf16)", torch_dtypes)
      ->capture_default_str();
  add_choice(cmd, "--grad-dtype", o.grad_dtype, float_formats, "gradient format",
             choice_list(float_formats) +
                 ": the gradients' format where an fp32 master allows a choice (default: the "
                 "policy's; bf16-fp32-master keeps fp32 as Megatron-LM does)",
             torch_dtypes);
  add_choice(cmd, "--optimizer", o.optimizer, optimizers, "optimizer",
             choice_list(optimizers) + " (Hugging Face optim names too: adamw_torch is adamw)",
             hf_optimizers)
      ->capture_default_str();
  add_choice(cmd, "--optimizer-impl", o.optimizer_impl, optimizer_impls, "optimizer implementation",
             choice_list(optimizer_impls) + "; default: what torch.optim picks on CUDA");
  cmd.add_flag("--amsgrad", o.amsgrad, "Adam, AdamW: keep max_exp_avg_sq (amsgrad=True)");
  cmd.add_option("--momentum", o.momentum,
                 "SGD, RMSprop: a momentum factor; above 0 keeps a momentum buffer");
  cmd.add_flag("--centered", o.centered, "RMSprop: keep grad_avg (centered=True)");
  cmd.add_flag("--optimizer-in-backward", o.optimizer_in_backward,
               "Step each parameter as its gradient is ready and free the gradient (torchtune "
               "optimizer_in_bwd): no full set of gradients");
  cmd.add_flag("--keep-grads", o.keep_grads,
               "zero_grad(set_to_none=False), torch < 2.0's default and so Hugging Face's Trainer "
               "of then: the gradients stay allocated between steps, zeroed, and each backward "
               "adds its new ones into them");
}

/// The batch, the attention and what the activations keep.
inline void add_batch_options(CLI::App& cmd, train_options& o) {
  cmd.add_option("--micro-batch,-b,--per-device-train-batch-size", o.micro_batch,
                 "Sequences per micro-batch (Hugging Face's per_device_train_batch_size)")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--seq-len,-s", o.seq_len,
                 "Tokens per sequence (default: 2048, a ViT's image tokens, or a learned position "
                 "table's rows when fewer)")
      ->check(positive);
  cmd.add_option("--grad-accum,--gradient-accumulation-steps", o.grad_accum,
                 "Micro-batches per optimizer step (gradient accumulation, pipeline)")
      ->check(positive)
      ->capture_default_str();
  add_choice(cmd, "--attention", o.attention, attentions, "attention", choice_list(attentions))
      ->capture_default_str();
  add_choice(
      cmd, "--model-code", o.model_code, model_codes, "model code",
      "Whose module code runs the model, for what its operators save: " + choice_list(model_codes))
      ->capture_default_str();
  add_choice(cmd, "--experts-implementation", o.experts, experts_implementations,
             "experts implementation",
             "How transformers 5 runs an MoE model's packed experts (its config's "
             "experts_implementation): " +
                 choice_list(experts_implementations) + " (default: grouped_mm)");
  cmd.add_option("--dropout", o.dropout,
                 "Dropout probability; overrides the model's (GPT-2, BERT: 0.1)");
  add_choice(cmd, "--recompute", o.recompute, recomputes, "recompute policy",
             choice_list(recomputes) +
                 " (--gradient-checkpointing, Hugging Face's: full with --non-reentrant)")
      ->capture_default_str();
  cmd.add_option("--recompute-layers", o.recompute_layers,
                 "Full recompute for this many layers per stage (-1: all)")
      ->check(count_from(-1, ""))
      ->capture_default_str();
  cmd.add_option("--recompute-every", o.recompute_every,
                 "With --recompute full: only every Nth layer (torchtitan's per-layer SAC, "
                 "selective_ac_option N)")
      ->check(positive);
  add_choice(cmd, "--activation-offload", o.activation_offload, activation_offloads,
             "activation offload", choice_list(activation_offloads))
      ->capture_default_str();
  cmd.add_flag("--non-reentrant", o.non_reentrant,
               "Checkpoint with use_reentrant=False (Hugging Face's default is True)");
  add_choice(cmd, "--loss", o.loss, losses, "loss", choice_list(losses))->capture_default_str();
}

/// The parallel layout, the sharding and the offload.
inline void add_parallel_options(CLI::App& cmd, train_options& o) {
  cmd.add_option("--dp", o.dp, "Data-parallel degree")->check(positive)->capture_default_str();
  cmd.add_option("--zero", o.zero, "ZeRO stage over the data-parallel ranks: 0, 1, 2 or 3");
  add_choice(cmd, "--zero-impl", o.zero_impl, zero_implementations, "ZeRO implementation",
             choice_list(zero_implementations))
      ->capture_default_str();
  cmd.add_option("--reduce-bucket", o.reduce_bucket,
                 "DeepSpeed ZeRO's reduce_bucket_size: gradient elements per reduce buffer, such "
                 "as 2e8 (default 5e8), or auto (the Hugging Face Trainer's: hidden size squared)");
  cmd.add_flag("--overlap-comm", o.overlap_comm,
               "DeepSpeed ZeRO-1/2 overlap_comm: a second reduce buffer");
  cmd.add_option("--prefetch-bucket", o.prefetch_bucket,
                 "DeepSpeed ZeRO-3's stage3_prefetch_bucket_size: parameter elements a fetch "
                 "prefetches at most (default 5e7), 0 for none (what vramfit's bound on the "
                 "gathered parameters takes), or auto (the Hugging Face Trainer's: 0.9 x hidden "
                 "size squared)");
  cmd.add_option("--sub-group", o.sub_group,
                 "DeepSpeed ZeRO-3's sub_group_size: elements per optimizer step group, whose "
                 "fp32 gradients the step makes at once (default 1e9)");
  cmd.add_option("--max-live-parameters", o.max_live,
                 "DeepSpeed ZeRO-3's stage3_max_live_parameters: the prefetcher gathers ahead "
                 "while fewer elements than this are gathered (default 1e9)");
  cmd.add_option("--max-reuse-distance", o.reuse_distance,
                 "DeepSpeed ZeRO-3's stage3_max_reuse_distance: a parameter used again within "
                 "this many elements of modules stays gathered (default 1e9)");
  cmd.add_option("--persistence-threshold", o.persistence,
                 "DeepSpeed ZeRO-3's stage3_param_persistence_threshold: parameters of at most "
                 "this many elements stay gathered for the run (default 1e5), or auto (the Hugging "
                 "Face Trainer's: 10 x hidden size)");
  add_choice(cmd, "--fsdp", o.fsdp, fsdp_strategies, "FSDP strategy",
             "PyTorch FSDP over the data-parallel ranks: " + choice_list(fsdp_strategies));
  cmd.add_option("--fsdp-group", o.fsdp_group, "Ranks per shard group for --fsdp hybrid")
      ->check(positive);
  cmd.add_option("--fsdp-version", o.fsdp_version,
                 "1: FullyShardedDataParallel; 2: fully_shard (fp32 sharded parameters under "
                 "mixed precision, gradients reduced through a copy-in buffer)")
      ->check(CLI::Range(1, 2).name(""))
      ->capture_default_str();
  cmd.add_option("--reshard-after-forward", o.reshard_after_forward,
                 "FSDP2 full sharding: true (the default), false (units stay gathered until "
                 "their backward) or N (resharded over N ranks)");
  add_choice(cmd, "--backward-prefetch", o.backward_prefetch, backward_prefetches,
             "FSDP1 backward prefetch",
             "FSDP1: when backward all-gathers the next unit: " + choice_list(backward_prefetches));
  cmd.add_flag("--forward-prefetch", o.forward_prefetch,
               "FSDP1: all-gather the next unit before the current one's forward");
  add_choice(cmd, "--limit-all-gathers", o.limit_all_gathers, truth_values, "FSDP1 rate limiter",
             "FSDP1's rate limiter: true (torch >= 2.1's default) or false (torch <= 2.0's: the "
             "all-gathers the CPU issues ahead stay reserved)");
  cmd.add_option("--tp", o.tp, "Tensor-parallel degree")->check(positive)->capture_default_str();
  cmd.add_flag("--sp", o.sp, "Sequence parallelism (with --tp)");
  add_choice(cmd, "--tp-comm-overlap", o.tp_overlap, tp_overlaps, "TP communication overlap",
             "TP's all-gathers and reduce-scatters chunked beside their matmuls (with --sp): " +
                 choice_list(tp_overlaps))
      ->capture_default_str();
  cmd.add_option("--pp", o.pp, "Pipeline-parallel degree")->check(positive)->capture_default_str();
  // Split here, not by CLI11's delimiter, which drops empty items ("16,,16" read as 16,16).
  const auto stages = [&o](const CLI::results_t& words) {
    o.pp_stages.clear();
    for (const std::string& word : words) {
      for (std::size_t at = 0; at <= word.size();) {
        const std::size_t end = std::min(word.find(',', at), word.size());
        std::int64_t layers = 0;
        const auto [stop, ec] = std::from_chars(word.data() + at, word.data() + end, layers);
        if (ec != std::errc{} || stop != word.data() + end)
          detail::raise("--pp-stages '" + word + "': '" + word.substr(at, end - at) +
                        "' is not a layer count");
        o.pp_stages.push_back(layers);
        at = end + 1;
      }
    }
    return true;
  };
  cmd.add_option("--pp-stages", stages, "Layers per pipeline stage, e.g. 11,11,10")
      ->type_name("INT")
      ->expected(1, CLI::detail::expected_max_vector_size);
  add_choice(cmd, "--schedule", o.schedule, schedules, "pipeline schedule",
             "Pipeline schedule: " + choice_list(schedules))
      ->capture_default_str();
  cmd.add_option("--virtual-stages", o.virtual_stages, "Model chunks per rank (interleaved)")
      ->check(positive)
      ->capture_default_str();
  add_choice(cmd, "--pp-runtime", o.pp_runtime, pipeline_runtimes, "pipeline runtime",
             "What runs the pipeline, for what a stage keeps beside its activations: " +
                 choice_list(pipeline_runtimes))
      ->capture_default_str();
  cmd.add_option("--cp", o.cp, "Context-parallel degree")->check(positive)->capture_default_str();
  cmd.add_option("--ep", o.ep, "Expert-parallel degree")->check(positive)->capture_default_str();
  add_choice(cmd, "--offload", o.offload, offload_modes, "offload", choice_list(offload_modes))
      ->capture_default_str();
  add_choice(cmd, "--offload-to", o.offload_to, offload_targets, "offload target",
             choice_list(offload_targets))
      ->capture_default_str();
}

/// What is trained: LoRA, QLoRA or a selection.
inline void add_finetune_options(CLI::App& cmd, train_options& o) {
  cmd.add_option("--lora-rank", o.lora_rank, "LoRA rank (0: no LoRA)")
      ->check(non_negative)
      ->capture_default_str();
  cmd.add_option("--lora-targets", o.lora_targets,
                 "Comma-separated module names, or all-linear (default: peft's for the "
                 "model_type, the query and value projections: q_proj,v_proj; c_attn for GPT-2; "
                 "query,value for BERT; query_key_value for Falcon; with --qlora all-linear)");
  add_choice(cmd, "--lora-dtype", o.lora_dtype, float_formats, "LoRA format",
             choice_list(float_formats) +
                 ": the LoRA adapters' format (default: peft's, fp32 over 16-bit weights: "
                 "get_peft_model autocast_adapter_dtype=True)",
             torch_dtypes);
  cmd.add_flag("--qlora", o.qlora,
               "QLoRA: NF4 base (double quantization), bf16 embeddings and head, LoRA r=16 on "
               "all-linear unless set");
  cmd.add_flag("--expert-linears", o.expert_linears,
               "With LoRA or QLoRA on an MoE model: its routed experts and router are nn.Linear "
               "modules (transformers 4, unsloth's loader), which --lora-targets reach and --qlora "
               "quantizes; by default transformers 5's packed parameters, which neither does "
               "(bitsandbytes#1849)");
  cmd.add_option("--trainable", o.trainable,
                 "Train only kinds[:layers[:experts]], e.g. router or expert:0-5:0-1 (repeatable)");
}

/// The GPU, the allocator's reserve and what is printed.
inline void add_output_options(CLI::App& cmd, train_options& o) {
  cmd.add_option("--gpu,-g", o.gpu, "A GPU preset (see `vramfit gpus`) or a capacity such as 96GiB")
      ->capture_default_str();
  add_choice(cmd, "--reserve", o.reserve, reserve_models, "--reserve",
             "The caching allocator's reserve beyond the tensors: simulated (the allocator "
             "replayed over the step's tensors, docs/allocator.md; the default) or share (a "
             "fixed share of their peak; the default with --fragmentation-percent)")
      ->type_name(choice_type(reserve_models));
  cmd.add_option(
      "--alloc-conf", o.alloc_conf,
      "PYTORCH_CUDA_ALLOC_CONF, e.g. \"expandable_segments:True,max_split_size_mb:512\"");
  cmd.add_flag("--expandable-segments", o.expandable_segments,
               "Short for --alloc-conf expandable_segments:True");
  cmd.add_option("--fragmentation-percent", o.fragmentation_percent,
                 "The share of the tensors' peak that --reserve share adds (5, or 1 with "
                 "expandable segments, when not given)")
      ->check(CLI::Range(0, 1000));
  if (cmd.get_name() != "plan")  // plan's --gpus-per-node (plan_space.hpp) also sets this one
    cmd.add_option("--gpus-per-node", o.gpus_per_node,
                   "GPUs per node: NCCL's communicators within a node use NVLink (and NVLS), "
                   "those across nodes the network (ranks ordered tensor, context, data, "
                   "pipeline)")
        ->check(positive)
        ->capture_default_str();
  cmd.add_option("--nccl-channels", o.nccl_channels,
                 "Ring channels NCCL's topology search picks per communicator (an assumption: "
                 "24 read for an H100 node; NCCL_MIN_NCHANNELS/NCCL_MAX_NCHANNELS pin it)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  add_choice(cmd, "--nccl-version", o.nccl, nccl_versions, "--nccl-version",
             "NCCL release: 2.21 or 2.22 (2.22 and later, the default); their NVLS buffers "
             "differ")
      ->capture_default_str();
  add_metric_option(cmd, o.metric);
  add_estimate_format(cmd, o.format);
  add_choice(cmd, "--sweep", o.sweep, sweep_axes, "--sweep",
             "Repeat for doubling micro-batch or seq-len: micro-batch or seq-len");
  cmd.add_option("--sweep-max", o.sweep_max, "Last value of the sweep (default: 64 x the first)")
      ->check(positive);
  cmd.add_flag("--check", o.check, "Exit with status 1 when the plan does not fit");
  cmd.add_flag("--timeline", o.timeline,
               "Show the step as allocations and frees (with -f svg: a plot of the step)");
}

/// Every option of `train` (and of `plan`, `min-gpus`), in --help's order.
inline void add_train_options(CLI::App& cmd, train_options& o) {
  add_model_options(cmd, o);
  add_batch_options(cmd, o);
  add_parallel_options(cmd, o);
  add_finetune_options(cmd, o);
  add_output_options(cmd, o);
  add_hf_trainer_aliases(cmd);
}

/// Refuses an option given where it changes nothing, so that none is silently ignored: a
/// companion without the option it qualifies (--zero-impl without --zero), or one that the
/// subcommand decides itself (min-gpus's --dp). Read from the parser's counts, so what a
/// --framework fills in later is not mistaken for the user's.
inline void reject_inapplicable(const CLI::App& cmd, const train_options& o) {
  const auto given = [&](const char* name) { return cmd.get_option(name)->count() > 0; };
  const auto refuse = [](const std::string& what) { detail::raise(what); };
  const bool plan = cmd.get_name() == "plan";
  if (given("--zero-impl") && !o.zero)
    refuse(std::string("--zero-impl applies with --zero only") +
           (plan ? " (plan: --sharding names the implementation)" : ""));
  // DeepSpeed's buffers: with a DeepSpeed ZeRO stage (plan: whenever it searches DeepSpeed).
  const bool deepspeed =
      o.zero ? *o.zero > 0 && o.zero_impl == shard_implementation::deepspeed : plan;
  if ((given("--reduce-bucket") || given("--overlap-comm")) && !deepspeed)
    refuse("--reduce-bucket and --overlap-comm apply with --zero 1, 2 or 3 of DeepSpeed only");
  for (const char* name : {"--prefetch-bucket", "--sub-group", "--max-live-parameters",
                           "--max-reuse-distance", "--persistence-threshold"})
    if (given(name) && !(deepspeed && o.zero == 3))
      refuse(std::string(name) + " applies with --zero 3 of DeepSpeed only");
  if (given("--overlap-comm") && o.zero == 3)
    refuse("--overlap-comm: ZeRO-3 reduces through its one buffer either way");
  if (plan && given("--keep-grads"))
    refuse(
        "--keep-grads applies to vramfit train, min-gpus and compare: plan searches sharded "
        "layouts, whose gradients are no per-parameter .grad tensors");
  // plan: --sharding fsdp or any searches FSDP too (plan_space.hpp checks it there).
  if (!plan && given("--fsdp-version") && !o.fsdp)
    refuse("--fsdp-version applies with --fsdp only");
  if (!plan && given("--reshard-after-forward") &&
      !(o.fsdp == fsdp_strategy::full_shard && o.fsdp_version == 2))
    refuse("--reshard-after-forward applies with --fsdp full --fsdp-version 2 only");
  if (!plan &&
      (given("--backward-prefetch") || given("--forward-prefetch") ||
       given("--limit-all-gathers")) &&
      !(o.fsdp && o.fsdp != fsdp_strategy::no_shard && o.fsdp_version == 1))
    refuse(
        "--backward-prefetch, --forward-prefetch and --limit-all-gathers apply with --fsdp full, "
        "grad-op or hybrid and --fsdp-version 1 only");
  if (given("--offload-to") && o.offload == offload_mode::none)
    refuse("--offload-to applies with --offload optimizer or all only");
  if (given("--sweep-max") && !o.sweep) refuse("--sweep-max applies with --sweep only");
  // plan searches the pipeline degree: its schedule and chunks fix the candidates with one.
  if (!plan && given("--schedule") && o.pp == 1)
    refuse("--schedule applies with --pp 2 or more only");
  if (!plan && given("--pp-runtime") && o.pp == 1)
    refuse("--pp-runtime applies with --pp 2 or more only");
  if (!plan && given("--virtual-stages") && o.schedule != pipeline_schedule::interleaved)
    refuse("--virtual-stages applies with --schedule interleaved only");
  if (o.dtypes && given("--precision"))
    refuse("--dtypes gives a row per precision: leave out --precision");
  if (o.dtypes && (o.sweep || o.timeline || o.explain || o.check || o.format == output_format::svg))
    refuse(
        "--dtypes compares one estimate per precision (table, markdown or json): leave out "
        "--sweep, --timeline, --explain, --check and -f svg");
  // NCCL's buffers: a job of more than one GPU (min-gpus and plan choose the degrees).
  const bool one_gpu = o.dp == 1 && o.tp == 1 && o.pp == 1 && o.cp == 1;
  for (const char* name : {"--gpus-per-node", "--nccl-channels", "--nccl-version"})
    if (!plan && cmd.get_name() != "min-gpus" && one_gpu && given(name))
      refuse(std::string(name) + " applies to a job of more than one GPU (--dp, --tp, --pp or " +
             "--cp) only: one GPU has no NCCL communicator");
  if (cmd.get_name() == "min-gpus" && given("--dp"))
    refuse("min-gpus searches the data-parallel degree: leave out --dp");
}

/// --framework's defaults for train and plan, which its parser writes into `o`, after refusing
/// what would be ignored (the one call every training subcommand makes with its parser).
inline void apply_framework(CLI::App& cmd, train_options& o) {
  reject_inapplicable(cmd, o);
  o.model_code_given = cmd.get_option("--model-code")->count() > 0;
  if (o.framework.empty()) return;
  const cli::framework& f = framework_named(o.framework, cmd.get_name());
  const bool lora = o.lora_rank > 0 || o.qlora;
  apply_framework(f, cmd, [&](recipe r) {
    switch (r) {
      case recipe::full_finetune:
        return !lora;
      case recipe::lora:
        return lora;
      case recipe::fsdp_with_pipeline:  // plan searches FSDP with resharding (docs/planner.md)
        return cmd.get_name() == "train" && o.pp > 1 && o.fsdp == fsdp_strategy::full_shard;
      case recipe::pipeline:  // plan: for the candidates with a pipeline
        return o.pp > 1 || cmd.get_name() == "plan";
      case recipe::plan:
        return cmd.get_name() == "plan";
      case recipe::fsdp1:
        return cmd.get_name() != "plan" && o.fsdp && o.fsdp != fsdp_strategy::no_shard &&
               o.fsdp_version == 1;
      case recipe::data_parallel:  // min-gpus searches the data-parallel degree
        return !o.zero && (cmd.get_name() == "min-gpus" ||
                           (cmd.get_name() == "train" && (o.dp > 1 || o.cp > 1)));
      default:
        return true;
    }
  });
}

}  // namespace vramfit::cli
