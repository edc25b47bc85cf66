// Compile-time baseline: only the Boost.Units headers vramfit uses, and one quantity.
#include <boost/units/quantity.hpp>
#include <boost/units/systems/information/bit.hpp>
#include <boost/units/systems/information/byte.hpp>

constexpr boost::units::quantity<boost::units::information::info, long> capacity =
    boost::units::quantity<boost::units::information::info, long>::from_value(85'520'809'984);
static_assert(capacity.value() > 0);
