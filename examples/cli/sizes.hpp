// SPDX-License-Identifier: MIT
// --units: how tables, Markdown and SVG text write sizes. JSON always gives bytes.
#pragma once

#include <string>
#include <vramfit/units.hpp>

namespace vramfit::cli {

/// GiB, MiB (binary, the default) or GB, MB (decimal); --units sets it once per run.
inline prefixes size_prefixes = prefixes::binary;

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
