// A raw number does not silently become a byte count: say bytes{n} or n * GiB.
// expect: (could not convert|no viable conversion)
#include <vramfit/units.hpp>

constexpr vramfit::bytes capacity = 80;
