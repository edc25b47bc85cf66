// SPDX-License-Identifier: MIT
// --units: how tables, Markdown and SVG text write sizes. JSON always gives bytes.
#pragma once

#include <stdexcept>
#include <string>
#include <vramfit/units.hpp>

namespace vramfit::cli {

/// GiB, MiB (binary, the default) or GB, MB (decimal); --units sets it once per run.
inline prefixes size_prefixes = prefixes::binary;

/// Refuses --units GB where `command` writes no size in a chosen unit (a listing, a script), so
/// that it is not silently ignored; GiB, the default, changes nothing anywhere.
inline void sizes_not_written(const std::string& command, const std::string& why) {
  if (size_prefixes == prefixes::decimal)
    throw std::invalid_argument("--units applies to estimates: vramfit " + command + " " + why);
}

/// A size as the tool writes it for people.
inline std::string size(bytes b) {
  return to_string(b, size_prefixes);
}

/// "fits, X free" or "does not fit, Y over": `required` against `available`.
inline std::string fit_verdict(bytes required, bytes available) {
  return required <= available ? "fits, " + size(available - required) + " free"
                               : "does not fit, " + size(required - available) + " over";
}

}  // namespace vramfit::cli
