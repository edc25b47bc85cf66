// SPDX-License-Identifier: MIT
// Exact signed 64-bit arithmetic that refuses to overflow (a compile error in a constant
// expression, vramfit::overflow_error at run time).
#pragma once

#include <cstdint>

#include "../error.hpp"

namespace vramfit::detail {

namespace rules {
[[noreturn]] inline void count_overflows_int64(const char* op, std::int64_t a, std::int64_t b) {
  raise<overflow_error>(std::string("count overflows int64 in ") + op + " of " + str(a) + " and " +
                        str(b) + " (limit 9223372036854775807)");
}
[[noreturn]] inline void division_by_zero(std::int64_t numerator) {
  raise(str(numerator) + " divided by zero");
}
[[noreturn]] inline void count_must_not_be_negative(const char* what, std::int64_t n) {
  raise(std::string(what) + " must not be negative, got " + str(n));
}
}  // namespace rules

constexpr std::int64_t checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r{};
  if (__builtin_add_overflow(a, b, &r)) rules::count_overflows_int64("addition", a, b);
  return r;
}

constexpr std::int64_t checked_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r{};
  if (__builtin_sub_overflow(a, b, &r)) rules::count_overflows_int64("subtraction", a, b);
  return r;
}

constexpr std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r{};
  if (__builtin_mul_overflow(a, b, &r)) rules::count_overflows_int64("multiplication", a, b);
  return r;
}

/// ceil(a / b) for a >= 0 and b > 0: how many blocks of b hold a items.
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  if (b == 0) rules::division_by_zero(a);
  if (a < 0) rules::count_must_not_be_negative("dividend of a rounding-up division", a);
  if (b < 0) rules::count_must_not_be_negative("divisor of a rounding-up division", b);
  return a / b + (a % b != 0 ? 1 : 0);
}

/// floor(a * b / c) for a, b >= 0 and c > 0, the product taken in 128 bits (g++ and clang++ have
/// them; __extension__ keeps -Wpedantic quiet): an error only when the result does not fit.
constexpr std::int64_t mul_div(std::int64_t a, std::int64_t b, std::int64_t c) {
  __extension__ using wide = __int128;
  const wide q = static_cast<wide>(a) * b / c;
  if (q > INT64_MAX) rules::count_overflows_int64("multiplication", a, b);
  return static_cast<std::int64_t>(q);
}

}  // namespace vramfit::detail
