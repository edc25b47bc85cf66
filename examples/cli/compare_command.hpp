// SPDX-License-Identifier: MIT
// `vramfit compare`: a measured run (a torch.cuda.memory._snapshot() or a training log) beside
// vramfit's prediction for the same configuration (train's options): the peaks side by side, the
// phase of each, and where the allocated peak's bytes came from, phase by phase (docs/compare.md).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "memory_log.hpp"
#include "snapshot_replay.hpp"
#include "train_command.hpp"

namespace vramfit::cli {

struct compare_options {
  std::string snapshot, log;
};

inline void add_compare_options(CLI::App& cmd, compare_options& c) {
  cmd.add_option("--snapshot", c.snapshot,
                 "The measured run: torch.cuda.memory._snapshot() saved as JSON (its pickle: "
                 "vramfit.compare in Python), recorded with _record_memory_history")
      ->type_name("FILE");
  cmd.add_option("--log", c.log,
                 "The measured run: a torchtune or torchtitan training log (its largest "
                 "logged peaks)")
      ->type_name("FILE");
}

/// One row of "where the peak came from": the bytes held at the start, or a phase's net change
/// up to the peak; measured and predicted.
struct compared_share {
  std::string category;
  bytes measured{}, predicted{};
  [[nodiscard]] bytes difference() const { return predicted - measured; }
};

/// Each phase's net change of the allocated bytes up to the predicted peak: at_start plus these
/// is the timeline's peak.
inline std::map<std::string, bytes> predicted_phases(const step_timeline& tl) {
  std::map<std::string, bytes> net;
  bool past = false;
  for_each_event(tl, std::numeric_limits<std::int64_t>::max(),
                 [&](const timeline_event& ev, std::size_t i, std::int64_t layer, bytes) {
                   if (past) return;
                   net[to_string(ev.phase)] += ev.delta;
                   past = i == tl.peak.event && layer == tl.peak.layer;
                 });
  return net;
}

/// The rows, largest difference first. vramfit's loss phase holds the logits that the head's
/// frames show in the forward, so the two are one category.
inline std::vector<compared_share> compared_shares(const measured_step& m,
                                                   const step_timeline& tl) {
  const std::map<std::string, bytes> predicted = predicted_phases(tl);
  const auto category = [](const std::string& phase) {
    return phase == "forward" || phase == "loss" ? std::string("forward and loss") : phase;
  };
  std::vector<compared_share> rows = {{"held at the start", m.at_start, tl.at_start}};
  const auto row = [&rows](const std::string& name) -> compared_share& {
    for (compared_share& r : rows)
      if (r.category == name) return r;
    rows.push_back({name, bytes{}, bytes{}});
    return rows.back();
  };
  for (const phase_share& p : m.phases) row(category(p.phase)).measured += p.net;
  for (const auto& [phase, net] : predicted) row(category(phase)).predicted += net;
  std::erase_if(rows, [](const compared_share& r) {  // a sentinel's alloc and free: no row
    return r.measured == bytes{} && r.predicted == bytes{};
  });
  std::stable_sort(rows.begin(), rows.end(), [](const compared_share& a, const compared_share& b) {
    return std::abs(a.difference().count) > std::abs(b.difference().count);
  });
  return rows;
}

/// The predicted peak's entries that hold bytes, largest first.
inline std::vector<std::pair<std::string, bytes>> predicted_entries(const step_timeline& tl) {
  std::vector<std::pair<std::string, bytes>> listed;
  for (std::size_t i = 0; i < tl.ledger.size() && i < tl.at_peak.size(); ++i)
    if (tl.at_peak[i] > bytes{} && tl.ledger[i].space == memory_space::device)
      listed.emplace_back(tl.ledger[i].name, tl.at_peak[i]);
  std::stable_sort(listed.begin(), listed.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return listed;
}

inline std::string percent_of(bytes difference, bytes of) {
  if (of <= bytes{}) return "";
  char text[32];
  std::snprintf(text, sizeof text, " (%+.1f%%)",
                100.0 * static_cast<double>(difference.count) / static_cast<double>(of.count));
  return text;
}

/// A measured figure as the tool writes it: "-" when the source has none, a log's rounding.
inline std::string measured_text(const std::optional<bytes>& b, const measured_step& m,
                                 const size_style& size) {
  if (!b) return "-";
  return size(*b) + (m.resolution > 0 ? " (+/-" + size(bytes{m.resolution}) + ")" : "");
}

inline std::string difference_text(const std::optional<bytes>& measured, bytes predicted,
                                   const size_style& size) {
  if (!measured) return "-";
  return signed_size(predicted - *measured, size) + percent_of(predicted - *measured, *measured);
}

inline std::string source_line(const measured_step& m) {
  if (m.source == "snapshot")
    return "torch.cuda.memory._snapshot() '" + m.file + "': " + std::to_string(m.entries) +
           " trace entries, " + std::to_string(m.allocations) + " allocations, replayed";
  return std::string(m.source) + " '" + m.file + "': the largest peaks it prints";
}

inline nlohmann::json compare_json(const measured_step& m, const estimate& e,
                                   const std::vector<compared_share>& rows) {
  const auto optional = [](const std::optional<bytes>& b) {
    return b ? nlohmann::json(b->count) : nlohmann::json();
  };
  nlohmann::json measured{{"source", m.source},
                          {"file", m.file},
                          {"allocated", optional(m.allocated)},
                          {"reserved", optional(m.reserved)},
                          {"requested", optional(m.requested)},
                          {"active", optional(m.active)},
                          {"resolution", m.resolution},
                          {"phase", m.phase}};
  const step_timeline& tl = e.timeline;
  nlohmann::json predicted{{"allocated", allocated_of(e).count},
                           {"reserved", reserved_of(e).count},
                           {"total", e.fit.required.count},
                           {"phase", to_string(tl.events[tl.peak.event].phase)},
                           {"timeline_peak", tl.peak.alive.count}};
  nlohmann::json answer{{"configuration", e.title},
                        {"device", device_json(e.device)},
                        {"measured", measured},
                        {"predicted", predicted}};
  if (m.source != "snapshot") return answer;
  measured["entries"] = m.entries;
  measured["allocations"] = m.allocations;
  nlohmann::json differences = nlohmann::json::array(), sites = nlohmann::json::array(),
                 entries = nlohmann::json::array();
  for (const compared_share& r : rows)
    differences.push_back({{"category", r.category},
                           {"measured", r.measured.count},
                           {"predicted", r.predicted.count},
                           {"difference", r.difference().count}});
  for (const live_site& s : m.sites)
    sites.push_back({{"site", s.site}, {"bytes", s.size.count}, {"allocations", s.allocations}});
  for (const auto& [name, b] : predicted_entries(tl))
    entries.push_back({{"entry", name}, {"bytes", b.count}});
  answer["measured"] = measured;
  answer["differences"] = differences;
  answer["measured_at_peak"] = sites;
  answer["predicted_at_peak"] = entries;
  return answer;
}

inline void print_compare(std::ostream& out, const measured_step& m, const estimate& e,
                          const std::vector<compared_share>& rows, bool markdown,
                          const size_style& size) {
  const step_timeline& tl = e.timeline;
  const std::string predicted_phase = to_string(tl.events[tl.peak.event].phase);
  const std::vector<std::vector<std::string>> peaks = {
      {"peak allocated", measured_text(m.allocated, m, size), size(allocated_of(e)),
       difference_text(m.allocated, allocated_of(e), size)},
      {"peak reserved", measured_text(m.reserved, m, size), size(reserved_of(e)),
       difference_text(m.reserved, reserved_of(e), size)},
      {"phase of the peak", m.phase, predicted_phase, ""}};
  const std::string measured_from = "Measured: " + source_line(m) + ".";
  const std::string predicted_on = "Predicted on " + std::string(e.device.name) + ": " +
                                   size(e.fit.required) + " with the runtime overheads.";
  constexpr std::size_t shown_sites = 6;
  const std::string shares_intro =
      "Where the allocated peak came from, largest difference first: what was held when the "
      "step began, then each phase's net change up to the peak (the phase from the frames of "
      "each allocation; a free counts in the phase it falls in).";
  if (markdown) {
    out << "### " << e.title << "\n\n" << measured_from << " " << predicted_on << "\n\n";
    report::table t({"", "measured", "predicted", "predicted - measured"});
    for (const auto& r : peaks) t.add(r);
    out << t;
    if (m.source != "snapshot") return;
    report::table s({"category", "measured", "predicted", "predicted - measured"});
    for (const compared_share& r : rows)
      s.add({r.category, size(r.measured), size(r.predicted),
             signed_size(r.difference(), size) + percent_of(r.difference(), r.measured)});
    out << "\n" << shares_intro << "\n\n" << s;
    report::table l({"live at the measured peak (allocation site)", "bytes", "allocations"});
    for (std::size_t i = 0; i < m.sites.size() && i < shown_sites; ++i)
      l.add({"`" + m.sites[i].site + "`", size(m.sites[i].size),
             std::to_string(m.sites[i].allocations)});
    out << "\n" << l;
    report::table p({"at the predicted peak (vramfit entry)", "bytes"});
    const auto entries = predicted_entries(tl);
    for (std::size_t i = 0; i < entries.size() && i < shown_sites; ++i)
      p.add({entries[i].first, size(entries[i].second)});
    out << "\n" << p;
    return;
  }
  out << "Compare: " << e.title << "\n" << measured_from << "\n" << predicted_on << "\n\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-20s %22s %12s  %s\n", "", "measured", "predicted",
                "predicted - measured");
  out << line;
  for (const auto& r : peaks) {
    std::snprintf(line, sizeof line, "  %-20s %22s %12s  %s", r[0].c_str(), r[1].c_str(),
                  r[2].c_str(), r[3].c_str());
    std::string text = line;
    text.erase(text.find_last_not_of(' ') + 1);  // no difference for the phase: no blanks
    out << text << "\n";
  }
  if (m.source != "snapshot") return;
  out << "\n" << shares_intro << "\n";
  for (const compared_share& r : rows) {
    std::snprintf(
        line, sizeof line, "  %-20s %22s %12s  %s\n", r.category.c_str(), size(r.measured).c_str(),
        size(r.predicted).c_str(),
        (signed_size(r.difference(), size) + percent_of(r.difference(), r.measured)).c_str());
    out << line;
  }
  out << "\nLive at the measured peak, by allocation site (largest first):\n";
  for (std::size_t i = 0; i < m.sites.size() && i < shown_sites; ++i) {
    std::snprintf(line, sizeof line, "  %12s  %4lld  %s\n", size(m.sites[i].size).c_str(),
                  static_cast<long long>(m.sites[i].allocations), m.sites[i].site.c_str());
    out << line;
  }
  out << "At the predicted peak, by vramfit entry (largest first):\n";
  const auto entries = predicted_entries(tl);
  for (std::size_t i = 0; i < entries.size() && i < shown_sites; ++i) {
    std::snprintf(line, sizeof line, "  %12s  %s\n", size(entries[i].second).c_str(),
                  entries[i].first.c_str());
    out << line;
  }
}

inline int run_compare(std::ostream& out, const train_options& given, const compare_options& c,
                       const size_style& size) {
  if (c.snapshot.empty() == c.log.empty())
    detail::raise("compare reads one measured run: give --snapshot FILE or --log FILE");
  if (given.sweep || given.timeline || given.check)
    detail::raise(
        "compare sets one configuration beside one run: leave out --sweep, --timeline "
        "and --check");
  if (given.format == output_format::svg)
    detail::raise("compare prints a table, markdown or json: leave out -f svg");
  // The measured side first: a file it cannot read is refused before any estimate.
  const measured_step m = c.snapshot.empty() ? read_memory_log(c.log) : read_snapshot(c.snapshot);
  const named_model named = load_model(given.model);
  const train_options o = for_model(given, named);
  const gpu g = gpu_named(o.gpu);
  const training_plan_value plan = build_plan(o, named.value);
  const estimate e = estimate_of(o, plan, g);
  const std::vector<compared_share> rows =
      m.source == "snapshot" ? compared_shares(m, e.timeline) : std::vector<compared_share>{};
  if (o.format == output_format::json)
    out << compare_json(m, e, rows).dump(2) << "\n";
  else
    print_compare(out, m, e, rows, o.format == output_format::markdown, size);
  return 0;
}

}  // namespace vramfit::cli
