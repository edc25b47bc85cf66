// Size literals are plain decimal: 0x10_GiB is rejected rather than misread.
// expect: size_literal_must_be_plain_decimal
#include <vramfit/units.hpp>

using namespace vramfit::literals;
constexpr vramfit::bytes hex = 0x10_GiB;
