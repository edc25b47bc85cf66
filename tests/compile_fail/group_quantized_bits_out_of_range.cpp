// Group-quantized elements have 1 to 8 bits: 9 is rejected with the rule and the number.
// expect: quantized_bits_must_be_1_to_8
#include <vramfit/dtype.hpp>

constexpr vramfit::bytes b = vramfit::storage_bytes<vramfit::group_quantized<9, 128>>(1024);
