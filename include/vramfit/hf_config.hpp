// SPDX-License-Identifier: MIT
// Run-time import of a Hugging Face config.json into a vramfit::model. Needs nlohmann/json (link
// vramfit::hf_config); not part of the umbrella header, which depends on Boost only.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "detail/name.hpp"
#include "model.hpp"

namespace vramfit {

/// The largest config.json read, and its deepest nesting: real ones are a few KiB (a ViT's with
/// its 1,000 labels 30 KiB) and 3 levels deep.
inline constexpr std::size_t max_config_bytes = std::size_t{16} << 20;
inline constexpr int max_config_depth = 64;

namespace detail {

/// A JSON value as an error message shows it: a scalar as written (a string cut to 40 bytes at a
/// character boundary), a container by its kind and size, never the whole of it.
inline std::string shown(const nlohmann::json& value) {
  if (value.is_array()) return "an array of " + std::to_string(value.size());
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " fields";
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    char cut[41];
    copy_name(cut, text.c_str());
    std::string quoted(1, '"');
    quoted.append(cut).append(text.size() > 40 ? "...\"" : "\"");
    return quoted;
  }
  return value.dump();
}

/// Parses config.json text, refusing more than max_config_bytes or max_config_depth before the
/// parser sees it (writing a value back recurses on nesting: 100,000 brackets overflowed the
/// stack).
inline nlohmann::json parse_config(std::string_view text, const std::string& what) {
  // A byte-order mark or NUL bytes: UTF-16 or UTF-32, which JSON parsers read as garbage.
  if (text.starts_with("\xFF\xFE") || text.starts_with("\xFE\xFF") ||
      text.find('\0') != std::string_view::npos)
    raise(what + " is not UTF-8 (UTF-16 or UTF-32?): save it as UTF-8");
  if (text.size() > max_config_bytes)
    raise(what + " is larger than " + std::to_string(max_config_bytes >> 20) +
          " MiB: not a config file");
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if ((c == '[' || c == '{') && ++depth > max_config_depth) {
      raise(what + " nests deeper than " + std::to_string(max_config_depth) +
            " levels: not a config file");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 2, column 0: syntax error ...", or
    // "[json.exception.out_of_range.406] number overflow parsing '1e999'": the reason without
    // the id, and not a long input echoed whole.
    std::string reason = e.what();
    const std::size_t at = reason.find("] ");
    reason = reason.substr(at == std::string::npos ? 0 : at + 2);
    if (reason.size() > 160) reason = reason.substr(0, 157) + "...";
    raise(what + " is not valid JSON: " + reason);
  }
}

/// Reads fields of one config.json with messages that name the field and the model_type.
class hf_fields {
 public:
  /// `where` names the object in messages: "config.json", or "config.json text_config" for a
  /// multimodal model's text decoder.
  hf_fields(const nlohmann::json& config, std::string model_type, std::string where = "config.json")
      : config_(config), model_type_(std::move(model_type)), where_(std::move(where)) {}

  /// The first of `names` that is present and not null, as an integer.
  [[nodiscard]] std::optional<std::int64_t> optional_int(
      std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      const auto it = config_.find(name);
      if (it == config_.end() || it->is_null()) continue;
      if (!it->is_number_integer() && !(it->is_number_float() && is_whole(it->get<double>())))
        fail(std::string("field '") + name + "' must be an integer, got " + shown(*it));
      if (it->is_number_unsigned() && it->get<std::uint64_t>() > 0x7fff'ffff'ffff'ffffu)
        fail(std::string("field '") + name + "' must be at most 9223372036854775807, got " +
             it->dump());
      return it->is_number_integer() ? it->get<std::int64_t>()
                                     : static_cast<std::int64_t>(it->get<double>());
    }
    return std::nullopt;
  }

  [[nodiscard]] std::int64_t integer(std::initializer_list<const char*> names) const {
    if (auto value = optional_int(names)) return *value;
    fail(std::string("missing field '") + *names.begin() + "'");
  }

  [[nodiscard]] std::int64_t integer_or(std::initializer_list<const char*> names,
                                        std::int64_t fallback) const {
    return optional_int(names).value_or(fallback);
  }

  [[nodiscard]] bool boolean_or(const char* name, bool fallback) const {
    const auto it = config_.find(name);
    if (it == config_.end() || it->is_null()) return fallback;
    if (!it->is_boolean())
      fail(std::string("field '") + name + "' must be true or false, got " + shown(*it));
    return it->get<bool>();
  }

  [[nodiscard]] std::string string_or(const char* name, const char* fallback) const {
    const auto it = config_.find(name);
    if (it == config_.end() || it->is_null()) return fallback;
    if (!it->is_string())
      fail(std::string("field '") + name + "' must be a string, got " + shown(*it));
    return it->get<std::string>();
  }

  /// Whether any of `names` is a dropout probability above 0; one that is not a probability
  /// (a string, a number outside [0, 1], as torch.nn.Dropout refuses) is refused.
  [[nodiscard]] bool any_positive(std::initializer_list<const char*> names) const {
    bool positive = false;
    for (const char* name : names) {
      const auto it = config_.find(name);
      if (it == config_.end() || it->is_null()) continue;
      if (!it->is_number() || !(it->get<double>() >= 0 && it->get<double>() <= 1))
        fail(std::string("field '") + name + "' must be a probability from 0 to 1, got " +
             shown(*it));
      positive = positive || it->get<double>() > 0;
    }
    return positive;
  }

  /// Whether any of `names` is missing (or null), so that its configuration class's default
  /// holds.
  [[nodiscard]] bool any_missing(std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      const auto it = config_.find(name);
      if (it == config_.end() || it->is_null()) return true;
    }
    return false;
  }

  [[nodiscard]] const nlohmann::json& json() const { return config_; }

  [[noreturn]] void fail(const std::string& what) const {
    raise(where_ + " (model_type '" + model_type_ + "'): " + what);
  }

 private:
  // In int64's range first: converting a double outside it is undefined behaviour ([conv.fpint]);
  // found by the config fuzzer with 1.29e93.
  static bool is_whole(double v) {
    return v >= -0x1p63 && v < 0x1p63 && v == static_cast<double>(static_cast<std::int64_t>(v));
  }

  const nlohmann::json& config_;
  std::string model_type_;
  std::string where_;
};

// transformers activations.py ACT2CLS (main, 2025): the names ACT2FN accepts, and no others.
inline constexpr const char* hf_activations[] = {"gelu",
                                                 "gelu_10",
                                                 "gelu_fast",
                                                 "gelu_new",
                                                 "gelu_python",
                                                 "gelu_pytorch_tanh",
                                                 "gelu_python_tanh",
                                                 "gelu_accurate",
                                                 "hardswish",
                                                 "laplace",
                                                 "leaky_relu",
                                                 "linear",
                                                 "mish",
                                                 "quick_gelu",
                                                 "relu",
                                                 "relu2",
                                                 "relu6",
                                                 "sigmoid",
                                                 "silu",
                                                 "sqrtsoftplus",
                                                 "swish",
                                                 "tanh",
                                                 "prelu",
                                                 "xielu"};

/// An MLP's form: up, activation, down; or a GLU (gate x up), which has no Python form here.
enum class mlp_form : unsigned char { plain, gated };

/// Whether the MLP's activation, the field `name` (`fallback` when absent, its configuration
/// class's default), is NewGELUActivation's Python operations; refused unless transformers
/// accepts it and vramfit counts its memory.
inline bool python_gelu(const hf_fields& f, const char* name, const char* fallback, mlp_form form) {
  const bool gated = form == mlp_form::gated;
  const std::string act = f.string_or(name, fallback);
  // One autograd op that keeps only its input (derivatives.yaml gelu_backward, silu_backward,
  // mish_backward, hardswish_backward, hardtanh_backward, leaky_relu_backward): F.gelu's memory.
  constexpr std::string_view keeps_input[] = {"gelu", "gelu_pytorch_tanh", "silu",  "swish",
                                              "mish", "hardswish",         "relu6", "leaky_relu"};
  // gelu_python_tanh is NewGELUActivation's formula with x * 0.5 first: the same four tensors.
  const bool python = act == "gelu_new" || act == "gelu_python_tanh";
  if (std::find(std::begin(keeps_input), std::end(keeps_input), act) != std::end(keeps_input))
    return false;
  if (python && !gated) return true;
  if (std::find_if(std::begin(hf_activations), std::end(hf_activations),
                   [&](const char* known) { return act == known; }) == std::end(hf_activations)) {
    std::string known;
    for (const char* a : hf_activations) known += std::string(known.empty() ? "" : ", ") + a;
    f.fail(std::string("field '") + name + "' must be an activation transformers knows (" + known +
           "), got " + shown(nlohmann::json(act)));
  }
  f.fail(std::string("field '") + name + "' = " + shown(nlohmann::json(act)) +
         " is not modelled: vramfit counts an activation that keeps only its input (gelu, "
         "gelu_pytorch_tanh, silu, swish, mish, hardswish, relu6, leaky_relu)" +
         (gated ? "" : " or gelu_new's Python operations (gelu_new, gelu_python_tanh)"));
}

inline void read_attention(const hf_fields& f, model& m) {
  m.hidden = f.integer({"hidden_size"});
  m.layers = f.integer({"num_hidden_layers"});
  m.heads = f.integer({"num_attention_heads"});
  m.kv_heads = f.integer_or({"num_key_value_heads"}, m.heads);
  m.head_dim = f.integer_or({"head_dim"}, m.heads > 0 ? m.hidden / m.heads : 0);
  m.vocab = f.integer({"vocab_size"});
}

/// Indices of a JSON array of integers, or nullopt for anything else.
inline std::optional<std::vector<std::int64_t>> integer_list(const nlohmann::json& value) {
  if (!value.is_array()) return std::nullopt;
  std::vector<std::int64_t> list;
  for (const nlohmann::json& item : value) {
    if (!item.is_number_integer()) return std::nullopt;
    list.push_back(item.get<std::int64_t>());
  }
  return list;
}

// Qwen3MoeConfig (configuration_qwen3_moe.py): layer i routes when i is not in mlp_only_layers and
// (i + 1) % decoder_sparse_step == 0 (modeling_qwen3_moe.py Qwen3MoeDecoderLayer).
inline void read_qwen3_moe(const hf_fields& f, model& m) {
  m.moe.routed_experts = f.integer_or({"num_experts"}, 0);
  if (m.moe.routed_experts == 0) return;  // every layer is a dense MLP of intermediate_size
  m.moe.top_k = f.integer({"num_experts_per_tok"});
  m.moe.expert_ffn = f.integer({"moe_intermediate_size"});
  m.moe.layout = moe_layout::mlp_experts;
  if (const std::int64_t step = f.integer_or({"decoder_sparse_step"}, 1); step != 1)
    f.fail("decoder_sparse_step = " + str(step) + " is not modelled (only every layer, 1)");
  // Dense layers are modelled as the first ones: mlp_only_layers must be [0, 1, ..., k - 1].
  const auto field = f.json().find("mlp_only_layers");
  if (field == f.json().end() || field->is_null()) return;
  const auto dense = integer_list(*field);
  if (!dense)
    f.fail("field 'mlp_only_layers' must be a list of layer indices, got " + shown(*field));
  for (std::size_t i = 0; i < dense->size(); ++i)
    if ((*dense)[i] != static_cast<std::int64_t>(i))
      f.fail("mlp_only_layers other than the first layers (0, 1, ...) is not modelled, got " +
             field->dump());
  m.moe.first_dense_layers = static_cast<std::int64_t>(dense->size());
}

/// The MLP width a config leaves out, 4 x its hidden size `hidden` (read from `field`): refused
/// by that field's name when it overflows, before the model's own checks see the hidden size.
inline std::int64_t four_times(const hf_fields& f, const char* field, std::int64_t hidden) {
  std::int64_t ffn = 0;
  if (__builtin_mul_overflow(hidden, 4, &ffn))
    f.fail(std::string("field '") + field + "' = " + str(hidden) +
           ": 4 x it, the MLP width's default, overflows int64");
  return ffn;
}

/// Whether a soft-capping field caps: null does not (modeling_gemma2.py: `if
/// self.config.final_logit_softcapping is not None`), absent as the configuration class's
/// default: Gemma2Config's caps (`absent_caps`), Gemma3TextConfig's does not.
inline bool softcaps(const hf_fields& f, const char* name, bool absent_caps) {
  const auto it = f.json().find(name);
  if (it == f.json().end()) return absent_caps;
  if (it->is_null()) return false;
  if (!it->is_number() || !(it->get<double>() > 0))
    f.fail(std::string("field '") + name + "' must be a positive number or null, got " +
           shown(*it));
  return true;
}

/// Gemma's block (Gemma2DecoderLayer, Gemma3DecoderLayer): GeGLU, four (1 + weight) RMSNorms
/// (Gemma2RMSNorm), and the soft-cappings its fields set, absent as the configuration class's
/// default (`absent_caps`: Gemma 2's cap, Gemma 3's do not).
inline void read_gemma_block(const hf_fields& f, model& m, bool absent_caps) {
  m.mlp = mlp_kind::geglu;
  m.norms_per_layer = 4;
  m.norm_plus_one = true;
  m.attention_softcap = softcaps(f, "attn_logit_softcapping", absent_caps);
  m.logit_softcap = softcaps(f, "final_logit_softcapping", absent_caps);
}

// Hugging Face LlamaConfig and relatives: configuration_llama.py and siblings.
inline model read_llama_like(const hf_fields& f, std::string_view type) {
  model m{};
  read_attention(f, m);
  m.ffn = f.integer({"intermediate_size"});
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", type == "gemma2");
  // Gemma2MLP reads hidden_activation (Gemma2Config has no hidden_act); the others hidden_act.
  if (type == "gemma2")
    python_gelu(f, "hidden_activation", "gelu_pytorch_tanh", mlp_form::gated);
  else
    python_gelu(f, "hidden_act", "silu", mlp_form::gated);
  if (f.boolean_or("attention_bias", false)) m.bias = bias_kind::attention;
  if (f.boolean_or("mlp_bias", false)) m.bias = bias_kind::all;
  if (type == "mistral" || type == "mixtral" || type == "phi3")
    m.sliding_window = f.integer_or({"sliding_window"}, 0);
  if (type == "qwen3" || type == "qwen3_moe") {
    m.qk_norm = true;  // Qwen3Attention: q_norm, k_norm
    if (f.boolean_or("use_sliding_window", false))
      f.fail(
          "use_sliding_window = true (per-layer windows from max_window_layers) is not modelled");
  }
  if (type == "qwen3_moe") read_qwen3_moe(f, m);
  if (type == "mixtral") {
    m.moe.routed_experts = f.integer({"num_local_experts"});
    m.moe.top_k = f.integer({"num_experts_per_tok"});
    m.moe.expert_ffn = m.ffn;
  } else if (type == "qwen2") {
    m.bias = bias_kind::qkv;  // Qwen2Attention: q, k and v projections carry biases
    if (f.boolean_or("use_sliding_window", false))
      f.fail(
          "use_sliding_window = true (per-layer windows from max_window_layers) is not modelled");
  } else if (type == "gemma2") {
    read_gemma_block(f, m, true);
    m.sliding_window = f.integer_or({"sliding_window"}, 0);
    m.sliding_window_period = 2;  // Gemma2DecoderLayer: even layers use the window
  } else if (type == "phi3") {
    m.family = family::phi3;
  }
  return m;
}

/// The sliding-window layers `layer_types` lists, when it does (newer transformers): runs of
/// "sliding_attention" layers, each followed by as many "full_attention" ones, from layer 0
/// (gpt-oss alternates, Gemma 3 has five windows to a full layer); all full turns the window off.
/// Returns whether the field was there.
inline bool read_layer_types(const hf_fields& f, model& m) {
  const auto types = f.json().find("layer_types");
  if (types == f.json().end() || types->is_null()) return false;
  if (!types->is_array() || static_cast<std::int64_t>(types->size()) != m.layers)
    f.fail("field 'layer_types' must list one type per layer (" + str(m.layers) + "), got " +
           shown(*types));
  std::vector<bool> sliding;
  for (const nlohmann::json& t : *types) {
    if (!t.is_string() || (t != "sliding_attention" && t != "full_attention"))
      f.fail("field 'layer_types' must hold \"sliding_attention\" or \"full_attention\", got " +
             shown(t));
    sliding.push_back(t == "sliding_attention");
  }
  const auto n = static_cast<std::int64_t>(sliding.size());
  std::int64_t windowed = 0, period = 0;
  while (windowed < n && sliding[static_cast<std::size_t>(windowed)]) ++windowed;
  for (period = windowed; period < n && !sliding[static_cast<std::size_t>(period)];) ++period;
  if (windowed == 0) {
    if (period < n) f.fail("layer_types starting with a full-attention layer are not modelled");
    m.sliding_window = 0;  // no layer has a window
    return true;
  }
  if (period == windowed) period = windowed = 1;  // every layer has it
  if (period > bounds::sliding_window_period)
    f.fail("field 'layer_types': a repeat of " + str(period) + " layers is not modelled (at most " +
           str(bounds::sliding_window_period) + ")");
  for (std::int64_t i = 0; i < n; ++i)
    if (sliding[static_cast<std::size_t>(i)] != (i % period < windowed))
      f.fail("field 'layer_types': only " + str(windowed) + " sliding layers then " +
             str(period - windowed) + " full ones, repeated, are modelled; layer " + str(i) +
             " differs");
  m.sliding_window_period = period;
  m.sliding_layers_per_period = windowed;
  return true;
}

// Gemma3TextConfig (configuration_gemma3.py): its defaults stand for what a checkpoint leaves out
// (gemma-3-4b's text_config lists a handful of fields). Gemma 2's block with q_norm and k_norm
// (Gemma3RMSNorm), no soft-capping unless set, five sliding-window layers to a global one.
inline model read_gemma3_text(const hf_fields& f) {
  model m{};
  m.hidden = f.integer_or({"hidden_size"}, 2304);
  m.layers = f.integer_or({"num_hidden_layers"}, 26);
  m.heads = f.integer_or({"num_attention_heads"}, 8);
  m.kv_heads = f.integer_or({"num_key_value_heads"}, 4);
  m.head_dim = f.integer_or({"head_dim"}, 256);
  m.vocab = f.integer_or({"vocab_size"}, 262'208);
  m.ffn = f.integer_or({"intermediate_size"}, 9216);
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  python_gelu(f, "hidden_activation", "gelu_pytorch_tanh", mlp_form::gated);
  if (f.boolean_or("attention_bias", false)) m.bias = bias_kind::attention;
  read_gemma_block(f, m, false);
  m.qk_norm = true;  // Gemma3Attention: q_norm, k_norm
  // Gemma3DecoderLayer: layer i has the window unless (i + 1) % sliding_window_pattern is 0.
  // null passes None to the layers (no window); absent is Gemma3TextConfig's 4096.
  const auto window = f.json().find("sliding_window");
  const bool none = window != f.json().end() && window->is_null();
  m.sliding_window = none ? 0 : f.integer_or({"sliding_window"}, 4096);
  if (read_layer_types(f, m)) return m;
  const std::int64_t pattern = f.integer_or({"sliding_window_pattern"}, 6);
  if (pattern < 1 || pattern > bounds::sliding_window_period)
    f.fail("field 'sliding_window_pattern' must be from 1 to " +
           str(bounds::sliding_window_period) + ", got " + str(pattern));
  if (pattern == 1) {  // every layer global
    m.sliding_window = 0;
    return m;
  }
  m.sliding_window_period = pattern;
  m.sliding_layers_per_period = pattern - 1;
  return m;
}

inline model read_deepseek(const hf_fields& f) {
  model m{};
  read_attention(f, m);
  m.ffn = f.integer({"intermediate_size"});
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  python_gelu(f, "hidden_act", "silu", mlp_form::gated);
  m.mla = {.q_lora_rank = f.integer_or({"q_lora_rank"}, 0),
           .kv_lora_rank = f.integer({"kv_lora_rank"}),
           .qk_nope_head_dim = f.integer({"qk_nope_head_dim"}),
           .qk_rope_head_dim = f.integer({"qk_rope_head_dim"}),
           .v_head_dim = f.integer({"v_head_dim"})};
  m.head_dim = m.mla.qk_rope_head_dim;  // DeepseekV3Config.head_dim: the rotary part
  m.moe = {.routed_experts = f.integer({"n_routed_experts"}),
           .top_k = f.integer({"num_experts_per_tok"}),
           .shared_experts = f.integer_or({"n_shared_experts"}, 0),
           .expert_ffn = f.integer({"moe_intermediate_size"}),
           .first_dense_layers = f.integer_or({"first_k_dense_replace"}, 0),
           .router_score_bias = f.string_or("topk_method", "greedy") == "noaux_tc",
           // transformers' DeepseekV3MoE always masks by group; V2's route_tokens_to_experts when
           // topk_method is "group_limited_greedy"
           .group_limited = f.string_or("topk_method", "greedy") != "greedy"};
  // DeepSeek's modeling_deepseek.py MoEGate knows these three (V2: the first two; V3: noaux_tc).
  if (const std::string topk = f.string_or("topk_method", "greedy");
      topk != "greedy" && topk != "group_limited_greedy" && topk != "noaux_tc")
    f.fail(
        "field 'topk_method' must be \"greedy\", \"group_limited_greedy\" or \"noaux_tc\", got " +
        shown(nlohmann::json(topk)));
  if (const std::int64_t freq = f.integer_or({"moe_layer_freq"}, 1); freq != 1)
    f.fail("moe_layer_freq = " + str(freq) + " is not modelled (only every layer, 1)");
  return m;
}

/// The classes of a classifier: id2label's entries, else num_labels (else `fallback`).
inline std::int64_t labels_of(const hf_fields& f, std::int64_t fallback) {
  const auto labels = f.json().find("id2label");
  if (labels == f.json().end() || labels->is_null()) return f.integer_or({"num_labels"}, fallback);
  if (!labels->is_object())
    f.fail("field 'id2label' must be an object of labels, got " + shown(*labels));
  return static_cast<std::int64_t>(labels->size());
}

/// The labels of a sequence-classification checkpoint (architectures:
/// ...ForSequenceClassification), or 0.
inline std::int64_t sequence_classes(const hf_fields& f) {
  const auto architectures = f.json().find("architectures");
  if (architectures == f.json().end() || architectures->is_null()) return 0;
  if (!architectures->is_array() ||
      !std::all_of(architectures->begin(), architectures->end(),
                   [](const nlohmann::json& name) { return name.is_string(); }))
    f.fail("field 'architectures' must be a list of class names, got " + shown(*architectures));
  if (std::none_of(architectures->begin(), architectures->end(), [](const nlohmann::json& name) {
        return name.get_ref<const std::string&>().find("ForSequenceClassification") !=
               std::string::npos;
      }))
    return 0;
  return labels_of(f, 2);
}

// GptOssConfig (configuration_gpt_oss.py): attention with biases and sinks, every layer MoE,
// sliding-window and full attention layers from layer_types.
inline model read_gpt_oss(const hf_fields& f) {
  model m{};
  read_attention(f, m);
  m.ffn = f.integer({"intermediate_size"});
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  if (f.boolean_or("attention_bias", true)) m.bias = bias_kind::attention;
  m.attention_sinks = true;
  // hidden_act is not read: GptOssExperts compute their clamped GLU themselves, never ACT2FN.
  m.moe = {.routed_experts = f.integer({"num_local_experts"}),
           .top_k = f.integer({"num_experts_per_tok", "experts_per_token"}),
           .expert_ffn = m.ffn,
           .layout = moe_layout::gpt_oss};
  m.sliding_window = f.integer_or({"sliding_window"}, 0);
  // GptOssConfig's default layer_types alternate from a sliding layer 0.
  if (!read_layer_types(f, m)) m.sliding_window_period = 2;
  return m;
}

// GPTBigCodeConfig (configuration_gpt_bigcode.py): GPT-2's fields, multi_query (default true).
inline model read_gpt_bigcode(const hf_fields& f) {
  model m = classic_block(family::gpt_bigcode);
  m.hidden = f.integer({"n_embd", "hidden_size"});
  m.layers = f.integer({"n_layer", "num_hidden_layers"});
  m.heads = f.integer({"n_head", "num_attention_heads"});
  m.head_dim = m.heads > 0 ? m.hidden / m.heads : 0;
  m.kv_heads = f.boolean_or("multi_query", true) ? 1 : m.heads;  // GPTBigCodeAttention.kv_heads
  // GPTBigCodeBlock: n_inner or 4 * n_embd
  m.ffn = f.integer_or({"n_inner"}, four_times(f, "n_embd", m.hidden));
  m.vocab = f.integer({"vocab_size"});
  m.max_positions = f.integer({"n_positions", "max_position_embeddings"});
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  // GPTBigCodeConfig: activation_function "gelu_pytorch_tanh" (fused); "gelu_new" is Python.
  m.gelu_in_python = python_gelu(f, "activation_function", "gelu_pytorch_tanh", mlp_form::plain);
  if (f.boolean_or("add_cross_attention", false))
    f.fail("add_cross_attention = true (an encoder-decoder GPTBigCode) is not modelled");
  return m;
}

// DistilBertConfig (configuration_distilbert.py): dim, hidden_dim, n_layers, n_heads.
inline model read_distilbert(const hf_fields& f) {
  model m = classic_block(family::distilbert);
  m.tied_embeddings = true;
  m.hidden = f.integer({"dim"});
  m.layers = f.integer({"n_layers"});
  m.heads = m.kv_heads = f.integer({"n_heads"});
  m.head_dim = m.heads > 0 ? m.hidden / m.heads : 0;
  m.ffn = f.integer({"hidden_dim"});
  m.vocab = f.integer({"vocab_size"});
  m.max_positions = f.integer({"max_position_embeddings"});
  // DistilBertConfig.activation
  m.gelu_in_python = python_gelu(f, "activation", "gelu", mlp_form::plain);
  // Sinusoidal positions are a frozen table (modeling_distilbert.py Embeddings), not learned.
  if (f.boolean_or("sinusoidal_pos_embds", false))
    f.fail("sinusoidal_pos_embds = true (a frozen position table) is not modelled");
  m.encoder.classes = sequence_classes(f);
  return m;
}

inline model read_gpt2(const hf_fields& f) {
  model m = classic_block(family::gpt2);
  m.hidden = f.integer({"n_embd", "hidden_size"});
  m.layers = f.integer({"n_layer", "num_hidden_layers"});
  m.heads = m.kv_heads = f.integer({"n_head", "num_attention_heads"});
  m.head_dim = m.heads > 0 ? m.hidden / m.heads : 0;
  m.ffn = f.integer_or({"n_inner"}, four_times(f, "n_embd", m.hidden));  // GPT2MLP: 4 * n_embd
  m.vocab = f.integer({"vocab_size"});
  m.max_positions = f.integer({"n_positions", "max_position_embeddings"});
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  // GPT2Config: activation_function "gelu_new", transformers activations.py NewGELUActivation.
  m.gelu_in_python = python_gelu(f, "activation_function", "gelu_new", mlp_form::plain);
  return m;
}

// FalconConfig (configuration_falcon.py); older RefinedWeb configs spell some fields
// n_head/n_layer.
inline model read_falcon(const hf_fields& f) {
  model m{.family = family::falcon,
          .mlp = mlp_kind::gelu,
          .norm = norm_kind::layernorm,
          .norms_per_layer = 1};
  m.hidden = f.integer({"hidden_size"});
  m.layers = f.integer({"num_hidden_layers", "n_layer"});
  m.heads = f.integer({"num_attention_heads", "n_head"});
  m.head_dim = m.heads > 0 ? m.hidden / m.heads : 0;
  m.vocab = f.integer({"vocab_size"});
  m.ffn = f.integer_or({"ffn_hidden_size"}, four_times(f, "hidden_size", m.hidden));
  if (f.boolean_or("new_decoder_architecture", false)) {
    m.kv_heads = f.integer({"num_kv_heads", "n_head_kv"});
    m.norms_per_layer = 2;
  } else {
    m.kv_heads = f.boolean_or("multi_query", true) ? 1 : m.heads;
  }
  m.parallel_block = f.boolean_or("parallel_attn", true);
  m.bias = f.boolean_or("bias", false) ? bias_kind::all : bias_kind::none;
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", true);
  // FalconMLP: config.activation
  m.gelu_in_python = python_gelu(f, "activation", "gelu", mlp_form::plain);
  return m;
}

// `activation`: hidden_act's default, BertConfig's "gelu" or BigBirdConfig's "gelu_new".
inline model read_bert(const hf_fields& f, const char* activation = "gelu") {
  model m = classic_block(family::bert);
  m.tied_embeddings = true;
  read_attention(f, m);
  m.kv_heads = m.heads;
  m.ffn = f.integer({"intermediate_size"});
  m.max_positions = f.integer({"max_position_embeddings"});
  m.encoder.token_types = f.integer({"type_vocab_size"});
  m.encoder.pooler = true;  // BertModel(add_pooling_layer=True); BigBirdModel likewise
  m.encoder.classes = sequence_classes(f);
  m.gelu_in_python = python_gelu(f, "hidden_act", activation, mlp_form::plain);
  return m;
}

// BigBirdConfig (configuration_big_bird.py): BERT's fields and tensors; block-sparse attention
// has no parameters of its own. BigBirdForSequenceClassification's head has a dense layer.
inline model read_big_bird(const hf_fields& f) {
  model m = read_bert(f, "gelu_new");  // BigBirdConfig: the tanh GELU in Python operations
  m.encoder.classifier_dense = m.encoder.classes > 0;
  if (!f.boolean_or("use_bias", true))
    f.fail("use_bias = false (Q, K and V without biases) is not modelled");
  return m;
}

// ViTConfig; counted as torchvision's VisionTransformer (the same tensors, fused Q/K/V).
inline model read_vit(const hf_fields& f) {
  model m = classic_block(family::vit);
  m.hidden = f.integer({"hidden_size"});
  m.layers = f.integer({"num_hidden_layers"});
  m.heads = m.kv_heads = f.integer({"num_attention_heads"});
  m.head_dim = m.heads > 0 ? m.hidden / m.heads : 0;
  m.ffn = f.integer({"intermediate_size"});
  m.encoder.image_size = f.integer({"image_size"});
  m.encoder.patch_size = f.integer({"patch_size"});
  m.encoder.channels = f.integer_or({"num_channels"}, 3);
  m.gelu_in_python = python_gelu(f, "hidden_act", "gelu", mlp_form::plain);  // ViTConfig: "gelu"
  m.encoder.classes = labels_of(f, -1);
  if (m.encoder.classes == -1) m.encoder.classes = f.integer({"num_labels"});
  if (m.encoder.patch_size > 0) {
    const std::int64_t side = m.encoder.image_size / m.encoder.patch_size;
    m.max_positions = side * side + 1;  // patches + class token
  }
  return m;
}

}  // namespace detail

/// The model_type values model_from_hf_config reads.
inline constexpr const char* hf_model_types[] = {
    "gpt2",        "llama",       "mistral",     "mixtral",     "qwen2", "qwen3",
    "qwen3_moe",   "gemma2",      "gemma3_text", "gemma3",      "phi3",  "falcon",
    "deepseek_v2", "deepseek_v3", "gpt_oss",     "gpt_bigcode", "bert",  "big_bird",
    "distilbert",  "vit",         "mistral3",    "llava"};

namespace detail {
/// Whether training drops out: a dropout field above 0, or one config.json leaves out where its
/// configuration class defaults to 0.1 (GPT-2, GPTBigCode, BERT, BigBird, DistilBERT: their
/// configuration_*.py dropout fields); the other classes read here default to 0.
inline bool trains_with_dropout(const hf_fields& fields, const std::string& type) {
  if (fields.any_positive({"resid_pdrop", "attn_pdrop", "embd_pdrop", "hidden_dropout_prob",
                           "attention_probs_dropout_prob", "attention_dropout", "hidden_dropout",
                           "dropout"}))
    return true;
  if (type == "gpt2" || type == "gpt_bigcode")
    return fields.any_missing({"resid_pdrop", "embd_pdrop", "attn_pdrop"});
  if (type == "bert" || type == "big_bird")
    return fields.any_missing({"hidden_dropout_prob", "attention_probs_dropout_prob"});
  if (type == "distilbert") return fields.any_missing({"dropout", "attention_dropout"});
  return false;
}

/// The model of one configuration object: config.json itself, or (`where` "config.json
/// text_config") the text decoder of a multimodal one, whose model_type defaults to
/// `default_type` as its configuration class does.
inline model read_hf_model(const nlohmann::json& config, const std::string& where,
                           const char* default_type = nullptr) {
  if (!config.is_object()) raise(where + " must be a JSON object");
  const auto type_field = config.find("model_type");
  if (type_field != config.end() && !type_field->is_null() && !type_field->is_string())
    raise(where + ": field 'model_type' must be a string such as \"llama\", got " +
          shown(*type_field));
  const bool typed = type_field != config.end() && type_field->is_string();
  if (!typed && default_type == nullptr)
    raise(where + ": missing field 'model_type' (a string such as \"llama\")");
  const std::string type = typed ? type_field->get<std::string>() : default_type;
  const hf_fields fields(config, type, where);
  model m{};
  if (type == "llama" || type == "mistral" || type == "mixtral" || type == "qwen2" ||
      type == "qwen3" || type == "qwen3_moe" || type == "gemma2" || type == "phi3") {
    m = read_llama_like(fields, type);
  } else if (type == "deepseek_v2" || type == "deepseek_v3") {
    m = read_deepseek(fields);
  } else if (type == "gpt_oss") {
    m = read_gpt_oss(fields);
  } else if (type == "gpt2") {
    m = read_gpt2(fields);
  } else if (type == "gpt_bigcode") {
    m = read_gpt_bigcode(fields);
  } else if (type == "falcon" || type == "RefinedWeb" || type == "RefinedWebModel") {
    m = read_falcon(fields);
  } else if (type == "bert") {
    m = read_bert(fields);
    // BertSelfAttention: relative_key(_query) adds a distance embedding per layer.
    const std::string positions = fields.string_or("position_embedding_type", "absolute");
    if (positions == "relative_key" || positions == "relative_key_query")
      fields.fail("field 'position_embedding_type' = \"" + positions +
                  "\" (a distance embedding per layer) is not modelled");
    if (positions != "absolute")
      fields.fail(
          "field 'position_embedding_type' must be \"absolute\", \"relative_key\" or "
          "\"relative_key_query\", got " +
          shown(nlohmann::json(positions)));
  } else if (type == "big_bird") {
    m = read_big_bird(fields);
  } else if (type == "distilbert") {
    m = read_distilbert(fields);
  } else if (type == "vit") {
    m = read_vit(fields);
  } else if (type == "gemma3_text") {
    m = read_gemma3_text(fields);
  } else if (type == "mistral3" || type == "llava" || type == "gemma3") {
    // Mistral3Config, LlavaConfig and Gemma3Config: the text decoder is text_config (a
    // MistralConfig, LlamaConfig or Gemma3TextConfig by default); the vision tower and projector
    // are not counted.
    const auto text = config.find("text_config");
    if (text == config.end() || text->is_null())
      fields.fail("missing field 'text_config' (the text decoder's configuration)");
    if (!text->is_object())
      fields.fail("field 'text_config' must be an object, got " + shown(*text));
    return read_hf_model(*text, where + " text_config",
                         type == "mistral3" ? "mistral"
                         : type == "gemma3" ? "gemma3_text"
                                            : "llama");
  } else {
    std::string supported;
    for (const char* t : hf_model_types)
      supported += std::string(supported.empty() ? "" : ", ") + t;
    raise(where + ": model_type '" + type + "' is not supported; supported: " + supported);
  }
  m.dropout = trains_with_dropout(fields, type);
  return m;
}
}  // namespace detail

/// A model from a parsed config.json; `name` labels it in reports and errors. Throws
/// vramfit::error naming the missing or invalid field, or the broken rule.
inline model model_from_hf_config(const nlohmann::json& config, std::string_view name = "config") {
  if (!config.is_object()) detail::raise("config.json must be a JSON object");
  model m = detail::read_hf_model(config, "config.json");
  detail::copy_name(m.name, std::string(name).c_str());
  // The outer model_type (a multimodal one's, not its text_config's): what peft reads.
  detail::copy_name(m.hf_model_type, config.at("model_type").get<std::string>().c_str());
  return validated(m);
}

namespace detail {

/// A path as messages quote it: 'path', cut to 120 characters.
inline std::string quoted_path(const std::filesystem::path& path) {
  std::string what(1, '\'');  // built by appends: g++ 12 warns wrongly on "'" + string
  const std::string shown = path.string();
  what.append(shown.size() > 120 ? shown.substr(0, 117) + "..." : shown).append(1, '\'');
  return what;
}

/// The text of a config file of at most max_config_bytes, named `what` in messages.
inline std::string read_config_text(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  // A regular file only: a named pipe would block, a directory cannot be read.
  if (!std::filesystem::is_regular_file(path, ec))
    raise(what +
          (std::filesystem::exists(path, ec) ? " is not a regular file" : " does not exist"));
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > max_config_bytes)
    raise(what + " is larger than " + std::to_string(max_config_bytes >> 20) +
          " MiB: not a config file");
  std::ifstream in(path, std::ios::binary);
  std::string text(ec ? 0 : static_cast<std::size_t>(size), '\0');
  if (!in || !in.read(text.data(), static_cast<std::streamsize>(text.size())))
    raise("cannot read " + what);
  return text;
}

}  // namespace detail

/// The parsed config.json at `path`, or in the folder `path` names (a downloaded checkpoint).
/// Throws vramfit::error when it cannot be read or is not valid JSON (with line and column).
inline nlohmann::json read_hf_config(std::filesystem::path path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) path /= "config.json";
  const std::string what = detail::quoted_path(path);
  return detail::parse_config(detail::read_config_text(path, what), what);
}

/// The name of the model at `path`: ".../Llama-3-8B/config.json" and ".../Llama-3-8B/" are named
/// after the folder, "llama-3-8b.json" after itself.
inline std::string hf_model_name(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::path file =
      std::filesystem::is_directory(path, ec) ? path / "config.json" : path;
  std::string name = file.stem().string();
  if (name == "config") {  // the folder's name, also for "." or "dir/"
    name = std::filesystem::absolute(file, ec).lexically_normal().parent_path().filename().string();
  }
  return name;
}

/// A model from a config.json file, or from a folder holding one. Throws vramfit::error when the
/// file cannot be read, is not valid JSON, or does not describe a supported model.
inline model load_hf_config(const std::filesystem::path& path) {
  return model_from_hf_config(read_hf_config(path), hf_model_name(path));
}

}  // namespace vramfit
