// A token cannot be routed to more experts than there are: top-k 3 of 2 experts.
// expect: top_k_must_be_between_1_and_routed_experts
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
    .moe = {.routed_experts = 2, .top_k = 3, .expert_ffn = 128}}>;
constexpr auto experts = bad::value.moe.routed_experts;
