// Attention heads must be a multiple of KV heads: 32 heads cannot share 5 KV heads.
// expect: attention_heads_must_be_a_multiple_of_kv_heads
// expect: 32
#include <vramfit/model.hpp>

using bad = vramfit::model_type<vramfit::model{.name = "bad",
                                               .hidden = 4096,
                                               .layers = 32,
                                               .heads = 32,
                                               .kv_heads = 5,
                                               .head_dim = 128,
                                               .ffn = 11008,
                                               .vocab = 32000}>;
constexpr auto heads = bad::value.heads;
