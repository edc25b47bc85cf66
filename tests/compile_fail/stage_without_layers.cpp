// Every pipeline stage holds at least one layer: 32 + 0 is rejected.
// expect: every_stage_needs_a_layer
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr auto l =
    model_states(training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
                          full_finetune::value, parallel<pipeline_parallel<2, 32, 0>>::value});
