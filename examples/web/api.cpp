// SPDX-License-Identifier: MIT
// The command-line tool in-process for the browser page (docs/web): compiled to WebAssembly by
// em++ (examples/web/CMakeLists.txt), it runs the same parser and commands as the tool's binary,
// on the words a page passes as a JSON array, and answers the status and the tool's output. The
// page builds its form from the parser's option table, so it names no option or choice itself.
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "option_table.hpp"
#include "tool.hpp"

/// Runs `vramfit <args...>` with `args_json` a JSON array of strings (the words after
/// "vramfit"); returns {"status": exit status, "stdout": ..., "stderr": ...} as JSON text, valid
/// until the next call.
extern "C" const char* vramfit_run(const char* args_json) {
  static std::string answer;
  std::ostringstream out, err;
  int status = 2;
  try {
    const auto args = nlohmann::json::parse(args_json).get<std::vector<std::string>>();
    vramfit::cli::tool tool;
    status = tool.run(args, out, err);
  } catch (const std::exception& e) {
    err << "vramfit: " << e.what() << '\n';
  }
  answer = nlohmann::json{{"status", status}, {"stdout", out.str()}, {"stderr", err.str()}}.dump();
  return answer.c_str();
}

/// The options of `vramfit <subcommand>` (option_table.hpp) as a JSON array of {"name", "kind",
/// "values", "type", "default", "description"}, in the parser's order; {"error": message} when
/// there is no such subcommand. Valid until the next call.
extern "C" const char* vramfit_options(const char* subcommand) {
  static std::string answer;
  try {
    nlohmann::json listed = nlohmann::json::array();
    for (const vramfit::cli::option_entry& e : vramfit::cli::option_table(subcommand))
      listed.push_back({{"name", e.name},
                        {"kind", e.kind},
                        {"values", e.values},
                        {"type", e.type},
                        {"default", e.default_str},
                        {"description", e.description}});
    answer = listed.dump();
  } catch (const std::exception& e) {
    answer = nlohmann::json{{"error", e.what()}}.dump();
  }
  return answer.c_str();
}
