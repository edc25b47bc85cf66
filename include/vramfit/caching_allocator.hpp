// SPDX-License-Identifier: MIT
// PyTorch's CUDA caching allocator, simulated: which segments it reserves from the driver for a
// sequence of tensor allocations and frees. Reserved memory (segments) is what nvidia-smi shows
// and what runs out; allocated memory (live blocks) is what the step's tensors take. Every rule
// names its function in c10/cuda/CUDACachingAllocator.cpp (read at pytorch/pytorch 001074d, the
// 2.4 series; the rules are those of 2.1 to 2.9, max_non_split_rounding_mb aside). Replayed from
// real snapshots, it places every request of 17 traced torch 2.11 steps where PyTorch did
// (tests/validation/allocator_traces.cpp).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "alloc_conf.hpp"
#include "detail/chunked_list.hpp"

namespace vramfit {

/// The device memory the allocator may take: `device` bytes (cudaMalloc fails past it; 0:
/// unlimited) and, with a per-process memory fraction, `fraction_limit` (0: none).
struct allocator_limits {
  bytes device{};
  bytes fraction_limit{};
  friend constexpr bool operator==(const allocator_limits&, const allocator_limits&) = default;
};

namespace caching {

/// A snapshot's segment holds blocks, each a positive multiple of 512 B (round_size), and no two
/// free blocks side by side (free_block merges them): a state the allocator can reach.
inline void adopted_segment_must_be_reachable(std::size_t index, std::int64_t size,
                                              std::int64_t before) {
  detail::raise("an adopted segment's block " + std::to_string(index) + " is " + detail::str(size) +
                " B, the one before it " + detail::str(before) +
                " B (free blocks negative): a block is a positive multiple of 512 B, and a free "
                "one follows a live one");
}

// CUDACachingAllocator.cpp, namespace Native, the size constants.
inline constexpr std::int64_t min_block_size = 512;            // kMinBlockSize
inline constexpr std::int64_t small_size = 1 << 20;            // kSmallSize: small pool's limit
inline constexpr std::int64_t small_buffer = 2 << 20;          // kSmallBuffer: a small segment
inline constexpr std::int64_t large_buffer = 20 << 20;         // kLargeBuffer
inline constexpr std::int64_t min_large_alloc = 10 << 20;      // kMinLargeAlloc
inline constexpr std::int64_t round_large = 2 << 20;           // kRoundLarge
inline constexpr std::int64_t roundup_power2_start = 1 << 20;  // kRoundUpPowerOfTwoStart

constexpr std::int64_t round_up(std::int64_t n, std::int64_t to) {
  return detail::checked_mul((n + to - 1) / to, to);
}

/// CUDAAllocatorConfig::roundup_power2_divisions(size): the interval of `size`'s power of two,
/// counted from 1 MiB, clamped to the first and last.
constexpr std::int64_t divisions_for(const alloc_conf& c, std::int64_t size) {
  std::int64_t index = detail::log2_of(size) - detail::log2_of(roundup_power2_start);
  if (index < 0) index = 0;
  if (index >= alloc_conf::intervals) index = alloc_conf::intervals - 1;
  return c.roundup_power2_divisions[index];
}

/// roundup_power2_next_division: the power-of-two interval of `size` cut into `divisions` equal
/// steps, `size` rounded up to the next step.
constexpr std::int64_t round_to_division(std::int64_t size, std::int64_t divisions) {
  if ((size & (size - 1)) == 0) return size;
  const std::int64_t floor = std::int64_t{1} << detail::log2_of(size);
  const std::int64_t step = floor >> detail::log2_of(divisions);
  if (step == 0) return floor << 1;
  const std::int64_t down = size & ~(step - 1);
  return down == size ? size : down + step;
}

/// round_size: every request takes at least 512 B and a multiple of 512 B, or the next division
/// of its power of two when roundup_power2_divisions asks for it.
constexpr std::int64_t round_size(const alloc_conf& c, std::int64_t size) {
  if (size < min_block_size) return min_block_size;
  const std::int64_t divisions = divisions_for(c, size);
  if (divisions > 1 && size > min_block_size * divisions) return round_to_division(size, divisions);
  return round_up(size, min_block_size);
}

/// get_allocation_size: the segment cudaMalloc'ed for a rounded request that no cached block
/// serves. Requests up to 1 MiB share 2 MiB segments, those under 10 MiB 20 MiB ones; larger ones
/// get their own, rounded to 2 MiB.
constexpr std::int64_t allocation_size(std::int64_t size) {
  if (size <= small_size) return small_buffer;
  if (size < min_large_alloc) return large_buffer;
  return round_up(size, round_large);
}

/// One block of a segment: a tensor's (allocated) or a cached free range.
struct block {
  std::int64_t segment = 0, offset = 0, size = 0;
  std::int64_t requested = 0;  ///< the tensor's own bytes (allocated blocks)
  int prev = -1, next = -1;    ///< neighbours in the segment, by address
  std::int64_t gc_base = 0;    ///< the pool's searches when it was cached (its age's origin)
  bool allocated = false;      ///< in use, or freed with a stream recorded that has not passed it
};

/// One segment: a cudaMalloc (or, with expandable segments, one growing mapping per pool and
/// stream), in creation order.
struct segment {
  std::int64_t size = 0;  ///< mapped bytes
  int stream = 0;
  bool small = false, expandable = false, released = false;
  int first = -1;  ///< its lowest block
  /// Its rank in address order, which breaks best fit's ties (BlockComparatorSize): below every
  /// earlier segment unless a replay gave cudaMalloc's address (next_segment_address()).
  std::int64_t address = 0;
};

/// A cached block's place in the free list, as BlockComparatorSize orders blocks: by stream
/// and pool, size, address.
struct free_entry {
  int pool = 0, block = -1;
  std::int64_t size = 0, address = 0, offset = 0;
  [[nodiscard]] constexpr bool operator<(const free_entry& k) const {
    if (pool != k.pool) return pool < k.pool;
    if (size != k.size) return size < k.size;
    if (address != k.address) return address < k.address;
    return offset < k.offset;
  }
};
constexpr int pool_key(int stream, bool small) {
  return stream * 2 + (small ? 1 : 0);
}

}  // namespace caching

/// The statistics torch.cuda.memory_stats() reports, in bytes: allocated counts blocks at their
/// rounded size (a block too small to split counts whole), reserved counts segments.
struct allocator_stats {
  /// One pool's share (memory_stats' small_pool and large_pool).
  struct pool {
    bytes allocated{}, reserved{};
    std::int64_t segments = 0;
  };
  bytes allocated{}, reserved{}, requested{};
  bytes peak_allocated{}, peak_reserved{};
  /// At the allocated peak: reserved memory then, and its largest free block (fragmentation).
  bytes reserved_at_peak{}, largest_free_at_peak{};
  std::int64_t segments = 0;      ///< held now (memory_stats' segment.all.current)
  std::int64_t cuda_mallocs = 0;  ///< segments created or grown
  std::int64_t oom = 0;           ///< requests refused after every release
  pool large{}, small{};
  pool large_at_peak{}, small_at_peak{};  ///< at the allocated peak
};

/// The allocator of one device, simulated request by request. Handles returned by allocate()
/// are what release() takes; -1 means out of memory.
class caching_allocator {
 public:
  constexpr explicit caching_allocator(const alloc_conf& conf = {}, allocator_limits limits = {})
      : conf_(conf), limits_(limits) {}

  /// torch.empty of `size` bytes on `stream`; its block's handle.
  constexpr int allocate(bytes size, int stream = 0) {
    const int b = take(size, stream);
    if (b < 0) return b;
    caching::block& x = at(b);
    x.requested = size.count;
    stats_.allocated += bytes{x.size};
    pool_of(segment_of(x).small).allocated += bytes{x.size};
    stats_.requested += size;
    if (stats_.allocated > stats_.peak_allocated) mark_peak();
    return b;
  }

  /// A block of `size` bytes as a tensor freed with a stream recorded leaves it once that tensor's
  /// use is past (release_deferred() after its allocate()): out of the pools, counted nowhere,
  /// until complete_free().
  constexpr int hold_freed(bytes size, int stream = 0) {
    settle_peak();
    return take(size, stream);
  }

  /// Frees the tensor of `handle` (once) into the cache (free_block): it merges with free
  /// neighbours and stays reserved.
  constexpr void release(int handle) {
    if (handle < 0) return;
    release_deferred(handle);
    complete_free(handle);
  }

  /// Frees the tensor of `handle` with another stream recorded on it (record_stream): it leaves
  /// the allocated count at once, but its block joins the cache only at complete_free(), once
  /// that stream has passed the free (CUDACachingAllocator.cpp free: insert_events, then
  /// process_events). Until then no request gets it and no neighbour merges with it.
  constexpr void release_deferred(int handle) {
    if (handle < 0) return;
    settle_peak();
    caching::block& x = at(handle);
    stats_.allocated -= bytes{x.size};
    pool_of(segment_of(x).small).allocated -= bytes{x.size};
    stats_.requested -= bytes{x.requested};
    x.requested = 0;
  }
  /// The recorded stream has passed the free of a block release_deferred() took: it is cached.
  constexpr void complete_free(int handle) {
    if (handle < 0) return;
    at(handle).allocated = false;
    merge(handle);
  }

  /// Takes over a segment as torch.cuda.memory._snapshot() shows it (block sizes by address, free
  /// ones negative: segment_map()), so a simulation starts from a real state; adopted in address
  /// order, segments rank as the allocator's. Returns its first block's handle; the next follow.
  constexpr int adopt_segment(const std::vector<std::int64_t>& map, int stream = 0,
                              bool small = false) {
    // Checked first, so that a refused map leaves the allocator as it was.
    std::int64_t total = 0;
    for (std::size_t i = 0; i < map.size(); ++i) {
      const std::int64_t size = map[i];
      const bool whole = size != 0 && size != std::numeric_limits<std::int64_t>::min() &&
                         size % caching::min_block_size == 0;
      if (!whole || (size < 0 && i > 0 && map[i - 1] < 0))
        caching::adopted_segment_must_be_reachable(i, size, i > 0 ? map[i - 1] : 0);
      total = detail::checked_add(total, size < 0 ? -size : size);
    }
    if (map.empty()) caching::adopted_segment_must_be_reachable(0, 0, 0);
    settle_peak();
    const int first = static_cast<int>(blocks_.size());
    const auto s = static_cast<std::int64_t>(segments_.size());
    push_segment({.size = total, .stream = stream, .small = small, .first = first});
    reserve(total, small);
    ++stats_.segments;
    ++pool_of(small).segments;
    std::int64_t offset = 0;
    for (const std::int64_t size : map) {
      const int b = static_cast<int>(blocks_.size());
      const std::int64_t whole = size < 0 ? -size : size;
      blocks_.push_back({s, offset, whole, 0, b > first ? b - 1 : -1, -1});
      if (b > first) at(b - 1).next = b;
      offset += whole;
      if (size < 0) {
        cache(b);
        continue;
      }
      at(b).allocated = true;
      at(b).requested = whole;
      stats_.allocated += bytes{whole};
      pool_of(small).allocated += bytes{whole};
      stats_.requested += bytes{whole};
    }
    if (stats_.allocated > stats_.peak_allocated) mark_peak();
    return first;
  }

  /// Where the next segment created or adopted lies: a replay passes cudaMalloc's address so best
  /// fit breaks ties as PyTorch did; else it ranks below all, as the driver hands out addresses
  /// top-down (tests/validation/gpu/h200: 1,824 of 2,901 new large segments below all held).
  constexpr void next_segment_address(std::int64_t address) { next_address_ = address; }

  /// torch.cuda.reset_peak_memory_stats().
  constexpr void reset_peaks() {
    stats_.peak_reserved = stats_.reserved;
    mark_peak();
  }

  [[nodiscard]] constexpr allocator_stats stats() const {
    allocator_stats s = stats_;
    if (peak_pending_) s.largest_free_at_peak = largest_free();
    return s;
  }
  [[nodiscard]] constexpr const alloc_conf& conf() const { return conf_; }
  [[nodiscard]] constexpr const allocator_limits& limits() const { return limits_; }

  /// The sizes of a segment's blocks by address, free ones negative (tests draw segment maps);
  /// none once it went back to the driver.
  [[nodiscard]] constexpr std::vector<std::int64_t> segment_map(std::size_t s) const {
    std::vector<std::int64_t> sizes;
    if (segments_[s].released) return sizes;
    for (int b = segments_[s].first; b >= 0; b = at(b).next)
      sizes.push_back(at(b).allocated ? at(b).size : -at(b).size);
    return sizes;
  }
  [[nodiscard]] constexpr std::size_t segment_count() const { return segments_.size(); }
  /// The state deciding every later request: each segment's attributes and block map, and the
  /// statistics; equal states (handles aside) answer alike. With garbage collection the blocks'
  /// ages would matter, so such an allocator's state is empty: comparable to none.
  [[nodiscard]] constexpr std::vector<std::int64_t> state() const {
    std::vector<std::int64_t> out;
    append_state(out);
    return out;
  }
  /// Appends state() to `out` (a replay compares states in buffers it keeps); false, appending
  /// nothing, when the state is empty.
  constexpr bool append_state(std::vector<std::int64_t>& out) const {
    if (collects_garbage() || next_address_ >= 0) return false;
    out.reserve(out.size() + blocks_.size() + 7 * segments_.size() + 5);
    for (const caching::segment& x : segments_) {
      out.insert(out.end(), {x.size, x.stream, x.small, x.expandable, x.released, x.address});
      // The blocks by address, free ones negative, ended by 0 (no block is empty).
      for (int b = x.released ? -1 : x.first; b >= 0; b = at(b).next)
        out.push_back(at(b).allocated ? at(b).size : -at(b).size);
      out.push_back(0);
    }
    out.insert(out.end(), {stats_.allocated.count, stats_.reserved.count, stats_.requested.count,
                           stats_.segments, stats_.oom});
    return true;
  }
  /// Starts over as `caching_allocator(conf, limits)`, keeping its buffers: a search replays
  /// many steps of many candidates, and reserving their memory again each time costs page faults.
  constexpr void reset(const alloc_conf& conf = {}, allocator_limits limits = {}) {
    conf_ = conf;
    limits_ = limits;
    stats_ = {};
    blocks_.clear();
    unused_.clear();
    segments_.clear();
    free_.clear();
    large_searches_ = 0;
    next_address_ = -1;
    peak_pending_ = false;
  }
  /// Where a handle's block lies: its segment and offset.
  [[nodiscard]] constexpr const caching::block& block_at(int handle) const { return at(handle); }
  [[nodiscard]] constexpr const caching::segment& segment_at(std::size_t s) const {
    return segments_[s];
  }
  /// The largest cached free block.
  [[nodiscard]] constexpr bytes largest_free() const {
    // The free list is ordered by pool, then size: each pool's largest block is at its end, or
    // just before an expandable segment's tail (which ranks last whatever its size).
    std::int64_t most = 0;
    for (position end = free_.end(); end != free_.begin();) {
      position i = free_.before(end);
      const caching::segment& pool = segment_of(at(free_[i].block));
      for (int n = 0; n < 2; ++n, i = free_.before(i)) {
        const caching::block& x = at(free_[i].block);
        if (in_pool(x, pool.stream, pool.small) && x.size > most) most = x.size;
        if (i == free_.begin()) break;
      }
      end = lower_bound(
          {.pool = caching::pool_key(pool.stream, pool.small), .address = lowest_address});
    }
    return bytes{most};
  }

 private:
  alloc_conf conf_;
  allocator_limits limits_;
  allocator_stats stats_{};
  std::vector<caching::block> blocks_;
  std::vector<int> unused_;  ///< blocks merged away or released: a split takes one of them
  std::vector<caching::segment> segments_;
  /// The pools' cached blocks, ordered as BlockComparatorSize orders them: by stream (and pool),
  /// size, address.
  detail::chunked_list<caching::free_entry> free_;
  using position = detail::chunked_list<caching::free_entry>::position;
  std::int64_t large_searches_ = 0;  ///< get_free_block calls on the large pool, under GC
  std::int64_t next_address_ = -1;   ///< of the next segment, when a replay gave it
  /// The allocated peak's largest free block is found when the peak is final: an allocation
  /// after it is a new peak, so only a free or a segment's release settles it (first).
  bool peak_pending_ = false;
  /// Below every segment's address rank (real addresses or minus the creation index): a search
  /// key that orders before all blocks of its size.
  static constexpr std::int64_t lowest_address = std::numeric_limits<std::int64_t>::min();

  constexpr caching::block& at(int b) { return blocks_[static_cast<std::size_t>(b)]; }
  [[nodiscard]] constexpr const caching::block& at(int b) const {
    return blocks_[static_cast<std::size_t>(b)];
  }
  constexpr caching::segment& segment_of(const caching::block& x) {
    return segments_[static_cast<std::size_t>(x.segment)];
  }
  [[nodiscard]] constexpr const caching::segment& segment_of(const caching::block& x) const {
    return segments_[static_cast<std::size_t>(x.segment)];
  }

  [[nodiscard]] constexpr bool in_pool(const caching::block& x, int stream, bool small) const {
    const caching::segment& s = segment_of(x);
    return s.stream == stream && s.small == small;
  }
  /// What best fit compares: a free block at the end of an expandable segment can grow into the
  /// unmapped rest of its address space, so it ranks as the largest (get_free_block's
  /// expandable_size).
  [[nodiscard]] constexpr std::int64_t fit_size(const caching::block& x) const {
    const bool tail = segment_of(x).expandable && x.next < 0;
    return tail ? std::numeric_limits<std::int64_t>::max() : x.size;
  }
  /// A block's entry: its key is taken when it is cached, and stays while it is (its size and
  /// neighbours change only outside the list).
  [[nodiscard]] constexpr caching::free_entry key(int b) const {
    const caching::block& x = at(b);
    const caching::segment& s = segment_of(x);
    return {caching::pool_key(s.stream, s.small), b, fit_size(x), s.address, x.offset};
  }
  /// The first cached block not ordered before `k`.
  [[nodiscard]] constexpr position lower_bound(const caching::free_entry& k) const {
    return free_.lower_bound([&](const caching::free_entry& e) { return e < k; });
  }
  /// malloc's search: a cached block of the pool (split when it is larger), else a new segment,
  /// else the cache released and a new segment; -1 when none fits the device. Counted nowhere.
  constexpr int take(bytes size, int stream) {
    using namespace caching;
    const std::int64_t rounded = round_size(conf_, size.count);
    const bool small = rounded <= small_size;  // get_pool
    // The cached block's entry, if one serves: erased below, or rewritten as the split's rest.
    std::optional<position> slot;
    int b = free_block(rounded, stream, small, slot);
    if (b < 0) {
      garbage_collect();
      b = new_segment(rounded, stream, small);
      if (b < 0 && release_available(rounded, stream, small))
        b = new_segment(rounded, stream, small);
      if (b < 0 && release_all()) b = new_segment(rounded, stream, small);
      if (b < 0) {
        ++stats_.oom;
        return -1;
      }
    }
    if (should_split(at(b), rounded, small))
      split(b, rounded, slot);
    else if (slot)
      free_.erase(*slot);
    at(b).allocated = true;
    return b;
  }

  constexpr void cache(int b) {
    at(b).gc_base = large_searches_;
    const caching::free_entry e = key(b);
    free_.insert(lower_bound(e), e);
  }
  /// Caches `b` in place of the entry at `slot` (one of a block it was split from or merged
  /// with): where the order allows, the entry is rewritten without a search.
  constexpr void cache(int b, const std::optional<position>& slot) {
    if (!slot) return cache(b);
    at(b).gc_base = large_searches_;
    free_.replace(*slot, key(b));
  }
  constexpr void uncache(int b) { free_.erase(lower_bound(key(b))); }

  /// get_free_block: the smallest cached block of the pool and stream that holds `size` (ordered
  /// by size, then address), unless max_split_size rules it out. Its entry stays, at `slot`.
  constexpr int free_block(std::int64_t size, int stream, bool small,
                           std::optional<position>& slot) {
    if (!small && collects_garbage()) ++large_searches_;  // get_free_blocks_call_count
    const position found_at = lower_bound(
        {.pool = caching::pool_key(stream, small), .size = size, .address = lowest_address});
    if (found_at == free_.end() || !in_pool(at(free_[found_at].block), stream, small)) return -1;
    const int best = free_[found_at].block;
    const std::int64_t found = at(best).size;
    if (!segment_of(at(best)).expandable) {
      // An oversize block serves no request under max_split_size...
      if (size < conf_.max_split_size && found >= conf_.max_split_size) return -1;
      // ...and one at or above it only when at most max_non_split_rounding larger.
      if (size >= conf_.max_split_size && found >= size + conf_.max_non_split_rounding) return -1;
    } else if (found < size && !grow(best, size - found)) {
      return -1;
    }
    slot = found_at;
    return best;
  }

  /// should_split: a small-pool or expandable block splits off any remainder of 512 B or more; a
  /// large one only a remainder over 1 MiB, and never when the request reaches max_split_size.
  [[nodiscard]] constexpr bool should_split(const caching::block& x, std::int64_t size,
                                            bool small) const {
    const std::int64_t remaining = x.size - size;
    if (small || segment_of(x).expandable) return remaining >= caching::min_block_size;
    return size < conf_.max_split_size && remaining > caching::small_size;
  }

  /// Splits `size` bytes off `b`; the rest is cached (in place of `slot`, `b`'s entry, if any).
  constexpr void split(int b, std::int64_t size, const std::optional<position>& slot) {
    caching::block rest = at(b);
    rest.offset += size;
    rest.size -= size;
    rest.prev = b;
    const int r = unused_.empty() ? static_cast<int>(blocks_.size()) : unused_.back();
    if (unused_.empty()) {
      blocks_.push_back(rest);
    } else {
      unused_.pop_back();
      at(r) = rest;
    }
    if (rest.next >= 0) at(rest.next).prev = r;
    at(b).size = size;
    at(b).next = r;
    cache(r, slot);
  }

  /// try_merge_blocks with both neighbours, when they are free: the merged block takes a
  /// neighbour's entry.
  constexpr void merge(int b) {
    auto absorb = [&](int into, int gone) {
      at(into).size += at(gone).size;
      at(into).next = at(gone).next;
      if (at(gone).next >= 0) at(at(gone).next).prev = into;
      unused_.push_back(gone);
    };
    const int next = at(b).next, prev = at(b).prev;
    const bool with_next = next >= 0 && !at(next).allocated;
    const bool with_prev = prev >= 0 && !at(prev).allocated;
    if (with_next && with_prev) uncache(next);
    std::optional<position> slot;
    if (with_prev || with_next) slot = lower_bound(key(with_prev ? prev : next));
    if (with_next) absorb(b, next);
    if (with_prev) {
      absorb(prev, b);
      b = prev;
    }
    cache(b, slot);
  }

  constexpr allocator_stats::pool& pool_of(bool small) {
    return small ? stats_.small : stats_.large;
  }

  constexpr void mark_peak() {
    stats_.peak_allocated = stats_.allocated;
    stats_.reserved_at_peak = stats_.reserved;
    stats_.large_at_peak = stats_.large;
    stats_.small_at_peak = stats_.small;
    peak_pending_ = true;
  }
  constexpr void settle_peak() {
    if (peak_pending_) stats_.largest_free_at_peak = largest_free();
    peak_pending_ = false;
  }

  [[nodiscard]] constexpr bool may_reserve(std::int64_t more) const {
    const bytes after = stats_.reserved + bytes{more};
    if (limits_.device > bytes{} && after > limits_.device) return false;
    return !(limits_.fraction_limit > bytes{} && after > limits_.fraction_limit);
  }

  constexpr void push_segment(caching::segment s) {  // next_segment_address() says where
    s.address = next_address_ >= 0 ? next_address_ : -static_cast<std::int64_t>(segments_.size());
    next_address_ = -1;
    segments_.push_back(s);
  }

  constexpr void reserve(std::int64_t more, bool small) {
    stats_.reserved += bytes{more};
    pool_of(small).reserved += bytes{more};
    ++stats_.cuda_mallocs;
    if (stats_.reserved > stats_.peak_reserved) stats_.peak_reserved = stats_.reserved;
  }

  /// alloc_block: a new segment of allocation_size(size) holding one free block, or, with
  /// expandable segments, the pool's one segment mapped further.
  constexpr int new_segment(std::int64_t size, int stream, bool small) {
    if (conf_.expandable_segments) return expand(size, stream, small);
    const std::int64_t total = caching::allocation_size(size);
    if (!may_reserve(total)) return -1;
    reserve(total, small);
    const int b = static_cast<int>(blocks_.size());
    push_segment({.size = total, .stream = stream, .small = small, .first = b});
    blocks_.push_back({static_cast<std::int64_t>(segments_.size() - 1), 0, total});
    ++stats_.segments;
    ++pool_of(small).segments;
    return b;
  }

  /// Expandable segments map their address space in pages of 2 MiB (small pool) or 20 MiB
  /// (large pool) (ExpandableSegment's segment_size) and only grow.
  static constexpr std::int64_t page_of(bool small) {
    return small ? caching::small_buffer : caching::large_buffer;
  }

  /// Maps enough pages after the free tail block `b` for it to hold `more` bytes more.
  constexpr bool grow(int b, std::int64_t more) {
    caching::segment& s = segment_of(at(b));
    const std::int64_t mapped = caching::round_up(more, page_of(s.small));
    if (!may_reserve(mapped)) return false;
    reserve(mapped, s.small);
    s.size += mapped;
    at(b).size += mapped;
    return true;
  }

  /// A request no cached block serves, with expandable segments: the pool's segment grows by the
  /// pages it needs at its end (its tail is allocated, or there is no segment yet).
  constexpr int expand(std::int64_t size, int stream, bool small) {
    std::size_t s = segments_.size();
    for (std::size_t i = 0; i < segments_.size(); ++i)
      if (segments_[i].stream == stream && segments_[i].small == small && !segments_[i].released)
        s = i;
    const std::int64_t mapped = caching::round_up(size, page_of(small));
    if (!may_reserve(mapped)) return -1;
    if (s == segments_.size()) {
      push_segment({.size = 0, .stream = stream, .small = small, .expandable = true});
      ++stats_.segments;
      ++pool_of(small).segments;
    }
    caching::segment& grown = segments_[s];
    int last = -1;
    for (int b = grown.first; b >= 0; b = at(b).next) last = b;
    const int b = static_cast<int>(blocks_.size());
    blocks_.push_back({static_cast<std::int64_t>(s), grown.size, mapped, 0, last, -1});
    if (last >= 0)
      at(last).next = b;
    else
      grown.first = b;
    reserve(mapped, small);
    grown.size += mapped;
    return b;
  }

  /// Returns a whole cached segment to the driver (release_block).
  constexpr void release_segment(int b) {
    settle_peak();
    caching::segment& s = segment_of(at(b));
    stats_.reserved -= bytes{s.size};
    pool_of(s.small).reserved -= bytes{s.size};
    --pool_of(s.small).segments;
    --stats_.segments;
    s.released = true;
    uncache(b);
    unused_.push_back(b);
  }
  [[nodiscard]] constexpr bool whole_segment(int b) const {
    return at(b).prev < 0 && at(b).next < 0 && !segment_of(at(b)).expandable;
  }

  /// release_available_cached_blocks (only with max_split_size): the smallest unsplit cached
  /// block of the pool of at least max(size, max_split_size), else the largest ones until `size`
  /// is freed.
  constexpr bool release_available(std::int64_t size, int stream, bool small) {
    if (conf_.max_split_size == std::numeric_limits<std::int64_t>::max()) return false;
    const std::int64_t least = size < conf_.max_split_size ? conf_.max_split_size : size;
    auto candidate = [&](int b) {
      return whole_segment(b) && in_pool(at(b), stream, small) &&
             at(b).size >= conf_.max_split_size;
    };
    // The free list is in best fit's order: the first candidate that is large enough is the
    // smallest, and the last candidate the largest.
    for (const caching::free_entry& e : free_.items())
      if (candidate(e.block) && at(e.block).size >= least) {
        release_segment(e.block);
        return true;
      }
    std::int64_t freed = 0;
    while (freed < size) {
      int largest = -1;
      for (const caching::free_entry& e : free_.items())
        if (candidate(e.block)) largest = e.block;
      if (largest < 0) return false;
      freed += at(largest).size;
      release_segment(largest);
    }
    return true;
  }

  /// release_cached_blocks (emptyCache): every unsplit cached segment goes back.
  constexpr bool release_all() {
    bool any = false;
    const std::vector<caching::free_entry> cached = free_.items();
    for (std::size_t i = cached.size(); i-- > 0;)
      if (whole_segment(cached[i].block)) {
        release_segment(cached[i].block);
        any = true;
      }
    return any;
  }

  [[nodiscard]] constexpr bool collects_garbage() const {
    return conf_.garbage_collection_threshold_ppm > 0 && limits_.fraction_limit > bytes{};
  }

  /// garbage_collect_cached_blocks, under a memory fraction: past the threshold, the large pool's
  /// unsplit cached blocks at least as old as their average (in the pool's searches since they
  /// were cached) go back, all of them in a pass, passes until the excess is reclaimed.
  constexpr void garbage_collect() {
    if (!collects_garbage()) return;
    const std::int64_t limit = limits_.fraction_limit.count;
    const std::int64_t ppm = conf_.garbage_collection_threshold_ppm;
    const bytes threshold{detail::checked_mul(limit / 1'000'000, ppm) +
                          limit % 1'000'000 * ppm / 1'000'000};
    if (stats_.reserved <= threshold) return;
    const bytes target = stats_.reserved - threshold;
    bytes reclaimed{};
    auto freeable = [&](int b) { return whole_segment(b) && !segment_of(at(b)).small; };
    for (bool freed = true; freed && reclaimed < target;) {
      std::int64_t ages = 0, count = 0;
      const std::vector<caching::free_entry> cached = free_.items();
      for (const caching::free_entry& c : cached)
        if (freeable(c.block)) ages += large_searches_ - at(c.block).gc_base, ++count;
      freed = false;
      for (const caching::free_entry& c : cached)  // age >= ages / count, in integers
        if (const int b = c.block;
            freeable(b) && (large_searches_ - at(b).gc_base) * count >= ages) {
          reclaimed += bytes{at(b).size};
          release_segment(b);
          freed = true;
        }
    }
  }
};

}  // namespace vramfit
