// SPDX-License-Identifier: MIT
// Fine-tuning modes: which tensors train (full, a frozen subset, LoRA adapters) and in which
// format the frozen base is kept (QLoRA's NF4).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

#include "detail/name.hpp"
#include "detail/static_vector.hpp"
#include "detail/tag.hpp"
#include "dtype.hpp"
#include "tensors.hpp"

namespace vramfit {

// What a quantized checkpoint's skip list (quantization_config's modules_to_not_convert,
// bitsandbytes' llm_int8_skip_modules) changes in its method's modules, resolved against one
// model's tensor ledger: a weight layout and a QLoRA base carry it.

inline constexpr char kept_module_ranges[] = "separate layer ranges of modules kept unquantized";

/// Tensor groups of one model's ledger (bit i: tensors(m)[i]) kept unquantized in layers
/// [first_layer, first_layer + layer_count).
struct kept_range {
  std::uint64_t groups = 0;
  std::int64_t first_layer = 0;
  std::int64_t layer_count = 0;
};

/// What a checkpoint's skip list changes in its method's modules; empty: nothing.
struct quantization_exceptions {
  /// The parameters of the model the groups were resolved against (0: none kept).
  std::int64_t model_parameters = 0;
  std::uint64_t outside_layers = 0;  ///< groups outside the layers kept (bit i: tensors(m)[i])
  detail::static_vector<kept_range, 16, kept_module_ranges> ranges{};
  /// The head is converted too: a list given replaces the default that keeps it
  /// (transformers quantizers/base.py get_modules_to_not_convert, add_default_skips=False).
  bool converts_head = false;
  /// An MoE layer's routed experts and router stay unquantized: transformers 5 holds them as plain
  /// parameters, which a quantizer that replaces nn.Linear modules (bitsandbytes) skips
  /// (bitsandbytes-foundation/bitsandbytes#1849).
  bool keeps_moe_parameters = false;

  [[nodiscard]] constexpr bool keeps_any() const { return outside_layers != 0 || !ranges.empty(); }
};

namespace detail::rules {
[[noreturn]] inline void kept_modules_resolved_for_another_model(std::int64_t resolved,
                                                                 std::int64_t given) {
  raise("the modules a quantization_config keeps unquantized were resolved for a model of " +
        str(resolved) + " parameters, not this one of " + str(given) +
        ": read the layout from this model's config.json");
}
}  // namespace detail::rules

namespace detail {
/// `e`, checked to belong to the model of `ledger`.
constexpr const quantization_exceptions& checked_for(const quantization_exceptions& e,
                                                     const tensor_ledger& ledger) {
  if (e.keeps_any() && e.model_parameters != parameters(ledger))
    rules::kept_modules_resolved_for_another_model(e.model_parameters, parameters(ledger));
  return e;
}

/// Of `copies` tensors of ledger group `index` (`g`) in the `layers` layers from `first_layer`
/// (a group outside the layers: its copies), how many `e` keeps unquantized. The ranges of a
/// group are disjoint (hf_quantization.hpp builds them so): their overlaps add up.
constexpr std::int64_t kept_copies(const quantization_exceptions& e, std::size_t index,
                                   const tensor_group& g, std::int64_t first_layer,
                                   std::int64_t layers, std::int64_t copies) {
  const std::uint64_t bit = std::uint64_t{1} << index;
  if (g.layer_count == 0) return (e.outside_layers & bit) != 0 ? copies : 0;
  if (layers == 0) return 0;
  std::int64_t kept = 0;
  for (const kept_range& r : e.ranges)
    if ((r.groups & bit) != 0) kept += overlap(r.first_layer, r.layer_count, first_layer, layers);
  return copies / layers * kept;
}

/// The index of `g` in `ledger`, by name (tensor names are unique in a ledger).
constexpr std::size_t index_by_name(const tensor_ledger& ledger, const tensor_group& g) {
  for (std::size_t i = 0; i < ledger.size(); ++i) {
    const tensor_name& n = ledger[i].name;
    bool same = n.size() == g.name.size();
    for (std::size_t c = 0; same && c < n.size(); ++c) same = n[c] == g.name[c];
    if (same) return i;
  }
  return ledger.size();
}
}  // namespace detail

/// Tensors chosen by kind, layer range and expert range. Build one with `select::kinds(...)`.
struct tensor_selector {
  std::uint32_t kinds = 0;  ///< a bit per tensor_kind
  std::int64_t first_layer = 0;
  std::int64_t layer_count = -1;  ///< -1: every layer and the tensors outside layers
  std::int64_t first_expert = 0;
  std::int64_t expert_count = -1;  ///< -1: every expert

  /// Only layers [first, first + count).
  [[nodiscard]] constexpr tensor_selector layers(std::int64_t first, std::int64_t count) const {
    tensor_selector s = *this;
    s.first_layer = first;
    s.layer_count = count;
    return s;
  }
  /// Only experts [first, first + count).
  [[nodiscard]] constexpr tensor_selector experts(std::int64_t first, std::int64_t count) const {
    tensor_selector s = *this;
    s.first_expert = first;
    s.expert_count = count;
    return s;
  }
  friend constexpr bool operator==(const tensor_selector&, const tensor_selector&) = default;
};

namespace select {
/// The tensors of the given kinds, in every layer.
template <std::same_as<tensor_kind>... Kinds>
constexpr tensor_selector kinds(Kinds... k) {
  return tensor_selector{.kinds = ((std::uint32_t{1} << static_cast<int>(k)) | ...)};
}
/// Every tensor.
inline constexpr tensor_selector everything{.kinds = (1u << tensor_kind_count) - 1};
}  // namespace select

/// A string usable as a template argument: `lora<16, "q_proj,v_proj">`.
template <std::size_t N>
struct fixed_string {
  char text[N] = {};
  constexpr fixed_string(const char (&s)[N]) {  // NOLINT: implicit by design
    for (std::size_t i = 0; i < N; ++i) text[i] = s[i];
  }
};

enum class finetune_kind : unsigned char { full, partial, lora };

/// LoRA (Hu et al. 2021): per targeted weight [out, in], A [r, in] and B [out, r].
struct lora_config {
  std::int64_t rank = 0;
  /// Comma-separated module names matched against the tensor names ("q_proj,v_proj"), or
  /// "all-linear" (every linear weight in the layers, as PEFT's target_modules="all-linear").
  char targets[120] = {};
  element_format adapters{};  ///< payload 0: the precision policy's weight format
  /// transformers 5: an MoE layer's routed experts and router are plain parameters, not nn.Linear
  /// modules, so target_modules (names or all-linear) reach none of them (peft tuners_utils.py
  /// matches modules); false: transformers 4's per-expert linears.
  bool packed_moe = false;
};

inline constexpr char trainable_selections[] = "trainable selections";

/// A structural description of what trains and how the frozen base is stored.
struct finetuning {
  char name[24] = {};
  finetune_kind kind = finetune_kind::full;
  /// partial: the union of these (inclusion-exclusion over them costs 2^4 terms)
  detail::static_vector<tensor_selector, 4, trainable_selections> trainable{};
  lora_config lora{};
  /// QLoRA: the frozen linear weights' format (NF4 + double quantization); payload 0: unchanged.
  element_format quantized_base{};
  /// QLoRA: the format of the other frozen tensors (embeddings, norms, head).
  element_format unquantized_base{};
  /// A quantized checkpoint's skip list: modules kept in `unquantized_base`, the head converted.
  quantization_exceptions base_exceptions{};
};

template <class T>
concept Finetuning = detail::tag_of<T, finetuning>;

/// Every parameter trains.
struct full_finetune {
  static constexpr finetuning value{"full", finetune_kind::full};
};

/// Only the selected tensors train; the rest is frozen in the training weight format. Seed
/// article 003, case B: `partial<select::kinds(tensor_kind::expert).layers(0, 6).experts(0, 2),
/// select::kinds(tensor_kind::router)>`.
template <tensor_selector... Selected>
requires(sizeof...(Selected) >= 1 && sizeof...(Selected) <= 4) struct partial {
  static constexpr finetuning value = [] {
    finetuning f{"partial", finetune_kind::partial};
    (f.trainable.push_back(Selected), ...);
    return f;
  }();
};

namespace detail::rules {
[[noreturn]] inline void lora_rank_must_be_positive(std::int64_t rank) {
  raise("LoRA rank must be positive, got " + str(rank));
}
}  // namespace detail::rules

/// LoRA (or, with a quantized base, QLoRA) at run time: rank, comma-separated target modules,
/// the adapters' format (payload 0: the weights'), the frozen linear weights' and the other
/// frozen tensors' formats (payload 0: unchanged), and what a quantized checkpoint's skip list
/// changes.
constexpr finetuning lora_finetuning(std::int64_t rank, const char* targets,
                                     const element_format& adapters = {},
                                     const element_format& quantized = {},
                                     const element_format& unquantized = {},
                                     const quantization_exceptions& exceptions = {}) {
  if (rank <= 0) detail::rules::lora_rank_must_be_positive(rank);
  finetuning f{{}, finetune_kind::lora};
  detail::copy_name(f.name, quantized.payload_bits > 0 ? "qlora" : "lora");
  f.lora.rank = rank;
  detail::copy_name(f.lora.targets, targets);
  f.lora.adapters = adapters;
  f.quantized_base = quantized;
  f.unquantized_base = unquantized;
  f.base_exceptions = exceptions;
  return f;
}

namespace detail {
template <class Adapters>
constexpr element_format adapter_format() {
  if constexpr (Dtype<Adapters>)
    return Adapters::value;
  else
    return element_format{};
}
}  // namespace detail

/// LoRA adapters of rank `Rank` on the `Targets` modules; the base stays in the training format.
/// `Adapters` is the adapters' format (void: the weights').
template <std::int64_t Rank, fixed_string Targets = "q_proj,v_proj", class Adapters = void>
struct lora {
  static constexpr finetuning value =
      lora_finetuning(Rank, Targets.text, detail::adapter_format<Adapters>());
};

/// QLoRA (Dettmers et al. 2023): the frozen linear weights in NF4 with double quantization, the
/// embeddings, norms and head in `Base` (bf16, as bitsandbytes loads them), and LoRA adapters.
template <std::int64_t Rank, fixed_string Targets = "all-linear",
          StorageDtype Quantized = nf4_double_quant, StorageDtype Base = bf16>
struct qlora {
  static constexpr finetuning value =
      lora_finetuning(Rank, Targets.text, {}, Quantized::value, Base::value);
};

// --- What trains. ---

namespace detail {
/// Tensors of group `g` inside the layer and expert ranges of `s` (the group's own ranges
/// intersected with the selector's).
struct tensor_block {
  std::int64_t first_layer, layer_count, first_expert, expert_count;
};

constexpr tensor_block block_of(const tensor_group& g) {
  return {g.layer_count > 0 ? g.first_layer : -1, g.layer_count > 0 ? g.layer_count : 1, 0,
          g.experts};
}

/// The part of `b` that `s` selects, as a block (count 0 when nothing).
constexpr tensor_block selected_block(const tensor_group& g, tensor_block b,
                                      const tensor_selector& s) {
  const bool kind = (s.kinds >> static_cast<int>(g.kind)) & 1u;
  if (!kind) return {0, 0, 0, 0};
  if (s.layer_count >= 0) {
    if (g.layer_count == 0) return {0, 0, 0, 0};
    const std::int64_t lo = b.first_layer > s.first_layer ? b.first_layer : s.first_layer;
    b.layer_count = overlap(b.first_layer, b.layer_count, s.first_layer, s.layer_count);
    b.first_layer = lo;
  }
  if (s.expert_count >= 0 && g.kind == tensor_kind::expert) {
    const std::int64_t lo = b.first_expert > s.first_expert ? b.first_expert : s.first_expert;
    b.expert_count = overlap(b.first_expert, b.expert_count, s.first_expert, s.expert_count);
    b.first_expert = lo;
  }
  return b;
}
}  // namespace detail

/// How many tensors of `g` within `block` (a part of the group) the fine-tuning mode trains:
/// the union of its selectors, counted exactly by inclusion-exclusion.
constexpr std::int64_t trained_tensors(const finetuning& f, const tensor_group& g,
                                       detail::tensor_block block) {
  if (g.role != tensor_role::parameter) return 0;
  const std::int64_t all = block.layer_count * block.expert_count;
  if (f.kind == finetune_kind::full) return all;
  if (f.kind == finetune_kind::lora) return 0;
  std::int64_t count = 0;
  const std::size_t n = f.trainable.size();
  for (std::uint32_t subset = 1; subset < (1u << n); ++subset) {
    detail::tensor_block b = block;
    int members = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if ((subset >> i) & 1u) {
        b = detail::selected_block(g, b, f.trainable[i]);
        ++members;
      }
    }
    const std::int64_t size = b.layer_count * b.expert_count;
    count += members % 2 == 1 ? size : -size;
  }
  return count;
}

namespace detail {
/// Whether a module is a linear one, which "all-linear" targets.
enum class linear_module : bool { no, yes };

/// Whether the module whose name has `length` characters `at(0)`, ... is one of the
/// comma-separated `targets`; "all-linear" takes every linear module.
template <class CharAt>
constexpr bool targets_module(const char* targets, CharAt&& at, std::size_t length,
                              linear_module linear) {
  constexpr char all_linear[] = "all-linear";
  bool is_all = true;
  for (std::size_t i = 0; i < sizeof all_linear; ++i)
    is_all = is_all && targets[i] == all_linear[i];
  if (is_all) return linear == linear_module::yes;
  for (std::size_t begin = 0; targets[begin] != '\0';) {
    std::size_t n = 0;
    while (targets[begin + n] != '\0' && targets[begin + n] != ',') ++n;
    bool same = n == length;
    for (std::size_t i = 0; same && i < n; ++i) same = targets[begin + i] == at(i);
    if (same) return true;
    begin += n + (targets[begin + n] == ',' ? 1 : 0);
  }
  return false;
}

/// Whether the linear module `module` ("q_proj") is one of `targets`.
constexpr bool lora_targets(const char* targets, const char* module) {
  std::size_t length = 0;
  while (module[length] != '\0') ++length;
  return targets_module(
      targets, [module](std::size_t i) { return module[i]; }, length, linear_module::yes);
}

/// Whether the weight named `name` ("model.layers.{layer}.self_attn.q_proj.weight") is one of
/// the comma-separated `targets` (its module name is the part before ".weight").
constexpr bool is_lora_target(const tensor_group& g, const char* targets, bool packed_moe = false) {
  if (g.role != tensor_role::parameter || g.rank != 2) return false;
  if (packed_moe && (g.kind == tensor_kind::expert || g.kind == tensor_kind::router)) return false;
  const tensor_name& name = g.name;
  const std::size_t end = name.size();
  constexpr char suffix[] = ".weight";
  if (end < 7) return false;
  for (std::size_t i = 0; i < 7; ++i)
    if (name[end - 7 + i] != suffix[i]) return false;
  const std::size_t module_end = end - 7;
  std::size_t module_begin = module_end;
  while (module_begin > 0 && name[module_begin - 1] != '.') --module_begin;
  const bool linear = g.kind == tensor_kind::attention || g.kind == tensor_kind::mlp ||
                      g.kind == tensor_kind::expert || g.kind == tensor_kind::router;
  return targets_module(
      targets, [&](std::size_t i) { return name[module_begin + i]; }, module_end - module_begin,
      linear ? linear_module::yes : linear_module::no);
}
}  // namespace detail

/// Whether LoRA adapts the head: only when its targets name it; all-linear leaves the output
/// layer out (peft tuners_utils.py _maybe_include_all_linear_layers).
constexpr bool lora_targets_head(const finetuning& f) {
  constexpr char head[] = "lm_head";
  return f.kind == finetune_kind::lora &&
         detail::targets_module(
             f.lora.targets, [&](std::size_t i) { return head[i]; }, sizeof head - 1,
             detail::linear_module::no);
}

/// peft's target_modules when none are given, by config.json's model_type: the attention's query
/// and value projections as each family names them (peft utils/constants.py
/// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, for the types vramfit reads); nullptr
/// where peft has no entry and get_peft_model asks for target_modules.
constexpr const char* peft_default_lora_targets(std::string_view model_type) {
  struct entry {
    std::string_view model_type;
    const char* targets;
  };
  constexpr entry mapping[] = {{"gpt2", "c_attn"},
                               {"gpt_bigcode", "c_attn"},
                               {"bert", "query,value"},
                               {"falcon", "query_key_value"},
                               {"RefinedWeb", "query_key_value"},
                               {"RefinedWebModel", "query_key_value"},
                               {"llama", "q_proj,v_proj"},
                               {"mistral", "q_proj,v_proj"},
                               {"mixtral", "q_proj,v_proj"},
                               {"qwen2", "q_proj,v_proj"},
                               {"qwen3", "q_proj,v_proj"},
                               {"gemma2", "q_proj,v_proj"},
                               {"gemma3_text", "q_proj,v_proj"}};
  for (const entry& e : mapping)
    if (e.model_type == model_type) return e.targets;
  return nullptr;
}

/// LoRA adapter elements for one tensor of `g` if it is a target: r x (in + out).
constexpr std::int64_t lora_elements(const finetuning& f, const tensor_group& g) {
  if (f.kind != finetune_kind::lora ||
      !detail::is_lora_target(g, f.lora.targets, f.lora.packed_moe))
    return 0;
  return detail::checked_mul(f.lora.rank, detail::checked_add(g.shape[0], g.shape[1]));
}

namespace detail {
namespace rules {
/// The module names of the rank-2 parameter weights ("q_proj, k_proj, ..."), for messages;
/// `packed_moe`: without transformers 5's packed experts and routers.
inline std::string weight_modules(const tensor_ledger& tensors, bool packed_moe) {
  std::vector<std::string> names;
  for (const tensor_group& g : tensors) {
    std::string name = g.name.str();
    if (g.role != tensor_role::parameter || g.rank != 2 || !name.ends_with(".weight")) continue;
    if (packed_moe && (g.kind == tensor_kind::expert || g.kind == tensor_kind::router)) continue;
    name.resize(name.size() - 7);
    name.erase(0, name.rfind('.') + 1);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  return list;
}
/// "its modules: embed_tokens, q_proj, ..., or all-linear": what a LoRA target may name (peft
/// adapts embeddings too, by name; all-linear takes only the linear ones).
inline std::string lora_target_choices(const tensor_ledger& tensors, bool packed_moe) {
  return "its modules: " + weight_modules(tensors, packed_moe) + ", or all-linear";
}
[[noreturn]] inline void lora_targets_match_no_weight(const char* target, const char* model,
                                                      const tensor_ledger& tensors,
                                                      bool packed_moe) {
  raise(std::string("LoRA target '") + target + "' matches no weight of model '" + model + "'; " +
        lora_target_choices(tensors, packed_moe) +
        (packed_moe ? " (transformers 5 holds the routed experts and router as parameters, "
                      "which no target_modules entry reaches)"
                    : ""));
}
[[noreturn]] inline void trainable_selection_matches_no_tensor(std::size_t selection,
                                                               const model& m) {
  raise("trainable selection " + str(static_cast<std::int64_t>(selection) + 1) +
        " matches no tensor of model '" + m.name + "': its layers are 0-" + str(m.layers - 1) +
        (m.is_moe() ? ", its experts 0-" + str(m.moe.routed_experts - 1) : std::string()) +
        ", and the kinds must be among the model's tensors");
}
}  // namespace rules
}  // namespace detail

/// Checks that every LoRA target names a weight of the model and every trainable selection
/// selects at least one tensor: a misspelt module or a layer range past the model would
/// otherwise train nothing without a word.
constexpr void check_finetuning(const finetuning& f, const model& m, const tensor_ledger& tensors) {
  if (f.kind == finetune_kind::lora) {
    const char* targets = f.lora.targets;
    for (std::size_t at = 0; targets[at] != '\0';) {
      char target[sizeof f.lora.targets] = {};
      std::size_t length = 0;
      for (; targets[at + length] != '\0' && targets[at + length] != ','; ++length)
        target[length] = targets[at + length];
      bool found = false;
      for (const tensor_group& g : tensors)
        found = found || detail::is_lora_target(g, target, f.lora.packed_moe);
      if (!found)
        detail::rules::lora_targets_match_no_weight(target, m.name, tensors, f.lora.packed_moe);
      at += length + (targets[at + length] == ',' ? 1 : 0);
    }
  }
  if (f.kind == finetune_kind::partial) {
    for (std::size_t i = 0; i < f.trainable.size(); ++i) {
      std::int64_t selected = 0;
      for (const tensor_group& g : tensors) {
        if (g.role != tensor_role::parameter) continue;
        const detail::tensor_block b =
            detail::selected_block(g, detail::block_of(g), f.trainable[i]);
        selected += b.layer_count > 0 && b.expert_count > 0 ? 1 : 0;
      }
      if (selected == 0) detail::rules::trainable_selection_matches_no_tensor(i, m);
    }
  }
}

}  // namespace vramfit
