// A layer has 1 to 4 norms (Falcon 1, Llama 2, Gemma 2 four): 5 is rejected.
// expect: norms_per_layer_must_be_1_to_4
#include <vramfit/model.hpp>

using bad = vramfit::model_type<vramfit::model{.name = "bad",
                                               .hidden = 64,
                                               .layers = 2,
                                               .heads = 4,
                                               .kv_heads = 4,
                                               .head_dim = 16,
                                               .ffn = 128,
                                               .vocab = 100,
                                               .norms_per_layer = 5}>;
constexpr auto hidden = bad::value.hidden;
