// A request batch of zero sequences is rejected.
// expect: request_size_must_be_positive
#include <vramfit/inference.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
constexpr bytes kv = kv_cache_bytes(models::llama_3_8b::value, {}, {}, {.batch = 0});
