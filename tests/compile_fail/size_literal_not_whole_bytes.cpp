// A size literal must be a whole number of bytes: 0.1 B is not.
// expect: size_literal_is_not_a_whole_number_of_bytes
#include <vramfit/units.hpp>

using namespace vramfit::literals;
constexpr vramfit::bytes tenth = 0.1_B;
