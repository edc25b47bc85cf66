// TP communication overlap chunks SP's collectives: without SP it is rejected.
// expect: tp_comm_overlap_needs_sequence_parallel
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr auto l = model_states(
    training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value, full_finetune::value,
             layout{.tensor = 8, .tp_overlap = tp_comm_overlap::userbuffers}});
