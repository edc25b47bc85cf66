// SPDX-License-Identifier: MIT
// A launcher's own config file (DeepSpeed's JSON, torchtitan's TOML, torchtune's or Hugging Face's
// YAML) as one JSON document, and a reader of its keys that accounts for every one: each is
// translated into a vramfit option, known to change no memory, or listed as not modeled.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <vramfit/hf_config.hpp>

#if VRAMFIT_CLI_TOML
// toml++ 3.3 asserts on a table header that opens on a character no key starts with, which its
// parser then reports as an error (as its release builds do): its assertions are off here.
#define TOML_ASSERT(expr) static_cast<void>(0)
#include <toml++/toml.h>
#endif
#if VRAMFIT_CLI_YAML
#include <yaml-cpp/yaml.h>
#endif

#include "choices.hpp"
#include "input_checks.hpp"

namespace vramfit::cli {

/// One vramfit option a file sets: "--zero" "3", from the key "zero_optimization.stage".
struct file_option {
  std::string option, value, key;
};

/// A key the file sets that vramfit does not model, with its value and what it would change.
struct unmodeled_key {
  std::string key, value, why;
};

/// What a launcher's file says, in vramfit's words.
struct launcher_reading {
  std::string kind;    ///< "deepspeed", "torchtitan", ...
  std::string source;  ///< the kind and the file, as messages quote them: deepspeed 'ds.json'
  std::vector<file_option> options;
  std::vector<unmodeled_key> unmodeled;
  std::vector<unmodeled_key> overridden;  ///< options the command line gives, or the subcommand
                                          ///< decides: key, "--option value", why
  std::vector<std::string> no_effect;     ///< keys read that change no memory (a learning rate)
};

/// A JSON value as text, with bytes that are not UTF-8 replaced (nlohmann's dump throws on them).
inline std::string json_text(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace detail_launcher {

/// The deepest nesting and the most values a document may convert to (YAML's aliases repeat a
/// node wherever they point: a few lines can name billions).
inline constexpr int max_depth = max_config_depth;
inline constexpr std::size_t max_values = 100'000;

struct limits {
  const std::string& what;
  std::size_t values = 0;
  void count(int depth) {
    if (depth > max_depth)
      detail::raise(what + " nests deeper than " + std::to_string(max_depth) + " levels");
    if (++values > max_values)
      detail::raise(what + " holds more than " + std::to_string(max_values) +
                    " values (aliases repeated?): not a launcher's config file");
  }
};

#if VRAMFIT_CLI_TOML
inline nlohmann::json from_toml(const toml::node& node, limits& l, int depth) {
  l.count(depth);
  if (const toml::table* t = node.as_table()) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& [key, value] : *t)
      object[std::string(key.str())] = from_toml(value, l, depth + 1);
    return object;
  }
  if (const toml::array* a = node.as_array()) {
    nlohmann::json array = nlohmann::json::array();
    for (const toml::node& value : *a) array.push_back(from_toml(value, l, depth + 1));
    return array;
  }
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* i = node.as_integer()) return i->get();
  if (const auto* f = node.as_floating_point()) return f->get();
  if (const auto* b = node.as_boolean()) return b->get();
  std::ostringstream date;  // a date or time: as TOML writes it
  node.visit([&date](const auto& v) { date << v; });
  return date.str();
}
#endif

#if VRAMFIT_CLI_YAML
/// A plain (unquoted) YAML scalar as PyYAML's safe loader types it (YAML 1.1, which Hugging Face,
/// accelerate and OmegaConf read with): null, a boolean, an integer, a number, else text.
inline nlohmann::json yaml_scalar(const std::string& text) {
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL")
    return nullptr;
  for (const char* yes : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})
    if (text == yes) return true;
  for (const char* no : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"})
    if (text == no) return false;
  std::string digits;  // YAML 1.1 allows "_" between digits
  for (const char c : text)
    if (c != '_') digits += c;
  const bool numeric = digits.find_first_not_of("+-0123456789.eE") == std::string::npos &&
                       digits.find_first_of("0123456789") != std::string::npos;
  if (numeric) {
    std::size_t used = 0;
    try {
      if (digits.find_first_of(".eE") == std::string::npos) {
        const long long n = std::stoll(digits, &used);
        if (used == digits.size()) return n;
      }
      const double x = std::stod(digits, &used);
      if (used == digits.size()) return x;
    } catch (const std::logic_error&) {  // past int64 or double: kept as text
    }
  }
  if (text == ".inf" || text == "+.inf") return HUGE_VAL;
  if (text == "-.inf") return -HUGE_VAL;
  if (text == ".nan" || text == ".NaN") return std::nan("");
  return text;
}

inline nlohmann::json from_yaml(const YAML::Node& node, limits& l, int depth) {
  l.count(depth);
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json object = nlohmann::json::object();
      for (const auto& entry : node) {
        if (!entry.first.IsScalar())
          detail::raise(l.what + " has a key that is not text (line " +
                        std::to_string(entry.first.Mark().line + 1) + ")");
        object[entry.first.Scalar()] = from_yaml(entry.second, l, depth + 1);
      }
      return object;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json array = nlohmann::json::array();
      for (const auto& value : node) array.push_back(from_yaml(value, l, depth + 1));
      return array;
    }
    case YAML::NodeType::Scalar:  // a quoted scalar is text ("!" tag), a plain one is typed
      return node.Tag() == "!" ? nlohmann::json(node.Scalar()) : yaml_scalar(node.Scalar());
    default:
      return nullptr;
  }
}
#endif

/// The deepest bracket nesting of `text` outside quotes, checked before a recursive parser sees
/// it (YAML's and TOML's flow collections).
inline void check_brackets(std::string_view text, const std::string& what) {
  int depth = 0;
  char quote = 0;
  for (const char c : text) {
    if (quote) {
      if (c == quote || c == '\n') quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#') {
      quote = '\n';  // a comment, to the end of its line
    } else if ((c == '[' || c == '{') && ++depth > max_depth) {
      detail::raise(what + " nests deeper than " + std::to_string(max_depth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

/// TOML 1.0 allows bytes past ASCII in strings and comments only. toml++ 3.3 reaches an
/// unreachable point on some of them elsewhere (unicode_autogenerated.h), so they are refused
/// before it reads the text.
inline void check_toml_ascii(std::string_view text, const std::string& what) {
  std::size_t line = 1;
  std::string_view quote;  // the open string's delimiter: one or three quotes
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') ++line;
    if (!quote.empty()) {
      if (c == '\\' && quote[0] == '"') {
        ++i;  // an escaped character, in a basic string only
      } else if (text.substr(i).starts_with(quote)) {
        i += quote.size() - 1;
        quote = {};
      } else if (c == '\n' && quote.size() == 1) {
        quote = {};  // a one-line string ends with its line; toml++ says it is unterminated
      }
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;  // a comment: any byte
    } else if (c == '"' || c == '\'') {
      const bool triple = text.substr(i).starts_with(std::string(3, c));
      quote = text.substr(i, triple ? 3 : 1);
      i += quote.size() - 1;
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      detail::raise(what + " is not valid TOML: line " + std::to_string(line) +
                    ": a character past ASCII outside a string or comment");
    }
  }
}

}  // namespace detail_launcher

/// The document `text`, in the format `format` ("json", "toml" or "yaml"; "yaml" also takes
/// JSON, which is YAML). Refuses what config.json refuses: 64 levels, not UTF-8.
inline nlohmann::json parse_launcher_document(const std::string& text, std::string_view format,
                                              const std::string& what) {
  if (format == "json") return detail::parse_config(text, what);
  if (text.starts_with("\xFF\xFE") || text.starts_with("\xFE\xFF") ||
      text.find('\0') != std::string::npos)
    detail::raise(what + " is not UTF-8 (UTF-16 or UTF-32?): save it as UTF-8");
  detail_launcher::check_brackets(text, what);
  [[maybe_unused]] detail_launcher::limits limits{what};  // unused without TOML and YAML
#if VRAMFIT_CLI_TOML
  if (format == "toml") {
    try {
      detail_launcher::check_toml_ascii(text, what);
      return detail_launcher::from_toml(toml::parse(text), limits, 0);
    } catch (const toml::parse_error& e) {
      detail::raise(what + " is not valid TOML: line " + std::to_string(e.source().begin.line) +
                    ", column " + std::to_string(e.source().begin.column) + ": " +
                    std::string(e.description()));
    }
  }
#endif
#if VRAMFIT_CLI_YAML
  if (format == "yaml") {
    try {
      return detail_launcher::from_yaml(YAML::Load(text), limits, 0);
    } catch (const YAML::Exception& e) {
      detail::raise(what + " is not valid YAML: line " + std::to_string(e.mark.line + 1) +
                    ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
    }
  }
#endif
  detail::raise("this build of vramfit reads no " + std::string(format) +
                " (built without its parser): " + what + " cannot be read");
}

/// The document in the file at `path` (parse_launcher_document's rules, and at most 16 MiB).
inline nlohmann::json read_launcher_document(const std::filesystem::path& path,
                                             std::string_view format, const std::string& what) {
  return parse_launcher_document(detail::read_config_text(path, what), format, what);
}

/// Reads a launcher's document key by key (dotted paths such as "zero_optimization.stage"), and
/// at the end lists every key it did not read as not modeled: none is dropped unseen.
class launcher_keys {
 public:
  /// `reading.source` names the document in messages ("deepspeed 'ds.json'"); a file of Hugging
  /// Face's DeepSpeed integration may say "auto" where the Trainer fills a value in (`auto_ok`).
  launcher_keys(nlohmann::json document, launcher_reading reading, bool auto_ok = false)
      : document_(std::move(document)), reading_(std::move(reading)), auto_ok_(auto_ok) {
    if (!document_.is_object())
      refuse("", "must hold an object of keys, got " + detail::shown(document_));
  }

  /// The whole document, for a reader that checks its top-level keys (marks nothing read).
  [[nodiscard]] const nlohmann::json& document() const { return document_; }

  /// The value at `key`, or nullptr when absent or null; it and every key below it count as read.
  const nlohmann::json* find(std::string_view key) {
    read_.emplace_back(key);
    const nlohmann::json* v = value_at(key);
    if (v && auto_ok_ && v->is_string() && v->get_ref<const std::string&>() == "auto") {
      unmodeled(key,
                "the Hugging Face Trainer fills it in: vramfit takes the command line's "
                "value or its default");
      return nullptr;
    }
    return v;
  }

  /// Whether `key` says "auto" in a file that allows it (the value is not read by this).
  [[nodiscard]] bool is_auto(std::string_view key) const {
    const nlohmann::json* v = value_at(key);
    return auto_ok_ && v && v->is_string() && v->get_ref<const std::string&>() == "auto";
  }

  /// The integer at `key` from `least` to `most` (a whole number written as 5e8 too).
  std::optional<std::int64_t> integer(std::string_view key, std::int64_t least, std::int64_t most) {
    const nlohmann::json* v = find(key);
    if (!v) return std::nullopt;
    std::optional<std::int64_t> n;
    if (v->is_number_unsigned()) {
      if (v->get<std::uint64_t>() <= 0x7fff'ffff'ffff'ffffu) n = v->get<std::int64_t>();
    } else if (v->is_number_integer()) {
      n = v->get<std::int64_t>();
    } else if (v->is_number_float()) {
      const double x = v->get<double>();
      if (x == std::floor(x) && std::abs(x) < 0x1p62) n = static_cast<std::int64_t>(x);
    }
    if (!n || *n < least || *n > most)
      refuse(key, "must be an integer from " + std::to_string(least) + " to " +
                      std::to_string(most) + ", got " + detail::shown(*v));
    return n;
  }

  /// The boolean at `key`.
  std::optional<bool> boolean(std::string_view key) {
    const nlohmann::json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) refuse(key, "must be true or false, got " + detail::shown(*v));
    return v->get<bool>();
  }

  /// The text at `key`.
  std::optional<std::string> text(std::string_view key) {
    const nlohmann::json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) refuse(key, "must be text, got " + detail::shown(*v));
    return v->get<std::string>();
  }

  /// The text at `key`, one of `allowed`: `must be a, b or c, got "x"`, then `after` (a
  /// framework's own words) when it is not.
  std::optional<std::string> choice(std::string_view key,
                                    std::initializer_list<std::string_view> allowed,
                                    std::string_view after = "") {
    const nlohmann::json* v = find(key);
    if (!v) return std::nullopt;
    for (const std::string_view a : allowed)
      if (v->is_string() && v->get_ref<const std::string&>() == a) return std::string(a);
    std::string list;
    for (std::size_t i = 0; i < allowed.size(); ++i)
      list += (i == 0                    ? ""
               : i + 1 == allowed.size() ? " or "
                                         : ", ") +
              std::string(allowed.begin()[i]);
    refuse(key, "must be " + list + ", got " +
                    (v->is_string() ? "\"" + shown_value(v->get<std::string>()) + "\""
                                    : detail::shown(*v)) +
                    std::string(after));
  }

  /// The finite number at `key`.
  std::optional<double> number(std::string_view key) {
    const nlohmann::json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number() || !std::isfinite(v->get<double>()))
      refuse(key, "must be a number, got " + detail::shown(*v));
    return v->get<double>();
  }

  /// Sets vramfit's `option` to `value`, as `key` says (which counts as read).
  void set(std::string option, std::string value, std::string_view key) {
    read_.emplace_back(key);
    reading_.options.push_back({std::move(option), std::move(value), std::string(key)});
  }

  /// Marks `keys` (and all below them) read: present or not, they change no memory.
  void no_effect(std::initializer_list<std::string_view> keys) {
    for (const std::string_view key : keys) {
      read_.emplace_back(key);
      if (value_at(key)) reading_.no_effect.emplace_back(key);
    }
  }

  /// Lists `key`, when present, as not modeled, with what it would change.
  void unmodeled(std::string_view key, std::string why) {
    read_.emplace_back(key);
    if (const nlohmann::json* v = value_at(key))
      reading_.unmodeled.push_back({std::string(key), detail::shown(*v), std::move(why)});
  }

  /// Lists what the file leaves to the framework's default, where vramfit does not model it.
  void unmodeled_default(std::string what, std::string why) {
    reading_.unmodeled.push_back({std::move(what), "", std::move(why)});
  }

  /// Refuses the value of `key`: "<source>: <key> <rule>".
  [[noreturn]] void refuse(std::string_view key, const std::string& rule) const {
    detail::raise("--from " + reading_.source + ": " + (key.empty() ? "" : std::string(key) + " ") +
                  rule);
  }

  /// What the file says, with every key not read listed as not modeled.
  launcher_reading finish() && {
    list_unread(document_, "");
    return std::move(reading_);
  }

 private:
  const nlohmann::json* value_at(std::string_view key) const {
    const nlohmann::json* at = &document_;
    for (std::size_t begin = 0; begin <= key.size();) {
      const std::size_t end = std::min(key.find('.', begin), key.size());
      if (!at->is_object()) return nullptr;
      const auto it = at->find(std::string(key.substr(begin, end - begin)));
      if (it == at->end() || it->is_null()) return nullptr;
      at = &*it;
      begin = end + 1;
    }
    return at;
  }

  /// Whether `path` or a key above it was read.
  bool was_read(const std::string& path) const {
    for (const std::string& r : read_)
      if (path == r || (path.size() > r.size() && path.starts_with(r) && path[r.size()] == '.'))
        return true;
    return false;
  }

  void list_unread(const nlohmann::json& value, const std::string& path) {
    if (!path.empty() && was_read(path)) return;
    if (value.is_object() && !value.empty()) {
      for (const auto& [key, inner] : value.items())
        list_unread(inner, path.empty() ? key : path + "." + key);
    } else if (!value.is_null()) {
      reading_.unmodeled.push_back({path, detail::shown(value), "not known to vramfit"});
    }
  }

  nlohmann::json document_;
  launcher_reading reading_;
  bool auto_ok_;
  std::vector<std::string> read_;
};

}  // namespace vramfit::cli
