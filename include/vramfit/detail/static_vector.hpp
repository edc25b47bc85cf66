// SPDX-License-Identifier: MIT
// A fixed-capacity vector for constant expressions: structural when T is, so ledgers built from it
// can be template arguments and static constexpr members.
#pragma once

#include <cstddef>

#include "../error.hpp"

namespace vramfit::detail {

namespace rules {
[[noreturn]] inline void static_vector_capacity_exceeded(std::size_t capacity) {
  raise("internal ledger capacity of " + std::to_string(capacity) + " entries exceeded");
}
[[noreturn]] inline void list_must_not_exceed_its_capacity(const char* what, std::size_t capacity) {
  raise("at most " + std::to_string(capacity) + " " + what);
}
}  // namespace rules

/// `What` names the items for users ("pipeline stages listed one by one") where the capacity is
/// a documented limit of the API rather than an internal size.
template <class T, std::size_t Capacity, const char* What = nullptr>
struct static_vector {
  static constexpr std::size_t capacity = Capacity;
  T items[Capacity] = {};
  std::size_t count = 0;

  constexpr void push_back(const T& item) {
    if (count == Capacity) {
      if constexpr (What != nullptr) rules::list_must_not_exceed_its_capacity(What, Capacity);
      rules::static_vector_capacity_exceeded(Capacity);
    }
    items[count++] = item;
  }
  constexpr void clear() { count = 0; }
  [[nodiscard]] constexpr std::size_t size() const { return count; }
  [[nodiscard]] constexpr bool empty() const { return count == 0; }
  constexpr const T* begin() const { return items; }
  constexpr const T* end() const { return items + count; }
  constexpr T* begin() { return items; }
  constexpr T* end() { return items + count; }
  constexpr const T& operator[](std::size_t i) const { return items[i]; }
  constexpr T& operator[](std::size_t i) { return items[i]; }
};

}  // namespace vramfit::detail
