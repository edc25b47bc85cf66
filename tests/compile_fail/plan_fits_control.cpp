// Control case for the fit check: the same model as QLoRA on one H100 fits and compiles.
// expect: compiles
#include <vramfit/fit.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
using plan = training_plan<models::llama_3_8b, pure<bf16>, adamw<>, qlora<16>, single_gpu,
                           activation_options{.micro_batch = 1, .sequence = 4096}>;
static_assert(check_fits<plan, gpus::h100_80gb>());
