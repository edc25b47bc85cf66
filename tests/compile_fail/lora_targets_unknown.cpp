// LoRA targets must name weights of the model: Llama has no w1.
// expect: lora_targets_match_no_weight
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr auto l = model_states(
    training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value, lora<8, "w1">::value});
