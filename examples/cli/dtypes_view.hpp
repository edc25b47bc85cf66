// SPDX-License-Identifier: MIT
// --dtypes: one estimate per format, a row each (infer: the weights' format; train: the
// precision), as `accelerate estimate-memory` prints a row per dtype. Display and the list's
// parsing only: each row is the estimate of the same command given that one format.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "../report.hpp"
#include "render.hpp"
#include "sizes.hpp"

namespace vramfit::cli {

/// Registers --dtypes on `cmd`: names or comma lists of them, as many words as follow, the option
/// repeatable; given without a name, `defaults` (CLI11 hands such an option its default string).
/// Split here, not by CLI11's delimiter, which drops empty items ("bf16,,fp8"): an empty one is
/// refused by name.
inline void add_dtypes_option(CLI::App& cmd, std::optional<std::vector<std::string>>& names,
                              const std::vector<std::string>& defaults, const std::string& help) {
  const auto read = [&names, first = defaults.front()](const CLI::results_t& words) {
    names.emplace();
    for (const std::string& word : words)
      for (std::size_t at = 0; at <= word.size();) {
        const std::size_t end = std::min(word.find(',', at), word.size());
        if (end == at)
          detail::raise("--dtypes '" + shown_value(word) + "': an empty name; give names such as " +
                        first + ",...");
        names->push_back(word.substr(at, end - at));
        at = end + 1;
      }
    return true;
  };
  std::string listed;
  for (const std::string& d : defaults) listed += (listed.empty() ? "" : ",") + d;
  cmd.add_option("--dtypes", read, help)
      ->type_name("[LIST]")
      ->default_str(listed)  // --help shows it; without a name, the option reads it
      ->expected(0, CLI::detail::expected_max_vector_size)
      ->allow_extra_args();  // else CLI11 reads it as a flag and takes no word after it
}

/// The values `names` stand for in `table` (its aliases too), each once; an unknown or repeated
/// name is refused with the option and the name.
template <class Value, std::size_t N>
std::vector<const named<Value>*> dtypes_chosen(const std::vector<std::string>& names,
                                               const named<Value> (&table)[N], const char* what,
                                               alias_list aliases) {
  std::vector<const named<Value>*> chosen;
  for (const std::string& name : names) {
    const Value v = choose(table, name, what, aliases);
    const named<Value>* entry = nullptr;
    for (const named<Value>& n : table)
      if (entry == nullptr && same_choice(n.value, v)) entry = &n;
    for (const named<Value>* c : chosen)
      if (c == entry)
        detail::raise("--dtypes names " + std::string(entry->name) + " twice ('" +
                      shown_value(name) + "'): give each format once");
    chosen.push_back(entry);
  }
  return chosen;
}

/// What a row shows beside its format: the two limits the single estimate's JSON gives.
struct dtypes_axes {
  const char* format_key;  ///< the JSON key of the format: "weights_format", "precision"
  const char* format_header;
  const char* first_key;  ///< e.g. "max_batch"
  const char* first_header;
  const char* second_key;  ///< e.g. "max_context"
  const char* second_header;
};

/// One format's figures, as the estimate of the command given that format has them.
struct dtypes_row {
  std::string format;
  bytes weights{};
  std::optional<bytes> master{};  ///< training: the fp32 master copy, where there is one
  bytes total{};
  bool fits = false;
  std::int64_t first = 0, second = 0;  ///< the axes' limits (0: not even one fits)
};

/// The row of estimate `e` (its weights and peak as to_json gives them) and its two limits.
inline dtypes_row row_of(std::string format, const estimate& e, std::int64_t first,
                         std::int64_t second, bool with_master) {
  dtypes_row r{std::move(format),
               total(e.ledger.entries, component::weights),
               std::nullopt,
               e.fit.required,
               e.fit.fits(),
               first,
               second};
  if (with_master) r.master = total(e.ledger.entries, component::master_weights);
  return r;
}

inline void print_dtypes(std::ostream& out, output_format format, const std::string& title,
                         const gpu& device, const dtypes_axes& axes,
                         const std::vector<dtypes_row>& rows, const size_style& size) {
  const bool master = !rows.empty() && rows.front().master.has_value();
  if (format == output_format::json) {
    nlohmann::json list = nlohmann::json::array();
    for (const dtypes_row& r : rows) {
      nlohmann::json j{{axes.format_key, r.format}, {"weights", r.weights.count}};
      if (master) j["master_weights"] = r.master->count;
      j["total"] = r.total.count;
      j["fits"] = r.fits;
      j[axes.first_key] = r.first;
      j[axes.second_key] = r.second;
      list.push_back(j);
    }
    out << nlohmann::json{{"configuration", title},
                          {"device", device_json(device)},
                          {"dtypes", list}}
               .dump(2)
        << "\n";
    return;
  }
  const std::string on = std::string(device.name) + " (" + size(device.capacity) + ")";
  std::vector<std::string> header{axes.format_header, "weights"};
  if (master) header.emplace_back("fp32 master");
  for (const char* h : {"total (peak)", "fits", axes.first_header, axes.second_header})
    header.emplace_back(h);
  std::vector<std::vector<std::string>> cells;
  for (const dtypes_row& r : rows) {
    std::vector<std::string> c{r.format, size(r.weights)};
    if (master) c.push_back(*r.master > bytes{} ? size(*r.master) : "none");
    c.push_back(size(r.total));
    c.emplace_back(r.fits ? "yes" : "no");
    c.push_back(report::grouped(r.first));
    c.push_back(report::grouped(r.second));
    cells.push_back(std::move(c));
  }
  if (format == output_format::markdown) {
    out << "### " << title << "\n\nOn " << on << ", one estimate per format.\n\n";
    report::table t(header);
    for (auto& c : cells) t.add(std::move(c));
    out << t;
    return;
  }
  std::vector<std::size_t> widths(header.size());
  for (std::size_t i = 0; i < header.size(); ++i) {
    widths[i] = header[i].size();
    for (const auto& c : cells) widths[i] = std::max(widths[i], c[i].size());
  }
  const auto line = [&](const std::vector<std::string>& c) {
    for (std::size_t i = 0; i < c.size(); ++i) {
      const std::string pad(widths[i] - c[i].size(), ' ');
      out << "  " << (i == 0 ? c[i] + pad : pad + c[i]);  // the format left, figures right
    }
    out << "\n";
  };
  out << title << "\nOn " << on << ", one estimate per format:\n\n";
  line(header);
  for (const auto& c : cells) line(c);
}

}  // namespace vramfit::cli
