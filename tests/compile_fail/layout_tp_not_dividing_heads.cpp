// Tensor parallelism splits whole attention heads: 3 ranks cannot split Llama-3-8B's 32 heads.
// expect: tensor_parallel_must_divide_attention_heads
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr memory_ledger states =
    model_states(training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
                          full_finetune::value, parallel<tensor_parallel<3>>::value});
