// The caching allocator's rules, each against a segment map derived by hand from
// c10/cuda/CUDACachingAllocator.cpp: rounding, pools, best fit, splitting, merging,
// max_split_size, expandable segments, streams, out-of-memory retries and garbage collection.
#include <doctest/doctest.h>

#include <vector>
#include <vramfit/caching_allocator.hpp>

using namespace vramfit;
using namespace vramfit::caching;
using map = std::vector<std::int64_t>;

namespace {
constexpr std::int64_t K = 1024, M = 1024 * 1024;
}

// The simulation runs in a constant expression.
static_assert([] {
  caching_allocator a;
  const int x = a.allocate(bytes{6 * M});
  a.allocate(bytes{100});
  a.release(x);
  return a.stats().reserved == bytes{22 * M} && a.stats().allocated == bytes{512};
}());

TEST_CASE("round_size: 512-byte steps, or divisions of the power of two") {
  const alloc_conf plain{};
  CHECK(round_size(plain, 1) == 512);
  CHECK(round_size(plain, 512) == 512);
  CHECK(round_size(plain, 513) == 1024);
  CHECK(round_size(plain, M + 1) == M + 512);
  // The source's own example: 1200 cut in 4 of [1024, 2048) rounds to 1280.
  CHECK(round_to_division(1200, 4) == 1280);
  CHECK(round_to_division(4 * M, 4) == 4 * M);  // a power of two stays
  alloc_conf four{};
  for (std::int64_t& d : four.roundup_power2_divisions) d = 4;
  // 5 MiB + 1 lies in [4 MiB, 8 MiB), steps of 1 MiB: 6 MiB.
  CHECK(round_size(four, 5 * M + 1) == 6 * M);
  // Not above 512 x 4: 512-byte steps still.
  CHECK(round_size(four, 1200) == 1536);
}

TEST_CASE("get_allocation_size: 2 MiB small segments, 20 MiB shared large ones, else own") {
  CHECK(allocation_size(512) == 2 * M);
  CHECK(allocation_size(M) == 2 * M);
  CHECK(allocation_size(M + 512) == 20 * M);
  CHECK(allocation_size(10 * M - 512) == 20 * M);
  CHECK(allocation_size(10 * M) == 10 * M);
  CHECK(allocation_size(11 * M + 512) == 12 * M);
}

TEST_CASE("small pool: three 400 KiB tensors share one 2 MiB segment and frees merge") {
  caching_allocator a;
  const int x = a.allocate(bytes{400 * K});
  const int y = a.allocate(bytes{400 * K});
  a.allocate(bytes{400 * K});
  REQUIRE(a.segment_count() == 1);
  CHECK(a.segment_map(0) == map{400 * K, 400 * K, 400 * K, -848 * K});
  CHECK(a.stats().reserved == bytes{2 * M});
  CHECK(a.stats().allocated == bytes{1200 * K});
  a.release(y);
  CHECK(a.segment_map(0) == map{400 * K, -400 * K, 400 * K, -848 * K});
  a.release(x);  // merges with the free block after it
  CHECK(a.segment_map(0) == map{-800 * K, 400 * K, -848 * K});
  // Best fit: 700 KiB takes the 800 KiB hole, not the 848 KiB one.
  a.allocate(bytes{700 * K});
  CHECK(a.segment_map(0) == map{700 * K, -100 * K, 400 * K, -848 * K});
  CHECK(a.stats().reserved == bytes{2 * M});
}

TEST_CASE("large pool: a remainder of 1 MiB or less is not split off and counts as allocated") {
  caching_allocator a;
  a.allocate(bytes{6 * M});  // a 20 MiB segment, 14 MiB split off
  CHECK(a.segment_map(0) == map{6 * M, -14 * M});
  a.allocate(bytes{13 * M + 512 * K});  // fits the 14 MiB block; 0.5 MiB is left: no split
  CHECK(a.segment_map(0) == map{6 * M, 14 * M});
  CHECK(a.stats().allocated == bytes{20 * M});
  CHECK(a.stats().requested == bytes{19 * M + 512 * K});
  CHECK(a.stats().reserved == bytes{20 * M});
  // The next one gets its own segment rounded to 2 MiB.
  a.allocate(bytes{11 * M});
  CHECK(a.segment_map(1) == map{12 * M});
  CHECK(a.stats().reserved == bytes{32 * M});
}

TEST_CASE("streams: a block freed on one stream serves only that stream") {
  caching_allocator a;
  a.release(a.allocate(bytes{30 * M}, 0));
  a.allocate(bytes{30 * M}, 1);
  CHECK(a.segment_count() == 2);
  CHECK(a.stats().reserved == bytes{60 * M});
  a.allocate(bytes{30 * M}, 0);  // back on stream 0: the cached block
  CHECK(a.stats().reserved == bytes{60 * M});
}

TEST_CASE("record_stream: a block freed with a stream recorded returns only when it passes") {
  // CUDACachingAllocator.cpp free(): the allocated statistics drop at once; with stream uses
  // the block waits in insert_events until process_events sees its events complete.
  caching_allocator a;
  const int x = a.allocate(bytes{400 * K});
  a.allocate(bytes{400 * K});
  a.release_deferred(x);
  CHECK(a.stats().allocated == bytes{400 * K});
  CHECK(a.stats().requested == bytes{400 * K});
  // Neither reused nor merged: a third tensor goes after the second.
  a.allocate(bytes{400 * K});
  CHECK(a.segment_map(0) == map{400 * K, 400 * K, 400 * K, -848 * K});
  CHECK(a.stats().allocated == bytes{800 * K});
  a.complete_free(x);
  CHECK(a.segment_map(0) == map{-400 * K, 400 * K, 400 * K, -848 * K});
  a.allocate(bytes{300 * K});  // best fit: the passed block
  CHECK(a.segment_map(0) == map{300 * K, -100 * K, 400 * K, 400 * K, -848 * K});
  CHECK(a.stats().reserved == bytes{2 * M});
  // A block whose tensor's use is past when the replay reaches it: taken, counted nowhere.
  const bytes allocated = a.stats().allocated;
  const int y = a.hold_freed(bytes{800 * K});
  CHECK(a.segment_map(0) == map{300 * K, -100 * K, 400 * K, 400 * K, 800 * K, -48 * K});
  CHECK(a.stats().allocated == allocated);
  CHECK(a.stats().peak_allocated == bytes{1100 * K});
  a.complete_free(y);
  CHECK(a.segment_map(0) == map{300 * K, -100 * K, 400 * K, 400 * K, -848 * K});
}

TEST_CASE("best fit breaks ties by address: a new segment lies below, unless a replay says") {
  // Two 30 MiB segments, both cached whole: a 10 MiB request fits either, and
  // BlockComparatorSize takes the lower address. Without addresses the newer segment ranks lower
  // (the driver maps top-down); a replay's addresses decide otherwise.
  caching_allocator a;
  const int first = a.allocate(bytes{30 * M});
  const int second = a.allocate(bytes{30 * M});
  a.release(first);
  a.release(second);
  CHECK(a.block_at(a.allocate(bytes{10 * M})).segment == 1);
  caching_allocator replayed;
  replayed.next_segment_address(0x7000000000);
  const int low = replayed.allocate(bytes{30 * M});
  replayed.next_segment_address(0x7100000000);
  const int high = replayed.allocate(bytes{30 * M});
  replayed.release(low);
  replayed.release(high);
  CHECK(replayed.block_at(replayed.allocate(bytes{10 * M})).segment == 0);
  CHECK(replayed.segment_map(0) == map{10 * M, -20 * M});
}

TEST_CASE("max_split_size: oversize blocks are not split, and small requests do not take them") {
  const alloc_conf c = parse_alloc_conf("max_split_size_mb:32");
  caching_allocator a(c);
  a.release(a.allocate(bytes{40 * M}));
  a.allocate(bytes{8 * M});  // the cached 40 MiB block is oversize: a new 20 MiB segment
  CHECK(a.stats().reserved == bytes{60 * M});
  CHECK(a.segment_map(0) == map{-40 * M});
  // A request at or above max_split_size takes an oversize block less than 20 MiB larger,
  // whole.
  a.allocate(bytes{38 * M});
  CHECK(a.segment_map(0) == map{40 * M});
  CHECK(a.stats().reserved == bytes{60 * M});
  caching_allocator b(c);
  b.release(b.allocate(bytes{80 * M}));
  b.allocate(bytes{40 * M});  // 80 >= 40 + 20: refused, a new segment
  CHECK(b.stats().reserved == bytes{120 * M});
  CHECK(b.segment_map(0) == map{-80 * M});
}

TEST_CASE("expandable segments: one mapping per pool grows by 20 MiB pages") {
  caching_allocator a(parse_alloc_conf("expandable_segments:True"));
  a.allocate(bytes{6 * M});
  CHECK(a.segment_map(0) == map{6 * M, -14 * M});
  // 30 MiB: no free block holds it but the tail, which maps 16 MiB more, rounded to a page.
  a.allocate(bytes{30 * M});
  CHECK(a.segment_map(0) == map{6 * M, 30 * M, -4 * M});
  CHECK(a.stats().reserved == bytes{40 * M});
  CHECK(a.segment_count() == 1);
  // Without them: a 20 MiB segment for the first, 30 MiB of its own for the second.
  caching_allocator b;
  b.allocate(bytes{6 * M});
  b.allocate(bytes{30 * M});
  CHECK(b.stats().reserved == bytes{50 * M});
}

TEST_CASE("out of memory: cached unsplit segments go back, then the request fails") {
  caching_allocator a({}, {bytes{40 * M}, {}});
  a.release(a.allocate(bytes{20 * M}));
  // 20 + 30 > 40: release_cached_blocks frees the cached 20 MiB segment, then 30 MiB fits.
  CHECK(a.allocate(bytes{30 * M}) >= 0);
  CHECK(a.stats().reserved == bytes{30 * M});
  CHECK(a.stats().peak_reserved == bytes{30 * M});
  CHECK(a.allocate(bytes{20 * M}) == -1);
  CHECK(a.stats().oom == 1);
}

TEST_CASE("garbage collection: under a memory fraction, the older cached blocks go first") {
  caching_allocator a(parse_alloc_conf("garbage_collection_threshold:0.5"), {{}, bytes{200 * M}});
  const int x = a.allocate(bytes{40 * M});
  const int y = a.allocate(bytes{30 * M});
  a.release(x);               // cached after 0 searches of the large pool
  a.allocate(bytes{45 * M});  // search 1 misses; reserved 70 <= 100: no collection; 46 MiB more
  CHECK(a.stats().reserved == bytes{116 * M});
  a.release(y);  // cached after 1 search
  // Search 2 misses; 116 > 100: ages 2 (x) and 1 (y), average 1.5: only x's segment goes, which
  // reclaims the 16 MiB excess; then a 50 MiB segment.
  a.allocate(bytes{50 * M});
  CHECK(a.stats().reserved == bytes{126 * M});
  CHECK(a.segment_map(0).empty());
  CHECK(a.segment_map(1) == map{-30 * M});
  // Without a fraction the threshold does nothing.
  caching_allocator b(parse_alloc_conf("garbage_collection_threshold:0.5"));
  b.release(b.allocate(bytes{40 * M}));
  b.allocate(bytes{60 * M});
  CHECK(b.stats().reserved == bytes{100 * M});
}

TEST_CASE(
    "adopt_segment: a snapshot's segments are taken over, and best fit ranks them by address") {
  caching_allocator a;
  // Two 20 MiB segments as a snapshot shows them: [6 MiB live, 14 MiB free], [20 MiB free].
  const int first = a.adopt_segment({6 * M, -14 * M});
  a.adopt_segment({-20 * M});
  CHECK(a.stats().reserved == bytes{40 * M});
  CHECK(a.stats().allocated == bytes{6 * M});
  // 3 MiB: the smallest block that holds it is the first segment's 14 MiB tail (after its live
  // block); the remainder, 11 MiB, is over 1 MiB and splits off.
  const int x = a.allocate(bytes{3 * M});
  CHECK(a.block_at(x).segment == 0);
  CHECK(a.block_at(x).offset == 6 * M);
  CHECK(a.segment_map(0) == map{6 * M, 3 * M, -11 * M});
  // Freeing the adopted tensor merges nothing (its neighbour is live); freeing the new one merges
  // all three blocks back into one.
  a.release(first);
  CHECK(a.segment_map(0) == map{-6 * M, 3 * M, -11 * M});
  a.release(x);
  CHECK(a.segment_map(0) == map{-20 * M});
  CHECK(a.stats().allocated == bytes{});
  // Maps the allocator cannot reach are refused, and leave it as it was.
  for (const map& unreachable : {map{M, -100}, map{-M, -M}, map{}, map{0}})
    CHECK_THROWS_WITH_AS(a.adopt_segment(unreachable),
                         doctest::Contains("an adopted segment's block"), error);
  CHECK(a.segment_count() == 2);
  CHECK(a.stats().reserved == bytes{40 * M});
}

TEST_CASE("state: what decides later requests, whatever the handles and dead blocks") {
  // Two 4 MiB tensors split a 20 MiB segment (remainders over 1 MiB split off) and merge back
  // when freed; one 8 MiB tensor leaves the same single free block. Equal states, though the
  // first allocator has made three blocks and the second two.
  caching_allocator a, b;
  const int x = a.allocate(bytes{4 * M});
  a.release(a.allocate(bytes{4 * M}));
  a.release(x);
  b.release(b.allocate(bytes{8 * M}));
  CHECK(a.segment_map(0) == map{-20 * M});
  CHECK(a.state() == b.state());
  CHECK_FALSE(a.state().empty());
  // A 4 MiB tensor against a 6 MiB one: another block map.
  a.allocate(bytes{4 * M});
  b.allocate(bytes{6 * M});
  CHECK(a.state() != b.state());
  // A third that reaches a's state by another path: equal, with a live block at the same place.
  // (A 9 MiB request is under 10 MiB, so it too gets a 20 MiB segment.)
  caching_allocator c;
  c.release(c.allocate(bytes{9 * M}));
  c.allocate(bytes{4 * M});
  CHECK(a.state() == c.state());
  // Garbage collection counts each cached block's age, which the state leaves out: such an
  // allocator's state is empty, equal to no other.
  caching_allocator gc(parse_alloc_conf("garbage_collection_threshold:0.5"), {{}, bytes{200 * M}});
  CHECK(gc.state().empty());
}

TEST_CASE("append_state appends state(), and reset starts over as a new allocator") {
  // Requests that split, merge, cache and reach a second pool, run by a used allocator after
  // reset() and by a new one: the same handles, statistics, segment maps and state.
  auto run = [](caching_allocator& a) {
    std::vector<int> handles;
    for (const std::int64_t size : {4 * M, 300 * K, 12 * M, 3 * M, K - 300, 30 * M})
      handles.push_back(a.allocate(bytes{size}));
    a.release(handles[0]);
    a.release(handles[3]);
    handles.push_back(a.allocate(bytes{2 * M}));
    a.release(handles[4]);
    handles.push_back(a.allocate(bytes{5 * M}, 1));
    return handles;
  };
  const alloc_conf expandable = parse_alloc_conf("expandable_segments:True");
  for (const alloc_conf& conf : {alloc_conf{}, expandable}) {
    caching_allocator used(expandable, {.device = bytes{64 * M}});
    used.release(used.allocate(bytes{40 * M}));
    used.allocate(bytes{1000});
    run(used);
    used.reset(conf);
    caching_allocator fresh(conf);
    CHECK(run(used) == run(fresh));
    CHECK(used.state() == fresh.state());
    CHECK(used.stats().reserved == fresh.stats().reserved);
    CHECK(used.stats().peak_allocated == fresh.stats().peak_allocated);
    CHECK(used.stats().largest_free_at_peak == fresh.stats().largest_free_at_peak);
    CHECK(used.stats().cuda_mallocs == fresh.stats().cuda_mallocs);
    REQUIRE(used.segment_count() == fresh.segment_count());
    for (std::size_t s = 0; s < used.segment_count(); ++s)
      CHECK(used.segment_map(s) == fresh.segment_map(s));
    std::vector<std::int64_t> appended{7};
    CHECK(used.append_state(appended));
    CHECK(appended.front() == 7);
    CHECK(std::vector(appended.begin() + 1, appended.end()) == used.state());
  }
  // Garbage collection: nothing appended.
  caching_allocator gc(parse_alloc_conf("garbage_collection_threshold:0.5"), {{}, bytes{200 * M}});
  gc.allocate(bytes{M});
  std::vector<std::int64_t> none;
  CHECK_FALSE(gc.append_state(none));
  CHECK(none.empty());
}

TEST_CASE("property: reserved covers allocated, and both equal their blocks and segments") {
  for (const char* conf :
       {"", "expandable_segments:True", "max_split_size_mb:64", "roundup_power2_divisions:4"}) {
    CAPTURE(conf);
    caching_allocator a(parse_alloc_conf(conf));
    std::vector<int> live;
    std::uint64_t state = 12345;
    auto next = [&] {
      return (state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 33;
    };
    bytes last_peak{};
    for (int i = 0; i < 3000; ++i) {
      if (live.empty() || next() % 3 != 0) {
        const std::int64_t scale = next() % 3 == 0 ? 1 : next() % 2 == 0 ? 4096 : 1 << 20;
        live.push_back(a.allocate(bytes{static_cast<std::int64_t>(next() % 64 + 1) * scale}));
      } else {
        const std::size_t k = next() % live.size();
        a.release(live[k]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
      const allocator_stats& s = a.stats();
      REQUIRE(s.reserved >= s.allocated);
      REQUIRE(s.allocated >= s.requested);
      REQUIRE(s.peak_reserved >= last_peak);
      REQUIRE(s.reserved == s.peak_reserved);  // nothing goes back without a limit
      last_peak = s.peak_reserved;
    }
    bytes segments{}, blocks{};
    for (std::size_t s = 0; s < a.segment_count(); ++s) {
      segments += bytes{a.segment_at(s).size};
      for (std::int64_t b : a.segment_map(s)) blocks += bytes{b > 0 ? b : 0};
    }
    CHECK(segments == a.stats().reserved);
    CHECK(blocks == a.stats().allocated);
    CHECK(a.stats().small.reserved + a.stats().large.reserved == a.stats().reserved);
    CHECK(a.stats().small.allocated + a.stats().large.allocated == a.stats().allocated);
    std::int64_t largest = 0;
    for (std::size_t s = 0; s < a.segment_count(); ++s)
      for (std::int64_t b : a.segment_map(s))
        if (-b > largest) largest = -b;
    CHECK(a.largest_free() == bytes{largest});
  }
}

TEST_CASE("PYTORCH_CUDA_ALLOC_CONF is read as PyTorch reads it") {
  constexpr alloc_conf c = parse_alloc_conf(
      " expandable_segments:True, max_split_size_mb:512,roundup_power2_divisions:[256:1,512:2,>:8],"
      "garbage_collection_threshold:0.6,pinned_use_cuda_host_register:True");
  static_assert(c.expandable_segments && c.max_split_size == 512 * M);
  static_assert(c.garbage_collection_threshold_ppm == 600000);
  // 256: sets intervals 0..8, 512: interval 9, ">" from interval 9 up.
  static_assert(c.roundup_power2_divisions[0] == 1 && c.roundup_power2_divisions[8] == 1);
  static_assert(c.roundup_power2_divisions[9] == 8 && c.roundup_power2_divisions[15] == 8);
  CHECK(parse_alloc_conf("roundup_power2_divisions:2").roundup_power2_divisions[7] == 2);
  CHECK(parse_alloc_conf("").max_split_size == std::numeric_limits<std::int64_t>::max());
  CHECK(parse_alloc_conf("max_non_split_rounding_mb:0").max_non_split_rounding == 0);
  CHECK_THROWS_WITH(parse_alloc_conf("expandable_segments:true"),
                    "vramfit: allocator option expandable_segments:true: expected True or False");
  CHECK_THROWS_WITH(parse_alloc_conf("max_split_size_mb:19"),
                    "vramfit: allocator option max_split_size_mb:19: expected a whole number of "
                    "MiB, at least 20");
  CHECK_THROWS_AS(parse_alloc_conf("roundup_power2_divisions:3"), error);
  CHECK_THROWS_AS(parse_alloc_conf("roundup_power2_divisions:[3:2]"), error);
  CHECK_THROWS_AS(parse_alloc_conf("garbage_collection_threshold:1.0"), error);
  CHECK_THROWS_AS(parse_alloc_conf("backend:cudaMallocAsync"), error);
  CHECK_THROWS_WITH(parse_alloc_conf("max_split_size:512"),
                    doctest::Contains("unrecognized allocator option 'max_split_size'"));
}
