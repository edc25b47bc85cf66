// SPDX-License-Identifier: MIT
// How the command-line tool prints a report: an aligned table, Markdown, the stable JSON of
// docs/cli.md#json, or SVG (a stacked bar against the capacity, or a sweep chart; svg.hpp
// draws). Display only: every number comes from the library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "../report.hpp"
#include "choices.hpp"
#include "sizes.hpp"
#include "svg.hpp"

namespace vramfit::cli {

/// What one estimate found: the library's ledger of the most loaded GPU and the facts around it.
struct estimate {
  std::string title;  ///< the configuration in one line
  std::string model_name;
  std::int64_t parameters = 0;
  std::int64_t trainable_parameters = 0;
  gpu device{};
  timed_ledger ledger{};  ///< runtime overheads included
  fit_report fit{};       ///< its required bytes as `metric` counts them
  memory_metric metric = memory_metric::nvidia_smi;
  std::int64_t stage = 0;
  bytes activations_per_layer{};
  /// The caching allocator simulated over the steps, when it was (training).
  std::optional<reserved_memory_estimate> allocator{};
  step_timeline timeline{};  ///< the most loaded rank's step (training)
};

/// One point of a sweep: the swept value and the required bytes.
struct sweep_point {
  std::int64_t x = 0;
  bytes required{};
};

inline const component shown_components[] = {component::weights,          component::gradients,
                                             component::optimizer_states, component::master_weights,
                                             component::activations,      component::kv_cache,
                                             component::buffers,          component::overhead};

/// The peak as `metric` counts it.
inline bytes peak_of(const estimate& e, memory_metric metric) {
  return peak(e.ledger) - not_counted(e.ledger.entries, metric);
}

/// What the caching allocator holds at its peak: the tensors' peak and the reserve beyond it
/// (simulated or the fixed share), without the CUDA context, workspaces and NCCL.
inline bytes reserved_of(const estimate& e) {
  return peak_of(e, memory_metric::reserved);
}

/// What its blocks hold at its peak: simulated, or the tensors' peak.
inline bytes allocated_of(const estimate& e) {
  return e.allocator ? e.allocator->allocated : peak_of(e, memory_metric::allocated);
}

inline std::string allocator_summary(const estimate& e, const size_style& size) {
  if (!e.allocator) return "";
  const reserved_memory_estimate& a = *e.allocator;
  return "caching allocator (simulated): " + size(a.reserved) + " reserved for " +
         size(a.allocated) + " allocated at its peak, largest free block then " +
         size(a.largest_free_at_peak) + "; " +
         (a.stable_step == 1 ? std::string("reserved from the first step")
                             : "reserved grows until step " + std::to_string(a.stable_step) +
                                   " (first step " + size(a.first_step_reserved) + ")");
}

/// A limit the solvers found: `before` N `after`, or `none` when not even one fits.
inline std::string up_to(std::int64_t n, const char* before, const char* after, const char* none) {
  return n > 0 ? before + report::grouped(n) + after : none;
}

inline std::string verdict(const estimate& e, const size_style& size) {
  return fit_verdict(e.fit.required, e.fit.available, size);
}

inline void print_table(std::ostream& out, const estimate& e, const size_style& size) {
  out << e.title << "\n" << e.model_name << ": " << report::grouped(e.parameters) << " parameters";
  if (e.trainable_parameters > 0)
    out << ", " << report::grouped(e.trainable_parameters) << " trainable";
  out << "\nMost loaded GPU: pipeline stage " << e.stage << ", peak at the "
      << to_string(e.ledger.peak_at) << "\n\n";
  // What the entries of a row are named, so that a row such as buffers or the host's small
  // figure does not puzzle.
  const auto names = [&e](auto&& holds) {
    std::string what;
    for (const memory_entry& m : e.ledger.entries)
      if (holds(m) && m.size > bytes{}) what += std::string(what.empty() ? "" : ", ") + m.name;
    return what;
  };
  char line[128];
  std::snprintf(line, sizeof line, "  %-18s %14s %14s\n", "component", "at its most", "at peak");
  out << line;
  for (component c : shown_components) {
    const bytes all = total(e.ledger.entries, c);
    if (all == bytes{}) continue;
    std::snprintf(line, sizeof line, "  %-18s %14s %14s", to_string(c), size(all).c_str(),
                  size(at_peak(e.ledger, c)).c_str());
    out << line;
    if (c == component::buffers)
      out << "  " << names([](const memory_entry& m) { return m.component == component::buffers; });
    out << "\n";
  }
  const char* totals[] = {"total (peak)", "reserved (peak)", "allocated (peak)"};
  std::snprintf(line, sizeof line, "  %-18s %14s %14s\n", totals[static_cast<int>(e.metric)], "",
                size(e.fit.required).c_str());
  out << line;
  // Which column adds up: at peak, to the whole peak (nvidia-smi's); at its most, to nothing.
  out << "  at peak adds up to "
      << (e.metric == memory_metric::nvidia_smi ? std::string("the total")
                                                : size(peak(e.ledger)) + ", the nvidia-smi peak")
      << "; at its most does not: each component at its own moment\n";
  const bytes host = total(e.ledger.entries, memory_space::host);
  if (host > bytes{}) {
    std::snprintf(line, sizeof line, "  %-18s %14s  ", "host memory", size(host).c_str());
    out << line << names([](const memory_entry& m) { return m.space == memory_space::host; })
        << "\n";
  }
  if (e.allocator) out << "  " << allocator_summary(e, size) << "\n";
  out << "\n  " << e.device.name << ": " << size(e.fit.available) << " -> " << verdict(e, size)
      << "\n";
}

inline void print_markdown(std::ostream& out, const estimate& e, const size_style& size) {
  out << "### " << e.title << "\n\n"
      << e.model_name << ": " << report::grouped(e.parameters) << " parameters, "
      << report::grouped(e.trainable_parameters) << " trainable. Most loaded GPU: pipeline stage "
      << e.stage << ", peak at the " << to_string(e.ledger.peak_at) << ".\n\n";
  report::table t({"entry", "component", "where", "bytes", "at peak", "source"});
  const char* where[] = {"device", "host", "nvme"};
  for (std::size_t i = 0; i < e.ledger.entries.size(); ++i) {
    const memory_entry& m = e.ledger.entries[i];
    t.add({m.name, to_string(m.component), where[static_cast<int>(m.space)], size(m.size),
           size(e.ledger.at_peak[i]), m.source});
  }
  t.add({"**peak per GPU**", "", "", "", "**" + size(e.fit.required) + "**", ""});
  out << t << "\n";
  if (e.allocator) out << "The " << allocator_summary(e, size) << ".\n\n";
  out << e.device.name << " (" << size(e.fit.available) << "): " << verdict(e, size) << ".\n";
}

/// The GPU as every JSON answer names it.
inline nlohmann::json device_json(const gpu& device) {
  return {{"name", device.name}, {"capacity", device.capacity.count}};
}

/// The stable JSON interface (docs/cli.md#json); more keys may follow, none change.
inline nlohmann::json to_json(const estimate& e) {
  nlohmann::json memory;
  for (component c : shown_components) memory[to_string(c)] = total(e.ledger.entries, c).count;
  memory["activations_per_layer"] = e.activations_per_layer.count;
  memory["total"] = e.fit.required.count;
  memory["nvidia_smi"] = peak_of(e, memory_metric::nvidia_smi).count;
  memory["reserved"] = reserved_of(e).count;
  memory["allocated"] = allocated_of(e).count;
  nlohmann::json peak_parts;
  for (component c : shown_components) peak_parts[to_string(c)] = at_peak(e.ledger, c).count;
  nlohmann::json entries = nlohmann::json::array();
  const char* where[] = {"device", "host", "nvme"};
  for (std::size_t i = 0; i < e.ledger.entries.size(); ++i) {
    const memory_entry& m = e.ledger.entries[i];
    entries.push_back({{"name", m.name},
                       {"component", to_string(m.component)},
                       {"space", where[static_cast<int>(m.space)]},
                       {"bytes", m.size.count},
                       {"at_peak", e.ledger.at_peak[i].count},
                       {"tensors", m.tensors},
                       {"source", m.source}});
  }
  return {{"model",
           {{"name", e.model_name},
            {"parameters", e.parameters},
            {"trainable_parameters", e.trainable_parameters}}},
          {"memory", memory},
          {"device", device_json(e.device)},
          {"fits", e.fit.fits()},
          {"metric", name_of(memory_metrics, e.metric)},
          {"configuration", e.title},
          {"pipeline_stage", e.stage},
          {"peak_moment", to_string(e.ledger.peak_at)},
          {"at_peak", peak_parts},
          {"host", total(e.ledger.entries, memory_space::host).count},
          {"entries", entries}};
}

/// A stacked bar of what is allocated at the peak, by component, against the GPU's capacity.
inline void print_svg(std::ostream& out, const estimate& e, const size_style& size) {
  const double width = 760, left = 20, bar_width = 720, bar_height = 48;
  const double scale_max = static_cast<double>(
      (e.fit.required > e.fit.available ? e.fit.required : e.fit.available).count);
  auto x_of = [&](double b) { return left + bar_width * b / scale_max; };
  const double lines = static_cast<double>(svg::wrap(e.title).size());
  const double top = 74 + 20 * lines;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\""
      << top + 140 << "\" font-family=\"sans-serif\" font-size=\"13\">\n"
      << "<title>" << svg::escape(e.title) << "</title>\n";
  const double below = svg::title(out, e.title, left);
  out << "<text x=\"" << left << "\" y=\"" << below + 4 << "\">Per GPU at the "
      << to_string(e.ledger.peak_at) << ": " << svg::escape(size(e.fit.required)) << " of "
      << svg::escape(size(e.fit.available)) << " (" << svg::escape(e.device.name) << ") - "
      << svg::escape(verdict(e, size)) << "</text>\n";
  double at = 0;
  int legend = 0;
  for (std::size_t i = 0; i < std::size(shown_components); ++i) {
    const bytes b = at_peak(e.ledger, shown_components[i]);
    if (b == bytes{}) continue;
    const double x0 = x_of(at);
    at += static_cast<double>(b.count);
    out << "<rect x=\"" << x0 << "\" y=\"" << top << "\" width=\"" << x_of(at) - x0
        << "\" height=\"" << bar_height << "\" fill=\"" << svg::colors[i] << "\"><title>"
        << to_string(shown_components[i]) << ": " << svg::escape(size(b)) << "</title></rect>\n";
    const double ly = top + bar_height + 28 + 20 * (legend / 3);
    const double lx = left + 240 * (legend % 3);
    out << "<rect x=\"" << lx << "\" y=\"" << ly - 11 << "\" width=\"12\" height=\"12\" fill=\""
        << svg::colors[i] << "\"/>\n<text x=\"" << lx + 18 << "\" y=\"" << ly << "\">"
        << to_string(shown_components[i]) << " " << svg::escape(size(b)) << "</text>\n";
    ++legend;
  }
  const double cap = x_of(static_cast<double>(e.fit.available.count));
  out << "<line x1=\"" << cap << "\" y1=\"" << top - 8 << "\" x2=\"" << cap << "\" y2=\""
      << top + bar_height + 8
      << "\" stroke=\"#000\" stroke-width=\"2\" stroke-dasharray=\"5,3\"/>\n"
      << "<text x=\"" << cap << "\" y=\"" << top - 12 << "\" text-anchor=\"end\">capacity "
      << svg::escape(size(e.fit.available)) << "</text>\n</svg>\n";
}

/// Required memory against a swept value, with the capacity line.
inline void print_sweep_svg(std::ostream& out, const std::string& title, const char* axis,
                            const std::vector<sweep_point>& points, const gpu& device,
                            const size_style& size) {
  double most = static_cast<double>(device.capacity.count);
  for (const sweep_point& p : points) most = std::max(most, static_cast<double>(p.required.count));
  svg::bytes_chart chart(out, title, 700, most);
  const double left = svg::bytes_chart::left, span = chart.width() - left - svg::bytes_chart::right;
  const std::size_t n = points.size();
  auto x_of = [&](std::size_t i) {
    return left + (n > 1 ? span * static_cast<double>(i) / static_cast<double>(n - 1) : 0);
  };
  auto y_of = [&](std::size_t i) {
    return chart.y_of(static_cast<double>(points[i].required.count));
  };
  out << "<polyline fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"2\" points=\"";
  for (std::size_t i = 0; i < n; ++i) out << x_of(i) << "," << y_of(i) << " ";
  out << "\"/>\n";
  for (std::size_t i = 0; i < n; ++i)
    out << "<circle cx=\"" << x_of(i) << "\" cy=\"" << y_of(i)
        << "\" r=\"3\" fill=\"#4e79a7\"><title>" << axis << " " << points[i].x << ": "
        << svg::escape(size(points[i].required)) << "</title></circle>\n<text x=\"" << x_of(i)
        << "\" y=\"" << chart.bottom() + 18 << "\" text-anchor=\"middle\">" << points[i].x
        << "</text>\n";
  chart.end(device, axis);
}

}  // namespace vramfit::cli
