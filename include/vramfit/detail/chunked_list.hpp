// SPDX-License-Identifier: MIT
// An ordered sequence for constant expressions: sorted chunks, so that an insertion or an erasure
// moves at most a chunk's elements, where one sorted vector moved all of them (the caching
// allocator's free list holds tens of thousands of blocks on an MoE model).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace vramfit::detail {

template <class T>
class chunked_list {
 public:
  /// An element's place: its chunk and its index there; end() is one chunk past the last.
  struct position {
    std::size_t chunk = 0, index = 0;
    friend constexpr bool operator==(const position&, const position&) = default;
  };

  [[nodiscard]] constexpr position begin() const { return {}; }
  [[nodiscard]] constexpr position end() const { return {chunks_.size(), 0}; }
  [[nodiscard]] constexpr T operator[](const position& p) const {
    return chunks_[p.chunk][p.index];
  }

  /// The place before `p` (not begin()).
  [[nodiscard]] constexpr position before(const position& p) const {
    if (p.index > 0) return {p.chunk, p.index - 1};
    return {p.chunk - 1, chunks_[p.chunk - 1].size() - 1};
  }

  /// The first element for which `precedes` is false; the elements for which it holds come first.
  template <class Precedes>
  [[nodiscard]] constexpr position lower_bound(Precedes&& precedes) const {
    std::size_t low = 0, high = chunks_.size();  // the first chunk whose last does not precede
    while (low < high) {
      const std::size_t mid = (low + high) / 2;
      if (precedes(chunks_[mid].back()))
        low = mid + 1;
      else
        high = mid;
    }
    if (low == chunks_.size()) return end();
    const std::vector<T>& c = chunks_[low];
    std::size_t first = 0, last = c.size();
    while (first < last) {
      const std::size_t mid = (first + last) / 2;
      if (precedes(c[mid]))
        first = mid + 1;
      else
        last = mid;
    }
    return {low, first};
  }

  /// Puts `value` at `p`, before the element there.
  constexpr void insert(position p, const T& value) {
    if (chunks_.empty()) chunks_.push_back(spare());
    if (p.chunk == chunks_.size()) p = {p.chunk - 1, chunks_.back().size()};
    std::vector<T>& c = chunks_[p.chunk];
    c.insert(c.begin() + static_cast<std::ptrdiff_t>(p.index), value);
    if (c.size() < 2 * chunk_size) return;
    std::vector<T> upper = spare();
    upper.assign(c.begin() + chunk_size, c.end());
    c.resize(chunk_size);
    chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(p.chunk + 1), std::move(upper));
  }

  constexpr void erase(const position& p) {
    std::vector<T>& c = chunks_[p.chunk];
    c.erase(c.begin() + static_cast<std::ptrdiff_t>(p.index));
    if (!c.empty()) return;
    spare_.push_back(std::move(c));
    chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(p.chunk));
  }

  /// Empties the list; its chunks' buffers stay for the elements inserted next.
  constexpr void clear() {
    for (std::vector<T>& c : chunks_) {
      c.clear();
      spare_.push_back(std::move(c));
    }
    chunks_.clear();
  }

  /// Every element, in order (a copy: the caller may erase while it walks them).
  [[nodiscard]] constexpr std::vector<T> items() const {
    std::vector<T> all;
    for (const std::vector<T>& c : chunks_) all.insert(all.end(), c.begin(), c.end());
    return all;
  }

 private:
  static constexpr std::size_t chunk_size = 16;  ///< a chunk splits when it reaches twice this
  std::vector<std::vector<T>> chunks_;
  /// Emptied chunks, whose buffers a new chunk takes before any is allocated.
  std::vector<std::vector<T>> spare_;

  constexpr std::vector<T> spare() {
    if (spare_.empty()) return {};
    std::vector<T> c = std::move(spare_.back());
    spare_.pop_back();
    return c;
  }
};

}  // namespace vramfit::detail
