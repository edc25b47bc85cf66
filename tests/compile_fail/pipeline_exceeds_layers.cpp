// GPT-2's 12 layers cannot fill 16 pipeline stages.
// expect: pipeline_stages_must_not_exceed_layers
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr auto l =
    model_states(training{models::gpt2::value, pure<bf16>::value, adamw<>::value,
                          full_finetune::value, parallel<pipeline_parallel<16>>::value});
