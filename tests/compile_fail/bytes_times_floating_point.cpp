// Byte counts are never scaled by a floating-point factor.
// expect: (use of deleted function|selected deleted operator)
#include <vramfit/units.hpp>

constexpr vramfit::bytes scaled = vramfit::bytes{1000} * 1.2;
