// Expert parallelism lives within data x context parallel: 4 does not divide 2.
// expect: expert_parallel_must_divide_data_times_context
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr auto l =
    model_states(training{models::mixtral_8x7b::value, pure<bf16>::value, adamw<>::value,
                          full_finetune::value, parallel<ddp<2>, expert_parallel<4>>::value});
