// A size shared among zero parts is an error, not a crash.
// expect: division_by_zero
#include <vramfit/units.hpp>

using namespace vramfit;
constexpr bytes share = divide_up(bytes{7}, 0);
