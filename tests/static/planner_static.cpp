// Static tier: a layout search at compile time, within the compilers' default constexpr limits.
// Each memory evaluation costs clang about 40,000 of its 1,048,576 default steps, so a
// static_assert'ed search narrows the space to a few evaluations (docs/planner.md).
#include <vramfit/layout_search.hpp>
#include <vramfit/presets.hpp>

namespace {
using namespace vramfit;

constexpr training_plan_value plan{
    training{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value},
    activation_options{.sequence = 4096}};
// FSDP-style ZeRO-3 over 8 GPUs, any micro-batch of the 8-sequence global batch, full recompute.
constexpr search_result found = search_layouts(
    plan, gpus::h100_80gb::value,
    {.gpus = 8, .tensor = 1, .pipeline = 1, .context = 1, .zero = 3, .recompute = 2});
static_assert(found.found());
static_assert(found.best[0].required <= gpus::h100_80gb::value.capacity);
static_assert(found.best[0].layout.data == 8 && found.best[0].micro_batch == 1);
}  // namespace
