// SPDX-License-Identifier: MIT
// Fixed-size names in structural aggregates: copying and joining C strings in constant expressions.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string_view>

namespace vramfit::detail {

/// Bytes of the UTF-8 sequence that `lead` starts (1 for ASCII and for stray bytes).
constexpr std::size_t utf8_length(char lead) {
  const auto b = static_cast<unsigned char>(lead);
  return b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
}

/// Copies `parts` one after another into `to`, truncating at a character boundary (a UTF-8
/// sequence is kept whole or left out), and zero-fills the rest.
template <std::size_t N>
constexpr void copy_name(char (&to)[N], const char* first, const char* second = "",
                         const char* third = "") {
  std::size_t i = 0;
  bool cut = false;
  for (const char* part : {first, second, third}) {
    for (; i + 1 < N && *part != '\0'; ++part) to[i++] = *part;
    cut = cut || *part != '\0';
  }
  if (cut && i > 0) {  // drop a last character whose bytes did not all fit
    std::size_t start = i - 1;
    while (start > 0 && (static_cast<unsigned char>(to[start]) & 0xC0) == 0x80) --start;
    if (i - start < utf8_length(to[start])) i = start;
  }
  for (; i < N; ++i) to[i] = '\0';
}

/// Copies the first `length` bytes of `from` (all of it when shorter) into `to`, zero-filled: a
/// name without the suffix it was built with.
template <std::size_t N>
constexpr void copy_prefix(char (&to)[N], std::string_view from, std::size_t length) {
  std::size_t i = 0;
  for (; i < from.size() && i < length && i + 1 < N; ++i) to[i] = from[i];
  for (; i < N; ++i) to[i] = '\0';
}

}  // namespace vramfit::detail
