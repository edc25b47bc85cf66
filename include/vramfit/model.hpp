// SPDX-License-Identifier: MIT
// The description of a model architecture: a structural aggregate (usable as a template argument),
// its validity rules, and the templated-type front `model_type<model{...}>`.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

#include "detail/name.hpp"
#include "detail/tag.hpp"
#include "error.hpp"

namespace vramfit {

/// The implementation whose tensor names and fused tensors the ledger follows: the same
/// architecture stores Q, K and V as three tensors in Llama and as one in GPT-2, Falcon and Phi-3,
/// and per-tensor costs (optimizer step counters, allocator rounding) depend on it.
enum class family : unsigned char {
  llama,        ///< Hugging Face Llama, Mistral, Mixtral, Qwen2, Gemma 2, DeepSeek V2/V3 naming
  phi3,         ///< Hugging Face Phi-3: fused qkv_proj and gate_up_proj
  gpt2,         ///< Hugging Face GPT-2: fused c_attn, Conv1D layers, learned positions
  falcon,       ///< Hugging Face Falcon: fused query_key_value, parallel attention + MLP
  bert,         ///< Hugging Face BertModel: encoder, post-LN, token types, pooler (and BigBird's)
  vit,          ///< torchvision VisionTransformer: patch embedding, class token, class head
  distilbert,   ///< Hugging Face DistilBertModel: q_lin/k_lin/v_lin/out_lin, no token types
  gpt_bigcode,  ///< Hugging Face GPTBigCode: GPT-2's block with nn.Linear and a fused MQA c_attn
};

enum class mlp_kind : unsigned char {
  gelu,    ///< up, activation, down: 2 matrices
  swiglu,  ///< silu(gate) * up, down: 3 matrices
  geglu,   ///< gelu(gate) * up, down: 3 matrices
};

enum class norm_kind : unsigned char {
  layernorm,  ///< weight and bias
  rmsnorm,    ///< weight only
};

enum class bias_kind : unsigned char {
  none,
  qkv,        ///< Q, K and V projections only (Qwen2)
  attention,  ///< Q, K, V and output projections (Llama with attention_bias)
  all,        ///< every linear layer (GPT-2, BERT, ViT)
};

enum class position_kind : unsigned char {
  rotary,   ///< no parameters
  learned,  ///< a max_positions x hidden table
};

/// Whose module names and tensors the routed experts follow.
enum class moe_layout : unsigned char {
  /// Mixtral's block_sparse_moe.gate and experts.{e}.w1/w3/w2 without shared experts or MLA,
  /// DeepSeek's mlp.gate, mlp.experts.{e}.gate_proj/up_proj/down_proj and mlp.shared_experts
  /// with them.
  standard,
  /// mlp.gate and mlp.experts.{e}.gate_proj/up_proj/down_proj without shared experts
  /// (modeling_qwen3_moe.py Qwen3MoeSparseMoeBlock).
  mlp_experts,
  /// modeling_gpt_oss.py GptOssMLP: mlp.router with a bias; mlp.experts.gate_up_proj [E, h, 2f]
  /// and down_proj [E, f, h], each with a bias, one tensor over the experts.
  gpt_oss,
};

/// Mixture of experts. Layers [first_dense_layers, layers) route each token to top_k of
/// routed_experts experts of width expert_ffn, plus shared_experts always-active experts.
struct moe_config {
  std::int64_t routed_experts = 0;  ///< 0: a dense model
  std::int64_t top_k = 0;
  std::int64_t shared_experts = 0;
  std::int64_t expert_ffn = 0;
  std::int64_t first_dense_layers = 0;
  /// DeepSeek-V3's e_score_correction_bias: stored per MoE layer, adjusted by the load-balancing
  /// rule rather than by gradients, so not counted among the trainable parameters.
  bool router_score_bias = false;
  moe_layout layout = moe_layout::standard;
  /// DeepSeek's group-limited routing (V3's always, V2's topk_method "group_limited_greedy"): the
  /// router masks the scores outside the chosen groups, and masked_fill keeps its [T, E] mask.
  bool group_limited = false;
  friend constexpr bool operator==(const moe_config&, const moe_config&) = default;
};

/// Multi-head latent attention (DeepSeek-V2 paper, section 2.1).
struct mla_config {
  std::int64_t q_lora_rank = 0;   ///< 0: queries come from one full q_proj
  std::int64_t kv_lora_rank = 0;  ///< 0: not MLA
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  friend constexpr bool operator==(const mla_config&, const mla_config&) = default;
};

/// Encoder-only extras: BERT's token types, pooler and classifier (classes > 0:
/// BertForSequenceClassification), ViT's image geometry and class head.
struct encoder_config {
  std::int64_t token_types = 0;
  bool pooler = false;
  std::int64_t image_size = 0;
  std::int64_t patch_size = 0;
  std::int64_t channels = 0;
  std::int64_t classes = 0;
  /// The sequence classifier has a hidden x hidden dense layer before the one over the classes
  /// (modeling_big_bird.py BigBirdClassificationHead; DistilBERT's pre_classifier always has it).
  bool classifier_dense = false;
  friend constexpr bool operator==(const encoder_config&, const encoder_config&) = default;
};

/// A transformer architecture, complete enough to list every parameter tensor exactly.
struct model {
  char name[40] = {};
  /// config.json's model_type ("llama"), which peft's defaults key on; empty when built by hand.
  char hf_model_type[16] = {};
  vramfit::family family = family::llama;
  std::int64_t hidden = 0;
  std::int64_t layers = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;  ///< may differ from hidden / heads (Gemma 2)
  std::int64_t ffn = 0;       ///< width of the dense MLP (and of each Mixtral expert)
  std::int64_t vocab = 0;
  mlp_kind mlp = mlp_kind::swiglu;
  norm_kind norm = norm_kind::rmsnorm;
  std::int64_t norms_per_layer = 2;  ///< 1 for Falcon's parallel block, 4 for Gemma 2
  bias_kind bias = bias_kind::none;
  bool tied_embeddings = false;
  position_kind positions = position_kind::rotary;
  std::int64_t max_positions = 0;   ///< rows of a learned position table
  bool parallel_block = false;      ///< attention and MLP read the same normed input (Falcon)
  std::int64_t sliding_window = 0;  ///< 0: full attention everywhere
  /// 1: every layer uses the window (Mistral); 2: every other layer from layer 0 (Gemma 2).
  std::int64_t sliding_window_period = 1;
  /// Of each period, the first this many layers use the window (Gemma 3: 5 of 6, then a global
  /// one): layer i does when i % period < this.
  std::int64_t sliding_layers_per_period = 1;
  moe_config moe{};
  mla_config mla{};
  encoder_config encoder{};
  /// The reference configuration trains with dropout (GPT-2's and BERT's 0.1): activation
  /// estimates keep the dropout masks unless told otherwise.
  bool dropout = false;
  /// Checkpoints written by older transformers versions also store each layer's rotary inv_freq
  /// buffer (head_dim / 2 fp32 values), e.g. Llama-2's safetensors: a checkpoint fact, not one of
  /// the architecture, and config.json does not say it.
  bool checkpoint_rotary_buffers = false;
  /// A GELU MLP whose tanh GELU is written as Python operations (Hugging Face's gelu_new, GPT-2's
  /// default): autograd keeps four [tokens, ffn] intermediates where a fused GELU keeps one.
  bool gelu_in_python = false;
  /// A per-head RMSNorm of head_dim on the queries and keys before rotary (modeling_qwen3.py
  /// Qwen3Attention q_norm, k_norm).
  bool qk_norm = false;
  /// One learned logit per head in each layer that joins the softmax's denominator
  /// (modeling_gpt_oss.py GptOssAttention.sinks).
  bool attention_sinks = false;
  /// Gemma's RMSNorm: x * (1 + weight), multiplied in fp32 before the cast back
  /// (modeling_gemma2.py Gemma2RMSNorm.forward).
  bool norm_plus_one = false;
  /// tanh soft-capping of the attention logits and of the final logits (Gemma 2's
  /// attn_logit_softcapping and final_logit_softcapping): each tanh keeps its output.
  bool attention_softcap = false, logit_softcap = false;

  friend constexpr bool operator==(const model&, const model&) = default;

  [[nodiscard]] constexpr bool is_moe() const { return moe.routed_experts > 0; }
  [[nodiscard]] constexpr bool is_mla() const { return mla.kv_lora_rank > 0; }
  [[nodiscard]] constexpr bool is_encoder() const {
    return family == family::bert || family == family::vit || family == family::distilbert;
  }
  /// BERT's code and DistilBERT's (modeling_bert.py, modeling_distilbert.py): post-LN layers, a
  /// LayerNorm over the summed embeddings, no final norm, a softmax with no dtype.
  [[nodiscard]] constexpr bool is_bert_style() const {
    return family == family::bert || family == family::distilbert;
  }
  /// Whether `layer` routes tokens to experts.
  [[nodiscard]] constexpr bool is_moe_layer(std::int64_t layer) const {
    return is_moe() && layer >= moe.first_dense_layers;
  }
};

/// The GPT-2 / BERT block that the classic families fix (validated: validate_family_layout): a
/// GELU MLP of two matrices, LayerNorm, biases everywhere, learned positions.
constexpr model classic_block(family f) {
  return {.family = f,
          .mlp = mlp_kind::gelu,
          .norm = norm_kind::layernorm,
          .bias = bias_kind::all,
          .positions = position_kind::learned};
}

// --- Validity rules. Each is a function named after the rule: a compile error in a constant
// expression (the name and the numbers appear in the diagnostic), a vramfit::error at run time.
namespace detail::rules {
inline std::string in_model(const model& m) {
  return std::string("model '") + m.name + "': ";
}
[[noreturn]] inline void model_size_must_be_positive(const model& m, const char* field,
                                                     std::int64_t value) {
  raise(in_model(m) + field + " must be positive, got " + str(value));
}
[[noreturn]] inline void attention_heads_must_be_a_multiple_of_kv_heads(const model& m,
                                                                        std::int64_t heads,
                                                                        std::int64_t kv_heads) {
  raise(in_model(m) + "attention heads (" + str(heads) + ") must be a multiple of KV heads (" +
        str(kv_heads) + ")");
}
[[noreturn]] inline void hidden_must_equal_heads_times_head_dim(const model& m, std::int64_t hidden,
                                                                std::int64_t heads,
                                                                std::int64_t head_dim) {
  raise(in_model(m) + "this family needs hidden (" + str(hidden) + ") = heads (" + str(heads) +
        ") x head_dim (" + str(head_dim) + ")");
}
[[noreturn]] inline void top_k_must_be_between_1_and_routed_experts(const model& m,
                                                                    std::int64_t top_k,
                                                                    std::int64_t experts) {
  raise(in_model(m) + "top-k (" + str(top_k) + ") must be between 1 and the routed experts (" +
        str(experts) + ")");
}
[[noreturn]] inline void dense_layers_must_not_exceed_layers(const model& m, std::int64_t dense,
                                                             std::int64_t layers) {
  raise(in_model(m) + "first dense layers (" + str(dense) + ") must not exceed the layers (" +
        str(layers) + ")");
}
[[noreturn]] inline void model_size_must_not_exceed_its_bound(const model& m, const char* field,
                                                              std::int64_t value,
                                                              std::int64_t bound) {
  raise(in_model(m) + field + " must be at most " + str(bound) + ", got " + str(value));
}
[[noreturn]] inline void model_count_must_not_be_negative(const model& m, const char* field,
                                                          std::int64_t value) {
  raise(in_model(m) + field + " must not be negative, got " + str(value));
}
[[noreturn]] inline void image_size_must_be_a_multiple_of_patch_size(const model& m,
                                                                     std::int64_t image,
                                                                     std::int64_t patch) {
  raise(in_model(m) + "image size (" + str(image) + ") must be a multiple of the patch size (" +
        str(patch) + ")");
}
[[noreturn]] inline void vit_positions_must_be_patches_plus_class_token(const model& m,
                                                                        std::int64_t positions,
                                                                        std::int64_t expected) {
  raise(in_model(m) + "positions (" + str(positions) +
        ") must be the patches plus the class token (" + str(expected) + ")");
}
[[noreturn]] inline void vit_sequence_is_its_patches_plus_class_token(const model& m,
                                                                      std::int64_t sequence) {
  raise(std::string(m.name) + " sees " + str(m.max_positions) +
        " tokens per image (its patches and the class token): the sequence must be " +
        str(m.max_positions) + ", got " + str(sequence));
}
[[noreturn]] inline void sequence_must_fit_the_learned_positions(const model& m,
                                                                 std::int64_t sequence) {
  raise(std::string(m.name) + "'s learned position table has " + str(m.max_positions) +
        " rows: a sequence of " + str(sequence) + " tokens indexes past it");
}
[[noreturn]] inline void norms_per_layer_must_be_1_to_4(const model& m, std::int64_t norms) {
  raise(in_model(m) + "norms per layer must be 1 to 4, got " + str(norms));
}
[[noreturn]] inline void family_has_a_fixed_layout(const model& m, const char* what) {
  raise(in_model(m) + "this family's implementation fixes " + what);
}
}  // namespace detail::rules

/// Upper bounds on a model's sizes: every real model fits with a wide margin (largest published:
/// hidden 18,432, FFN 53,248, vocabulary 262,144, 256 experts, 128 heads, 126 layers, 10M tokens),
/// and a product of two or three stays far below 2^63; longer ones are checked where formed.
namespace bounds {
inline constexpr std::int64_t width = std::int64_t{1}
                                      << 24;  ///< hidden, FFN, vocab, dims: 16,777,216
inline constexpr std::int64_t layers = std::int64_t{1} << 24;  ///< 16,777,216
inline constexpr std::int64_t heads = std::int64_t{1} << 16;   ///< heads, KV heads, experts: 65,536
inline constexpr std::int64_t image = std::int64_t{1} << 20;   ///< image side in pixels
inline constexpr std::int64_t positions = std::int64_t{1} << 30;  ///< learned positions, windows
/// Sliding windows every period-th layer: pipeline stages are compared per residue of the period.
inline constexpr std::int64_t sliding_window_period = 64;
}  // namespace bounds

namespace detail {

/// The size rules of one model: a size within its bound, positive, or not negative.
struct size_rules {
  const model& m;
  constexpr void at_most(const char* field, std::int64_t value, std::int64_t bound) const {
    if (value > bound) rules::model_size_must_not_exceed_its_bound(m, field, value, bound);
  }
  constexpr void positive(const char* field, std::int64_t value,
                          std::int64_t bound = bounds::width) const {
    if (value <= 0) rules::model_size_must_be_positive(m, field, value);
    at_most(field, value, bound);
  }
  constexpr void non_negative(const char* field, std::int64_t value,
                              std::int64_t bound = bounds::width) const {
    if (value < 0) rules::model_count_must_not_be_negative(m, field, value);
    at_most(field, value, bound);
  }
};

/// The sizes every model has: widths, layers, heads, vocabulary, norms, positions and windows.
constexpr void validate_sizes(const model& m) {
  const size_rules size{m};
  size.positive("hidden size", m.hidden);
  size.positive("layers", m.layers, bounds::layers);
  size.positive("attention heads", m.heads, bounds::heads);
  size.positive("KV heads", m.kv_heads, bounds::heads);
  size.positive("head_dim", m.head_dim);
  // Dense layers need an FFN width; in an all-MoE model only the experts' width matters.
  if (!m.is_moe() || m.moe.first_dense_layers > 0) size.positive("FFN size", m.ffn);
  size.non_negative("FFN size", m.ffn);
  if (m.family != family::vit) size.positive("vocabulary size", m.vocab);
  size.non_negative("vocabulary size", m.vocab);
  if (m.heads % m.kv_heads != 0)
    rules::attention_heads_must_be_a_multiple_of_kv_heads(m, m.heads, m.kv_heads);
  if (m.norms_per_layer < 1 || m.norms_per_layer > 4)
    rules::norms_per_layer_must_be_1_to_4(m, m.norms_per_layer);
  size.non_negative("max positions", m.max_positions, bounds::positions);
  if (m.positions == position_kind::learned)
    size.positive("max positions of learned positions", m.max_positions, bounds::positions);
  size.non_negative("sliding window", m.sliding_window, bounds::positions);
  size.positive("sliding-window period", m.sliding_window_period, bounds::sliding_window_period);
  size.positive("sliding-window layers per period", m.sliding_layers_per_period,
                m.sliding_window_period);
}

/// What a family's implementation fixes: the classic fused families' attention, MLP, norm and
/// positions; Falcon's parallel blocks; the Llama family's options.
constexpr void validate_family_layout(const model& m) {
  using rules::family_has_a_fixed_layout;
  const bool fused_classic = m.family == family::gpt2 || m.family == family::falcon ||
                             m.family == family::bert || m.family == family::vit ||
                             m.family == family::distilbert || m.family == family::gpt_bigcode;
  if (fused_classic) {
    if (m.hidden != m.heads * m.head_dim)
      rules::hidden_must_equal_heads_times_head_dim(m, m.hidden, m.heads, m.head_dim);
    if (m.mlp != mlp_kind::gelu) family_has_a_fixed_layout(m, "a GELU MLP of 2 matrices");
    if (m.norm != norm_kind::layernorm) family_has_a_fixed_layout(m, "LayerNorm");
    if (m.is_moe() || m.is_mla()) family_has_a_fixed_layout(m, "dense attention and MLP");
    if (m.family != family::falcon && m.positions != position_kind::learned)
      family_has_a_fixed_layout(m, "learned positions");
  }
  if (m.family != family::falcon && m.parallel_block)
    family_has_a_fixed_layout(m, "sequential attention and MLP (parallel blocks are Falcon's)");
  if ((m.qk_norm || m.attention_sinks) && (m.family != family::llama || m.is_mla()))
    family_has_a_fixed_layout(
        m, "its attention (per-head Q/K norms and attention sinks are Llama-family options)");
  if (m.moe.layout != moe_layout::standard &&
      (m.family != family::llama || m.is_mla() || m.moe.shared_experts > 0))
    family_has_a_fixed_layout(
        m,
        "its experts (the mlp_experts and gpt_oss layouts are Llama-family MoE without shared "
        "experts)");
}

/// Mixture-of-experts routing and multi-head latent attention.
constexpr void validate_experts_and_latent_attention(const model& m) {
  const size_rules size{m};
  size.non_negative("routed experts", m.moe.routed_experts, bounds::heads);
  size.non_negative("shared experts", m.moe.shared_experts, bounds::heads);
  size.non_negative("first dense layers", m.moe.first_dense_layers, bounds::layers);
  size.non_negative("expert FFN size", m.moe.expert_ffn);
  size.non_negative("q LoRA rank", m.mla.q_lora_rank);
  size.non_negative("KV LoRA rank", m.mla.kv_lora_rank);
  if (m.is_moe()) {
    if (m.moe.top_k < 1 || m.moe.top_k > m.moe.routed_experts)
      rules::top_k_must_be_between_1_and_routed_experts(m, m.moe.top_k, m.moe.routed_experts);
    size.positive("expert FFN size", m.moe.expert_ffn);
    if (m.moe.first_dense_layers > m.layers)
      rules::dense_layers_must_not_exceed_layers(m, m.moe.first_dense_layers, m.layers);
  }
  if (m.is_mla()) {
    size.positive("MLA qk_nope_head_dim", m.mla.qk_nope_head_dim);
    size.positive("MLA qk_rope_head_dim", m.mla.qk_rope_head_dim);
    size.positive("MLA v_head_dim", m.mla.v_head_dim);
  }
}

/// Encoders: BERT's token types, a ViT's image, patches and classes.
constexpr void validate_encoder(const model& m) {
  const size_rules size{m};
  size.non_negative("token types", m.encoder.token_types);
  size.non_negative("classes", m.encoder.classes);
  if (m.family == family::bert) size.positive("token types", m.encoder.token_types);
  if (m.family != family::vit) return;
  size.positive("image size", m.encoder.image_size, bounds::image);
  size.positive("patch size", m.encoder.patch_size, bounds::image);
  size.positive("image channels", m.encoder.channels, bounds::heads);
  size.positive("classes", m.encoder.classes);
  if (m.encoder.image_size % m.encoder.patch_size != 0)
    rules::image_size_must_be_a_multiple_of_patch_size(m, m.encoder.image_size,
                                                       m.encoder.patch_size);
  const std::int64_t side = m.encoder.image_size / m.encoder.patch_size;
  if (m.max_positions != side * side + 1)
    rules::vit_positions_must_be_patches_plus_class_token(m, m.max_positions, side * side + 1);
}

}  // namespace detail

/// Checks every validity rule and returns the model; the first broken rule is an error.
constexpr const model& validated(const model& m) {
  detail::validate_sizes(m);
  detail::validate_family_layout(m);
  detail::validate_experts_and_latent_attention(m);
  detail::validate_encoder(m);
  return m;
}

/// The sequence a model takes unless told otherwise: a ViT's image tokens (patches and the
/// class token), else `preferred` tokens, or fewer where a learned position table has fewer rows.
constexpr std::int64_t default_sequence(const model& m, std::int64_t preferred = 2048) {
  if (m.family == family::vit) return m.max_positions;
  if (m.positions == position_kind::learned && m.max_positions < preferred) return m.max_positions;
  return preferred;
}

namespace detail {
/// A sequence of `tokens` the model can take: a ViT's is fixed by its image (patches + class
/// token), a learned position table's rows bound it (transformers GPT-2, BERT: wpe /
/// position_embeddings).
constexpr void check_sequence(const model& m, std::int64_t tokens) {
  if (m.family == family::vit && tokens != m.max_positions)
    rules::vit_sequence_is_its_patches_plus_class_token(m, tokens);
  if (m.family != family::vit && m.positions == position_kind::learned && tokens > m.max_positions)
    rules::sequence_must_fit_the_learned_positions(m, tokens);
}
}  // namespace detail

/// A type that names a model: it has `static constexpr model value`.
template <class T>
concept Model = detail::tag_of<T, model>;

/// The templated-type front: `model_type<model{...}>` checks the rules at compile time.
template <model M>
struct model_type {
  static constexpr model value = validated(M);
};

}  // namespace vramfit
