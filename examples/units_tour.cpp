// The code of docs/units.md: byte counts, units, literals, formatting and element formats.
#include <boost/units/systems/information.hpp>
#include <iostream>
#include <vramfit/vramfit.hpp>

// [start:units]
using namespace vramfit::literals;

// The same "80" is two different sizes: binary GiB (2^30 B) and decimal GB (10^9 B).
static_assert(80_GiB - 80_GB == vramfit::bytes{5'899'345'920});
static_assert(80 * vramfit::GiB == 80_GiB);

// Literals are exact: the digits are parsed, never rounded through a double.
static_assert(1.5_GiB == vramfit::bytes{1'610'612'736});
// [end:units]

// [start:formats]
// Block-scaled formats carry their scales: NF4 with double quantization is 4.127 bits/element.
static_assert(vramfit::bits_per_element(vramfit::nf4_double_quant::value) ==
              vramfit::ratio{2113, 512});  // 4 + 8/64 + 32/(64 * 256)

// A 4096 x 4096 weight in GPTQ int4 (group 128, fp16 scales, 4-bit zeros).
static_assert(vramfit::storage_bytes<vramfit::gptq_int4>(4096, 4096) == vramfit::bytes{8'716'288});
// [end:formats]

int main() {
  // [start:printing]
  const vramfit::bytes used{85'016'510'464};
  std::cout << to_string(used) << "\n";                              // 79.18 GiB
  std::cout << to_string(used, vramfit::prefixes::decimal) << "\n";  // 85.02 GB
  std::cout << to_string(used, vramfit::MiB) << "\n";                // 81078.06 MiB
  std::cout << used << "\n";  // 85016510464 B (79.18 GiB): the exact count first
  // [end:printing]

  // [start:boost]
  namespace info = boost::units::information;
  const vramfit::byte_quantity card(std::int64_t{80} * info::gibi * info::bytes);
  const vramfit::bytes capacity = vramfit::from_quantity(card);  // exactly 80 GiB
  const vramfit::byte_quantity back = vramfit::to_quantity(capacity);
  // [end:boost]
  std::cout << back.value() << "\n";
}
