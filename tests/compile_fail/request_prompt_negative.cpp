// A prompt of -1 tokens is rejected.
// expect: request_size_must_not_be_negative
#include <vramfit/inference.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
constexpr bytes kv = kv_cache_bytes(models::llama_3_8b::value, {}, {}, {.prompt = -1});
