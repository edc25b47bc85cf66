// SPDX-License-Identifier: MIT
// Presets for real models: each a type (`vramfit::models::llama_3_8b`) whose value is checked at
// compile time, and a run-time list of them by key. Parameter counts are tested against the
// official integers (tests/unit/presets_test.cpp); architectures follow each model's config.json.
#pragma once

#include <string_view>

#include "model.hpp"

namespace vramfit {
namespace detail {
constexpr model gpt2_preset(const char* name, std::int64_t hidden, std::int64_t layers,
                            std::int64_t heads) {
  model m = classic_block(family::gpt2);
  m.hidden = hidden;
  m.layers = layers;
  m.heads = m.kv_heads = heads;
  m.head_dim = hidden / heads;
  m.ffn = 4 * hidden;
  m.vocab = 50257;
  m.tied_embeddings = true;
  m.max_positions = 1024;
  m.dropout = true;
  m.gelu_in_python = true;
  copy_name(m.name, name);
  return m;
}

/// BERT's encoder has GPT-2's block shapes (GELU MLP of 4 x hidden, LayerNorm, biases, learned
/// positions, tied head); it adds token types and a pooler.
constexpr model bert_preset(const char* name, std::int64_t hidden, std::int64_t layers,
                            std::int64_t heads) {
  model m = gpt2_preset(name, hidden, layers, heads);
  m.family = family::bert;
  m.gelu_in_python = false;  // BertConfig hidden_act "gelu": the fused F.gelu
  m.vocab = 30522;
  m.max_positions = 512;
  m.encoder = {.token_types = 2, .pooler = true};
  return m;
}

/// A Llama-style decoder: SwiGLU, RMSNorm, rotary, no biases, untied, head_dim 128.
constexpr model llama_preset(const char* name, std::int64_t hidden, std::int64_t layers,
                             std::int64_t heads, std::int64_t kv_heads, std::int64_t ffn,
                             std::int64_t vocab) {
  model m{.hidden = hidden,
          .layers = layers,
          .heads = heads,
          .kv_heads = kv_heads,
          .head_dim = 128,
          .ffn = ffn,
          .vocab = vocab};
  copy_name(m.name, name);
  return m;
}

template <class Edit>
constexpr model edited(model m, Edit edit) {
  edit(m);
  return m;
}
}  // namespace detail

namespace models {
// clang-format off
// GPT-2 (openai-community/gpt2*): keras-hub gpt2 presets 124,439,808 / 354,823,168 / 774,030,080 /
// 1,557,611,200.
struct gpt2 : model_type<detail::gpt2_preset("GPT-2 (124M)", 768, 12, 12)> {};
struct gpt2_medium : model_type<detail::gpt2_preset("GPT-2 Medium (355M)", 1024, 24, 16)> {};
struct gpt2_large : model_type<detail::gpt2_preset("GPT-2 Large (774M)", 1280, 36, 20)> {};
struct gpt2_xl : model_type<detail::gpt2_preset("GPT-2 XL (1.5B)", 1600, 48, 25)> {};

// Llama 2 (meta-llama/Llama-2-*-hf); their safetensors also hold each layer's rotary inv_freq.
struct llama_2_7b : model_type<detail::edited(detail::llama_preset("Llama-2-7B", 4096, 32, 32, 32, 11008, 32000),
    [](model& m) { m.checkpoint_rotary_buffers = true; })> {};
struct llama_2_13b : model_type<detail::edited(detail::llama_preset("Llama-2-13B", 5120, 40, 40, 40, 13824, 32000),
    [](model& m) { m.checkpoint_rotary_buffers = true; })> {};
struct llama_2_70b : model_type<detail::edited(detail::llama_preset("Llama-2-70B", 8192, 80, 64, 8, 28672, 32000),
    [](model& m) { m.checkpoint_rotary_buffers = true; })> {};

// Llama 3 / 3.1 (meta-llama/Meta-Llama-3-8B, Llama-3.1-70B, Llama-3.1-405B).
struct llama_3_8b : model_type<detail::llama_preset("Llama-3-8B", 4096, 32, 32, 8, 14336, 128256)> {};
struct llama_3_70b : model_type<detail::llama_preset("Llama-3-70B", 8192, 80, 64, 8, 28672, 128256)> {};
struct llama_3_1_405b : model_type<detail::llama_preset("Llama-3.1-405B", 16384, 126, 128, 8, 53248, 128256)> {};

// Mistral and Mixtral (mistralai/Mistral-7B-v0.1, Mixtral-8x7B-v0.1, Mixtral-8x22B-v0.1).
struct mistral_7b : model_type<detail::edited(detail::llama_preset("Mistral-7B-v0.1", 4096, 32, 32, 8, 14336, 32000),
    [](model& m) { m.sliding_window = 4096; })> {};
struct mixtral_8x7b : model_type<detail::edited(detail::llama_preset("Mixtral-8x7B-v0.1", 4096, 32, 32, 8, 14336, 32000),
    [](model& m) { m.moe = {.routed_experts = 8, .top_k = 2, .expert_ffn = 14336}; })> {};
struct mixtral_8x22b : model_type<detail::edited(detail::llama_preset("Mixtral-8x22B-v0.1", 6144, 56, 48, 8, 16384, 32000),
    [](model& m) { m.moe = {.routed_experts = 8, .top_k = 2, .expert_ffn = 16384}; })> {};

// Qwen2.5 (Qwen/Qwen2.5-*): Q, K and V biases; the 0.5B ties its embeddings.
struct qwen2_5_0_5b : model_type<detail::edited(detail::llama_preset("Qwen2.5-0.5B", 896, 24, 14, 2, 4864, 151936),
    [](model& m) { m.head_dim = 64; m.bias = bias_kind::qkv; m.tied_embeddings = true; })> {};
struct qwen2_5_7b : model_type<detail::edited(detail::llama_preset("Qwen2.5-7B", 3584, 28, 28, 4, 18944, 152064),
    [](model& m) { m.bias = bias_kind::qkv; })> {};
struct qwen2_5_72b : model_type<detail::edited(detail::llama_preset("Qwen2.5-72B", 8192, 80, 64, 8, 29568, 152064),
    [](model& m) { m.bias = bias_kind::qkv; })> {};

// Qwen3 (Qwen/Qwen3-0.6B, Qwen3-8B, Qwen3-30B-A3B): per-head q_norm and k_norm, head_dim 128, no
// biases; the 0.6B ties its embeddings; the 30B-A3B routes every layer to 8 of 128 experts.
struct qwen3_0_6b : model_type<detail::edited(detail::llama_preset("Qwen3-0.6B", 1024, 28, 16, 8, 3072, 151936),
    [](model& m) { m.qk_norm = true; m.tied_embeddings = true; })> {};
struct qwen3_8b : model_type<detail::edited(detail::llama_preset("Qwen3-8B", 4096, 36, 32, 8, 12288, 151936),
    [](model& m) { m.qk_norm = true; })> {};
struct qwen3_30b_a3b : model_type<detail::edited(detail::llama_preset("Qwen3-30B-A3B", 2048, 48, 32, 4, 6144, 151936),
    [](model& m) {
      m.qk_norm = true;
      m.moe = {.routed_experts = 128, .top_k = 8, .expert_ffn = 768, .layout = moe_layout::mlp_experts};
    })> {};

// Gemma 2 (google/gemma-2-*): GeGLU, four RMSNorms per layer, tied, sliding window on every other
// layer.
constexpr auto gemma2 = [](model& m) {
  m.mlp = mlp_kind::geglu; m.norms_per_layer = 4; m.tied_embeddings = true;
  m.sliding_window = 4096; m.sliding_window_period = 2;
};
struct gemma_2_2b : model_type<detail::edited(detail::llama_preset("Gemma-2-2B", 2304, 26, 8, 4, 9216, 256000),
    [](model& m) { gemma2(m); m.head_dim = 256; })> {};
struct gemma_2_9b : model_type<detail::edited(detail::llama_preset("Gemma-2-9B", 3584, 42, 16, 8, 14336, 256000),
    [](model& m) { gemma2(m); m.head_dim = 256; })> {};
struct gemma_2_27b : model_type<detail::edited(detail::llama_preset("Gemma-2-27B", 4608, 46, 32, 16, 36864, 256000),
    gemma2)> {};

// Phi-3-mini (microsoft/Phi-3-mini-4k-instruct): fused qkv_proj and gate_up_proj.
struct phi_3_mini : model_type<detail::edited(detail::llama_preset("Phi-3-mini", 3072, 32, 32, 32, 8192, 32064),
    [](model& m) { m.family = family::phi3; m.head_dim = 96; m.sliding_window = 2047; })> {};

// Falcon-7B (tiiuae/falcon-7b): multi-query attention, parallel attention + MLP, tied, no biases.
struct falcon_7b : model_type<detail::edited(detail::gpt2_preset("Falcon-7B", 4544, 32, 71),
    [](model& m) {
      m.family = family::falcon; m.kv_heads = 1; m.vocab = 65024; m.bias = bias_kind::none;
      m.norms_per_layer = 1; m.parallel_block = true; m.positions = position_kind::rotary;
      m.max_positions = 0; m.dropout = false; m.gelu_in_python = false;  // nn.GELU
    })> {};

// DeepSeek-V3 and V2 (deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json, config_236B.json):
// MLA and DeepSeekMoE; V3 without its multi-token-prediction module.
struct deepseek_v3 : model_type<detail::edited(detail::llama_preset("DeepSeek-V3", 7168, 61, 128, 128, 18432, 129280),
    [](model& m) {
      m.head_dim = 64;
      m.moe = {.routed_experts = 256, .top_k = 8, .shared_experts = 1, .expert_ffn = 2048,
               .first_dense_layers = 3, .router_score_bias = true};
      m.mla = {.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
               .qk_rope_head_dim = 64, .v_head_dim = 128};
    })> {};
struct deepseek_v2 : model_type<detail::edited(detail::llama_preset("DeepSeek-V2", 5120, 60, 128, 128, 12288, 102400),
    [](model& m) {
      m.head_dim = 64;
      m.moe = {.routed_experts = 160, .top_k = 6, .shared_experts = 2, .expert_ffn = 1536,
               .first_dense_layers = 1};
      m.mla = {.q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_head_dim = 128,
               .qk_rope_head_dim = 64, .v_head_dim = 128};
    })> {};

// gpt-oss (openai/gpt-oss-20b, gpt-oss-120b): Q, K, V and O biases, one attention sink per head,
// a 128-token window on every other layer from layer 0, every layer 4 experts of 32 or 128 with
// biases and a router with a bias.
constexpr auto gpt_oss = [](model& m) {
  m.head_dim = 64; m.bias = bias_kind::attention; m.attention_sinks = true;
  m.sliding_window = 128; m.sliding_window_period = 2;
};
struct gpt_oss_20b : model_type<detail::edited(detail::llama_preset("gpt-oss-20b", 2880, 24, 64, 8, 2880, 201088),
    [](model& m) {
      gpt_oss(m);
      m.moe = {.routed_experts = 32, .top_k = 4, .expert_ffn = 2880, .layout = moe_layout::gpt_oss};
    })> {};
struct gpt_oss_120b : model_type<detail::edited(detail::llama_preset("gpt-oss-120b", 2880, 36, 64, 8, 2880, 201088),
    [](model& m) {
      gpt_oss(m);
      m.moe = {.routed_experts = 128, .top_k = 4, .expert_ffn = 2880, .layout = moe_layout::gpt_oss};
    })> {};

// BERT (google-bert/bert-*-uncased) as BertModel, with the pooler.
struct bert_base_uncased : model_type<detail::bert_preset("BERT-base-uncased", 768, 12, 12)> {};
struct bert_large_uncased : model_type<detail::bert_preset("BERT-large-uncased", 1024, 24, 16)> {};

// DistilBERT (distilbert/distilbert-base-uncased) as DistilBertModel: BERT-base's block in 6
// layers, no token types, no pooler.
struct distilbert_base_uncased : model_type<detail::edited(detail::bert_preset("DistilBERT-base-uncased", 768, 6, 12),
    [](model& m) { m.family = family::distilbert; m.encoder = {}; })> {};

// ViT-L/16 (torchvision vit_l_16): 224 px images, 16 px patches, 1000 classes.
struct vit_l_16 : model_type<detail::edited(detail::bert_preset("ViT-L/16", 1024, 24, 16),
    [](model& m) {
      m.family = family::vit; m.vocab = 0; m.max_positions = 197; m.tied_embeddings = false;
      m.dropout = false;
      m.encoder = {.image_size = 224, .patch_size = 16, .channels = 3, .classes = 1000};
    })> {};
// clang-format on
}  // namespace models

/// A preset by its command-line key.
struct preset {
  const char* key;
  model value;
};

/// Every preset, in the order of the documentation.
inline constexpr preset presets[] = {
    {"gpt2", models::gpt2::value},
    {"gpt2-medium", models::gpt2_medium::value},
    {"gpt2-large", models::gpt2_large::value},
    {"gpt2-xl", models::gpt2_xl::value},
    {"llama-2-7b", models::llama_2_7b::value},
    {"llama-2-13b", models::llama_2_13b::value},
    {"llama-2-70b", models::llama_2_70b::value},
    {"llama-3-8b", models::llama_3_8b::value},
    {"llama-3-70b", models::llama_3_70b::value},
    {"llama-3.1-405b", models::llama_3_1_405b::value},
    {"mistral-7b", models::mistral_7b::value},
    {"mixtral-8x7b", models::mixtral_8x7b::value},
    {"mixtral-8x22b", models::mixtral_8x22b::value},
    {"qwen2.5-0.5b", models::qwen2_5_0_5b::value},
    {"qwen2.5-7b", models::qwen2_5_7b::value},
    {"qwen2.5-72b", models::qwen2_5_72b::value},
    {"qwen3-0.6b", models::qwen3_0_6b::value},
    {"qwen3-8b", models::qwen3_8b::value},
    {"qwen3-30b-a3b", models::qwen3_30b_a3b::value},
    {"gemma-2-2b", models::gemma_2_2b::value},
    {"gemma-2-9b", models::gemma_2_9b::value},
    {"gemma-2-27b", models::gemma_2_27b::value},
    {"phi-3-mini", models::phi_3_mini::value},
    {"falcon-7b", models::falcon_7b::value},
    {"deepseek-v3", models::deepseek_v3::value},
    {"deepseek-v2", models::deepseek_v2::value},
    {"gpt-oss-20b", models::gpt_oss_20b::value},
    {"gpt-oss-120b", models::gpt_oss_120b::value},
    {"bert-base-uncased", models::bert_base_uncased::value},
    {"bert-large-uncased", models::bert_large_uncased::value},
    {"distilbert-base-uncased", models::distilbert_base_uncased::value},
    {"vit-l-16", models::vit_l_16::value},
};

/// The preset named `key`, or nullptr.
constexpr const model* find_preset(std::string_view key) {
  for (const preset& p : presets)
    if (key == p.key) return &p.value;
  return nullptr;
}

}  // namespace vramfit
