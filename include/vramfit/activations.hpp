// SPDX-License-Identifier: MIT
// Activation memory from what autograd saves for backward, operator by operator: a per-block
// ledger of saved tensors, the recompute policies, the parallel splits, the pipeline's in-flight
// micro-batches, and the embedding, logits and loss.
#pragma once

#include <array>
#include <cstdint>

#include "detail/name.hpp"
#include "detail/static_vector.hpp"
#include "ledger.hpp"
#include "model_code.hpp"
#include "op_sac.hpp"
#include "training.hpp"

namespace vramfit {

enum class attention_kind : unsigned char {
  eager,  ///< explicit scores: softmax output (and dropout) of b x heads x s x s saved
  flash,  ///< FlashAttention-2 / SDPA: Q, K, V, output and an fp32 log-sum-exp per row
  /// Hugging Face's SDPA path with repeat_kv (transformers integrations/sdpa_attention.py when
  /// use_gqa_in_sdpa is false: torch < 2.5 or an attention mask): flash's tensors, with K and V
  /// repeated to every query head
  sdpa,
};

enum class recompute_kind : unsigned char {
  none,
  selective,  ///< the attention core is recomputed (Korthikanti et al. 2022 §5)
  full,       ///< only each layer's input is kept; the layer is recomputed in backward
  /// torchtitan's op-level SAC: each layer's input and the operator outputs its policy caches
  /// (every second matmul, attention) are kept; the rest is recomputed (op_sac.hpp)
  op_sac,
};

enum class loss_kind : unsigned char {
  fp32_upcast,    ///< Hugging Face: logits.float(), then log_softmax saved in fp32
  native,         ///< cross-entropy on the logits in their own format
  fused_chunked,  ///< fused linear + cross-entropy over chunks: no full logits are kept
  /// torchtune CEWithChunkedOutputLoss: the model returns its logits in chunks, each is upcast
  /// to fp32 in turn, and every chunk's fp32 log_softmax output is saved
  chunked_output,
  /// torchtune LinearCrossEntropyLoss: the loss applies the head to one chunk of hidden states
  /// at a time, upcasts it, and saves every chunk's fp32 log_softmax output
  linear_chunked,
  /// Megatron-Core's vocab-parallel cross-entropy: one fp32 copy of the logits, turned into the
  /// softmax in place and saved; backward writes the gradient into it
  vocab_parallel,
};

/// How transformers 5 runs its packed MoE experts (config._experts_implementation,
/// integrations/moe.py; docs/sources.md#hf-moe-experts).
enum class experts_implementation : unsigned char {
  grouped_mm,  ///< the default: two grouped GEMMs over the rows sorted by expert
  eager,       ///< the experts class's own loop over the experts hit, F.linear per expert
  batched_mm,  ///< each routed row's expert weights copied, then bmm
};

enum class pipeline_schedule : unsigned char { one_f_one_b, interleaved, gpipe };

/// What runs the pipeline schedule, for what a stage keeps beside its micro-batches' saved
/// activations (docs/sources.md#torch-pipelining).
enum class pipeline_runtime : unsigned char {
  /// Megatron-LM's schedules: a received input or output gradient goes with its micro-batch, and
  /// a sent output keeps no data (schedules.py deallocate_output_tensor).
  megatron,
  /// torch.distributed.pipelining (torchtitan) from torch 2.10: a receive buffer per micro-batch
  /// for the stage's input and one for its output's gradient, made at the first step and kept;
  /// each micro-batch's output held for its backward (stage.py fwd_cache).
  torch,
  /// torch 2.6 and 2.7 (torchtitan's December 2024 benchmarks): besides, every stage keeps every
  /// micro-batch's output (output_chunks) and its input's gradient (the receive buffer's .grad)
  /// until the next step.
  torch_2_6,
  /// torch 2.8 and 2.9: only the last stage keeps every micro-batch's output.
  torch_2_8,
};

/// The batch shape and the choices that decide what autograd keeps.
struct activation_options {
  std::int64_t micro_batch = 1;
  std::int64_t sequence = 2048;
  std::int64_t micro_batches = 1;  ///< per optimizer step (gradient accumulation, pipeline)
  attention_kind attention = attention_kind::flash;
  bool attention_dropout = false;
  bool hidden_dropout = false;
  /// CUDA's dropout keeps a 1-byte mask; PyTorch's CPU kernel keeps one in the input's format.
  std::int64_t dropout_mask_bits = 8;
  recompute_kind recompute = recompute_kind::none;
  std::int64_t recompute_layers = -1;  ///< full recompute of the first N layers of a stage; -1: all
  /// Full recompute of every Nth layer of a stage (torchtitan's per-layer SAC,
  /// selective_ac_option "N": the blocks whose 1-based index N divides); 0: not used.
  std::int64_t recompute_every = 0;
  /// torch.utils.checkpoint's use_reentrant (Hugging Face's default: True): the reentrant
  /// CheckpointFunction.backward holds the layer output's gradient while it runs the layer's
  /// backward inside its own torch.autograd.backward call.
  bool reentrant_checkpoint = true;
  bool offload = false;  ///< saved activations kept on the host (autograd save_on_cpu)
  loss_kind loss = loss_kind::fp32_upcast;
  std::int64_t loss_chunk_tokens = 1024;  ///< fused_chunked: tokens per chunk
  std::int64_t loss_chunks = 8;  ///< chunked_output, linear_chunked: num_output_chunks (torchtune)
  /// Count the norms' per-row statistics (mean, rstd); Korthikanti's accounting leaves them out.
  bool norm_statistics = true;
  std::int64_t capacity_factor_percent = 0;  ///< MoE: tokens an expert takes; 0: dropless
  /// MoE: how Hugging Face's packed experts run (their model code only).
  experts_implementation experts = experts_implementation::grouped_mm;
  pipeline_schedule schedule = pipeline_schedule::one_f_one_b;
  std::int64_t virtual_stages = 1;  ///< interleaved schedule: model chunks per rank
  pipeline_runtime runtime = pipeline_runtime::megatron;
  model_code code = model_code::hf;
};

/// The half of a layer a saved tensor belongs to: its backward runs MLP first, then attention.
enum class layer_part : unsigned char { attention, mlp };

/// When its half's backward frees a saved tensor, besides its output linear's input (the first):
/// after the last backward op that reads it, as autograd releases a node's saved tensors once the
/// node has run (torch/csrc/autograd/engine.cpp call_function: fn.release_variables()).
enum class freed_at : unsigned char {
  half_end,    ///< by the half's projections and norm, after its working set and weight gradients
  core_start,  ///< by the ops before the working set: eager attention's value matmul and dropout
  /// by the working set's op: eager attention's softmax, SDPA, an MLP's product or activation
  core_end,
};

/// One tensor (or set of tensors) autograd saves, per micro-batch, on one rank.
struct saved_tensor {
  const char* name = "";  ///< a string literal
  /// Where it is made: file, class.method and expression in transformers 5.x (modeling_qwen3.py,
  /// which modeling_llama.py copies), peft or PyTorch main (autograd/derivatives.yaml says what a
  /// backward reads); GPU traces checked the ledger on transformers 5.17, torch 2.11.
  const char* source = "";
  bytes size{};
  std::int64_t elements = 0;  ///< its elements (over every tensor the entry stands for)
  std::int64_t bits = 0;      ///< bits per element: 32 fp32, 16 bf16/fp16, 8 a dropout mask
  bool recomputed_by_selective = false;  ///< part of the attention core
  layer_part part = layer_part::attention;
  /// The input of the part's last linear (o_proj, down_proj): the first its backward frees.
  bool output_linear_input = false;
  freed_at freed = freed_at::half_end;  ///< when the rest is freed
};

/// The most a layer saves: four norms of 3 entries, MLA attention with its two norms and eager
/// scores (16), an MoE block with routed and shared 5-tensor MLPs (14), inputs and dropout masks
/// (4): 46.
using saved_tensor_ledger = detail::static_vector<saved_tensor, 48>;

namespace detail {
namespace rules {
[[noreturn]] inline void batch_shape_must_be_positive(const char* what, std::int64_t value) {
  raise(std::string(what) + " must be positive, got " + str(value));
}
[[noreturn]] inline void context_parallel_must_divide_sequence(std::int64_t cp, std::int64_t s) {
  raise("context parallel degree " + str(cp) + " must divide the sequence length (" + str(s) + ")");
}
[[noreturn]] inline void optimizer_in_backward_needs_one_micro_batch(std::int64_t micro_batches,
                                                                     std::int64_t pipeline) {
  raise(
      "the optimizer steps in backward, freeing each gradient (torchtune optimizer_in_bwd): it "
      "needs one micro-batch per step and no pipeline, got " +
      str(micro_batches) + " micro-batches and " + str(pipeline) + " pipeline stages");
}
[[noreturn]] inline void optimizer_in_backward_needs_pytorch_gradients() {
  raise(
      "the optimizer steps in backward on PyTorch's per-parameter gradients: DeepSpeed's and "
      "Megatron's flat gradient buffers have no per-parameter hook");
}
/// What gradients kept between steps are not modelled with, after the words that name them.
inline std::string gradients_kept_limit(const char* layout) {
  return std::string(
             " keeps PyTorch's per-parameter .grad tensors between steps: it is modelled "
             "on one GPU, DDP, TP and CP, not with ") +
         layout;
}
[[noreturn]] inline void gradients_kept_need_pytorch_gradients(const char* layout) {
  raise("zero_grad(set_to_none=False)" + gradients_kept_limit(layout));
}
[[noreturn]] inline void op_level_sac_needs_full_linears() {
  raise(
      "op-level selective checkpointing (--recompute op-sac) counts the layer's matmuls; LoRA "
      "adapters add their own: use full or selective recompute with LoRA");
}
[[noreturn]] inline void recompute_every_needs_full_recompute_of_all_layers(std::int64_t every) {
  raise("recomputing one layer in every " + str(every) +
        " is full recompute: give it with recompute full and no layer count");
}
[[noreturn]] inline void sequence_parallel_must_divide_sequence(std::int64_t tp, std::int64_t s) {
  raise("sequence parallelism splits the sequence (" + str(s) + ") over the tensor degree " +
        str(tp) + ": it must divide it");
}
}  // namespace rules

constexpr void check_model_code(const model& m, const activation_options& o, const finetuning& f) {
  if (o.code == model_code::hf) return;
  if (const char* off = unlike_modelled(o.code, m, f.kind))
    rules::model_code_runs_what_it_models(o.code, m, off);
}

constexpr void check(const activation_options& o, const layout& l) {
  if (o.micro_batch <= 0) rules::batch_shape_must_be_positive("micro-batch", o.micro_batch);
  if (o.sequence <= 0) rules::batch_shape_must_be_positive("sequence length", o.sequence);
  if (o.micro_batches <= 0) rules::batch_shape_must_be_positive("micro-batches", o.micro_batches);
  if (o.virtual_stages <= 0)
    rules::batch_shape_must_be_positive("virtual stages", o.virtual_stages);
  if (o.loss == loss_kind::fused_chunked && o.loss_chunk_tokens <= 0)
    rules::batch_shape_must_be_positive("loss chunk tokens", o.loss_chunk_tokens);
  if ((o.loss == loss_kind::chunked_output || o.loss == loss_kind::linear_chunked) &&
      o.loss_chunks <= 0)
    rules::batch_shape_must_be_positive("loss chunks", o.loss_chunks);
  if (o.recompute_every < 0)
    rules::batch_shape_must_be_positive("recompute period (or 0: none)", o.recompute_every);
  if (o.recompute_every > 0 && (o.recompute != recompute_kind::full || o.recompute_layers != -1))
    rules::recompute_every_needs_full_recompute_of_all_layers(o.recompute_every);
  if (o.dropout_mask_bits <= 0)
    rules::batch_shape_must_be_positive("dropout mask bits", o.dropout_mask_bits);
  if (o.capacity_factor_percent < 0)
    rules::batch_shape_must_be_positive("MoE capacity factor (or 0: dropless)",
                                        o.capacity_factor_percent);
  // deepspeed/runtime/pipe/engine.py steps TrainSchedule (schedule.py), 1F1B only; Megatron-Core's
  // get_forward_backward_func (pipeline_parallel/schedules.py) 1F1B with or without interleaving.
  if (l.pipeline > 1 && l.implementation == shard_implementation::deepspeed &&
      o.schedule != pipeline_schedule::one_f_one_b)
    rules::deepspeed_pipeline_runs_one_f_one_b(l.pipeline);
  if (l.pipeline > 1 && l.implementation == shard_implementation::megatron &&
      o.schedule == pipeline_schedule::gpipe)
    rules::megatron_pipeline_runs_no_gpipe(l.pipeline);
  if (o.sequence % l.context != 0)
    rules::context_parallel_must_divide_sequence(l.context, o.sequence);
  if (l.sequence && (o.sequence / l.context) % l.tensor != 0)
    rules::sequence_parallel_must_divide_sequence(l.tensor, o.sequence / l.context);
}

/// Q, K and V as views of one projection (GPT-2, BERT, ViT, DistilBERT, GPTBigCode): their
/// attention is not Hugging Face's shared SDPA path with enable_gqa.
constexpr bool fused_qkv(const model& m) {
  return m.family == family::gpt2 || m.family == family::bert || m.family == family::vit ||
         m.family == family::distilbert || m.family == family::gpt_bigcode;
}

/// Falcon's multi-query attention (multi_query, not new_decoder_architecture, which read_falcon
/// gives two norms): one K/V head, which FalconAttention passes to SDPA as it is.
constexpr bool falcon_multi_query(const model& m) {
  return m.family == family::falcon && m.norms_per_layer == 1 && m.kv_heads < m.heads;
}

/// Falcon-40B/180B's new_decoder_architecture (read_falcon's two norms): ln_attn and ln_mlp over
/// the same input (modeling_falcon.py FalconDecoderLayer.forward, num_ln_in_parallel_attn 2), and
/// FalconAttention._split_heads copies K and V to every query head (torch.broadcast_to, then
/// flatten(2, 3) of views that cannot merge: reshape copies), so the attention sees no grouping.
constexpr bool falcon_new_architecture(const model& m) {
  return m.family == family::falcon && m.norms_per_layer == 2;
}

}  // namespace detail

/// Whether every layer attends through the model's sliding window (Mistral, Phi-3), not some of
/// them (Gemma 2 and 3).
constexpr bool windowed_everywhere(const model& m) {
  return m.sliding_window > 0 && m.sliding_layers_per_period == m.sliding_window_period;
}

/// Whether Hugging Face's SDPA gets a boolean [b, 1, s, s] mask in training: once the sequence
/// reaches a sliding window (masking_utils.py _ignore_causal_mask_sdpa). Modelled where every layer
/// has the window (Mistral, Phi-3), not where only some do (docs/sources.md#hf-attention).
constexpr bool sdpa_gets_mask(const model& m, const activation_options& o) {
  return windowed_everywhere(m) && o.sequence >= m.sliding_window;
}

/// The attention that runs when SDPA (`flash`) is asked for: with a mask, grouped KV heads are
/// repeated first (`sdpa`); without, fp32 with grouped heads runs the math kernel, which saves what
/// eager does (sdp_utils.cpp, sdpa_attention.py use_gqa_in_sdpa: docs/sources.md#hf-attention).
constexpr attention_kind attention_kernel(const model& m, const precision& p,
                                          const activation_options& o) {
  if (o.attention != attention_kind::flash) return o.attention;
  // modeling_falcon.py FalconAttention.forward: SDPA on one K/V head without enable_gqa runs the
  // math kernel (sdp_utils.cpp check_batch_size_and_num_heads_dense).
  if (detail::falcon_multi_query(m)) return attention_kind::eager;
  // new_decoder_architecture: K and V reach SDPA with every head (falcon_new_architecture()), as
  // the codes that repeat KV first pass them.
  if (detail::falcon_new_architecture(m))
    return m.kv_heads < m.heads ? attention_kind::sdpa : attention_kind::flash;
  const bool grouped = !m.is_mla() && !detail::fused_qkv(m) && m.kv_heads < m.heads;
  // Model codes that copy K and V to every query head first, passing no mask (is_causal).
  if (detail::traits_of(o.code).repeats_kv)
    return grouped ? attention_kind::sdpa : attention_kind::flash;
  if (sdpa_gets_mask(m, o)) return grouped ? attention_kind::sdpa : attention_kind::flash;
  const bool wide = p.compute.payload_bits > 16;
  return grouped && wide ? attention_kind::eager : attention_kind::flash;
}

namespace detail {

/// What a saved entry is to the schedule (saved_tensor's two flags).
struct saved_flags {
  bool selective = false;            ///< recomputed by selective checkpointing
  bool output_linear_input = false;  ///< the input of the part's last linear (o_proj, down_proj)
  freed_at freed = freed_at::half_end;
};

/// The linear modules that read one input, by the names peft's target_modules match.
struct linear_readers {
  std::array<const char*, 3> names{};
  std::size_t count = 0;
};

/// Who reads each input of a layer in the family's code: the attention's input, its output
/// projection's, the MLP's input, its down projection's, and in an MoE layer the router's
/// (tensors.hpp names the same modules). transformers 5's packed experts are parameters, not
/// linear modules, so peft's target_modules cannot name them.
struct layer_linears {
  linear_readers attention, attention_output, mlp, mlp_output;
  linear_readers router{{"gate"}, 1};
};

constexpr layer_linears linears_of(const model& m) {
  switch (m.family) {
    case family::phi3:  // modeling_phi3.py Phi3Attention, Phi3MLP
      return {{{"qkv_proj"}, 1}, {{"o_proj"}, 1}, {{"gate_up_proj"}, 1}, {{"down_proj"}, 1}};
    case family::gpt2:  // modeling_gpt2.py GPT2Attention, GPT2MLP (and GPTBigCode's)
    case family::gpt_bigcode:
      return {{{"c_attn"}, 1}, {{"c_proj"}, 1}, {{"c_fc"}, 1}, {{"c_proj"}, 1}};
    case family::falcon:  // modeling_falcon.py: the parallel block's MLP reads the attention's
                          // input, unless ln_mlp gives it its own (new_decoder_architecture)
      return {m.parallel_block && !falcon_new_architecture(m)
                  ? linear_readers{{"query_key_value", "dense_h_to_4h"}, 2}
                  : linear_readers{{"query_key_value"}, 1},
              {{"dense"}, 1},
              {{"dense_h_to_4h"}, 1},
              {{"dense_4h_to_h"}, 1}};
    case family::bert:  // modeling_bert.py BertSelfAttention, BertSelfOutput, BertIntermediate
      return {{{"query", "key", "value"}, 3}, {{"dense"}, 1}, {{"dense"}, 1}, {{"dense"}, 1}};
    case family::distilbert:  // modeling_distilbert.py MultiHeadSelfAttention, FFN
      return {{{"q_lin", "k_lin", "v_lin"}, 3}, {{"out_lin"}, 1}, {{"lin1"}, 1}, {{"lin2"}, 1}};
    case family::vit:  // torchvision EncoderBlock: MultiheadAttention's packed in_proj, MLPBlock
      return {{{"in_proj"}, 1}, {{"out_proj"}, 1}, {{"0"}, 1}, {{"3"}, 1}};
    default: {  // modeling_llama.py LlamaAttention, LlamaMLP; the MoE blocks' own names
      layer_linears l{{{"q_proj", "k_proj", "v_proj"}, 3},
                      {{"o_proj"}, 1},
                      m.mlp == mlp_kind::gelu ? linear_readers{{"up_proj"}, 1}
                                              : linear_readers{{"gate_proj", "up_proj"}, 2},
                      {{"down_proj"}, 1}};
      if (m.moe.layout == moe_layout::gpt_oss) l.router = {{"router"}, 1};
      return l;
    }
  }
}

/// Builds the saved-tensor ledger of one block for one micro-batch on one rank.
class block_builder {
 public:
  constexpr block_builder(const model& m, const precision& p, const activation_options& o,
                          const layout& l, const finetuning& f = full_finetune::value)
      : m_(m), o_(o), l_(l), f_(f) {
    check_model_code(m, o, f);
    // A LoRA base is frozen: a linear keeps its input only for an adapter (linears_of() names
    // the readers). MLA's low-rank paths are not mapped yet.
    frozen_base_ = f.kind == finetune_kind::lora && !m.is_mla();
    adapter_bits_ =
        f.lora.adapters.payload_bits > 0 ? f.lora.adapters.payload_bits : p.weights.payload_bits;
    tp_ = l.tensor;
    tokens_ = checked_mul(o.micro_batch, o.sequence / l.context);
    // FP8 GEMMs still save 16-bit activations around them (Transformer Engine keeps its FP8
    // casts as well; not modelled).
    beta_ = p.compute.payload_bits < 16 ? 16 : p.compute.payload_bits;
    // The residual stream is in the weights' format when it is wider (fp32 models, AMP), the
    // weights as the layers compute with them: FSDP's MixedPrecision gathers them in the compute
    // format (FSDP2 MixedPrecisionPolicy.param_dtype, FSDP1 MixedPrecision.param_dtype), so the
    // embedding's output and every residual add after it stay 16-bit.
    const std::int64_t weight_bits =
        detail::gathers_in_compute_format(l) ? beta_ : p.weights.payload_bits;
    rho_ = weight_bits > beta_ ? weight_bits : beta_;
    autocast_ = p.autocast_weight_copies;
    attention_ = attention_kernel(m, p, o);
    math_kernel_ = o.attention == attention_kind::flash && attention_ == attention_kind::eager;
  }

  /// A tensor of `width` values per token that every tensor-parallel rank holds in full, or
  /// 1/t of with sequence parallelism.
  constexpr std::int64_t replicated(std::int64_t width) const {
    const std::int64_t n = checked_mul(tokens_, width);
    return l_.sequence ? n / tp_ : n;
  }
  /// A tensor of `width` values per token already split over the tensor-parallel ranks.
  constexpr std::int64_t split(std::int64_t local_width) const {
    return checked_mul(tokens_, local_width);
  }

  constexpr void add(const char* name, const char* source, std::int64_t elements, std::int64_t bits,
                     saved_flags flags = {}) {
    if (elements == 0 || bits == 0) return;
    ledger_.push_back({.name = name,
                       .source = source,
                       .size = bytes_for_bits(checked_mul(elements, bits)),
                       .elements = elements,
                       .bits = bits,
                       .recomputed_by_selective = flags.selective,
                       .part = part_,
                       .output_linear_input = flags.output_linear_input,
                       .freed = flags.freed});
  }
  /// As add(), for one tensor so small that its allocator block counts: every allocation takes a
  /// multiple of 512 B (c10/cuda/CUDACachingAllocator.cpp round_size: kMinBlockSize), as the
  /// model states count theirs (allocator_rounding()).
  constexpr void add_block(const char* name, const char* source, std::int64_t elements,
                           std::int64_t bits, saved_flags flags = {}) {
    const std::size_t before = ledger_.size();
    add(name, source, elements, bits, flags);
    if (ledger_.size() == before) return;
    saved_tensor& x = ledger_[ledger_.size() - 1];
    x.size += allocator_rounding(x.size);
  }
  /// What follows belongs to the MLP half of the layer.
  constexpr void begin_mlp() { part_ = layer_part::mlp; }

  /// The layer's input needs no gradient (layer_input_frozen()): until an adapter's output joins
  /// the residual stream, an operator whose inputs and weights all need none records no backward
  /// node and saves nothing (torch/csrc/autograd/function.h: compute_requires_grad).
  constexpr void input_needs_no_grad() { stream_grad_ = false; }
  /// Whether the residual stream needs a gradient here.
  [[nodiscard]] constexpr bool stream_grad() const { return stream_grad_; }
  /// An output joins the residual stream: from here on, it needs a gradient if `grad`.
  constexpr void stream_joined(bool grad) { stream_grad_ = stream_grad_ || grad; }
  /// Whether the layer's linear `module` carries a LoRA adapter over a frozen base.
  [[nodiscard]] constexpr bool adapted(const char* module) const {
    return frozen_base_ && lora_targets(f_.lora.targets, module);
  }
  /// Whether the output of one of the linears `modules` needs a gradient: its input does, or an
  /// adapter adds to it (a trained base's weight always does).
  [[nodiscard]] constexpr bool output_grad(const linear_readers& modules, std::size_t i) const {
    if (stream_grad_ || !frozen_base_) return true;
    return adapted(modules.names[modules.count == 3 ? i : 0]);  // else one fused projection
  }
  /// Which of Q, K and V need a gradient (head_projections() sets them for the core).
  struct qkv_grads {
    bool q = true, k = true, v = true;
  };
  constexpr void set_qkv_grads(qkv_grads g) { qkv_ = g; }
  [[nodiscard]] constexpr qkv_grads qkv() const { return qkv_; }

  /// What the linears `modules` keep of their one input (`name`): trained, the input (one
  /// autocast copy per linear, else shared); on a frozen LoRA base, per adapted linear, lora_A's
  /// cast input and its rank-r output that lora_B keeps (peft tuners/lora/layer.py Linear.forward).
  constexpr void linear_input(const char* name, const char* source, std::int64_t rows,
                              std::int64_t width, const linear_readers& modules,
                              saved_flags flags = {}) {
    const std::int64_t elements = checked_mul(rows, width);
    const auto readers = static_cast<std::int64_t>(modules.count);
    if (!frozen_base_) {
      add(name, source, checked_mul(elements, input_casts(readers)), beta_, flags);
      return;
    }
    std::int64_t adapted = 0;
    for (std::size_t i = 0; i < modules.count; ++i)
      adapted += lora_targets(f_.lora.targets, modules.names[i]) ? 1 : 0;
    if (adapted == 0) return;
    const std::int64_t bits = autocast_ ? beta_ : adapter_bits_;
    const std::int64_t copies = autocast_ || bits != rho_ ? adapted : 1;
    add("LoRA input (adapter format)",
        "peft tuners/lora/layer.py Linear.forward: x = self._cast_input_dtype(x, "
        "lora_A.weight.dtype)",
        checked_mul(elements, copies), bits, flags);
    add("LoRA A output (rank r)",
        "peft tuners/lora/layer.py Linear.forward: lora_B(lora_A(dropout(x))) * scaling",
        checked_mul(checked_mul(rows, f_.lora.rank), adapted), bits);
  }

  /// A second LayerNorm over an input the first already keeps (Falcon's ln_mlp beside ln_attn,
  /// both over the layer's input): only its fp32 mean and rstd are new.
  constexpr void shared_input_norm(const char* name) {
    if (!stream_grad_ || !o_.norm_statistics) return;
    add(name,
        "modeling_falcon.py FalconDecoderLayer.forward: mlp_layernorm_out = "
        "self.ln_mlp(hidden_states); derivatives.yaml native_layer_norm: "
        "native_layer_norm_backward(..., result1, result2, ...)",
        checked_mul(2, replicated(1)), 32);
  }

  /// A norm over `width` features: what its implementation saves, not its output.
  constexpr void norm(const char* name, std::int64_t width) {
    // A frozen norm over an input that needs no gradient saves nothing (input_needs_no_grad()).
    if (!stream_grad_) return;
    const std::int64_t rows = replicated(1);
    if (m_.norm == norm_kind::layernorm) {
      // aten native_layer_norm: input, mean and rstd (fp32 per row).
      add(name,
          "torch nn.LayerNorm, derivatives.yaml native_layer_norm: "
          "native_layer_norm_backward(grad, input, ...)",
          replicated(width), rho_);
      if (o_.norm_statistics)
        add("norm mean and rstd (fp32)",
            "torch nn.LayerNorm, derivatives.yaml native_layer_norm: "
            "native_layer_norm_backward(..., result1, result2, ...)",
            checked_mul(2, rows), 32);
    } else if (o_.code != model_code::hf) {
      // The model codes' RMSNorms (sources_of()): a fused kernel keeps its input as it is
      // and an fp32 rstd; the others keep what Hugging Face's does, litgpt's normalized input in
      // fp32 (it multiplies by weight.float() before casting back).
      const code_sources src = sources_of(o_.code);
      const code_traits code = traits_of(o_.code);
      add(name, src.norm_input, replicated(width), code.fused_norm ? rho_ : 32);
      if (o_.norm_statistics) add("norm rstd (fp32)", src.norm_rstd, rows, 32);
      if (!code.fused_norm)
        add("norm normalized input", src.norm_normalized, replicated(width),
            code.fp32_normalized ? 32 : rho_);
      if (code.fp32_normalized)  // the multiply's other operand, for the normalized input's
        add("norm weight (fp32 copy)",
            "litgpt/model.py RMSNorm.forward: weight.float(), saved by x_normed * weight.float()",
            width, 32);
    } else {
      // Hugging Face RMSNorm: x.to(fp32) (saved by pow and mul), rsqrt (fp32 per row), and the
      // normalized x in the residual format (saved by the weight multiply).
      const bool gemma = m_.norm_plus_one;
      add(name,
          gemma ? "modeling_gemma2.py Gemma2RMSNorm.forward: self._norm(x.float())"
                : "modeling_llama.py LlamaRMSNorm.forward: hidden_states.to(torch.float32)",
          replicated(width), 32);
      if (o_.norm_statistics)
        add("norm rstd (fp32)",
            gemma ? "modeling_gemma2.py Gemma2RMSNorm._norm: torch.rsqrt(x.pow(2).mean(-1, "
                    "keepdim=True) + self.eps)"
                  : "modeling_llama.py LlamaRMSNorm.forward: torch.rsqrt(variance + "
                    "self.variance_epsilon)",
            rows, 32);
      // Saved by the weight multiply for the weight's gradient: none for a frozen weight. gpt-oss
      // and Gemma multiply before they cast back, so what they save is fp32; Gemma's multiply
      // also keeps its fp32 (1 + weight) for the input's gradient.
      const bool gpt_oss = m_.is_moe() && m_.moe.layout == moe_layout::gpt_oss;
      const bool fp32_product = gpt_oss || gemma;
      if (!frozen_base_)
        add("norm normalized input",
            gpt_oss ? "modeling_gpt_oss.py GptOssRMSNorm.forward: (self.weight * "
                      "hidden_states).to(input_dtype)"
            : gemma ? "modeling_gemma2.py Gemma2RMSNorm.forward: output * (1.0 + "
                      "self.weight.float())"
                    : "modeling_llama.py LlamaRMSNorm.forward: self.weight * "
                      "hidden_states.to(input_dtype)",
            replicated(width), fp32_product ? 32 : rho_);
      if (gemma)
        add("norm 1 + weight (fp32)",
            "modeling_gemma2.py Gemma2RMSNorm.forward: (1.0 + self.weight.float())", width, 32);
    }
  }

  /// A per-head RMSNorm of `width` over `heads` local heads (Qwen3's and Gemma 3's q_norm and
  /// k_norm), read from a projection's output in the compute format: as norm(), its normalized
  /// input in that format, or Gemma's fp32 product and (1 + weight).
  constexpr void head_norm(const char* name, std::int64_t heads, std::int64_t width,
                           bool grad = true) {
    if (!grad) return;  // its projection's output needs no gradient: nothing saved
    if (traits_of(o_.code).fused_norm) {
      // torchtitan's Qwen3: nn.RMSNorm over the contiguous copy FusedQKVLinear makes of each
      // projection (_split: .contiguous()), which the fused kernel keeps with an fp32 rstd;
      // Megatron's TENorm over the reshaped Q and a contiguous K (tests/validation E21).
      add(name,
          o_.code == model_code::megatron_te
              ? "Megatron-Core transformer/attention.py SelfAttention.get_query_key_value_tensors:"
                " self.q_layernorm(query), self.k_layernorm(key); TE RMSNorm saves its input and "
                "rsigma"
              : "torchtitan models/common/attention.py GQAttention.forward: self.q_norm(xq_TNH), "
                "self.k_norm(xk_TNH); derivatives.yaml _fused_rms_norm: "
                "_fused_rms_norm_backward(grad, input, ...)",
          split(checked_mul(heads, width)), beta_);
      if (o_.norm_statistics)
        add("head norm rstd (fp32)", sources_of(o_.code).norm_rstd, split(heads), 32);
      return;
    }
    const bool gemma = m_.norm_plus_one;
    add(name,
        gemma ? "modeling_gemma3.py Gemma3Attention.forward: self.q_norm(query_states), k_norm "
                "alike; Gemma3RMSNorm.forward: self._norm(x.float())"
              : "modeling_qwen3.py Qwen3Attention.forward: self.q_norm(self.q_proj(hidden_states)"
                ".view(hidden_shape)), k_norm alike; Qwen3RMSNorm.forward: "
                "hidden_states.to(torch.float32)",
        split(checked_mul(heads, width)), 32);
    if (o_.norm_statistics)
      add("head norm rstd (fp32)",
          gemma ? "modeling_gemma3.py Gemma3RMSNorm._norm: torch.rsqrt(x.pow(2).mean(-1, "
                  "keepdim=True) + self.eps)"
                : "modeling_qwen3.py Qwen3RMSNorm.forward: torch.rsqrt(variance + "
                  "self.variance_epsilon)",
          split(heads), 32);
    // As the layers' norms (norm()): Gemma's multiply keeps its fp32 product and (1 + weight).
    if (!frozen_base_)
      add("head norm normalized input",
          gemma ? "modeling_gemma3.py Gemma3RMSNorm.forward: output * (1.0 + self.weight.float())"
                : "modeling_qwen3.py Qwen3RMSNorm.forward: self.weight * "
                  "hidden_states.to(input_dtype)",
          split(checked_mul(heads, width)), gemma ? 32 : beta_);
    if (gemma)
      add("head norm 1 + weight (fp32)",
          "modeling_gemma3.py Gemma3RMSNorm.forward: (1.0 + self.weight.float())", width, 32);
  }

  constexpr void dropout_mask(const char* name, std::int64_t elements) {
    add(name,
        "torch nn.Dropout, derivatives.yaml native_dropout: native_dropout_backward(grad, "
        "result1, ...)",
        elements, o_.dropout_mask_bits);
  }

  [[nodiscard]] constexpr saved_tensor_ledger result() const { return ledger_; }
  [[nodiscard]] constexpr std::int64_t tokens() const { return tokens_; }
  [[nodiscard]] constexpr std::int64_t beta() const { return beta_; }
  [[nodiscard]] constexpr std::int64_t rho() const { return rho_; }
  [[nodiscard]] constexpr std::int64_t tp() const { return tp_; }
  /// LoRA: the base (embeddings, linears, norms and head) is frozen.
  [[nodiscard]] constexpr bool frozen_base() const { return frozen_base_; }
  [[nodiscard]] constexpr bool autocasts() const { return autocast_; }
  /// Bits of a LoRA adapter's weights (and of what it computes without autocast).
  [[nodiscard]] constexpr std::int64_t adapter_bits() const { return adapter_bits_; }
  /// LoRA over transformers 5's MoE layers: no adapter reaches the router or the experts.
  [[nodiscard]] constexpr bool packed_moe() const { return f_.lora.packed_moe; }
  [[nodiscard]] constexpr model_code code() const { return o_.code; }
  /// The attention kernel that runs (attention_kernel()).
  [[nodiscard]] constexpr attention_kind attention() const { return attention_; }
  /// SDPA asked for, its math kernel run: eager's tensors, in fp32.
  [[nodiscard]] constexpr bool math_kernel() const { return math_kernel_; }
  /// Bits of Q, K, V and the probabilities the attention core keeps: attention.cpp
  /// _scaled_dot_product_attention_math upcasts 16-bit inputs to fp32 (query_acc, key_acc,
  /// value_acc).
  [[nodiscard]] constexpr std::int64_t core_bits() const { return math_kernel_ ? 32 : beta_; }
  /// The 16-bit copies of one fp32 input that `readers` linears keep: autocast casts an input
  /// per call (only leaf weights are cached: autocast_mode.cpp cached_cast), so each linear
  /// reading the fp32 residual stream saves its own copy; otherwise they share one tensor.
  [[nodiscard]] constexpr std::int64_t input_casts(std::int64_t readers) const {
    return autocast_ && rho_ > beta_ ? readers : 1;
  }
  /// Bits of what an operator on autocast's fp32 list (softmax, pow) or promoted by one keeps.
  [[nodiscard]] constexpr std::int64_t autocast_wide() const { return autocast_ ? 32 : beta_; }
  /// Bits of what an explicit fp32 cast feeding a linear becomes: under autocast the linear casts
  /// it back to the compute format.
  [[nodiscard]] constexpr std::int64_t explicit_fp32() const { return autocast_ ? beta_ : 32; }

 private:
  const model& m_;
  const activation_options& o_;
  const layout& l_;
  std::int64_t tp_ = 1, tokens_ = 0, beta_ = 16, rho_ = 16;
  const finetuning& f_;
  bool autocast_ = false, frozen_base_ = false, stream_grad_ = true, math_kernel_ = false;
  qkv_grads qkv_{};
  attention_kind attention_ = attention_kind::flash;
  std::int64_t adapter_bits_ = 16;
  layer_part part_ = layer_part::attention;
  saved_tensor_ledger ledger_{};
};

/// The format of eager attention's softmax output: fp32 in HF's Llama family (softmax(dtype=
/// float32)) and GPTBigCode (attention_softmax_in_fp32); gpt-oss keeps the logits' format, which
/// the sinks (a parameter) and the mask (in the embeddings' format) widen to the parameters' (cat
/// is on autocast's promote list); GPT-2's softmax without a dtype runs in fp32 under autocast (on
/// its fp32 list), as BERT's and DistilBERT's do.
constexpr std::int64_t eager_softmax_bits(const model& m, const block_builder& b) {
  if (m.attention_sinks) return b.rho();
  if (m.family == family::llama || m.family == family::phi3 || m.family == family::gpt_bigcode)
    return 32;
  if (b.math_kernel())
    return 32;  // attention.cpp _scaled_dot_product_attention_math: fp32 _safe_softmax
  // modeling_falcon.py FalconAttention.forward: F.softmax(..., dtype=hidden_states.dtype), the fp32
  // LayerNorm output under autocast.
  if (m.family == family::falcon) return b.autocast_wide();
  // modeling_bert.py eager_attention_forward and modeling_distilbert.py
  // MultiHeadSelfAttention.forward: nn.functional.softmax(scores, dim=-1), as GPT-2's.
  return m.family == family::gpt2 || m.is_bert_style() ? b.autocast_wide() : b.beta();
}

/// Where eager attention's softmax output and its 16-bit copy come from: Llama's
/// eager_attention_forward (its copies in every family built on it) or GPT-2's _attn.
constexpr const char* eager_softmax_source(const model& m) {
  if (m.family == family::gpt2)
    return "modeling_gpt2.py eager_attention_forward: nn.functional.softmax(attn_weights, dim=-1)";
  if (m.family == family::llama || m.family == family::phi3)
    return "modeling_llama.py eager_attention_forward: nn.functional.softmax(attn_weights, dim=-1, "
           "dtype=torch.float32)";
  if (m.family == family::bert)
    return "modeling_bert.py eager_attention_forward: nn.functional.softmax(attn_weights, dim=-1)";
  if (m.family == family::distilbert)
    return "modeling_distilbert.py MultiHeadSelfAttention.forward: "
           "nn.functional.softmax(scores, dim=-1)";
  return "the attention's softmax, derivatives.yaml _softmax: _softmax_backward_data(grad, "
         "result, ...)";
}

/// Attention scores kept by eager attention: the softmax output, then either the dropout mask
/// and output or, without dropout and with an fp32 softmax, the 16-bit copy the value matmul
/// saves (GPT-2: attn_weights.type(value.dtype)).
constexpr void eager_scores(block_builder& b, const model& m, const activation_options& o,
                            std::int64_t local_heads) {
  const std::int64_t rows =
      checked_mul(checked_mul(o.micro_batch, local_heads), b.tokens() / o.micro_batch);
  const std::int64_t scores = checked_mul(rows, o.sequence);
  const std::int64_t softmax_bits = eager_softmax_bits(m, b);
  // The softmax's backward frees its output; the value matmul's and the dropout's backward, which
  // run before it, free theirs (a 16-bit copy, the dropout's output and mask) first.
  constexpr saved_flags softmax_output{.selective = true, .freed = freed_at::core_end};
  constexpr saved_flags value_matmul_input{.selective = true, .freed = freed_at::core_start};
  // Over a frozen input (head_projections()): the scores need a gradient only through Q or K, the
  // value matmul keeps the probabilities only for V's.
  const block_builder::qkv_grads g = b.qkv();
  const bool scores_grad = g.q || g.k;
  if (!scores_grad && !g.v) return;
  if (!scores_grad) {
    b.add("attention probabilities (value matmul input)",
          "modeling_llama.py eager_attention_forward: torch.matmul(attn_weights, value_states)",
          scores, b.core_bits(), value_matmul_input);
    return;
  }
  if (m.attention_softcap)
    // tanh_backward(grad, result) reads its output, after the softmax's backward.
    b.add("attention logits soft-capped (tanh output)",
          "modeling_gemma2.py eager_attention_forward: attn_weights = torch.tanh(attn_weights / "
          "softcap)",
          scores, b.beta(), softmax_output);
  if (m.attention_sinks) {
    // modeling_gpt_oss.py eager_attention_forward: each row gains its head's sink logit
    // ([.., s, s + 1]); max(dim=-1) keeps its int64 indices; the value matmul reads a view of the
    // softmax output without the sink column.
    b.add("attention softmax output (with the sink column)",
          "modeling_gpt_oss.py eager_attention_forward: probs = F.softmax(combined_logits, "
          "dim=-1, dtype=combined_logits.dtype)",
          checked_add(scores, rows), softmax_bits, softmax_output);
    b.add("attention logits max indices (int64)",
          "modeling_gpt_oss.py eager_attention_forward: combined_logits.max(dim=-1, "
          "keepdim=True)",
          rows, 64, {.selective = true});
  } else {
    b.add("attention softmax output", eager_softmax_source(m), scores, softmax_bits,
          softmax_output);
  }
  if (o.attention_dropout) {
    b.add("attention dropout mask",
          "torch nn.functional.dropout, derivatives.yaml native_dropout: "
          "native_dropout_backward(grad, result1, ...)",
          scores, o.dropout_mask_bits, value_matmul_input);
    if (g.v)
      b.add("attention dropout output",
            "modeling_llama.py eager_attention_forward: torch.matmul(attn_weights, value_states) "
            "after nn.functional.dropout",
            scores, b.beta(), value_matmul_input);
  } else if (softmax_bits != b.core_bits() && g.v) {
    b.add("attention probabilities (16-bit copy)",
          m.family == family::gpt2
              ? "modeling_gpt2.py eager_attention_forward: attn_weights.type(value.dtype), read "
                "by torch.matmul(attn_weights, value)"
              : "modeling_llama.py eager_attention_forward: softmax(...).to(query.dtype), read by "
                "torch.matmul(attn_weights, value_states)",
          scores, b.beta(), value_matmul_input);
  }
}

/// Where the attention's first projections read the norm output.
constexpr const char* attention_input_source(const model& m) {
  if (m.is_mla())
    return "modeling_deepseek.py DeepseekV2Attention.forward: "
           "self.q_a_proj(hidden_states), self.kv_a_proj_with_mqa(hidden_states)";
  if (m.family == family::llama)
    return "modeling_llama.py LlamaAttention.forward: self.q_proj(hidden_states), "
           "self.k_proj(hidden_states), self.v_proj(hidden_states)";
  if (m.family == family::phi3)
    return "modeling_phi3.py Phi3Attention.forward: qkv = self.qkv_proj(hidden_states)";
  if (m.family == family::gpt2)
    return "modeling_gpt2.py GPT2Attention.forward: self.c_attn(hidden_states)";
  return "the Q, K, V projection (a linear keeps its input), derivatives.yaml mm: "
         "mm_mat2_backward(grad, self, ...)";
}

/// Where the attention's output projection reads the merged heads.
constexpr const char* out_projection_source(const model& m) {
  if (m.family == family::llama || m.family == family::phi3)
    return "modeling_llama.py LlamaAttention.forward: self.o_proj(attn_output) after "
           "attn_output.reshape(*input_shape, -1).contiguous()";
  if (m.family == family::gpt2)
    return "modeling_gpt2.py GPT2Attention.forward: self.c_proj(attn_output) after "
           "attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()";
  return "the output projection (a linear keeps its input), derivatives.yaml mm: "
         "mm_mat2_backward(grad, self, ...)";
}

/// The fp32 log-sum-exp per query row that SDPA's kernels keep.
constexpr void softmax_lse(block_builder& b, const activation_options& o, std::int64_t heads) {
  const std::int64_t rows =
      checked_mul(checked_mul(o.micro_batch, heads), b.tokens() / o.micro_batch);
  b.add("softmax log-sum-exp (fp32)",
        o.code == model_code::hf ? sdpa_backward_source : sources_of(o.code).lse, rows, 32,
        {.freed = freed_at::core_end});  // read by the attention's backward only
  if (o.code == model_code::megatron_te)
    // The philox seed and offset it drew, dropout or not: one more of its aux_ctx_tensors.
    b.add_block("attention RNG state (2 int64)",
                "TransformerEngine csrc/extensions/attention.cpp fused_attn_fwd: rng_state = "
                "torch::empty({2}, kInt64), saved by backends.py FusedAttnFunc.forward",
                2, 64, {.freed = freed_at::core_end});
}

/// torchtitan's MLA (models/deepseek_v3/model.py Attention.forward at b5bcd76) with flex
/// attention: its fused RMSNorms keep their inputs (kv_norm's a view of wkv_a's whole output)
/// and fp32 rstd, ComplexRoPE its table's rows, the two cats Q and K, flex V (a view of wkv_b's
/// whole output), its output (wo's input) and log-sum-exp (traced: tests/validation
/// torchtitan-deepseek3-*). The low-rank paths are replicated under TP, the heads split.
constexpr void torchtitan_mla_attention(block_builder& b, const model& m,
                                        const activation_options& o, std::int64_t heads) {
  const std::int64_t beta = b.beta(), rows = b.replicated(1);
  const mla_config& a = m.mla;
  const char* rstd =
      "torchtitan models/common/nn_modules.py RMSNorm: F.rms_norm -> "
      "_fused_rms_norm keeps input and rstd";
  if (a.q_lora_rank > 0) {
    b.add("wq_a output (q_norm input)", rstd, b.replicated(a.q_lora_rank), beta);
    if (o.norm_statistics) b.add("q_norm rstd (fp32)", rstd, rows, 32);
    b.add("wq_b input (q_norm output)",
          "torchtitan models/deepseek_v3/model.py Attention.forward: self.wq_b(self.q_norm(q))",
          b.replicated(a.q_lora_rank), beta);
  }
  b.add("wkv_a output (kept whole by kv_norm's input view)",
        "torchtitan models/deepseek_v3/model.py Attention.forward: kv, k_pe = torch.split("
        "self.wkv_a(x), ...); self.kv_norm(kv)",
        b.replicated(a.kv_lora_rank + a.qk_rope_head_dim), beta);
  if (o.norm_statistics) b.add("kv_norm rstd (fp32)", rstd, rows, 32);
  b.add("wkv_b input (kv_norm output)",
        "torchtitan models/deepseek_v3/model.py Attention.forward: self.wkv_b(self.kv_norm(kv))",
        b.replicated(a.kv_lora_rank), beta);
  b.add("rotary table rows (complex64)",
        "torchtitan models/common/rope.py ComplexRoPE._reshape_cache: rope_cache[positions], "
        "saved by xq_ * rope_cache and xk_ * rope_cache",
        b.replicated(a.qk_rope_head_dim / 2), 64);
  const std::int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  b.add("query (cat of nope and rotated rope parts)",
        "torchtitan models/deepseek_v3/model.py Attention.forward: q = torch.cat([q_nope, q_pe], "
        "dim=-1)",
        b.split(heads * qk), beta);
  b.add("key (cat of nope and rotated rope parts)",
        "torchtitan models/deepseek_v3/model.py Attention.forward: k = torch.cat([k_nope, "
        "k_pe.expand(-1, k_nope.size(1), -1)], dim=-1)",
        b.split(heads * qk), beta);
  b.add("wkv_b output (holds V)",
        "torchtitan models/deepseek_v3/model.py Attention.forward: k_nope, v = torch.split(kv, "
        "...) (views of kv)",
        b.split(heads * (a.qk_nope_head_dim + a.v_head_dim)), beta);
  b.add("attention output (flex output, wo input)",
        "torchtitan models/deepseek_v3/model.py Attention.forward: "
        "self.wo(output.view(num_tokens, -1))",
        b.split(heads * a.v_head_dim), beta, {.output_linear_input = true});
  softmax_lse(b, o, heads);
}

/// DeepSeek-V2 MLA (modeling_deepseek): the low-rank paths' norms and inputs, then full-width Q
/// and K (nope + rope parts) and V, which the attention saves, and the attention core.
constexpr void mla_attention(block_builder& b, const model& m, const activation_options& o,
                             std::int64_t heads) {
  if (o.code == model_code::torchtitan) return torchtitan_mla_attention(b, m, o, heads);
  const std::int64_t beta = b.beta();
  const mla_config& a = m.mla;
  if (a.q_lora_rank > 0) {
    b.norm("q_a_layernorm input (fp32)", a.q_lora_rank);
    b.add("q_b input (norm output)",
          "modeling_deepseek.py DeepseekV2Attention.forward: "
          "self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))",
          b.replicated(a.q_lora_rank), beta);
  }
  b.norm("kv_a_layernorm input (fp32)", a.kv_lora_rank);
  b.add("kv_b input (norm output)",
        "modeling_deepseek.py DeepseekV2Attention.forward: "
        "self.kv_b_proj(self.kv_a_layernorm(compressed_kv))",
        b.replicated(a.kv_lora_rank), beta);
  const std::int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  b.add("query (nope + rope)",
        "modeling_deepseek.py DeepseekV2Attention.forward: query_states of q_nope and the rotated "
        "q_pe",
        b.split(heads * qk), beta);
  b.add("key (nope + rope)",
        "modeling_deepseek.py DeepseekV2Attention.forward: key_states of k_nope and the rotated "
        "k_pe",
        b.split(heads * qk), beta);
  if (b.attention() == attention_kind::eager)
    // The value matmul's reshape copies the strided V view (its bmm saves the copy); K's part of
    // kv_b's output is copied by the cat, so nothing keeps that output.
    b.add("value (the value matmul's contiguous copy)",
          "modeling_deepseek_v3.py eager_attention_forward: torch.matmul(attn_weights, "
          "value_states) on a split view of kv_b_proj's output (aten matmul: reshape copies)",
          b.split(heads * a.v_head_dim), beta, {.freed = freed_at::core_start});
  else
    b.add("kv_b output (holds the value)",
          "modeling_deepseek.py DeepseekV2Attention.forward: k_nope, value_states = "
          "torch.split(kv, ...) (views of kv)",
          b.split(heads * (a.qk_nope_head_dim + a.v_head_dim)), beta);
  if (b.attention() == attention_kind::eager) {
    eager_scores(b, m, o, heads);
    b.add("attention output (o_proj input)", out_projection_source(m),
          b.split(heads * a.v_head_dim), beta, {.output_linear_input = true});
  } else {
    b.add("attention output", sdpa_backward_source, b.split(heads * a.v_head_dim), beta);
    softmax_lse(b, o, heads);
  }
}

/// Where fused Q, K and V come from: views of one projection's output (or, in BERT and
/// DistilBERT, three projections' outputs of the same size), which the attention reads.
constexpr const char* fused_qkv_source(const model& m) {
  switch (m.family) {
    case family::gpt2:
      return "modeling_gpt2.py GPT2Attention.forward: query_states, key_states, value_states = "
             "self.c_attn(hidden_states).split(self.split_size, dim=2)";
    case family::gpt_bigcode:
      return "modeling_gpt_bigcode.py GPTBigCodeAttention.forward: self.c_attn(hidden_states)";
    case family::vit:
      return "torch nn/functional.py multi_head_attention_forward: q, k, v = "
             "_in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)";
    case family::distilbert:
      return "modeling_distilbert.py MultiHeadSelfAttention.forward: self.q_lin(query), "
             "self.k_lin(key), self.v_lin(value)";
    default:
      return "modeling_bert.py BertSelfAttention.forward: self.query(hidden_states), "
             "self.key(hidden_states), self.value(hidden_states)";
  }
}

/// Q, K and V of multi-head attention (not MLA) as the attention keeps them.
constexpr void head_projections(block_builder& b, const model& m, const activation_options& o,
                                std::int64_t heads) {
  const std::int64_t beta = b.beta();
  const std::int64_t d = m.head_dim;
  const std::int64_t kv = detail::local_kv_heads(m, b.tp());
  // Over a frozen input a projection's output needs a gradient only through its adapter.
  const linear_readers qkv = linears_of(m).attention;
  const block_builder::qkv_grads g{
      .q = b.output_grad(qkv, 0), .k = b.output_grad(qkv, 1), .v = b.output_grad(qkv, 2)};
  b.set_qkv_grads(g);
  // The core's backward node: eager's matmuls save each operand only for the other's gradient
  // (derivatives.yaml bmm: self: grad.bmm(mat2...), mat2: self.transpose(1, 2).bmm(grad); the
  // generated code guards each saved input by should_compute_output); SDPA's saves all or none.
  const bool eager = b.attention() == attention_kind::eager;
  const bool any = g.q || g.k || g.v;
  if (m.family == family::falcon && any) {
    // FalconAttention._split_heads takes K and V with a list index (fused_qkv[..., [-2], :], or
    // qkv[:, :, :, [-2]] in new_decoder_architecture): python_variable_indexing.cpp
    // sequenceToVariable makes each list an int64 tensor on the device, which index.Tensor saves
    // (derivatives.yaml index.Tensor: index_backward(..., indices, grad)); one block each.
    const char* source =
        "modeling_falcon.py FalconAttention._split_heads: [-2] and [-1] as index tensors, saved "
        "by index.Tensor (derivatives.yaml: index_backward(grad.new_zeros(...), indices, grad))";
    b.add_block("K index tensor (int64)", source, 1, 64);
    b.add_block("V index tensor (int64)", source, 1, 64);
  }
  // SDPA's backward reads Q, K and V last (the rotary's and the projections' backward read
  // none of them): they go as it ends. Eager's matmuls keep theirs (eager_scores).
  const freed_at sdpa_read = eager ? freed_at::half_end : freed_at::core_end;
  if (fused_qkv(m)) {
    // Q, K and V are views of one projection output, which therefore stays whole (BERT's and
    // DistilBERT's three projections keep the same elements).
    if (any)
      b.add("QKV projection output", fused_qkv_source(m), b.split((heads + 2 * kv) * d), beta,
            {.freed = sdpa_read});
    return;
  }
  // modeling_qwen3.py: q_norm and k_norm over each head of the projections' outputs.
  if (m.qk_norm) {
    const bool fused = traits_of(o.code).fused_norm;
    b.head_norm(fused ? "q_norm input" : "q_norm input (fp32)", heads, d, g.q);
    b.head_norm(fused ? "k_norm input" : "k_norm input (fp32)", kv, d, g.k);
  }
  const bool rotary = m.positions == position_kind::rotary;
  const bool hf = o.code == model_code::hf;
  code_sources code = sources_of(o.code);
  if (torchtitan_qwen3(o.code, m)) {
    code.query =
        "torchtitan models/common/rope.py CosSinRoPE.apply_rotary_emb: xq_out.type_as(query)";
    code.key = "torchtitan models/common/rope.py CosSinRoPE.apply_rotary_emb: xk_out.type_as(key)";
  }
  // (The math kernel saves Q scaled instead, of the same size.)
  if (eager ? g.k : any)
    b.add("query (after rotary)",
          !hf ? code.query
          : rotary
              ? "modeling_llama.py apply_rotary_pos_emb: q_embed = (q * cos) + (rotate_half(q) "
                "* sin)"
              : "the query projection's output, read by the attention",
          b.split(heads * d), b.core_bits(), {.freed = sdpa_read});
  // Its table's rows for the tokens' positions, a new tensor per layer, which the multiplies
  // save (torchtitan always passes the packed documents' positions): ComplexRoPE's complex64
  // (Llama 3), CosSinRoPE's fp32 cos and sin side by side (Qwen3).
  if (traits_of(o.code).rope_rows && (g.q || g.k) && torchtitan_qwen3(o.code, m))
    b.add("rotary table rows (fp32 cos and sin)",
          "torchtitan models/common/rope.py _reshape_for_broadcast: rope_cache[positions]; "
          "CosSinRoPE.apply_rotary_emb: (query_f * cos) + (_rotate_half(query_f) * sin)",
          b.split(2 * d), 32);
  else if (traits_of(o.code).rope_rows && (g.q || g.k))
    b.add("rotary table rows (complex64)",
          "torchtitan models/common/rope.py _reshape_for_broadcast: rope_cache[positions], saved "
          "by xq_ * rope_cache and xk_ * rope_cache",
          b.split(d / 2), 64);
  // Eager attention and SDPA without native GQA repeat the KV heads into new tensors (HF
  // repeat_kv; the math kernel's repeat_interleave), flash keeps them. With one KV head and one
  // sequence both repeat and matmul stay views (docs/sources.md#hf-attention): K, V kept as is.
  const bool repeat_is_view = kv == 1 && o.micro_batch == 1 && o.attention != attention_kind::flash;
  const bool repeated =
      b.attention() == attention_kind::eager || b.attention() == attention_kind::sdpa;
  const std::int64_t kv_saved = repeated && kv < heads && !repeat_is_view ? heads : kv;
  const bool copies = kv_saved != kv;
  if (eager ? g.q : any)
    b.add("key (after rotary)",
          !hf      ? code.key
          : copies ? "modeling_llama.py eager_attention_forward: key_states = repeat_kv(key, "
                     "module.num_key_value_groups)"
          : rotary
              ? "modeling_llama.py apply_rotary_pos_emb: k_embed = (k * cos) + (rotate_half(k) "
                "* sin)"
              : "the key projection's output, read by the attention",
          b.split(kv_saved * d), b.core_bits(), {.freed = sdpa_read});
  // The value matmul keeps V for the probabilities' gradient.
  if (eager ? !(g.q || g.k) : !any) return;
  if (m.family == family::phi3 && !copies)
    // modeling_phi3.py slices Q, K and V out of one qkv_proj output; the rotary makes new Q
    // and K, but the attention saves V, a view that keeps the whole output alive.
    b.add("value (a view: keeps the qkv_proj output)",
          "modeling_phi3.py Phi3Attention.forward: value_states = qkv[..., query_pos + "
          "self.num_key_value_heads * self.head_dim :]",
          b.split((heads + 2 * kv) * d), beta, {.freed = sdpa_read});
  else
    // Eager's value matmul reads V last: its backward frees it before the softmax's.
    b.add("value",
          !hf      ? code.value
          : copies ? "modeling_llama.py eager_attention_forward: value_states = repeat_kv(value, "
                     "module.num_key_value_groups)"
                   : "modeling_llama.py LlamaAttention.forward: "
                     "self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)",
          b.split(kv_saved * d), b.core_bits(),
          {.freed = eager ? freed_at::core_start : sdpa_read});
}

/// What multi-head attention (not MLA) keeps of its core: eager's scores, or SDPA's output and
/// log-sum-exp (and the mask it is given), and the output projection's input.
constexpr void head_attention_core(block_builder& b, const model& m, const activation_options& o,
                                   std::int64_t heads) {
  const std::int64_t width = heads * m.head_dim;
  if (b.attention() == attention_kind::eager) {
    eager_scores(b, m, o, heads);
    b.linear_input("attention output (merged heads, o_proj input)", out_projection_source(m),
                   b.split(1), width, linears_of(m).attention_output,
                   {.output_linear_input = true});
    return;
  }
  // SDPA's one backward node saves its inputs, output and statistics for any input's gradient.
  const block_builder::qkv_grads g = b.qkv();
  const bool core_grad = g.q || g.k || g.v;
  if (!core_grad) {
    b.linear_input(
        "attention output (o_proj input)",
        o.code == model_code::hf ? out_projection_source(m) : sources_of(o.code).attention_output,
        b.split(1), width, linears_of(m).attention_output, {.output_linear_input = true});
    return;
  }
  if (m.family == family::phi3 && b.beta() == 16)
    // Phi-3's rotary ends in torch.cat, so Q is contiguous heads-first, cuDNN's output takes
    // Q's layout (aten/src/ATen/native/cudnn/MHA.cpp alloc_with_matching_layout), and
    // transpose(1, 2).contiguous() copies it for o_proj: two tensors, where Llama's is one.
    b.add("attention output (heads-first, kept by SDPA)",
          "aten cudnn/MHA.cpp alloc_with_matching_layout; modeling_phi3.py Phi3Attention.forward: "
          "attn_output.reshape(*input_shape, -1).contiguous() copies it",
          b.split(width), b.beta(), {.freed = freed_at::core_end});
  else if (o.code == model_code::litgpt && b.beta() == 16)
    // litgpt's Q comes out of torch.cat, contiguous heads-first, so cuDNN's output is too and
    // y.transpose(1, 2) then reshape copies it for proj: two tensors, as Phi-3's.
    b.add("attention output (heads-first, kept by SDPA)",
          "litgpt/model.py CausalSelfAttention.forward: q = torch.cat((q_roped, ...)); aten "
          "cudnn/MHA.cpp alloc_with_matching_layout; y.reshape(B, T, head_size * n_head) copies "
          "y.transpose(1, 2)",
          b.split(width), b.beta(), {.freed = freed_at::core_end});
  // Else SDPA's output, laid out as Q ([b, s, h, d] under the transpose), is o_proj's input as
  // is (transpose(1, 2).contiguous() returns it): it goes when SDPA's backward ends, after
  // o_proj's (traced on an H200: docs/timeline.md). A frozen base's entry is the adapter's input.
  const bool heads_first =
      (m.family == family::phi3 || o.code == model_code::litgpt) && b.beta() == 16;
  const saved_flags shared{.freed = freed_at::core_end};
  b.linear_input(
      "attention output (o_proj input)",
      o.code == model_code::hf ? out_projection_source(m) : sources_of(o.code).attention_output,
      b.split(1), width, linears_of(m).attention_output,
      heads_first || b.frozen_base() ? saved_flags{.output_linear_input = true} : shared);
  softmax_lse(b, o, heads);
  if (sdpa_gets_mask(m, o))
    // aten attention.cpp convert_boolean_attn_mask turns Hugging Face's boolean mask into an
    // additive bias in Q's format in every layer's call, and the kernel saves it.
    b.add("attention mask (SDPA's additive bias)",
          "aten transformers/attention.cpp convert_boolean_attn_mask, saved by the SDPA kernel",
          checked_mul(b.tokens(), o.sequence), b.beta(),
          {.selective = true, .freed = freed_at::core_end});
}

/// The attention sub-block's saved tensors (the input norm is added by the caller).
constexpr void attention_block(block_builder& b, const model& m, const activation_options& o) {
  const std::int64_t heads = m.heads / b.tp();
  // Q, K and V as separate projections (Llama, BERT) each cast an fp32 input.
  if (!m.is_mla())
    b.linear_input(
        "attention input (norm output)",
        o.code == model_code::hf ? attention_input_source(m) : sources_of(o.code).attention_input,
        b.replicated(1), m.hidden, linears_of(m).attention);
  else
    b.add("attention input (norm output)",
          o.code == model_code::torchtitan
              ? "torchtitan models/deepseek_v3/model.py Attention.forward: self.wq_a(x), "
                "self.wkv_a(x)"
              : attention_input_source(m),
          b.replicated(m.hidden), b.beta());
  if (m.is_mla()) {
    mla_attention(b, m, o, heads);
  } else {
    head_projections(b, m, o, heads);
    head_attention_core(b, m, o, heads);
  }
  // The attention's output needs a gradient through Q, K or V, or o_proj's adapter.
  const block_builder::qkv_grads g = b.qkv();
  const linear_readers out = linears_of(m).attention_output;
  bool grad = g.q || g.k || g.v;
  for (std::size_t i = 0; i < out.count; ++i) grad = grad || b.adapted(out.names[i]);
  b.stream_joined(grad);
  // modeling_distilbert.py TransformerBlock.forward: sa_layer_norm(attention_output +
  // hidden_states), with no dropout after out_lin.
  if (o.hidden_dropout && b.stream_grad() && m.family != family::distilbert)
    b.dropout_mask("attention residual dropout mask", b.replicated(m.hidden));
}

/// Where a gated MLP's four saved tensors are made: the gate projection's output (the
/// activation's input), the activation's output and the up projection's output (the product's
/// factors) and their product (the down projection's input).
struct gated_mlp_sources {
  const char* gate;
  const char* activation;
  const char* up;
  const char* down_input;
};

constexpr gated_mlp_sources gated_sources(const model& m) {
  if (m.family == family::phi3)
    return {
        "modeling_phi3.py Phi3MLP.forward: gate, up_states = up_states.chunk(2, dim=-1), "
        "read by self.activation_fn(gate)",
        "modeling_phi3.py Phi3MLP.forward: up_states * self.activation_fn(gate)",
        "modeling_phi3.py Phi3MLP.forward: gate, up_states = up_states.chunk(2, dim=-1)",
        "modeling_phi3.py Phi3MLP.forward: self.down_proj(up_states)"};
  return {"modeling_llama.py LlamaMLP.forward: self.act_fn(self.gate_proj(x))",
          "modeling_llama.py LlamaMLP.forward: self.act_fn(self.gate_proj(x)) * self.up_proj(x)",
          "modeling_llama.py LlamaMLP.forward: self.up_proj(x)",
          "modeling_llama.py LlamaMLP.forward: self.down_proj(self.act_fn(self.gate_proj(x)) * "
          "self.up_proj(x))"};
}

/// Where a GELU MLP's down projection reads the activation's output.
constexpr const char* gelu_down_input_source(const model& m) {
  return m.family == family::gpt2
             ? "modeling_gpt2.py GPT2MLP.forward: self.c_proj(hidden_states) after "
               "self.act(hidden_states)"
             : "the down projection (a linear keeps its input), derivatives.yaml mm: "
               "mm_mat2_backward(grad, self, ...)";
}

/// A dense MLP (or shared experts) of `width` (already split over tensor parallel) over `tokens`
/// tokens.
constexpr void mlp_block(block_builder& b, const model& m, std::int64_t tokens, std::int64_t width,
                         const char* what) {
  const std::int64_t n = checked_mul(tokens, width);
  const std::int64_t beta = b.beta();
  const linear_readers down = linears_of(m).mlp_output;
  if (m.mlp == mlp_kind::gelu && m.gelu_in_python) {
    // transformers activations.py NewGELUActivation, 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))):
    // pow keeps its input (fp32 under autocast, on its fp32 list), tanh its output, the last
    // product both factors (fp32 by promotion); the down projection keeps its input.
    b.add("GELU input (kept by pow)",
          "activations.py NewGELUActivation.forward: torch.pow(input, 3.0)", n, b.autocast_wide());
    b.add("GELU tanh output",
          "activations.py NewGELUActivation.forward: torch.tanh(math.sqrt(2.0 / math.pi) * "
          "(...)), derivatives.yaml tanh: tanh_backward(grad, result)",
          n, b.autocast_wide());
    b.add("GELU 1 + tanh", "activations.py NewGELUActivation.forward: (1.0 + torch.tanh(...))", n,
          b.autocast_wide());
    b.add("GELU 0.5 x", "activations.py NewGELUActivation.forward: 0.5 * input", n, beta);
    b.linear_input("GELU output (down input)", gelu_down_input_source(m), tokens, width, down,
                   {.output_linear_input = true});
  } else if (m.mlp == mlp_kind::gelu) {
    // up output: the GELU input, which gelu_backward (the working set's op) reads last
    b.add(what,
          "nn.functional.gelu, derivatives.yaml gelu: gelu_backward(grad, self, "
          "approximate=approximate)",
          n, beta, {.freed = freed_at::core_end});
    b.linear_input("GELU output (down input)", gelu_down_input_source(m), tokens, width, down,
                   {.output_linear_input = true});
  } else if (traits_of(b.code()).fused_swiglu) {
    // Megatron's fused SwiGLU keeps its input, fc1's gate and up halves as one tensor; fc2 keeps
    // the activation's output.
    b.add("fc1 output (gate and up, SwiGLU input)",
          "Megatron-LM core/fusions/fused_bias_swiglu.py SwiGLUFunction.forward: "
          "ctx.save_for_backward(input_for_backward)",
          checked_mul(2, n), beta);
    b.linear_input("SwiGLU output (fc2 input)",
                   "TransformerEngine module/linear.py _Linear.forward: saved_inputmat = inputmat",
                   tokens, width, down, {.output_linear_input = true});
  } else {
    const code_sources code = sources_of(b.code());
    const gated_mlp_sources src =
        b.code() == model_code::hf
            ? gated_sources(m)
            : gated_mlp_sources{code.gate, code.activation, code.up, code.down_input};
    // The product's backward (the working set's op: mul_backward, grad * other and grad * self)
    // reads its factors last and frees them. Phi-3's up half is a view of gate_up_proj's output,
    // whose storage the activation's saved gate half keeps. The gate output goes with the
    // activation's backward: before the input linears' in litgpt (F.silu(x_fc_1) * x_fc_2: the
    // engine runs the ready node of the highest sequence number first, engine.cpp ReadyQueue),
    // after up_proj's where up_proj runs after the activation (HF, torchtitan, torchtune).
    const bool views_one_output = b.code() == model_code::hf && m.family == family::phi3;
    const freed_at gate_freed =
        b.code() == model_code::litgpt ? freed_at::core_end : freed_at::half_end;
    b.add(what, src.gate, n, beta, {.freed = gate_freed});  // gate output: the activation's input
    b.add("activation output", src.activation, n, beta, {.freed = freed_at::core_end});
    b.add("up output", src.up, n, beta,
          {.freed = views_one_output ? freed_at::half_end : freed_at::core_end});
    b.linear_input("gate x up (down input)", src.down_input, tokens, width, down,
                   {.output_linear_input = true});
  }
}

/// Bits of the routing weights transformers 5's experts multiply by: fp32 from Mixtral's and
/// Qwen3-MoE's softmax (Qwen3MoeTopKRouter.forward reassigns router_logits to the fp32
/// probabilities, so its router_top_value.to(router_logits.dtype) keeps fp32), DeepSeek-V3's in
/// its logits' format (fp32 unless autocast casts the linear), gpt-oss's in its logits' format
/// (GptOssTopKRouter.forward: softmax(..., dtype=router_top_value.dtype)).
constexpr std::int64_t routing_weight_bits(const model& m, const block_builder& b) {
  if (m.moe.layout == moe_layout::gpt_oss) return b.beta();
  return m.moe.router_score_bias ? b.explicit_fp32() : 32;
}

/// transformers 5's packed experts (MixtralExperts, Qwen3MoeExperts, GptOssExperts: one
/// gate_up_proj and one down_proj parameter per layer) as the experts implementation trains them
/// (integrations/moe.py, docs/sources.md#hf-moe-experts), over `routed` rows of `width` (the local
/// expert FFN) on `local_experts`. grouped_mm gathers the rows sorted by expert and multiplies
/// whole parameters outside autocast, in their own format; eager takes each hit expert's slice (a
/// view, which autocast casts per call); batched_mm copies every row's expert weights.
constexpr void packed_experts_block(block_builder& b, const model& m, const activation_options& o,
                                    std::int64_t routed, std::int64_t local_experts,
                                    std::int64_t width) {
  const experts_implementation impl = o.experts;
  const bool grouped = impl == experts_implementation::grouped_mm;
  const bool gpt_oss = m.moe.layout == moe_layout::gpt_oss;
  // integrations/moe.py _grouped_mm: grouped_mm(input.to(weight.dtype), weight, offs=offs), not
  // autocast-enabled; F.linear and torch.bmm are on autocast's 16-bit list.
  const std::int64_t bits = grouped ? b.rho() : b.beta();
  // A frozen base (LoRA: peft's target_modules reach no packed parameter) keeps no weight
  // gradient's operands, and a frozen router no routing weight's.
  const bool trained = !b.frozen_base();
  // torch.topk keeps its int64 indices [T, k] (derivatives.yaml topk:
  // value_selecting_reduction_backward(grad, dim, indices, ...)), and each gather its own.
  b.add(grouped ? "expert indices (int64: top-k, token_idx, perm, inv_perm)"
                : "expert indices (int64: top-k, token_idx, and top_k_pos or expert ids)",
        grouped ? "torch.topk; integrations/moe.py grouped_mm_experts_forward: "
                  "hidden_states[token_idx], selected_hidden_states[perm], "
                  "out_per_sample_g[inv_perm]"
                : "torch.topk; modeling_mixtral.py MixtralExperts.forward: top_k_pos, token_idx = "
                  "torch.where(expert_mask[expert_idx]); integrations/moe.py "
                  "batched_mm_experts_forward: self.gate_up_proj[expert_ids_clamped]",
        checked_add(checked_mul(b.tokens(), m.moe.top_k), checked_mul(grouped ? 3 : 2, routed)),
        64);
  if (grouped)  // derivatives.yaml _grouped_mm keeps offs for both products' backward
    b.add_block(
        "expert row offsets (int32)",
        "integrations/moe.py grouped_mm_experts_forward: offsets = torch.cumsum(tokens_per_expert, "
        "dim=0, dtype=torch.int32)",
        local_experts, 32);
  // The gathered inputs (the first projection's, for its weight gradient) and the outputs before
  // weighting (the routing product's, for the weights' gradient): [rows, h] each, alike.
  if (trained)
    b.add(grouped ? "expert inputs (sorted by expert) and outputs before weighting"
                  : "expert inputs (gathered rows) and outputs before weighting",
          grouped ? "integrations/moe.py grouped_mm_experts_forward: "
                    "_grouped_linear(selected_hidden_states_g, self.gate_up_proj, offs=offsets); "
                    "out_per_sample_g * sample_weights_g.unsqueeze(-1)"
                  : "modeling_mixtral.py MixtralExperts.forward: current_state = "
                    "hidden_states[token_idx]; current_hidden_states * top_k_weights[...]",
          checked_mul(2 * routed, m.hidden), bits);
  // transformers 4's per-expert linears under LoRA (lora_config::packed_moe unset): each adapted
  // expert linear keeps its cast input for lora_A and lora_A's rank-r output (linear_input).
  if (b.frozen_base() && !b.packed_moe()) {
    const bool mixtral = m.moe.layout == moe_layout::standard && m.moe.shared_experts == 0;
    b.linear_input(
        "expert inputs (adapted linears)",
        "modeling_mixtral.py MixtralBlockSparseTop2MLP.forward (transformers 4): "
        "self.w1(hidden_states), self.w3(hidden_states)",
        routed, m.hidden,
        mixtral ? linear_readers{{"w1", "w3"}, 2} : linear_readers{{"gate_proj", "up_proj"}, 2});
    b.linear_input("expert gated product (adapted down linear)",
                   "modeling_mixtral.py MixtralBlockSparseTop2MLP.forward (transformers 4): "
                   "self.w2(current_hidden_states)",
                   routed, width,
                   mixtral ? linear_readers{{"w2"}, 1} : linear_readers{{"down_proj"}, 1},
                   {.output_linear_input = true});
  }
  const std::int64_t weights = checked_mul(3 * m.hidden, width);  // gate_up_proj and down_proj
  if (impl == experts_implementation::batched_mm)
    b.add("expert weights copied per routed row",
          "integrations/moe.py batched_mm_experts_forward: self.gate_up_proj[expert_ids_clamped], "
          "self.down_proj[expert_ids_clamped], kept by torch.bmm",
          checked_mul(routed, weights), bits);
  else if (impl == experts_implementation::eager && b.beta() < b.rho())
    b.add("autocast copies of each hit expert's weights",
          "modeling_mixtral.py MixtralExperts.forward: nn.functional.linear(current_state, "
          "self.gate_up_proj[expert_idx]) (autocast casts the slice, a view, on every call)",
          checked_mul(routed < local_experts ? routed : local_experts, weights), bits);
  const std::int64_t n = checked_mul(routed, width);
  if (gpt_oss) {
    b.add("expert gate_up output (kept by both clamps)",
          "modeling_gpt_oss.py GptOssExperts._apply_gate: gate, up = gate_up[..., ::2], "
          "gate_up[..., 1::2], then .clamp(...)",
          checked_mul(2, n), bits);
    b.add("expert clamped gate",
          "modeling_gpt_oss.py GptOssExperts._apply_gate: gate = gate.clamp(min=None, "
          "max=self.limit)",
          n, bits);
    b.add("expert sigmoid output",
          "modeling_gpt_oss.py GptOssExperts._apply_gate: torch.sigmoid(gate * self.alpha)", n,
          bits);
    b.add("expert up + 1", "modeling_gpt_oss.py GptOssExperts._apply_gate: (up + 1) * glu", n,
          bits);
    b.add("expert GLU",
          "modeling_gpt_oss.py GptOssExperts._apply_gate: glu = gate * torch.sigmoid(gate * "
          "self.alpha)",
          n, bits);
  } else {
    b.add("expert gate/up output (chunk views kept by the activation and the product)",
          "integrations/moe.py _default_apply_gate: gate, up = gate_up_out.chunk(2, dim=-1)",
          checked_mul(2, n), bits);
    b.add("expert activation output",
          "integrations/moe.py _default_apply_gate: self.act_fn(gate) * up", n, bits);
  }
  if (trained)
    b.add("expert gated product (down input)",
          "integrations/moe.py grouped_mm_experts_forward: _grouped_linear(gated_out, "
          "self.down_proj, offs=offsets)",
          n, bits, {.output_linear_input = true});
  if (impl == experts_implementation::eager)  // derivatives.yaml index_add: source is read
    b.add("weighted expert outputs (index_add_'s source)",
          "modeling_mixtral.py MixtralExperts.forward: final_hidden_states.index_add_(0, "
          "token_idx, current_hidden_states.to(final_hidden_states.dtype))",
          checked_mul(routed, m.hidden), b.rho());
  b.add("routing weights (gathered)",
        impl == experts_implementation::eager
            ? "modeling_mixtral.py MixtralExperts.forward: top_k_weights[token_idx, top_k_pos, "
              "None], kept by the weighting product"
            : "integrations/moe.py grouped_mm_experts_forward: sample_weights[perm], kept by the "
              "weighting product",
        routed, routing_weight_bits(m, b));
}

/// Where a dense MLP's first projections read the norm output in Hugging Face's code.
constexpr const char* dense_mlp_input_source(const model& m) {
  if (m.family == family::llama && m.mlp != mlp_kind::gelu)
    return "modeling_llama.py LlamaMLP.forward: self.gate_proj(x), self.up_proj(x)";
  if (m.family == family::phi3)
    return "modeling_phi3.py Phi3MLP.forward: self.gate_up_proj(hidden_states)";
  if (m.family == family::gpt2) return "modeling_gpt2.py GPT2MLP.forward: self.c_fc(hidden_states)";
  if (m.family == family::falcon)
    return "modeling_falcon.py FalconDecoderLayer.forward: self.mlp(mlp_layernorm_out); "
           "FalconMLP.forward: self.dense_h_to_4h(x)";
  return "the up projection (a linear keeps its input), derivatives.yaml mm: "
         "mm_mat2_backward(grad, self, ...)";
}

/// The linears that keep the MLP's input (the norm output) and where Hugging Face's code reads
/// it. In an MoE layer the router's F.linear keeps it (under autocast its 16-bit cast) and the
/// experts gather their tokens from it, which keeps only the indices; over a frozen base,
/// adapters reach the router only as transformers 4's nn.Linear (lora_config::packed_moe).
/// DeepSeek's shared experts read it through their gate_proj and up_proj.
struct mlp_input {
  const char* source;
  linear_readers readers;
};

constexpr mlp_input mlp_input_of(const model& m, const block_builder& b, bool moe_layer) {
  const layer_linears linears = linears_of(m);
  if (!moe_layer) return {dense_mlp_input_source(m), linears.mlp};
  if (m.moe.shared_experts > 0)
    return {"modeling_deepseek_v3.py DeepseekV3MoE.forward: self.shared_experts(residuals)",
            linears.mlp};
  const linear_readers router = b.packed_moe() ? linear_readers{} : linears.router;
  if (m.moe.layout == moe_layout::gpt_oss)
    return {
        "modeling_gpt_oss.py GptOssTopKRouter.forward: F.linear(hidden_states, self.weight, "
        "self.bias); GptOssExperts.forward: hidden_states[token_idx]",
        router};
  return {m.moe.layout == moe_layout::mlp_experts
              ? "modeling_qwen3_moe.py Qwen3MoeTopKRouter.forward: F.linear(hidden_states, "
                "self.weight)"
              : "modeling_mixtral.py MixtralTopKRouter.forward: F.linear(hidden_states, "
                "self.weight)",
          router};
}

/// What one MoE layer's block allocates in forward beyond what it saves, all held until its experts
/// return: the locals of integrations/moe.py grouped_mm_experts_forward (the unsorted gather; the
/// weighted product, its un-permuted copy and their sum, in the routing weights' format when that
/// is wider, then the cast back; gpt-oss's gathered biases) or of MixtralExperts.forward's loop
/// (the zeroed output, the one-hot mask, one expert's weighted product at a time, taken as an even
/// share of the rows); and the norm output feeding the block where autocast saves only its casts. A
/// tensor count and bytes.
struct forward_transients {
  std::int64_t tensors = 0;
  bytes size{};
};

/// What a post-LN encoder (BERT, DistilBERT) holds in forward beside what autograd saves, at a
/// layer's output LayerNorm: its new output and the dropout output it adds to the residual
/// (modeling_bert.py BertOutput.forward: self.LayerNorm(hidden_states + input_tensor)); where the
/// linears save 16-bit copies (autocast), the fp32 residual stream too: the embedding output
/// (BertModel.forward: embedding_output, a local), the layer's input and the attention's
/// LayerNorm output; and the attention probabilities after dropout, which the layer keeps to its
/// return (modeling_bert.py BertLayer.forward: self_attention_output, _ = self.attention(...);
/// modeling_distilbert.py TransformerBlock.forward likewise), fp32 under autocast beside the
/// value matmul's 16-bit copy.
constexpr forward_transients post_ln_forward_transients(const model& m, const activation_options& o,
                                                        const block_builder& b) {
  const bool wide = b.rho() != b.beta();
  const std::int64_t states = b.replicated(m.hidden);
  forward_transients f{wide ? 5 : 2, bytes_for_bits(checked_mul(states, b.rho())) * (wide ? 4 : 1) +
                                         bytes_for_bits(checked_mul(states, b.beta()))};
  if (b.attention() == attention_kind::eager && o.attention_dropout &&
      eager_softmax_bits(m, b) != b.beta()) {
    const std::int64_t scores =
        checked_mul(checked_mul(b.tokens(), ceil_div(m.heads, b.tp())), o.sequence);
    f.tensors += 1;
    f.size += bytes_for_bits(checked_mul(scores, eager_softmax_bits(m, b)));
  }
  return f;
}

constexpr forward_transients moe_forward_transients(const model& m, const activation_options& o,
                                                    const layout& l, const block_builder& b) {
  const std::int64_t tokens = b.tokens(), h = m.hidden;
  const std::int64_t rows = checked_mul(tokens, m.moe.top_k);
  const std::int64_t local = m.moe.routed_experts / l.expert;
  const std::int64_t hidden = b.rho(), routing = routing_weight_bits(m, b);
  const std::int64_t weighted = routing > hidden ? routing : hidden;
  forward_transients t{};
  auto add = [&t](std::int64_t elements, std::int64_t bits) {
    if (elements == 0) return;
    ++t.tensors;
    t.size += bytes_for_bits(checked_mul(elements, bits));
  };
  if (o.code == model_code::megatron_te) {
    // At the combine's copy: the permuted tokens (index_select, held by MoELayer.forward to its
    // return) and probabilities, the fc2 output and token_dispatcher.py combine_preprocess's
    // sort_chunks_by_idxs copy of it (tests/validation E21). Across EP ranks the dispatch's
    // all-to-alls return new tokens and probabilities (tensor_parallel/mappings.py
    // _AllToAll.forward: input.new_empty(...)), which MoELayer.forward holds as dispatched_input
    // beside the sorted copy the experts keep; with one expert a rank there is no such copy, and
    // the all-to-all's output is what fc1 keeps. Read in the code, not traced.
    const bool exchanged = l.expert > 1 && local > 1;
    for (int copy = 0; copy < (exchanged ? 4 : 3); ++copy) add(checked_mul(rows, h), b.beta());
    for (int copy = 0; copy < (exchanged ? 2 : 1); ++copy) add(rows, b.beta());
    return t;
  }
  if (torchtitan_moe(o.code, m)) {
    // Across EP ranks (AllToAllTokenDispatcher.combine, read in the code at b5bcd76, not traced)
    // in fp32 the combine's all-to-all is the fuller point: the experts' output, _unpermute's
    // new_empty buffer and the exchange's chunks (spmd_types _AllToAllUneven.forward).
    if (l.expert > 1 && hidden == 32) {
      for (int copy = 0; copy < 3; ++copy) add(checked_mul(rows, h), 32);
      return t;
    }
    // token_dispatcher.py LocalTokenDispatcher.combine at its weighting: torch.zeros_like(x_TD),
    // and in bf16 the experts' output, the product (.to(torch.float32) * scores) and its cast
    // back, across EP ranks also the all-to-all's output (routed_output_RD, rebound only after
    // the weighting); in fp32 (type_as(x_RD)) the product alone.
    add(checked_mul(tokens, h), hidden);
    if (hidden == 16) add(checked_mul(rows, h), 16);
    add(checked_mul(rows, h), 32);
    if (hidden == 16) add(checked_mul(rows, h), 16);
    if (hidden == 16 && l.expert > 1) add(checked_mul(rows, h), 16);
    return t;
  }
  if (o.experts == experts_implementation::eager) {
    add(checked_mul(tokens, h), hidden);  // torch.zeros_like(hidden_states)
    add(checked_mul(rows, local), 64);    // one_hot(top_k_index, num_classes=self.num_experts)
    if (weighted > hidden) add(checked_mul(ceil_div(rows, local), h), weighted);
  } else {
    const bool grouped = o.experts == experts_implementation::grouped_mm;
    if (grouped) add(checked_mul(rows, h), hidden);    // selected_hidden_states, before the sort
    add(checked_mul(rows, h), weighted);               // out_per_sample_g * sample_weights_g
    if (grouped) add(checked_mul(rows, h), weighted);  // out_per_sample_g[inv_perm]
    add(checked_mul(tokens, h), weighted);             // .view(...).sum(dim=1)
    if (weighted > hidden) add(checked_mul(tokens, h), hidden);  // .to(hidden_states.dtype)
    if (!grouped && b.autocasts() && b.rho() > b.beta())         // the indexed fp32 weights, cast
      add(checked_mul(rows, checked_mul(3 * h, m.moe.expert_ffn / b.tp())), b.rho());
    if (m.moe.layout == moe_layout::gpt_oss) {  // has_bias: self.gate_up_proj_bias[expert_ids_g]
      add(checked_mul(rows, 2 * m.moe.expert_ffn / b.tp()), b.rho());
      add(checked_mul(rows, h), b.rho());  // self.down_proj_bias[expert_ids_g]
    }
  }
  if (b.autocasts() && b.rho() > b.beta()) add(checked_mul(tokens, h), b.rho());
  return t;
}

/// A mixture-of-experts block as transformers 5 trains it: the router's fp32 probabilities and
/// top-k indices, then the packed experts over the routed rows (packed_experts_block). With a
/// capacity factor an expert takes ceil(cf x k x tokens / experts) of its EP group's tokens
/// (GShard §2.2).
constexpr void moe_block(block_builder& b, const model& m, const activation_options& o,
                         const layout& l) {
  const moe_config& e = m.moe;
  const std::int64_t tau = b.tokens();
  const std::int64_t t = b.tp();
  // The top-k weights renormalized in place (Qwen3-MoE's norm_topk_prob taken as set): the
  // division keeps its [T, 1] divisor and, for the divisor's gradient, a clone of the [T, k]
  // values it overwrote (derivatives.yaml div_), in the probabilities' format.
  const std::int64_t divisor = e.layout == moe_layout::gpt_oss ? 0 : checked_mul(tau, e.top_k + 1);
  if (e.layout == moe_layout::gpt_oss) {
    // modeling_gpt_oss.py GptOssTopKRouter: top-k of the logits, then a softmax over the k
    // values in their own format.
    b.add("router top-k softmax output",
          "modeling_gpt_oss.py GptOssTopKRouter.forward: softmax(router_top_value, dim=1, "
          "dtype=router_top_value.dtype)",
          checked_mul(tau, e.top_k), b.beta());
  } else if (m.is_mla() || e.router_score_bias) {
    // DeepSeek's routers run an fp32 linear on fp32 copies of its input and weight, which it
    // keeps; under autocast the linear casts the input back to 16 bits and caches the weight's
    // cast. V3 then takes DeepseekV3MoE's sigmoid scores and renormalizes, V2 a softmax alone.
    const std::int64_t weight = b.autocasts() ? 0 : checked_mul(e.routed_experts, m.hidden);
    b.add("router input and weight (fp32 copies)",
          e.router_score_bias ? "modeling_deepseek_v3.py DeepseekV3TopkRouter.forward: "
                                "F.linear(hidden_states.type(torch.float32), "
                                "self.weight.type(torch.float32))"
                              : "modeling_deepseek_v2.py DeepseekV2Moe.forward: "
                                "nn.functional.linear(hidden_states.type(torch.float32), "
                                "self.gate.weight.type(torch.float32))",
          checked_add(b.replicated(m.hidden), weight), b.explicit_fp32());
    if (e.router_score_bias)
      b.add("router scores and the renormalization's divisor and copy",
            "modeling_deepseek_v3.py DeepseekV3MoE.route_tokens_to_experts: "
            "router_logits.sigmoid(); topk_weights /= denominator (derivatives.yaml div_: other "
            "reads self)",
            checked_add(checked_mul(tau, e.routed_experts), divisor), b.explicit_fp32());
    else
      b.add("router probabilities (fp32)",
            "modeling_deepseek_v2.py DeepseekV2Moe.route_tokens_to_experts: "
            "router_logits.softmax(dim=-1, dtype=torch.float32)",
            checked_mul(tau, e.routed_experts), 32);
  } else {
    b.add("router probabilities and the renormalization's divisor and copy (fp32)",
          e.layout == moe_layout::mlp_experts
              ? "modeling_qwen3_moe.py Qwen3MoeTopKRouter.forward: "
                "torch.nn.functional.softmax(router_logits, dtype=torch.float, dim=-1); "
                "router_top_value /= router_top_value.sum(dim=-1, keepdim=True)"
              : "modeling_mixtral.py MixtralTopKRouter.forward: "
                "torch.nn.functional.softmax(router_logits.float(), dim=-1); router_top_value /= "
                "router_top_value.sum(dim=-1, keepdim=True)",
          checked_add(checked_mul(tau, e.routed_experts), divisor), 32);
  }
  if (e.group_limited)  // derivatives.yaml masked_fill: grad.masked_fill(mask, 0) keeps the mask
    b.add("router group mask (bool)",
          "modeling_deepseek_v3.py DeepseekV3MoE.route_tokens_to_experts: "
          "masked_fill(~score_mask.bool(), ...) (V2's group_limited_greedy alike)",
          checked_mul(tau, e.routed_experts), 8);
  std::int64_t routed = checked_mul(tau, e.top_k);
  if (o.capacity_factor_percent > 0) {
    const std::int64_t group_tokens = checked_mul(tau, l.expert);
    const std::int64_t capacity =
        ceil_div(checked_mul(checked_mul(group_tokens, e.top_k), o.capacity_factor_percent),
                 checked_mul(100, e.routed_experts));
    routed = checked_mul(capacity, e.routed_experts / l.expert);
  }
  packed_experts_block(b, m, o, routed, e.routed_experts / l.expert, e.expert_ffn / t);
  if (e.shared_experts > 0)
    mlp_block(b, m, tau, e.shared_experts * e.expert_ffn / t, "shared expert gate output");
}

/// torchtitan's MoE (models/common/moe.py, token_dispatcher.py LocalTokenDispatcher at b5bcd76)
/// as its Qwen3 and DeepSeek flavors configure it (a softmax or sigmoid router, with route_norm
/// but in DeepSeek-V2's, shared experts in DeepSeek's, no expert parallelism inside the block's
/// own code): the gate under autocast to fp32, the top-k, an argsort of the routed rows by
/// expert, one gather of the tokens, three grouped GEMMs in bf16 and the weighting in fp32
/// before a scatter_add back to the tokens.
constexpr void torchtitan_moe_block(block_builder& b, const model& m, const layout& l) {
  const moe_config& e = m.moe;
  const std::int64_t tokens = b.tokens(), h = m.hidden;
  const std::int64_t rows = checked_mul(tokens, e.top_k);
  const std::int64_t local = e.routed_experts / l.expert, width = e.expert_ffn / b.tp();
  // Parameters and the residual stream in bf16 (FSDP2's param_dtype) or fp32 (autocast).
  const bool bf16_weights = b.rho() == 16;
  b.add("router input and weight (fp32, autocast to float32)",
        "torchtitan models/common/moe.py TokenChoiceTopKRouter.forward: with "
        "torch.autocast(dtype=torch.float32): self.gate(x_TD) (the weight cast too, not cached: "
        "autocast caches casts from fp32 only)",
        checked_add(b.replicated(h), bf16_weights ? checked_mul(e.routed_experts, h) : 0), 32);
  // DeepSeek-V3's sigmoid keeps its output as the softmax does; its node-limited routing over
  // expert groups keeps nothing: only topk's indices leave it (traced: torchtitan-deepseek3-*).
  b.add(e.router_score_bias ? "router scores (fp32 sigmoid)" : "router probabilities (fp32)",
        e.router_score_bias
            ? "torchtitan models/common/moe.py TokenChoiceTopKRouter.forward: "
              "torch.sigmoid(scores_TE), saved for its backward"
            : "torchtitan models/common/moe.py TokenChoiceTopKRouter.forward: F.softmax(scores_TE, "
              "dim=-1), saved for its backward",
        checked_mul(tokens, e.routed_experts), 32);
  // topk keeps its indices, which the gather of the scores also reads; route_norm's division
  // keeps its numerator and the [T, 1] denominator (derivatives.yaml div.Tensor). Without it
  // (DeepSeek-V2's flavors) only `* route_scale` follows, a Python float's product keeping none.
  b.add("top-k expert ids (int64)",
        "torchtitan models/common/moe.py TokenChoiceTopKRouter.forward: torch.topk(...), "
        "scores_TE.gather(dim=-1, index=topk_expert_ids_TK)",
        checked_mul(tokens, e.top_k), 64);
  if (torchtitan_route_norm(m))
    b.add("top-k scores and their sum (route_norm)",
          "torchtitan models/common/moe.py TokenChoiceTopKRouter.forward: topk_scores_TK / "
          "denominator",
          checked_mul(tokens, e.top_k + 1), 32);
  // The argsort's order (kept by the scores' index), the token of each routed row (kept by the
  // tokens' index and the scatter_add), the scores in that order (kept by the weighting).
  b.add("expert order and routed token indices (int64)",
        "torchtitan models/common/token_dispatcher.py LocalTokenDispatcher._local_reorder: "
        "torch.argsort(topk_expert_ids_TK.view(-1), stable=True); ... // self.top_k",
        checked_mul(2, rows), 64);
  b.add("routing scores in expert order (fp32)",
        "torchtitan models/common/token_dispatcher.py _local_reorder: "
        "topk_scores_TK.view(-1)[token_indices_experts_sorted_N]",
        rows, 32);
  b.add_block("expert row offsets (int32)",
              "torchtitan models/common/moe.py GroupedExperts.forward: offsets_E = "
              "torch.cumsum(num_tokens_per_expert_E, dim=0, dtype=torch.int32)",
              local, 32);
  // GroupedExperts casts its operands to bf16: fp32 weights become copies the products keep.
  if (!bf16_weights)
    b.add("expert weights (bf16 copies)",
          "torchtitan models/common/moe.py GroupedExperts.forward: w1_EFD.bfloat16(), "
          "w3_EFD.bfloat16(), w2_EDF.bfloat16()",
          checked_mul(checked_mul(3 * local, width), h), 16);
  // Across EP ranks the received rows are put in local expert order by an index the gather keeps
  // (read in the code at b5bcd76, not traced).
  if (l.expert > 1)
    b.add("received rows' expert order (int64, expert parallelism)",
          "torchtitan models/common/token_dispatcher.py AllToAllTokenDispatcher._permute: "
          "routed_input_RD[permuted_indices, :]",
          rows, 64);
  b.add("expert inputs (gathered in expert order, bf16)",
        "torchtitan models/common/token_dispatcher.py _local_reorder: x_TD[token_indices_"
        "experts_sorted_N]; moe.py GroupedExperts.forward: x_RD.bfloat16()",
        checked_mul(rows, h), 16);
  const std::int64_t n = checked_mul(rows, width);
  b.add("expert w1 output (silu input)",
        "torchtitan models/common/moe.py GroupedExperts.forward: F.silu(self._grouped_mm(A=x_RD, "
        "B_t=w1...))",
        n, 16);
  b.add("expert silu and w3 outputs (the product's factors)",
        "torchtitan models/common/moe.py GroupedExperts.forward: h_RF * self._grouped_mm(A=x_RD, "
        "B_t=w3...)",
        checked_mul(2, n), 16);
  b.add("expert product (w2 input)",
        "torchtitan models/common/moe.py GroupedExperts.forward: self._grouped_mm(A=h_RF, "
        "B_t=w2...)",
        n, 16, {.output_linear_input = true});
  b.add("expert outputs (fp32, the weighting's operand)",
        "torchtitan models/common/token_dispatcher.py LocalTokenDispatcher.combine: "
        "routed_output_RD.to(torch.float32) * topk_scores_experts_sorted_N.reshape(-1, 1)",
        checked_mul(rows, h), 32, {.output_linear_input = true});  // its backward runs first
  if (e.shared_experts == 0) return;
  // DeepSeek-V3's shared experts: one FeedForward over the MLP norm's output, added to the
  // routed output (moe.py MoE.forward: self.shared_experts(x_TD)).
  b.add("shared experts' input (the MLP norm's output)",
        "torchtitan models/common/moe.py MoE.forward: self.shared_experts(x_TD), "
        "feed_forward.py FeedForward.forward: self.w1(x), self.w3(x)",
        b.replicated(h), b.beta());
  mlp_block(b, m, tokens, e.shared_experts * e.expert_ffn / b.tp(), "shared expert w1 output");
}

/// Megatron-Core's MoE layer (megatron/core/transformer/moe at d98e8a6, TE d0067d0) as Megatron's
/// Mixtral recipe runs it (tests/validation E21): TopKRouter's softmax over the top-k logits and
/// the aux loss, the alltoall dispatcher's torch permute (no permute fusion), TEGroupedMLP's
/// grouped linears with the probabilities applied inside the fused SwiGLU. The router sees the
/// rank's tokens, the experts every routed row (gathered over the tensor-parallel ranks).
constexpr void megatron_moe_block(block_builder& b, const model& m) {
  const moe_config& e = m.moe;
  const std::int64_t tokens = b.replicated(1), h = m.hidden, beta = b.beta();
  const std::int64_t rows = checked_mul(b.tokens(), e.top_k), width = e.expert_ffn / b.tp();
  b.add("router input (the MLP norm's output)",
        "Megatron-Core transformer/moe/moe_utils.py RouterGatingLinearFunction.forward: "
        "ctx.save_for_backward(inp, weight)",
        checked_mul(tokens, h), beta);
  b.add("top-k expert ids (int64)",
        "Megatron-Core transformer/moe/moe_utils.py topk_routing_with_score_function: "
        "torch.topk(logits, k=topk, dim=1)",
        checked_mul(tokens, e.top_k), 64);
  b.add("top-k softmax (fp32)",
        "Megatron-Core transformer/moe/moe_utils.py topk_routing_with_score_function: "
        "torch.softmax(scores, dim=-1, dtype=torch.float32)",
        checked_mul(tokens, e.top_k), 32);
  b.add("aux loss softmax (fp32)",
        "Megatron-Core transformer/moe/router.py TopKRouter.aux_loss_load_balancing: "
        "torch.softmax(logits, dim=-1, dtype=torch.float32)",
        checked_mul(tokens, e.routed_experts), 32);
  b.add_block("aux loss tokens per expert (int64)",
              "Megatron-Core transformer/moe/moe_utils.py switch_load_balancing_loss_func: "
              "probs.sum(dim=0) * tokens_per_expert (routing_map.sum(dim=0))",
              e.routed_experts, 64);
  b.add_block("aux loss (0-dim fp32)",
              "Megatron-Core transformer/moe/moe_utils.py MoEAuxLossAutoScaler.forward: "
              "ctx.save_for_backward(aux_loss)",
              1, 32);
  // permute sorts the [E, T] routing map; the probabilities' index keeps the whole order.
  b.add("dispatch order (int64 argsort of the routing map)",
        "Megatron-Core transformer/moe/moe_utils.py permute: routing_map.T.contiguous() ... "
        "argsort; probs.T.contiguous()[...] keeps it",
        checked_mul(tokens, e.routed_experts), 64);
  b.add("expert inputs (tokens in expert order)",
        "Megatron-Core transformer/moe/experts.py TEGroupedMLP.forward: "
        "self.linear_fc1(permuted_local_hidden_states, ...); TransformerEngine "
        "module/grouped_linear.py _GroupedLinear.forward saves the input's per-expert views",
        checked_mul(rows, h), beta);
  b.add("routing probabilities in expert order",
        "Megatron-Core fusions/fused_bias_swiglu.py WeightedSwiGLUFunction.forward: "
        "ctx.save_for_backward(input, weights)",
        rows, beta);
  b.add("expert fc1 output (the weighted SwiGLU's input)",
        "Megatron-Core fusions/fused_bias_swiglu.py WeightedSwiGLUFunction.forward: "
        "ctx.save_for_backward(input, weights)",
        checked_mul(rows, 2 * width), beta);
  b.add("weighted SwiGLU output (fc2 input)",
        "Megatron-Core transformer/moe/experts.py TEGroupedMLP.forward: "
        "self.linear_fc2(intermediate_parallel, ...)",
        checked_mul(rows, width), beta, {.output_linear_input = true});
}

/// The MLP sub-block's saved tensors (dense or mixture of experts).
constexpr void feed_forward_block(block_builder& b, const model& m, const activation_options& o,
                                  const layout& l, bool moe_layer) {
  // Each linear reading the norm output keeps its input (under autocast its own cast); Falcon's
  // new_decoder_architecture gives the parallel MLP its own norm (ln_mlp).
  if (moe_layer && torchtitan_moe(o.code, m)) {  // the router keeps its own fp32 input
    torchtitan_moe_block(b, m, l);
    return;
  }
  if (moe_layer && o.code == model_code::megatron_te) {  // its own norm, then the router
    megatron_moe_block(b, m);
    return;
  }
  if (!m.parallel_block || falcon_new_architecture(m)) {
    const mlp_input in = mlp_input_of(m, b, moe_layer);
    b.linear_input(moe_layer ? "MLP input (norm output, router input)" : "MLP input (norm output)",
                   o.code == model_code::hf ? in.source : sources_of(o.code).mlp_input,
                   b.replicated(1), m.hidden, in.readers);
  }
  if (!moe_layer)
    mlp_block(b, m, b.tokens(), m.ffn / b.tp(), "MLP up/gate output");
  else
    moe_block(b, m, o, l);
  if (o.hidden_dropout) b.dropout_mask("MLP residual dropout mask", b.replicated(m.hidden));
}

}  // namespace detail

/// Whether layer `layer`'s input needs no gradient: the first layer over LoRA's frozen embedding
/// (the embedding's output has no grad_fn) of a pre-norm decoder, without checkpointing (Hugging
/// Face's gradient_checkpointing_enable calls enable_input_require_grads, modeling_utils.py).
constexpr bool layer_input_frozen(const model& m, const activation_options& o, const finetuning& f,
                                  std::int64_t layer) {
  return layer == 0 && f.kind == finetune_kind::lora && !m.is_mla() && !m.is_encoder() &&
         (o.recompute == recompute_kind::none || o.recompute == recompute_kind::selective);
}

/// What autograd saves for one transformer layer (`moe_layer`: a mixture-of-experts layer) for
/// one micro-batch on one rank, operator by operator. Tensors a layer shares with others (the
/// rotary tables) are model-level and not here. `input_grad` false: the layer's input needs no
/// gradient (layer_input_frozen()).
constexpr saved_tensor_ledger layer_saved_tensors(const model& m, const precision& p,
                                                  const activation_options& o, const layout& l,
                                                  bool moe_layer = false,
                                                  const finetuning& f = full_finetune::value,
                                                  bool input_grad = true) {
  detail::check(o, l);
  detail::block_builder b(m, p, o, l, f);
  if (!input_grad) b.input_needs_no_grad();
  // Pre-LN blocks (and Falcon's one shared norm); BERT's post-LN saves the same inputs.
  b.norm("attention norm input", m.hidden);
  if (detail::falcon_new_architecture(m))
    b.shared_input_norm("MLP norm (ln_mlp) mean and rstd (fp32)");
  detail::attention_block(b, m, o);
  if (m.norms_per_layer >= 4) b.norm("post-attention norm input", m.hidden);
  b.begin_mlp();
  if (!m.parallel_block) b.norm("MLP norm input", m.hidden);
  detail::feed_forward_block(b, m, o, l, moe_layer);
  if (m.norms_per_layer >= 4) b.norm("post-MLP norm input", m.hidden);
  return b.result();
}

/// Bytes one layer keeps for backward under the recompute policy (`full`: only its input).
constexpr bytes layer_activation_bytes(const model& m, const precision& p,
                                       const activation_options& o, const layout& l, bool moe_layer,
                                       recompute_kind recompute,
                                       const finetuning& f = full_finetune::value,
                                       bool input_grad = true) {
  if (recompute == recompute_kind::full || recompute == recompute_kind::op_sac) {
    detail::block_builder b(m, p, o, l);
    const bytes input = bytes_for_bits(detail::checked_mul(b.replicated(m.hidden), b.rho()));
    if (recompute == recompute_kind::full) return input;
    // peft's adapters add matmuls of their own to the policy's count: not modelled.
    if (f.kind == finetune_kind::lora) detail::rules::op_level_sac_needs_full_linears();
    const std::int64_t layer = moe_layer ? m.layers - 1 : 0;
    return input +
           op_sac_cache(m, l, layer, b.tokens(), b.beta(), b.attention() != attention_kind::eager)
               .cached;
  }
  bytes sum{};
  for (const saved_tensor& s : layer_saved_tensors(m, p, o, l, moe_layer, f, input_grad))
    if (!(recompute == recompute_kind::selective && s.recomputed_by_selective)) sum += s.size;
  return sum;
}

/// How many of a stage's `layers` are checkpointed whole (input kept, the rest recomputed): the
/// first recompute_layers under full recompute (all when -1), one in every recompute_every (counted
/// as the stage's first: alike layers, same bytes), all under op-level SAC.
constexpr std::int64_t checkpointed_layers(const activation_options& o, std::int64_t layers) {
  if (o.recompute == recompute_kind::op_sac) return layers;
  if (o.recompute != recompute_kind::full) return 0;
  if (o.recompute_every > 0) return layers / o.recompute_every;
  return o.recompute_layers < 0 || o.recompute_layers > layers ? layers : o.recompute_layers;
}

/// What a checkpointed layer keeps from forward: its input, plus op-level SAC's cache.
constexpr recompute_kind checkpoint_policy(const activation_options& o) {
  return o.recompute == recompute_kind::op_sac ? recompute_kind::op_sac : recompute_kind::full;
}

/// What one layer's backward allocates besides the weight gradients, at its two fullest points.
struct layer_backward_working {
  /// MLP: the gradient of the down projection's input and, from the last product's backward, one
  /// gradient per factor (aten mul_backward: grad * other, grad * self); a fused GELU has one.
  bytes mlp{};
  /// Attention core. Eager: the softmax gradient in the softmax's format, the softmax backward's
  /// output and the buffer its CUDA kernel takes (tests/validation E11). Flash/SDPA: its incoming
  /// gradient (o_proj's input gradient, read by the fused backward and freed after it), dQ, dK, dV.
  bytes attention{};
  /// The part of `attention` that enters the core first: eager's softmax gradient, the fused
  /// kernel's incoming gradient.
  bytes attention_incoming{};
  /// What the fused kernel allocates inside its backward and frees as it returns
  /// (fused_attention_workspace), beside the whole working set.
  bytes attention_workspace{};
  /// Eager attention's score-sized gradients in the compute format around its core, each
  /// `score_gradient`: one before (the value matmul's, which a cast or the dropout's backward turns
  /// into the softmax's), and after the softmax's backward one or two (its input's gradient cast
  /// back, then scaled). Traced on an H200 and on the CPU (docs/timeline.md).
  bytes score_gradient{};
  std::int64_t gradients_before = 0, gradients_after = 0;
  /// Eager attention: the value matmul's gradient for V (derivatives.yaml bmm: mat2:
  /// self.transpose(1, 2).bmm(grad)), which waits through the core's backward: it goes to V's
  /// producer, made before the scores, and the engine runs the ready node with the highest
  /// sequence number first (torch/csrc/autograd/engine.cpp ReadyQueue, CompareNodeTaskTime). V
  /// broadcast by the matmul itself (Falcon-7B's one K/V head) is summed back to its heads first
  /// (expand's backward: sum_to_size), and that sum waits instead. Traced on an H200 and on the
  /// CPU (docs/timeline.md).
  bytes value_gradient{};
  /// Eager attention: the output projection's input gradient (the merged heads'), which the value
  /// matmul's backward reads and which goes after it.
  bytes output_gradient{};
  /// A parallel block (Falcon): the MLP's input gradient, which waits in its norm's input buffer
  /// (autograd/input_buffer.cpp) through the attention's backward: the norm (ln_mlp, or the one
  /// norm the attention also reads) ran before the attention, so its backward comes after.
  bytes parallel_input_gradient{};
  /// An MoE's combine backward, before the experts', `weighting_tensors` alike, freed before the
  /// output linear's weight gradient is made. torchtitan's weighting (token_dispatcher.py
  /// LocalTokenDispatcher.combine: routed_output_RD.to(torch.float32) * scores): its incoming
  /// gradient cast to fp32 and one gradient per operand, the scores' [rows, h] before it is summed
  /// to [rows, 1]: three fp32 [rows, h]. Megatron's unpermute: scatter_add_'s gather and the
  /// combine split's cat, the fc2 output's gradient: two [rows, h] (tests/validation E21).
  bytes weighting{};
  std::int64_t weighting_tensors = 0;
  /// The residual stream's gradient, in its format: a skip connection hands the gradient it
  /// receives to the sublayer and to the sublayer's input, where it waits in the input buffer
  /// until the sublayer's own gradient is added (autograd/input_buffer.cpp: out of place, a new
  /// tensor). One such tensor lives through every layer's backward, pre-LN or post-LN (traced:
  /// BERT's LayerNorm backward output stays until the add after the MLP's backward).
  bytes stream_gradient{};
};

namespace detail {
/// What a QLoRA layer's recompute holds beyond the saved tensors it remakes, at its fullest point,
/// up_proj's adapter (traced: llama-gqa-bf16-qlora-all-ckpt-nonreentrant-adamw-foreach). Under
/// non-reentrant checkpointing the recompute starts when lora_B's backward in down_proj unpacks
/// its input (torch/utils/checkpoint.py _checkpoint_without_reentrant_generator, early stop), so
/// beside it are:
/// - that adapter's incoming gradient in the adapters' format (the backward of peft's
///   output.to(expected_dtype) and of * scaling);
/// - the decoder layer's locals: the residual, and the MLP input, which no 4-bit linear saves
///   (modeling_llama.py LlamaDecoderLayer.forward; bitsandbytes MatMul4Bit: ctx.tensors = (None,
///   B));
/// - up_proj's base output cloned, lora_B's output and its product with scaling, [tokens, ffn]
///   each (peft tuners/lora/bnb.py Linear4bit.forward: result = result.clone(); output =
///   lora_B(lora_A(dropout(x))) ... * scaling);
/// less what the layer saves only later: the up output the activation's product keeps,
/// down_proj's adapter input copy and its rank-r output. Modelled for Hugging Face's gated MLP
/// with adapters on gate, up and down wider than the compute format, without autocast; else zero.
constexpr bytes qlora_recompute_working(const model& m, const precision& p,
                                        const activation_options& o, const layout& l,
                                        const finetuning& f, bool moe_layer) {
  if (o.recompute != recompute_kind::full || o.reentrant_checkpoint || moe_layer ||
      f.quantized_base.payload_bits == 0 || m.mlp != mlp_kind::swiglu || m.parallel_block ||
      o.code != model_code::hf)
    return bytes{};
  const block_builder b(m, p, o, l, f);
  const std::int64_t a = b.adapter_bits(), beta = b.beta();
  if (b.autocasts() || a <= beta || !b.adapted("gate_proj") || !b.adapted("up_proj") ||
      !b.adapted("down_proj"))
    return bytes{};
  const std::int64_t stream = b.replicated(m.hidden), up = b.split(m.ffn / b.tp());
  auto sized = [](std::int64_t elements, std::int64_t bits) {
    return bytes_for_bits(checked_mul(elements, bits));
  };
  const bytes incoming = sized(stream, a);
  const bytes locals = sized(stream, b.rho()) + sized(stream, beta);
  const bytes adapter = sized(up, beta) + sized(up, a) * 2;
  const bytes later = sized(up, beta) + sized(up, a) + sized(b.split(f.lora.rank), a);
  const bytes fullest = incoming + locals + adapter;
  return fullest > later ? fullest - later : bytes{};
}

/// The MLP backward working set of transformers 5's packed experts: the gated MLP's three
/// gradients of a row's width (the down projection's input gradient, one per factor of the
/// product) over every routed row under grouped_mm, in the weights' format; under eager over one
/// expert's even share of the rows, beside two whole gate_up_proj gradients (each hit expert's
/// select_backward makes one full-size, which autograd's input buffer adds into the one before:
/// autograd/input_buffer.cpp); under batched_mm also the gradient of the copied gate_up weights.
constexpr bytes packed_experts_backward(const model& m, const activation_options& o,
                                        const layout& l, const block_builder& b) {
  const std::int64_t rows = checked_mul(b.tokens(), m.moe.top_k);
  const std::int64_t width = m.moe.expert_ffn / b.tp();
  const std::int64_t local = m.moe.routed_experts / l.expert;
  const std::int64_t gate_up = checked_mul(2 * width, m.hidden);  // one expert's
  if (torchtitan_moe(o.code, m))  // the gated MLP's three gradients in bf16, beside the
    // experts' output gradient w2's backward reads (layer_backward_working::weighting comes first)
    return bytes_for_bits(checked_mul(checked_mul(rows, 3 * width + m.hidden), 16));
  if (o.code == model_code::megatron_te)  // fc2's dgrad [rows, F], the weighted SwiGLU's input
    // gradient [rows, 2F] and its probabilities' [rows, 1] (fused_bias_swiglu.py
    // WeightedSwiGLUFunction.backward)
    return bytes_for_bits(checked_mul(checked_mul(rows, 3 * width + 1), b.beta()));
  switch (o.experts) {
    case experts_implementation::eager:
      return bytes_for_bits(checked_mul(checked_mul(ceil_div(rows, local), width), 3 * b.beta())) +
             bytes_for_bits(checked_mul(checked_mul(2 * local, gate_up), b.rho()));
    case experts_implementation::batched_mm:
      return bytes_for_bits(checked_mul(checked_mul(rows, width), 3 * b.beta())) +
             bytes_for_bits(checked_mul(checked_mul(rows, gate_up), b.beta()));
    case experts_implementation::grouped_mm:
      break;
  }
  return bytes_for_bits(checked_mul(checked_mul(rows, width), 3 * b.rho()));
}

/// What a 16-bit fused attention kernel allocates inside its backward, in one workspace (cuDNN)
/// or beside its outputs (FlashAttention-2), and frees as it returns: dQ's fp32 accumulator and
/// the fp32 row sums of dO * O per query head, and with grouped K/V heads dK and dV at every
/// query head in the compute format, summed to the groups at the end (cudnn-frontend
/// sdpa/sdpa_backward CompositeSDPABackwardNode: dQ_accum, softmax_sum, dK_fullhead, dV_fullhead;
/// torch flash_api.cpp mha_bwd: dq_accum, softmax_d, dk_expanded, dv_expanded). Traced on an H200
/// and an H100 to 256 B (the engine's own; docs/timeline.md#sdpas-backward). Not modelled, zero:
/// the memory-efficient kernel (fp32, or a mask), whose tiles set its accumulators, and
/// FlexAttention's compiled backward.
constexpr bytes fused_attention_workspace(const model& m, const activation_options& o,
                                          const block_builder& b, std::int64_t heads) {
  if (b.beta() != 16 || sdpa_gets_mask(m, o) || traits_of(o.code).flex_attention) return bytes{};
  const std::int64_t qk_dim =
      m.is_mla() ? m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim : m.head_dim;
  const bool grouped =
      !m.is_mla() && b.attention() == attention_kind::flash && local_kv_heads(m, b.tp()) < heads;
  const std::int64_t fp32_per_token = heads * (qk_dim + 1);
  const std::int64_t full_heads_per_token = grouped ? heads * 2 * m.head_dim : 0;
  return bytes_for_bits(checked_mul(b.split(fp32_per_token), 32)) +
         bytes_for_bits(checked_mul(b.split(full_heads_per_token), 16));
}
}  // namespace detail

constexpr layer_backward_working layer_backward_bytes(const model& m, const precision& p,
                                                      const activation_options& o, const layout& l,
                                                      bool moe_layer = false) {
  using detail::checked_mul;
  detail::check(o, l);
  const detail::block_builder b(m, p, o, l);
  const std::int64_t t = b.tp();
  const std::int64_t beta = b.beta();
  layer_backward_working w{};
  w.stream_gradient = bytes_for_bits(checked_mul(b.replicated(m.hidden), b.rho()));
  if (m.parallel_block)  // in the format of the norm's output: the stream's (under autocast, fp32)
    w.parallel_input_gradient = w.stream_gradient;
  // gelu_new in Python (0.5x(1 + tanh)): the incoming gradient in the wide format (under
  // autocast a cast of the 16-bit one), two products of it, and under autocast the 16-bit cast
  // of the result for the linear before (traced: tests/validation/step_traces.json, GPT-2 AMP).
  const std::int64_t wide = b.autocast_wide();
  const std::int64_t mlp_bits = m.mlp != mlp_kind::gelu ? 3 * beta  // gated: mm, mul x 2
                                : m.gelu_in_python      ? 3 * wide + (beta < wide ? beta : 0)
                                                        : 2 * beta;  // gelu_backward
  w.mlp = moe_layer ? detail::packed_experts_backward(m, o, l, b)
                    : bytes_for_bits(checked_mul(checked_mul(b.tokens(), m.ffn / t), mlp_bits));
  const std::int64_t rows = checked_mul(b.tokens(), m.moe.top_k);
  if (moe_layer && detail::torchtitan_moe(o.code, m)) {
    w.weighting_tensors = 3;
    w.weighting = bytes_for_bits(checked_mul(rows, m.hidden * 3 * 32));
  } else if (moe_layer && o.code == model_code::megatron_te) {
    w.weighting_tensors = 2;
    w.weighting = bytes_for_bits(checked_mul(rows, m.hidden * 2 * beta));
  }
  const std::int64_t heads = m.heads / t;
  if (b.attention() == attention_kind::eager) {
    const std::int64_t scores = checked_mul(checked_mul(o.micro_batch, heads),
                                            checked_mul(b.tokens() / o.micro_batch, o.sequence));
    const std::int64_t bits = detail::eager_softmax_bits(m, b);
    w.attention = bytes_for_bits(checked_mul(scores, 3 * bits));
    // modeling_llama.py eager_attention_forward: softmax(dtype=float32).to(query.dtype), dropout,
    // matmul(attn_weights, value_states); matmul(query, key.transpose(2, 3)) * scaling.
    const bool cast = bits != beta;
    w.attention_incoming = bytes_for_bits(checked_mul(scores, bits));
    w.score_gradient = bytes_for_bits(checked_mul(scores, beta));
    w.gradients_before = cast || o.attention_dropout ? 1 : 0;
    w.gradients_after = cast ? 2 : 1;
    const std::int64_t value_heads =
        detail::falcon_multi_query(m) ? detail::local_kv_heads(m, t) : heads;
    w.value_gradient =
        bytes_for_bits(checked_mul(b.split(value_heads * m.head_dim), b.core_bits()));
    w.output_gradient = bytes_for_bits(checked_mul(b.split(heads * m.head_dim), beta));
  } else {
    const std::int64_t qkv_width =
        m.is_mla()
            ? heads * (2 * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim) + m.mla.v_head_dim)
            : (heads +
               2 * (b.attention() == attention_kind::sdpa ? heads : detail::local_kv_heads(m, t))) *
                  m.head_dim;
    const std::int64_t value_width = heads * (m.is_mla() ? m.mla.v_head_dim : m.head_dim);
    w.attention_incoming = bytes_for_bits(checked_mul(b.split(value_width), beta));
    w.attention = w.attention_incoming + bytes_for_bits(checked_mul(b.split(qkv_width), beta));
    w.attention_workspace = detail::fused_attention_workspace(m, o, b, heads);
  }
  return w;
}

}  // namespace vramfit

namespace vramfit {

/// Micro-batches whose activations a pipeline stage holds at once, in units of the stage's
/// layers, as a fraction num / den: 1F1B min(p - r, m) (Narayanan et al. 2021 §2.2); GPipe m;
/// interleaved (p(v-1) + 2(p-r) - 1) chunks of 1/v of the layers (Megatron-LM; mbridge).
struct in_flight {
  std::int64_t num = 1;
  std::int64_t den = 1;
};

constexpr in_flight micro_batches_in_flight(const layout& l, const activation_options& o,
                                            std::int64_t stage) {
  const std::int64_t p = l.pipeline;
  const std::int64_t m = o.micro_batches;
  if (p == 1) return {1, 1};  // gradient accumulation runs each micro-batch's backward first
  switch (o.schedule) {
    case pipeline_schedule::gpipe:
      return {m, 1};
    case pipeline_schedule::interleaved: {
      const std::int64_t v = o.virtual_stages;
      using detail::checked_add, detail::checked_mul;
      const std::int64_t chunks = checked_add(checked_mul(p, v - 1), 2 * (p - stage) - 1);
      const std::int64_t all = checked_mul(m, v);
      return {chunks < all ? chunks : all, v};
    }
    case pipeline_schedule::one_f_one_b:
      break;
  }
  return {p - stage < m ? p - stage : m, 1};
}

/// The model chunk that alone holds some tensors: the first stage's first (the embedding's
/// inputs), the last stage's last (the final norm's, head's and loss's).
enum class model_chunk : unsigned char { first, last };

/// Micro-batches of `chunk` in flight on its stage. Interleaved, at most min(m, 2p) of the first
/// and one of the last, whose backward follows each forward (docs/sources.md#megatron-schedules);
/// otherwise every chunk is the stage.
constexpr in_flight micro_batches_in_flight(const layout& l, const activation_options& o,
                                            std::int64_t stage, model_chunk chunk) {
  if (l.pipeline == 1 || o.schedule != pipeline_schedule::interleaved)
    return micro_batches_in_flight(l, o, stage);
  if (chunk == model_chunk::last) return {1, 1};
  const std::int64_t two_groups = detail::checked_mul(2, l.pipeline);
  return {o.micro_batches < two_groups ? o.micro_batches : two_groups, 1};
}

namespace detail {

/// What the layers of a stage keep, for one micro-batch: their saved activations under their
/// recompute policy, the largest layer whole (what a recompute or an offload brings back), the
/// largest backward working set, and how many layers are checkpointed.
struct stage_layers {
  bytes kept{};
  bytes largest_layer{};
  bytes largest_working{};
  std::int64_t checkpointed = 0;
};

/// How many of the stage's layers come before the model's first MoE layer (all of a dense model's).
constexpr std::int64_t dense_layers_of_stage(const model& m, const stage_range& range) {
  if (!m.is_moe()) return range.layers;
  const std::int64_t dense = m.moe.first_dense_layers - range.first_layer;
  return dense < 0 ? 0 : dense > range.layers ? range.layers : dense;
}

/// The layers of this stage, by kind (dense or MoE) and recompute policy: each kind's ledger is
/// built once. Layers [0, dense) of the stage are dense, the rest MoE; layers [0, full) are fully
/// recomputed: four counts in closed form, whatever the number of layers.
constexpr stage_layers layers_of_stage(const training& t, const activation_options& o,
                                       const layout& l, const stage_range& range) {
  const model& m = t.model;
  const recompute_kind kept_policy =
      o.recompute == recompute_kind::selective ? recompute_kind::selective : recompute_kind::none;
  const std::int64_t n = range.layers;
  auto clamp = [n](std::int64_t x) { return x < 0 ? 0 : x > n ? n : x; };
  const std::int64_t dense = dense_layers_of_stage(m, range);
  const std::int64_t full = clamp(checkpointed_layers(o, n));
  const std::int64_t dense_full = dense < full ? dense : full;
  const std::int64_t count[2][2] = {{dense - dense_full, dense_full},  // [moe][full]
                                    {n - dense - (full - dense_full), full - dense_full}};
  stage_layers s{.checkpointed = full};
  for (const int moe : {0, 1}) {
    if (count[moe][0] + count[moe][1] == 0) continue;
    const bytes kept =
        layer_activation_bytes(m, t.precision, o, l, moe == 1, kept_policy, t.finetune);
    const bytes input =
        layer_activation_bytes(m, t.precision, o, l, moe == 1, checkpoint_policy(o), t.finetune);
    s.kept += kept * count[moe][0] + input * count[moe][1];
    const bytes whole = kept_policy == recompute_kind::none
                            ? kept
                            : layer_activation_bytes(m, t.precision, o, l, moe == 1,
                                                     recompute_kind::none, t.finetune);
    if (whole > s.largest_layer) s.largest_layer = whole;
    const layer_backward_working w = layer_backward_bytes(m, t.precision, o, l, moe == 1);
    const bytes mlp = w.mlp > w.weighting ? w.mlp : w.weighting;
    const bytes attention = w.attention + w.attention_workspace;
    const bytes most = (mlp > attention ? mlp : attention) + w.stream_gradient;
    if (most > s.largest_working) s.largest_working = most;
  }
  // The model's first layer over a frozen input saves less (layer_input_frozen()): one layer, in
  // closed form.
  if (n > 0 && layer_input_frozen(m, o, t.finetune, range.first_layer)) {
    const bool moe = m.is_moe_layer(0);
    s.kept -= layer_activation_bytes(m, t.precision, o, l, moe, kept_policy, t.finetune) -
              layer_activation_bytes(m, t.precision, o, l, moe, kept_policy, t.finetune, false);
  }
  return s;
}

/// The embedding's saved inputs on the first stage, per micro-batch: input ids, BERT's token
/// types, ViT's image, the dropout mask.
constexpr bytes embedding_inputs(const model& m, const activation_options& o,
                                 const block_builder& b, const stage_range& range) {
  if (!range.first) return {};
  const std::int64_t tokens = b.tokens();
  // input ids (int64), embedding backward; a frozen embedding's has no grad_fn to keep them; ViT
  // reads an image instead
  bytes embedding{b.frozen_base() || m.family == family::vit ? 0 : checked_mul(8, tokens)};
  if (m.family == family::bert) embedding += bytes{checked_mul(8, tokens)};
  // modeling_bert.py BertEmbeddings.forward (modeling_distilbert.py Embeddings.forward):
  // self.LayerNorm(embeddings) keeps the summed embeddings and its fp32 mean and rstd.
  if (m.is_bert_style() && !b.frozen_base())
    embedding += bytes_for_bits(checked_mul(b.replicated(m.hidden), b.rho())) +
                 bytes{checked_mul(8, b.replicated(1))};
  if (m.family == family::vit) {
    const encoder_config& e = m.encoder;
    embedding += bytes_for_bits(checked_mul(
        checked_mul(o.micro_batch, e.channels * e.image_size * e.image_size), b.beta()));
  }
  // The embeddings' dropout keeps its mask only for a gradient: none into frozen embeddings.
  if (o.hidden_dropout && !b.frozen_base())
    embedding += bytes_for_bits(checked_mul(b.replicated(m.hidden), o.dropout_mask_bits));
  return embedding;
}

/// The rotary tables of a stage's forward, per micro-batch: Hugging Face computes cos and sin once
/// per forward ([b, s, rotary dim]) and every layer's rotary multiply saves them.
constexpr bytes rotary_tables(const model& m, const block_builder& b, const stage_range& range) {
  if (m.positions != position_kind::rotary || range.layers == 0) return {};
  // torchtune's cache[:seq_len], litgpt's cos[:T] and torchtitan's freqs_cis[0:seqlen] (rope_cache
  // in 2026) are slices of module buffers (docs/sources.md#model-code), made at construction.
  if (traits_of(b.code()).rotary_buffer) return {};
  const std::int64_t rotary = m.is_mla() ? m.mla.qk_rope_head_dim : m.head_dim;
  return bytes_for_bits(checked_mul(checked_mul(2 * rotary, b.tokens()), b.beta()));
}

/// torchtitan's module buffers on a stage, one set per layer, each its own block: every
/// attention's RoPE cache, which the trainer sizes to the training sequence
/// (models/common/decoder.py update_from_config: max_context_length=seq_len; rope.py RoPE.__init__:
/// register_buffer("cache", ...)), complex64 [s, d/2] (ComplexRoPE) or fp32 cos and sin [s, 2d]
/// (CosSinRoPE); and each MoE layer's fp32 expert_bias_E and tokens_per_expert_E (moe.py
/// MoE.__init__).
struct stage_buffers {
  bytes size{};
  std::int64_t count = 0;
};
constexpr stage_buffers torchtitan_buffers(const model& m, const activation_options& o,
                                           const stage_range& range) {
  if (o.code != model_code::torchtitan || range.layers == 0) return {};
  const bool qwen3 = torchtitan_qwen3(o.code, m);
  const std::int64_t rotary = m.is_mla() ? m.mla.qk_rope_head_dim : m.head_dim;
  const bytes cache = bytes_for_bits(
      checked_mul(checked_mul(o.sequence, qwen3 ? 2 * rotary : rotary / 2), qwen3 ? 32 : 64));
  stage_buffers s{(cache + allocator_rounding(cache)) * range.layers, range.layers};
  if (m.is_moe()) {  // DeepSeek-V3's first layers are dense (build_mla_moe_layers)
    const std::int64_t moe = range.layers - dense_layers_of_stage(m, range);
    const bytes experts = bytes_for_bits(checked_mul(m.moe.routed_experts, 32));
    s.size += (experts + allocator_rounding(experts)) * checked_mul(2, moe);
    s.count += checked_mul(2, moe);
  }
  return s;
}

/// Megatron's MoE layers keep their dispatcher's last routing until their next forward
/// (token_dispatcher.py MoEAlltoAllTokenDispatcher: self.probs and self.routing_map [T, E],
/// self.reversed_local_input_permutation_mapping [T k], int64), and its aux loss the metrics
/// tracker's fp32 [layers] (moe_utils.py save_to_aux_losses_tracker) and MoEAuxLossAutoScaler's
/// [1] scale (tests/validation E21).
constexpr stage_buffers megatron_moe_state(const model& m, const activation_options& o,
                                           const block_builder& b, const stage_range& range) {
  if (o.code != model_code::megatron_te || !m.is_moe() || range.layers == 0) return {};
  const std::int64_t tokens = b.replicated(1);
  bytes per_layer{};
  for (const bytes x :
       {bytes_for_bits(checked_mul(checked_mul(tokens, m.moe.routed_experts), b.beta())),
        bytes{checked_mul(tokens, m.moe.routed_experts)},
        bytes{checked_mul(checked_mul(tokens, m.moe.top_k), 8)}})
    per_layer += x + allocator_rounding(x);
  const bytes tracker{checked_mul(4, m.layers)};
  return {per_layer * range.layers + tracker + allocator_rounding(tracker) + bytes{512},
          checked_mul(3, range.layers) + 2};
}

/// What an encoder's classification head keeps. Its first linear reads hidden_states[:, 0], a
/// view, which a linear in the model's format keeps whole (the [tokens, h] last hidden states);
/// autocast's cast copies only the [b, h] rows (modeling_bert.py BertPooler.forward,
/// modeling_distilbert.py DistilBertForSequenceClassification.forward: pre_classifier,
/// torchvision vision_transformer.py VisionTransformer.forward: heads). BERT's pooler keeps its
/// tanh output, DistilBERT's head its ReLU's; the classifier's dropout keeps its mask, and the
/// classifier its output; cross_entropy keeps the [b] int64 labels.
constexpr bytes encoder_head(const model& m, const activation_options& o, const block_builder& b) {
  const std::int64_t rows = checked_mul(o.micro_batch, m.hidden);
  const bool cast = b.autocast_wide() != b.beta();
  bytes head = bytes_for_bits(checked_mul(cast ? rows : b.replicated(m.hidden), b.beta()));
  head += bytes{checked_mul(8, o.micro_batch)};
  const bool dense = (m.family == family::bert && m.encoder.pooler) ||
                     (m.family == family::distilbert && m.encoder.classes > 0);
  if (dense) head += bytes_for_bits(checked_mul(rows, b.beta()));  // tanh / ReLU output
  if ((dense || m.family == family::bert) && m.encoder.classes > 0 && o.hidden_dropout)
    head += bytes_for_bits(checked_mul(rows, o.dropout_mask_bits + b.beta()));
  return head;
}

/// What the final norm, the head and the loss keep and make on the last stage.
struct loss_tensors {
  bytes head{};           ///< kept until the head's backward
  bytes loss_gradient{};  ///< the loss's backward transients
  bytes logits_alive{};   ///< the logits while the loss is computed
  /// Of two logits tensors (16-bit logits, then their fp32 copy), the first.
  bytes logits_first{};
  /// The one log_softmax output cross_entropy saves, made after the logits.
  bytes log_probs{};
};

/// The logits and the loss's tensors of `logits` = tokens x vocab values, by loss. The model's
/// output is dropped before backward (transformers Trainer.compute_loss returns the loss alone):
/// the logits live through the loss, then only what cross_entropy saves is kept.
constexpr void logits_and_loss(loss_tensors& s, const activation_options& o, std::int64_t beta,
                               std::int64_t tokens, std::int64_t vocab) {
  const std::int64_t logits = checked_mul(tokens, vocab);
  switch (o.loss) {
    case loss_kind::fp32_upcast:
      // transformers loss_utils ForCausalLMLoss: logits.float() (a copy unless already fp32),
      // cross_entropy keeps log_softmax's fp32 output (aten _log_softmax_backward_data needs the
      // output only); its backward holds the nll_loss and log_softmax gradients.
      s.log_probs = bytes{checked_mul(logits, 4)};
      s.head += s.log_probs;
      s.logits_alive = bytes_for_bits(checked_mul(logits, beta == 32 ? 32 : beta + 32));
      if (beta < 32) s.logits_first = bytes_for_bits(checked_mul(logits, beta));
      s.loss_gradient = bytes{checked_mul(logits, 8)};  // two fp32 gradients
      break;
    case loss_kind::vocab_parallel:
      // Megatron-Core tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy: .float() (the
      // logits themselves when fp32), then max subtracted, exp and division in place: the
      // softmax, saved. Backward writes the gradient into it (calculate_gradients), which the
      // autograd engine casts to the logits' format (engine.cpp validate_outputs).
      s.log_probs = bytes{checked_mul(logits, 4)};
      s.head += s.log_probs;
      if (beta < 32) {  // the 16-bit logits while their copy is made; the gradient's cast
        s.logits_alive = bytes_for_bits(checked_mul(logits, beta));
        s.loss_gradient = s.logits_alive;
      }
      break;
    case loss_kind::native:  // log_softmax in the logits' format
      s.log_probs = bytes_for_bits(checked_mul(logits, beta));
      s.head += s.log_probs;
      s.logits_alive = bytes_for_bits(checked_mul(logits, beta));
      s.loss_gradient = bytes_for_bits(checked_mul(logits, 2 * beta));
      break;
    case loss_kind::fused_chunked:  // one chunk's logits and their gradient at a time
      s.loss_gradient = bytes{checked_mul(
          checked_mul(o.loss_chunk_tokens < tokens ? o.loss_chunk_tokens : tokens, vocab), 8)};
      break;
    case loss_kind::chunked_output:
    case loss_kind::linear_chunked: {
      // torchtune modules/loss: each chunk (tensor_split) is upcast by .float(), the copy going
      // with its chunk, and cross_entropy saves its fp32 log_softmax; backward runs chunk by chunk.
      // CEWithChunkedOutputLoss gets all the logits at once, LinearCrossEntropyLoss one chunk's.
      const std::int64_t chunk =
          checked_mul(checked_mul(ceil_div(o.sequence, o.loss_chunks), o.micro_batch), vocab);
      s.head += bytes{checked_mul(logits, 4)};
      const bool all_logits = o.loss == loss_kind::chunked_output;
      s.logits_alive = bytes_for_bits(checked_mul(all_logits ? logits : chunk, beta)) +
                       bytes{beta == 32 ? 0 : checked_mul(chunk, 4)};
      if (beta < 32)
        s.logits_first = bytes_for_bits(checked_mul(all_logits ? logits : chunk, beta));
      s.loss_gradient = bytes{checked_mul(chunk, 8)};  // one chunk's two fp32 gradients
      break;
    }
  }
}

/// The final norm's and the head's saved inputs with the labels, and the loss's tensors, on the
/// last stage (an encoder's head: its pooler and classifier inputs).
constexpr loss_tensors head_and_loss(const training& t, const activation_options& o,
                                     const layout& l, const block_builder& b,
                                     const stage_range& range) {
  loss_tensors s{};
  if (!range.last) return s;
  const model& m = t.model;
  // LoRA leaves the final norm's weight frozen: weight * x keeps no x for it (as a layer's norms).
  // BERT's and DistilBERT's layers end in their own LayerNorm (post-LN): no final norm.
  if (!m.is_bert_style()) {
    block_builder final_norm(m, t.precision, o, l, t.finetune);
    final_norm.norm("final norm input", m.hidden);
    for (const saved_tensor& x : final_norm.result()) s.head += x.size;
  }
  if (m.is_encoder()) {
    s.head += encoder_head(m, o, b);
    return s;
  }
  // lm_head keeps its input for its weight's gradient: none when LoRA leaves the head frozen
  // (all-linear leaves it out: peft tuners_utils _maybe_include_all_linear_layers).
  if (!b.frozen_base() || lora_targets_head(t.finetune))
    s.head += bytes_for_bits(checked_mul(b.replicated(m.hidden), b.beta()));  // head input
  s.head += bytes{checked_mul(8, b.tokens())};                                // labels
  const std::int64_t vocab = ceil_div(m.vocab, l.tensor);
  // modeling_gemma2.py Gemma2ForCausalLM.forward: logits = torch.tanh(logits / cap) * cap; the
  // tanh keeps its output (tanh_backward) until the head's backward. Hugging Face's losses only.
  if (m.logit_softcap && (o.loss == loss_kind::fp32_upcast || o.loss == loss_kind::native))
    s.head += bytes_for_bits(checked_mul(checked_mul(b.tokens(), vocab), b.beta()));
  logits_and_loss(s, o, b.beta(), b.tokens(), vocab);
  return s;
}

/// What torch.distributed.pipelining keeps on a rank of `range` beside the saved activations of
/// `flight` micro-batches, `last_chunk` of them the last chunk's (pipeline_runtime). Each is
/// counted over the whole step: a receive buffer is made once, and the outputs and input gradients
/// kept pile up to the last micro-batch's backward, where a stage's memory peaks once the unsharded
/// gradients are summed (fsdp.hpp).
constexpr void add_pipeline_runtime_tensors(memory_ledger& ledger, const training& t,
                                            const activation_options& o, const block_builder& b,
                                            const stage_range& range, const in_flight& flight,
                                            const in_flight& last_chunk) {
  using enum pipeline_runtime;
  const model& m = t.model;
  if (t.layout.pipeline == 1 || o.runtime == megatron) return;
  const std::int64_t chunks = o.schedule == pipeline_schedule::interleaved ? o.virtual_stages : 1;
  const std::int64_t mb = o.micro_batches;
  // A stage's input or output: [micro-batch, s/CP, h] in the residual stream's format, 1/TP
  // with sequence parallelism.
  const bytes boundary = bytes_for_bits(checked_mul(b.replicated(m.hidden), b.rho()));
  const std::int64_t receiving = chunks - (range.first ? 1 : 0);  // chunks receiving an input
  const std::int64_t sending = chunks - (range.last ? 1 : 0);     // chunks whose output goes on
  const std::int64_t buffers = checked_mul(mb, receiving + sending);
  add_entry(ledger, "pipeline receive buffers (inputs, output gradients: one per micro-batch)",
            component::buffers, memory_space::device, boundary * buffers, buffers,
            "pipelining/stage.py _prepare_forward_infra, _prepare_backward_infra: made at the "
            "first step, kept",
            lifetime::persistent);
  // The last chunk's output is the logits (16-bit, vocabulary-parallel under TP).
  const bytes logits =
      m.is_encoder() ? boundary
                     : bytes_for_bits(checked_mul(
                           checked_mul(b.tokens(), ceil_div(m.vocab, t.layout.tensor)), b.beta()));
  // fwd_cache holds a micro-batch's output until its backward (to the end of the backward pass,
  // as the timeline frees such buffers); output_chunks every micro-batch's until the next step:
  // on every stage (torch 2.6, 2.7), on the last (2.8, 2.9).
  const bool all_kept = o.runtime == torch_2_6;
  const bool kept = all_kept || (o.runtime == torch_2_8 && range.last);
  const std::int64_t last_outputs = !range.last ? 0 : kept ? mb : last_chunk.num;
  const std::int64_t other_outputs =
      all_kept ? checked_mul(mb, sending) : flight.num - (range.last ? last_chunk.num : 0);
  add_entry(ledger,
            kept ? "pipeline stage outputs (every micro-batch's, to the next step)"
                 : "pipeline stage outputs (held for their backward)",
            kept ? component::activations : component::buffers, memory_space::device,
            boundary * other_outputs + logits * last_outputs, other_outputs + last_outputs,
            kept ? "pipelining/stage.py forward_one_chunk: output_chunks, cleared by the next "
                   "step() (clear_runtime_states)"
                 : "pipelining/stage.py forward_one_chunk: fwd_cache, popped by the backward",
            kept ? lifetime::persistent : lifetime::forward_backward);
  // stage_backward leaves each input's gradient in its receive buffer (.grad) until the next
  // step before torch 2.10 (pytorch#164329 frees it after the send).
  if (o.runtime != torch) {
    const std::int64_t grads = checked_mul(mb, receiving);
    add_entry(ledger, "pipeline input gradients (in the receive buffers, to the next step)",
              component::activations, memory_space::device, boundary * grads, grads,
              "pipelining/_backward.py stage_backward: torch.autograd.backward leaves them in "
              "the inputs' .grad; stage.py clear_runtime_states drops them",
              lifetime::persistent);
  }
}

/// The backward transients: the loss's gradients, one layer's backward working set, and the
/// layer a full recompute or an activation offload brings back for its backward.
constexpr void add_backward_transients(memory_ledger& ledger, const activation_options& o,
                                       const loss_tensors& loss, const stage_layers& s) {
  // Two tensors of one size: the nll_loss and log_softmax gradients.
  add_entry(ledger, "logits gradient", component::activations, memory_space::device,
            loss.loss_gradient, 2, "cross-entropy backward: fp32 gradients of log_softmax",
            lifetime::backward);
  add_entry(ledger, "activation gradients (one layer)", component::activations,
            memory_space::device, s.largest_working, 0,
            "the larger of a layer's MLP and attention backward working sets, and the "
            "residual stream's gradient",
            lifetime::layer_backward, entry_role::activation_gradients);
  if (s.checkpointed > 0) {
    add_entry(ledger, "recomputed layer (full recompute)", component::activations,
              memory_space::device, s.largest_layer, 0,
              "Korthikanti et al. 2022 §4.2: one layer recomputed in backward",
              lifetime::layer_backward, entry_role::recomputed_layer);
  }
  if (o.offload) {
    add_entry(
        ledger, "layer brought back from the host (activation offload)", component::activations,
        memory_space::device, s.largest_layer, 0,
        "torch.autograd.graph.save_on_cpu / torchtune OffloadActivations: unpacked to the GPU "
        "for the layer's backward",
        lifetime::layer_backward, entry_role::reloaded_layer);
  }
}

/// The compute-format copy of a 4-bit weight that bitsandbytes' matmul makes while it runs
/// (dequantized_in_layer): the stage's largest, its first and last layers standing for its dense
/// and MoE layers. The step timeline times it (time_entries).
constexpr void add_dequantized_weights(memory_ledger& ledger, const training& t,
                                       const stage_range& range) {
  if (range.layers == 0 || t.finetune.quantized_base.payload_bits == 0) return;
  const tensor_ledger all = tensors(t.model);
  bytes most{};
  for (const std::int64_t layer : {range.first_layer, range.first_layer + range.layers - 1}) {
    const dequantized_weights d = dequantized_in_layer(t, all, layer);
    for (const auto& half : d.weight)
      for (const bytes w : half) most = w > most ? w : most;
    most = d.weight[1][1] + d.scales * 2 > most ? d.weight[1][1] + d.scales * 2 : most;
  }
  add_entry(ledger, "dequantized 4-bit weight (one matmul's)", component::activations,
            memory_space::device, most, 1,
            "bitsandbytes autograd/_functions.py MatMul4Bit: F.dequantize_4bit(B, ctx.state) for "
            "grad_A in backward; backends/cuda/ops.py _dequant_linear_fallback in forward",
            lifetime::layer_backward, entry_role::dequantized_weight);
}

}  // namespace detail

/// The activation ledger of one GPU of pipeline stage `stage`: saved activations of every layer
/// and in-flight micro-batch, the embedding's and the loss's saved tensors, and the backward
/// transients.
constexpr memory_ledger activations(const training& t, const activation_options& o,
                                    std::int64_t stage = 0) {
  const model& m = t.model;
  const layout& l = validated(t.layout, m);
  detail::check(o, l);
  detail::check_sequence(m, o.sequence);
  const detail::stage_range range = stage_of(t, stage);
  auto held_by = [](const in_flight& flight, bytes per_micro_batch) {
    return divide_up(per_micro_batch * flight.num, flight.den);
  };
  const in_flight flight = micro_batches_in_flight(l, o, stage);
  auto held = [&](bytes per_micro_batch) { return held_by(flight, per_micro_batch); };
  const in_flight first_chunk = micro_batches_in_flight(l, o, stage, model_chunk::first);
  const in_flight last_chunk = micro_batches_in_flight(l, o, stage, model_chunk::last);
  const detail::block_builder b(m, t.precision, o, l, t.finetune);
  const detail::stage_layers layers = detail::layers_of_stage(t, o, l, range);
  const detail::loss_tensors loss = detail::head_and_loss(t, o, l, b, range);

  // Hugging Face builds one additive causal mask [b, 1, s, s] per forward for eager attention
  // (asked for: SDPA's math kernel is given is_causal), in the embeddings' format (masking_utils.py
  // eager_mask: torch.where(..., torch.finfo(dtype).min) with dtype = inputs_embeds.dtype, fp32
  // under autocast), and a sliding-window one beside it where windows alternate (Gemma 2's
  // causal_mask_mapping); adding a mask saves nothing.
  bytes masks{};
  std::int64_t mask_count = 0;
  // modeling_bert.py BertModel.forward (modeling_distilbert.py DistilBertModel.forward):
  // masking_utils.create_bidirectional_mask, eager_mask's [b, 1, s, s] for eager attention.
  if (o.attention == attention_kind::eager && m.family != family::vit && range.layers > 0) {
    mask_count = m.sliding_window > 0 && !windowed_everywhere(m) ? 2 : 1;
    masks =
        bytes_for_bits(detail::checked_mul(detail::checked_mul(b.tokens(), o.sequence), b.rho())) *
        mask_count;
  }
  // A checkpointed layer's call keeps its keyword arguments, the mask among them, until its
  // backward (modeling_layers.py GradientCheckpointingLayer: partial(super().__call__, **kwargs),
  // held by torch/utils/checkpoint.py's recompute function): to the first layer's backward.
  const bool masks_kept = layers.checkpointed > 0;

  memory_ledger ledger{};
  const auto space = o.offload ? memory_space::host : memory_space::device;
  add_entry(ledger, "saved activations (layers x micro-batches)", component::activations, space,
            held(layers.kept), 0, "autograd saved tensors, operator by operator (activations.hpp)",
            lifetime::forward_backward, entry_role::saved_activations);
  // Model-level tensors, per micro-batch in flight.
  add_entry(ledger, "embedding inputs and rotary tables", component::activations, space,
            held_by(first_chunk, detail::embedding_inputs(m, o, b, range)) +
                held(detail::rotary_tables(m, b, range)) + (masks_kept ? held(masks) : bytes{}),
            0,
            masks_kept ? "input ids (int64), dropout mask, HF rotary cos/sin, causal mask kept by "
                         "the checkpointed layers"
                       : "input ids (int64), dropout mask, HF rotary cos/sin",
            lifetime::forward_backward, entry_role::embedding_inputs);
  const detail::stage_buffers titan = detail::torchtitan_buffers(m, o, range);
  add_entry(ledger, "torchtitan's per-layer buffers (RoPE caches, MoE load balancing)",
            component::buffers, memory_space::device, titan.size, titan.count,
            "torchtitan models/common/rope.py RoPE.__init__: register_buffer(\"cache\", ...) in "
            "every attention, sized to the training sequence; moe.py MoE.__init__: expert_bias_E, "
            "tokens_per_expert_E",
            lifetime::persistent);
  const detail::stage_buffers megatron = detail::megatron_moe_state(m, o, b, range);
  add_entry(
      ledger, "Megatron's MoE routing kept to the next forward", component::buffers,
      memory_space::device, megatron.size, megatron.count,
      "Megatron-Core transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher: "
      "self.probs, self.routing_map, self.reversed_local_input_permutation_mapping; "
      "moe_utils.py save_to_aux_losses_tracker, MoEAuxLossAutoScaler.main_loss_backward_scale",
      lifetime::persistent);
  // Under activation offload the loss's tensors stay on the GPU (read first in backward;
  // torchtune's loss is outside OffloadActivations). Two where one micro-batch's are held: norm and
  // head inputs with labels, then cross_entropy's log-probabilities (as timeline and replay do).
  const bytes head = held_by(last_chunk, loss.head);
  const bool two_parts = loss.log_probs > bytes{} && head == loss.head;
  add_entry(ledger, "final norm, head input and loss", component::activations, memory_space::device,
            head, two_parts ? 2 : 0,
            "final norm and head inputs, labels (int64), cross-entropy log_softmax output",
            lifetime::until_head_backward);
  if (two_parts) ledger[ledger.size() - 1].first_tensor = loss.head - loss.log_probs;
  add_entry(ledger, "logits (loss forward)", component::activations, memory_space::device,
            loss.logits_alive, loss.logits_first > bytes{} ? 2 : 1,
            "the model's logits and their fp32 copy, freed after the loss", lifetime::forward,
            entry_role::logits);
  if (loss.logits_first > bytes{}) ledger[ledger.size() - 1].first_tensor = loss.logits_first;

  // Without checkpointing the masks are gone before backward.
  if (mask_count > 0 && !masks_kept)
    add_entry(ledger, "causal attention mask (eager)", component::activations, memory_space::device,
              masks, mask_count, "transformers masking_utils: 4D float mask, forward only",
              lifetime::forward);
  // Forward holds hidden states beside what autograd saves, each [tokens, h] in the residual
  // stream's format: the running layer's input (the loop's variable) and its residual
  // (LlamaDecoderLayer.forward: residual = hidden_states), and in Hugging Face's code the
  // embedding output too (LlamaModel.forward keeps inputs_embeds, a local, to its end; the other
  // codes reassign h = layer(h)); an MoE layer's block adds its experts' locals on top.
  if (range.layers > 0) {
    const std::int64_t held_states = o.code == model_code::hf ? 3 : 2;
    detail::forward_transients f{held_states, bytes_for_bits(detail::checked_mul(
                                                  held_states * b.replicated(m.hidden), b.rho()))};
    if (m.is_bert_style()) f = detail::post_ln_forward_transients(m, o, b);
    const bool moe_layers =
        m.is_moe() && range.first_layer + range.layers > m.moe.first_dense_layers;
    if (moe_layers) {
      detail::forward_transients moe = detail::moe_forward_transients(m, o, l, b);
      if (m.moe.shared_experts > 0 && o.recompute != recompute_kind::full &&
          o.recompute != recompute_kind::op_sac) {
        // modeling_deepseek_v3.py DeepseekV3MoE.forward: self.shared_experts(residuals) runs
        // after self.experts(...) returns, so at the locals' peak the last layer has not saved
        // its shared experts' tensors yet: the peak is that much below all layers' saved.
        detail::block_builder shared(m, t.precision, o, l, t.finetune);
        detail::mlp_block(shared, m, shared.tokens(),
                          m.moe.shared_experts * m.moe.expert_ffn / shared.tp(), "shared expert");
        bytes kept{};
        for (const saved_tensor& x : shared.result()) kept += x.size;
        moe.size = moe.size > kept ? moe.size - kept : bytes{};
      }
      f = {f.tensors + moe.tensors, f.size + moe.size};
    }
    add_entry(ledger,
              moe_layers ? "hidden states and MoE block locals held in forward"
                         : "hidden states held in forward",
              component::activations, memory_space::device, f.size, f.tensors,
              "modeling_llama.py LlamaModel.forward: inputs_embeds and the loop's hidden_states; "
              "LlamaDecoderLayer.forward: residual; integrations/moe.py "
              "grouped_mm_experts_forward's locals (moe_forward_transients)",
              lifetime::forward);
  }
  detail::add_pipeline_runtime_tensors(ledger, t, o, b, range, flight, last_chunk);
  detail::add_backward_transients(ledger, o, loss, layers);
  detail::add_dequantized_weights(ledger, t, range);
  return ledger;
}

namespace detail {
/// What zero_grad(set_to_none=False), which keeps PyTorch's per-parameter .grad tensors, is not
/// modelled with on `t` (nullptr: nothing).
constexpr const char* gradients_kept_conflict(const training& t) {
  const layout& l = t.layout;
  if (l.zero != sharding::none || l.gathers_units()) return "sharded gradients";
  if (flat_gradient_buffer(l)) return "a flat gradient buffer";
  if (l.pipeline > 1) return "pipeline stages";
  if (t.optimizer.options.in_backward) return "an optimizer in backward";
  return nullptr;
}

/// step_entries of a stage whose model states `s` holds.
constexpr memory_ledger step_entries_of(const training& t, const activation_options& o,
                                        const stage_model_states& s, std::int64_t stage) {
  const layout& l = t.layout;
  if (t.optimizer.options.in_backward) {
    if (o.micro_batches > 1 || l.pipeline > 1)
      detail::rules::optimizer_in_backward_needs_one_micro_batch(o.micro_batches, l.pipeline);
    if (flat_optimizer(l)) detail::rules::optimizer_in_backward_needs_pytorch_gradients();
  }
  const bool kept = !t.optimizer.options.set_to_none;
  if (const char* other = kept ? gradients_kept_conflict(t) : nullptr)
    detail::rules::gradients_kept_need_pytorch_gradients(other);
  memory_ledger ledger = model_states_of(s);
  if (!kept && !flat_gradient_buffer(l) && l.pipeline == 1) {
    for (memory_entry& e : ledger)
      if (e.component == component::gradients && e.lifetime == lifetime::persistent &&
          e.space == memory_space::device)
        e.lifetime = lifetime::gradients;
  }
  append(ledger, activations(t, o, stage));
  return ledger;
}
}  // namespace detail

/// The entries of a step on a GPU of stage `stage`, before timeline.hpp times them. Gradients
/// persist with a flat buffer (Megatron; DeepSpeed without ZeRO, ZeRO-3), a pipeline or
/// zero_grad(set_to_none=False), else live from backward to step (zero_grad(set_to_none=True);
/// ZeRO-1/2 stage_1_and_2.py).
constexpr memory_ledger step_entries(const training& t, const activation_options& o,
                                     std::int64_t stage = 0) {
  const tensor_ledger tensors = vramfit::tensors(t.model);
  return detail::step_entries_of(t, o, detail::stage_model_states_of(t, tensors, stage), stage);
}

}  // namespace vramfit
