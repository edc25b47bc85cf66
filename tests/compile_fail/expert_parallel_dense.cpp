// Expert parallelism needs experts: Llama-3-8B has none.
// expect: expert_parallel_needs_a_moe_model
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr auto l =
    model_states(training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
                          full_finetune::value, parallel<ddp<2>, expert_parallel<2>>::value});
