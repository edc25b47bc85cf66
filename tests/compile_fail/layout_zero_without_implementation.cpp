// A ZeRO stage's bytes are its implementation's: a layout that shards names whose (zero<S, N> is
// DeepSpeed's, as the CLI's --zero), rather than defaulting to another behind the same words.
// expect: sharding_must_name_its_implementation
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr memory_ledger states =
    model_states(training{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value,
                          full_finetune::value, layout{.data = 8, .zero = sharding::zero3}});
