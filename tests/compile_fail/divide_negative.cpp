// Shares are of non-negative sizes: dividing -7 bytes is rejected.
// expect: count_must_not_be_negative
#include <vramfit/units.hpp>

using namespace vramfit;
constexpr bytes share = divide_up(bytes{-7}, 2);
