// SPDX-License-Identifier: MIT
// Inference memory: weights in the layout a runtime keeps them (bitsandbytes, GPTQ/AWQ, FP8,
// MXFP4 experts), the KV cache (GQA/MQA, MLA latents, sliding windows, paged blocks, quantized
// KV), working memory, a vLLM-style serving budget, and the loading peak.
#pragma once

#include <cstdint>

#include "activations.hpp"
#include "detail/name.hpp"
#include "detail/search.hpp"
#include "detail/tag.hpp"
#include "gpu.hpp"
#include "ledger.hpp"
#include "overheads.hpp"
#include "training.hpp"

namespace vramfit {

/// Which tensors a runtime quantizes, and to what.
struct weight_layout {
  char name[28] = {};
  element_format linear{};    ///< the linear weights of the layers
  element_format other{};     ///< embeddings, norms, biases, head (and routers unless quantized)
  bool experts_only = false;  ///< only routed experts take `linear` (gpt-oss MXFP4)
  bool quantize_routers = false;  ///< bitsandbytes converts every nn.Linear but the head
  /// GPTQ with act-order keeps g_idx, one int32 per input column of each quantized weight.
  bool act_order_index = false;
  /// bitsandbytes quantizes each 16-bit checkpoint weight on the GPU as it loads (transformers
  /// integrations/bitsandbytes.py: Params4bit / Int8Params .to(device)); the others load as
  /// stored.
  bool quantized_at_load = false;
  /// What the checkpoint's skip list changes (hf_weight_layout reads it): modules kept in
  /// `other`'s format, and the head converted.
  quantization_exceptions exceptions{};
};

template <class T>
concept WeightLayout = detail::tag_of<T, weight_layout>;

namespace detail {
/// weight_layout's flags, and what ends its name.
struct layout_flags {
  bool experts_only = false;
  bool quantize_routers = false;
  bool act_order_index = false;
  const char* suffix = "";
};

constexpr weight_layout named_layout(const char* name, const element_format& linear,
                                     const element_format& other, layout_flags flags = {}) {
  // The layouts that convert every nn.Linear are bitsandbytes', which quantizes as it loads.
  weight_layout w{.linear = linear,
                  .other = other,
                  .experts_only = flags.experts_only,
                  .quantize_routers = flags.quantize_routers,
                  .act_order_index = flags.act_order_index,
                  .quantized_at_load = flags.quantize_routers};
  copy_name(w.name, name, flags.suffix);
  return w;
}
/// One fp32 scale per row: blocks longer than any row.
inline constexpr std::int64_t whole_row = std::int64_t{1} << 40;
}  // namespace detail

/// Every tensor in one format (bf16, fp16, fp32 checkpoints).
template <StorageDtype D = bf16>
struct plain_weights {
  static constexpr weight_layout value = detail::named_layout(D::value.name, D::value, D::value);
};

/// bitsandbytes LLM.int8 (Dettmers et al. 2022): int8 weights with one fp32 scale per output row
/// (Int8Params.SCB); everything that is not an nn.Linear stays in fp16.
struct bnb_int8 {
  static constexpr weight_layout value = detail::named_layout(
      "bnb-int8",
      element_format{"int8+SCB", 8, {detail::whole_row, 32, 0}, {}, 0, block_layout::per_row},
      fp16::value, {.quantize_routers = true});
};

/// bitsandbytes 4-bit: NF4 (with double quantization by default; also nf4, fp4,
/// fp4_double_quant) for every nn.Linear but the head, bf16 for the rest (QLoRA's load_in_4bit
/// with bnb_4bit_compute_dtype=bf16). Named after its format: "bnb-nf4+dq".
template <StorageDtype Quantized = nf4_double_quant, StorageDtype Other = bf16>
struct bnb_4bit {
  static constexpr weight_layout value =
      detail::named_layout("bnb-", Quantized::value, Other::value,
                           {.quantize_routers = true, .suffix = Quantized::value.name});
};

/// GPTQ (AutoGPTQ QuantLinear): `Bits`-bit weights in groups of `Group` with fp16 scales and
/// packed zeros, the attention and MLP linears only; with act-order also g_idx (int32 per
/// input column).
template <int Bits = 4, int Group = 128, bool ActOrder = false>
struct gptq {
  static constexpr weight_layout value = detail::named_layout(
      "gptq", group_quantized<Bits, Group>::value, fp16::value, {.act_order_index = ActOrder});
};

/// AWQ (AutoAWQ WQLinear_GEMM): 4-bit weights, group 128, fp16 scales and packed zeros.
template <int Group = 128>
struct awq {
  static constexpr weight_layout value =
      detail::named_layout("awq", group_quantized<4, Group>::value, fp16::value);
};

/// FP8 E4M3 linears with one fp32 scale per tensor (per_channel = false) or per output row.
template <bool PerChannel = false>
struct fp8_weights {
  static constexpr weight_layout value =
      detail::named_layout(PerChannel ? "fp8-per-channel" : "fp8-per-tensor",
                           PerChannel ? element_format{"fp8+row-scale",
                                                       8,
                                                       {detail::whole_row, 32, 0},
                                                       {},
                                                       0,
                                                       block_layout::per_row}
                                      : element_format{"fp8+tensor-scale", 8, {}, {}, 32},
                           bf16::value);
};

/// MXFP4 routed experts, everything else bf16 (OpenAI gpt-oss checkpoints).
struct mxfp4_experts {
  static constexpr weight_layout value =
      detail::named_layout("mxfp4-experts", mxfp4::value, bf16::value, {.experts_only = true});
};

/// NVFP4 linears, bf16 for the rest (TensorRT Model Optimizer NVFP4 checkpoints).
struct nvfp4_weights {
  static constexpr weight_layout value = detail::named_layout("nvfp4", nvfp4::value, bf16::value);
};

/// The KV cache's storage.
struct kv_cache_config {
  /// Per token and head: plain 16-bit or fp8, or group-quantized along head_dim with its scales
  /// (e.g. group_quantized<8, 128, fp16, 0> for int8 KV with an fp16 scale per head).
  element_format format = bf16::value;
  std::int64_t block_tokens = 0;  ///< paged attention blocks (vLLM: 16); 0: exactly the tokens
  /// Hugging Face's DynamicCache: a sliding-window layer keeps a view of the prefill's K and V
  /// whose storage holds the whole prompt until the first decode step (transformers cache_utils.py
  /// DynamicSlidingWindowLayer; H200: docs/gpu-measurements.md). Off: the window, as paged engines.
  bool prompt_views = false;
};

/// A batch of requests: sequences x beams, each with a prompt and generated tokens.
struct request_shape {
  std::int64_t batch = 1;
  std::int64_t beams = 1;  ///< Hugging Face generate keeps a whole cache per beam
  std::int64_t prompt = 2048;
  std::int64_t generated = 0;
  std::int64_t prefill_chunk = 0;  ///< chunked prefill: tokens per forward (0: the whole prompt)
  std::int64_t cuda_graphs = 0;    ///< bytes of captured CUDA graphs (runtime-specific, explicit)
  /// The logits of every position, as a plain model(input_ids) call returns them (evaluation,
  /// perplexity: logits_to_keep=0), not the last position's that generate() samples from.
  bool all_logits = false;
  /// Hugging Face's attention in the forward: flash (SDPA's fused kernels, no scores), sdpa
  /// (K and V repeated per query head first) or eager (the scores materialized).
  attention_kind attention = attention_kind::flash;
};

namespace detail::rules {
[[noreturn]] inline void all_logits_need_a_vocabulary(const char* name) {
  raise(std::string(name) + " has no vocabulary: every position's logits are a language model's");
}
[[noreturn]] inline void request_size_must_be_positive(const char* what, std::int64_t value) {
  raise(std::string(what) + " must be positive, got " + str(value));
}
[[noreturn]] inline void request_size_must_not_be_negative(const char* what, std::int64_t value) {
  raise(std::string(what) + " must not be negative, got " + str(value));
}
[[noreturn]] inline void kv_format_must_be_plain_or_scaled_per_head(const char* name) {
  raise(std::string("KV cache format ") + name +
        " cannot hold a growing cache: use a plain format (bf16, fp16, fp8) or one with "
        "scales along head_dim (group_quantized)");
}
[[noreturn]] inline void gpu_memory_utilization_must_be_1_to_100_percent(std::int64_t percent) {
  raise("GPU memory utilization must be 1 to 100 percent, got " + str(percent));
}
[[noreturn]] inline void kv_block_must_not_be_negative(std::int64_t block) {
  raise("the KV block size must not be negative, got " + str(block));
}
[[noreturn]] inline void attention_modelled_for_llama_family(const char* model) {
  raise(std::string("eager and sdpa attention in inference are modelled for Hugging Face's "
                    "Llama-family eager_attention_forward and repeat_kv (no MLA, no attention "
                    "sinks); ") +
        model + " runs another: use flash");
}
}  // namespace detail::rules

namespace detail {
constexpr void check(const request_shape& r, const kv_cache_config& kv) {
  if (r.batch <= 0) rules::request_size_must_be_positive("batch", r.batch);
  if (r.beams <= 0) rules::request_size_must_be_positive("beams", r.beams);
  if (r.prompt < 0) rules::request_size_must_not_be_negative("prompt length", r.prompt);
  if (r.generated < 0) rules::request_size_must_not_be_negative("generated tokens", r.generated);
  if (checked_add(r.prompt, r.generated) <= 0)
    rules::request_size_must_be_positive("context", r.prompt + r.generated);
  if (r.prefill_chunk < 0)
    rules::request_size_must_not_be_negative("prefill chunk", r.prefill_chunk);
  if (r.cuda_graphs < 0)
    rules::request_size_must_not_be_negative("CUDA graph bytes", r.cuda_graphs);
  if (kv.block_tokens < 0) rules::kv_block_must_not_be_negative(kv.block_tokens);
  if (!kv.format.storable) rules::compute_only_format_has_no_storage(kv.format.name);
  if (kv.format.layout == block_layout::flattened && kv.format.level1.block > 0)
    rules::kv_format_must_be_plain_or_scaled_per_head(kv.format.name);
}

/// How many of layers [first, first + count) attend through a sliding window: those whose
/// index modulo the period is below the windowed layers per period (Gemma 2: the even ones;
/// Gemma 3: all but every sixth).
constexpr std::int64_t sliding_layers(const model& m, std::int64_t first, std::int64_t count) {
  if (m.sliding_window <= 0) return 0;
  const std::int64_t period = m.sliding_window_period, windowed = m.sliding_layers_per_period;
  auto before = [&](std::int64_t n) {  // windowed layers among [0, n)
    return n / period * windowed + (n % period < windowed ? n % period : windowed);
  };
  return before(first + count) - before(first);
}
}  // namespace detail

/// KV-cache bytes of one token in one layer on one tensor-parallel rank: K and V for each KV
/// head the rank holds (replicated when the degree exceeds the heads), or MLA's latent plus its
/// rope key, which every rank keeps whole (DeepSeek-V2 §2.1.2: (d_c + d_h^R) elements).
constexpr bytes kv_bytes_per_token_layer(const model& m, const kv_cache_config& kv,
                                         std::int64_t tp = 1) {
  if (tp <= 0) detail::rules::parallel_degree_must_be_positive("tensor", tp);
  if (m.is_mla()) return storage_bytes(kv.format, 1, m.mla.kv_lora_rank + m.mla.qk_rope_head_dim);
  return storage_bytes(kv.format, 2 * detail::local_kv_heads(m, tp), m.head_dim);
}

/// KV-cache bytes per token of the whole model on one rank, every layer at full length (the
/// usual "bytes per token" figure; sliding windows cap it only for long contexts).
constexpr bytes kv_bytes_per_token(const model& m, const kv_cache_config& kv, std::int64_t tp = 1) {
  return kv_bytes_per_token_layer(m, kv, tp) * m.layers;
}

/// KV-cache bytes on one GPU of stage `stage` for the request shape: per sequence (batch x beams)
/// and layer, the tokens it keeps (min(context, window) on sliding-window layers, the whole prompt
/// when the window keeps views of it), in whole paged blocks.
constexpr bytes kv_cache_bytes(const model& m, const layout& l, const kv_cache_config& kv,
                               const request_shape& r, std::int64_t stage = 0) {
  detail::check(r, kv);
  const std::int64_t context = r.prompt + r.generated;
  if (m.family != family::vit) detail::check_sequence(m, context);
  const std::int64_t layers = l.layers_of_stage(m.layers, stage);
  const std::int64_t windowed =
      m.sliding_window < context
          ? detail::sliding_layers(m, l.first_layer_of_stage(m.layers, stage), layers)
          : 0;
  auto kept = [&kv](std::int64_t tokens) {  // whole paged blocks
    if (kv.block_tokens == 0) return tokens;
    return detail::checked_mul(detail::ceil_div(tokens, kv.block_tokens), kv.block_tokens);
  };
  const bytes per_token = kv_bytes_per_token_layer(m, kv, l.tensor);
  const std::int64_t window =
      kv.prompt_views && r.prompt > m.sliding_window ? r.prompt : m.sliding_window;
  const bytes per_sequence =
      per_token * kept(context) * (layers - windowed) + per_token * kept(window) * windowed;
  return per_sequence * detail::checked_mul(r.batch, r.beams);
}

/// Whether the layout's method converts `g` to its linear (quantized) format, unless its skip
/// list keeps it.
constexpr bool takes_linear_format(const weight_layout& w, const tensor_group& g) {
  return g.role == tensor_role::parameter && g.rank == 2 &&
         (w.experts_only ? g.kind == tensor_kind::expert
                         : (g.kind == tensor_kind::attention || g.kind == tensor_kind::mlp ||
                            g.kind == tensor_kind::expert ||
                            (w.quantize_routers && g.kind == tensor_kind::router) ||
                            (w.exceptions.converts_head && g.kind == tensor_kind::head)));
}

namespace detail {
/// Where the copies of a held group sit: its ledger index and the stage's layers it has.
struct held_span {
  std::size_t index = 0;
  std::int64_t first_layer = 0, layers = 0;
};
}  // namespace detail

/// Of the `copies` of `g` at `at`, how many are stored in the layout's linear format.
constexpr std::int64_t linear_copies(const weight_layout& w, const tensor_group& g,
                                     const detail::held_span& at, std::int64_t copies) {
  if (!takes_linear_format(w, g)) return 0;
  return copies - detail::kept_copies(w.exceptions, at.index, g, at.first_layer, at.layers, copies);
}

/// Calls `visit(group, local shape, copies, span)` for each tensor group one GPU of pipeline
/// stage `stage` holds: the same tensor ledger, tensor-parallel split and stage assignment as
/// training.
template <class Visit>
constexpr void for_each_held_group(const model& m, const layout& l, std::int64_t stage,
                                   Visit&& visit) {
  const tensor_ledger ledger = tensors(m);
  validated(l, m);
  const std::size_t first_layers = detail::first_layer_group(ledger);
  const std::int64_t first = l.first_layer_of_stage(m.layers, stage);
  const std::int64_t count = l.layers_of_stage(m.layers, stage);
  const bool first_stage = stage == 0, last_stage = stage == l.pipeline - 1;
  for (std::size_t i = 0; i < ledger.size(); ++i) {
    const tensor_group& g = ledger[i];
    const detail::held_span at{i, g.first_layer > first ? g.first_layer : first,
                               detail::overlap(g.first_layer, g.layer_count, first, count)};
    std::int64_t copies =
        g.layer_count > 0 ? at.layers : ((i < first_layers ? first_stage : last_stage) ? 1 : 0);
    if (g.kind == tensor_kind::expert)
      copies = detail::checked_mul(copies, m.moe.routed_experts / l.expert);
    if (copies > 0) visit(g, detail::tp_local_shape(g, m, l.tensor), copies, at);
  }
}

/// Weight bytes on one GPU of pipeline stage `stage` in the runtime's layout: the copies its
/// method converts in `linear`, the rest (and those its skip list keeps) in `other`.
constexpr bytes weight_bytes(const model& m, const layout& l, const weight_layout& w,
                             std::int64_t stage = 0) {
  detail::checked_for(w.exceptions, tensors(m));
  bytes total{};
  for_each_held_group(
      m, l, stage,
      [&](const tensor_group& g, const detail::local_shape& s, std::int64_t n,
          const detail::held_span& at) {
        if (g.role == tensor_role::state) {
          total += bytes_for_bits(detail::checked_mul(s.elements(), g.state_bits)) * n;
          return;
        }
        const std::int64_t linear = linear_copies(w, g, at, n);
        total += detail::stored(w.linear, s) * linear + detail::stored(w.other, s) * (n - linear);
        if (w.act_order_index) total += bytes{4 * (g.input_major ? s.second : s.last)} * linear;
      });
  return total;
}

/// The compute format of a runtime's activations: its unquantized weights' format when that is
/// a 16- or 32-bit float, else bf16.
constexpr element_format activation_format(const weight_layout& w) {
  return w.other.payload_bits >= 16 && w.other.storable ? w.other : bf16::value;
}

/// The tokens of one forward: the prompt, or a prefill chunk, times the sequences.
constexpr std::int64_t forward_tokens(const request_shape& r) {
  const std::int64_t chunk =
      r.prefill_chunk > 0 && r.prefill_chunk < r.prompt ? r.prefill_chunk : r.prompt;
  return detail::checked_mul(detail::checked_mul(r.batch, r.beams), chunk > 0 ? chunk : 1);
}

/// The 4D causal mask HF builds per forward for eager attention, [sequences, 1, queries, keys] in
/// the compute format (masking_utils.py eager_mask: sdpa_mask's booleans as 0 and the format's
/// minimum), live through the forward. SDPA and flash get none without padding.
constexpr bytes eager_mask_bytes(const request_shape& r, const element_format& compute) {
  if (r.attention != attention_kind::eager) return bytes{};
  const std::int64_t queries = forward_tokens(r) / detail::checked_mul(r.batch, r.beams);
  return storage_bytes(
      compute, detail::checked_mul(forward_tokens(r), r.prompt > queries ? r.prompt : queries));
}

/// A layer's attention at its fullest without autograd, beside the loop's input and the KV cache:
/// normed input, Q, repeated K and V, and for eager every head's scores in their formats (traced:
/// docs/sources.md#hf-attention, eager_attention_forward). Flash: none, the MLP's set is larger.
constexpr bytes attention_working_bytes(const model& m, const layout& l, const request_shape& r,
                                        const element_format& compute) {
  if (r.attention == attention_kind::flash) return bytes{};
  if ((m.family != family::llama && m.family != family::phi3) || m.is_mla() || m.attention_sinks)
    detail::rules::attention_modelled_for_llama_family(m.name);
  using detail::checked_mul;
  const std::int64_t tokens = forward_tokens(r);
  const std::int64_t sequences = checked_mul(r.batch, r.beams);
  const std::int64_t queries = tokens / sequences;
  const std::int64_t keys = r.prompt > queries ? r.prompt : queries;  // a chunk sees the prompt
  const std::int64_t heads = m.heads / l.tensor, kv = detail::local_kv_heads(m, l.tensor);
  const bool repeated = kv < heads && !(kv == 1 && sequences == 1);
  const std::int64_t kv_elements =
      repeated ? checked_mul(checked_mul(2 * sequences, heads), checked_mul(keys, m.head_dim)) : 0;
  bytes held = storage_bytes(compute, detail::checked_add(checked_mul(tokens, m.hidden),
                                                          checked_mul(tokens, heads * m.head_dim)));
  held += storage_bytes(compute, kv_elements);
  if (r.attention == attention_kind::sdpa)  // the kernel's output, [tokens, heads x head_dim]
    return held + storage_bytes(compute, checked_mul(tokens, heads * m.head_dim));
  const std::int64_t scores =
      checked_mul(checked_mul(sequences, heads), checked_mul(queries, keys));
  const std::int64_t per_score = compute.payload_bits == 32 || compute == fp16::value ? 8 : 10;
  return held + bytes{checked_mul(scores, per_score)};
}

/// Working memory of the forward passes: the largest layer's transient tensors for the tokens of
/// one forward (no autograd keeps anything), and (with `logits`) the logits with the sampler's
/// probabilities (fp32) for the last position of each sequence.
constexpr bytes inference_working_bytes(const model& m, const layout& l, const request_shape& r,
                                        const element_format& compute = bf16::value,
                                        bool logits = true) {
  const std::int64_t tokens = forward_tokens(r);
  // Sizes within the model's bounds (model.hpp): their products fit.
  const std::int64_t width = (m.is_moe() ? m.moe.expert_ffn * m.moe.top_k : m.ffn) / l.tensor;
  // Gate, up and their product alive at once; Phi-3's fused gate_up output (2 x width) stays
  // alive through its views while the activation and the product are made (modeling_phi3.py
  // Phi3MLP: chunk, then up_states * act(gate); measured on an H200, docs/gpu-measurements.md).
  const std::int64_t gated = m.mlp == mlp_kind::gelu ? 2 : m.family == family::phi3 ? 4 : 3;
  // The residual stream, the normed input and the MLP's intermediates (flash attention: no
  // scores; the MLP is the largest working set of a layer).
  const bytes mlp =
      storage_bytes(compute, detail::checked_add(detail::checked_mul(tokens, 2 * m.hidden),
                                                 detail::checked_mul(tokens, gated * width)));
  const bytes attention = attention_working_bytes(m, l, r, compute);
  const bytes layer = (mlp > attention ? mlp : attention) + eager_mask_bytes(r, compute);
  if (!logits) return layer;
  // The logits and the sampler's probabilities in fp32 (Hugging Face generate upcasts them).
  const std::int64_t sequences = detail::checked_mul(r.batch, r.beams);
  return layer + bytes{detail::checked_mul(detail::checked_mul(sequences, m.vocab), 2 * 4)};
}

/// What HF's model loop keeps bound while a layer runs: its input (`hidden_states`) and, from a
/// stage's second layer on, the embedding output (`inputs_embeds`), each tokens x hidden in the
/// compute format (modeling_llama.py LlamaModel.forward). vLLM's loop rebinds both.
constexpr bytes loop_held_bytes(const model& m, const layout& l, const request_shape& r,
                                const element_format& compute, std::int64_t stage) {
  const std::int64_t held = l.layers_of_stage(m.layers, stage) > 1 ? 2 : 1;
  return storage_bytes(compute, detail::checked_mul(forward_tokens(r), held * m.hidden));
}

/// The forward's end when it returns every position's logits: the final norm's output and the
/// logits in the compute format together, the layers' transients gone (LlamaForCausalLM.forward:
/// lm_head(hidden_states[:, slice_indices, :]) with logits_to_keep=0).
constexpr bytes all_logits_bytes(const model& m, const request_shape& r,
                                 const element_format& compute) {
  if (m.vocab <= 0) detail::rules::all_logits_need_a_vocabulary(m.name);
  const std::int64_t tokens = forward_tokens(r);
  return storage_bytes(compute, detail::checked_mul(tokens, m.hidden)) +
         storage_bytes(compute, detail::checked_mul(tokens, m.vocab));
}

/// Everything one inference GPU of stage `stage` holds: weights, KV cache, working memory and
/// the CUDA graphs (runtime overheads come from overheads()).
constexpr memory_ledger inference_memory(const model& m, const layout& l, const weight_layout& w,
                                         const kv_cache_config& kv, const request_shape& r,
                                         std::int64_t stage = 0) {
  memory_ledger ledger{};
  const auto device = memory_space::device;
  add_entry(ledger, "weights", component::weights, device, weight_bytes(m, l, w, stage), 0,
            "inference.hpp: the tensor ledger in the runtime's weight layout");
  add_entry(ledger, "KV cache", component::kv_cache, device, kv_cache_bytes(m, l, kv, r, stage), 0,
            "2 x KV heads x head_dim per token and layer (MLA: latent + rope key)");
  const element_format compute = activation_format(w);
  const bytes layers = inference_working_bytes(m, l, r, compute, !r.all_logits) +
                       loop_held_bytes(m, l, r, compute, stage);
  const bytes head = r.all_logits ? all_logits_bytes(m, r, compute) : bytes{};
  add_entry(ledger, "forward working memory and logits", component::activations, device,
            layers > head ? layers : head, 0,
            "largest layer's transients for one forward, the layer input and embeddings the "
            "model loop holds (transformers LlamaModel.forward); the last position's fp32 logits "
            "and probabilities, or every position's logits",
            lifetime::forward);
  add_entry(ledger, "CUDA graphs", component::buffers, device, bytes{r.cuda_graphs}, 0,
            "captured graphs, as configured");
  return ledger;
}

// --- vLLM's serving budget (vllm/v1/worker/gpu_worker.py determine_available_memory) ---

/// Which of vLLM's entry points starts the engine: their scheduler defaults differ.
enum class vllm_entrypoint : unsigned char { server, llm_class };

/// The vLLM settings that size its KV pool.
struct vllm_settings {
  std::int64_t utilization_percent = 90;       ///< gpu_memory_utilization (0.9)
  std::int64_t max_num_batched_tokens = 8192;  ///< tokens of the profile run's forward
  std::int64_t max_num_seqs = 1024;            ///< its sequences: the sampler's rows
  /// Memory outside torch that appears after vLLM's baseline snapshot (taken after the CUDA
  /// context and NCCL start): lazily loaded kernels, communicator buffers. Measured, not derived.
  bytes non_torch{};
  /// Subtracted CUDA graph memory: vLLM v0.21 and later estimate it before sizing the pool
  /// (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS); earlier, graphs are captured after and come
  /// out of the 1 - utilization headroom (leave it 0).
  bytes cuda_graphs{};
};

/// The non-torch increase vLLM logged on H100s: 0.13 GiB at TP 1, 0.55 GiB at TP 2 (llm-d
/// config_explorer/empirical-vllm-memory-results.md, vLLM 0.11); a measurement, not a model.
constexpr bytes vllm_measured_non_torch(std::int64_t tp) {
  return tp > 1 ? bytes{55 * GiB.size / 100} : bytes{13 * GiB.size / 100};
}

/// vLLM's defaults for `device` (vllm/engine/arg_utils.py _set_default_args): a GPU of 70 GiB or
/// more that is not an A100 profiles 8192 tokens in 1024 sequences behind the OpenAI server (16384
/// for the LLM class), others 2048 (8192) in 256; the non-torch increase measured at the degree.
constexpr vllm_settings vllm_defaults(const gpu& device, std::int64_t tp = 1,
                                      vllm_entrypoint e = vllm_entrypoint::server) {
  const bool a100 = std::string_view(device.name).find("A100") != std::string_view::npos;
  const bool large = device.capacity >= 70 * GiB && !a100;
  const bool server = e == vllm_entrypoint::server;
  return {.max_num_batched_tokens = large ? (server ? 8192 : 16384) : (server ? 2048 : 8192),
          .max_num_seqs = large ? 1024 : 256,
          .non_torch = vllm_measured_non_torch(tp)};
}

/// The peak of vLLM's profile run above the loaded weights (gpu_model_runner.py profile_run): a
/// forward of max_num_batched_tokens tokens, then, its hidden states held, the sampler's sort of
/// min(tokens, max_num_seqs) full-vocabulary rows (bytes per logit: docs/sources.md#vllm-memory).
constexpr bytes profile_run_peak(const model& m, const layout& l, const weight_layout& w,
                                 const vllm_settings& s) {
  using detail::checked_mul;
  const element_format compute = activation_format(w);
  const std::int64_t tokens = s.max_num_batched_tokens;
  const std::int64_t rows = tokens < s.max_num_seqs ? tokens : s.max_num_seqs;
  constexpr bool with_logits = false;  // the sampler's, counted below
  const bytes forward = inference_working_bytes(m, l, {.prompt = tokens}, compute, with_logits);
  const std::int64_t logits = checked_mul(rows, m.vocab);
  const std::int64_t int_max = 2'147'483'647;
  const std::int64_t batch = logits < int_max ? logits : int_max / m.vocab * m.vocab;
  const bytes sampler = storage_bytes(compute, logits) + bytes{checked_mul(logits, 4 + 4 + 8)} +
                        bytes{checked_mul(batch, 8 + 4 + 8)};
  const bytes hidden = storage_bytes(compute, checked_mul(tokens, m.hidden));
  return (forward > sampler ? forward : sampler) + hidden;
}

/// A serving budget as vLLM computes it: gpu_memory_utilization x the total cudaMemGetInfo
/// reports, less the loaded weights, the profile run's peak, the non-torch increase and (v0.21+)
/// the CUDA graph estimate, is the KV pool.
struct serving_budget {
  bytes total{};      ///< torch.cuda.mem_get_info()'s total
  bytes requested{};  ///< utilization x total
  bytes weights{};
  bytes profile_peak{};
  bytes non_torch{};
  bytes cuda_graphs{};
  bytes kv_pool{};
  std::int64_t kv_tokens = 0;  ///< tokens the pool holds (whole blocks of every layer)
  std::int64_t sequences = 0;  ///< concurrent sequences of `context` tokens
};

namespace detail::rules {
[[noreturn]] inline void serving_needs_a_decoder(const model& m) {
  raise(std::string(m.name) + " is an encoder: it keeps no KV cache for vLLM to pool");
}
[[noreturn]] inline void vllm_batched_tokens_must_be_positive(std::int64_t tokens,
                                                              std::int64_t seqs) {
  raise("vLLM's max_num_batched_tokens and max_num_seqs must be positive, got " + str(tokens) +
        " and " + str(seqs));
}
}  // namespace detail::rules

/// The budget on `device` for sequences of `context` tokens (max_model_len).
constexpr serving_budget serve(const model& m, const layout& l, const weight_layout& w,
                               const kv_cache_config& kv, std::int64_t context, const gpu& device,
                               const vllm_settings& s) {
  detail::check(request_shape{.prompt = context}, kv);
  if (m.is_encoder()) detail::rules::serving_needs_a_decoder(m);
  detail::check_sequence(m, context);
  if (s.utilization_percent < 1 || s.utilization_percent > 100)
    detail::rules::gpu_memory_utilization_must_be_1_to_100_percent(s.utilization_percent);
  if (s.max_num_batched_tokens <= 0 || s.max_num_seqs <= 0)
    detail::rules::vllm_batched_tokens_must_be_positive(s.max_num_batched_tokens, s.max_num_seqs);
  if (s.non_torch < bytes{} || s.cuda_graphs < bytes{})
    detail::rules::request_size_must_not_be_negative(
        "non-torch or CUDA graph bytes",
        (s.non_torch < bytes{} ? s.non_torch : s.cuda_graphs).count);
  serving_budget b{};
  b.total = device.cuda_total > bytes{} ? device.cuda_total : device.capacity;
  // floor(total x utilization / 100) without overflowing.
  b.requested = bytes{b.total.count / 100 * s.utilization_percent +
                      b.total.count % 100 * s.utilization_percent / 100};
  b.weights = weight_bytes(m, l, w);
  b.profile_peak = profile_run_peak(m, l, w, s);
  b.non_torch = s.non_torch;
  b.cuda_graphs = s.cuda_graphs;
  b.kv_pool = b.requested - b.weights - b.profile_peak - b.non_torch - b.cuda_graphs;
  if (b.kv_pool < bytes{}) b.kv_pool = bytes{};
  // vllm/v1/core/kv_cache_utils.py: num_blocks = available // page_size // num_layers.
  const std::int64_t block = kv.block_tokens > 0 ? kv.block_tokens : 1;
  // Each pipeline rank pools its own layers (the first stage's here, as its weights above).
  const bytes per_block =
      kv_bytes_per_token_layer(m, kv, l.tensor) * l.layers_of_stage(m.layers, 0) * block;
  b.kv_tokens = b.kv_pool.count / per_block.count * block;
  b.sequences = b.kv_tokens / detail::checked_mul(detail::ceil_div(context, block), block);
  return b;
}

// --- Solvers: the largest batch, the longest context, the smallest tensor-parallel degree. ---

/// The pipeline stage whose GPUs need the most, with its ledger, runtime overheads included.
constexpr stage_states most_loaded_gpu(const model& m, const layout& l, const weight_layout& w,
                                       const kv_cache_config& kv, const request_shape& r,
                                       const gpu& device, const runtime_overheads& o = {}) {
  return most_loaded(l, m, edges_of(tensors(m)), [&](std::int64_t s) {
    memory_ledger ledger = inference_memory(m, l, w, kv, r, s);
    append(ledger, overheads(o, device, peak(ledger), l));
    return ledger;
  });
}

/// The most memory a request shape needs on the most loaded GPU, runtime overheads included, as
/// `o.metric` counts it.
constexpr bytes inference_required(const model& m, const layout& l, const weight_layout& w,
                                   const kv_cache_config& kv, const request_shape& r,
                                   const gpu& device, const runtime_overheads& o = {}) {
  const memory_ledger ledger = most_loaded_gpu(m, l, w, kv, r, device, o).ledger;
  return peak(ledger) - not_counted(ledger, o.metric);
}

/// The largest batch (up to `limit`) whose requests of the given context fit `device`; 0 when not
/// even one does.
constexpr std::int64_t max_batch(const model& m, const layout& l, const weight_layout& w,
                                 const kv_cache_config& kv, request_shape r, const gpu& device,
                                 std::int64_t limit = 65536, const runtime_overheads& o = {}) {
  return detail::largest_fitting(1, limit, [&](std::int64_t batch) {
    r.batch = batch;
    return inference_required(m, l, w, kv, r, device, o) <= device.capacity;
  });
}

/// The longest context (prompt tokens, up to `limit` and a learned position table's rows) a batch
/// fits on `device`; 0 when none.
constexpr std::int64_t max_context(const model& m, const layout& l, const weight_layout& w,
                                   const kv_cache_config& kv, request_shape r, const gpu& device,
                                   std::int64_t limit = std::int64_t{1} << 24,
                                   const runtime_overheads& o = {}) {
  r.generated = 0;
  if (m.positions == position_kind::learned && m.max_positions < limit) limit = m.max_positions;
  return detail::largest_fitting(1, limit, [&](std::int64_t context) {
    r.prompt = context;
    return inference_required(m, l, w, kv, r, device, o) <= device.capacity;
  });
}

/// The smallest tensor-parallel degree (1, 2, 4, ... up to `limit`) that fits, 0 when none does:
/// degrees that break a layout rule (heads, KV heads, FFN) are skipped.
constexpr std::int64_t min_tensor_parallel(const model& m, const weight_layout& w,
                                           const kv_cache_config& kv, const request_shape& r,
                                           const gpu& device, std::int64_t limit = 64,
                                           const runtime_overheads& o = {}) {
  for (std::int64_t tp = 1; tp <= limit; tp *= 2) {
    const bool dense = !m.is_moe() || m.moe.first_dense_layers > 0;
    const bool divides = m.heads % tp == 0 &&
                         (m.is_mla() || m.kv_heads % tp == 0 || tp % m.kv_heads == 0) &&
                         (!dense || m.ffn % tp == 0) && (!m.is_moe() || m.moe.expert_ffn % tp == 0);
    if (divides &&
        inference_required(m, layout{.tensor = tp}, w, kv, r, device, o) <= device.capacity)
      return tp;
    if (tp > limit / 2) break;  // the next degree passes the limit (and may not fit in 64 bits)
  }
  return 0;
}

}  // namespace vramfit
