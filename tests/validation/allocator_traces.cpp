// The simulated caching allocator (caching_allocator.hpp) against PyTorch's own, decision by
// decision: each traced training step under tests/validation/gpu (traces/: an H100, steady steps;
// h200/traces/: an H200, steps from an emptied allocator and FSDP2's side streams; torch 2.11;
// every request and free with the segment maps before and after) is replayed from the segments
// the real allocator held when the trace began, each new segment placed where cudaMalloc put it.
// Every request must land at the address PyTorch gave it and the segments must end as PyTorch's
// did. Prints the computed blocks of docs/allocator-traces.md; with --check it fails on any
// difference.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>
#include <vramfit/caching_allocator.hpp>
#include <vramfit/hf_config.hpp>
#include <vramfit/vramfit.hpp>

#include "../../examples/report.hpp"

using namespace vramfit;
using json = nlohmann::json;

namespace {

// A snapshot segment: [address, total_size, stream, pool, allocated_size, requested_size, blocks],
// a block: [address, size, requested_size, state] (gpu_measure.py, traces.jsonl).
using address = std::int64_t;

std::vector<json> by_address(const json& segments) {
  std::vector<json> sorted(segments.begin(), segments.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const json& a, const json& b) { return a[0].get<address>() < b[0].get<address>(); });
  return sorted;
}

/// A block's size, negative when it is cached (inactive); a pending free is still allocated.
std::int64_t signed_size(const json& block) {
  const auto size = block[1].get<std::int64_t>();
  return block[3] == "i" ? -size : size;
}

struct replay_result {
  std::string id;
  std::int64_t requests = 0, frees = 0, misplaced = 0;
  std::int64_t reserved = 0;      ///< held when the step began (and, with no new segment, after)
  std::int64_t segments = 0;      ///< held when the step began
  std::int64_t new_segments = 0;  ///< cudaMalloc'ed during the step by the simulation
  std::int64_t traced_new_segments = 0;
  std::string first_miss;  ///< the first request placed elsewhere, described
  bool maps_equal = false;
};

replay_result replay(const json& trace) {
  replay_result r{};
  r.id = trace["id"];
  caching_allocator alloc;
  std::vector<address> base;         // a simulated segment's address
  std::map<address, int> handle_at;  // a live tensor's address -> its handle
  for (const json& s : by_address(trace["segments_before"])) {
    std::vector<std::int64_t> map;
    for (const json& b : s[6]) map.push_back(signed_size(b));
    alloc.next_segment_address(s[0].get<address>());
    const int first = alloc.adopt_segment(map, s[2].get<int>(), s[3] == "small");
    for (std::size_t i = 0; i < map.size(); ++i)
      if (map[i] > 0) handle_at[s[6][i][0].get<address>()] = first + static_cast<int>(i);
    base.push_back(s[0].get<address>());
    r.reserved += s[1].get<std::int64_t>();
  }
  r.segments = static_cast<std::int64_t>(base.size());
  for (const json& e : trace["events"]) {
    const std::string action = e[0];
    const auto addr = e[1].get<address>();
    if (action == "segment_alloc" || action == "segment_map") ++r.traced_new_segments;
    if (action == "segment_alloc") alloc.next_segment_address(addr);  // cudaMalloc's choice
    if (action == "alloc") {
      ++r.requests;
      const int h = alloc.allocate(bytes{e[2].get<std::int64_t>()}, e[3].get<int>());
      if (alloc.segment_count() > base.size()) {
        base.push_back(addr);  // a new segment: its address is the one PyTorch gave the request
        ++r.new_segments;
      }
      const caching::block& b = alloc.block_at(h);
      const address placed = base[static_cast<std::size_t>(b.segment)] + b.offset;
      if (placed != addr && r.misplaced++ == 0)
        r.first_miss = "request " + std::to_string(r.requests) + " of " + e[2].dump() + " B at +" +
                       std::to_string(placed - addr);
      handle_at[addr] = h;
    } else if (action == "free_completed") {
      ++r.frees;
      alloc.release(handle_at.at(addr));
      handle_at.erase(addr);
    }
  }
  // The simulated segments in address order, as the snapshot lists them.
  std::vector<std::size_t> order(base.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return base[a] < base[b]; });
  const std::vector<json> after = by_address(trace["segments_after"]);
  r.maps_equal = after.size() == alloc.segment_count();
  for (std::size_t s = 0; r.maps_equal && s < after.size(); ++s) {
    std::vector<std::int64_t> traced;
    for (const json& b : after[s][6]) traced.push_back(signed_size(b));
    r.maps_equal =
        after[s][0].get<address>() == base[order[s]] && traced == alloc.segment_map(order[s]);
  }
  return r;
}

/// The bytes one step allocates on side streams: traced (requests on a stream other than the
/// default's, stream 0) and as vramfit's step timeline places them (timeline_event::stream).
struct side_bytes {
  std::int64_t traced = 0, predicted = 0;
};

/// An FSDP2 trace's configuration (fsdp_measure.py's id: model/fsdp2/weights/policy/reshard/...)
/// as vramfit's training: FSDP2 over one rank, bf16 weights without a policy or fp32 weights
/// under MixedPrecisionPolicy(bf16, fp32) (mixed<bf16>), reshard_after_forward False as 1.
side_bytes fsdp2_side_streams(const json& trace, const std::filesystem::path& configs) {
  side_bytes out{};
  for (const json& e : trace["events"])
    if (e[0] == "alloc" && e[3].get<std::int64_t>() != 0) out.traced += e[2].get<std::int64_t>();
  const std::string id = trace["id"];
  const std::string name = id.substr(0, id.find('/'));  // llama3-8b-2l
  training t{load_hf_config(configs / ("llama-3-8b-" + name.substr(name.rfind('-') + 1) + ".json")),
             id.find("/no-mp/") != std::string::npos ? pure<bf16>::value : mixed<bf16>::value,
             adamw<>::value};
  t.layout = {.zero = sharding::zero3,
              .implementation = shard_implementation::fsdp,
              .fsdp_version = 2,
              .reshard_after_forward = id.find("/keep/") != std::string::npos ? 1 : 0};
  const step_timeline tl = step_timeline_of(t, {.micro_batch = 1, .sequence = 1024});
  for (const timeline_event& e : tl.events)
    if (e.delta > bytes{} && e.stream != alloc_stream::main)
      out.predicted += (e.delta * (e.first_layer >= 0 ? e.layers : 1)).count;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  std::vector<std::filesystem::path> files;
  std::vector<std::filesystem::path> expandable;  // listed, not replayed (see the doc)
  for (const auto& f : std::filesystem::recursive_directory_iterator(VRAMFIT_ALLOCATOR_TRACES)) {
    const std::filesystem::path& path = f.path();
    if (path.extension() != ".json" || path.parent_path().filename() != "traces") continue;
    (path.filename().string().find("expseg") != std::string::npos ? expandable : files)
        .push_back(path);
  }
  std::sort(files.begin(), files.end());
  std::sort(expandable.begin(), expandable.end());  // directory order differs between checkouts
  const report::page_blocks page(std::cout, "allocator_traces.cpp");
  std::string replays =
      "| traced step | GPU | steps | requests | frees | segments held | reserved (B) | "
      "new segments (traced / simulated) | placed elsewhere | segment maps after |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|---|\n";
  char line[1024];
  std::int64_t requests = 0, misplaced = 0, unequal = 0;
  std::string streams;  // the FSDP2 steady steps' side-stream bytes, traced and predicted
  std::int64_t streams_differ = 0;
  for (const auto& path : files) {
    std::ifstream in(path);
    const json trace = json::parse(in);
    if (trace.value("step", json(4)) == json(4) &&
        trace["id"].get<std::string>().find("/fsdp2/") != std::string::npos) {
      const side_bytes b =
          fsdp2_side_streams(trace, std::filesystem::path(VRAMFIT_ALLOCATOR_TRACES) / "configs");
      streams_differ += b.traced != b.predicted ? 1 : 0;
      streams += "| " + trace["id"].get<std::string>() + " | " + std::to_string(b.traced) + " | " +
                 std::to_string(b.predicted) + " |\n";
    }
    const replay_result r = replay(trace);
    requests += r.requests;
    misplaced += r.misplaced;
    unequal += r.maps_equal ? 0 : 1;
    const bool h200 = path.parent_path().parent_path().filename() == "h200";
    const json step = trace.value("step", json(4));  // the H100 traces are of step 4
    std::snprintf(line, sizeof line,
                  "| %s | %s | %s | %lld | %lld | %lld | %lld | %lld / %lld | %lld%s | %s |\n",
                  r.id.c_str(), h200 ? "H200" : "H100",
                  step.is_string() ? step.get<std::string>().c_str() : step.dump().c_str(),
                  static_cast<long long>(r.requests), static_cast<long long>(r.frees),
                  static_cast<long long>(r.segments), static_cast<long long>(r.reserved),
                  static_cast<long long>(r.traced_new_segments),
                  static_cast<long long>(r.new_segments), static_cast<long long>(r.misplaced),
                  r.first_miss.empty() ? "" : (" (first: " + r.first_miss + ")").c_str(),
                  r.maps_equal ? "equal" : "differ");
    replays += line;
  }
  std::snprintf(
      line, sizeof line,
      "\n%lld requests in %zu traces, %lld placed elsewhere; segment maps differing after "
      "the trace: %lld.\n\nNot replayed (expandable segments):",
      static_cast<long long>(requests), files.size(), static_cast<long long>(misplaced),
      static_cast<long long>(unequal));
  replays += line;
  for (const auto& path : expandable) replays += " `" + path.filename().string() + "`";
  page.print("replays", replays + ".\n");
  page.print("side-streams",
             "| traced step | traced (B) | vramfit (B) |\n|---|---:|---:|\n" + streams);
  if (check && (misplaced > 0 || unequal > 0 || files.empty())) {
    std::fprintf(stderr, "the simulated allocator placed requests elsewhere than PyTorch\n");
    return 1;
  }
  if (check && (streams_differ > 0 || streams.empty())) {
    std::fprintf(stderr, "vramfit's side streams allocate other bytes than the FSDP2 traces\n");
    return 1;
  }
  return 0;
}
