// Static tier: a layout search at compile time, within the compilers' default constexpr limits
// (clang's 1,048,576 steps is the tight one; tests/bench measures it).
#include <vramfit/planner.hpp>
#include <vramfit/presets.hpp>

namespace {
using namespace vramfit;

constexpr training_plan_value plan{
    training{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value},
    activation_options{.micro_batch = 2, .sequence = 4096}};
constexpr search_result found = search_layouts(plan, gpus::h100_80gb::value, {.gpus = 8});
static_assert(found.chosen >= 0);
static_assert(found.candidates[static_cast<std::size_t>(found.chosen)].required <=
              gpus::h100_80gb::value.capacity);
}  // namespace
