// SPDX-License-Identifier: MIT
// The CUDA caching allocator's settings and their PYTORCH_CUDA_ALLOC_CONF spelling, read as
// PyTorch reads it (c10/cuda/CUDAAllocatorConfig.cpp, parseArgs): the same keys, values and
// limits, the same refusals.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "units.hpp"

namespace vramfit {

/// The settings that change what the allocator reserves.
struct alloc_conf {
  /// roundup_power2_divisions' power-of-two intervals of request sizes, from 1 MiB (index 0:
  /// everything below 2 MiB) to 64 GiB (index 15: everything from 32 GiB).
  static constexpr int intervals = 16;  // kRoundUpPowerOfTwoIntervals

  /// max_split_size_mb: blocks this large are never split, and requests below it never take one.
  std::int64_t max_split_size = std::numeric_limits<std::int64_t>::max();
  /// max_non_split_rounding_mb (PyTorch 2.5+): how much larger than a request at or above
  /// max_split_size an unsplittable cached block may be (kLargeBuffer by default).
  std::int64_t max_non_split_rounding = std::int64_t{20} << 20;
  /// roundup_power2_divisions per interval; 0 or 1: round to 512 B only.
  std::int64_t roundup_power2_divisions[intervals] = {};
  /// garbage_collection_threshold in millionths (0: off). It acts only under a memory fraction
  /// (torch.cuda.set_per_process_memory_fraction), which allocator_limits carries.
  std::int64_t garbage_collection_threshold_ppm = 0;
  bool expandable_segments = false;
  friend constexpr bool operator==(const alloc_conf&, const alloc_conf&) = default;
};

namespace detail {
namespace rules {
[[noreturn]] inline void alloc_conf_option_must_be_known(std::string_view key) {
  raise("unrecognized allocator option '" + std::string(key) +
        "' (PYTORCH_CUDA_ALLOC_CONF keys: expandable_segments, max_split_size_mb, "
        "max_non_split_rounding_mb, roundup_power2_divisions, garbage_collection_threshold, "
        "backend, and the pinned-memory ones)");
}
[[noreturn]] inline void alloc_conf_value_must_be_valid(std::string_view key,
                                                        std::string_view value,
                                                        const char* expected) {
  raise("allocator option " + std::string(key) + ":" + std::string(value) + ": expected " +
        expected);
}
}  // namespace rules

constexpr std::string_view trimmed(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

/// A decimal integer of at most 12 digits, or -1.
constexpr std::int64_t whole_number(std::string_view s) {
  if (s.empty() || s.size() > 12) return -1;
  std::int64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

constexpr bool power_of_two(std::int64_t n) {
  return n > 0 && (n & (n - 1)) == 0;
}

/// floor(log2(n)) for n >= 1, 0 below.
constexpr int log2_of(std::int64_t n) {
  return n > 1 ? static_cast<int>(std::bit_width(static_cast<std::uint64_t>(n))) - 1 : 0;
}

/// "0.8" → 800000: a fraction strictly between 0 and 1 with at most six decimals, or -1.
constexpr std::int64_t millionths(std::string_view s) {
  if (s.size() < 3 || s.substr(0, 2) != "0." || s.size() > 8) return -1;
  std::int64_t n = whole_number(s.substr(2));
  if (n <= 0) return -1;
  for (std::size_t digits = s.size() - 2; digits < 6; ++digits) n *= 10;
  return n;
}

/// roundup_power2_divisions: one power of two for every interval, or "[256:1,512:2,>:8]" (MiB,
/// powers of two: divisions); the first item also sets the intervals below it, ">" its last key's
/// and all above (CUDAAllocatorConfig::parseRoundUpPower2Divisions).
constexpr void read_divisions(alloc_conf& c, std::string_view value) {
  auto bad = [&] {
    rules::alloc_conf_value_must_be_valid(
        "roundup_power2_divisions", value,
        "a power of two, or a list [MiB:divisions,...,>:divisions] of powers of two");
  };
  if (value.empty() || value.front() != '[') {
    const std::int64_t d = whole_number(value);
    if (!power_of_two(d)) bad();
    for (std::int64_t& x : c.roundup_power2_divisions) x = d;
    return;
  }
  if (value.back() != ']' || value.size() < 3) bad();
  std::string_view items = value.substr(1, value.size() - 2);
  int last = 0;
  bool first = true;
  while (!items.empty()) {
    const std::size_t comma = items.find(',');
    const std::string_view item = trimmed(items.substr(0, comma));
    items = comma == std::string_view::npos ? std::string_view{} : items.substr(comma + 1);
    const std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) bad();
    const std::string_view key = trimmed(item.substr(0, colon));
    const std::int64_t d = whole_number(trimmed(item.substr(colon + 1)));
    if (!power_of_two(d)) bad();
    if (key == ">") {
      for (int i = last; i < alloc_conf::intervals; ++i) c.roundup_power2_divisions[i] = d;
      continue;
    }
    const std::int64_t mib = whole_number(key);
    if (!power_of_two(mib)) bad();
    int index = log2_of(mib);
    if (index >= alloc_conf::intervals) index = alloc_conf::intervals - 1;
    if (first)
      for (int i = 0; i < index; ++i) c.roundup_power2_divisions[i] = d;
    first = false;
    c.roundup_power2_divisions[index] = d;
    last = index;
  }
}

}  // namespace detail

/// Reads a PYTORCH_CUDA_ALLOC_CONF value such as "expandable_segments:True,max_split_size_mb:512".
/// Options that leave device reservations alone (pinned-memory ones, release_lock_on_cudamalloc)
/// have no effect; backend:cudaMallocAsync is refused: its pool is the driver's, not simulated.
constexpr alloc_conf parse_alloc_conf(std::string_view text) {
  using namespace detail;
  alloc_conf c{};
  while (!trimmed(text).empty()) {
    // Items are separated by commas outside brackets.
    std::size_t end = 0;
    for (int depth = 0; end < text.size() && (depth > 0 || text[end] != ','); ++end)
      depth += text[end] == '[' ? 1 : text[end] == ']' ? -1 : 0;
    const std::string_view item = trimmed(text.substr(0, end));
    text = end < text.size() ? text.substr(end + 1) : std::string_view{};
    const std::size_t colon = item.find(':');
    const std::string_view key = trimmed(item.substr(0, colon));
    const std::string_view value =
        colon == std::string_view::npos ? std::string_view{} : trimmed(item.substr(colon + 1));
    auto mebibytes = [&](std::int64_t least, const char* expected) {
      const std::int64_t mib = whole_number(value);
      if (mib < least) rules::alloc_conf_value_must_be_valid(key, value, expected);
      return mib << 20;
    };
    if (key == "expandable_segments") {
      if (value != "True" && value != "False")
        rules::alloc_conf_value_must_be_valid(key, value, "True or False");
      c.expandable_segments = value == "True";
    } else if (key == "max_split_size_mb") {
      // Blocks under kLargeBuffer are never split off oversize: 20 MiB is the least
      // (c10/core/AllocatorConfig.cpp, min_allowed_split_size_mb).
      c.max_split_size = mebibytes(20, "a whole number of MiB, at least 20");
    } else if (key == "max_non_split_rounding_mb") {
      c.max_non_split_rounding = mebibytes(0, "a whole number of MiB");
    } else if (key == "roundup_power2_divisions") {
      read_divisions(c, value);
    } else if (key == "garbage_collection_threshold") {
      c.garbage_collection_threshold_ppm = millionths(value);
      if (c.garbage_collection_threshold_ppm <= 0)
        rules::alloc_conf_value_must_be_valid(key, value,
                                              "a fraction between 0 and 1, such as 0.8");
    } else if (key == "backend") {
      if (value != "native")
        rules::alloc_conf_value_must_be_valid(
            key, value, "native (cudaMallocAsync's pool belongs to the driver: not simulated)");
    } else if (key != "pinned_use_cuda_host_register" && key != "pinned_num_register_threads" &&
               key != "pinned_use_background_threads" && key != "release_lock_on_cudamalloc") {
      rules::alloc_conf_option_must_be_known(key);
    }
  }
  return c;
}

}  // namespace vramfit
