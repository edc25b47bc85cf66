// SPDX-License-Identifier: MIT
// `vramfit plan`: the ranked layouts as a table, Markdown, JSON, or an SVG of memory per GPU
// against estimated throughput. Display only: the search is layout_search.hpp.
#pragma once

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>
#include <vramfit/layout_search.hpp>

#include "choices.hpp"
#include "render.hpp"
#include "sizes.hpp"

namespace vramfit::cli {

/// A ranked candidate and the `vramfit train` arguments that reproduce its memory.
struct ranked_layout {
  plan_candidate c;
  std::vector<std::string> argv;
};

/// The sharding as the JSON names it.
inline const char* sharding_name(const layout& l) {
  switch (l.implementation) {
    case shard_implementation::fsdp:
      if (l.zero == sharding::zero2) return "fsdp-grad-op";
      if (l.zero == sharding::zero3) return l.shard_group > 0 ? "fsdp-hybrid" : "fsdp-full";
      break;
    case shard_implementation::megatron:
      if (l.zero == sharding::zero1) return "megatron-distributed-optimizer";
      break;
    case shard_implementation::unnamed:
    case shard_implementation::deepspeed:
    case shard_implementation::paper: {
      constexpr const char* stages[] = {"none", "zero-1", "zero-2", "zero-3"};
      return stages[static_cast<int>(l.zero)];
    }
  }
  return "none";
}

inline const char* offload_name(const layout& l) {
  return l.parameter_offload != offload_target::none   ? "all"
         : l.optimizer_offload != offload_target::none ? "optimizer"
                                                       : "none";
}

/// "full", or "full (first 3 layers)" when full recompute covers part of each stage.
inline std::string recompute_label(const plan_candidate& c) {
  std::string label = name_of(recomputes, c.recompute);
  if (c.recompute == recompute_kind::full && c.recompute_layers > 0)
    label += " (first " + std::to_string(c.recompute_layers) +
             (c.recompute_layers == 1 ? " layer)" : " layers)");
  return label;
}

/// "DP 8 zero-1, TP 2+SP, PP 64 x 2 chunks, EP 8"; a sharding over the context-parallel ranks too
/// (layout::shard_degree) says so: "DP 2, TP 8+SP, CP 4, zero-1 over DPxCP 8".
inline std::string describe(const plan_candidate& c) {
  const layout& l = c.layout;
  const std::string sharding = sharding_name(l);
  const bool sharded = sharding != "none";
  const std::string groups = l.shard_group > 0 ? "groups of " + std::to_string(l.shard_group) : "";
  std::string s = "DP " + std::to_string(l.data);
  if (sharded && l.context == 1) s += " " + sharding + (groups.empty() ? "" : " (" + groups + ")");
  if (l.tensor > 1) s += ", TP " + std::to_string(l.tensor) + (l.sequence ? "+SP" : "");
  if (l.pipeline > 1) s += ", PP " + std::to_string(l.pipeline);
  if (c.virtual_stages > 1) s += " x " + std::to_string(c.virtual_stages) + " chunks";
  if (l.context > 1) s += ", CP " + std::to_string(l.context);
  // Megatron-LM's distributed optimizer and FSDP2 shard over the context-parallel ranks too.
  if (sharded && l.context > 1)
    s += ", " + sharding + " over " +
         (groups.empty() ? "DPxCP " + std::to_string(l.shard_degree())
                         : groups + " x CP " + std::to_string(l.context));
  if (l.expert > 1) s += ", EP " + std::to_string(l.expert);
  if (l.optimizer_offload != offload_target::none) s += std::string(", offload ") + offload_name(l);
  return s;
}

inline std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", s);
  return text;
}

inline nlohmann::json to_json(const ranked_layout& r, const gpu& device) {
  const plan_candidate& c = r.c;
  const layout& l = c.layout;
  const step_time& t = c.time;
  return {{"layout",
           {{"dp", l.data},
            {"tp", l.tensor},
            {"sequence_parallel", l.sequence},
            {"pp", l.pipeline},
            {"virtual_stages", c.virtual_stages},
            {"cp", l.context},
            {"ep", l.expert},
            {"sharding", sharding_name(l)},
            {"shard_group", l.shard_group},
            {"recompute", name_of(recomputes, c.recompute)},
            {"recompute_layers", c.recompute_layers},
            {"micro_batch", c.micro_batch},
            {"micro_batches", c.micro_batches},
            {"offload", offload_name(l)}}},
          {"required", c.required.count},
          {"headroom", (device.capacity - c.required).count},
          {"step_time",
           {{"total", t.total()},
            {"compute", t.compute},
            {"recompute", t.recompute},
            {"bubble", t.bubble},
            {"optimizer", t.optimizer},
            {"tensor", t.tensor},
            {"context", t.context},
            {"expert", t.expert},
            {"pipeline", t.pipeline},
            {"data", t.data},
            {"offload", t.offload}}},
          {"tokens_per_second", c.tokens_per_second},
          {"argv", r.argv}};
}

inline report::table plan_table(const std::vector<ranked_layout>& ranked, const gpu& device,
                                const size_style& size) {
  report::table t({"#", "layout", "micro-batch", "recompute", "per GPU", "headroom",
                   "step (s, estimate)", "tokens/s (estimate)"});
  int i = 0;
  for (const ranked_layout& r : ranked) {
    const plan_candidate& c = r.c;
    t.add({std::to_string(++i), describe(c),
           std::to_string(c.micro_batch) + " x " + std::to_string(c.micro_batches),
           recompute_label(c), size(c.required), size(device.capacity - c.required),
           seconds(c.time.total()),
           report::grouped(static_cast<std::int64_t>(std::llround(c.tokens_per_second)))});
  }
  return t;
}

/// Memory per GPU (y) against estimated tokens per second (x) for the ranked layouts, numbered by
/// rank, with the GPU's capacity.
inline void print_plan_svg(std::ostream& out, const std::string& title,
                           const std::vector<ranked_layout>& ranked, const gpu& device,
                           const size_style& size) {
  double fastest = 0, slowest = 0;
  for (const ranked_layout& r : ranked) {
    fastest = std::max(fastest, r.c.tokens_per_second);
    slowest = slowest == 0 ? r.c.tokens_per_second : std::min(slowest, r.c.tokens_per_second);
  }
  // Every ranked layout fits: the capacity is the top of the scale.
  svg::bytes_chart chart(out, title, 720, static_cast<double>(device.capacity.count));
  const double left = svg::bytes_chart::left;
  const double span = fastest > slowest ? fastest - slowest : 1;
  auto x_of = [&](double v) {
    return left + 20 + (chart.width() - left - svg::bytes_chart::right - 40) * (v - slowest) / span;
  };
  for (const double v : {slowest, fastest})
    out << "<text x=\"" << x_of(v) << "\" y=\"" << chart.bottom() + 18
        << "\" text-anchor=\"middle\">" << report::grouped(std::llround(v)) << "</text>\n";
  int rank = 0;
  for (const ranked_layout& r : ranked) {
    const double x = x_of(r.c.tokens_per_second);
    const double y = chart.y_of(static_cast<double>(r.c.required.count));
    ++rank;
    out << "<circle cx=\"" << x << "\" cy=\"" << y << "\" r=\"5\" fill=\"" << svg::colors[0]
        << "\"><title>#" << rank << " " << svg::escape(describe(r.c)) << ": "
        << svg::escape(size(r.c.required)) << ", "
        << report::grouped(std::llround(r.c.tokens_per_second))
        << " tokens/s</title></circle>\n<text x=\"" << x + 7 << "\" y=\"" << y - 7 << "\">" << rank
        << "</text>\n";
  }
  chart.end(device, "tokens per second (estimate)");
}

}  // namespace vramfit::cli
