// Static tier: exact byte counts, units and literals, checked at compile time.
#include <type_traits>
#include <vramfit/units.hpp>

namespace {
using vramfit::bytes;
using namespace vramfit::literals;

// Binary and decimal units are different sizes (IEC 80000-13): 1 GiB = 2^30 B, 1 GB = 10^9 B.
static_assert(1_GiB == bytes{1'073'741'824});
static_assert(1_GB == bytes{1'000'000'000});
static_assert(80_GiB - 80_GB == bytes{5'899'345'920});
static_assert(80_GiB == 80 * vramfit::GiB && 80_GB == vramfit::GB * 80);
static_assert(1_TiB == 1024_GiB && 1_PB == 1000_TB && 1_KiB == 1024_B);

// Literals are parsed from their digits: fractions are exact when they come to whole bytes.
static_assert(1.5_GiB == bytes{1'610'612'736});
static_assert(0.5_KiB == 512_B);
static_assert(1.1_GB == bytes{1'100'000'000});
static_assert(1'000_MB == 1_GB);

// Checked arithmetic at the edge of int64.
static_assert(bytes{INT64_MAX} - bytes{1} + bytes{1} == bytes{INT64_MAX});
static_assert(-bytes{5} == bytes{-5});
static_assert(bytes{3} * 4 == bytes{12} && 4 * bytes{3} == bytes{12});
static_assert((bytes{10} += bytes{5}) == bytes{15});

// Storage rounds up: 12 bits need 2 bytes; shards round up.
static_assert(vramfit::bytes_for_bits(12) == bytes{2});
static_assert(vramfit::bytes_for_bits(16) == bytes{2});
static_assert(vramfit::divide_up(bytes{10}, 4) == bytes{3});
static_assert(vramfit::divide_up(bytes{12}, 4) == bytes{3});

// Structural: usable as a template argument.
template <bytes Need>
struct needs {
  static constexpr bytes value = Need;
};
static_assert(needs<80_GiB>::value == 80_GiB);

// No floating point in byte arithmetic, no implicit conversion from a raw number.
template <class T>
concept scales_by_double = requires(T x) {
  x * 1.5;
}
|| requires(T x) {
  1.5 * x;
};
static_assert(!scales_by_double<bytes> && !scales_by_double<vramfit::byte_unit>);
static_assert(requires(bytes b) { b * 2; });
static_assert(!std::is_convertible_v<std::int64_t, bytes>);

// Boost.Units at the edge keeps the exact value.
static_assert(vramfit::to_quantity(80_GiB).value() == 85'899'345'920);
static_assert(vramfit::from_quantity(vramfit::to_quantity(3_MB)) == 3_MB);
static_assert(vramfit::from_quantity(vramfit::bit_quantity::from_value(12)) == bytes{2});
}  // namespace
