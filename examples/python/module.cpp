// SPDX-License-Identifier: MIT
// _vramfit: the command-line tool in-process, for the Python package around it (vramfit/*.py).
// The package turns keyword arguments into the tool's own words and reads its JSON, so every
// option name, choice, default, number and message is the tool's: there is no second parser.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>
#include <string>
#include <tuple>
#include <vector>
#include <vramfit/version.hpp>

#include "tool.hpp"

namespace py = pybind11;

namespace {

/// One run of the tool on `args` (the words after "vramfit"): its exit status, stdout and stderr.
/// The GIL stays held: a run sets the tool's process-wide size prefixes (--units).
std::tuple<int, std::string, std::string> run(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  vramfit::cli::tool tool;
  const int status = tool.run(args, out, err);
  return {status, out.str(), err.str()};
}

const CLI::App& subcommand(const vramfit::cli::tool& tool, const std::string& name) {
  for (const CLI::App* sub : tool.app().get_subcommands({}))
    if (sub->get_name() == name) return *sub;
  throw py::value_error("vramfit has no subcommand '" + name + "'");
}

/// The options of subcommand `name` as the parser registered them: (long name without dashes,
/// kind, values), kind "flag" (no value), "list" (repeatable) or "value"; values as the shell
/// completion offers them (the parser's tables or its choice sets), empty when free-form.
std::vector<std::tuple<std::string, std::string, std::vector<std::string>>> options(
    const std::string& name) {
  const vramfit::cli::tool tool;
  const CLI::App& sub = subcommand(tool, name);
  std::vector<std::tuple<std::string, std::string, std::vector<std::string>>> listed;
  for (const CLI::Option* o : sub.get_options()) {
    if (o == sub.get_help_ptr() || o->get_lnames().empty()) continue;
    const std::string& option = o->get_lnames().front();
    const char* kind = o->get_expected_max() == 0        ? "flag"
                       : o->get_items_expected_max() > 1 ? "list"
                                                         : "value";
    std::vector<std::string> values;
    std::istringstream words(vramfit::cli::option_values(*o, option));
    for (std::string word; words >> word;) values.push_back(word);
    listed.emplace_back(option, kind, values);
  }
  return listed;
}

/// `vramfit <name> --help`.
std::string usage(const std::string& name) {
  const vramfit::cli::tool tool;
  return subcommand(tool, name).help(tool.app().get_name());  // "Usage: vramfit <name>"
}

}  // namespace

PYBIND11_MODULE(_vramfit, m) {
  m.doc() = "vramfit's command-line tool in-process (use the package vramfit)";
  m.attr("version") = vramfit::version;
  m.def("run", &run, py::arg("args"),
        "Runs `vramfit ARGS...`: (exit status, standard output, standard error)");
  m.def("options", &options, py::arg("subcommand"),
        "The options of a subcommand: (name, 'flag'|'list'|'value', values)");
  m.def("usage", &usage, py::arg("subcommand"), "`vramfit SUBCOMMAND --help`");
}
