// Static tier: the extremes at compile time: exact results where int64 holds them.
#include <vramfit/inference.hpp>
#include <vramfit/presets.hpp>

namespace {
using namespace vramfit;
// A 10-million-token context with batch 65,536: 86 PB of KV cache, exact.
static_assert(kv_cache_bytes(models::llama_3_8b::value, {}, {},
                             {.batch = 65'536, .prompt = 10'000'000}) ==
              bytes{131'072LL * 10'000'000 * 65'536});
// 100,000 GPUs sharding Llama-3.1-405B's fp32 master weights: ceil(4 P / 100,000) each.
static_assert(total(model_states(training{models::llama_3_1_405b::value,
                                          mixed<bf16>::value,
                                          adamw<>::value,
                                          full_finetune::value,
                                          {.data = 100'000,
                                           .zero = sharding::zero3,
                                           .implementation = shard_implementation::paper}}),
                    component::master_weights) == bytes{16'234'136});
}  // namespace
