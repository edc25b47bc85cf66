// Extremes past int64 in a constant expression: 65,536 sequences x 1,000 beams x 10M tokens of
// KV cache overflow, and the compiler says so with the rule's name.
// expect: count_overflows_int64
#include <vramfit/inference.hpp>
#include <vramfit/presets.hpp>

constexpr vramfit::bytes kv =
    vramfit::kv_cache_bytes(vramfit::models::llama_3_8b::value, {}, {},
                            {.batch = 65'536, .beams = 1000, .prompt = 10'000'000});
