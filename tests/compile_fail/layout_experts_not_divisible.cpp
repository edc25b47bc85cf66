// Expert parallelism hands out whole experts: 3 ranks cannot share Mixtral's 8.
// expect: expert_parallel_must_divide_experts
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr memory_ledger states =
    model_states(training{models::mixtral_8x7b::value, pure<bf16>::value, adamw<>::value,
                          full_finetune::value, parallel<ddp<3>, expert_parallel<3>>::value});
