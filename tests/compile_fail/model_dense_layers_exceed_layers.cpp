// MoE models' dense-first layers cannot outnumber the layers.
// expect: dense_layers_must_not_exceed_layers
#include <vramfit/model.hpp>

using bad = vramfit::model_type<vramfit::model{
    .name = "bad",
    .hidden = 64,
    .layers = 2,
    .heads = 4,
    .kv_heads = 4,
    .head_dim = 16,
    .ffn = 128,
    .vocab = 100,
    .moe = {.routed_experts = 4, .top_k = 2, .expert_ffn = 64, .first_dense_layers = 3}}>;
constexpr auto experts = bad::value.moe.routed_experts;
