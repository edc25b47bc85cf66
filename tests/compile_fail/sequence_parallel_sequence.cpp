// Sequence parallelism splits the sequence over the tensor ranks: 8 does not divide 4100.
// expect: sequence_parallel_must_divide_sequence
#include <vramfit/activations.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
constexpr auto l =
    activations(training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
                         full_finetune::value, parallel<tensor_parallel<8, true>>::value},
                {.sequence = 4100});
