// Unit tier: byte counts at run time: formatting, overflow errors, Boost.Units conversions.
#include <doctest/doctest.h>

#include <boost/units/systems/information.hpp>
#include <sstream>
#include <string>
#include <vramfit/units.hpp>

using vramfit::bytes;
using namespace vramfit::literals;

TEST_CASE("sizes print with two decimals and the unit named") {
  // 85,016,510,464 / 2^30 = 79.1775... -> "79.18 GiB"; / 10^9 = 85.0165... -> "85.02 GB".
  CHECK(to_string(bytes{85'016'510'464}) == "79.18 GiB");
  CHECK(to_string(bytes{85'016'510'464}, vramfit::prefixes::decimal) == "85.02 GB");
  CHECK(to_string(80_GiB, vramfit::GB) == "85.90 GB");
  CHECK(to_string(80_GB, vramfit::GiB) == "74.51 GiB");
  CHECK(to_string(bytes{512}) == "512 B");
  // Byte counts have no decimals to round: 1018 B stays; 1019 B is 0.9951 KiB, shown "1.00 KiB".
  CHECK(to_string(bytes{1018}) == "1018 B");
  CHECK(to_string(bytes{1019}) == "1.00 KiB");
  CHECK(to_string(1_KiB) == "1.00 KiB");
  CHECK(to_string(bytes{1536}) == "1.50 KiB");
  CHECK(to_string(bytes{0}) == "0 B");
}

TEST_CASE("rounding that reaches a whole unit moves to the next unit") {
  // 2^30 - 1 bytes is 1023.999999 MiB: it prints as 1.00 GiB, not "1024.00 MiB".
  CHECK(to_string(1_GiB - bytes{1}) == "1.00 GiB");
  CHECK(to_string(bytes{999'999}, vramfit::prefixes::decimal) == "1.00 MB");
  // 0.994 MB stays in KB: 994,000 B -> "994.00 KB".
  CHECK(to_string(bytes{994'000}, vramfit::prefixes::decimal) == "994.00 KB");
  // Half a hundredth rounds up: 1.005 KiB = 1029.12 B; 1030 B = 1.00586 KiB -> "1.01 KiB".
  CHECK(to_string(bytes{1030}) == "1.01 KiB");
}

TEST_CASE("negative sizes and the int64 extremes print") {
  CHECK(to_string(-5_GiB) == "-5.00 GiB");
  CHECK(to_string(bytes{INT64_MAX}) == "8192.00 PiB");
  CHECK(to_string(bytes{INT64_MIN}) == "-8192.00 PiB");
}

TEST_CASE("streaming shows the exact count first") {
  std::ostringstream out;
  out << 80_GiB << "; " << bytes{100};
  CHECK(out.str() == "85899345920 B (80.00 GiB); 100 B");
}

TEST_CASE("overflow at run time is a vramfit::overflow_error naming the operation") {
  const bytes big{INT64_MAX};
  CHECK_THROWS_AS(big + bytes{1}, vramfit::overflow_error);
  CHECK_THROWS_WITH(big * 2,
                    "vramfit: count overflows int64 in multiplication of 9223372036854775807 and 2 "
                    "(limit 9223372036854775807)");
  CHECK_THROWS_AS(bytes{INT64_MIN} - bytes{1}, vramfit::overflow_error);
  CHECK_THROWS_AS(-bytes{INT64_MIN}, vramfit::overflow_error);
  volatile std::int64_t gpus = 10'000'000;
  CHECK_THROWS_AS(gpus * vramfit::TiB, vramfit::overflow_error);
}

TEST_CASE("shares of a size round up and reject zero parts") {
  CHECK(divide_up(bytes{7}, 2) == bytes{4});
  CHECK_THROWS_WITH(divide_up(bytes{7}, 0), "vramfit: 7 divided by zero");
  CHECK_THROWS_AS(divide_up(bytes{-7}, 2), vramfit::error);
}

TEST_CASE("Boost.Units quantities convert exactly at the edge") {
  namespace bu = boost::units;
  namespace info = boost::units::information;
  // Boost converts prefixed units through double; 80 GiB is exact in double.
  const vramfit::byte_quantity h100(std::int64_t{80} * info::gibi * info::bytes);
  CHECK(vramfit::from_quantity(h100) == 80_GiB);
  const bu::quantity<info::info, double> in_double(1.5 * info::kibi * info::bytes);
  CHECK(in_double.value() == doctest::Approx(static_cast<double>(to_quantity(1.5_KiB).value())));
  // 20 bits are 2.5 bytes of storage: 3 whole bytes.
  CHECK(vramfit::from_quantity(vramfit::bit_quantity::from_value(20)) == bytes{3});
  CHECK((80_GiB).in(vramfit::GiB) == 80.0);
}

TEST_CASE("sizes written with their unit, exactly") {
  using namespace vramfit;
  static_assert(parse_size("80GiB") == 80 * GiB);
  CHECK(parse_size("96GiB") == bytes{103'079'215'104});
  CHECK(parse_size("44GB") == bytes{44'000'000'000});
  CHECK(parse_size("44 gb") == bytes{44'000'000'000});
  CHECK(parse_size("1.5TiB") == bytes{1'649'267'441'664});
  CHECK(parse_size("81559MiB") == bytes{85'520'809'984});  // an H100's driver total
  CHECK(parse_size("512B") == bytes{512});
  for (const char* bad :
       {"", "GiB", "12", "12XB", "0.1B", "1.2.3GB", "01GB", "-4GB", "0GB", "4 GB extra", "4GiBs"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(parse_size(bad), doctest::Contains("is not a size such as 96GiB"), error);
  }
  // Issue 38: every refusal names the text; a fraction's trailing zeros are no overflow.
  CHECK(parse_size("80.000000000000000000GiB") == bytes{85'899'345'920});
  CHECK(parse_size("1.500000000000000000000000000000000000000000TiB") == bytes{1'649'267'441'664});
  CHECK(parse_size("0.99999904632568359375MiB") == bytes{1'048'575});           // 1 - 2^-20 MiB
  CHECK(parse_size("8191.9990234375PiB") == bytes{9'223'370'937'343'148'032});  // 2^63 - 2^40
  CHECK_THROWS_WITH(parse_size("8192PiB"), doctest::Contains("'8192PiB' is more than"));  // 2^63
  CHECK_THROWS_WITH_AS(parse_size("99999999999999999PB"),
                       "vramfit: '99999999999999999PB' is more than 9223372036854775807 bytes "
                       "(8 EiB), the largest size",
                       error);
  CHECK_THROWS_WITH(parse_size("9223372036854775808B"),
                    doctest::Contains("'9223372036854775808B' is more than"));
  CHECK(parse_size("9223372036854775807B") == bytes{INT64_MAX});
  CHECK_THROWS_WITH(parse_size("99999999999999999999999999999999GiB"),
                    doctest::Contains("'99999999999999999999999999999999GiB' is more than"));
  CHECK_THROWS_WITH(parse_size("80.0000000000000000000000000001GiB"),
                    "vramfit: '80.0000000000000000000000000001GiB' has more digits than a size is "
                    "read with (22, a fraction's trailing zeros aside)");
  CHECK_THROWS_WITH(
      parse_size(std::string(50, 'x')),  // cut at 40, and said so
      doctest::Contains("'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' is not a size"));
  CHECK_THROWS_WITH(parse_size("0.1234567890123456789012345678901234567890123456789B"),
                    doctest::Contains("'0.12345678901234567890123456789012345678...' has more "
                                      "digits"));
}
