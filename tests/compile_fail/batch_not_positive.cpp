// A micro-batch of zero sequences is rejected.
// expect: batch_shape_must_be_positive
#include <vramfit/activations.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
constexpr auto l = activations(
    training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value}, {.micro_batch = 0});
