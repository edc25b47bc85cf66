// A ViT's position table holds the patches and the class token: 196 of 197 is rejected.
// expect: vit_positions_must_be_patches_plus_class_token
#include <vramfit/model.hpp>

using namespace vramfit;
using bad = model_type<model{
    .name = "vit",
    .family = family::vit,
    .hidden = 64,
    .layers = 2,
    .heads = 4,
    .kv_heads = 4,
    .head_dim = 16,
    .ffn = 256,
    .mlp = mlp_kind::gelu,
    .norm = norm_kind::layernorm,
    .bias = bias_kind::all,
    .positions = position_kind::learned,
    .max_positions = 196,
    .encoder = {.image_size = 224, .patch_size = 16, .channels = 3, .classes = 10}}>;
constexpr auto positions = bad::value.max_positions;
