// SPDX-License-Identifier: MIT
// `vramfit plan`'s search space from the train options given, and the train command line that
// reproduces each candidate.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "ecosystem_aliases.hpp"
#include "input_checks.hpp"
#include "inputs.hpp"
#include "plan_view.hpp"
#include "train_setup.hpp"

namespace vramfit::cli {

/// `vramfit plan`: the space to search and the cluster its ranking assumes.
struct plan_options {
  std::int64_t gpus = 8;
  std::int64_t global_batch = 0;
  std::int64_t top = 10;
  bool all = false;
  std::int64_t max_tp = 0, max_pp = 0, max_cp = 0;
  bool no_offload = false;
  std::optional<sharding_family> sharding;
  cluster net{};
  std::int64_t explain = 0;  ///< the ranked layout whose step time to break down; 0: none
};

/// The train options `plan` decides itself (given, they fix that knob or make no sense), or
/// writes beside the layout it chose (DeepSpeed's buffers, where it chose DeepSpeed).
inline const std::set<std::string> decided_by_plan = {"--dp",
                                                      "--tp",
                                                      "--sp",
                                                      "--tp-comm-overlap",
                                                      "--pp",
                                                      "--pp-stages",
                                                      "--cp",
                                                      "--ep",
                                                      "--zero",
                                                      "--zero-impl",
                                                      "--reduce-bucket",
                                                      "--prefetch-bucket",
                                                      "--sub-group",
                                                      "--max-live-parameters",
                                                      "--max-reuse-distance",
                                                      "--persistence-threshold",
                                                      "--overlap-comm",
                                                      "--fsdp",
                                                      "--fsdp-group",
                                                      "--fsdp-version",
                                                      "--recompute",
                                                      "--micro-batch",
                                                      "--grad-accum",
                                                      "--schedule",
                                                      "--virtual-stages",
                                                      "--pp-runtime",
                                                      "--offload",
                                                      "--offload-to",
                                                      "--model",
                                                      "--gpu",
                                                      "--format",
                                                      "--check",
                                                      "--timeline",
                                                      "--sweep",
                                                      "--sweep-max"};

/// The `vramfit train` arguments that reproduce candidate `c`'s memory: the model, the GPU, the
/// train options the user gave `plan` that it does not decide, then the candidate's layout.
inline std::vector<std::string> train_argv(const CLI::App& cmd,
                                           const std::vector<std::string>& train,
                                           const train_options& o, const plan_candidate& c) {
  std::vector<std::string> argv{"vramfit", "train", "--model", o.model, "--gpu", o.gpu};
  for (const CLI::Option* opt : cmd.get_options()) {
    const std::string name = long_name(*opt);
    if (opt->count() == 0 || decided_by_plan.count(name) || is_converted_alias(name) ||
        std::find(train.begin(), train.end(), name) == train.end())
      continue;
    if (opt->get_expected_min() == 0) {  // a flag
      argv.push_back(name);
      continue;
    }
    for (const std::string& value : opt->results()) argv.insert(argv.end(), {name, value});
  }
  const layout& l = c.layout;
  auto add = [&](const char* name, std::int64_t v) {
    argv.insert(argv.end(), {name, std::to_string(v)});
  };
  add("--dp", l.data);
  if (l.tensor > 1) add("--tp", l.tensor);
  if (l.sequence) argv.push_back("--sp");
  if (l.sequence && o.tp_overlap != tp_comm_overlap::none)  // the search's plan_of
    argv.insert(argv.end(), {"--tp-comm-overlap", name_of(tp_overlaps, o.tp_overlap)});
  if (l.pipeline > 1) add("--pp", l.pipeline);
  if (c.virtual_stages > 1) {
    argv.insert(argv.end(), {"--schedule", "interleaved"});
    add("--virtual-stages", c.virtual_stages);
  } else if (o.schedule == pipeline_schedule::gpipe && l.pipeline > 1) {  // train: only with PP
    argv.insert(argv.end(), {"--schedule", "gpipe"});
  }
  if (l.pipeline > 1 && o.pp_runtime != pipeline_runtime::megatron)
    argv.insert(argv.end(), {"--pp-runtime", name_of(pipeline_runtimes, o.pp_runtime)});
  if (l.context > 1) add("--cp", l.context);
  if (l.expert > 1) add("--ep", l.expert);
  if (l.implementation == shard_implementation::fsdp) {
    argv.insert(argv.end(), {"--fsdp", l.shard_group > 0           ? "hybrid"
                                       : l.zero == sharding::zero2 ? "grad-op"
                                                                   : "full"});
    if (l.shard_group > 0) add("--fsdp-group", l.shard_group);
    if (o.fsdp_version != 1) add("--fsdp-version", o.fsdp_version);
  } else if (l.zero != sharding::none) {
    add("--zero", static_cast<int>(l.zero));
    argv.insert(argv.end(),
                {"--zero-impl",
                 l.implementation == shard_implementation::megatron ? "megatron" : "deepspeed"});
    // DeepSpeed's buffers, as given, where train takes them.
    if (l.implementation == shard_implementation::deepspeed) {
      if (o.reduce_bucket) argv.insert(argv.end(), {"--reduce-bucket", *o.reduce_bucket});
      if (o.overlap_comm && l.zero != sharding::zero3) argv.push_back("--overlap-comm");
      if (l.zero == sharding::zero3) {
        if (o.prefetch_bucket) argv.insert(argv.end(), {"--prefetch-bucket", *o.prefetch_bucket});
        if (o.sub_group) argv.insert(argv.end(), {"--sub-group", *o.sub_group});
        if (o.max_live) argv.insert(argv.end(), {"--max-live-parameters", *o.max_live});
        if (o.reuse_distance) argv.insert(argv.end(), {"--max-reuse-distance", *o.reuse_distance});
        if (o.persistence) argv.insert(argv.end(), {"--persistence-threshold", *o.persistence});
      }
    }
  }
  argv.insert(argv.end(), {"--recompute", cli::name_of(cli::recomputes, c.recompute)});
  if (c.recompute == recompute_kind::full && c.recompute_layers > 0)
    add("--recompute-layers", c.recompute_layers);
  add("--micro-batch", c.micro_batch);
  if (c.micro_batches > 1) add("--grad-accum", c.micro_batches);
  if (l.optimizer_offload != offload_target::none)
    argv.insert(argv.end(), {"--offload", cli::offload_name(l)});
  return argv;
}

/// A train option that makes no sense to a search, and why.
struct unsearchable_option {
  const char* name;
  const char* why;
};

inline constexpr const char* offloads_last =
    "the plan offloads only when nothing else fits (--no-offload: never)";
inline constexpr const char* recomputes_fewest = "the plan recomputes the fewest layers that fit";
inline constexpr unsearchable_option unsearchable_options[] = {
    {"--grad-accum", "the plan derives micro-batches from --global-batch"},
    {"--pp-stages", "the plan splits the layers evenly"},
    {"--offload", offloads_last},
    {"--offload-to", offloads_last},
    {"--recompute-layers", recomputes_fewest},
    {"--recompute-every", recomputes_fewest},
    {"--sp",
     "the plan takes sequence parallelism with every tensor-parallel degree the sequence divides "
     "by"}};

/// Refuses the train options that make no sense to a search, each with its reason.
inline void refuse_unsearchable(const CLI::App& cmd) {
  for (const unsearchable_option& u : unsearchable_options)
    if (cmd.get_option(u.name)->count() > 0)
      detail::raise(std::string(u.name) + " is not a plan option: " + u.why);
}

/// The options of `plan` beside the training ones: the GPUs, the search's bounds, the network.
inline void add_plan_options(CLI::App& cmd, plan_options& p) {
  cmd.add_option("--gpus", p.gpus, "GPUs every candidate uses")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--global-batch", p.global_batch,
                 "Sequences per optimizer step (default: one per GPU)")
      ->check(positive);
  cmd.add_option("--top", p.top, "How many layouts to show")->capture_default_str();
  cmd.add_flag("--all", p.all, "List every candidate with its verdict (evaluates all: slower)");
  cmd.add_option("--max-tp", p.max_tp,
                 "Largest tensor-parallel degree (default: the GPUs of a node)")
      ->check(positive);
  cmd.add_option("--max-pp", p.max_pp, "Largest pipeline degree (default: the layers)")
      ->check(positive);
  cmd.add_option("--max-cp", p.max_cp, "Largest context-parallel degree")->check(positive);
  cmd.add_flag("--no-offload", p.no_offload, "Never offload to the host");
  add_choice(cmd, "--sharding", p.sharding, sharding_families, "sharding",
             "Sharding to search: deepspeed (default), megatron, fsdp or any");
  cmd.add_option("--gpus-per-node", p.net.gpus_per_node, "GPUs per node")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--intra-bw", p.net.intra_node_gb_per_s,
                 "GB/s per GPU and direction within a node (default: the GPU's link)");
  cmd.add_option("--inter-bw", p.net.inter_node_gb_per_s,
                 "GB/s per GPU and direction between nodes")
      ->capture_default_str();
  cmd.add_option("--host-bw", p.net.host_gb_per_s, "GB/s per GPU to the host, for offload")
      ->capture_default_str();
  cmd.add_option("--peak-tflops", p.net.peak_tflops,
                 "Dense 16-bit TFLOP/s per GPU, for MFU (default: the GPU's datasheet figure)");
  cmd.add_option("--matmul-tflops", p.net.matmul_tflops,
                 "The fastest 16-bit matmul measured per GPU (default: the GPU's)");
  cmd.add_option("--memory-bw", p.net.memory_gb_per_s,
                 "GB/s of GPU memory bandwidth (default: the GPU's datasheet figure)");
  cmd.add_option("--compute-efficiency", p.net.compute_efficiency,
                 "Fraction of the matmul and memory rates the step's kernels keep up")
      ->capture_default_str();
  cmd.add_option("--network-efficiency", p.net.network_efficiency,
                 "Fraction of the link bandwidth the collectives reach")
      ->capture_default_str();
  cmd.add_option("--explain", p.explain,
                 "Break ranked layout N's step time down by cause, beside its memory")
      ->check(CLI::Range(std::int64_t{1}, static_cast<std::int64_t>(search_result::max_top)));
}

/// Refuses a network figure that is not a finite positive number within reach (a petabyte a
/// second, an exaflop), or an efficiency above 1, naming its option; given 0 (the GPU's figure)
/// would change nothing.
inline void check_network(const CLI::App& cmd, const cluster& net) {
  const struct {
    const char* option;
    double value;
  } figures[] = {{"--intra-bw", net.intra_node_gb_per_s}, {"--inter-bw", net.inter_node_gb_per_s},
                 {"--host-bw", net.host_gb_per_s},        {"--peak-tflops", net.peak_tflops},
                 {"--matmul-tflops", net.matmul_tflops},  {"--memory-bw", net.memory_gb_per_s}};
  for (const auto& f : figures)
    if (cmd.get_option(f.option)->count() > 0)
      check_positive_number(f.value, f.option, 1e6, "1,000,000");
  check_positive_number(net.compute_efficiency, "--compute-efficiency", 1, "1 (the whole rate)");
  check_positive_number(net.network_efficiency, "--network-efficiency", 1, "1 (the whole link)");
}

/// The search space: what the user fixed with train options, bounded by the plan options.
inline search_space space_of(const CLI::App& cmd, const train_options& o, const plan_options& p) {
  const auto given = [&](const char* name) { return cmd.get_option(name)->count() > 0; };
  refuse_unsearchable(cmd);
  check_network(cmd, p.net);
  if (p.top <= 0 || static_cast<std::size_t>(p.top) > search_result::max_top)
    detail::raise("--top must be between 1 and " + std::to_string(search_result::max_top) +
                  ", got " + std::to_string(p.top));
  search_space s{.gpus = p.gpus, .global_batch = p.global_batch};
  if (given("--dp")) s.data = o.dp;
  if (given("--tp")) s.tensor = o.tp;
  if (given("--pp")) s.pipeline = o.pp;
  if (given("--cp")) s.context = o.cp;
  if (given("--ep")) s.expert = o.ep;
  if (given("--virtual-stages")) s.virtual_stages = o.virtual_stages;
  if (given("--micro-batch")) s.micro_batch = o.micro_batch;
  if (given("--schedule") && o.schedule != pipeline_schedule::interleaved) s.virtual_stages = 1;
  if (given("--recompute")) s.recompute = static_cast<int>(o.recompute);
  for (const auto& [option, most] :
       {std::pair{"--max-tp", p.max_tp}, std::pair{"--max-pp", p.max_pp},
        std::pair{"--max-cp", p.max_cp}})
    if (most > p.gpus)
      detail::raise(std::string(option) + " " + std::to_string(most) + " bounds nothing on " +
                    std::to_string(p.gpus) + " GPUs (--gpus)");
  s.max_tensor = p.max_tp;
  s.max_pipeline = p.max_pp;
  s.max_context = p.max_cp;
  s.try_offload = !p.no_offload;
  s.top = static_cast<std::size_t>(p.top);
  s.prune = !p.all;
  s.net = p.net;
  // The sharding: --sharding names a family; --zero (with --zero-impl) or --fsdp fix a stage.
  std::optional<sharding_family> family = p.sharding;
  const sharding_given fixed = sharding_of(o);
  if (fixed.stage) {
    const shard_implementation impl = fixed.implementation;
    if (impl == shard_implementation::paper)
      detail::raise("plan searches deepspeed's and megatron's ZeRO, not the paper's");
    const sharding_family f = impl == shard_implementation::fsdp       ? sharding_family::fsdp
                              : impl == shard_implementation::megatron ? sharding_family::megatron
                                                                       : sharding_family::deepspeed;
    if (family && *family != f && *family != sharding_family::any)
      detail::raise(std::string("--sharding ") + name_of(sharding_families, *p.sharding) +
                    " contradicts the --zero/--fsdp given");
    family = f;
    s.zero = static_cast<int>(*fixed.stage);
    s.shard_group = fixed.shard_group;
  }
  if (!o.reshard_after_forward.empty())
    detail::raise(
        "plan searches FSDP with reshard_after_forward=True; give "
        "--reshard-after-forward to train");
  for (const char* name : {"--backward-prefetch", "--forward-prefetch", "--limit-all-gathers"})
    if (given(name))
      detail::raise(std::string("plan searches FSDP1 with its defaults (BACKWARD_PRE, no forward "
                                "prefetch, the rate limiter); give ") +
                    name + " to train");
  s.sharding = family.value_or(sharding_family::deepspeed);
  // The FSDP API of the FSDP candidates: with none searched, it would change nothing.
  if (given("--fsdp-version") && s.sharding != sharding_family::fsdp &&
      s.sharding != sharding_family::any)
    detail::raise("--fsdp-version applies with --fsdp, --sharding fsdp or --sharding any only");
  return s;
}

}  // namespace vramfit::cli
