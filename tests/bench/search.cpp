// Compile-time benchmark and test (compile_time.search): a layout search at compile time within
// the compilers' default constexpr limits: every ZeRO stage of DP 8 with selective recompute,
// four candidates of one memory evaluation each (about 250,000 of clang's 1,048,576 steps). With
// the recompute policy free as well, 16 candidates and partial recompute's search take 37
// evaluations, which needs about 2.5 million: raise -fconstexpr-steps for those, or search at
// run time.
#include <vramfit/layout_search.hpp>
#include <vramfit/presets.hpp>

constexpr vramfit::training_plan_value plan{
    vramfit::training{vramfit::models::llama_3_8b::value, vramfit::mixed<vramfit::bf16>::value,
                      vramfit::adamw<>::value},
    vramfit::activation_options{.sequence = 4096}};
constexpr vramfit::search_result found =
    vramfit::search_layouts(plan, vramfit::gpus::h100_80gb::value,
                            {.gpus = 8,
                             .tensor = 1,
                             .pipeline = 1,
                             .context = 1,
                             .recompute = static_cast<int>(vramfit::recompute_kind::selective)});
static_assert(found.found());
// ZeRO-1 to 3 fit and are ranked; plain data parallelism (the weights, gradients and AdamW's
// states of 8B parameters on each GPU: 16 B each, 120 GiB) does not.
static_assert(found.best.size() == 3);
static_assert(found.best[0].layout.zero != vramfit::sharding::none);
