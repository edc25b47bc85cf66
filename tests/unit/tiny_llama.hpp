// SPDX-License-Identifier: MIT
// A Llama small enough to count by hand, shared by the ledger and optimizer tests.
#pragma once

#include <cstdint>
#include <vramfit/model.hpp>

namespace vramfit::testing {
// Hidden 8, 2 layers, 4 heads of 2 with 2 KV heads, FFN 16, vocab 10, untied. Embedding [10, 8];
// per layer 2 norms [8], q [8, 8], k and v [4, 8], o [8, 8], gate and up [16, 8], down [8, 16];
// final norm [8]; head [10, 8].
constexpr model tiny_llama{.name = "tiny-llama",
                           .hidden = 8,
                           .layers = 2,
                           .heads = 4,
                           .kv_heads = 2,
                           .head_dim = 2,
                           .ffn = 16,
                           .vocab = 10};
constexpr std::int64_t tiny_llama_layer_parameters =
    8 + 8 + 64 + 32 + 32 + 64 + 128 + 128 + 128;  // 592
constexpr std::int64_t tiny_llama_parameters = 80 + 2 * tiny_llama_layer_parameters + 8 + 80;
constexpr std::int64_t tiny_llama_tensors = 1 + 2 * 9 + 1 + 1;
}  // namespace vramfit::testing
