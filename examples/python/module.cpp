// SPDX-License-Identifier: MIT
// _vramfit: the command-line tool in-process, for the Python package around it (vramfit/*.py).
// The package turns keyword arguments into the tool's own words and reads its JSON, so every
// option name, choice, default, number and message is the tool's: there is no second parser.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#include <vramfit/units.hpp>
#include <vramfit/version.hpp>

#include "option_table.hpp"
#include "tool.hpp"

namespace py = pybind11;

namespace {

/// Bytes the tool wrote as a str: a byte that is not UTF-8 as U+FFFD, never UnicodeDecodeError.
py::str decoded(const std::string& text) {
  PyObject* str =
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (str == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(str);
}

/// One run of the tool on `args` (the words after "vramfit", str or bytes: a path that is not
/// UTF-8 comes as os.fsencode's bytes): its exit status, stdout and stderr. Other Python threads
/// go on while it runs.
std::tuple<int, std::string, std::string> run_raw(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int status = 0;
  {
    const py::gil_scoped_release released;
    vramfit::cli::tool tool;
    status = tool.run(args, out, err);
  }
  return {status, std::move(out).str(), std::move(err).str()};
}

/// `run_raw` with stdout and stderr as str.
std::tuple<int, py::str, py::str> run(const std::vector<std::string>& args) {
  auto [status, out, err] = run_raw(args);
  return {status, decoded(out), decoded(err)};
}

/// `run_raw` with stdout and stderr as bytes, as the tool wrote them: the `vramfit` console script.
std::tuple<int, py::bytes, py::bytes> run_bytes(const std::vector<std::string>& args) {
  auto [status, out, err] = run_raw(args);
  return {status, py::bytes(out), py::bytes(err)};
}

/// One option as the package reads it: (long name without dashes, kind, values, CLI11 type name,
/// default as --help shows it, help text).
using option_row = std::tuple<std::string, std::string, std::vector<std::string>, std::string,
                              std::string, std::string>;

/// The options of subcommand `name`: the shared option table (option_table.hpp) as tuples, which
/// the package unpacks into keywords and their signatures.
std::vector<option_row> options(const std::string& name) {
  std::vector<option_row> listed;
  for (vramfit::cli::option_entry& e : vramfit::cli::option_table(name))
    listed.emplace_back(std::move(e.name), std::move(e.kind), std::move(e.values),
                        std::move(e.type), std::move(e.default_str), std::move(e.description));
  return listed;
}

/// `size` bytes as the tool's tables write them ("44.47 GiB"; "47.75 GB" when `decimal`).
std::string size_text(std::int64_t size, bool decimal) {
  return vramfit::to_string(vramfit::bytes{size},
                            decimal ? vramfit::prefixes::decimal : vramfit::prefixes::binary);
}

/// The first line of `vramfit <name> --help`: what the subcommand does.
std::string description(const std::string& name) {
  vramfit::cli::tool tool;
  return tool.subcommand(name).get_description();
}

/// `vramfit <name> --help`.
std::string usage(const std::string& name) {
  vramfit::cli::tool tool;
  return tool.subcommand(name).help(tool.app().get_name());  // "Usage: vramfit <name>"
}

}  // namespace

PYBIND11_MODULE(_vramfit, m) {
  m.doc() = "vramfit's command-line tool in-process (use the package vramfit)";
  m.attr("version") = vramfit::version;
  m.def("run", &run, py::arg("args"),
        "Runs `vramfit ARGS...`: (exit status, standard output, standard error)");
  m.def("run_bytes", &run_bytes, py::arg("args"),
        "`run`, with standard output and standard error as bytes");
  m.def("options", &options, py::arg("subcommand"),
        "The options of a subcommand: (name, 'flag'|'list'|'value', values, type, default, help)");
  m.def("size_text", &size_text, py::arg("size"), py::arg("decimal") = false,
        "Bytes as the tool's tables write them: '44.47 GiB' (decimal: 'GB')");
  m.def("description", &description, py::arg("subcommand"),
        "What a subcommand does, as its --help says");
  m.def("usage", &usage, py::arg("subcommand"), "`vramfit SUBCOMMAND --help`");
}
