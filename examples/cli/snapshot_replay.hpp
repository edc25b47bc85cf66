// SPDX-License-Identifier: MIT
// A torch.cuda.memory._snapshot() (its JSON; the Python module converts the pickle) replayed:
// the allocated and reserved peaks of its trace, the phase of the allocated peak from the frames,
// and what was live then. The layout is torch/cuda/memory.py _snapshot()'s docstring: segments
// [{device, address, total_size, blocks: [{address, size, requested_size, state}]}] as the
// allocator stands when the snapshot is taken, and device_traces [[{action, addr, size, frames}]]
// the events before it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>
#include <vramfit/hf_config.hpp>
#include <vramfit/vramfit.hpp>

#include "choices.hpp"
#include "input_checks.hpp"
#include "measured_step.hpp"

namespace vramfit::cli {

namespace detail_snapshot {

/// Past this a file is refused before it is parsed (nlohmann::json takes several times its size).
inline constexpr std::uintmax_t max_snapshot_bytes = std::uintmax_t{1} << 30;
inline constexpr int max_snapshot_depth = 16;  // a snapshot nests 6 deep (trace, entry, frame)

/// CUDACachingAllocator.cpp round_size: a block is at least kMinBlockSize (512 B) and a multiple
/// of it (without roundup_power2_divisions). The trace records the requested size (orig_size).
constexpr std::int64_t block_bytes(std::int64_t requested) {
  constexpr std::int64_t min_block = 512;
  return requested < min_block ? min_block : (requested + min_block - 1) / min_block * min_block;
}

class reader {
 public:
  explicit reader(std::string what) : what_(std::move(what)) {}

  [[noreturn]] void refuse(const std::string& why) const { detail::raise(what_ + ": " + why); }

  /// A non-negative integer field of `o` (std::nullopt when absent and not `required`).
  std::optional<std::int64_t> count(const nlohmann::json& o, const char* key, const char* where,
                                    bool required = true) const {
    const auto it = o.find(key);
    if (it == o.end() || it->is_null()) {
      if (required) refuse(std::string(where) + " has no '" + key + "'");
      return std::nullopt;
    }
    if (it->is_number_unsigned() && it->get<std::uint64_t>() > std::uint64_t{INT64_MAX})
      refuse(std::string(where) + " '" + key + "' " + it->dump() + " overflows 64 bits");
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0)
      refuse(std::string(where) + " '" + key + "' must be a byte count or address, got " +
             vramfit::detail::shown(*it));
    return it->get<std::int64_t>();
  }

  std::int64_t add(std::int64_t a, std::int64_t b) const {
    if (b > 0 ? a > INT64_MAX - b : a < INT64_MIN - b) refuse("its sizes overflow 64 bits");
    return a + b;
  }

 private:
  std::string what_;
};

inline nlohmann::json parse_file(const std::filesystem::path& path, const reader& r) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    r.refuse(std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > max_snapshot_bytes)
    r.refuse("larger than 1 GiB; record fewer entries (_record_memory_history max_entries)");
  std::ifstream in(path, std::ios::binary);
  if (!in) r.refuse("cannot be read");
  // The depth is checked as the parser goes, before a hostile nesting can recurse on the stack.
  const auto shallow = [&r](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > max_snapshot_depth)
      r.refuse("nests deeper than " + std::to_string(max_snapshot_depth) +
               " levels: not a snapshot");
    return true;
  };
  try {
    return nlohmann::json::parse(in, shallow);
  } catch (const nlohmann::json::parse_error& e) {
    r.refuse(
        "not JSON (a snapshot's pickle: read it with vramfit.compare in Python), parse "
        "error at byte " +
        std::to_string(e.byte));
  } catch (const nlohmann::json::out_of_range&) {  // 406: a number past a double
    r.refuse("holds a number too large for a double: not a snapshot");
  }
}

/// The phase of an allocation from its frames, innermost first, or "" when they do not say:
/// torch.optim's step (zero_grad apart) or autograd's backward (Tensor.backward, the engine,
/// a checkpoint's recompute) anywhere in the stack; else the innermost frame of a loss or of a
/// module's forward.
inline std::string phase_of(const nlohmann::json& frames) {
  const auto text = [](const nlohmann::json& f, const char* key) {
    const auto it = f.find(key);
    return it != f.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const auto in_dir = [](const std::string& file, const std::string& dir) {
    const std::size_t at = file.find(dir + "/");
    return at != std::string::npos && (at == 0 || file[at - 1] == '/');
  };
  for (const nlohmann::json& f : frames) {
    if (!f.is_object()) continue;
    const std::string file = text(f, "filename"), name = text(f, "name");
    if (in_dir(file, "optim")) return name == "zero_grad" ? "zero_grad" : "optimizer";
    if (name == "backward" || name == "_engine_run_backward" || name == "_make_grads" ||
        name == "recompute_fn" || name == "unpack_hook" ||
        name.find("autograd::Engine") != std::string::npos)
      return "backward";
  }
  for (const nlohmann::json& f : frames) {
    if (!f.is_object()) continue;
    const std::string file = text(f, "filename"), name = text(f, "name");
    std::string lower =
        name + " " + file.substr(file.rfind('/') == std::string::npos ? 0 : file.rfind('/') + 1);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; });
    if (lower.find("loss") != std::string::npos || lower.find("cross_entropy") != std::string::npos)
      return "loss";
    if (name == "forward" || in_dir(file, "modules") || file.ends_with("nn/functional.py"))
      return "forward";
  }
  return "";
}

/// Where an allocation was made: its innermost Python frame as "dir/file.py:line:function".
inline std::string site_of(const nlohmann::json& frames) {
  for (const nlohmann::json& f : frames) {
    if (!f.is_object() || !f.contains("filename") || !f["filename"].is_string()) continue;
    const std::string file = f["filename"].get<std::string>();
    if (!file.ends_with(".py")) continue;
    const std::size_t last = file.rfind('/');
    const std::size_t dir =
        last == std::string::npos || last == 0 ? std::string::npos : file.rfind('/', last - 1);
    const std::string shown = dir == std::string::npos ? file : file.substr(dir + 1);
    const std::string line =
        f.contains("line") && f["line"].is_number_integer() ? f["line"].dump() : "?";
    const std::string name =
        f.contains("name") && f["name"].is_string() ? f["name"].get<std::string>() : "?";
    return printable(shown + ":" + line + ":" + name);  // the output stays valid UTF-8 and JSON
  }
  return "no Python frame (autograd engine or C++)";
}

/// One trace entry that moves bytes, read and checked.
struct trace_event {
  enum kind_t { alloc, free_requested, free_completed, segment_add, segment_remove, other } kind;
  std::int64_t addr = 0, size = 0;
  std::size_t index = 0;  ///< in the device's trace
};

inline trace_event event_of(const nlohmann::json& e, std::size_t index, const reader& r) {
  const std::string where = "device_traces entry " + std::to_string(index);
  if (!e.is_object() || !e.contains("action") || !e["action"].is_string())
    r.refuse(where + " has no action: not a snapshot's trace");
  const std::string action = e["action"].get<std::string>();
  trace_event t{trace_event::other, 0, 0, index};
  // segment_map / segment_unmap: expandable segments growing and shrinking (memory.py).
  if (action == "alloc") t.kind = trace_event::alloc;
  if (action == "free_requested") t.kind = trace_event::free_requested;
  if (action == "free_completed") t.kind = trace_event::free_completed;
  if (action == "segment_alloc" || action == "segment_map") t.kind = trace_event::segment_add;
  if (action == "segment_free" || action == "segment_unmap") t.kind = trace_event::segment_remove;
  if (t.kind == trace_event::other) return t;  // oom, snapshot, annotate: no bytes move
  t.addr = *r.count(e, "addr", where.c_str());
  t.size = *r.count(e, "size", where.c_str());
  return t;
}

}  // namespace detail_snapshot

/// The snapshot in `path`, replayed. Refuses what is not a snapshot, a trace that is empty or
/// was cut (its ring buffer overflowed), one that contradicts the segments, and sizes past 64
/// bits, in one line.
inline measured_step read_snapshot(const std::string& path) {
  using namespace detail_snapshot;
  const reader r("--snapshot '" + shown_value(path) + "'");
  const nlohmann::json doc = parse_file(path, r);
  if (!doc.is_object() || !doc.contains("segments") || !doc["segments"].is_array() ||
      !doc.contains("device_traces") || !doc["device_traces"].is_array())
    r.refuse("not a torch.cuda.memory._snapshot() (it has no segments and device_traces)");
  const nlohmann::json& traces = doc["device_traces"];
  std::vector<std::size_t> traced;
  for (std::size_t d = 0; d < traces.size(); ++d) {
    if (!traces[d].is_array()) r.refuse("device_traces must hold one list per device");
    if (!traces[d].empty()) traced.push_back(d);
  }
  if (traced.empty())
    r.refuse(
        "its device_traces are empty: call torch.cuda.memory._record_memory_history() "
        "before the step and take the snapshot after it");
  if (traced.size() > 1)
    r.refuse("it traces " + std::to_string(traced.size()) +
             " devices: compare one GPU's snapshot (take it on each rank)");
  const std::size_t device = traced.front();
  const nlohmann::json& trace = traces[device];

  // The state when the snapshot was taken: live blocks by address, and the reserved bytes.
  std::unordered_map<std::int64_t, std::int64_t> live;  // address -> requested bytes
  std::int64_t reserved = 0;
  for (const nlohmann::json& seg : doc["segments"]) {
    if (!seg.is_object()) r.refuse("a segment is not an object");
    if (const auto d = r.count(seg, "device", "a segment", false); d && *d != std::int64_t(device))
      continue;
    reserved = r.add(reserved, *r.count(seg, "total_size", "a segment"));
    std::int64_t at = *r.count(seg, "address", "a segment");
    if (!seg.contains("blocks") || !seg["blocks"].is_array()) r.refuse("a segment has no blocks");
    for (const nlohmann::json& b : seg["blocks"]) {
      if (!b.is_object()) r.refuse("a block is not an object");
      const std::int64_t size = *r.count(b, "size", "a block");
      const std::int64_t address = r.count(b, "address", "a block", false).value_or(at);
      at = r.add(address, size);
      if (b.value("state", "") != "active_allocated") continue;
      live[address] = r.count(b, "requested_size", "a block", false).value_or(size);
    }
  }

  // Back from that state through the trace to the state when it began.
  std::vector<trace_event> events;
  events.reserve(trace.size());
  for (std::size_t i = 0; i < trace.size(); ++i) events.push_back(event_of(trace[i], i, r));
  const auto contradicts = [&r](const trace_event& e, const char* why) {
    r.refuse("trace entry " + std::to_string(e.index) + " " + why +
             ": the trace does not match the segments");
  };
  for (auto e = events.rbegin(); e != events.rend(); ++e) {
    if (e->kind == trace_event::alloc) {
      if (live.erase(e->addr) == 0) contradicts(*e, "allocates a block that is not live later");
    } else if (e->kind == trace_event::free_requested) {
      if (!live.emplace(e->addr, e->size).second) contradicts(*e, "frees a block live after it");
    } else if (e->kind == trace_event::segment_add) {
      reserved -= e->size;
    } else if (e->kind == trace_event::segment_remove) {
      reserved = r.add(reserved, e->size);
    }
    if (reserved < 0) contradicts(*e, "adds a segment larger than those reserved later");
  }
  // A ring buffer that overflowed (max_entries) keeps the latest entries: its first ones then
  // complete frees whose request was dropped.
  {
    std::unordered_map<std::int64_t, bool> requested;
    for (const trace_event& e : events) {
      if (e.kind == trace_event::free_requested) requested[e.addr] = true;
      if (e.kind == trace_event::free_completed && !requested.erase(e.addr))
        r.refuse("its trace was cut: entry " + std::to_string(e.index) +
                 " completes a free it never requested (the ring buffer overflowed: record with "
                 "a larger max_entries)");
    }
  }

  measured_step m;
  m.source = "snapshot";
  m.file = path;
  m.entries = static_cast<std::int64_t>(trace.size());
  // Forward from the start: the peaks, the phase of each event from its frames.
  bool any_frames = false;
  for (const nlohmann::json& e : trace)
    if (e.contains("frames") && e["frames"].is_array() && !e["frames"].empty()) any_frames = true;
  std::int64_t allocated = 0, requested = 0, peak = 0, peak_requested = 0, peak_reserved = reserved;
  for (const auto& [addr, size] : live) {
    allocated = r.add(allocated, block_bytes(size));
    requested = r.add(requested, size);
  }
  m.at_start = bytes{allocated};
  peak = allocated;
  peak_requested = requested;
  std::size_t peak_at = 0;  // events before the peak: 0 is the start
  auto state = live;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const trace_event& e = events[i];
    if (e.kind == trace_event::alloc) {
      state[e.addr] = e.size;
      allocated = r.add(allocated, block_bytes(e.size));
      requested = r.add(requested, e.size);
      ++m.allocations;
      if (allocated > peak) {
        peak = allocated;
        peak_at = i + 1;
      }
      peak_requested = std::max(peak_requested, requested);
    } else if (e.kind == trace_event::free_requested) {
      const std::int64_t size = state[e.addr];
      state.erase(e.addr);
      allocated -= block_bytes(size);
      requested -= size;
    } else if (e.kind == trace_event::segment_add) {
      reserved = r.add(reserved, e.size);
      peak_reserved = std::max(peak_reserved, reserved);
    } else if (e.kind == trace_event::segment_remove) {
      reserved -= e.size;
    }
  }
  m.allocated = bytes{peak};
  m.requested = bytes{peak_requested};
  m.reserved = bytes{peak_reserved};

  // Again up to the peak: each phase's net change, and the live blocks by where they were made.
  std::map<std::string, std::int64_t> net;
  const std::vector<std::string> order = {"",         "forward",   "loss",
                                          "backward", "optimizer", "zero_grad"};
  std::string phase;  // the latest that frames named; frees count in it
  std::unordered_map<std::int64_t, std::pair<std::int64_t, std::string>> at_peak;
  for (const auto& [addr, size] : live) at_peak[addr] = {size, "live before the trace"};
  for (std::size_t i = 0; i < peak_at; ++i) {
    const trace_event& e = events[i];
    if (e.kind == trace_event::alloc) {
      const nlohmann::json& frames =
          trace[e.index].contains("frames") ? trace[e.index]["frames"] : nlohmann::json::array();
      const std::string named = !any_frames      ? ""
                                : frames.empty() ? "backward"
                                                 : phase_of(frames);  // engine's thread
      if (!named.empty()) phase = named;
      net[phase] += block_bytes(e.size);
      at_peak[e.addr] = {e.size, site_of(frames)};
    } else if (e.kind == trace_event::free_requested) {
      net[phase] -= block_bytes(at_peak[e.addr].first);
      at_peak.erase(e.addr);
    }
  }
  if (!phase.empty()) m.phase = phase;
  for (const std::string& p : order)
    if (net.count(p)) m.phases.push_back({p.empty() ? "unknown" : p, bytes{net[p]}});
  std::map<std::string, live_site> sites;
  for (const auto& [addr, block] : at_peak) {
    live_site& s = sites[block.second];
    s.site = block.second;
    s.size += bytes{block_bytes(block.first)};
    ++s.allocations;
  }
  for (auto& [name, s] : sites) m.sites.push_back(s);
  std::sort(m.sites.begin(), m.sites.end(), [](const live_site& a, const live_site& b) {
    return a.size != b.size ? a.size > b.size : a.site < b.site;
  });
  return m;
}

}  // namespace vramfit::cli
