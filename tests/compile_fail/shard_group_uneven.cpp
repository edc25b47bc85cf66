// Hybrid sharding groups must divide the data-parallel ranks: 3 does not divide 8.
// expect: shard_group_must_divide_data_parallel
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr auto l = model_states(training{models::llama_3_8b::value, pure<bf16>::value,
                                         adamw<>::value, full_finetune::value,
                                         parallel<fsdp<8, fsdp_strategy::hybrid_shard, 3>>::value});
