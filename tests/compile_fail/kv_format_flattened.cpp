// A KV cache cannot be NF4: blocks over the flattened tensor cannot grow token by token.
// expect: kv_format_must_be_plain_or_scaled_per_head
#include <vramfit/inference.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
constexpr bytes kv = kv_cache_bytes(models::llama_3_8b::value, {}, {.format = nf4::value}, {});
