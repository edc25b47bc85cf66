// A tensor of 0 rows has no storage: the request is an error.
// expect: tensor_shape_must_be_positive
#include <vramfit/dtype.hpp>

using namespace vramfit;
constexpr bytes b = storage_bytes<bf16>(0, 4);
