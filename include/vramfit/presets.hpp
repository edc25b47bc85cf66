// SPDX-License-Identifier: MIT
// Presets for real models: each a type (`vramfit::models::llama_3_8b`) whose value is checked at
// compile time, and a run-time list of them by key. Parameter counts are tested against the
// official integers (tests/unit/presets_test.cpp); architectures follow each model's config.json.
#pragma once

#include <string_view>

#include "model.hpp"

namespace vramfit {
namespace detail {
/// The sizes that set a GPT-2 or BERT block; the rest of the block follows from them.
struct classic_shape {
  const char* name;
  std::int64_t hidden;
  std::int64_t layers;
  std::int64_t heads;
};

constexpr model gpt2_preset(classic_shape s) {
  model m = classic_block(family::gpt2);
  m.hidden = s.hidden;
  m.layers = s.layers;
  m.heads = m.kv_heads = s.heads;
  m.head_dim = s.hidden / s.heads;
  m.ffn = 4 * s.hidden;
  m.vocab = 50257;
  m.tied_embeddings = true;
  m.max_positions = 1024;
  m.dropout = true;
  m.gelu_in_python = true;
  copy_name(m.name, s.name);
  copy_name(m.hf_model_type, "gpt2");
  return m;
}

/// BERT's encoder has GPT-2's block shapes (GELU MLP of 4 x hidden, LayerNorm, biases, learned
/// positions, tied head); it adds token types and a pooler.
constexpr model bert_preset(classic_shape s) {
  model m = gpt2_preset(s);
  m.family = family::bert;
  copy_name(m.hf_model_type, "bert");
  m.gelu_in_python = false;  // BertConfig hidden_act "gelu": the fused F.gelu
  m.vocab = 30522;
  m.max_positions = 512;
  m.encoder = {.token_types = 2, .pooler = true};
  return m;
}
}  // namespace detail

namespace models {
// Each preset's fields as its config.json states them; what is left out keeps model's default, the
// Llama layout (SwiGLU, RMSNorm, rotary, no biases, untied).

// GPT-2 (openai-community/gpt2*): keras-hub gpt2 presets 124,439,808 / 354,823,168 / 774,030,080 /
// 1,557,611,200.
struct gpt2 : model_type<detail::gpt2_preset(
                  {.name = "GPT-2 (124M)", .hidden = 768, .layers = 12, .heads = 12})> {};
struct gpt2_medium
    : model_type<detail::gpt2_preset(
          {.name = "GPT-2 Medium (355M)", .hidden = 1024, .layers = 24, .heads = 16})> {};
struct gpt2_large
    : model_type<detail::gpt2_preset(
          {.name = "GPT-2 Large (774M)", .hidden = 1280, .layers = 36, .heads = 20})> {};
struct gpt2_xl : model_type<detail::gpt2_preset(
                     {.name = "GPT-2 XL (1.5B)", .hidden = 1600, .layers = 48, .heads = 25})> {};

// Llama 2 (meta-llama/Llama-2-*-hf); their safetensors also hold each layer's rotary inv_freq.
struct llama_2_7b : model_type<model{.name = "Llama-2-7B",
                                     .hf_model_type = "llama",
                                     .hidden = 4096,
                                     .layers = 32,
                                     .heads = 32,
                                     .kv_heads = 32,
                                     .head_dim = 128,
                                     .ffn = 11008,
                                     .vocab = 32000,
                                     .checkpoint_rotary_buffers = true}> {};
struct llama_2_13b : model_type<model{.name = "Llama-2-13B",
                                      .hf_model_type = "llama",
                                      .hidden = 5120,
                                      .layers = 40,
                                      .heads = 40,
                                      .kv_heads = 40,
                                      .head_dim = 128,
                                      .ffn = 13824,
                                      .vocab = 32000,
                                      .checkpoint_rotary_buffers = true}> {};
struct llama_2_70b : model_type<model{.name = "Llama-2-70B",
                                      .hf_model_type = "llama",
                                      .hidden = 8192,
                                      .layers = 80,
                                      .heads = 64,
                                      .kv_heads = 8,
                                      .head_dim = 128,
                                      .ffn = 28672,
                                      .vocab = 32000,
                                      .checkpoint_rotary_buffers = true}> {};

// Llama 3 / 3.1 (meta-llama/Meta-Llama-3-8B, Llama-3.1-70B, Llama-3.1-405B).
struct llama_3_8b : model_type<model{.name = "Llama-3-8B",
                                     .hf_model_type = "llama",
                                     .hidden = 4096,
                                     .layers = 32,
                                     .heads = 32,
                                     .kv_heads = 8,
                                     .head_dim = 128,
                                     .ffn = 14336,
                                     .vocab = 128256}> {};
struct llama_3_70b : model_type<model{.name = "Llama-3-70B",
                                      .hf_model_type = "llama",
                                      .hidden = 8192,
                                      .layers = 80,
                                      .heads = 64,
                                      .kv_heads = 8,
                                      .head_dim = 128,
                                      .ffn = 28672,
                                      .vocab = 128256}> {};
struct llama_3_1_405b : model_type<model{.name = "Llama-3.1-405B",
                                         .hf_model_type = "llama",
                                         .hidden = 16384,
                                         .layers = 126,
                                         .heads = 128,
                                         .kv_heads = 8,
                                         .head_dim = 128,
                                         .ffn = 53248,
                                         .vocab = 128256}> {};

// Mistral and Mixtral (mistralai/Mistral-7B-v0.1, Mixtral-8x7B-v0.1, Mixtral-8x22B-v0.1).
struct mistral_7b : model_type<model{.name = "Mistral-7B-v0.1",
                                     .hf_model_type = "mistral",
                                     .hidden = 4096,
                                     .layers = 32,
                                     .heads = 32,
                                     .kv_heads = 8,
                                     .head_dim = 128,
                                     .ffn = 14336,
                                     .vocab = 32000,
                                     .sliding_window = 4096}> {};
struct mixtral_8x7b
    : model_type<model{.name = "Mixtral-8x7B-v0.1",
                       .hf_model_type = "mixtral",
                       .hidden = 4096,
                       .layers = 32,
                       .heads = 32,
                       .kv_heads = 8,
                       .head_dim = 128,
                       .ffn = 14336,
                       .vocab = 32000,
                       .moe = {.routed_experts = 8, .top_k = 2, .expert_ffn = 14336}}> {};
struct mixtral_8x22b
    : model_type<model{.name = "Mixtral-8x22B-v0.1",
                       .hf_model_type = "mixtral",
                       .hidden = 6144,
                       .layers = 56,
                       .heads = 48,
                       .kv_heads = 8,
                       .head_dim = 128,
                       .ffn = 16384,
                       .vocab = 32000,
                       .moe = {.routed_experts = 8, .top_k = 2, .expert_ffn = 16384}}> {};

// Qwen2.5 (Qwen/Qwen2.5-*): Q, K and V biases; the 0.5B ties its embeddings.
struct qwen2_5_0_5b : model_type<model{.name = "Qwen2.5-0.5B",
                                       .hf_model_type = "qwen2",
                                       .hidden = 896,
                                       .layers = 24,
                                       .heads = 14,
                                       .kv_heads = 2,
                                       .head_dim = 64,
                                       .ffn = 4864,
                                       .vocab = 151936,
                                       .bias = bias_kind::qkv,
                                       .tied_embeddings = true}> {};
struct qwen2_5_7b : model_type<model{.name = "Qwen2.5-7B",
                                     .hf_model_type = "qwen2",
                                     .hidden = 3584,
                                     .layers = 28,
                                     .heads = 28,
                                     .kv_heads = 4,
                                     .head_dim = 128,
                                     .ffn = 18944,
                                     .vocab = 152064,
                                     .bias = bias_kind::qkv}> {};
struct qwen2_5_72b : model_type<model{.name = "Qwen2.5-72B",
                                      .hf_model_type = "qwen2",
                                      .hidden = 8192,
                                      .layers = 80,
                                      .heads = 64,
                                      .kv_heads = 8,
                                      .head_dim = 128,
                                      .ffn = 29568,
                                      .vocab = 152064,
                                      .bias = bias_kind::qkv}> {};

// Qwen3 (Qwen/Qwen3-0.6B, Qwen3-8B, Qwen3-30B-A3B): per-head q_norm and k_norm, head_dim 128, no
// biases; the 0.6B ties its embeddings; the 30B-A3B routes every layer to 8 of 128 experts.
struct qwen3_0_6b : model_type<model{.name = "Qwen3-0.6B",
                                     .hf_model_type = "qwen3",
                                     .hidden = 1024,
                                     .layers = 28,
                                     .heads = 16,
                                     .kv_heads = 8,
                                     .head_dim = 128,
                                     .ffn = 3072,
                                     .vocab = 151936,
                                     .tied_embeddings = true,
                                     .qk_norm = true}> {};
struct qwen3_8b : model_type<model{.name = "Qwen3-8B",
                                   .hf_model_type = "qwen3",
                                   .hidden = 4096,
                                   .layers = 36,
                                   .heads = 32,
                                   .kv_heads = 8,
                                   .head_dim = 128,
                                   .ffn = 12288,
                                   .vocab = 151936,
                                   .qk_norm = true}> {};
struct qwen3_30b_a3b : model_type<model{.name = "Qwen3-30B-A3B",
                                        .hf_model_type = "qwen3_moe",
                                        .hidden = 2048,
                                        .layers = 48,
                                        .heads = 32,
                                        .kv_heads = 4,
                                        .head_dim = 128,
                                        .ffn = 6144,
                                        .vocab = 151936,
                                        .moe = {.routed_experts = 128,
                                                .top_k = 8,
                                                .expert_ffn = 768,
                                                .layout = moe_layout::mlp_experts},
                                        .qk_norm = true}> {};

// Gemma 2 (google/gemma-2-*): GeGLU, four (1 + weight) RMSNorms per layer, tied, sliding window on
// every other layer, attention and final logits soft-capped (config.json: 50 and 30).
struct gemma_2_2b : model_type<model{.name = "Gemma-2-2B",
                                     .hf_model_type = "gemma2",
                                     .hidden = 2304,
                                     .layers = 26,
                                     .heads = 8,
                                     .kv_heads = 4,
                                     .head_dim = 256,
                                     .ffn = 9216,
                                     .vocab = 256000,
                                     .mlp = mlp_kind::geglu,
                                     .norms_per_layer = 4,
                                     .tied_embeddings = true,
                                     .sliding_window = 4096,
                                     .sliding_window_period = 2,
                                     .norm_plus_one = true,
                                     .attention_softcap = true,
                                     .logit_softcap = true}> {};
struct gemma_2_9b : model_type<model{.name = "Gemma-2-9B",
                                     .hf_model_type = "gemma2",
                                     .hidden = 3584,
                                     .layers = 42,
                                     .heads = 16,
                                     .kv_heads = 8,
                                     .head_dim = 256,
                                     .ffn = 14336,
                                     .vocab = 256000,
                                     .mlp = mlp_kind::geglu,
                                     .norms_per_layer = 4,
                                     .tied_embeddings = true,
                                     .sliding_window = 4096,
                                     .sliding_window_period = 2,
                                     .norm_plus_one = true,
                                     .attention_softcap = true,
                                     .logit_softcap = true}> {};
struct gemma_2_27b : model_type<model{.name = "Gemma-2-27B",
                                      .hf_model_type = "gemma2",
                                      .hidden = 4608,
                                      .layers = 46,
                                      .heads = 32,
                                      .kv_heads = 16,
                                      .head_dim = 128,
                                      .ffn = 36864,
                                      .vocab = 256000,
                                      .mlp = mlp_kind::geglu,
                                      .norms_per_layer = 4,
                                      .tied_embeddings = true,
                                      .sliding_window = 4096,
                                      .sliding_window_period = 2,
                                      .norm_plus_one = true,
                                      .attention_softcap = true,
                                      .logit_softcap = true}> {};

// Phi-3-mini (microsoft/Phi-3-mini-4k-instruct): fused qkv_proj and gate_up_proj.
struct phi_3_mini : model_type<model{.name = "Phi-3-mini",
                                     .hf_model_type = "phi3",
                                     .family = family::phi3,
                                     .hidden = 3072,
                                     .layers = 32,
                                     .heads = 32,
                                     .kv_heads = 32,
                                     .head_dim = 96,
                                     .ffn = 8192,
                                     .vocab = 32064,
                                     .sliding_window = 2047}> {};

// Falcon-7B (tiiuae/falcon-7b): multi-query attention, parallel attention + MLP, tied, no biases,
// nn.GELU (fused).
struct falcon_7b : model_type<model{.name = "Falcon-7B",
                                    .hf_model_type = "falcon",
                                    .family = family::falcon,
                                    .hidden = 4544,
                                    .layers = 32,
                                    .heads = 71,
                                    .kv_heads = 1,
                                    .head_dim = 64,
                                    .ffn = 4 * 4544,
                                    .vocab = 65024,
                                    .mlp = mlp_kind::gelu,
                                    .norm = norm_kind::layernorm,
                                    .norms_per_layer = 1,
                                    .tied_embeddings = true,
                                    .parallel_block = true}> {};

// DeepSeek-V3 and V2 (deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json,
// config_236B.json): MLA and DeepSeekMoE; V3 without its multi-token-prediction module.
struct deepseek_v3 : model_type<model{.name = "DeepSeek-V3",
                                      .hf_model_type = "deepseek_v3",
                                      .hidden = 7168,
                                      .layers = 61,
                                      .heads = 128,
                                      .kv_heads = 128,
                                      .head_dim = 64,
                                      .ffn = 18432,
                                      .vocab = 129280,
                                      .moe = {.routed_experts = 256,
                                              .top_k = 8,
                                              .shared_experts = 1,
                                              .expert_ffn = 2048,
                                              .first_dense_layers = 3,
                                              .router_score_bias = true,
                                              .group_limited = true},
                                      .mla = {.q_lora_rank = 1536,
                                              .kv_lora_rank = 512,
                                              .qk_nope_head_dim = 128,
                                              .qk_rope_head_dim = 64,
                                              .v_head_dim = 128}}> {};
struct deepseek_v2 : model_type<model{.name = "DeepSeek-V2",
                                      .hf_model_type = "deepseek_v2",
                                      .hidden = 5120,
                                      .layers = 60,
                                      .heads = 128,
                                      .kv_heads = 128,
                                      .head_dim = 64,
                                      .ffn = 12288,
                                      .vocab = 102400,
                                      .moe = {.routed_experts = 160,
                                              .top_k = 6,
                                              .shared_experts = 2,
                                              .expert_ffn = 1536,
                                              .first_dense_layers = 1,
                                              .group_limited = true},
                                      .mla = {.q_lora_rank = 1536,
                                              .kv_lora_rank = 512,
                                              .qk_nope_head_dim = 128,
                                              .qk_rope_head_dim = 64,
                                              .v_head_dim = 128}}> {};

// gpt-oss (openai/gpt-oss-20b, gpt-oss-120b): Q, K, V and O biases, one attention sink per head,
// a 128-token window on every other layer from layer 0, every layer 4 experts of 32 or 128 with
// biases and a router with a bias.
struct gpt_oss_20b
    : model_type<model{
          .name = "gpt-oss-20b",
          .hf_model_type = "gpt_oss",
          .hidden = 2880,
          .layers = 24,
          .heads = 64,
          .kv_heads = 8,
          .head_dim = 64,
          .ffn = 2880,
          .vocab = 201088,
          .bias = bias_kind::attention,
          .sliding_window = 128,
          .sliding_window_period = 2,
          .moe =
              {.routed_experts = 32, .top_k = 4, .expert_ffn = 2880, .layout = moe_layout::gpt_oss},
          .attention_sinks = true}> {};
struct gpt_oss_120b : model_type<model{.name = "gpt-oss-120b",
                                       .hf_model_type = "gpt_oss",
                                       .hidden = 2880,
                                       .layers = 36,
                                       .heads = 64,
                                       .kv_heads = 8,
                                       .head_dim = 64,
                                       .ffn = 2880,
                                       .vocab = 201088,
                                       .bias = bias_kind::attention,
                                       .sliding_window = 128,
                                       .sliding_window_period = 2,
                                       .moe = {.routed_experts = 128,
                                               .top_k = 4,
                                               .expert_ffn = 2880,
                                               .layout = moe_layout::gpt_oss},
                                       .attention_sinks = true}> {};

// BERT (google-bert/bert-*-uncased) as BertModel, with the pooler.
struct bert_base_uncased
    : model_type<detail::bert_preset(
          {.name = "BERT-base-uncased", .hidden = 768, .layers = 12, .heads = 12})> {};
struct bert_large_uncased
    : model_type<detail::bert_preset(
          {.name = "BERT-large-uncased", .hidden = 1024, .layers = 24, .heads = 16})> {};

// DistilBERT (distilbert/distilbert-base-uncased) as DistilBertModel: BERT-base's block in 6
// layers, no token types, no pooler.
struct distilbert_base_uncased : model_type<model{.name = "DistilBERT-base-uncased",
                                                  .hf_model_type = "distilbert",
                                                  .family = family::distilbert,
                                                  .hidden = 768,
                                                  .layers = 6,
                                                  .heads = 12,
                                                  .kv_heads = 12,
                                                  .head_dim = 64,
                                                  .ffn = 4 * 768,
                                                  .vocab = 30522,
                                                  .mlp = mlp_kind::gelu,
                                                  .norm = norm_kind::layernorm,
                                                  .bias = bias_kind::all,
                                                  .tied_embeddings = true,
                                                  .positions = position_kind::learned,
                                                  .max_positions = 512,
                                                  .dropout = true}> {};

// ViT-L/16 (torchvision vit_l_16, the shapes of an HF "vit" config.json): 224 px images, 16 px
// patches, 1000 classes.
struct vit_l_16
    : model_type<model{
          .name = "ViT-L/16",
          .hf_model_type = "vit",
          .family = family::vit,
          .hidden = 1024,
          .layers = 24,
          .heads = 16,
          .kv_heads = 16,
          .head_dim = 64,
          .ffn = 4 * 1024,
          .mlp = mlp_kind::gelu,
          .norm = norm_kind::layernorm,
          .bias = bias_kind::all,
          .positions = position_kind::learned,
          .max_positions = 197,
          .encoder = {.image_size = 224, .patch_size = 16, .channels = 3, .classes = 1000}}> {};
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
