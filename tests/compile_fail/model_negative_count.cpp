// Counts of a model are not negative: a sliding window of -1 is rejected.
// expect: model_count_must_not_be_negative
#include <vramfit/model.hpp>

using namespace vramfit;
using bad = model_type<model{.name = "bad",
                             .hidden = 64,
                             .layers = 2,
                             .heads = 4,
                             .kv_heads = 4,
                             .head_dim = 16,
                             .ffn = 128,
                             .vocab = 100,
                             .sliding_window = -1}>;
constexpr auto window = bad::value.sliding_window;
