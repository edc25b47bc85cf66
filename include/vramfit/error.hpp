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

/// How a broken rule is reported: each rule is a non-constexpr function named after it that calls
/// raise(), so in a constant expression g++ and clang++ stop there and print its name and the call
/// trace (the numbers); at run time it throws a message naming the rule and the numbers.
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
