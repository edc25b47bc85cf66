// Compile-time benchmark: the umbrella header and one training plan checked by static_assert.
#include <vramfit/vramfit.hpp>

using plan = vramfit::training_plan<
    vramfit::models::llama_3_8b, vramfit::mixed<vramfit::bf16>, vramfit::adamw<>,
    vramfit::full_finetune, vramfit::parallel<vramfit::fsdp<8>>,
    vramfit::activation_options{
        .micro_batch = 2, .sequence = 4096, .recompute = vramfit::recompute_kind::full}>;
static_assert(vramfit::check_fits<plan, vramfit::gpus::h100_80gb>());
