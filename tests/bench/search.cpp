// Compile-time benchmark: a layout search at compile time, narrowed to what fits the compilers'
// default constexpr limits (tests/bench/compile_time.sh measures clang's steps for it).
#include <vramfit/layout_search.hpp>
#include <vramfit/presets.hpp>

constexpr vramfit::training_plan_value plan{
    vramfit::training{vramfit::models::llama_3_8b::value, vramfit::mixed<vramfit::bf16>::value,
                      vramfit::adamw<>::value},
    vramfit::activation_options{.sequence = 4096}};
// Every ZeRO stage and recompute policy of DP 8 (12 layouts, one micro-batch each).
static_assert(vramfit::search_layouts(plan, vramfit::gpus::h100_80gb::value,
                                      {.gpus = 8, .tensor = 1, .pipeline = 1, .context = 1})
                  .found());
