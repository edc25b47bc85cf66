// SPDX-License-Identifier: MIT
// The command-line names of the library's choices (precisions, optimizers, ...) and their
// values. Unknown names are vramfit::error with the list of known ones.
#pragma once

#include <concepts>
#include <string>
#include <string_view>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "suggest.hpp"

namespace vramfit::cli {

template <class Value>
struct named {
  const char* name;
  Value value;
  const char* help = nullptr;  ///< what the choice means, where its name does not say
};

/// A value as a refusal shows it: its first 40 bytes, then "..." where it is longer, so that a
/// cut value is not taken for the one given.
inline std::string shown_value(std::string_view text) {
  return text.size() > 40 ? std::string(text.substr(0, 40)) + "..." : std::string(text);
}

/// Whether `a` and `b` are the same name, ignoring case.
inline bool same_name(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

/// Another name for a choice: the ecosystem's spelling of it (a torch dtype, a Hugging Face
/// `optim`), or, with no `choice`, a name vramfit refuses because it models no such thing.
struct alias {
  const char* name;
  const char* choice;  ///< the table's name it means; nullptr: refused
  const char* why;     ///< what the name means where it comes from
};

/// A list of aliases (empty for most options).
struct alias_list {
  const alias* first = nullptr;
  std::size_t size = 0;
  template <std::size_t N>
  constexpr alias_list(const alias (&a)[N]) : first(a), size(N) {}  // NOLINT: implicit on purpose
  constexpr alias_list() = default;
  [[nodiscard]] constexpr const alias* begin() const { return first; }
  [[nodiscard]] constexpr const alias* end() const { return first + size; }
};

/// The entry of `table` that `name` means: its key, or the name the output prints for it
/// (`printed`), in any case, or else the one key that `name` begins. None or several: an error
/// that lists the keys (or the candidates), then `hint`, then the closest keys and `aliases`.
template <class Entry, std::size_t N, class Key, class Printed>
const Entry& lookup(const Entry (&table)[N], std::string_view name, const char* what, Key&& key,
                    Printed&& printed, const char* hint = "", alias_list aliases = {}) {
  for (const Entry& e : table)
    if (same_name(name, key(e)) || same_name(name, printed(e))) return e;
  std::vector<const Entry*> begun;  // keys that `name` begins
  for (const Entry& e : table) {
    const std::string_view k = key(e);
    if (!name.empty() && k.size() > name.size() && same_name(name, k.substr(0, name.size())))
      begun.push_back(&e);
  }
  if (begun.size() == 1) return *begun.front();
  const std::string shown = shown_value(name);
  if (begun.size() > 1) {
    std::string candidates;
    for (const Entry* e : begun)
      candidates += std::string(candidates.empty() ? "" : ", ") + std::string(key(*e));
    detail::raise(std::string(what) + " '" + shown + "' is ambiguous: " + candidates + hint);
  }
  std::string known;
  std::vector<std::string> keys;
  for (const Entry& e : table) {
    known += std::string(known.empty() ? "" : ", ") + std::string(key(e));
    keys.emplace_back(key(e));
  }
  for (const alias& a : aliases)
    if (a.choice != nullptr) keys.emplace_back(a.name);
  detail::raise("unknown " + std::string(what) + " '" + shown + "'; known: " + known + hint +
                did_you_mean(name, keys));
}

/// `words` separated by single spaces: a command line, a completion script's list.
inline std::string joined(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& w : words) text += (text.empty() ? "" : " ") + w;
  return text;
}

/// The names of `table` as a help text lists them, each with what it means where the table
/// says: "a, b (what b is) or c". The parser reads the same table, so --help cannot drift.
template <class Value, std::size_t N>
std::string choice_list(const named<Value> (&table)[N]) {
  std::string list;
  for (std::size_t i = 0; i < N; ++i) {
    list += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + table[i].name;
    if (table[i].help) list += std::string(" (") + table[i].help + ")";
  }
  return list;
}

/// Whether `a` and `b` are one choice: equal, or of one library name where the type has no ==
/// (precisions, optimizers).
template <class Value>
bool same_choice(const Value& a, const Value& b) {
  if constexpr (std::equality_comparable<Value>)
    return a == b;
  else
    return std::string_view(a.name) == b.name;
}

/// The name `table` gives `value` (its first), or "" when none does.
template <class Value, std::size_t N>
const char* name_of(const named<Value> (&table)[N], const Value& value) {
  for (const named<Value>& n : table)
    if (same_choice(n.value, value)) return n.name;
  return "";
}

/// The names of `table` as CLI11 writes a set of choices in --help: "TEXT:{a,b}".
template <class Value, std::size_t N>
std::string choice_type(const named<Value> (&table)[N]) {
  std::string names;
  for (const named<Value>& n : table) names += std::string(names.empty() ? "" : ",") + n.name;
  return "TEXT:{" + names + "}";
}

/// The value called `name` among `table` (see lookup) or `aliases` (exactly, in any case;
/// "torch.bfloat16" as "bfloat16"), or an error listing the names.
template <class Value, std::size_t N>
Value choose(const named<Value> (&table)[N], std::string_view name, const char* what,
             alias_list aliases = {}) {
  std::string_view bare = name;  // torch prints dtypes as "torch.bfloat16"
  if (bare.size() > 6 && same_name(bare.substr(0, 6), "torch.")) bare = bare.substr(6);
  for (const alias& a : aliases) {
    if (!same_name(bare, a.name) && !same_name(name, a.name)) continue;
    if (a.choice == nullptr)
      detail::raise(std::string(what) + " '" + shown_value(name) + "' (" + a.why +
                    ") is not modeled by vramfit; known: " + [&table] {
                      std::string known;
                      for (const named<Value>& n : table)
                        known += std::string(known.empty() ? "" : ", ") + n.name;
                      return known;
                    }());
    name = a.choice;
    break;
  }
  return lookup(
             table, name, what, [](const named<Value>& n) { return std::string_view(n.name); },
             [](const named<Value>& n) {
               if constexpr (requires { n.value.name; })
                 return std::string_view(n.value.name);
               else
                 return std::string_view(n.name);
             },
             "", aliases)
      .value;
}

inline constexpr named<precision> precisions[] = {
    {"fp32", fp32_training::value},
    {"bf16", pure<bf16>::value},
    {"fp16", pure<fp16>::value},
    {"amp-bf16", amp<bf16>::value},
    {"amp-fp16", amp<fp16>::value},
    {"bf16-fp32-master", mixed<bf16>::value},
    {"bf16-fp32-master-16bit-grads", mixed<bf16, bf16>::value},
    {"fp16-fp32-master", mixed<fp16, fp16>::value},
    {"fp8", fp8_compute::value},
};

/// --grad-dtype and --lora-dtype.
inline constexpr named<element_format> float_formats[] = {
    {"fp32", fp32::value}, {"bf16", bf16::value}, {"fp16", fp16::value}};

inline constexpr named<optimizer> optimizers[] = {
    {"sgd", sgd<>::value},
    {"sgd-momentum", sgd<optimizer_options{.momentum = true}>::value},
    {"adam", adam<>::value},
    {"adamw", adamw<>::value},
    {"adamw-amsgrad", adamw<optimizer_options{.amsgrad = true}>::value},
    {"adamw-fused", adamw<optimizer_options{.impl = optimizer_impl::fused}>::value},
    {"adagrad", adagrad<>::value},
    {"rmsprop", rmsprop<>::value},
    {"adadelta", adadelta<>::value},
    {"adamax", adamax<>::value},
    {"nadam", nadam<>::value},
    {"radam", radam<>::value},
    {"rprop", rprop<>::value},
    {"lion", lion<>::value},
    {"adafactor", adafactor<>::value},
    {"adamw-8bit", adamw_8bit<>::value},
    {"paged-adamw-8bit", adamw_8bit<optimizer_options{.paged = true}>::value},
    {"muon", muon<>::value},
};

/// torch dtypes for an option that takes one float format; --precision reads them as that one
/// dtype everywhere (pure), as a model cast with .to(dtype) and trained by torch.optim is.
inline constexpr alias torch_dtypes[] = {
    {"bfloat16", "bf16", "torch.bfloat16"},  // torch/_C/_VariableFunctions: torch.bfloat16
    {"float16", "fp16", "torch.float16"},    // torch.float16, also named torch.half
    {"half", "fp16", "torch.half"},          // torch.half is torch.float16
    {"float32", "fp32", "torch.float32"},    // torch.float32, also named torch.float
    {"float", "fp32", "torch.float"},        // torch.float is torch.float32
};

/// --kv-dtype: the torch dtypes, and vLLM's --kv-cache-dtype names of the same formats.
inline constexpr alias kv_dtypes[] = {
    {"bfloat16", "bf16", "torch.bfloat16"},           // torch.bfloat16
    {"float16", "fp16", "torch.float16"},             // torch.float16
    {"half", "fp16", "torch.half"},                   // torch.half is torch.float16
    {"float32", "fp32", "torch.float32"},             // torch.float32
    {"float", "fp32", "torch.float"},                 // torch.float is torch.float32
    {"float8_e4m3fn", "fp8", "torch.float8_e4m3fn"},  // torch.float8_e4m3fn: 1 byte, E4M3
    {"fp8_e4m3", "fp8", "vLLM kv_cache_dtype"},       // vllm/config/cache.py CacheDType: E4M3
};

/// Hugging Face TrainingArguments.optim (transformers training_args.py OptimizerNames), each as
/// trainer.py get_optimizer_cls_and_kwargs builds it; sgd, adagrad, rmsprop and adafactor are
/// also vramfit's names. Those vramfit does not model identically are refused, saying why.
inline constexpr alias hf_optimizers[] = {
    {"adamw_torch", "adamw", "torch.optim.AdamW"},  // trainer.py: AdamW(**adam_kwargs)
    {"adamw_torch_fused", "adamw-fused", "torch.optim.AdamW(fused=True)"},  // {"fused": True}
    {"adamw_bnb_8bit", "adamw-8bit", "bitsandbytes AdamW, optim_bits=8"},   // bnb AdamW 8-bit
    {"adamw_8bit", "adamw-8bit", "bitsandbytes AdamW, optim_bits=8"},  // "alias for adamw_bnb_8bit"
    {"paged_adamw_8bit", "paged-adamw-8bit", "bitsandbytes AdamW, optim_bits=8, is_paged"},
    {"paged_adamw_32bit", nullptr,
     "Hugging Face optim: bitsandbytes' paged AdamW with fp32 states; vramfit models "
     "paged-adamw-8bit only"},
    {"lion_32bit", nullptr,
     "Hugging Face optim: bitsandbytes' Lion, fp32 states in a fused kernel; vramfit's lion is "
     "lion-pytorch's, its state like the weights"},
    {"lion_8bit", nullptr, "Hugging Face optim: bitsandbytes' 8-bit Lion"},
    {"paged_lion_32bit", nullptr, "Hugging Face optim: bitsandbytes' paged Lion"},
    {"paged_lion_8bit", nullptr, "Hugging Face optim: bitsandbytes' paged 8-bit Lion"},
    {"adamw_hf", nullptr, "Hugging Face optim: transformers' own AdamW"},
    {"adamw_torch_xla", nullptr, "Hugging Face optim: torch_xla's syncfree AdamW"},
    {"adamw_torch_npu_fused", nullptr, "Hugging Face optim: torch_npu's NpuFusedAdamW"},
    {"adamw_apex_fused", nullptr, "Hugging Face optim: apex FusedAdam"},
    {"adamw_anyprecision", nullptr, "Hugging Face optim: torchdistx AnyPrecisionAdamW"},
    {"adamw_torch_4bit", nullptr, "Hugging Face optim: torchao AdamW4bit"},
    {"adamw_torch_8bit", nullptr, "Hugging Face optim: torchao AdamW8bit"},
    {"ademamix", nullptr, "Hugging Face optim: bitsandbytes AdEMAMix"},
    {"ademamix_8bit", nullptr, "Hugging Face optim: bitsandbytes AdEMAMix"},
    {"paged_ademamix_32bit", nullptr, "Hugging Face optim: bitsandbytes AdEMAMix"},
    {"paged_ademamix_8bit", nullptr, "Hugging Face optim: bitsandbytes AdEMAMix"},
    {"rmsprop_bnb", nullptr, "Hugging Face optim: bitsandbytes RMSprop"},
    {"rmsprop_bnb_8bit", nullptr, "Hugging Face optim: bitsandbytes RMSprop"},
    {"rmsprop_bnb_32bit", nullptr, "Hugging Face optim: bitsandbytes RMSprop"},
    {"galore_adamw", nullptr, "Hugging Face optim: GaLore"},
    {"galore_adamw_8bit", nullptr, "Hugging Face optim: GaLore"},
    {"galore_adafactor", nullptr, "Hugging Face optim: GaLore"},
    {"galore_adamw_layerwise", nullptr, "Hugging Face optim: GaLore"},
    {"galore_adamw_8bit_layerwise", nullptr, "Hugging Face optim: GaLore"},
    {"galore_adafactor_layerwise", nullptr, "Hugging Face optim: GaLore"},
    {"lomo", nullptr, "Hugging Face optim: LOMO"},
    {"adalomo", nullptr, "Hugging Face optim: AdaLomo"},
    {"grokadamw", nullptr, "Hugging Face optim: GrokAdamW"},
    {"schedule_free_radam", nullptr, "Hugging Face optim: schedule-free RAdam"},
    {"schedule_free_adamw", nullptr, "Hugging Face optim: schedule-free AdamW"},
    {"schedule_free_sgd", nullptr, "Hugging Face optim: schedule-free SGD"},
    {"apollo_adamw", nullptr, "Hugging Face optim: APOLLO"},
    {"apollo_adamw_layerwise", nullptr, "Hugging Face optim: APOLLO"},
    {"stable_adamw", nullptr, "Hugging Face optim: StableAdamW"},
};

inline constexpr named<optimizer_impl> optimizer_impls[] = {
    {"foreach", optimizer_impl::foreach, "lists as large as all the updated tensors"},
    {"fused", optimizer_impl::fused, "one kernel, no temporaries"},
    {"for-loop", optimizer_impl::for_loop, "foreach=False: a few copies of one tensor"},
};

inline constexpr named<weight_layout> weight_layouts[] = {
    {"fp32", plain_weights<fp32>::value},
    {"bf16", plain_weights<bf16>::value},
    {"fp16", plain_weights<fp16>::value},
    {"int8", bnb_int8::value, "bitsandbytes"},
    {"nf4", bnb_4bit<>::value, "double quantization"},
    {"nf4-no-dq", bnb_4bit<nf4>::value},
    {"fp4", bnb_4bit<fp4>::value},
    {"fp4-dq", bnb_4bit<fp4_double_quant>::value},
    {"gptq", gptq<>::value},
    {"awq", awq<>::value},
    {"fp8", fp8_weights<>::value},
    {"fp8-per-channel", fp8_weights<true>::value},
    {"mxfp4", mxfp4_experts::value, "experts"},
    {"nvfp4", nvfp4_weights::value},
};

inline constexpr named<load_kind> load_kinds[] = {
    {"meta", load_kind::direct,
     "created on the meta device, each tensor materialized in its format: from_pretrained"},
    {"device", load_kind::fp32_on_device_then_cast, "built in fp32 on the GPU, then cast"},
    {"host", load_kind::fp32_on_host, "built in fp32 on the host, then moved"}};

inline constexpr named<element_format> checkpoint_formats[] = {
    {"bf16", bf16::value}, {"fp16", fp16::value}, {"fp32", fp32::value}};

inline constexpr named<element_format> kv_formats[] = {
    {"bf16", bf16::value},
    {"fp16", fp16::value},
    {"fp32", fp32::value},
    {"fp8", fp8_e4m3::value},
    {"int8", group_quantized<8, 1 << 20, fp16, 0>::value, "with an fp16 scale per head"},
    {"int4", group_quantized<4, 1 << 20, fp16, 0>::value, "with an fp16 scale per head"},
};

inline constexpr named<attention_kind> attentions[] = {
    {"eager", attention_kind::eager, "the scores [b, heads, s, s] materialized"},
    {"flash", attention_kind::flash,
     "SDPA's fused kernels; PyTorch runs its math kernel, which saves what eager does, in fp32 "
     "with grouped-query heads and for Falcon's one K/V head (passed without enable_gqa; fp32 Q, "
     "K, V and probabilities)"},
    {"sdpa", attention_kind::sdpa,
     "Hugging Face's SDPA with K and V repeated per query head: torch < 2.5 or a padding mask"}};

/// A model code as a choice, named as the library names it (model_code.hpp traits_of).
constexpr named<model_code> code_choice(model_code c, const char* help) {
  return {detail::traits_of(c).name, c, help};
}

inline constexpr named<model_code> model_codes[] = {
    code_choice(model_code::hf, "Hugging Face transformers' modeling files"),
    code_choice(model_code::torchtitan,
                "torchtitan's Llama 3, Qwen3 (dense and MoE) and DeepSeek-V2 and V3 "
                "(models/common, models/deepseek_v3) on torch 2.9 or later: fused RMSNorm, "
                "grouped K and V, its MoE's fp32 weighting"),
    code_choice(model_code::torchtitan_2024,
                "torchtitan's Llama 3 of December 2024: K and V repeated per query head before "
                "SDPA"),
    code_choice(model_code::torchtune, "torchtune's modules: K and V expanded before SDPA"),
    code_choice(model_code::litgpt,
                "litgpt's model.py: K and V repeated before SDPA, RMSNorm's product in fp32"),
    code_choice(model_code::megatron_te,
                "Megatron-Core's Transformer Engine layers: fused norm and linear, RoPE, SwiGLU, "
                "cuDNN attention; its MoE layer's router, permute and grouped linears")};

inline constexpr named<experts_implementation> experts_implementations[] = {
    {"grouped_mm", experts_implementation::grouped_mm,
     "transformers 5's default: grouped GEMMs over the rows sorted by expert, in the weights' "
     "format"},
    {"eager", experts_implementation::eager, "a loop over the experts hit, F.linear per expert"},
    {"batched_mm", experts_implementation::batched_mm,
     "each routed row's expert weights copied, then bmm; meant for decoding"}};

inline constexpr named<recompute_kind> recomputes[] = {
    {"none", recompute_kind::none},
    {"selective", recompute_kind::selective, "the attention core"},
    {"full", recompute_kind::full},
    {"op-sac", recompute_kind::op_sac,
     "torchtitan's op-level selective checkpointing: every second matmul and attention outputs "
     "kept"}};

inline constexpr named<shard_implementation> zero_implementations[] = {
    {"deepspeed", shard_implementation::deepspeed},
    {"paper", shard_implementation::paper},
    {"megatron", shard_implementation::megatron, "Megatron's distributed optimizer with --zero 1"}};

inline constexpr named<fsdp_strategy> fsdp_strategies[] = {
    {"full", fsdp_strategy::full_shard, "FULL_SHARD"},
    {"grad-op", fsdp_strategy::shard_grad_op, "SHARD_GRAD_OP"},
    {"hybrid", fsdp_strategy::hybrid_shard, "HYBRID_SHARD, with --fsdp-group"},
    {"none", fsdp_strategy::no_shard, "NO_SHARD"}};

inline constexpr named<fsdp_backward_prefetch> backward_prefetches[] = {
    {"pre", fsdp_backward_prefetch::pre, "BACKWARD_PRE"},
    {"post", fsdp_backward_prefetch::post, "BACKWARD_POST"},
    {"none", fsdp_backward_prefetch::none, "None"}};

inline constexpr named<tp_comm_overlap> tp_overlaps[] = {
    {"none", tp_comm_overlap::none},
    {"userbuffers", tp_comm_overlap::userbuffers,
     "Megatron-Core's --tp-comm-overlap through Transformer Engine's userbuffers"},
    {"async-tp", tp_comm_overlap::async_tp, "torchtitan's enable_async_tensor_parallel"}};

inline constexpr named<bool> truth_values[] = {{"true", true}, {"false", false}};

inline constexpr named<sharding_family> sharding_families[] = {
    {"deepspeed", sharding_family::deepspeed},
    {"megatron", sharding_family::megatron},
    {"fsdp", sharding_family::fsdp},
    {"any", sharding_family::any}};

inline constexpr named<offload_target> offload_targets[] = {{"cpu", offload_target::cpu},
                                                            {"nvme", offload_target::nvme}};

/// What --offload moves to the host (or NVMe).
enum class offload_mode : unsigned char { none, optimizer, all };
inline constexpr named<offload_mode> offload_modes[] = {
    {"none", offload_mode::none},
    {"optimizer", offload_mode::optimizer, "master, states, gradient partitions"},
    {"all", offload_mode::all, "also ZeRO-3 weights"}};

/// --activation-offload: whether the saved activations live on the host.
inline constexpr named<bool> activation_offloads[] = {
    {"none", false},
    {"cpu", true,
     "keep saved activations on the host and bring each layer back for its backward: torchtune's "
     "enable_activation_offloading"}};

inline constexpr named<loss_kind> losses[] = {
    {"fp32-upcast", loss_kind::fp32_upcast, "Hugging Face"},
    {"native", loss_kind::native},
    {"fused-chunked", loss_kind::fused_chunked,
     "one chunk's logits at a time, as Liger's fused linear cross-entropy"},
    {"chunked-output", loss_kind::chunked_output,
     "torchtune's CEWithChunkedOutputLoss: 8 chunks, every chunk's fp32 log-softmax saved"},
    {"linear-chunked", loss_kind::linear_chunked,
     "torchtune's LinearCrossEntropyLoss: the head applied per chunk, every chunk's fp32 "
     "log-softmax saved"},
    {"vocab-parallel", loss_kind::vocab_parallel,
     "Megatron-Core's vocab-parallel cross-entropy: one fp32 softmax saved, the gradient made in "
     "it"}};

inline constexpr named<pipeline_schedule> schedules[] = {
    {"1f1b", pipeline_schedule::one_f_one_b},
    {"interleaved", pipeline_schedule::interleaved},
    {"gpipe", pipeline_schedule::gpipe}};

inline constexpr named<pipeline_runtime> pipeline_runtimes[] = {
    {"megatron", pipeline_runtime::megatron,
     "Megatron-LM's schedules: received tensors go with their micro-batch"},
    {"torch", pipeline_runtime::torch,
     "torch.distributed.pipelining from torch 2.10: a receive buffer per micro-batch kept, "
     "outputs held for their backward"},
    {"torch-2.6", pipeline_runtime::torch_2_6,
     "torch 2.6, 2.7: also every stage's outputs and input gradients kept to the next step"},
    {"torch-2.8", pipeline_runtime::torch_2_8,
     "torch 2.8, 2.9: the last stage's outputs and the input gradients kept to the next step"}};

/// -f: how an answer is written.
enum class output_format : unsigned char { table, markdown, json, svg };
/// The formats of one estimate (train, infer, plan, min-gpus).
inline constexpr named<output_format> estimate_formats[] = {{"table", output_format::table},
                                                            {"markdown", output_format::markdown},
                                                            {"json", output_format::json},
                                                            {"svg", output_format::svg}};
/// The formats of a listing and of load.
inline constexpr named<output_format> list_formats[] = {{"table", output_format::table},
                                                        {"json", output_format::json}};

/// --sweep: what doubles.
enum class sweep_axis : unsigned char { micro_batch, seq_len };
inline constexpr named<sweep_axis> sweep_axes[] = {{"micro-batch", sweep_axis::micro_batch},
                                                   {"seq-len", sweep_axis::seq_len}};

/// --reserve: the caching allocator simulated, or a fixed share of the tensors' peak.
inline constexpr named<reserve_model> reserve_models[] = {{"share", reserve_model::share},
                                                          {"simulated", reserve_model::simulated}};

/// --nccl-version: the NCCL releases whose allocation differs (nccl_memory.hpp).
inline constexpr named<nccl_version> nccl_versions[] = {
    {"2.21", nccl_version::v2_21, "NVLS buffers with 2 MiB credits each, all set up at init"},
    {"2.22", nccl_version::v2_22_or_later, "2.22 and later: NCCL_RUNTIME_CONNECT, smaller NVLS"}};

/// --metric: the figure a verdict compares with the card.
inline constexpr named<memory_metric> memory_metrics[] = {
    {"nvidia-smi", memory_metric::nvidia_smi, "reserved, CUDA context, workspaces, NCCL"},
    {"reserved", memory_metric::reserved, "torch.cuda.max_memory_reserved"},
    {"allocated", memory_metric::allocated, "torch.cuda.max_memory_allocated"}};

/// infer --logits: whether every position's logits are computed (a plain forward), or the last's.
inline constexpr named<bool> logit_choices[] = {{"last", false}, {"all", true}};

/// --units: how sizes are written for people.
inline constexpr named<prefixes> unit_prefixes[] = {{"GiB", prefixes::binary},
                                                    {"GB", prefixes::decimal}};

/// `vramfit completion SHELL`.
enum class completion_shell : unsigned char { bash, zsh };
inline constexpr named<completion_shell> completion_shells[] = {{"bash", completion_shell::bash},
                                                                {"zsh", completion_shell::zsh}};

inline constexpr named<tensor_kind> kinds[] = {{"embedding", tensor_kind::embedding},
                                               {"attention", tensor_kind::attention},
                                               {"mlp", tensor_kind::mlp},
                                               {"expert", tensor_kind::expert},
                                               {"norm", tensor_kind::norm},
                                               {"head", tensor_kind::head},
                                               {"router", tensor_kind::router}};

}  // namespace vramfit::cli
