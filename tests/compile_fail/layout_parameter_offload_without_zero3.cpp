// Offloading parameters needs them sharded first (ZeRO-3).
// expect: parameter_offload_needs_zero3
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr memory_ledger states = model_states(
    training{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value, full_finetune::value,
             parallel<zero<2, 8>, offload<offload_target::cpu, offload_target::cpu>>::value});
