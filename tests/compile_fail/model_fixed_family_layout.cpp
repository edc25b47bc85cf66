// GPT-2's implementation has a GELU MLP of two matrices: a SwiGLU GPT-2 is not that family.
// expect: family_has_a_fixed_layout
#include <vramfit/model.hpp>

using bad = vramfit::model_type<vramfit::model{.name = "bad",
                                               .family = vramfit::family::gpt2,
                                               .hidden = 64,
                                               .layers = 2,
                                               .heads = 4,
                                               .kv_heads = 4,
                                               .head_dim = 16,
                                               .ffn = 256,
                                               .vocab = 100,
                                               .mlp = vramfit::mlp_kind::swiglu,
                                               .norm = vramfit::norm_kind::layernorm,
                                               .positions = vramfit::position_kind::learned,
                                               .max_positions = 128}>;
constexpr auto hidden = bad::value.hidden;
