// SPDX-License-Identifier: MIT
// The peaks a training log prints, the largest over the log: torchtune's memory stats and
// torchtitan's step lines. GiB is 2^30 B in both (torchtune training/memory.py _BYTES_IN_GIB;
// torchtitan components/metrics.py DeviceMemoryMonitor._to_gib).
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <vramfit/vramfit.hpp>

#include "choices.hpp"
#include "measured_step.hpp"

namespace vramfit::cli {

namespace detail_log {

/// A logged GiB figure as bytes, and half its last printed digit (the rounding it carries).
struct logged {
  std::int64_t value = 0, resolution = 0;
};

inline logged gib(const std::string& number, const std::string& what) {
  if (number.size() > 12)  // 1e9 GiB with 2 decimals: no GPU's
    detail::raise(what + ": a logged size of " + shown_value(number) + " GiB overflows");
  const std::size_t dot = number.find('.');
  const int decimals = dot == std::string::npos ? 0 : static_cast<int>(number.size() - dot - 1);
  const long double b = std::stold(number) * (1 << 30);
  return {static_cast<std::int64_t>(std::llround(b)),
          static_cast<std::int64_t>(std::llround(0.5L * std::pow(10.0L, -decimals) * (1 << 30)))};
}

inline void keep_max(std::optional<bytes>& at, std::int64_t& resolution, const logged& v) {
  if (!at || v.value > at->count) {
    at = bytes{v.value};
    resolution = std::max(resolution, v.resolution);
  }
}

}  // namespace detail_log

/// The largest peaks of the log in `path`. torchtune: log_memory_stats's "GPU peak memory alloc:
/// 6.21 GiB" lines (before February 2025 "peak memory allocation"), "reserved" and "active",
/// and its metric logger's "peak_memory_alloc:6.2134" (training/metric_logging.py); torchtitan:
/// the step lines' "memory: 37.29GiB(39.25%)", its max_reserved (validation steps apart).
inline measured_step read_memory_log(const std::string& path) {
  const std::string what = "--log '" + shown_value(path) + "'";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    detail::raise(what +
                  (std::filesystem::exists(path, ec) ? ": not a regular file" : ": no such file"));
  if (std::filesystem::file_size(path, ec) > (std::uintmax_t{1} << 30))
    detail::raise(what + ": larger than 1 GiB");
  std::ifstream in(path, std::ios::binary);
  if (!in) detail::raise(what + ": cannot be read");
  static const std::regex tune_text(
      R"(peak memory (alloc|allocation|reserved|active): ([0-9]+(\.[0-9]+)?) GiB)");
  static const std::regex tune_metric(R"(peak_memory_(alloc|reserved|active):([0-9]+(\.[0-9]+)?))");
  static const std::regex titan(R"(step:\s*[0-9]+\s.*memory:\s*([0-9]+(\.[0-9]+)?)GiB\()");
  measured_step m;
  bool tune = false, titan_seen = false;
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > 100000) continue;  // no log line of theirs is this long
    for (const std::regex* re : {&tune_text, &tune_metric}) {
      for (auto it = std::sregex_iterator(line.begin(), line.end(), *re);
           it != std::sregex_iterator(); ++it) {
        const std::string key = (*it)[1];
        const detail_log::logged v = detail_log::gib((*it)[2], what);
        tune = true;
        detail_log::keep_max(key == "reserved" ? m.reserved
                             : key == "active" ? m.active
                                               : m.allocated,
                             m.resolution, v);
      }
    }
    std::smatch s;
    if (line.find("validate step") == std::string::npos && std::regex_search(line, s, titan)) {
      titan_seen = true;
      detail_log::keep_max(m.reserved, m.resolution, detail_log::gib(s[1], what));
    }
  }
  if (!tune && !titan_seen)
    detail::raise(what +
                  ": no torchtune 'peak memory alloc: X GiB' or torchtitan 'memory: X GiB(' line");
  if (tune && titan_seen)
    detail::raise(what +
                  ": it has both torchtune's and torchtitan's memory lines: give one run's log");
  m.source = tune ? "torchtune log" : "torchtitan log";
  m.file = path;
  return m;
}

}  // namespace vramfit::cli
