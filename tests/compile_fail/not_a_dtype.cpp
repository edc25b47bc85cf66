// Only element formats can be stored: int is not a vramfit::Dtype.
// expect: Dtype
#include <vramfit/dtype.hpp>

constexpr vramfit::bytes b = vramfit::storage_bytes<int>(1024);
