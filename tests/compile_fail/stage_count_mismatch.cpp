// Three stage layer counts for a pipeline of two stages are rejected.
// expect: stage_layers_must_match_pipeline_degree
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr layout three_for_two = [] {
  layout l{.pipeline = 2};
  for (int i = 0; i < 3; ++i) l.stage_layers.push_back(10);
  return l;
}();
constexpr auto l = model_states(training{models::llama_3_8b::value, pure<bf16>::value,
                                         adamw<>::value, full_finetune::value, three_for_two});
