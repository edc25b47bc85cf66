// SPDX-License-Identifier: MIT
// The command-line names of the library's choices (precisions, optimizers, ...) and their
// values. Unknown names are vramfit::error with the list of known ones.
#pragma once

#include <string>
#include <string_view>
#include <vector>
#include <vramfit/vramfit.hpp>

namespace vramfit::cli {

template <class Value>
struct named {
  const char* name;
  Value value;
};

/// Whether `a` and `b` are the same name, ignoring case.
inline bool same_name(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

/// The entry of `table` that `name` means: its key, or the name the output prints for it
/// (`printed`), in any case, or else the one key that `name` begins. None or several: an error
/// that lists the keys (or the candidates), then `hint`.
template <class Entry, std::size_t N, class Key, class Printed>
const Entry& lookup(const Entry (&table)[N], std::string_view name, const char* what, Key&& key,
                    Printed&& printed, const char* hint = "") {
  for (const Entry& e : table)
    if (same_name(name, key(e)) || same_name(name, printed(e))) return e;
  std::vector<const Entry*> begun;  // keys that `name` begins
  for (const Entry& e : table) {
    const std::string_view k = key(e);
    if (!name.empty() && k.size() > name.size() && same_name(name, k.substr(0, name.size())))
      begun.push_back(&e);
  }
  if (begun.size() == 1) return *begun.front();
  const std::string shown(name.substr(0, 40));
  if (begun.size() > 1) {
    std::string candidates;
    for (const Entry* e : begun)
      candidates += std::string(candidates.empty() ? "" : ", ") + std::string(key(*e));
    detail::raise(std::string(what) + " '" + shown + "' is ambiguous: " + candidates + hint);
  }
  std::string known;
  for (const Entry& e : table)
    known += std::string(known.empty() ? "" : ", ") + std::string(key(e));
  detail::raise("unknown " + std::string(what) + " '" + shown + "'; known: " + known + hint);
}

/// The names of `table` as a help text lists them: "a, b or c".
template <class Value, std::size_t N>
std::string choice_list(const named<Value> (&table)[N]) {
  std::string list;
  for (std::size_t i = 0; i < N; ++i)
    list += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + table[i].name;
  return list;
}

/// The value called `name` among `table` (see lookup), or an error listing the names.
template <class Value, std::size_t N>
Value choose(const named<Value> (&table)[N], std::string_view name, const char* what) {
  return lookup(
             table, name, what, [](const named<Value>& n) { return std::string_view(n.name); },
             [](const named<Value>& n) {
               if constexpr (requires { n.value.name; })
                 return std::string_view(n.value.name);
               else
                 return std::string_view(n.name);
             })
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

inline constexpr named<optimizer_impl> optimizer_impls[] = {
    {"foreach", optimizer_impl::foreach},
    {"fused", optimizer_impl::fused},
    {"for-loop", optimizer_impl::for_loop},
};

inline constexpr named<weight_layout> weight_layouts[] = {
    {"fp32", plain_weights<fp32>::value},
    {"bf16", plain_weights<bf16>::value},
    {"fp16", plain_weights<fp16>::value},
    {"int8", bnb_int8::value},
    {"nf4", bnb_4bit<>::value},
    {"nf4-no-dq", bnb_4bit<nf4>::value},
    {"fp4", bnb_4bit<fp4>::value},
    {"fp4-dq", bnb_4bit<fp4_double_quant>::value},
    {"gptq", gptq<>::value},
    {"awq", awq<>::value},
    {"fp8", fp8_weights<>::value},
    {"fp8-per-channel", fp8_weights<true>::value},
    {"mxfp4", mxfp4_experts::value},
    {"nvfp4", nvfp4_weights::value},
};

inline constexpr named<load_kind> load_kinds[] = {{"meta", load_kind::direct},
                                                  {"device", load_kind::fp32_on_device_then_cast},
                                                  {"host", load_kind::fp32_on_host}};

inline constexpr named<element_format> checkpoint_formats[] = {
    {"bf16", bf16::value}, {"fp16", fp16::value}, {"fp32", fp32::value}};

inline constexpr named<element_format> kv_formats[] = {
    {"bf16", bf16::value},
    {"fp16", fp16::value},
    {"fp32", fp32::value},
    {"fp8", fp8_e4m3::value},
    {"int8", group_quantized<8, 1 << 20, fp16, 0>::value},
    {"int4", group_quantized<4, 1 << 20, fp16, 0>::value},
};

inline constexpr named<attention_kind> attentions[] = {{"eager", attention_kind::eager},
                                                       {"flash", attention_kind::flash},
                                                       {"sdpa", attention_kind::sdpa}};

inline constexpr named<recompute_kind> recomputes[] = {{"none", recompute_kind::none},
                                                       {"selective", recompute_kind::selective},
                                                       {"full", recompute_kind::full},
                                                       {"op-sac", recompute_kind::op_sac}};

inline constexpr named<shard_implementation> zero_implementations[] = {
    {"deepspeed", shard_implementation::deepspeed},
    {"paper", shard_implementation::paper},
    {"megatron", shard_implementation::megatron}};

inline constexpr named<fsdp_strategy> fsdp_strategies[] = {
    {"full", fsdp_strategy::full_shard},
    {"grad-op", fsdp_strategy::shard_grad_op},
    {"hybrid", fsdp_strategy::hybrid_shard},
    {"none", fsdp_strategy::no_shard}};

inline constexpr named<sharding_family> sharding_families[] = {
    {"deepspeed", sharding_family::deepspeed},
    {"megatron", sharding_family::megatron},
    {"fsdp", sharding_family::fsdp},
    {"any", sharding_family::any}};

inline constexpr named<offload_target> offload_targets[] = {{"cpu", offload_target::cpu},
                                                            {"nvme", offload_target::nvme}};

inline constexpr named<loss_kind> losses[] = {{"fp32-upcast", loss_kind::fp32_upcast},
                                              {"native", loss_kind::native},
                                              {"fused-chunked", loss_kind::fused_chunked},
                                              {"chunked-output", loss_kind::chunked_output},
                                              {"linear-chunked", loss_kind::linear_chunked}};

inline constexpr named<pipeline_schedule> schedules[] = {
    {"1f1b", pipeline_schedule::one_f_one_b},
    {"interleaved", pipeline_schedule::interleaved},
    {"gpipe", pipeline_schedule::gpipe}};

inline constexpr named<tensor_kind> kinds[] = {{"embedding", tensor_kind::embedding},
                                               {"attention", tensor_kind::attention},
                                               {"mlp", tensor_kind::mlp},
                                               {"expert", tensor_kind::expert},
                                               {"norm", tensor_kind::norm},
                                               {"head", tensor_kind::head},
                                               {"router", tensor_kind::router}};

}  // namespace vramfit::cli
