// SPDX-License-Identifier: MIT
// A checkpoint's `quantization_config` (config.json) as the weight layout its runtime loads:
// GPTQ, AWQ, bitsandbytes 4- and 8-bit, FP8 and MXFP4, as transformers' quantizers read it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "error.hpp"
#include "hf_config.hpp"
#include "inference.hpp"

namespace vramfit {

namespace detail {
/// The integer `key` of `q`, or `fallback` when it is absent or null.
inline std::int64_t quantization_integer(const nlohmann::json& q, const char* key,
                                         std::int64_t fallback) {
  const auto it = q.find(key);
  if (it == q.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<std::uint64_t>() > 0x7fff'ffff'ffff'ffffu))
    raise(std::string("config.json quantization_config: field '") + key +
          "' must be an integer, got " + shown(*it));
  return it->get<std::int64_t>();
}

/// The flag `key` of `q`, false when absent or null; refused unless true or false, as
/// transformers' configs refuse it (BitsAndBytesConfig.post_init).
inline bool quantization_flag(const nlohmann::json& q, const char* key) {
  const auto it = q.find(key);
  if (it == q.end() || it->is_null()) return false;
  if (!it->is_boolean())
    raise(std::string("config.json quantization_config: field '") + key +
          "' must be true or false, got " + shown(*it));
  return it->get<bool>();
}
}  // namespace detail

/// The weight layout `config`'s quantization_config describes, or none when the checkpoint is
/// not quantized (transformers utils/quantization_config.py: GPTQConfig, AwqConfig,
/// BitsAndBytesConfig, FineGrainedFP8Config, Mxfp4Config and their fields read below).
inline std::optional<weight_layout> hf_weight_layout(const nlohmann::json& config) {
  const auto found = config.find("quantization_config");
  if (found == config.end() || found->is_null()) return std::nullopt;
  const nlohmann::json& q = *found;
  if (!q.is_object())
    detail::raise("config.json: field 'quantization_config' must be an object, got " +
                  detail::shown(q));
  const auto method = q.find("quant_method");
  if (method == q.end() || method->is_null())
    detail::raise("config.json quantization_config: missing field 'quant_method'");
  if (!method->is_string())
    detail::raise("config.json quantization_config: field 'quant_method' must be a string, got " +
                  detail::shown(*method));
  const std::string m = method->get<std::string>();
  if (m == "gptq" || m == "awq") {
    const std::int64_t bits = detail::quantization_integer(q, "bits", 4);
    std::int64_t group = detail::quantization_integer(q, "group_size", 128);
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
      detail::raise("config.json quantization_config: field 'bits' must be 2, 3, 4 or 8 for " + m +
                    ", got " + detail::str(bits));
    if (group == -1) group = 2'147'483'647;  // one scale per output row: longer than any row
    if (group <= 0 || group > 2'147'483'647)
      detail::raise(
          "config.json quantization_config: field 'group_size' must be positive or -1, got " +
          detail::str(group));
    const element_format f = detail::group_quantized_format(
        static_cast<int>(bits), static_cast<int>(group), fp16::value, static_cast<int>(bits));
    return detail::named_layout(
        m.c_str(), f, fp16::value,
        {.act_order_index = m == "gptq" && detail::quantization_flag(q, "desc_act")});
  }
  if (m == "bitsandbytes") {
    if (detail::quantization_flag(q, "load_in_8bit") &&
        detail::quantization_flag(q, "load_in_4bit"))
      detail::raise(
          "config.json quantization_config: load_in_4bit and load_in_8bit are both true; "
          "transformers allows one");
    if (detail::quantization_flag(q, "load_in_8bit")) return bnb_int8::value;
    if (!detail::quantization_flag(q, "load_in_4bit"))
      detail::raise(
          "config.json quantization_config: bitsandbytes with neither load_in_4bit nor "
          "load_in_8bit quantizes nothing");
    const auto type = q.find("bnb_4bit_quant_type");
    const bool typed = type != q.end() && !type->is_null();
    if (typed && (!type->is_string() || (*type != "fp4" && *type != "nf4")))
      detail::raise(
          "config.json quantization_config: field 'bnb_4bit_quant_type' must be \"nf4\" or "
          "\"fp4\", got " +
          detail::shown(*type));
    const bool is_fp4 = typed && *type == "fp4";
    const bool dq = detail::quantization_flag(q, "bnb_4bit_use_double_quant");
    return is_fp4 ? (dq ? bnb_4bit<fp4_double_quant>::value : bnb_4bit<fp4>::value)
                  : (dq ? bnb_4bit<>::value : bnb_4bit<nf4>::value);
  }
  if (m == "fp8") return fp8_weights<>::value;  // scales per block or tensor: a few bytes
  if (m == "mxfp4") return mxfp4_experts::value;
  detail::raise(
      "config.json quantization_config: field 'quant_method' = " + detail::shown(*method) +
      " is not one vramfit reads (gptq, awq, bitsandbytes, fp8, mxfp4); give --weights");
}

}  // namespace vramfit
