// SPDX-License-Identifier: MIT
// `vramfit train`'s options (plan reads the same ones), their registration and --framework's
// defaults for them.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inputs.hpp"

namespace vramfit::cli {

/// Everything `vramfit train` reads.
struct train_options {
  std::string model = "llama-3-8b";
  std::string precision = "bf16-fp32-master";
  std::string grad_dtype;  ///< empty: the policy's own
  std::string optimizer = "adamw";
  std::string framework;  ///< its defaults fill in what is not given (frameworks.hpp)
  std::optional<std::string> optimizer_impl;  ///< unset: what the optimizer's library picks
  bool optimizer_in_backward = false;
  bool amsgrad = false, centered = false;
  std::optional<double> momentum;
  std::int64_t micro_batch = 1;
  std::int64_t seq_len = 0;  ///< 0: the model's default_sequence()
  std::int64_t grad_accum = 1;
  std::string attention = "flash";
  std::optional<double> dropout;
  std::string recompute = "none";
  std::int64_t recompute_layers = -1;
  std::int64_t recompute_every = 0;
  bool non_reentrant = false;
  std::string activation_offload = "none";
  std::string loss = "fp32-upcast";
  std::int64_t dp = 1;
  std::optional<int> zero;
  std::string zero_impl = "deepspeed";
  std::optional<std::string> reduce_bucket;  ///< DeepSpeed reduce_bucket_size; unset: 5e8
  bool overlap_comm = false;
  std::string fsdp;
  std::int64_t fsdp_group = 0;
  std::int64_t fsdp_version = 1;
  std::string reshard_after_forward;
  std::int64_t tp = 1;
  bool sp = false;
  std::int64_t pp = 1;
  std::vector<std::int64_t> pp_stages;
  std::string schedule = "1f1b";
  std::int64_t virtual_stages = 1;
  std::int64_t cp = 1;
  std::int64_t ep = 1;
  std::string offload = "none";
  std::string offload_to = "cpu";
  std::int64_t lora_rank = 0;
  std::optional<std::string> lora_targets;  ///< unset: q_proj,v_proj (QLoRA: all-linear)
  bool qlora = false;
  bool explain = false;  ///< train only: the saved tensors of a layer instead of the estimate
  /// Not an option: the model's config.json quantization_config (for_model sets it).
  std::optional<weight_layout> checkpoint;
  std::string lora_dtype;  ///< empty: peft's (fp32 adapters over a 16-bit base)
  std::vector<std::string> trainable;
  std::string gpu = "h100";
  bool expandable_segments = false;
  std::string alloc_conf;
  std::string reserve;  ///< share or simulated; unset: simulated, share with a percentage
  std::int64_t fragmentation_percent = -1;
  std::string format = "table";
  std::string sweep;
  std::int64_t sweep_max = 0;
  bool check = false;
  bool timeline = false;
};

/// The model, its precision and its optimizer.
inline void add_model_options(CLI::App& cmd, train_options& o) {
  cmd.add_option("--model,-m", o.model,
                 "A preset (see `vramfit models`), a config.json path, or its text")
      ->capture_default_str();
  cmd.add_option("--framework", o.framework,
                 "torchtitan, torchtune, deepspeed, megatron, fsdp1 or hf-trainer: its defaults "
                 "for the options not given (vramfit frameworks lists them)");
  cmd.add_option("--precision", o.precision, choice_list(precisions))->capture_default_str();
  cmd.add_option("--grad-dtype", o.grad_dtype,
                 choice_list(float_formats) +
                     ": the gradients' format where an fp32 master allows a choice (default: the "
                     "policy's; bf16-fp32-master keeps fp32 as Megatron-LM does)");
  cmd.add_option("--optimizer", o.optimizer, choice_list(optimizers))->capture_default_str();
  cmd.add_option("--optimizer-impl", o.optimizer_impl,
                 choice_list(optimizer_impls) + "; default: what torch.optim picks on CUDA");
  cmd.add_flag("--amsgrad", o.amsgrad, "Adam, AdamW: keep max_exp_avg_sq (amsgrad=True)");
  cmd.add_option("--momentum", o.momentum,
                 "SGD, RMSprop: a momentum factor; above 0 keeps a momentum buffer");
  cmd.add_flag("--centered", o.centered, "RMSprop: keep grad_avg (centered=True)");
  cmd.add_flag("--optimizer-in-backward", o.optimizer_in_backward,
               "Step each parameter as its gradient is ready and free the gradient (torchtune "
               "optimizer_in_bwd): no full set of gradients");
}

/// The batch, the attention and what the activations keep.
inline void add_batch_options(CLI::App& cmd, train_options& o) {
  cmd.add_option("--micro-batch,-b", o.micro_batch, "Sequences per micro-batch")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--seq-len,-s", o.seq_len,
                 "Tokens per sequence (default: 2048, a ViT's image tokens, or a learned position "
                 "table's rows when fewer)")
      ->check(positive);
  cmd.add_option("--grad-accum", o.grad_accum,
                 "Micro-batches per optimizer step (gradient accumulation, pipeline)")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--attention", o.attention, choice_list(attentions))->capture_default_str();
  cmd.add_option("--dropout", o.dropout,
                 "Dropout probability; overrides the model's (GPT-2, BERT: 0.1)");
  cmd.add_option("--recompute", o.recompute, choice_list(recomputes))->capture_default_str();
  cmd.add_option("--recompute-layers", o.recompute_layers,
                 "Full recompute for this many layers per stage (-1: all)")
      ->capture_default_str();
  cmd.add_option("--recompute-every", o.recompute_every,
                 "With --recompute full: only every Nth layer (torchtitan's per-layer SAC, "
                 "selective_ac_option N)")
      ->check(positive);
  cmd.add_option("--activation-offload", o.activation_offload, choice_list(activation_offloads))
      ->capture_default_str();
  cmd.add_flag("--non-reentrant", o.non_reentrant,
               "Checkpoint with use_reentrant=False (Hugging Face's default is True)");
  cmd.add_option("--loss", o.loss, choice_list(losses))->capture_default_str();
}

/// The parallel layout, the sharding and the offload.
inline void add_parallel_options(CLI::App& cmd, train_options& o) {
  cmd.add_option("--dp", o.dp, "Data-parallel degree")->check(positive)->capture_default_str();
  cmd.add_option("--zero", o.zero, "ZeRO stage over the data-parallel ranks: 0, 1, 2 or 3");
  cmd.add_option("--zero-impl", o.zero_impl, choice_list(zero_implementations))
      ->capture_default_str();
  cmd.add_option("--reduce-bucket", o.reduce_bucket,
                 "DeepSpeed ZeRO's reduce_bucket_size: gradient elements per reduce buffer, such "
                 "as 2e8 (default 5e8)");
  cmd.add_flag("--overlap-comm", o.overlap_comm,
               "DeepSpeed ZeRO-1/2 overlap_comm: a second reduce buffer");
  cmd.add_option("--fsdp", o.fsdp,
                 "PyTorch FSDP over the data-parallel ranks: " + choice_list(fsdp_strategies));
  cmd.add_option("--fsdp-group", o.fsdp_group, "Ranks per shard group for --fsdp hybrid");
  cmd.add_option("--fsdp-version", o.fsdp_version,
                 "1: FullyShardedDataParallel; 2: fully_shard (fp32 sharded parameters under "
                 "mixed precision, gradients reduced through a copy-in buffer)")
      ->capture_default_str();
  cmd.add_option("--reshard-after-forward", o.reshard_after_forward,
                 "FSDP2 full sharding: true (the default), false (units stay gathered until "
                 "their backward) or N (resharded over N ranks)");
  cmd.add_option("--tp", o.tp, "Tensor-parallel degree")->check(positive)->capture_default_str();
  cmd.add_flag("--sp", o.sp, "Sequence parallelism (with --tp)");
  cmd.add_option("--pp", o.pp, "Pipeline-parallel degree")->check(positive)->capture_default_str();
  cmd.add_option("--pp-stages", o.pp_stages, "Layers per pipeline stage, e.g. 11,11,10")
      ->delimiter(',');
  cmd.add_option("--schedule", o.schedule, "Pipeline schedule: " + choice_list(schedules))
      ->capture_default_str();
  cmd.add_option("--virtual-stages", o.virtual_stages, "Model chunks per rank (interleaved)")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--cp", o.cp, "Context-parallel degree")->check(positive)->capture_default_str();
  cmd.add_option("--ep", o.ep, "Expert-parallel degree")->check(positive)->capture_default_str();
  cmd.add_option("--offload", o.offload, choice_list(offload_modes))->capture_default_str();
  cmd.add_option("--offload-to", o.offload_to, choice_list(offload_targets))->capture_default_str();
}

/// What is trained: LoRA, QLoRA or a selection.
inline void add_finetune_options(CLI::App& cmd, train_options& o) {
  cmd.add_option("--lora-rank", o.lora_rank, "LoRA rank (0: no LoRA)");
  cmd.add_option("--lora-targets", o.lora_targets,
                 "Comma-separated module names, or all-linear (default: q_proj,v_proj; with "
                 "--qlora all-linear)");
  cmd.add_option("--lora-dtype", o.lora_dtype,
                 choice_list(float_formats) +
                     ": the LoRA adapters' format (default: peft's, fp32 over 16-bit weights: "
                     "get_peft_model autocast_adapter_dtype=True)");
  cmd.add_flag("--qlora", o.qlora,
               "QLoRA: NF4 base (double quantization), bf16 embeddings and head, LoRA r=16 on "
               "all-linear unless set");
  cmd.add_option("--trainable", o.trainable,
                 "Train only kinds[:layers[:experts]], e.g. router or expert:0-5:0-1 (repeatable)");
}

/// The GPU, the allocator's reserve and what is printed.
inline void add_output_options(CLI::App& cmd, train_options& o) {
  cmd.add_option("--gpu,-g", o.gpu, "A GPU preset (see `vramfit gpus`) or a capacity such as 96GiB")
      ->capture_default_str();
  cmd.add_option("--reserve", o.reserve,
                 "The caching allocator's reserve beyond the tensors: simulated (the allocator "
                 "replayed over the step's tensors, docs/allocator.md; the default) or share (a "
                 "fixed share of their peak; the default with --fragmentation-percent)")
      ->check(CLI::IsMember({"share", "simulated"}));
  cmd.add_option(
      "--alloc-conf", o.alloc_conf,
      "PYTORCH_CUDA_ALLOC_CONF, e.g. \"expandable_segments:True,max_split_size_mb:512\"");
  cmd.add_flag("--expandable-segments", o.expandable_segments,
               "Short for --alloc-conf expandable_segments:True");
  cmd.add_option("--fragmentation-percent", o.fragmentation_percent,
                 "The share of the tensors' peak that --reserve share adds (5, or 1 with "
                 "expandable segments, when not given)")
      ->check(CLI::Range(0, 1000));
  add_estimate_format(cmd, o.format);
  cmd.add_option("--sweep", o.sweep,
                 "Repeat for doubling micro-batch or seq-len: micro-batch or seq-len");
  cmd.add_option("--sweep-max", o.sweep_max, "Last value of the sweep (default: 64 x the first)");
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
      o.zero ? *o.zero > 0 && cli::choose(zero_implementations, o.zero_impl,
                                          "ZeRO implementation") == shard_implementation::deepspeed
             : plan;
  if ((given("--reduce-bucket") || given("--overlap-comm")) && !deepspeed)
    refuse("--reduce-bucket and --overlap-comm apply with --zero 1, 2 or 3 of DeepSpeed only");
  if (given("--overlap-comm") && o.zero == 3)
    refuse("--overlap-comm: ZeRO-3 reduces through its one buffer either way");
  // plan: --sharding fsdp or any searches FSDP too (plan_space.hpp checks it there).
  if (!plan && given("--fsdp-version") && o.fsdp.empty())
    refuse("--fsdp-version applies with --fsdp only");
  if (given("--offload-to") &&
      cli::choose(offload_modes, o.offload, "offload") == offload_mode::none)
    refuse("--offload-to applies with --offload optimizer or all only");
  if (given("--sweep-max") && o.sweep.empty()) refuse("--sweep-max applies with --sweep only");
  // plan searches the pipeline degree: its schedule and chunks fix the candidates with one.
  if (!plan && given("--schedule") && o.pp == 1)
    refuse("--schedule applies with --pp 2 or more only");
  if (!plan && given("--virtual-stages") && o.schedule != "interleaved")
    refuse("--virtual-stages applies with --schedule interleaved only");
  if (cmd.get_name() == "min-gpus" && given("--dp"))
    refuse("min-gpus searches the data-parallel degree: leave out --dp");
}

/// --framework's defaults for train and plan, after refusing what would be ignored (the one call
/// every training subcommand makes with its parser).
inline void apply_framework(const CLI::App& cmd, train_options& o) {
  reject_inapplicable(cmd, o);
  if (o.framework.empty()) return;
  const cli::framework& f = framework_named(o.framework, cmd.get_name());
  const bool lora = o.lora_rank > 0 || o.qlora;
  auto applies = [&](recipe r) {
    switch (r) {
      case recipe::full_finetune:
        return !lora;
      case recipe::lora:
        return lora;
      case recipe::fsdp_with_pipeline:  // plan searches FSDP with resharding (docs/planner.md)
        return cmd.get_name() == "train" && o.pp > 1 && o.fsdp == "full";
      default:
        return true;
    }
  };
  apply_framework(f, cmd, applies, [&](std::string_view option, std::string v) {
    if (option == "--precision") o.precision = v;
    if (option == "--optimizer") o.optimizer = v;
    if (option == "--optimizer-impl") o.optimizer_impl = v;
    if (option == "--optimizer-in-backward") o.optimizer_in_backward = true;
    if (option == "--recompute") o.recompute = v;
    if (option == "--non-reentrant") o.non_reentrant = true;
    if (option == "--loss") o.loss = v;
    if (option == "--fsdp-version") o.fsdp_version = std::stoll(v);
    if (option == "--zero-impl") o.zero_impl = v;
    if (option == "--reshard-after-forward") o.reshard_after_forward = v;
    if (option == "--lora-dtype") o.lora_dtype = v;
  });
}

}  // namespace vramfit::cli
