// Parallel degrees are positive: a tensor-parallel degree of 0 is rejected.
// expect: parallel_degree_must_be_positive
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr auto l =
    model_states(training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
                          full_finetune::value, layout{.tensor = 0}});
