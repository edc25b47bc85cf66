// A ViT image must tile into whole patches: 224 px is not a multiple of 15 px.
// expect: image_size_must_be_a_multiple_of_patch_size
#include <vramfit/model.hpp>

using bad = vramfit::model_type<vramfit::model{
    .name = "bad",
    .family = vramfit::family::vit,
    .hidden = 64,
    .layers = 2,
    .heads = 4,
    .kv_heads = 4,
    .head_dim = 16,
    .ffn = 256,
    .mlp = vramfit::mlp_kind::gelu,
    .norm = vramfit::norm_kind::layernorm,
    .bias = vramfit::bias_kind::all,
    .positions = vramfit::position_kind::learned,
    .max_positions = 197,
    .encoder = {.image_size = 224, .patch_size = 15, .channels = 3, .classes = 10}}>;
constexpr auto hidden = bad::value.hidden;
