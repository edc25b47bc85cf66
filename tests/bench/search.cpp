// Compile-time benchmark: a layout search over 8 GPUs for Llama-3-8B, at compile time.
#include <vramfit/planner.hpp>
#include <vramfit/presets.hpp>

constexpr vramfit::training_plan_value plan{
    vramfit::training{vramfit::models::llama_3_8b::value, vramfit::mixed<vramfit::bf16>::value,
                      vramfit::adamw<>::value},
    vramfit::activation_options{.micro_batch = 2, .sequence = 4096}};
static_assert(vramfit::search_layouts(plan, vramfit::gpus::h100_80gb::value, {.gpus = 8}).chosen >=
              0);
