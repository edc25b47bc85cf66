// Context parallelism splits the sequence: 3 ranks cannot split 4096 tokens.
// expect: context_parallel_must_divide_sequence
#include <vramfit/activations.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
constexpr auto l =
    activations(training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
                         full_finetune::value, parallel<context_parallel<3>>::value},
                {.sequence = 4096});
