// SPDX-License-Identifier: MIT
// Fixed-size names in structural aggregates: copying and joining C strings in constant expressions.
#pragma once

#include <cstddef>
#include <initializer_list>

namespace vramfit::detail {

/// Copies `parts` one after another into `to`, truncating, and zero-fills the rest.
template <std::size_t N>
constexpr void copy_name(char (&to)[N], const char* first, const char* second = "",
                         const char* third = "") {
  std::size_t i = 0;
  for (const char* part : {first, second, third})
    for (; i + 1 < N && *part != '\0'; ++part) to[i++] = *part;
  for (; i < N; ++i) to[i] = '\0';
}

}  // namespace vramfit::detail
