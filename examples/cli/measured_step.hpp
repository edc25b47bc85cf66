// SPDX-License-Identifier: MIT
// What `vramfit compare` reads from a measured run: the peaks, and where a snapshot's trace shows
// it, the phase of the peak and what was live then. Filled by snapshot_replay.hpp (a
// torch.cuda.memory._snapshot()) or memory_log.hpp (torchtune's and torchtitan's log lines).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <vramfit/units.hpp>

namespace vramfit::cli {

/// Bytes that were live at the measured peak, grouped by where they were allocated.
struct live_site {
  std::string site;  ///< innermost Python frame "dir/file.py:line:function", or what else it is
  bytes size{};
  std::int64_t allocations = 0;
};

/// The net change of the allocated bytes that one phase made up to the peak.
struct phase_share {
  std::string phase;
  bytes net{};
};

struct measured_step {
  std::string source;  ///< "snapshot", "torchtune log" or "torchtitan log"
  std::string file;
  std::optional<bytes> allocated, reserved, requested, active;
  /// A log's figures are rounded as printed (0.01 GiB): half its last digit, in bytes; 0: exact.
  std::int64_t resolution = 0;
  std::string phase = "unknown";
  // From a snapshot's trace only:
  std::int64_t entries = 0, allocations = 0;
  bytes at_start{};                 ///< allocated when the trace begins
  std::vector<phase_share> phases;  ///< at_start plus these nets is the allocated peak
  std::vector<live_site> sites;     ///< largest first
};

}  // namespace vramfit::cli
