// SPDX-License-Identifier: MIT
// Errors: one exception family at run time, and the same checks as compile errors in constant
// expressions.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace vramfit {

/// An invalid configuration: a rule of the library is broken. The message names the rule and shows
/// the numbers.
class error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A byte count or element count that does not fit in a signed 64-bit integer.
class overflow_error : public error {
 public:
  using error::error;
};

namespace detail {

/// How a broken rule is reported. Every rule is a non-constexpr function named after the rule that
/// calls raise(): in a constant expression the call of a non-constexpr function stops compilation,
/// and both g++ and clang++ print that function's name (the rule) with the call trace (the
/// numbers). At run time the rule throws with a message that names the rule and shows the numbers.
template <class Error = error>
[[noreturn]] inline void raise(std::string message) {
  // One line, whatever names and targets the message quotes (a model named after a file).
  for (char& c : message)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  throw Error("vramfit: " + message);
}

inline std::string str(std::int64_t n) {
  return std::to_string(n);
}

}  // namespace detail
}  // namespace vramfit
