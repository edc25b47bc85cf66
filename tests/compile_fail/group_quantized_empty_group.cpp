// A quantization group holds at least one element.
// expect: quantization_group_must_be_positive
#include <vramfit/dtype.hpp>

constexpr vramfit::bytes b = vramfit::storage_bytes<vramfit::group_quantized<4, 0>>(1024);
