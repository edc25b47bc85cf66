// SPDX-License-Identifier: MIT
// `vramfit plan`: the ranked layouts, with a progress bar while the search runs.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

#include "plan_space.hpp"
#include "plan_view.hpp"
#include "sizes.hpp"
#include "train_setup.hpp"

namespace vramfit::cli {

inline bool stderr_is_terminal() {
#if __has_include(<unistd.h>)
  return isatty(STDERR_FILENO) != 0;
#else
  return false;
#endif
}

/// A progress bar on stderr once a search has run for half a second, when stderr is a terminal.
class progress_bar {
 public:
  void operator()(std::int64_t done, std::int64_t total) {
    if (!terminal_) return;
    const double elapsed = std::chrono::duration<double>(clock::now() - start_).count();
    if (elapsed < 0.5 || done * 100 / total == shown_) return;
    shown_ = done * 100 / total;
    std::cerr << "\rvramfit: searching layouts " << shown_ << "% (" << done << " of " << total
              << " structures)" << std::flush;
    drawn_ = true;
  }
  ~progress_bar() {
    if (drawn_) std::cerr << "\r" << std::string(72, ' ') << "\r" << std::flush;
  }

 private:
  using clock = std::chrono::steady_clock;
  bool terminal_ = stderr_is_terminal();
  clock::time_point start_ = clock::now();
  std::int64_t shown_ = -1;
  bool drawn_ = false;
};

/// The verdicts as the JSON and the table name them, in rejection's order.
inline constexpr const char* rejection_names[rejection_count] = {
    "ranked", "does_not_fit", "breaks_a_rule", "unsupported", "batch_indivisible",
    "slower", "outranked"};

/// A candidate's verdict as the table and JSON name it: its broken or framework rule, if any.
inline const char* verdict_name(const plan_candidate& c) {
  if (c.verdict == rejection::breaks_a_rule) return to_string(c.rule);
  if (c.verdict == rejection::unsupported) return to_string(c.support);
  return rejection_names[static_cast<int>(c.verdict)];
}

/// The training options on one GPU: the model, precision, optimizer, fine-tuning and batch stay;
/// the search decides the layout, micro-batch and recompute.
inline train_options on_one_gpu(train_options o) {
  o.dp = o.tp = o.pp = o.cp = o.ep = o.virtual_stages = 1;
  o.micro_batch = o.grad_accum = 1;
  o.sp = false;
  o.tp_overlap = tp_comm_overlap::none;  // needs SP: run_plan gives it the base after the check
  o.zero.reset();
  o.fsdp.reset();
  o.fsdp_group = 0;
  if (o.schedule == pipeline_schedule::interleaved) o.schedule = pipeline_schedule::one_f_one_b;
  return o;
}

/// What `plan` found and says about it.
struct plan_found {
  search_result r;
  std::vector<ranked_layout> ranked;   ///< the best, each with the `train` command that shows it
  std::vector<plan_candidate> listed;  ///< every candidate, with --all
  std::string title;
  std::string assumptions;  ///< the step-time estimate's figures, said beside every answer
};

/// The sentence that says on what the ranking rests.
inline std::string plan_assumptions(const search_space& space, const gpu& device) {
  const cluster_figures f = figures_of(space.net, device);
  const cluster& c = space.net;
  char text[600];
  std::snprintf(
      text, sizeof text,
      "Ranked by an estimated step time, not a measurement: kernels at %.0f%% of %.0f TFLOP/s "
      "(the fastest matmul measured%s) and of %.2f TB/s%s per GPU; collectives at %.0f%% of "
      "%.0f GB/s%s within nodes of %lld GPUs and of %.0f GB/s per NIC between them "
      "(docs/planner.md). Memory per GPU is exact.",
      100 * c.compute_efficiency, f.kernels.matmul / c.compute_efficiency / 1e12,
      f.assumed_matmul ? ": unknown for this GPU, 80% of its peak as on an H100" : "",
      f.kernels.memory / c.compute_efficiency / 1e12,
      f.assumed_memory ? " (an H100's: the GPU's is unknown)" : "", 100 * c.network_efficiency,
      f.intra / c.network_efficiency / 1e9,
      f.assumed_link ? " (an H100's NVLink: the GPU's link is unknown)" : "",
      static_cast<long long>(f.gpus_per_node), f.inter / c.network_efficiency / 1e9);
  return text;
}

inline nlohmann::json plan_json(const plan_found& found, const search_space& space,
                                const gpu& device, const train_options& o, const plan_options& p) {
  const search_result& r = found.r;
  const cluster_figures f = figures_of(space.net, device);
  nlohmann::json counts = nlohmann::json::object(), rules = nlohmann::json::object(),
                 set_aside = nlohmann::json::object();
  for (std::size_t i = 0; i < rejection_count; ++i) counts[rejection_names[i]] = r.counts[i];
  for (std::size_t i = 0; i < layout_rule_count; ++i)
    if (r.rules[i] > 0) rules[to_string(static_cast<layout_rule>(i))] = r.rules[i];
  for (std::size_t i = 0; i < support_rule_count; ++i)
    if (r.set_aside[i] > 0) set_aside[to_string(static_cast<support_rule>(i))] = r.set_aside[i];
  nlohmann::json best = nlohmann::json::array();
  for (const ranked_layout& c : found.ranked) best.push_back(to_json(c, device));
  nlohmann::json answer{{"device", device_json(device)},
                        {"gpus", p.gpus},
                        {"global_batch", r.global_batch},
                        {"sequence", o.seq_len},
                        {"estimate",
                         {{"note", found.assumptions},
                          {"flops_per_second", f.kernels.matmul},
                          {"memory_bytes_per_second", f.kernels.memory},
                          {"peak_flops_per_second", f.peak},
                          {"intra_node_bytes_per_second", f.intra},
                          {"inter_node_bytes_per_second", f.inter},
                          {"gpus_per_node", f.gpus_per_node},
                          {"tp_comm_overlap", name_of(tp_overlaps, o.tp_overlap)}}},
                        {"chosen", best.empty() ? nlohmann::json(nullptr) : best[0]},
                        {"candidates", best},
                        {"offload_searched", r.offloaded},
                        {"rejected", counts},
                        {"broken_rules", rules},
                        {"unsupported_by_framework", set_aside},
                        {"memory_evaluations", r.memory_evaluations}};
  if (p.all) {
    nlohmann::json all = nlohmann::json::array();
    for (const plan_candidate& c : found.listed) {
      nlohmann::json j = to_json({c, {}}, device);
      j.erase("argv");
      j["verdict"] = rejection_names[static_cast<int>(c.verdict)];
      if (c.verdict == rejection::breaks_a_rule || c.verdict == rejection::unsupported)
        j["rule"] = verdict_name(c);
      all.push_back(j);
    }
    answer["all"] = all;
  }
  return answer;
}

/// The counts of the candidates not ranked, by reason and broken rule.
inline void print_plan_counts(std::ostream& out, const search_result& r, std::size_t top) {
  const auto count = [&](rejection why) {
    return report::grouped(r.counts[static_cast<int>(why)]);
  };
  using enum rejection;
  out << "Candidates: " << report::grouped(r.candidates()) << "; ranked " << count(ranked)
      << ", outranked " << count(outranked) << ", does not fit " << count(does_not_fit)
      << ", breaks a rule " << count(breaks_a_rule) << ", set aside (its framework cannot run it) "
      << count(unsupported) << ", batch does not divide " << count(batch_indivisible)
      << ", cannot beat #" << top << " (not evaluated) " << count(slower) << ".\n";
  for (std::size_t i = 0; i < layout_rule_count; ++i)
    if (r.rules[i] > 0)
      out << "  " << to_string(static_cast<layout_rule>(i)) << ": " << report::grouped(r.rules[i])
          << "\n";
  for (std::size_t i = 0; i < support_rule_count; ++i)
    if (r.set_aside[i] > 0)
      out << "  set aside: " << to_string(static_cast<support_rule>(i)) << ": "
          << report::grouped(r.set_aside[i]) << "\n";
}

inline void print_plan_text(std::ostream& out, const plan_found& found, const search_space& space,
                            const gpu& device, const train_options& o, const plan_options& p,
                            const size_style& size) {
  const search_result& r = found.r;
  out << (o.format == output_format::markdown ? "**" + found.title + "**" : found.title) << "\n\n"
      << found.assumptions << "\n\n";
  if (found.ranked.empty()) {
    out << "No layout of " << report::grouped(p.gpus) << " GPUs fits"
        << (r.offloaded ? ", even with offload" : "") << ".\n\n";
  } else {
    if (r.offloaded) out << "Nothing fits without offload; offloaded layouts:\n\n";
    out << plan_table(found.ranked, device, size) << "\nReproduce #1: `"
        << joined(found.ranked.front().argv) << "`\n\n";
  }
  print_plan_counts(out, r, space.top);
  if (!p.all) return;
  report::table t({"layout", "micro-batch", "recompute", "per GPU", "step (s)", "verdict"});
  for (const plan_candidate& c : found.listed)
    t.add({describe(c), std::to_string(c.micro_batch), recompute_label(c),
           c.required == bytes{} ? "-" : size(c.required),
           c.time.total() > 0 ? seconds(c.time.total()) : "-", verdict_name(c)});
  out << "\nEvery candidate:\n\n" << t;
}

/// `--explain N`: ranked layout N's estimated step time by cause, beside its memory, and the
/// model FLOPs utilisation it comes to.
inline void print_plan_explained(std::ostream& out, const ranked_layout& r, std::int64_t rank,
                                 const training_plan_value& base, const search_space& space,
                                 const gpu& device, const size_style& size) {
  const plan_candidate& c = r.c;
  const step_time& t = c.time;
  out << "\nLayout #" << rank << ": " << describe(c) << ", micro-batch " << c.micro_batch << " x "
      << c.micro_batches << ", " << recompute_label(c) << "; " << size(c.required) << " per GPU, "
      << size(device.capacity - c.required) << " headroom.\n\n";
  report::table table({"part of the step", "seconds", "share"});
  const auto row = [&](const char* what, double seconds_spent) {
    if (seconds_spent <= 0) return;
    char share[16];
    std::snprintf(share, sizeof share, "%.1f%%", 100 * seconds_spent / t.total());
    table.add({what, seconds(seconds_spent), share});
  };
  row("kernels: matmuls, attention, elementwise", t.compute);
  row("recompute", t.recompute);
  row("pipeline bubble", t.bubble);
  row("optimizer step", t.optimizer);
  row("tensor parallel collectives", t.tensor);
  row("context parallel ring, beyond attention", t.context);
  row("expert parallel all-to-alls", t.expert);
  row("pipeline sends", t.pipeline);
  row("data parallel collectives, beyond compute", t.data);
  row("offload transfers", t.offload);
  table.add({"total", seconds(t.total()), "100%"});
  out << table;
  const cluster_figures f = figures_of(space.net, device);
  const double per_token = work_of(base.setup, base.batch.sequence).training();
  const double world =
      static_cast<double>(c.layout.data * c.layout.tensor * c.layout.pipeline * c.layout.context);
  char mfu[160];
  std::snprintf(mfu, sizeof mfu,
                "\nModel FLOPs utilisation: %.1f%% of %.0f TFLOP/s (6 per weight and 12·l·h·s of "
                "attention per token, recompute not counted).\n",
                100 * c.tokens_per_second / world * per_token / f.peak, f.peak / 1e12);
  out << mfu;
}

/// Refuses a search whose every candidate that breaks no layout rule is one its framework cannot
/// run (a knob fixed against it, e.g. --cp with DeepSpeed), naming the rules.
inline void refuse_unsupported_only(const search_result& r, std::int64_t gpus) {
  using enum rejection;
  for (const rejection why : {ranked, does_not_fit, batch_indivisible, slower, outranked})
    if (r.counts[static_cast<int>(why)] > 0) return;
  if (r.counts[static_cast<int>(unsupported)] == 0) return;
  std::string rules;
  for (std::size_t i = 0; i < support_rule_count; ++i)
    if (r.set_aside[i] > 0)
      rules += (rules.empty() ? "" : "; ") + std::string(to_string(static_cast<support_rule>(i)));
  detail::raise("no layout of " + std::to_string(gpus) +
                " GPUs searched runs on the framework of its sharding (" + rules +
                "): --sharding or --framework names another");
}

inline int run_plan(std::ostream& out, const CLI::App& cmd, const std::vector<std::string>& train,
                    const train_options& given, const plan_options& p, const size_style& size) {
  const named_model named = load_model(given.model);
  const model& m = named.value;
  const train_options o = for_model(given, named);
  const gpu g = gpu_named(o.gpu);
  if (o.timeline) detail::raise("--timeline applies to `vramfit train`");
  if (o.sweep) detail::raise("--sweep applies to `vramfit train`");
  if (p.gpus > max_world_size)
    detail::raise("--gpus must be at most " + std::to_string(max_world_size) + ", got " +
                  std::to_string(p.gpus));
  const search_space space = space_of(cmd, o, p);
  train_options with_nodes = on_one_gpu(o);
  with_nodes.gpus_per_node = p.net.gpus_per_node;  // NCCL's communicators follow the nodes too
  training_plan_value base = build_plan(with_nodes, m);
  base.setup.layout.tp_overlap = o.tp_overlap;  // the candidates with SP take it (plan_of)
  plan_found found;
  {
    progress_bar bar;
    const auto list = [&](const plan_candidate& c) {
      if (p.all) found.listed.push_back(c);
    };
    found.r = search_layouts(base, g, space, list, std::ref(bar));
  }
  refuse_unsupported_only(found.r, p.gpus);
  for (const plan_candidate& c : found.r.best)
    found.ranked.push_back({c, train_argv(cmd, train, o, c)});
  std::ostringstream title;
  title << "Planning " << m.name << " on " << report::grouped(p.gpus) << " x " << g.name << " | "
        << base.setup.precision.name << " | " << base.setup.optimizer.name << " | "
        << base.setup.finetune.name << " | global batch " << report::grouped(found.r.global_batch)
        << " x " << report::grouped(o.seq_len) << " tokens";
  found.title = title.str();
  found.assumptions = plan_assumptions(space, g);
  if (p.explain > 0 && (o.format == output_format::json || o.format == output_format::svg))
    detail::raise(
        "--explain breaks a layout down in the table; JSON gives every ranked "
        "layout's step_time, SVG none");
  if (static_cast<std::size_t>(p.explain) > found.ranked.size())
    detail::raise("--explain " + std::to_string(p.explain) + ": only " +
                  std::to_string(found.ranked.size()) +
                  (found.ranked.size() == 1 ? " layout was ranked" : " layouts were ranked"));
  if (o.format == output_format::json)
    out << plan_json(found, space, g, o, p).dump(2) << "\n";
  else if (o.format == output_format::svg)
    print_plan_svg(out, found.title, found.ranked, g, size);
  else
    print_plan_text(out, found, space, g, o, p, size);
  if (p.explain > 0)
    print_plan_explained(out, found.ranked[static_cast<std::size_t>(p.explain - 1)], p.explain,
                         base, space, g, size);
  return o.check && found.ranked.empty() ? 1 : 0;
}

}  // namespace vramfit::cli
