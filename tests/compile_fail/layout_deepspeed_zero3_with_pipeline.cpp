// DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3.
// expect: deepspeed_forbids_zero2_or_3_with_pipeline_parallel
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr memory_ledger states =
    model_states(training{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value,
                          full_finetune::value, parallel<zero<3, 8>, pipeline_parallel<2>>::value});
