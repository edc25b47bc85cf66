// SPDX-License-Identifier: MIT
// Exact byte counts: vramfit::bytes (signed 64-bit, no floating point in the arithmetic), the
// binary and decimal units, literals, human-readable formatting, and Boost.Units at the edge.
#pragma once

#include <boost/units/quantity.hpp>
#include <boost/units/systems/information/bit.hpp>
#include <boost/units/systems/information/byte.hpp>
#include <compare>
#include <concepts>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "detail/checked.hpp"

namespace vramfit {

/// A unit of memory size. Binary units (KiB = 2^10 B) and decimal units (KB = 10^3 B) are both in
/// use and routinely confused ("80 GB" cards hold 80 GiB + ...); they are distinct objects, and
/// every printed size names its unit.
struct byte_unit {
  std::int64_t size;  ///< bytes in one unit
  char symbol[4];
};

inline constexpr byte_unit B{1, "B"};
inline constexpr byte_unit KiB{std::int64_t{1} << 10, "KiB"};
inline constexpr byte_unit MiB{std::int64_t{1} << 20, "MiB"};
inline constexpr byte_unit GiB{std::int64_t{1} << 30, "GiB"};
inline constexpr byte_unit TiB{std::int64_t{1} << 40, "TiB"};
inline constexpr byte_unit PiB{std::int64_t{1} << 50, "PiB"};
inline constexpr byte_unit KB{1'000, "KB"};
inline constexpr byte_unit MB{1'000'000, "MB"};
inline constexpr byte_unit GB{1'000'000'000, "GB"};
inline constexpr byte_unit TB{1'000'000'000'000, "TB"};
inline constexpr byte_unit PB{1'000'000'000'000'000, "PB"};

/// An exact number of bytes. Structural, so it can be a template argument; all arithmetic is
/// checked (overflow is a compile error in a constant expression and vramfit::overflow_error at run
/// time). Negative counts are allowed: a headroom can be negative.
struct bytes {
  std::int64_t count = 0;

  friend constexpr auto operator<=>(const bytes&, const bytes&) = default;

  friend constexpr bytes operator+(bytes a, bytes b) {
    return bytes{detail::checked_add(a.count, b.count)};
  }
  friend constexpr bytes operator-(bytes a, bytes b) {
    return bytes{detail::checked_sub(a.count, b.count)};
  }
  friend constexpr bytes operator-(bytes a) { return bytes{detail::checked_sub(0, a.count)}; }
  friend constexpr bytes operator*(bytes a, std::int64_t n) {
    return bytes{detail::checked_mul(a.count, n)};
  }
  friend constexpr bytes operator*(std::int64_t n, bytes a) { return a * n; }
  // Byte counts are never scaled by a floating-point factor: that is where estimators go inexact.
  template <std::floating_point F>
  friend bytes operator*(bytes, F) = delete;
  template <std::floating_point F>
  friend bytes operator*(F, bytes) = delete;

  constexpr bytes& operator+=(bytes other) { return *this = *this + other; }
  constexpr bytes& operator-=(bytes other) { return *this = *this - other; }

  /// This size in `unit`, as a double: for display and charts only, never for arithmetic.
  [[nodiscard]] constexpr double in(byte_unit unit) const {
    return static_cast<double>(count) / static_cast<double>(unit.size);
  }
};

/// `80 * GiB`: a count of units, exactly.
constexpr bytes operator*(std::int64_t n, byte_unit unit) {
  return bytes{detail::checked_mul(n, unit.size)};
}
constexpr bytes operator*(byte_unit unit, std::int64_t n) {
  return n * unit;
}
template <std::floating_point F>
bytes operator*(F, byte_unit) = delete;
template <std::floating_point F>
bytes operator*(byte_unit, F) = delete;

/// The bytes needed to store `bits` bits: storage rounds up to whole bytes.
constexpr bytes bytes_for_bits(std::int64_t bits) {
  return bytes{detail::ceil_div(bits, 8)};
}

/// ceil(size / parts): the share of one of `parts` equal shards, rounded up.
constexpr bytes divide_up(bytes size, std::int64_t parts) {
  return bytes{detail::ceil_div(size.count, parts)};
}

namespace detail {
namespace rules {
[[noreturn]] inline void size_literal_is_not_a_whole_number_of_bytes() {
  raise("a size literal must be a whole number of bytes (e.g. 1.5_GiB is, 0.1_B is not)");
}
[[noreturn]] inline void size_literal_must_be_plain_decimal() {
  raise("a size literal must be written in plain decimal digits with an optional fraction");
}
[[noreturn]] inline void size_must_be_a_number_and_a_unit(std::string_view text) {
  raise(std::string(1, '\'') + std::string(text.substr(0, 40)) + (text.size() > 40 ? "..." : "") +
        "' is not a size such as 96GiB, 44GB or 1.5TiB (units B, KiB, MiB, GiB, TiB, PiB, KB, "
        "MB, GB, TB, PB) that is a whole number of bytes");
}
}  // namespace rules

enum class size_text : unsigned char { whole, not_decimal, not_whole_bytes, too_large, too_long };

/// The most significant digits (and fraction digits) a size is read with: 10^22 units of at most
/// 2^50 bytes stay within 128 bits, and 10^22 bytes is past int64.
inline constexpr int size_digits = 22;
struct parsed_size {
  std::int64_t bytes = 0;
  size_text status = size_text::whole;
};

/// Parses plain decimal digits with an optional fraction ("1.5", "80", "1'000") exactly and
/// multiplies by `unit_size` without going through floating point.
constexpr parsed_size parse_decimal(std::string_view text, std::int64_t unit_size) {
  bool fraction = false, digits = false;
  for (const char c : text) {
    if (c == '.' && !fraction)
      fraction = true;
    else if (c >= '0' && c <= '9')
      digits = true;
    else if (c != '\'')
      return {0, size_text::not_decimal};
  }
  if (!digits || (text.size() > 1 && text[0] == '0' && text[1] != '.'))
    return {0, size_text::not_decimal};
  // A fraction's trailing zeros change nothing: "80.000000000000000000" is 80, not an overflow.
  while (fraction && (text.back() == '0' || text.back() == '\'')) text.remove_suffix(1);
  __extension__ using wide = __int128;  // g++ and clang++; __extension__ keeps -Wpedantic quiet
  constexpr wide most = [] {
    wide p = 1;
    for (int i = 0; i < size_digits; ++i) p *= 10;
    return p;
  }();
  wide mantissa = 0, scale = 1;
  bool in_fraction = false;
  for (const char c : text) {
    if (c == '\'') continue;
    if (c == '.') {
      in_fraction = true;
      continue;
    }
    mantissa = mantissa * 10 + (c - '0');
    if (in_fraction) scale *= 10;
    if (mantissa >= most || scale >= most)
      return {0, in_fraction ? size_text::too_long : size_text::too_large};
  }
  const wide scaled = mantissa * unit_size;  // < 10^22 x 2^50 < 2^124
  if (scaled % scale != 0) return {0, size_text::not_whole_bytes};
  if (scaled / scale > INT64_MAX) return {0, size_text::too_large};
  return {static_cast<std::int64_t>(scaled / scale), size_text::whole};
}

template <char... Chars>
consteval std::int64_t parse_size_literal(std::int64_t unit_size) {
  constexpr char text[] = {Chars...};
  const parsed_size p = parse_decimal({text, sizeof text}, unit_size);
  if (p.status == size_text::not_decimal) rules::size_literal_must_be_plain_decimal();
  if (p.status == size_text::not_whole_bytes) rules::size_literal_is_not_a_whole_number_of_bytes();
  if (p.status != size_text::whole) rules::count_overflows_int64("multiplication", 0, unit_size);
  return p.bytes;
}
}  // namespace detail

/// Size literals: `80_GiB`, `80_GB`, `1.5_MiB`. Exact: the literal's digits are parsed, not a
/// floating-point value, and a result that is not a whole number of bytes does not compile.
namespace literals {
// clang-format off
template <char... C> consteval bytes operator""_B()   { return bytes{detail::parse_size_literal<C...>(B.size)}; }
template <char... C> consteval bytes operator""_KiB() { return bytes{detail::parse_size_literal<C...>(KiB.size)}; }
template <char... C> consteval bytes operator""_MiB() { return bytes{detail::parse_size_literal<C...>(MiB.size)}; }
template <char... C> consteval bytes operator""_GiB() { return bytes{detail::parse_size_literal<C...>(GiB.size)}; }
template <char... C> consteval bytes operator""_TiB() { return bytes{detail::parse_size_literal<C...>(TiB.size)}; }
template <char... C> consteval bytes operator""_PiB() { return bytes{detail::parse_size_literal<C...>(PiB.size)}; }
template <char... C> consteval bytes operator""_KB()  { return bytes{detail::parse_size_literal<C...>(KB.size)}; }
template <char... C> consteval bytes operator""_MB()  { return bytes{detail::parse_size_literal<C...>(MB.size)}; }
template <char... C> consteval bytes operator""_GB()  { return bytes{detail::parse_size_literal<C...>(GB.size)}; }
template <char... C> consteval bytes operator""_TB()  { return bytes{detail::parse_size_literal<C...>(TB.size)}; }
template <char... C> consteval bytes operator""_PB()  { return bytes{detail::parse_size_literal<C...>(PB.size)}; }
// clang-format on
}  // namespace literals

/// A size written with its unit: "96GiB", "44 GB", "1.5TiB" (the literals' units, in any case),
/// exactly; a positive whole number of bytes, or vramfit::error.
constexpr bytes parse_size(std::string_view text) {
  constexpr byte_unit units[] = {B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB, TB, PB};
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  std::size_t digits = 0;
  while (digits < text.size() &&
         ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '.'))
    ++digits;
  std::size_t unit = digits;
  while (unit < text.size() && text[unit] == ' ') ++unit;
  for (const byte_unit& u : units) {
    std::size_t i = 0;
    while (unit + i < text.size() && u.symbol[i] != '\0' &&
           lower(text[unit + i]) == lower(u.symbol[i]))
      ++i;
    if (unit + i != text.size() || u.symbol[i] != '\0') continue;
    const detail::parsed_size p = detail::parse_decimal(text.substr(0, digits), u.size);
    if (p.status == detail::size_text::whole && p.bytes > 0) return bytes{p.bytes};
    std::string shown(1, '\'');  // built by appends: g++ 12 warns wrongly on "'" + string
    shown.append(text.substr(0, 40)).append(text.size() > 40 ? "...'" : "'");
    if (p.status == detail::size_text::too_large)
      detail::raise(shown + " is more than 9223372036854775807 bytes (8 EiB), the largest size");
    if (p.status == detail::size_text::too_long)
      detail::raise(shown + " has more digits than a size is read with (" +
                    std::to_string(detail::size_digits) + ", a fraction's trailing zeros aside)");
  }
  detail::rules::size_must_be_a_number_and_a_unit(text);
}

/// Which family of units a formatted size uses.
enum class prefixes { binary, decimal };

namespace detail {
/// |n| as unsigned, so that INT64_MIN has one too.
constexpr std::uint64_t magnitude(std::int64_t n) {
  return n < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(n) : static_cast<std::uint64_t>(n);
}
}  // namespace detail

/// `size` in `unit` with two decimals, rounded half away from zero, exactly: "79.18 GiB". Sizes in
/// bytes print without decimals: "512 B".
inline std::string to_string(bytes size, byte_unit unit) {
  const bool negative = size.count < 0;
  const std::uint64_t magnitude = detail::magnitude(size.count);
  const auto unit_size = static_cast<std::uint64_t>(unit.size);
  std::uint64_t whole = magnitude / unit_size;
  std::string text = negative ? "-" : "";
  if (unit_size == 1) return text + std::to_string(whole) + " " + unit.symbol;
  // remainder < unit_size <= 2^50, so remainder * 100 cannot overflow.
  std::uint64_t hundredths = (magnitude % unit_size * 100 + unit_size / 2) / unit_size;
  if (hundredths == 100) {
    ++whole;
    hundredths = 0;
  }
  text += std::to_string(whole) + (hundredths < 10 ? ".0" : ".") + std::to_string(hundredths);
  return text + " " + unit.symbol;
}

/// `size` in the largest unit of the family that keeps the number at least 1: "79.18 GiB",
/// "85.02 GB", "512 B".
inline std::string to_string(bytes size, prefixes family = prefixes::binary) {
  constexpr byte_unit binary[] = {B, KiB, MiB, GiB, TiB, PiB};
  constexpr byte_unit decimal[] = {B, KB, MB, GB, TB, PB};
  const byte_unit* units = family == prefixes::binary ? binary : decimal;
  const std::uint64_t magnitude = detail::magnitude(size.count);
  std::size_t chosen = 0;
  for (std::size_t i = 1; i < 6; ++i) {
    // From 0.995 of a unit on, the rounded text is "1.00" of it: pick the unit the text will show.
    // (magnitude < unit <= 2^50 keeps magnitude * 200 far from overflow.)
    const auto unit = static_cast<std::uint64_t>(units[i].size);
    if (magnitude >= unit || magnitude * 200 >= unit * 199) chosen = i;
  }
  return to_string(size, units[chosen]);
}

/// Prints the exact count and, from 1 KiB on, the readable size: "85899345920 B (80.00 GiB)".
inline std::ostream& operator<<(std::ostream& out, bytes size) {
  out << size.count << " B";
  if (size.count >= KiB.size || size.count <= -KiB.size) out << " (" << to_string(size) << ")";
  return out;
}

// --- Boost.Units at the edge: the information system's bytes, with an exact int64 value. ---

/// A Boost.Units quantity of bytes with an exact signed 64-bit value.
using byte_quantity = boost::units::quantity<boost::units::information::info, std::int64_t>;
/// A Boost.Units quantity of bits with an exact signed 64-bit value.
using bit_quantity = boost::units::quantity<boost::units::information::hu::bit::info, std::int64_t>;

constexpr byte_quantity to_quantity(bytes size) {
  return byte_quantity::from_value(size.count);
}
constexpr bytes from_quantity(byte_quantity q) {
  return bytes{q.value()};
}
/// Bits round up to whole bytes, as storage does.
constexpr bytes from_quantity(bit_quantity q) {
  return bytes_for_bits(q.value());
}

}  // namespace vramfit
