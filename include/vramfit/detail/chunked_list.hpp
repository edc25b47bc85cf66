// SPDX-License-Identifier: MIT
// An ordered sequence for constant expressions: sorted chunks, so that an insertion or an erasure
// moves at most a chunk's elements, where one sorted vector moved all of them (the caching
// allocator's free list holds tens of thousands of blocks on an MoE model). Each chunk's last
// element is kept in one vector too, so that a search reads one chunk only.
#pragma once

#include <bit>
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
    std::size_t low = 0, high = last_.size();  // the first chunk whose last does not precede
    while (low < high) {
      const std::size_t mid = (low + high) / 2;
      if (precedes(last_[mid]))
        low = mid + 1;
      else
        high = mid;
    }
    if (low == chunks_.size()) return end();
    const std::vector<T>& c = chunks_[low];
    std::size_t first = 0, last = c.size() - 1;  // its last does not precede
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
    if (chunks_.empty()) {
      chunks_.push_back(spare());
      last_.push_back(value);
    }
    if (p.chunk == chunks_.size()) p = {p.chunk - 1, chunks_.back().size()};
    std::vector<T>& c = chunks_[p.chunk];
    c.insert(c.begin() + static_cast<std::ptrdiff_t>(p.index), value);
    if (p.index + 1 == c.size()) last_[p.chunk] = value;
    ++size_;
    if (c.size() < split_size()) return;
    std::vector<T> upper = spare();
    const auto half = static_cast<std::ptrdiff_t>(c.size() / 2);
    upper.assign(c.begin() + half, c.end());
    c.resize(c.size() / 2);
    last_[p.chunk] = c.back();
    const auto next = static_cast<std::ptrdiff_t>(p.chunk + 1);
    last_.insert(last_.begin() + next, upper.back());
    chunks_.insert(chunks_.begin() + next, std::move(upper));
  }

  /// Puts `value` at `p` in place of the element there when that keeps the order (`value` not
  /// below the element before nor above the one after); else erases it and inserts `value`.
  constexpr void replace(const position& p, const T& value) {
    std::vector<T>& c = chunks_[p.chunk];
    const bool after_before = p == begin() || !(value < (*this)[before(p)]);
    const bool is_last = p.index + 1 == c.size();
    const position next = is_last ? position{p.chunk + 1, 0} : position{p.chunk, p.index + 1};
    if (after_before && (next == end() || !((*this)[next] < value))) {
      c[p.index] = value;
      if (is_last) last_[p.chunk] = value;
      return;
    }
    erase(p);
    insert(lower_bound([&](const T& e) { return e < value; }), value);
  }

  constexpr void erase(const position& p) {
    std::vector<T>& c = chunks_[p.chunk];
    c.erase(c.begin() + static_cast<std::ptrdiff_t>(p.index));
    --size_;
    if (!c.empty()) {
      if (p.index == c.size()) last_[p.chunk] = c.back();
      return;
    }
    spare_.push_back(std::move(c));
    chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(p.chunk));
    last_.erase(last_.begin() + static_cast<std::ptrdiff_t>(p.chunk));
  }

  /// Empties the list; its chunks' buffers stay for the elements inserted next.
  constexpr void clear() {
    for (std::vector<T>& c : chunks_) {
      c.clear();
      spare_.push_back(std::move(c));
    }
    chunks_.clear();
    last_.clear();
    size_ = 0;
  }

  /// Every element, in order (a copy: the caller may erase while it walks them).
  [[nodiscard]] constexpr std::vector<T> items() const {
    std::vector<T> all;
    for (const std::vector<T>& c : chunks_) all.insert(all.end(), c.begin(), c.end());
    return all;
  }

 private:
  std::size_t size_ = 0;  ///< elements
  std::vector<std::vector<T>> chunks_;
  /// Each chunk's last element, side by side: the search for a chunk reads no chunk.
  std::vector<T> last_;
  /// Emptied chunks, whose buffers a new chunk takes before any is allocated.
  std::vector<std::vector<T>> spare_;

  /// A chunk splits in halves at about half the square root of the elements, at least 32: an
  /// insertion then moves about as many elements in its chunk as chunks when one splits.
  [[nodiscard]] constexpr std::size_t split_size() const {
    const std::size_t root = std::size_t{1} << (std::bit_width(size_) / 2);
    return root / 2 > 32 ? root / 2 : 32;
  }

  constexpr std::vector<T> spare() {
    if (spare_.empty()) return {};
    std::vector<T> c = std::move(spare_.back());
    spare_.pop_back();
    return c;
  }
};

}  // namespace vramfit::detail
