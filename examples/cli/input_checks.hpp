// SPDX-License-Identifier: MIT
// Checks of the user's text that no single option owns: empty values, text that output must carry
// (valid UTF-8 without control characters), and refusals written as one line.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <string_view>
#include <vramfit/vramfit.hpp>

namespace vramfit::cli {

/// The length of the UTF-8 character that begins `text` at `at`, or 0 when the bytes there are
/// not one (a stray continuation byte, an overlong or cut sequence, a surrogate, past U+10FFFF).
inline std::size_t utf8_length(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  const std::size_t n = lead < 0x80                    ? 1
                        : lead >= 0xC2 && lead <= 0xDF ? 2
                        : lead >= 0xE0 && lead <= 0xEF ? 3
                        : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                       : 0;
  if (n == 0 || at + n > text.size()) return 0;
  for (std::size_t i = 1; i < n; ++i)
    if ((byte(at + i) & 0xC0) != 0x80) return 0;
  const unsigned char second = n > 1 ? byte(at + 1) : 0;
  if ((lead == 0xE0 && second < 0xA0) || (lead == 0xED && second >= 0xA0) ||
      (lead == 0xF0 && second < 0x90) || (lead == 0xF4 && second >= 0x90))
    return 0;  // overlong, a UTF-16 surrogate, or past U+10FFFF
  return n;
}

/// `text` as output can carry it in any format (JSON, SVG's XML, a terminal): each byte that is
/// not part of a valid UTF-8 character, and each control character, as U+FFFD.
inline std::string printable(std::string_view text) {
  std::string kept;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t n = utf8_length(text, at);
    const unsigned char c = static_cast<unsigned char>(text[at]);
    if (n == 0 || c < 0x20 || c == 0x7F) {
      kept += "\xEF\xBF\xBD";
      at += n == 0 ? 1 : n;
    } else {
      kept.append(text.substr(at, n));
      at += n;
    }
  }
  return kept;
}

/// A refusal as the tool writes it: "vramfit: " and one printable line.
inline std::string refusal_line(std::string_view message) {
  const std::string line = printable(message);
  return line.rfind("vramfit:", 0) == 0 ? line : "vramfit: " + line;
}

/// Refuses an empty value of any option given to `cmd` or its parsed subcommands (`--x ''`, or
/// an empty item of a comma list): it would otherwise read as the option's default.
inline void refuse_empty_values(const CLI::App& cmd) {
  for (const CLI::Option* o : cmd.get_options()) {
    if (o->count() == 0 || o->get_expected_max() == 0) continue;
    for (const std::string& value : o->results())
      if (value.empty())
        detail::raise((o->get_lnames().empty() ? o->get_name() : "--" + o->get_lnames().front()) +
                      " was given an empty value: give one, or leave the option out");
  }
  for (const CLI::App* sub : cmd.get_subcommands()) refuse_empty_values(*sub);
}

/// Refuses a `value` of `option` outside (0, `most`]: NaN and infinity fail both comparisons.
inline void check_positive_number(double value, const char* option, double most,
                                  const char* most_text) {
  if (value > 0 && value <= most) return;
  char got[32];  // %g: "1e+300", "nan", "-1" (std::to_string writes 1e300 in 301 digits)
  std::snprintf(got, sizeof got, "%g", value);
  detail::raise(std::string(option) + " must be a number above 0 and at most " + most_text +
                ", got " + got);
}

}  // namespace vramfit::cli
