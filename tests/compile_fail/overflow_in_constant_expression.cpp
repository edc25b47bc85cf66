// A byte count beyond int64 in a constant expression: 9,000,000 TiB is about 9.9e18 bytes.
// expect: count_overflows_int64
// expect: 9000000
#include <vramfit/units.hpp>

using namespace vramfit::literals;
constexpr vramfit::bytes too_big = 9'000'000 * vramfit::TiB;
