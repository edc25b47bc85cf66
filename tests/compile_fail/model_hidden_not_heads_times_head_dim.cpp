// GPT-2's fused c_attn needs hidden = heads x head_dim: 768 is not 12 x 32.
// expect: hidden_must_equal_heads_times_head_dim
#include <vramfit/model.hpp>

using bad = vramfit::model_type<vramfit::model{.name = "bad",
                                               .family = vramfit::family::gpt2,
                                               .hidden = 768,
                                               .layers = 2,
                                               .heads = 12,
                                               .kv_heads = 12,
                                               .head_dim = 32,
                                               .ffn = 3072,
                                               .vocab = 100,
                                               .mlp = vramfit::mlp_kind::gelu,
                                               .norm = vramfit::norm_kind::layernorm,
                                               .bias = vramfit::bias_kind::all,
                                               .positions = vramfit::position_kind::learned,
                                               .max_positions = 128}>;
constexpr auto hidden = bad::value.hidden;
