// SPDX-License-Identifier: MIT
// A checkpoint's `quantization_config` (config.json) as the weight layout its runtime loads:
// GPTQ, AWQ, bitsandbytes 4- and 8-bit, FP8 and MXFP4, as transformers' quantizers read it,
// with the modules its skip list keeps unquantized.
#pragma once

#include <bit>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

/// One element of a module-name pattern: a set of characters, once, optional ('?') or repeated
/// ('*').
struct name_atom {
  std::bitset<256> chars;
  char repeat = '1';
};

/// Skip-list names as transformers 5 matches a module name with them (quantizers_utils.py
/// should_convert_module: `re.match(key, name) or name.endswith(key)`): each a regular
/// expression matched from the name's start, and each the name's literal end. An automaton over
/// all of them at once: a state is the pattern positions reached, then whether one has matched.
class module_matcher {
 public:
  /// The pattern positions reached, a bit each in words of 64, and past them one bit for a
  /// pattern matched from the start: stepped by its set bits, as few are set at once.
  using state = std::vector<std::uint64_t>;

  /// `key` as Python's re reads it: literals, `.`, classes `[...]`, escapes (\d \w \s and their
  /// complements, \ before punctuation), `*` `+` `?` (a lazy `?` after them changes no match),
  /// a leading `^` and a final `$`; groups, alternatives and counted repeats are refused.
  void add_regex(const std::string& key, const std::string& where) {
    auto refuse = [&](const std::string& why) {
      raise(where + " entry " + shown(nlohmann::json(key)) + ": " + why);
    };
    const std::size_t first = slots_.size();
    starts_.push_back(first);
    bool to_end = false;
    for (std::size_t i = 0; i < key.size(); ++i) {
      const char c = key[i];
      if (c == '^' && i == 0) continue;
      if (c == '$' && i + 1 == key.size()) {
        to_end = true;
      } else if (c == '*' || c == '+' || c == '?') {
        if (slots_.size() == first) refuse("nothing to repeat");
        const slot last = slots_.back();
        if (last.atom.repeat != '1' && c != '?') refuse("multiple repeat");
        if (last.atom.repeat != '1') continue;  // lazy: the same names match
        if (c == '+') slots_.push_back(last);   // x+ is x x*
        slots_.back().atom.repeat = c == '?' ? '?' : '*';
      } else if (c == '(' || c == ')' || c == '|' || c == '{' || c == '}' || c == '$' || c == '^') {
        refuse(
            "vramfit reads module names with . * + ? [...] and escapes, not groups, "
            "alternatives, anchors inside or counted repeats: list the modules");
      } else {
        slots_.push_back({atom_at(key, i, refuse)});
      }
    }
    slots_.push_back({{}, true, to_end});
  }

  /// `key` as the literal end of a name.
  void add_suffix(const std::string& key) {
    starts_.push_back(slots_.size());
    name_atom any;
    any.chars.set();
    any.repeat = '*';
    slots_.push_back({any});
    for (const char c : key) slots_.push_back({literal(c)});
    slots_.push_back({{}, true, true});
  }

  [[nodiscard]] state start() const {
    state s((slots_.size() + 64) / 64, 0);
    for (const std::size_t j : starts_) close(s, j);
    return s;
  }
  [[nodiscard]] state step(const state& s, char c) const {
    if (has(s, slots_.size())) return s;  // matched from the start: whatever follows
    state next(s.size(), 0);
    for_each_position(s, [&](std::size_t j) {
      if (!slots_[j].final && slots_[j].atom.chars[static_cast<unsigned char>(c)])
        close(next, slots_[j].atom.repeat == '*' ? j : j + 1);
    });
    return next;
  }
  [[nodiscard]] state run(state s, std::string_view text) const {
    for (const char c : text) s = step(s, c);
    return s;
  }
  /// Whether a name that ends in state `s` matches.
  [[nodiscard]] bool accepts(const state& s) const {
    bool final = false;
    for_each_position(s, [&](std::size_t j) { final = final || slots_[j].final; });
    return final || has(s, slots_.size());
  }

 private:
  struct slot {
    name_atom atom;
    bool final = false;   ///< the end of a pattern
    bool to_end = false;  ///< ... which must be the name's end
  };
  std::vector<slot> slots_;
  std::vector<std::size_t> starts_;

  static name_atom literal(char c) {
    name_atom a;
    a.chars.set(static_cast<unsigned char>(c));
    return a;
  }
  /// The class an escape `\e` stands for, or none for a letter or digit re does not read.
  static std::optional<std::bitset<256>> escaped(char e) {
    std::bitset<256> set;
    auto add = [&](char lo, char hi) {
      for (int c = lo; c <= hi; ++c) set.set(static_cast<unsigned char>(c));
    };
    const char lower = static_cast<char>(e | 0x20);
    if (lower == 'd' || lower == 'w') add('0', '9');
    if (lower == 'w') add('a', 'z'), add('A', 'Z'), add('_', '_');
    if (lower == 's') add('\t', '\r'), add(' ', ' ');
    if (lower == 'd' || lower == 'w' || lower == 's') return e == lower ? set : ~set;
    const bool alnum = (e >= '0' && e <= '9') || (lower >= 'a' && lower <= 'z');
    if (alnum) return std::nullopt;
    set.set(static_cast<unsigned char>(e));
    return set;
  }
  /// The atom at key[i] (a literal, `.`, an escape or a class), moving i to its last character.
  template <class Refuse>
  static name_atom atom_at(const std::string& key, std::size_t& i, const Refuse& refuse) {
    name_atom a;
    auto escape_at = [&](std::size_t& j) {
      if (j + 1 == key.size()) refuse("ends with a lone backslash");
      const auto set = escaped(key[++j]);
      if (!set) refuse(std::string("the escape \\") + key[j] + " is not read");
      return *set;
    };
    if (key[i] == '.') {
      a.chars.set();
      a.chars.reset('\n');
    } else if (key[i] == '\\') {
      a.chars = escape_at(i);
    } else if (key[i] == '[') {
      std::size_t j = i + 1;
      const bool negated = j < key.size() && key[j] == '^';
      j += negated ? 1 : 0;
      for (const std::size_t open = j; j < key.size() && (key[j] != ']' || j == open); ++j) {
        if (key[j] == '\\') {
          a.chars |= escape_at(j);
        } else if (j + 2 < key.size() && key[j + 1] == '-' && key[j + 2] != ']') {
          for (int c = static_cast<unsigned char>(key[j]);
               c <= static_cast<unsigned char>(key[j + 2]); ++c)
            a.chars.set(static_cast<std::size_t>(c));
          j += 2;
        } else {
          a.chars.set(static_cast<unsigned char>(key[j]));
        }
      }
      if (j == key.size()) refuse("a character class [ without its ]");
      if (negated) a.chars.flip();
      i = j;
    } else {
      a = literal(key[i]);
    }
    return a;
  }
  static bool has(const state& s, std::size_t j) { return (s[j / 64] >> (j % 64)) & 1; }
  static void set(state& s, std::size_t j) { s[j / 64] |= std::uint64_t{1} << (j % 64); }
  /// Calls `visit(j)` for each pattern position set in `s`.
  template <class Visit>
  void for_each_position(const state& s, const Visit& visit) const {
    for (std::size_t w = 0; w < s.size(); ++w)
      for (std::uint64_t bits = s[w]; bits != 0; bits &= bits - 1) {
        const std::size_t j = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
        if (j < slots_.size()) visit(j);
      }
  }
  void close(state& s, std::size_t j) const {
    if (has(s, j)) return;
    set(s, j);
    if (slots_[j].final) {
      if (!slots_[j].to_end) set(s, slots_.size());
    } else if (slots_[j].atom.repeat != '1') {
      close(s, j + 1);
    }
  }
};

/// How many n in [0, limit) take `m` from `from`, through n's decimal digits, to a state `tail`
/// accepts: by digits (numbers of fewer digits than `limit` freely, then those of its length
/// below it), memoized by state, so the cost grows with the digits, not with `limit`.
template <class Tail>
std::int64_t count_below(const module_matcher& m, const module_matcher::state& from,
                         std::int64_t limit, const Tail& tail) {
  using state = module_matcher::state;
  std::map<std::pair<state, std::size_t>, std::int64_t> memo;
  auto strings = [&](auto& self, const state& s, std::size_t left) -> std::int64_t {
    if (left == 0) return tail(s) ? 1 : 0;
    if (const auto it = memo.find({s, left}); it != memo.end()) return it->second;
    std::int64_t n = 0;
    for (char d = '0'; d <= '9'; ++d) n += self(self, m.step(s, d), left - 1);
    return memo[{s, left}] = n;
  };
  if (limit <= 0) return 0;
  const std::string digits = std::to_string(limit);
  std::int64_t total = 0;
  for (std::size_t length = 1; length < digits.size(); ++length)
    for (char d = length == 1 ? '0' : '1'; d <= '9'; ++d)
      total += strings(strings, m.step(from, d), length - 1);
  state s = from;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    for (char d = i == 0 && digits.size() > 1 ? '1' : '0'; d < digits[i]; ++d)
      total += strings(strings, m.step(s, d), digits.size() - 1 - i);
    s = m.step(s, digits[i]);
  }
  return total;
}

/// Whether `m` in state `s` matches a module name ending in `rest`, whose "{expert}" stands for
/// each of `experts` routed experts: all of them or none (a list that picks some experts of a
/// layer is refused: vramfit keeps a layer's experts in one format).
inline bool accepts_rest(const module_matcher& m, const module_matcher::state& s,
                         std::string_view rest, std::int64_t experts, const std::string& where) {
  const std::size_t at = rest.find("{expert}");
  if (at == std::string_view::npos) return m.accepts(m.run(s, rest));
  const std::string_view after = rest.substr(at + 8);
  const std::int64_t n = count_below(m, m.run(s, rest.substr(0, at)), experts,
                                     [&](const auto& t) { return m.accepts(m.run(t, after)); });
  if (n != 0 && n != experts)
    raise(where + " keeps " + str(n) + " of the " + str(experts) +
          " routed experts of a layer; vramfit keeps a layer's experts in one format");
  return n == experts;
}

/// The layers of [lo, hi) in which `count` finds a match, as maximal ranges appended to `out`:
/// halves until a half is all or none, so the cost grows with the ranges, not the layers.
template <class Count>
void matched_ranges(const Count& count, std::int64_t lo, std::int64_t hi,
                    std::vector<std::pair<std::int64_t, std::int64_t>>& out) {
  const std::int64_t n = count(lo, hi);
  if (n == 0 || out.size() > decltype(quantization_exceptions::ranges)::capacity) return;
  if (n == hi - lo) {
    if (!out.empty() && out.back().second == lo)
      out.back().second = hi;
    else
      out.emplace_back(lo, hi);
    return;
  }
  const std::int64_t mid = lo + (hi - lo) / 2;
  matched_ranges(count, lo, mid, out);
  matched_ranges(count, mid, hi, out);
}

/// What the skip list `field` of `q` keeps unquantized in `config`'s model, of the modules layout
/// `w` converts (and the head, where a list given replaces the default that keeps it).
inline quantization_exceptions kept_modules(const nlohmann::json& config, const nlohmann::json& q,
                                            const char* field, const weight_layout& w,
                                            bool list_converts_head) {
  quantization_exceptions e;
  const auto list = q.find(field);
  if (list == q.end() || list->is_null()) return e;  // the default: the head, kept already
  const std::string where = std::string("config.json quantization_config: field '") + field + "'";
  // BitsAndBytesConfig.post_init: "llm_int8_skip_modules must be a list of strings".
  if (!list->is_array()) raise(where + " must be a list of module names, got " + shown(*list));
  module_matcher m;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& key = (*list)[i];
    if (!key.is_string())
      raise(where + " entry " + str(static_cast<std::int64_t>(i)) +
            " must be a module name (a string), got " + shown(key));
    m.add_regex(key.get<std::string>(), where);
    m.add_suffix(key.get<std::string>());
  }
  e.converts_head = list_converts_head;
  weight_layout converting = w;
  converting.exceptions.converts_head = list_converts_head;
  const model md = model_from_hf_config(config);
  const tensor_ledger ledger = tensors(md);
  e.model_parameters = parameters(ledger);
  for (std::size_t i = 0; i < ledger.size(); ++i) {
    const tensor_group& g = ledger[i];
    if (!takes_linear_format(converting, g)) continue;
    const std::uint64_t bit = std::uint64_t{1} << i;
    // The module: the tensor's name to its last '.' ("...q_proj.weight": "...q_proj"; gpt-oss's
    // "...mlp.experts.gate_up_proj[{expert}]": "...mlp.experts").
    std::string name = g.name.str();
    if (const std::size_t dot = name.rfind('.'); dot != std::string::npos) name.resize(dot);
    // transformers 5 packs a layer's routed experts into one module, "...mlp.experts"
    // (quantizers_utils.py is_packed_experts_module): that name is matched too.
    std::vector<std::string> names{name};
    if (const std::size_t packed = name.find(".{expert}"); packed != std::string::npos)
      names.push_back(name.substr(0, packed));
    const std::int64_t experts = md.moe.routed_experts;
    const std::size_t at = name.find("{layer}");
    if (g.layer_count == 0 || at == std::string::npos) {
      for (const std::string& n : names)
        if (accepts_rest(m, m.start(), n, experts, where)) e.outside_layers |= bit;
      continue;
    }
    const auto before = m.run(m.start(), std::string_view(name).substr(0, at));
    auto tail = [&](const auto& s) {
      for (const std::string& n : names)
        if (accepts_rest(m, s, std::string_view(n).substr(at + 7), experts, where)) return true;
      return false;
    };
    auto count = [&](std::int64_t lo, std::int64_t hi) {
      return count_below(m, before, hi, tail) - count_below(m, before, lo, tail);
    };
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    matched_ranges(count, g.first_layer, g.first_layer + g.layer_count, ranges);
    for (const auto& [lo, hi] : ranges) {
      kept_range* same = nullptr;
      for (kept_range& r : e.ranges)
        if (r.first_layer == lo && r.layer_count == hi - lo) same = &r;
      if (same == nullptr) {
        e.ranges.push_back({0, lo, hi - lo});
        same = &e.ranges[e.ranges.size() - 1];
      }
      same->groups |= bit;
    }
  }
  return e;
}
}  // namespace detail

/// The weight layout `config`'s quantization_config describes, or none when the checkpoint is
/// not quantized (transformers utils/quantization_config.py: GPTQConfig, AwqConfig,
/// BitsAndBytesConfig, FineGrainedFP8Config, Mxfp4Config and their fields read below), with the
/// modules its skip list keeps unquantized (detail::kept_modules).
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
  auto keeping = [&](weight_layout w, const char* field, bool list_converts_head) {
    w.exceptions = detail::kept_modules(config, q, field, w, list_converts_head);
    return w;
  };
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
    const weight_layout w = detail::named_layout(
        m.c_str(), f, fp16::value,
        {.act_order_index = m == "gptq" && detail::quantization_flag(q, "desc_act")});
    // GPTQConfig has no skip list (optimum converts the linears of the blocks); AwqHfQuantizer
    // adds its list to the defaults (quantizer_awq.py: add_default_skips=True): the head stays.
    return m == "awq" ? keeping(w, "modules_to_not_convert", false) : w;
  }
  if (m == "bitsandbytes") {
    if (detail::quantization_flag(q, "load_in_8bit") &&
        detail::quantization_flag(q, "load_in_4bit"))
      detail::raise(
          "config.json quantization_config: load_in_4bit and load_in_8bit are both true; "
          "transformers allows one");
    // Bnb4BitHfQuantizer, Bnb8BitHfQuantizer._process_model_before_weight_loading: the list given
    // replaces the default (get_modules_to_not_convert, add_default_skips=False), so a list
    // without lm_head converts the head too.
    if (detail::quantization_flag(q, "load_in_8bit"))
      return keeping(bnb_int8::value, "llm_int8_skip_modules", true);
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
    return keeping(is_fp4 ? (dq ? bnb_4bit<fp4_double_quant>::value : bnb_4bit<fp4>::value)
                          : (dq ? bnb_4bit<>::value : bnb_4bit<nf4>::value),
                   "llm_int8_skip_modules", true);
  }
  // FineGrainedFP8HfQuantizer: the list replaces the default, as bitsandbytes'; scales per block
  // or tensor: a few bytes.
  if (m == "fp8") return keeping(fp8_weights<>::value, "modules_to_not_convert", true);
  // Mxfp4HfQuantizer: replace_with_mxfp4_linear converts the experts only, never the head.
  if (m == "mxfp4") return keeping(mxfp4_experts::value, "modules_to_not_convert", false);
  detail::raise(
      "config.json quantization_config: field 'quant_method' = " + detail::shown(*method) +
      " is not one vramfit reads (gptq, awq, bitsandbytes, fp8, mxfp4); give --weights");
}

}  // namespace vramfit
