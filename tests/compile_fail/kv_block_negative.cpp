// Paged KV blocks have a non-negative size.
// expect: kv_block_must_not_be_negative
#include <vramfit/inference.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
constexpr bytes kv = kv_cache_bytes(models::llama_3_8b::value, {}, {.block_tokens = -16}, {});
