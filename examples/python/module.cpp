// SPDX-License-Identifier: MIT
// _vramfit: the command-line tool in-process, for the Python package around it (vramfit/*.py).
// The package turns keyword arguments into the tool's own words and reads its JSON, so every
// option name, choice, default, number and message is the tool's: there is no second parser.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#include <vramfit/version.hpp>

#include "option_table.hpp"
#include "tool.hpp"

namespace py = pybind11;

namespace {

/// One run of the tool on `args` (the words after "vramfit"): its exit status, stdout and stderr.
std::tuple<int, std::string, std::string> run(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  vramfit::cli::tool tool;
  const int status = tool.run(args, out, err);
  return {status, out.str(), err.str()};
}

/// The options of subcommand `name` as (long name without dashes, kind, values): the shared
/// option table (option_table.hpp) as tuples, which the package unpacks.
std::vector<std::tuple<std::string, std::string, std::vector<std::string>>> options(
    const std::string& name) {
  std::vector<std::tuple<std::string, std::string, std::vector<std::string>>> listed;
  for (vramfit::cli::option_entry& e : vramfit::cli::option_table(name))
    listed.emplace_back(std::move(e.name), std::move(e.kind), std::move(e.values));
  return listed;
}

/// `vramfit <name> --help`.
std::string usage(const std::string& name) {
  const vramfit::cli::tool tool;
  return vramfit::cli::subcommand_named(tool, name)
      .help(tool.app().get_name());  // "Usage: vramfit <name>"
}

}  // namespace

PYBIND11_MODULE(_vramfit, m) {
  m.doc() = "vramfit's command-line tool in-process (use the package vramfit)";
  m.attr("version") = vramfit::version;
  // A run shares nothing with another: other Python threads go on while it runs.
  m.def("run", &run, py::arg("args"), py::call_guard<py::gil_scoped_release>(),
        "Runs `vramfit ARGS...`: (exit status, standard output, standard error)");
  m.def("options", &options, py::arg("subcommand"),
        "The options of a subcommand: (name, 'flag'|'list'|'value', values)");
  m.def("usage", &usage, py::arg("subcommand"), "`vramfit SUBCOMMAND --help`");
}
