// A plan that does not fit fails to compile, naming vramfit and showing the required and the
// available bytes: Llama-3-8B fully fine-tuned with AMP on one H100 needs about 169 GB.
// expect: vramfit: the plan does not fit the GPU
// expect: 85520809984
// expect: 169[0-9]+
#include <vramfit/fit.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
using plan = training_plan<models::llama_3_8b, amp<bf16>, adamw<>, full_finetune, single_gpu,
                           activation_options{.micro_batch = 1, .sequence = 4096}>;
static_assert(check_fits<plan, gpus::h100_80gb>());
