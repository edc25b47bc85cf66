// Sizes must be positive: a model with zero layers is rejected with the field named.
// expect: model_size_must_be_positive
#include <vramfit/model.hpp>

using bad = vramfit::model_type<vramfit::model{.name = "bad",
                                               .hidden = 4096,
                                               .layers = 0,
                                               .heads = 32,
                                               .kv_heads = 32,
                                               .head_dim = 128,
                                               .ffn = 11008,
                                               .vocab = 32000}>;
constexpr auto layers = bad::value.layers;
