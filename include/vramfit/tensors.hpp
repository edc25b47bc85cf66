// SPDX-License-Identifier: MIT
// The tensor ledger: every parameter tensor of a model (and every stored state tensor) with its
// name, shape, layers, kind and element count, as the reference implementation allocates them.
// Totals, per-layer sums, the largest layer and MoE active parameters all derive from it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "detail/checked.hpp"
#include "detail/static_vector.hpp"
#include "model.hpp"

namespace vramfit {

enum class tensor_kind : unsigned char {
  embedding,  ///< token, position and patch embeddings, ViT's class token
  attention,
  mlp,     ///< dense MLPs and always-active shared experts
  expert,  ///< routed experts
  norm,
  head,  ///< output projection, pooler, class head
  router,
  adapter,  ///< LoRA adapters (the last: tensor_kind_count follows it)
};
inline constexpr int tensor_kind_count = static_cast<int>(tensor_kind::adapter) + 1;

constexpr const char* to_string(tensor_kind kind) {
  constexpr const char* names[tensor_kind_count] = {"embedding", "attention", "mlp",    "expert",
                                                    "norm",      "head",      "router", "adapter"};
  return names[static_cast<int>(kind)];
}

enum class tensor_role : unsigned char {
  parameter,  ///< learned by gradients: counted in the parameter count
  state,      ///< stored (on the device, maybe in the checkpoint) but not learned by gradients
};

/// How tensor parallelism splits a tensor (Megatron-LM tensor_parallel/layers.py).
enum class tp_split : unsigned char {
  replicated,  ///< norms, routers, MLA's down-projections, row-parallel biases
  output,      ///< column-parallel: the output features (Q, MLP up/gate, their biases)
  input,       ///< row-parallel: the input features (attention output, MLP down)
  // Routed experts split like MLPs: Megatron-Core's expert_tensor_parallel_size defaults to the
  // tensor-parallel size, and vLLM shards every expert over its tensor-parallel ranks.
  vocab,  ///< vocabulary-parallel embedding and head rows
  kv,     ///< K or V: whole heads, replicated when the TP degree exceeds the KV heads
  qkv,    ///< fused Q, K, V: the Q part as `output`, the K and V parts as `kv`
};

/// A tensor's name as up to three string literals joined, with "{layer}" and "{expert}" where the
/// indices go: "model.layers.{layer}." "self_attn.q_proj" ".weight". Literals, not a copied
/// string, keep ledgers cheap in constant expressions.
struct tensor_name {
  const char* parts[3] = {"", "", ""};

  [[nodiscard]] constexpr std::size_t size() const {
    std::size_t n = 0;
    for (const char* part : parts)
      for (; *part != '\0'; ++part) ++n;
    return n;
  }
  /// The i-th character of the joined name.
  [[nodiscard]] constexpr char operator[](std::size_t i) const {
    for (const char* part : parts) {
      std::size_t length = 0;
      while (part[length] != '\0') ++length;
      if (i < length) return part[i];
      i -= length;
    }
    return '\0';
  }
  [[nodiscard]] std::string str() const { return std::string(parts[0]) + parts[1] + parts[2]; }
};

/// One tensor, or the same tensor repeated over a range of layers and experts. The name is the
/// reference implementation's, with "{layer}" and "{expert}" where the indices go.
struct tensor_group {
  tensor_name name{};
  std::int64_t shape[4] = {};
  std::int64_t rank = 0;
  tensor_kind kind = tensor_kind::attention;
  tensor_role role = tensor_role::parameter;
  std::int64_t first_layer = 0;
  std::int64_t layer_count = 0;  ///< 0: not a per-layer tensor
  std::int64_t experts = 1;      ///< copies per layer (routed experts)
  std::int64_t state_bits = 0;   ///< element bits of a state tensor (parameters follow the policy)
  bool in_checkpoint = true;
  /// Whether the framework allocates it on the device (a state a checkpoint stores but the
  /// current implementation rebuilds per forward is not).
  bool in_memory = true;
  tp_split split = tp_split::replicated;
  bool input_major = false;  ///< stored [in, out] (GPT-2's Conv1D) rather than [out, in]

  /// Elements of one tensor of the group.
  [[nodiscard]] constexpr std::int64_t elements() const {
    std::int64_t n = 1;
    for (std::int64_t i = 0; i < rank; ++i) n = detail::checked_mul(n, shape[i]);
    return n;
  }
  [[nodiscard]] constexpr std::int64_t tensor_count() const {
    return detail::checked_mul(layer_count > 0 ? layer_count : 1, experts);
  }
  [[nodiscard]] constexpr std::int64_t total_elements() const {
    return detail::checked_mul(elements(), tensor_count());
  }
  [[nodiscard]] constexpr bool in_layer(std::int64_t layer) const {
    return layer_count > 0 && layer >= first_layer && layer < first_layer + layer_count;
  }
  /// For a linear weight [out, in]: the rows and columns; other tensors are one row.
  [[nodiscard]] constexpr std::int64_t rows() const { return rank == 2 ? shape[0] : 1; }
  [[nodiscard]] constexpr std::int64_t cols() const { return rank == 2 ? shape[1] : elements(); }
};

/// Every tensor group of a model; 48 groups hold every architecture vramfit describes.
using tensor_ledger = detail::static_vector<tensor_group, 48>;

namespace detail {
/// How many of the layers [a0, a0 + an) are also in [b0, b0 + bn).
constexpr std::int64_t overlap(std::int64_t a0, std::int64_t an, std::int64_t b0, std::int64_t bn) {
  const std::int64_t lo = a0 > b0 ? a0 : b0;
  const std::int64_t a1 = checked_add(a0, an), b1 = checked_add(b0, bn);
  const std::int64_t hi = a1 < b1 ? a1 : b1;
  return hi > lo ? hi - lo : 0;
}

/// The first group of per-layer tensors: the groups before it (embeddings) sit on the first
/// pipeline stage, those after the layers on the last.
constexpr std::size_t first_layer_group(const tensor_ledger& tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].layer_count > 0) return i;
  return tensors.size();
}
}  // namespace detail

namespace detail {

/// Layers [first, first + count); count 0 means "not a per-layer tensor".
struct layer_range {
  std::int64_t first = 0;
  std::int64_t count = 0;
};

/// Whether a linear layer adds a bias (nn.Linear's bias=).
enum class with_bias : bool { no, yes };

/// Whether a state tensor is in the checkpoint (tensor_group::in_checkpoint).
enum class checkpointed : bool { no, yes };

/// Builds a ledger with the reference implementation's names.
class ledger_builder {
 public:
  explicit constexpr ledger_builder(const model& m) : m_(m) {}

  constexpr void add(std::initializer_list<const char*> name_parts,
                     std::initializer_list<std::int64_t> shape, tensor_kind kind,
                     layer_range layers = {}, std::int64_t experts = 1,
                     tp_split split = tp_split::replicated) {
    tensor_group g{};
    if (name_parts.size() > 3) rules::static_vector_capacity_exceeded(3);
    std::size_t end = 0;
    for (const char* part : name_parts) g.name.parts[end++] = part;
    for (std::int64_t extent : shape) g.shape[g.rank++] = extent;
    g.kind = kind;
    g.first_layer = layers.first;
    g.layer_count = layers.count;
    g.experts = experts;
    g.split = split;
    ledger_.push_back(g);
  }

  constexpr tensor_group& last() { return ledger_[ledger_.size() - 1]; }

  /// A state tensor: stored, not learned.
  constexpr void add_state(std::initializer_list<const char*> name_parts,
                           std::initializer_list<std::int64_t> shape, tensor_kind kind,
                           std::int64_t bits, layer_range layers, checkpointed saved) {
    add(name_parts, shape, kind, layers);
    tensor_group& g = ledger_[ledger_.size() - 1];
    g.role = tensor_role::state;
    g.state_bits = bits;
    g.in_checkpoint = saved == checkpointed::yes;
  }

  /// A norm: weight, and bias for LayerNorm.
  constexpr void add_norm(const char* prefix, const char* name, std::int64_t width,
                          layer_range layers = {}) {
    add({prefix, name, ".weight"}, {width}, tensor_kind::norm, layers);
    if (m_.norm == norm_kind::layernorm)
      add({prefix, name, ".bias"}, {width}, tensor_kind::norm, layers);
  }

  /// The decoder's final norm `prefix` + `norm`, then the LM head [vocab, hidden] unless the
  /// token embedding is tied to it (then the head reads the embedding's weight).
  constexpr void add_final_norm_and_head(const char* prefix, const char* norm) {
    add_norm(prefix, norm, m_.hidden);
    if (!m_.tied_embeddings)
      add({"lm_head.weight"}, {m_.vocab, m_.hidden}, tensor_kind::head, {}, 1, tp_split::vocab);
  }

  /// GPT-2's token and learned position tables (modeling_gpt2.py GPT2Model.wte, .wpe), which
  /// GPTBigCode keeps.
  constexpr void add_gpt2_embeddings() {
    add({"transformer.wte.weight"}, {m_.vocab, m_.hidden}, tensor_kind::embedding, {}, 1,
        tp_split::vocab);
    add({"transformer.wpe.weight"}, {m_.max_positions, m_.hidden}, tensor_kind::embedding);
  }

  /// BERT's embeddings (modeling_bert.py BertEmbeddings): word, position and, when the model has
  /// them, token-type tables, then a LayerNorm; DistilBERT's Embeddings are these without token
  /// types (modeling_distilbert.py).
  constexpr void add_bert_embeddings() {
    add({"embeddings.word_embeddings.weight"}, {m_.vocab, m_.hidden}, tensor_kind::embedding, {}, 1,
        tp_split::vocab);
    add({"embeddings.position_embeddings.weight"}, {m_.max_positions, m_.hidden},
        tensor_kind::embedding);
    if (m_.encoder.token_types > 0)
      add({"embeddings.token_type_embeddings.weight"}, {m_.encoder.token_types, m_.hidden},
          tensor_kind::embedding);
    add_norm("embeddings.", "LayerNorm", m_.hidden);
  }

  /// A linear layer stored as [out, in] with an optional bias of `out`. A row-parallel layer's
  /// bias is replicated; every other split applies to the bias as to the weight.
  constexpr void add_linear(const char* prefix, const char* name, std::int64_t out, std::int64_t in,
                            tensor_kind kind, with_bias bias, layer_range layers = {},
                            tp_split split = tp_split::replicated, std::int64_t experts = 1) {
    add({prefix, name, ".weight"}, {out, in}, kind, layers, experts, split);
    if (bias == with_bias::yes)
      add({prefix, name, ".bias"}, {out}, kind, layers, experts,
          split == tp_split::input ? tp_split::replicated : split);
  }

  /// GPT-2's Conv1D: a weight stored [in, out] and a bias of `out`.
  constexpr void add_conv1d(const char* prefix, const char* name, std::int64_t in, std::int64_t out,
                            tensor_kind kind, layer_range layers, tp_split split) {
    add({prefix, name, ".weight"}, {in, out}, kind, layers, 1, split);
    ledger_[ledger_.size() - 1].input_major = true;
    add({prefix, name, ".bias"}, {out}, kind, layers, 1,
        split == tp_split::input ? tp_split::replicated : split);
  }

  [[nodiscard]] constexpr const model& m() const { return m_; }
  [[nodiscard]] constexpr layer_range all_layers() const { return {0, m_.layers}; }
  [[nodiscard]] constexpr tensor_ledger result() const { return ledger_; }

 private:
  const model& m_;
  tensor_ledger ledger_{};
};

constexpr with_bias attention_bias(const model& m) {
  return m.bias != bias_kind::none ? with_bias::yes : with_bias::no;
}
constexpr with_bias output_bias(const model& m) {
  return m.bias == bias_kind::attention || m.bias == bias_kind::all ? with_bias::yes
                                                                    : with_bias::no;
}
constexpr with_bias mlp_bias(const model& m) {
  return m.bias == bias_kind::all ? with_bias::yes : with_bias::no;
}

// Hugging Face Llama and its relatives (modeling_llama.py, modeling_mistral.py,
// modeling_mixtral.py, modeling_qwen2.py, modeling_gemma2.py, modeling_phi3.py,
// modeling_deepseek_v3.py).
constexpr void add_llama_attention(ledger_builder& b, const char* p) {
  const model& m = b.m();
  const auto all = b.all_layers();
  const std::int64_t h = m.hidden;
  if (m.is_mla()) {  // DeepSeek-V2 paper, section 2.1.2-2.1.3
    const mla_config& a = m.mla;
    const std::int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    if (a.q_lora_rank > 0) {
      b.add_linear(p, "self_attn.q_a_proj", a.q_lora_rank, h, tensor_kind::attention, with_bias::no,
                   all);
      b.add_norm(p, "self_attn.q_a_layernorm", a.q_lora_rank, all);
      b.add_linear(p, "self_attn.q_b_proj", m.heads * qk, a.q_lora_rank, tensor_kind::attention,
                   with_bias::no, all, tp_split::output);
    } else {
      b.add_linear(p, "self_attn.q_proj", m.heads * qk, h, tensor_kind::attention, with_bias::no,
                   all, tp_split::output);
    }
    b.add_linear(p, "self_attn.kv_a_proj_with_mqa", a.kv_lora_rank + a.qk_rope_head_dim, h,
                 tensor_kind::attention, with_bias::no, all);
    b.add_norm(p, "self_attn.kv_a_layernorm", a.kv_lora_rank, all);
    b.add_linear(p, "self_attn.kv_b_proj", m.heads * (a.qk_nope_head_dim + a.v_head_dim),
                 a.kv_lora_rank, tensor_kind::attention, with_bias::no, all, tp_split::output);
    b.add_linear(p, "self_attn.o_proj", h, m.heads * a.v_head_dim, tensor_kind::attention,
                 with_bias::no, all, tp_split::input);
    return;
  }
  const std::int64_t q = m.heads * m.head_dim;
  const std::int64_t kv = m.kv_heads * m.head_dim;
  if (m.family == family::phi3) {
    b.add_linear(p, "self_attn.qkv_proj", q + 2 * kv, h, tensor_kind::attention, attention_bias(m),
                 all, tp_split::qkv);
  } else {
    b.add_linear(p, "self_attn.q_proj", q, h, tensor_kind::attention, attention_bias(m), all,
                 tp_split::output);
    b.add_linear(p, "self_attn.k_proj", kv, h, tensor_kind::attention, attention_bias(m), all,
                 tp_split::kv);
    b.add_linear(p, "self_attn.v_proj", kv, h, tensor_kind::attention, attention_bias(m), all,
                 tp_split::kv);
  }
  b.add_linear(p, "self_attn.o_proj", h, q, tensor_kind::attention, output_bias(m), all,
               tp_split::input);
  if (m.qk_norm) {  // modeling_qwen3.py Qwen3Attention: q_norm, k_norm = RMSNorm(head_dim)
    b.add_norm(p, "self_attn.q_norm", m.head_dim, all);
    b.add_norm(p, "self_attn.k_norm", m.head_dim, all);
  }
  if (m.attention_sinks)  // modeling_gpt_oss.py GptOssAttention: sinks = Parameter(heads)
    b.add({p, "self_attn.sinks"}, {m.heads}, tensor_kind::attention, all, 1, tp_split::output);
}

constexpr void add_llama_mlp(ledger_builder& b, const char* p, std::int64_t width, tensor_kind kind,
                             layer_range layers) {
  const model& m = b.m();
  const with_bias bias = mlp_bias(m);
  const auto out = tp_split::output;
  if (m.mlp == mlp_kind::gelu) {
    b.add_linear(p, "up_proj", width, m.hidden, kind, bias, layers, out);
  } else if (m.family == family::phi3) {
    b.add_linear(p, "gate_up_proj", 2 * width, m.hidden, kind, bias, layers, out);
  } else {
    b.add_linear(p, "gate_proj", width, m.hidden, kind, bias, layers, out);
    b.add_linear(p, "up_proj", width, m.hidden, kind, bias, layers, out);
  }
  b.add_linear(p, "down_proj", m.hidden, width, kind, bias, layers, tp_split::input);
}

constexpr void add_llama_moe(ledger_builder& b, const char* p) {
  const model& m = b.m();
  const moe_config& e = m.moe;
  const layer_range moe_layers{e.first_dense_layers, m.layers - e.first_dense_layers};
  if (moe_layers.count == 0) return;
  const std::int64_t h = m.hidden;
  if (e.layout == moe_layout::gpt_oss) {
    // modeling_gpt_oss.py GptOssTopKRouter (weight and bias) and GptOssExperts: gate_up_proj
    // [E, h, 2f] and down_proj [E, f, h] are stored [in, out], each with a bias; one tensor over
    // the experts, listed one slice per expert.
    b.add_linear(p, "mlp.router", e.routed_experts, h, tensor_kind::router, with_bias::yes,
                 moe_layers);
    const std::int64_t f = e.expert_ffn;
    const std::int64_t n = e.routed_experts;
    b.add({p, "mlp.experts.gate_up_proj[{expert}]"}, {h, 2 * f}, tensor_kind::expert, moe_layers, n,
          tp_split::output);
    b.last().input_major = true;
    b.add({p, "mlp.experts.gate_up_proj_bias[{expert}]"}, {2 * f}, tensor_kind::expert, moe_layers,
          n, tp_split::output);
    b.add({p, "mlp.experts.down_proj[{expert}]"}, {f, h}, tensor_kind::expert, moe_layers, n,
          tp_split::input);
    b.last().input_major = true;
    b.add({p, "mlp.experts.down_proj_bias[{expert}]"}, {h}, tensor_kind::expert, moe_layers, n);
    return;
  }
  // Mixtral names its experts w1 (gate), w3 (up), w2 (down) under block_sparse_moe; DeepSeek and
  // Qwen3-MoE use mlp.experts.{e}.gate_proj/up_proj/down_proj (DeepSeek beside
  // mlp.shared_experts).
  if (e.layout == moe_layout::standard && e.shared_experts == 0 && !m.is_mla()) {
    b.add_linear(p, "block_sparse_moe.gate", e.routed_experts, h, tensor_kind::router,
                 with_bias::no, moe_layers);
    const char* ep = "block_sparse_moe.experts.{expert}.";
    b.add({p, ep, "w1.weight"}, {e.expert_ffn, h}, tensor_kind::expert, moe_layers,
          e.routed_experts, tp_split::output);
    b.add({p, ep, "w3.weight"}, {e.expert_ffn, h}, tensor_kind::expert, moe_layers,
          e.routed_experts, tp_split::output);
    b.add({p, ep, "w2.weight"}, {h, e.expert_ffn}, tensor_kind::expert, moe_layers,
          e.routed_experts, tp_split::input);
    return;
  }
  b.add_linear(p, "mlp.gate", e.routed_experts, h, tensor_kind::router, with_bias::no, moe_layers);
  if (e.router_score_bias) {
    // DeepSeek-V3 modeling: MoEGate.e_score_correction_bias, fp32, updated by the aux-loss-free
    // balancing rule (DeepSeek-V3 report, section 2.1.2), not by gradients.
    b.add_state({p, "mlp.gate.e_score_correction_bias"}, {e.routed_experts}, tensor_kind::router,
                32, moe_layers, checkpointed::yes);
  }
  b.add({p, "mlp.experts.{expert}.gate_proj.weight"}, {e.expert_ffn, h}, tensor_kind::expert,
        moe_layers, e.routed_experts, tp_split::output);
  b.add({p, "mlp.experts.{expert}.up_proj.weight"}, {e.expert_ffn, h}, tensor_kind::expert,
        moe_layers, e.routed_experts, tp_split::output);
  b.add({p, "mlp.experts.{expert}.down_proj.weight"}, {h, e.expert_ffn}, tensor_kind::expert,
        moe_layers, e.routed_experts, tp_split::input);
  if (e.shared_experts > 0) {
    // One MLP of width shared_experts x expert_ffn (DeepseekV3MoE.shared_experts).
    add_llama_mlp(b, "model.layers.{layer}.mlp.shared_experts.", e.shared_experts * e.expert_ffn,
                  tensor_kind::mlp, moe_layers);
  }
}

constexpr tensor_ledger llama_tensors(const model& m) {
  ledger_builder b(m);
  const auto all = b.all_layers();
  const char* p = "model.layers.{layer}.";
  b.add({"model.embed_tokens.weight"}, {m.vocab, m.hidden}, tensor_kind::embedding, {}, 1,
        tp_split::vocab);
  // In the order the decoder layer registers its modules (what named_parameters() and so the
  // optimizer's list follow): self_attn, mlp, then the norms.
  add_llama_attention(b, p);
  const std::int64_t dense_layers = m.is_moe() ? m.moe.first_dense_layers : m.layers;
  if (dense_layers > 0)
    add_llama_mlp(b, "model.layers.{layer}.mlp.", m.ffn, tensor_kind::mlp, {0, dense_layers});
  if (m.is_moe()) add_llama_moe(b, p);
  constexpr const char* norm_names[4] = {"input_layernorm", "post_attention_layernorm",
                                         "pre_feedforward_layernorm", "post_feedforward_layernorm"};
  for (std::int64_t i = 0; i < m.norms_per_layer; ++i) b.add_norm(p, norm_names[i], m.hidden, all);
  if (m.checkpoint_rotary_buffers) {
    b.add_state({p, "self_attn.rotary_emb.inv_freq"}, {m.head_dim / 2}, tensor_kind::attention, 32,
                all, checkpointed::yes);
  }
  b.add_final_norm_and_head("model.", "norm");
  return b.result();
}

// Hugging Face GPT-2 (modeling_gpt2.py): Conv1D weights are stored [in, out].
constexpr tensor_ledger gpt2_tensors(const model& m) {
  ledger_builder b(m);
  const auto all = b.all_layers();
  const std::int64_t h = m.hidden;
  const char* p = "transformer.h.{layer}.";
  b.add_gpt2_embeddings();
  b.add_norm(p, "ln_1", h, all);
  b.add_conv1d(p, "attn.c_attn", h, 3 * h, tensor_kind::attention, all, tp_split::qkv);
  b.add_conv1d(p, "attn.c_proj", h, h, tensor_kind::attention, all, tp_split::input);
  // The causal mask buffer, bool 1 x 1 x positions^2 per layer, is in the original checkpoint
  // (the Hub's 137M for the 124M model); transformers 5 has none (masking_utils): traced (5.17,
  // H100), a step starts with params and states (tests/validation/step_traces.json alive_at_start).
  b.add_state({p, "attn.bias"}, {1, 1, m.max_positions, m.max_positions}, tensor_kind::attention, 8,
              all, checkpointed::yes);
  b.last().in_memory = false;
  b.add_norm(p, "ln_2", h, all);
  b.add_conv1d(p, "mlp.c_fc", h, m.ffn, tensor_kind::mlp, all, tp_split::output);
  b.add_conv1d(p, "mlp.c_proj", m.ffn, h, tensor_kind::mlp, all, tp_split::input);
  b.add_final_norm_and_head("transformer.", "ln_f");
  return b.result();
}

// Hugging Face Falcon (modeling_falcon.py): fused query_key_value with kv_heads K and V heads.
constexpr tensor_ledger falcon_tensors(const model& m) {
  ledger_builder b(m);
  const auto all = b.all_layers();
  const std::int64_t h = m.hidden;
  const with_bias bias = attention_bias(m);
  const char* p = "transformer.h.{layer}.";
  b.add({"transformer.word_embeddings.weight"}, {m.vocab, h}, tensor_kind::embedding, {}, 1,
        tp_split::vocab);
  if (m.norms_per_layer == 1) {
    b.add_norm(p, "input_layernorm", h, all);
  } else {  // new_decoder_architecture: separate norms for the attention and MLP inputs
    b.add_norm(p, "ln_attn", h, all);
    b.add_norm(p, "ln_mlp", h, all);
  }
  b.add_linear(p, "self_attention.query_key_value", (m.heads + 2 * m.kv_heads) * m.head_dim, h,
               tensor_kind::attention, bias, all, tp_split::qkv);
  b.add_linear(p, "self_attention.dense", h, h, tensor_kind::attention, bias, all, tp_split::input);
  b.add_linear(p, "mlp.dense_h_to_4h", m.ffn, h, tensor_kind::mlp, bias, all, tp_split::output);
  b.add_linear(p, "mlp.dense_4h_to_h", h, m.ffn, tensor_kind::mlp, bias, all, tp_split::input);
  b.add_final_norm_and_head("transformer.", "ln_f");
  return b.result();
}

/// The module names of a BERT-style post-LN block: Q, K, V and the attention output, its norm,
/// the MLP's two linears and their norm.
struct post_ln_block_names {
  const char *query, *key, *value, *attention_output, *attention_norm, *mlp_in, *mlp_out, *mlp_norm;
};

/// A post-LN encoder block of every layer: its linears with biases, split as Megatron splits them.
constexpr void add_post_ln_block(ledger_builder& b, const char* p, const post_ln_block_names& n) {
  const model& m = b.m();
  const std::int64_t h = m.hidden;
  const auto all = b.all_layers();
  const tensor_kind attention = tensor_kind::attention;
  b.add_linear(p, n.query, h, h, attention, with_bias::yes, all, tp_split::output);
  b.add_linear(p, n.key, h, h, attention, with_bias::yes, all, tp_split::kv);
  b.add_linear(p, n.value, h, h, attention, with_bias::yes, all, tp_split::kv);
  b.add_linear(p, n.attention_output, h, h, attention, with_bias::yes, all, tp_split::input);
  b.add_norm(p, n.attention_norm, h, all);
  b.add_linear(p, n.mlp_in, m.ffn, h, tensor_kind::mlp, with_bias::yes, all, tp_split::output);
  b.add_linear(p, n.mlp_out, h, m.ffn, tensor_kind::mlp, with_bias::yes, all, tp_split::input);
  b.add_norm(p, n.mlp_norm, h, all);
}

// Hugging Face BertModel (modeling_bert.py), post-LN, with its pooler.
constexpr tensor_ledger bert_tensors(const model& m) {
  ledger_builder b(m);
  const std::int64_t h = m.hidden;
  b.add_bert_embeddings();
  add_post_ln_block(b, "encoder.layer.{layer}.",
                    {"attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
                     "output.dense", "output.LayerNorm"});
  if (m.encoder.pooler) b.add_linear("", "pooler.dense", h, h, tensor_kind::head, with_bias::yes);
  // BertForSequenceClassification's head, when the model has classes; BigBird's
  // (modeling_big_bird.py BigBirdClassificationHead) has a dense layer before it.
  if (m.encoder.classes > 0 && m.encoder.classifier_dense) {
    b.add_linear("", "classifier.dense", h, h, tensor_kind::head, with_bias::yes);
    b.add_linear("", "classifier.out_proj", m.encoder.classes, h, tensor_kind::head,
                 with_bias::yes);
  } else if (m.encoder.classes > 0) {
    b.add_linear("", "classifier", m.encoder.classes, h, tensor_kind::head, with_bias::yes);
  }
  return b.result();
}

// Hugging Face DistilBertModel (modeling_distilbert.py): BERT's post-LN block without token types
// or pooler; DistilBertForSequenceClassification adds pre_classifier and classifier.
constexpr tensor_ledger distilbert_tensors(const model& m) {
  ledger_builder b(m);
  const std::int64_t h = m.hidden;
  b.add_bert_embeddings();
  add_post_ln_block(b, "transformer.layer.{layer}.",
                    {"attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin",
                     "sa_layer_norm", "ffn.lin1", "ffn.lin2", "output_layer_norm"});
  if (m.encoder.classes > 0) {
    b.add_linear("", "pre_classifier", h, h, tensor_kind::head, with_bias::yes);
    b.add_linear("", "classifier", m.encoder.classes, h, tensor_kind::head, with_bias::yes);
  }
  return b.result();
}

// Hugging Face GPTBigCode (modeling_gpt_bigcode.py): GPT-2's block with nn.Linear weights
// [out, in] and one c_attn of hidden + 2 x kv_heads x head_dim outputs (MQA: one K and V head).
constexpr tensor_ledger gpt_bigcode_tensors(const model& m) {
  ledger_builder b(m);
  const auto all = b.all_layers();
  const std::int64_t h = m.hidden;
  const char* p = "transformer.h.{layer}.";
  b.add_gpt2_embeddings();
  b.add_norm(p, "ln_1", h, all);
  b.add_linear(p, "attn.c_attn", h + 2 * m.kv_heads * m.head_dim, h, tensor_kind::attention,
               with_bias::yes, all, tp_split::qkv);
  b.add_linear(p, "attn.c_proj", h, h, tensor_kind::attention, with_bias::yes, all,
               tp_split::input);
  b.add_norm(p, "ln_2", h, all);
  b.add_linear(p, "mlp.c_fc", m.ffn, h, tensor_kind::mlp, with_bias::yes, all, tp_split::output);
  b.add_linear(p, "mlp.c_proj", h, m.ffn, tensor_kind::mlp, with_bias::yes, all, tp_split::input);
  b.add_final_norm_and_head("transformer.", "ln_f");
  return b.result();
}

// torchvision VisionTransformer (torchvision/models/vision_transformer.py).
constexpr tensor_ledger vit_tensors(const model& m) {
  ledger_builder b(m);
  const auto all = b.all_layers();
  const std::int64_t h = m.hidden;
  const encoder_config& e = m.encoder;
  const std::int64_t patches = (e.image_size / e.patch_size) * (e.image_size / e.patch_size);
  const char* p = "encoder.layers.encoder_layer_{layer}.";
  b.add({"class_token"}, {1, 1, h}, tensor_kind::embedding);
  b.add({"conv_proj.weight"}, {h, e.channels, e.patch_size, e.patch_size}, tensor_kind::embedding);
  b.add({"conv_proj.bias"}, {h}, tensor_kind::embedding);
  b.add({"encoder.pos_embedding"}, {1, patches + 1, h}, tensor_kind::embedding);
  b.add_norm(p, "ln_1", h, all);
  b.add({p, "self_attention.in_proj_weight"}, {3 * h, h}, tensor_kind::attention, all, 1,
        tp_split::qkv);
  b.add({p, "self_attention.in_proj_bias"}, {3 * h}, tensor_kind::attention, all, 1, tp_split::qkv);
  b.add_linear(p, "self_attention.out_proj", h, h, tensor_kind::attention, with_bias::yes, all,
               tp_split::input);
  b.add_norm(p, "ln_2", h, all);
  b.add_linear(p, "mlp.0", m.ffn, h, tensor_kind::mlp, with_bias::yes, all, tp_split::output);
  b.add_linear(p, "mlp.3", h, m.ffn, tensor_kind::mlp, with_bias::yes, all, tp_split::input);
  b.add_norm("encoder.", "ln", h);
  b.add_linear("", "heads.head", e.classes, h, tensor_kind::head, with_bias::yes);
  return b.result();
}

}  // namespace detail

/// Every tensor of `m`, grouped over layers and experts.
constexpr tensor_ledger tensors(const model& m) {
  validated(m);
  switch (m.family) {
    case family::gpt2:
      return detail::gpt2_tensors(m);
    case family::falcon:
      return detail::falcon_tensors(m);
    case family::bert:
      return detail::bert_tensors(m);
    case family::vit:
      return detail::vit_tensors(m);
    case family::distilbert:
      return detail::distilbert_tensors(m);
    case family::gpt_bigcode:
      return detail::gpt_bigcode_tensors(m);
    case family::llama:
    case family::phi3:
      break;
  }
  return detail::llama_tensors(m);
}

// --- What derives from the ledger. ---

/// Parameters: elements of the tensors learned by gradients (the published parameter count).
constexpr std::int64_t parameters(const tensor_ledger& ledger) {
  std::int64_t n = 0;
  for (const tensor_group& g : ledger)
    if (g.role == tensor_role::parameter) n = detail::checked_add(n, g.total_elements());
  return n;
}

/// Parameters of one kind.
constexpr std::int64_t parameters(const tensor_ledger& ledger, tensor_kind kind) {
  std::int64_t n = 0;
  for (const tensor_group& g : ledger)
    if (g.role == tensor_role::parameter && g.kind == kind)
      n = detail::checked_add(n, g.total_elements());
  return n;
}

/// Parameter tensors: what an optimizer iterates over (per-tensor state such as Adam's step).
constexpr std::int64_t parameter_tensors(const tensor_ledger& ledger) {
  std::int64_t n = 0;
  for (const tensor_group& g : ledger)
    if (g.role == tensor_role::parameter) n = detail::checked_add(n, g.tensor_count());
  return n;
}

/// Elements a checkpoint stores: the parameters plus the persistent state tensors.
constexpr std::int64_t checkpoint_elements(const tensor_ledger& ledger) {
  std::int64_t n = 0;
  for (const tensor_group& g : ledger)
    if (g.in_checkpoint) n = detail::checked_add(n, g.total_elements());
  return n;
}

/// Tensors a checkpoint stores.
constexpr std::int64_t checkpoint_tensors(const tensor_ledger& ledger) {
  std::int64_t n = 0;
  for (const tensor_group& g : ledger)
    if (g.in_checkpoint) n = detail::checked_add(n, g.tensor_count());
  return n;
}

/// Parameters of transformer layer `layer` (embeddings, final norm and head are outside layers).
constexpr std::int64_t layer_parameters(const tensor_ledger& ledger, std::int64_t layer) {
  std::int64_t n = 0;
  for (const tensor_group& g : ledger)
    if (g.role == tensor_role::parameter && g.in_layer(layer))
      n = detail::checked_add(n, detail::checked_mul(g.elements(), g.experts));
  return n;
}

struct layer_size {
  std::int64_t layer = 0;
  std::int64_t parameters = 0;
  friend constexpr bool operator==(const layer_size&, const layer_size&) = default;
};

/// The layer with the most parameters (the first of equals). A layer's parameters change only at
/// the edges of the ledger's layer groups, so only layer 0 and the edges are compared.
constexpr layer_size largest_layer(const tensor_ledger& ledger, std::int64_t layers) {
  layer_size largest{};
  auto consider = [&](std::int64_t layer) {
    if (layer < 0 || layer >= layers) return;
    const std::int64_t n = layer_parameters(ledger, layer);
    if (n > largest.parameters || (n == largest.parameters && n > 0 && layer < largest.layer))
      largest = {layer, n};
  };
  consider(0);
  for (const tensor_group& g : ledger) {
    if (g.layer_count == 0) continue;
    consider(g.first_layer);
    consider(detail::checked_add(g.first_layer, g.layer_count));
  }
  return largest;
}

/// Parameters one token passes through: every parameter except the routed experts, of which each
/// MoE layer uses top_k (Mixtral paper, section 2: "13B active parameters").
constexpr std::int64_t active_parameters(const model& m, const tensor_ledger& ledger) {
  std::int64_t n = 0;
  for (const tensor_group& g : ledger) {
    if (g.role != tensor_role::parameter) continue;
    if (g.kind == tensor_kind::expert) {
      const std::int64_t layers = g.layer_count > 0 ? g.layer_count : 1;
      n = detail::checked_add(
          n, detail::checked_mul(g.elements(), detail::checked_mul(layers, m.moe.top_k)));
    } else {
      n = detail::checked_add(n, g.total_elements());
    }
  }
  return n;
}

/// One tensor of the ledger, expanded, with its indices filled into its name.
struct tensor {
  std::string name;
  const tensor_group* group;
  std::int64_t layer;   ///< -1 outside the layers
  std::int64_t expert;  ///< -1 for a tensor that is not an expert's
};

namespace detail {
inline std::string expand_name(const tensor_name& pattern, std::int64_t layer,
                               std::int64_t expert) {
  std::string name = pattern.str();
  auto fill = [&name](const std::string& key, std::int64_t value) {
    if (const auto at = name.find(key); at != std::string::npos)
      name.replace(at, key.size(), std::to_string(value));
  };
  fill("{layer}", layer);
  fill("{expert}", expert);
  return name;
}
}  // namespace detail

/// Calls `visit(const tensor&)` for every tensor of the ledger, one by one, in ledger order.
template <class Visitor>
void for_each_tensor(const tensor_ledger& ledger, Visitor&& visit) {
  for (const tensor_group& g : ledger) {
    const std::int64_t layers = g.layer_count > 0 ? g.layer_count : 1;
    for (std::int64_t l = 0; l < layers; ++l) {
      const std::int64_t layer = g.layer_count > 0 ? g.first_layer + l : -1;
      for (std::int64_t e = 0; e < g.experts; ++e) {
        const std::int64_t expert = g.kind == tensor_kind::expert ? e : -1;
        visit(tensor{detail::expand_name(g.name, layer, expert), &g, layer, expert});
      }
    }
  }
}

}  // namespace vramfit
