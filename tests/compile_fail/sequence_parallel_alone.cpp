// Sequence parallelism without tensor parallelism is rejected.
// expect: sequence_parallel_needs_tensor_parallel
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr auto l =
    model_states(training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
                          full_finetune::value, layout{.sequence = true}});
