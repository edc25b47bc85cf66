// SPDX-License-Identifier: MIT
// What the CLI tests share: the tool run as a user runs it, from the build tree's test directory.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace vramfit::cli_test {

/// The tests write their files, and give the tool relative paths, in the build tree's
/// VRAMFIT_CLI_TEST_DIR, wherever they are started from: never in the source tree.
[[maybe_unused]] inline const bool in_test_dir = [] {
  std::filesystem::create_directories(VRAMFIT_CLI_TEST_DIR);
  std::filesystem::current_path(VRAMFIT_CLI_TEST_DIR);
  return true;
}();

inline const std::string data_dir = VRAMFIT_TEST_DATA_DIR;

struct result {
  int status;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs the tool with `args` (shell words), after `env` when given (env(1)'s words: "HF_HOME=x",
/// "-u HOME"). A hang is a failure (status 124), not a stuck test run; the limit is far above
/// any answer's time, which benchmarks check (an MoE QLoRA search takes 8 s of CPU under ASan).
inline result run(const std::string& args, const std::string& env = "") {
  static int calls = 0;  // ctest runs test cases in parallel processes: each call its own files
  const std::string stem =
      "vramfit_cli_" + std::to_string(getpid()) + "_" + std::to_string(++calls);
  const std::string out = stem + ".out", err = stem + ".err";
  const std::string prefix = env.empty() ? "" : "env " + env + " ";
  const int raw = std::system(
      (prefix + "timeout 60 " + std::string(VRAMFIT_CLI) + " " + args + " >" + out + " 2>" + err)
          .c_str());
  result r{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

/// A refusal: status 2 and one line that starts "vramfit: " and holds `part`.
inline void check_refusal(const result& r, const std::string& part) {
  CHECK(r.status == 2);
  CHECK(r.out.empty());
  CHECK(r.err.rfind("vramfit: ", 0) == 0);
  CHECK(r.err.find('\n') == r.err.size() - 1);
  CHECK(r.err.find(part) != std::string::npos);
}

/// The JSON answer of `args` (given --format json), which must succeed; `env` as run() takes it.
inline nlohmann::json json_of(const std::string& args, const std::string& env = "") {
  const result r = run(args + " -f json", env);
  INFO(args << " -> " << r.status << ": " << r.err);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.out);
}

/// The answer of `args` without --from's account of the file: what a round trip compares.
inline nlohmann::json without_from(const std::string& args) {
  nlohmann::json j = json_of(args);
  j.erase("from");
  return j;
}

/// The options --from's file set, as "--option value" words in order.
inline std::vector<std::string> from_options(const nlohmann::json& answer) {
  std::vector<std::string> words;
  for (const nlohmann::json& o : answer.at("from").at("options"))
    words.push_back(o.at("option").get<std::string>() + " " + o.at("value").get<std::string>());
  return words;
}

/// Whether `key` is listed in --from's `list` ("not_modeled", "overridden" or "no_effect").
inline bool lists(const nlohmann::json& answer, const std::string& list, const std::string& key) {
  for (const nlohmann::json& entry : answer.at("from").at(list))
    if ((entry.is_string() ? entry : entry.at("key")) == key) return true;
  return false;
}

}  // namespace vramfit::cli_test
