// Control case: a correct use compiles, so a broken harness cannot pass the other cases.
// expect: compiles
#include <vramfit/vramfit.hpp>

using namespace vramfit::literals;
static_assert(vramfit::storage_bytes<vramfit::nf4_double_quant>(4096, 4096) < 80_GiB);
