// Uneven pipeline stages must hold every layer: 10 + 10 + 10 is not Llama-3-8B's 32.
// expect: stage_layers_must_sum_to_layers
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr memory_ledger states =
    model_states(training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
                          full_finetune::value, parallel<pipeline_parallel<3, 10, 10, 10>>::value});
