// SPDX-License-Identifier: MIT
// Whose module code runs the model: Hugging Face's, or a framework's own Llama 3 (torchtitan,
// torchtune, litgpt, Megatron-Core with Transformer Engine), torchtitan's Qwen3 and Megatron's
// MoE layer, and what each does unlike Hugging Face's in the tensors a block saves, with the files
// that say so (docs/sources.md#model-code).
#pragma once

#include <string>

#include "error.hpp"
#include "finetune.hpp"
#include "model.hpp"

namespace vramfit {

/// Whose module code runs the model, for what each block's operators save. Each is modelled for
/// a dense Llama 3 (RMSNorm, SwiGLU, rotary, grouped-query attention) trained in full, torchtitan
/// also for its Qwen3, dense and MoE, Megatron-Core also for QK norms and its MoE layer as its
/// Mixtral recipe runs it; what differs from Hugging Face's is read in each code's
/// files (docs/sources.md#model-code).
enum class model_code : unsigned char {
  hf,  ///< Hugging Face transformers' modeling_<family>.py
  /// torchtitan's Llama 3 and Qwen3 of 2026 (models/common at b5bcd76) on torch 2.9 or later:
  /// nn.RMSNorm runs the fused kernel, K and V keep their grouped heads, RoPE gathers table rows
  /// per layer; Qwen3's MoE layers run models/common/moe.py.
  torchtitan,
  /// torchtitan's Llama 3 of its December 2024 benchmarks (models/llama/model.py at 9dec370):
  /// K and V repeated to every query head before SDPA, its own RMSNorm saving what HF's does.
  torchtitan_2024,
  /// torchtune's modules (bd2a0fc): K and V expanded to every query head before SDPA.
  torchtune,
  /// litgpt's model.py (2685705): K and V repeated before SDPA, and RMSNorm multiplies its
  /// weight in fp32, keeping the normalized input in fp32.
  litgpt,
  /// Megatron-Core's Transformer Engine spec (d98e8a6, TE d0067d0): fused norm-and-linear
  /// layers that keep their input, the normalized input and the rstd; fused RoPE; cuDNN attention
  /// with grouped K and V; the fused SwiGLU keeping the gate-up output; in MoE layers the router,
  /// the alltoall dispatcher's permute and grouped linears around a weighted SwiGLU.
  megatron_te,
};

namespace detail {
/// What a model code's block does unlike Hugging Face's.
struct code_traits {
  const char* name = "hf";
  bool repeats_kv = false;       ///< K and V copied to every query head before SDPA
  bool fused_norm = false;       ///< RMSNorm keeps its input and the fp32 rstd only
  bool fp32_normalized = false;  ///< RMSNorm keeps its normalized input in fp32
  bool rope_rows = false;        ///< RoPE gathers its complex64 table rows in every layer
  bool fused_swiglu = false;     ///< SwiGLU keeps the gate-up output, not its parts
  /// RoPE reads slices of a module buffer built once: no cos/sin made per forward.
  bool rotary_buffer = false;
  /// Attention by FlexAttention's compiled kernels (torchtitan models/common/config_utils.py
  /// get_attention_config: flex, the default), not by SDPA's fused ones.
  bool flex_attention = false;
};
constexpr code_traits traits_of(model_code c) {
  switch (c) {
    case model_code::torchtitan:
      return {.name = "torchtitan",
              .fused_norm = true,
              .rope_rows = true,
              .rotary_buffer = true,
              .flex_attention = true};
    case model_code::torchtitan_2024:
      return {.name = "torchtitan-2024", .repeats_kv = true, .rotary_buffer = true};
    case model_code::torchtune:
      return {.name = "torchtune", .repeats_kv = true, .rotary_buffer = true};
    case model_code::litgpt:
      return {.name = "litgpt", .repeats_kv = true, .fp32_normalized = true, .rotary_buffer = true};
    case model_code::megatron_te:
      return {.name = "megatron-te", .fused_norm = true, .fused_swiglu = true};
    default:
      return {};
  }
}

/// What a model code besides Hugging Face's is modelled for.
constexpr const char* modelled_models(model_code c) {
  switch (c) {
    case model_code::torchtitan:
      return "a Llama 3, a Qwen3, dense or MoE, or a DeepSeek-V2 or V3 (models/llama3, "
             "models/qwen3, models/deepseek_v3), trained in full";
    case model_code::megatron_te:
      return "a Llama 3, or with QK norms and a softmax top-k router over routed experts only a "
             "Qwen3 or Mixtral MoE (RMSNorm, SwiGLU, rotary positions, full attention, trained in "
             "full)";
    default:
      return "a dense Llama 3 only (RMSNorm, SwiGLU, rotary positions, full attention, trained in "
             "full)";
  }
}

namespace rules {
[[noreturn]] inline void model_code_runs_what_it_models(model_code c, const model& m,
                                                        const char* off) {
  raise(std::string("model code ") + traits_of(c).name + " is modelled for " + modelled_models(c) +
        ": " + m.name + " " + off);
}
}  // namespace rules

/// torchtitan's Qwen3 (models/qwen3): a Llama 3 block with per-head QK norms, cos/sin RoPE and,
/// in its MoE flavors, models/common/moe.py in every layer.
constexpr bool torchtitan_qwen3(model_code c, const model& m) {
  return c == model_code::torchtitan && m.qk_norm;
}

/// torchtitan's DeepSeek (models/deepseek_v3, whose flavors take V2's shapes too: "16B" is
/// V2-Lite's, "236B" V2's): MLA, dense layers first, then models/common/moe.py with shared
/// experts, V3's sigmoid router or V2's softmax one.
constexpr bool torchtitan_deepseek(model_code c, const model& m) {
  return c == model_code::torchtitan && m.is_mla() && m.is_moe() &&
         m.moe.layout == moe_layout::standard;
}

/// torchtitan's MoE layers (models/common/moe.py): Qwen3's and DeepSeek's.
constexpr bool torchtitan_moe(model_code c, const model& m) {
  return m.is_moe() && (torchtitan_qwen3(c, m) || torchtitan_deepseek(c, m));
}

/// Whether code `c` holds a layer's routed experts as one tensor per weight over the rank's
/// experts, [experts, out, in], rather than one per expert: torchtitan's GroupedExperts
/// (models/common/moe.py: w1_EFD, w2_EDF, w3_EFD, each nn.Parameter(torch.empty(num_experts,
/// ...))). Its gradients, optimizer states and allocator blocks follow.
constexpr bool stacks_experts(model_code c) {
  return c == model_code::torchtitan;
}

/// Whether torchtitan's router renormalizes the top-k scores (TokenChoiceTopKRouter's
/// route_norm): its Qwen3 and DeepSeek-V3 flavors do, V2's ("16B", "236B": the default False,
/// as V2's norm_topk_prob) do not. V3 is the DeepSeek with a score-correction bias.
constexpr bool torchtitan_route_norm(const model& m) {
  return !m.is_mla() || m.moe.router_score_bias;
}

/// What keeps `m` trained as `kind` from being what model code `c` is modelled for, or nullptr.
constexpr const char* unlike_modelled(model_code c, const model& m, finetune_kind kind) {
  if (m.family != family::llama || m.is_encoder()) return "is not a Llama-family decoder";
  const bool deepseek = torchtitan_deepseek(c, m);
  if (m.is_mla() && !deepseek) return "has MLA";
  // torchtitan's Qwen3 MoE and Megatron's Mixtral and Qwen3-MoE recipes: a softmax router,
  // routed experts only, in every layer.
  const moe_config& e = m.moe;
  const bool routes = torchtitan_qwen3(c, m) || c == model_code::megatron_te;
  if (m.is_moe() && !deepseek &&
      !(routes && e.layout != moe_layout::gpt_oss && e.shared_experts == 0 &&
        e.first_dense_layers == 0 && !e.router_score_bias))
    return "has experts";
  if (m.norm != norm_kind::rmsnorm || m.norm_plus_one || m.norms_per_layer != 2)
    return "has other norms";
  if (m.mlp != mlp_kind::swiglu) return "has another MLP";
  if (m.positions != position_kind::rotary) return "has other positions";
  if (m.sliding_window > 0) return "has a sliding window";
  if (m.qk_norm && c != model_code::torchtitan && c != model_code::megatron_te)
    return "has QK norms";
  if (m.attention_sinks || m.attention_softcap || m.logit_softcap)
    return "has attention sinks or soft-capping";
  if (m.bias != bias_kind::none) return "has biases";
  if (kind != finetune_kind::full) return "is fine-tuned in part or with LoRA";
  return nullptr;
}

/// What SDPA's flash, cuDNN and memory-efficient kernels keep besides Q, K and V.
inline constexpr char sdpa_backward_source[] =
    "torch SDPA: _scaled_dot_product_flash_attention_backward(grad_out, query, key, value, out, "
    "logsumexp, ...)";

/// Where a model code besides Hugging Face's makes each tensor its block keeps (its norms, Q, K
/// and V, the linears' inputs and the gated MLP's parts): docs/sources.md#model-code.
struct code_sources {
  const char *norm_input, *norm_rstd, *norm_normalized;
  const char *attention_input, *query, *key, *value, *attention_output, *lse;
  const char *mlp_input, *gate, *activation, *up, *down_input;
};
constexpr code_sources sources_of(model_code c) {
  switch (c) {
    case model_code::torchtitan:  // nn.RMSNorm: torch >= 2.9 runs _fused_rms_norm (#153666)
      return {
          "torchtitan models/common/nn_modules.py RMSNorm(nn.RMSNorm); derivatives.yaml "
          "_fused_rms_norm: _fused_rms_norm_backward(grad, input, ...)",
          "derivatives.yaml _fused_rms_norm: _fused_rms_norm_backward(..., result1, ...)",
          nullptr,
          "torchtitan models/common/attention.py FusedQKVLinear.forward: self.wqkv(x)",
          "torchtitan models/common/rope.py ComplexRoPE.apply_rotary_emb: "
          "view_as_real(xq_ * rope_cache).flatten(-2).type_as(query)",
          "torchtitan models/common/rope.py ComplexRoPE.apply_rotary_emb: xk_out.type_as(key)",
          "torchtitan models/common/attention.py FusedQKVLinear.forward: xv ... .contiguous()",
          "torchtitan models/common/attention.py GQAttention.forward: self.wo(out_TD)",
          "torch _higher_order_ops/flex_attention.py FlexAttentionAutogradOp.forward: "
          "save_values_for_backward(query, key, value, out, logsumexp, ...) (torchtitan "
          "models/common/config_utils.py get_attention_config: flex, the default)",
          "torchtitan models/common/feed_forward.py FeedForward.forward: self.w1(x), self.w3(x)",
          "torchtitan models/common/feed_forward.py FeedForward.forward: F.silu(self.w1(x))",
          "torchtitan models/common/feed_forward.py FeedForward.forward: F.silu(self.w1(x)) * "
          "self.w3(x)",
          "torchtitan models/common/feed_forward.py FeedForward.forward: self.w3(x)",
          "torchtitan models/common/feed_forward.py FeedForward.forward: "
          "self.w2(F.silu(self.w1(x)) "
          "* self.w3(x))"};
    case model_code::torchtitan_2024:  // models/llama/model.py and models/norms.py at 9dec370
      return {
          "torchtitan models/norms.py RMSNorm.forward: self._norm(x.float())",
          "torchtitan models/norms.py RMSNorm._norm: torch.rsqrt(x.pow(2).mean(-1, "
          "keepdim=True) + self.eps)",
          "torchtitan models/norms.py RMSNorm.forward: output * self.weight",
          "torchtitan models/llama/model.py Attention.forward: self.wq(x), self.wk(x), "
          "self.wv(x)",
          "torchtitan models/llama/model.py apply_rotary_emb: view_as_real(xq_ * "
          "freqs_cis).flatten(3).type_as(xq)",
          "torchtitan models/llama/model.py Attention.forward: keys = repeat_kv(xk, self.n_rep)",
          "torchtitan models/llama/model.py Attention.forward: values = repeat_kv(xv, "
          "self.n_rep)",
          "torchtitan models/llama/model.py Attention.forward: self.wo(output)",
          sdpa_backward_source,
          "torchtitan models/llama/model.py FeedForward.forward: self.w1(x), self.w3(x)",
          "torchtitan models/llama/model.py FeedForward.forward: F.silu(self.w1(x))",
          "torchtitan models/llama/model.py FeedForward.forward: F.silu(self.w1(x)) * "
          "self.w3(x)",
          "torchtitan models/llama/model.py FeedForward.forward: self.w3(x)",
          "torchtitan models/llama/model.py FeedForward.forward: self.w2(F.silu(self.w1(x)) * "
          "self.w3(x))"};
    case model_code::torchtune:
      return {"torchtune modules/rms_norm.py RMSNorm.forward: x_fp32 = x.float()",
              "torchtune modules/rms_norm.py RMSNorm.forward: torch.rsqrt(x_fp32.pow(2).mean(-1, "
              "keepdim=True) + self.eps)",
              "torchtune modules/rms_norm.py RMSNorm.forward: x_normed * self.scale",
              "torchtune modules/attention.py MultiHeadAttention.forward: self.q_proj(x), "
              "self.k_proj(y), self.v_proj(y)",
              "torchtune modules/position_embeddings.py RotaryPositionalEmbeddings.forward: "
              "x_out.type_as(x)",
              "torchtune modules/attention.py MultiHeadAttention.forward: "
              "k.unsqueeze(2).expand(expand_shape).flatten(1, 2)",
              "torchtune modules/attention.py MultiHeadAttention.forward: "
              "v.unsqueeze(2).expand(expand_shape).flatten(1, 2)",
              "torchtune modules/attention.py MultiHeadAttention.forward: "
              "self.output_proj(output)",
              sdpa_backward_source,
              "torchtune modules/feed_forward.py FeedForward.forward: self.w1(x), self.w3(x)",
              "torchtune modules/feed_forward.py FeedForward.forward: self.activation(self.w1(x))",
              "torchtune modules/feed_forward.py FeedForward.forward: h * self.w3(x)",
              "torchtune modules/feed_forward.py FeedForward.forward: self.w3(x)",
              "torchtune modules/feed_forward.py FeedForward.forward: self.w2(h)"};
    case model_code::litgpt:
      return {"litgpt/model.py RMSNorm.forward: x = x.float()",
              "litgpt/model.py RMSNorm.forward: torch.rsqrt(norm_x + self.eps)",
              "litgpt/model.py RMSNorm.forward: (x_normed * weight.float()).to(dtype=dtype)",
              "litgpt/model.py CausalSelfAttention.forward: qkv = self.qkv(x)",
              "litgpt/model.py CausalSelfAttention.forward: q = torch.cat((q_roped, q[..., "
              "self.config.rope_n_elem :]), dim=-1)",
              "litgpt/model.py CausalSelfAttention.forward: k = k.repeat_interleave(q_per_kv, "
              "dim=1)",
              "litgpt/model.py CausalSelfAttention.forward: v = v.repeat_interleave(q_per_kv, "
              "dim=1)",
              "litgpt/model.py CausalSelfAttention.forward: self.proj(y)",
              sdpa_backward_source,
              "litgpt/model.py LLaMAMLP.forward: self.fc_1(x), self.fc_2(x)",
              "litgpt/model.py LLaMAMLP.forward: torch.nn.functional.silu(x_fc_1)",
              "litgpt/model.py LLaMAMLP.forward: torch.nn.functional.silu(x_fc_1) * x_fc_2",
              "litgpt/model.py LLaMAMLP.forward: x_fc_2 = self.fc_2(x)",
              "litgpt/model.py LLaMAMLP.forward: self.proj(x)"};
    default:  // megatron-te: the fused SwiGLU's parts are its own (mlp_block)
      return {
          "TransformerEngine module/layernorm_linear.py _LayerNormLinear.forward: "
          "ctx.save_for_backward(inputmat, ...)",
          "TransformerEngine csrc/extensions/normalization.cpp rmsnorm_fwd: rsigma (fp32), "
          "saved by layernorm_linear.py _LayerNormLinear.forward",
          nullptr,
          "TransformerEngine module/layernorm_linear.py _LayerNormLinear.forward: ln_out "
          "saved, sequence-sharded (linear_qkv)",
          "TransformerEngine attention/rope.py FusedRoPEFunc.forward output; "
          "dot_product_attention/backends.py FusedAttnFunc.forward: save_for_backward(q, ...)",
          "TransformerEngine dot_product_attention/backends.py FusedAttnFunc.forward: "
          "save_for_backward(..., k, ...) (num_gqa_groups heads)",
          "TransformerEngine dot_product_attention/utils.py get_qkv_layout: v made "
          "contiguous; saved by backends.py FusedAttnFunc.forward",
          "TransformerEngine module/linear.py _Linear.forward: saved_inputmat = inputmat "
          "(linear_proj)",
          "TransformerEngine common/fused_attn/fused_attn_f16_arbitrary_seqlen.cu: softmax "
          "statistics [b, h, s, 1] fp32, saved by backends.py FusedAttnFunc.forward",
          "TransformerEngine module/layernorm_linear.py _LayerNormLinear.forward: ln_out "
          "saved, sequence-sharded (linear_fc1)",
          nullptr,
          nullptr,
          nullptr,
          nullptr};
  }
}

}  // namespace detail

}  // namespace vramfit
