// SPDX-License-Identifier: MIT
// --units: how tables, Markdown and SVG text write sizes. JSON always gives bytes.
#pragma once

#include <stdexcept>
#include <string>
#include <vramfit/units.hpp>

namespace vramfit::cli {

/// How a run writes sizes for people: GiB, MiB (binary, the default) or GB, MB (decimal), as
/// --units says. A value handed to each printer, so that runs side by side keep their own.
struct size_style {
  prefixes units = prefixes::binary;

  /// A size as the tool writes it for people.
  std::string operator()(bytes b) const { return to_string(b, units); }
};

/// Refuses --units GB where `command` writes no size in a chosen unit (a listing, a script), so
/// that it is not silently ignored; GiB, the default, changes nothing anywhere.
inline void sizes_not_written(const size_style& size, const std::string& command,
                              const std::string& why) {
  if (size.units == prefixes::decimal)
    throw std::invalid_argument("--units applies to estimates: vramfit " + command + " " + why);
}

/// "fits, X free" or "does not fit, Y over": `required` against `available`.
inline std::string fit_verdict(bytes required, bytes available, const size_style& size) {
  return required <= available ? "fits, " + size(available - required) + " free"
                               : "does not fit, " + size(required - available) + " over";
}

}  // namespace vramfit::cli
