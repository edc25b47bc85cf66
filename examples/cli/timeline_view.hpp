// SPDX-License-Identifier: MIT
// `vramfit train --timeline`: one training step of the most loaded GPU as allocations and frees,
// printed as a table, Markdown, JSON, or an SVG plot of the allocated bytes over the step with the
// phases shaded and the peak marked. Display only: the events come from timeline.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>
#include <vramfit/timeline.hpp>

#include "render.hpp"
#include "sizes.hpp"

namespace vramfit::cli {

/// A step's timeline beside the estimate it belongs to.
struct timeline_view {
  const estimate& e;
  const step_timeline& tl;

  /// Runtime overheads (CUDA context, allocator) sit outside the timeline's allocated bytes.
  [[nodiscard]] bytes overheads() const { return e.fit.required - tl.peak.alive; }
};

/// The first and last layer of an event's run in the order the step visits them (backward goes
/// down).
inline std::pair<std::int64_t, std::int64_t> visited_layers(const timeline_event& ev) {
  const std::int64_t last = ev.first_layer + ev.layers - 1;
  if (ev.phase == step_phase::backward) return {last, ev.first_layer};
  return {ev.first_layer, last};
}

/// The layers of an event in the order the step visits them ("0-31"; backward "31-0").
inline std::string layer_span(const timeline_event& ev) {
  if (ev.first_layer < 0) return "";
  const auto [from, to] = visited_layers(ev);
  return from == to ? std::to_string(from) : std::to_string(from) + "-" + std::to_string(to);
}

inline const char* micro_batch_name(const timeline_event& ev) {
  return ev.micro_batch == 0 ? "first" : "later";
}

inline std::string signed_size(bytes b, const size_style& size) {
  return (b > bytes{} ? "+" : "") + size(b);
}

/// The total allocated after each event: in the first layer of its run and in the last.
struct event_totals {
  bytes first{}, last{};
};

inline std::vector<event_totals> totals_of(const step_timeline& tl) {
  std::vector<event_totals> totals(tl.events.size());
  std::vector<bool> seen(tl.events.size(), false);
  for_each_event(tl, 1, [&](const timeline_event&, std::size_t i, std::int64_t, bytes alive) {
    if (!seen[i]) totals[i].first = alive;
    totals[i].last = alive;
    seen[i] = true;
  });
  return totals;
}

inline std::string peak_text(const step_timeline& tl, const size_style& size) {
  const timeline_event& ev = tl.events[tl.peak.event];
  std::string text = size(tl.peak.alive) + " after \"" + ev.what + "\" (" + to_string(ev.phase) +
                     ", " + micro_batch_name(ev) + " micro-batch";
  if (tl.peak.layer >= 0) text += ", layer " + std::to_string(tl.peak.layer);
  return text + ")";
}

inline void print_timeline_table(std::ostream& out, const timeline_view& v, bool markdown,
                                 const size_style& size) {
  const step_timeline& tl = v.tl;
  const std::vector<event_totals> totals = totals_of(tl);
  auto alive = [&](std::size_t i) {
    const bool run = tl.events[i].layers > 1;
    return size(totals[i].first) + (run ? " -> " + size(totals[i].last) : "");
  };
  const std::string intro =
      "One training step of the most loaded GPU (pipeline stage " + std::to_string(v.e.stage) +
      "): the bytes PyTorch has allocated after each event. A run of identical layers repeats "
      "its events once per layer; its totals are given in its first and its last layer.";
  const std::string summary = "Peak: " + peak_text(tl, size) + "; with the runtime overheads (" +
                              size(v.overheads()) + ") " + size(v.e.fit.required) + " of " +
                              size(v.e.fit.available) + " (" + v.e.device.name + ").";
  if (markdown) {
    report::table t({"phase", "micro-batch", "layers", "event", "change", "allocated after"});
    t.add({"start", "", "", "optimizer states, weights and buffers", "", size(tl.at_start)});
    for (std::size_t i = 0; i < tl.events.size(); ++i) {
      const timeline_event& ev = tl.events[i];
      const bool peak = i == tl.peak.event;
      t.add({to_string(ev.phase), micro_batch_name(ev), layer_span(ev),
             peak ? std::string("**") + ev.what + "** (peak)" : ev.what,
             signed_size(ev.delta, size), alive(i)});
    }
    out << "### " << v.e.title << "\n\n" << intro << "\n\n" << t << "\n" << summary << "\n";
    return;
  }
  out << v.e.title << "\n" << intro << "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-9s %-6s %-11s %-48s %12s  %s\n", "phase", "batch", "layers",
                "event", "change", "allocated after");
  out << line;
  std::snprintf(line, sizeof line, "  %-9s %-6s %-11s %-48s %12s  %s\n", "start", "", "",
                "optimizer states, weights and buffers", "", size(tl.at_start).c_str());
  out << line;
  for (std::size_t i = 0; i < tl.events.size(); ++i) {
    const timeline_event& ev = tl.events[i];
    std::snprintf(line, sizeof line, "  %-9s %-6s %-11s %-48s %12s  %s%s\n", to_string(ev.phase),
                  micro_batch_name(ev), layer_span(ev).c_str(), ev.what,
                  signed_size(ev.delta, size).c_str(), alive(i).c_str(),
                  i == tl.peak.event ? "  <- peak" : "");
    out << line;
  }
  out << "\n" << summary << "\n";
}

/// The estimate's JSON with the events: a top-level "timeline" list and "timeline_peak".
inline nlohmann::json timeline_json(const timeline_view& v) {
  const step_timeline& tl = v.tl;
  const std::vector<event_totals> totals = totals_of(tl);
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t i = 0; i < tl.events.size(); ++i) {
    const timeline_event& ev = tl.events[i];
    nlohmann::json j{{"phase", to_string(ev.phase)},
                     {"micro_batch", micro_batch_name(ev)},
                     {"operator", ev.what},
                     {"entry", v.tl.ledger[static_cast<std::size_t>(ev.entry)].name},
                     {"bytes", ev.delta.count},
                     {"alive", totals[i].first.count}};
    if (ev.first_layer >= 0) {
      const auto [from, to] = visited_layers(ev);
      j["layers"] = {from, to};
      j["alive_last_layer"] = totals[i].last.count;
    } else {
      j["layers"] = nullptr;
    }
    events.push_back(j);
  }
  nlohmann::json answer = to_json(v.e);
  const timeline_event& at = tl.events[tl.peak.event];
  answer["timeline_start"] = tl.at_start.count;
  answer["timeline"] = events;
  answer["timeline_peak"] = {
      {"index", tl.peak.event},
      {"phase", to_string(at.phase)},
      {"micro_batch", micro_batch_name(at)},
      {"layer", tl.peak.layer < 0 ? nlohmann::json() : nlohmann::json(tl.peak.layer)},
      {"operator", at.what},
      {"alive", tl.peak.alive.count},
      {"runtime_overheads", v.overheads().count}};
  return answer;
}

/// One drawn step of the timeline: the bytes alive after an event of a layer, and whether a
/// stretch of identical layers was skipped before it.
struct timeline_point {
  double alive;
  std::size_t event;
  std::int64_t layer;
  bool after_gap;
};

/// The steps drawn: every layer unless that makes more than 4,000 steps, else a run's first and
/// last layer.
inline std::vector<timeline_point> timeline_points(const step_timeline& tl) {
  std::int64_t steps = 0;
  for_each_event(tl, std::numeric_limits<std::int64_t>::max(),
                 [&](const timeline_event&, std::size_t, std::int64_t, bytes) { ++steps; });
  const std::int64_t expand = steps <= 4000 ? std::numeric_limits<std::int64_t>::max() : 1;
  std::vector<timeline_point> points;
  for_each_event(
      tl, expand, [&](const timeline_event& ev, std::size_t i, std::int64_t layer, bytes alive) {
        const bool gap = !points.empty() && points.back().event >= i && ev.first_layer >= 0 &&
                         std::abs(layer - points.back().layer) > 1;
        points.push_back({static_cast<double>(alive.count), i, layer, gap});
      });
  return points;
}

/// Where the plot is: x by drawn step, y by bytes up to `most`.
struct timeline_plot {
  double left = 80, right = 30, width = 820, height = 300, top = 0, most = 0, steps = 1;
  [[nodiscard]] double x(std::size_t k) const {
    return left + width * static_cast<double>(k) / steps;
  }
  [[nodiscard]] double y(double b) const { return top + height - height * b / most; }
};

/// Each phase (and micro-batch) as a shaded span, labelled at the top where it is wide enough.
inline void draw_phases(std::ostream& out, const step_timeline& tl,
                        const std::vector<timeline_point>& points, const timeline_plot& p) {
  const char* shades[] = {"#e8eef6", "#fbeede", "#eef6ec", "#f6e8f0", "#f0f0f0"};
  for (std::size_t k = 0; k < points.size();) {
    const timeline_event& ev = tl.events[points[k].event];
    std::size_t j = k;
    while (j < points.size() && tl.events[points[j].event].phase == ev.phase &&
           tl.events[points[j].event].micro_batch == ev.micro_batch)
      ++j;
    const double x0 = p.x(k), x1 = p.x(j);
    out << "<rect x=\"" << x0 << "\" y=\"" << p.top << "\" width=\"" << x1 - x0 << "\" height=\""
        << p.height << "\" fill=\"" << shades[static_cast<int>(ev.phase)] << "\"><title>"
        << to_string(ev.phase) << " (" << micro_batch_name(ev) << " micro-batch)</title></rect>\n";
    if (x1 - x0 > 40)
      out << "<text x=\"" << (x0 + x1) / 2 << "\" y=\"" << p.top + 14
          << "\" text-anchor=\"middle\" font-size=\"11\">" << to_string(ev.phase) << "</text>\n";
    k = j;
  }
}

/// The allocated bytes as steps; a skipped stretch of identical layers as a dashed line.
inline void draw_alive(std::ostream& out, const step_timeline& tl,
                       const std::vector<timeline_point>& points, const timeline_plot& p,
                       const size_style& size) {
  out << "<path fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"1.5\" d=\"M" << p.x(0) << ","
      << p.y(static_cast<double>(tl.at_start.count));
  double previous = static_cast<double>(tl.at_start.count);
  std::string gaps;
  for (std::size_t k = 0; k < points.size(); ++k) {
    const double x = p.x(k + 1);
    if (points[k].after_gap) {
      gaps += "<line x1=\"" + std::to_string(p.x(k)) + "\" y1=\"" + std::to_string(p.y(previous)) +
              "\" x2=\"" + std::to_string(x) + "\" y2=\"" + std::to_string(p.y(points[k].alive)) +
              "\" stroke=\"#4e79a7\" stroke-dasharray=\"4,3\"/>\n";
      out << " M" << x << "," << p.y(points[k].alive);
    } else {
      out << " H" << x << " V" << p.y(points[k].alive);
    }
    previous = points[k].alive;
  }
  out << "\"/>\n" << gaps;
  for (std::size_t k = 0; k < points.size(); ++k) {  // the peak
    if (points[k].event != tl.peak.event || points[k].layer != tl.peak.layer) continue;
    const double x = p.x(k + 1), y = p.y(points[k].alive);
    out << "<circle cx=\"" << x << "\" cy=\"" << y << "\" r=\"4\" fill=\"#e15759\"><title>peak "
        << svg::escape(peak_text(tl, size)) << "</title></circle>\n<text x=\"" << x << "\" y=\""
        << y - 8 << "\" text-anchor=\"" << (x > p.left + p.width / 2 ? "end" : "start")
        << "\" fill=\"#e15759\">peak " << svg::escape(size(tl.peak.alive)) << "</text>\n";
    break;
  }
}

/// Allocated bytes over the step: every event a step along x, each phase shaded, the peak marked.
/// Runs of many layers are drawn with their first and last layer and a dashed gap between.
inline void print_timeline_svg(std::ostream& out, const timeline_view& v, const size_style& size) {
  const step_timeline& tl = v.tl;
  const std::vector<timeline_point> points = timeline_points(tl);
  timeline_plot p;
  const double usable = static_cast<double>((v.e.fit.available - v.overheads()).count);
  p.most = static_cast<double>(tl.peak.alive.count);
  const bool show_capacity = usable > 0 && usable < 1.5 * p.most;
  if (show_capacity) p.most = std::max(p.most, usable);
  const double tick = svg::tick_step(p.most);
  const double ticks = std::ceil(p.most / tick);
  p.most = ticks * tick;
  p.top = 60 + 20 * static_cast<double>(svg::wrap(v.e.title).size());
  p.steps = static_cast<double>(points.size() + 1);
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << p.left + p.width + p.right
      << "\" height=\"" << p.top + p.height + 70
      << "\" font-family=\"sans-serif\" font-size=\"13\">\n"
      << "<title>" << svg::escape(v.e.title) << "</title>\n";
  const double below = svg::title(out, v.e.title, p.left);
  out << "<text x=\"" << p.left << "\" y=\"" << below + 2
      << "\">Allocated bytes over one training step; peak " << svg::escape(peak_text(tl, size))
      << "</text>\n";
  draw_phases(out, tl, points, p);
  // Axes and a byte scale.
  out << "<line x1=\"" << p.left << "\" y1=\"" << p.top << "\" x2=\"" << p.left << "\" y2=\""
      << p.top + p.height << "\" stroke=\"#000\"/>\n<line x1=\"" << p.left << "\" y1=\""
      << p.top + p.height << "\" x2=\"" << p.left + p.width << "\" y2=\"" << p.top + p.height
      << "\" stroke=\"#000\"/>\n";
  for (double t = 0; t <= ticks; ++t) {
    const double b = tick * t;
    out << "<text x=\"" << p.left - 6 << "\" y=\"" << p.y(b) + 4 << "\" text-anchor=\"end\">"
        << svg::escape(to_string(bytes{static_cast<std::int64_t>(b)}, GiB)) << "</text>\n";
  }
  draw_alive(out, tl, points, p, size);
  if (show_capacity) {
    const double y = p.y(usable);
    out << "<line x1=\"" << p.left << "\" y1=\"" << y << "\" x2=\"" << p.left + p.width
        << "\" y2=\"" << y << "\" stroke=\"#e15759\" stroke-dasharray=\"6,4\"/>\n<text x=\""
        << p.left + p.width << "\" y=\"" << y - 6 << "\" text-anchor=\"end\" fill=\"#e15759\">"
        << svg::escape(v.e.device.name) << " capacity less runtime overheads "
        << svg::escape(size(bytes{static_cast<std::int64_t>(usable)})) << "</text>\n";
  }
  out << "<text x=\"" << p.left + p.width / 2 << "\" y=\"" << p.top + p.height + 24
      << "\" text-anchor=\"middle\">events of the step in order (forward, loss, backward, "
         "optimizer, zero_grad)</text>\n</svg>\n";
}

}  // namespace vramfit::cli
