// SPDX-License-Identifier: MIT
// `vramfit compare` on a committed snapshot (tests/data/compare: a measured H100 trace re-encoded
// as torch.cuda.memory._snapshot()'s JSON by make_snapshot.py), on torchtune's and torchtitan's
// log lines, and its refusals.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "cli_support.hpp"

using namespace vramfit::cli_test;

namespace {

const std::string snapshot = data_dir + "/compare/llama3-8b-2l_snapshot.json";
// The measured run's configuration (tests/validation/gpu/steps.jsonl, gpu_compare.py's flags).
const std::string measured_run = "--model " + data_dir +
                                 "/../validation/gpu/configs/llama-3-8b-2l.json --precision bf16 "
                                 "--optimizer adamw --micro-batch 1 --seq-len 1024 --gpu h100";

std::string written(const std::string& name, const std::string& text) {
  std::ofstream(name, std::ios::binary) << text;
  return name;
}

std::int64_t at(const nlohmann::json& j, const char* key) {
  return j.at(key).get<std::int64_t>();
}

}  // namespace

TEST_CASE("compare --snapshot: the measured peaks of the committed H100 trace") {
  const nlohmann::json j = json_of("compare --snapshot " + snapshot + " " + measured_run);
  const nlohmann::json& m = j.at("measured");
  // make_snapshot.py's own replay of the compact trace (it also checks that segments_before plus
  // the events give segments_after) prints: live requested bytes at the start 8,989,573,636,
  // peak 14,937,178,632; in 512 B blocks at the start 8,989,574,656, peak 14,937,180,160.
  CHECK(at(m, "requested") == 14'937'178'632);
  CHECK(at(m, "allocated") == 14'937'180'160);
  // Independently, torch.cuda.memory_stats of step 2 of the same run (steps.jsonl, step 4 was
  // traced): peak_requested 14,937,178,628, peak_allocated 14,937,179,648, within a block.
  CHECK(std::abs(at(m, "requested") - 14'937'178'628) <= 512);
  CHECK(std::abs(at(m, "allocated") - 14'937'179'648) <= 512);
  // No segment event in the trace: reserved is the segments' 16,433,283,072 B, which is
  // steps.jsonl's peak_reserved to the byte; and its peak_phase is the optimizer.
  CHECK(at(m, "reserved") == 16'433'283'072);
  CHECK(m.at("phase") == "optimizer");
  CHECK(at(m, "entries") == 927);
  CHECK(at(m, "allocations") == 309);
  // Each side's rows add up to its peak: held at the start plus each phase's net change.
  std::int64_t measured = 0, predicted = 0;
  for (const nlohmann::json& r : j.at("differences")) {
    measured += at(r, "measured");
    predicted += at(r, "predicted");
    CHECK(at(r, "difference") == at(r, "predicted") - at(r, "measured"));
  }
  CHECK(measured == at(m, "allocated"));
  CHECK(predicted == at(j.at("predicted"), "timeline_peak"));
  // The start is the weights, the AdamW states and the cuBLAS workspaces: steps.jsonl's
  // allocated_before 8,989,574,144 (step 2's start), within a block.
  for (const nlohmann::json& r : j.at("differences"))
    if (r.at("category") == "held at the start")
      CHECK(std::abs(at(r, "measured") - 8'989'574'144) <= 512);
  // The largest differences come first.
  const nlohmann::json& d = j.at("differences");
  for (std::size_t i = 1; i < d.size(); ++i)
    CHECK(std::abs(at(d[i - 1], "difference")) >= std::abs(at(d[i], "difference")));
  // The prediction is train's for the same options.
  const nlohmann::json train = json_of("train --timeline " + measured_run);
  CHECK(at(j.at("predicted"), "allocated") == at(train.at("memory"), "allocated"));
  CHECK(at(j.at("predicted"), "reserved") == at(train.at("memory"), "reserved"));
  CHECK(j.at("predicted").at("phase") == train.at("timeline_peak").at("phase"));
  // Live at the measured peak: the 21 AdamW foreach temporaries of the optimizer step.
  bool adam = false;
  for (const nlohmann::json& s : j.at("measured_at_peak"))
    if (s.at("site") == "optim/adam.py:791:_multi_tensor_adam") adam = at(s, "allocations") == 21;
  CHECK(adam);
}

TEST_CASE("compare --snapshot: the text and Markdown name the peaks side by side") {
  const result text = run("compare --snapshot " + snapshot + " " + measured_run);
  REQUIRE(text.status == 0);
  CHECK(text.out.find("peak allocated") != std::string::npos);
  CHECK(text.out.find("13.91 GiB") != std::string::npos);  // 14,937,180,160 B
  CHECK(text.out.find("15.30 GiB") != std::string::npos);  // 16,433,283,072 B
  const result md = run("compare --snapshot " + snapshot + " " + measured_run + " -f markdown");
  REQUIRE(md.status == 0);
  CHECK(md.out.find("| peak reserved | 15.30 GiB |") != std::string::npos);
  CHECK(md.out.find("| held at the start |") != std::string::npos);
}

TEST_CASE("compare --log: torchtune's and torchtitan's logged peaks, the largest of the log") {
  // torchtune log_memory_stats, before February 2025 ("allocation") and after ("alloc"), and its
  // metric logger's key:value form; GiB = 2^30 B.
  const std::string tune =
      written("compare_tune.log",
              "Memory stats after model init:\n\tGPU peak memory allocation: 6.21 GiB\n"
              "\tGPU peak memory reserved: 6.27 GiB\n\tGPU peak memory active: 6.21 GiB\n"
              "Step 1 | loss:1.25 peak_memory_active:13.91 peak_memory_alloc:13.91 "
              "peak_memory_reserved:15.30\n"
              "\tGPU peak memory alloc: 12.00 GiB\n");
  const nlohmann::json t = json_of("compare --log " + tune + " " + measured_run);
  // 13.91 x 2^30 = 14,935,748,771.84; 15.30 x 2^30 = 16,428,249,907.2; half of 0.01 GiB is
  // 5,368,709.12 B.
  CHECK(at(t.at("measured"), "allocated") == 14'935'748'772);
  CHECK(at(t.at("measured"), "reserved") == 16'428'249'907);
  CHECK(at(t.at("measured"), "active") == 14'935'748'772);
  CHECK(at(t.at("measured"), "resolution") == 5'368'709);
  CHECK(t.at("measured").at("source") == "torchtune log");
  CHECK(t.at("measured").at("phase") == "unknown");
  // torchtitan's step lines (with their colors), max_reserved; a validation step's is not one.
  const std::string titan = written(
      "compare_titan.log",
      "[titan] INFO - \x1b[31mstep:  1  \x1b[32mloss: 12.0000  \x1b[38;2;54;234;195mmemory: "
      "37.29GiB(39.25%)  \x1b[34mtps: 1,234\n"
      "[titan] INFO - step: 10  loss:  8.1000  grad_norm:  1.0000  memory: 38.01GiB(40.00%)\n"
      "[titan] INFO - validate step: 10  loss:  8.1000  memory: 60.00GiB(63.16%)\n");
  const nlohmann::json n = json_of("compare --log " + titan + " " + measured_run);
  CHECK(at(n.at("measured"), "reserved") == 40'812'926'730);  // 38.01 x 2^30 = ...730.24
  CHECK(n.at("measured").at("allocated").is_null());
  CHECK(n.at("measured").at("source") == "torchtitan log");
}

TEST_CASE("compare refuses in one line what it cannot compare") {
  const std::string base = "compare " + measured_run + " ";
  check_refusal(run(base), "give --snapshot FILE or --log FILE");
  check_refusal(run(base + "--snapshot " + snapshot + " --log x.log"), "give --snapshot");
  check_refusal(run(base + "--snapshot no-such.json"), "no such file");
  check_refusal(run(base + "--snapshot " + written("c_text.json", "not json")), "not JSON");
  check_refusal(run(base + "--snapshot " + written("c_huge.json", R"({"segments": [1e999]})")),
                "holds a number too large for a double");
  check_refusal(run(base + "--snapshot " + written("c_list.json", "[1, 2]")),
                "not a torch.cuda.memory._snapshot()");
  check_refusal(run(base + "--snapshot " +
                    written("c_empty.json", R"({"segments": [], "device_traces": [[]]})")),
                "device_traces are empty");
  // A free completed that was never requested: the ring buffer dropped the start.
  check_refusal(
      run(base + "--snapshot " + written("c_cut.json", R"({"segments": [], "device_traces": [[
                      {"action": "free_completed", "addr": 4096, "size": 512},
                      {"action": "alloc", "addr": 8192, "size": 512},
                      {"action": "free_requested", "addr": 8192, "size": 512},
                      {"action": "free_completed", "addr": 8192, "size": 512}]]})")),
      "trace was cut");
  // A block allocated that the segments do not show live, nor a free of it.
  check_refusal(
      run(base + "--snapshot " + written("c_mismatch.json", R"({"segments": [], "device_traces": [[
                      {"action": "alloc", "addr": 8192, "size": 512}]]})")),
      "does not match the segments");
  check_refusal(
      run(base + "--snapshot " +
          written("c_overflow.json",
                  R"({"segments": [{"address": 0, "total_size": 9223372036854775807, "blocks": []},
                                   {"address": 1, "total_size": 9223372036854775807, "blocks": []}],
                      "device_traces": [[{"action": "snapshot"}]]})")),
      "overflow 64 bits");
  check_refusal(
      run(base + "--snapshot " + written("c_huge.json", R"({"segments": [], "device_traces": [[
                      {"action": "alloc", "addr": 0, "size": 18446744073709551615}]]})")),
      "overflows 64 bits");
  check_refusal(
      run(base + "--snapshot " + written("c_two.json", R"({"segments": [], "device_traces": [
                      [{"action": "snapshot"}], [{"action": "snapshot"}]]})")),
      "traces 2 devices");
  check_refusal(run(base + "--snapshot " + snapshot + " -f svg"), "leave out -f svg");
  check_refusal(run(base + "--snapshot " + snapshot + " --timeline"), "leave out --sweep");
  check_refusal(run(base + "--log " + written("c_none.log", "nothing here\n")),
                "no torchtune 'peak memory alloc");
}
