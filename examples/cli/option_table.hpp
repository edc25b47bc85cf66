// SPDX-License-Identifier: MIT
// A subcommand's options as the parser registered them, as plain structs: what the Python module
// (examples/python) turns into keyword arguments and the browser page (examples/web) into its
// form, so that neither writes an option name or a choice list of its own.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "completion.hpp"
#include "tool.hpp"

namespace vramfit::cli {

/// One option of a subcommand.
struct option_entry {
  std::string name;  ///< its first long name, without dashes ("micro-batch")
  std::string kind;  ///< "flag" (no value), "list" (repeatable) or "value"
  /// The values the shell completion offers (the parser's tables or its choice set); empty when
  /// free-form.
  std::vector<std::string> values;
  std::string type;         ///< CLI11's type name as --help shows it ("INT:POSITIVE", "TEXT")
  std::string default_str;  ///< the default --help shows, empty when it shows none
  std::string description;  ///< the --help text
};

/// The options of subcommand `name` in the parser's order, without --help.
inline std::vector<option_entry> option_table(std::string_view name) {
  tool t;
  const CLI::App& sub = t.subcommand(name);
  std::vector<option_entry> listed;
  for (const CLI::Option* o : sub.get_options()) {
    if (o == sub.get_help_ptr() || o->get_lnames().empty() || !in_help(*o)) continue;
    option_entry e;
    e.name = o->get_lnames().front();
    e.kind = o->get_expected_max() == 0        ? "flag"
             : o->get_items_expected_max() > 1 ? "list"
                                               : "value";
    e.values = option_values(*o, e.name);
    e.type = o->get_type_name();
    e.default_str = o->get_default_str();
    e.description = o->get_description();
    listed.push_back(std::move(e));
  }
  return listed;
}

}  // namespace vramfit::cli
