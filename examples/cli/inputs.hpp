// SPDX-License-Identifier: MIT
// What every subcommand reads the same way: a model, a GPU, a framework's defaults, the output
// formats and positive integers.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vramfit/hf_config.hpp>
#include <vramfit/hf_quantization.hpp>
#include <vramfit/vramfit.hpp>

#include "choices.hpp"
#include "frameworks.hpp"
#include "hf_cache.hpp"
#include "input_checks.hpp"

namespace vramfit::cli {

/// Whether `name` is a file or folder rather than a preset: it has a slash, ends in .json, or
/// exists.
inline bool is_path(const std::string& name) {
  std::error_code ec;
  return name.find('/') != std::string::npos ||
         (name.size() > 5 && name.substr(name.size() - 5) == ".json") ||
         std::filesystem::exists(name, ec);
}

/// A model as --model names it, with the config.json it was read from (none for a preset).
struct named_model {
  vramfit::model value;
  std::optional<nlohmann::json> config;
};

/// The name of a config.json given as text: the last part of its _name_or_path
/// ("meta-llama/Meta-Llama-3-8B": "Meta-Llama-3-8B"), else its model_type.
inline std::string config_text_name(const nlohmann::json& config) {
  for (const char* key : {"_name_or_path", "model_type"}) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (!it->is_string())
      detail::raise(std::string("config.json: field '") + key + "' must be a string, got " +
                    detail::shown(*it));
    std::string name = it->get<std::string>();
    while (!name.empty() && name.back() == '/') name.pop_back();
    name = name.substr(name.find_last_of('/') + 1);  // npos + 1 == 0: the whole name
    if (!name.empty()) return name;
  }
  return "config";
}

/// The message of a library error without its "vramfit: ", for a refusal that names the option
/// first.
inline std::string message_of(const vramfit::error& e) {
  const std::string_view what = e.what();
  return std::string(what.starts_with("vramfit: ") ? what.substr(9) : what);
}

/// A preset by its key or its name in any case ("Llama-3-8B"), a config.json file, a folder
/// holding one (a downloaded checkpoint), a config.json's text ("{...}": what the Python
/// module passes for a dict, so that no file is written), or a Hugging Face id in the cache.
inline named_model load_model(const std::string& name) {
  if (!name.empty() && name.front() == '{') {
    nlohmann::json config = detail::parse_config(name, "--model's config.json text");
    if (!config.is_object()) detail::raise("--model's config.json text is not a JSON object");
    const model m = model_from_hf_config(config, printable(config_text_name(config)));
    return {m, std::move(config)};
  }
  if (looks_like_hub_id(name)) {
    nlohmann::json config = read_hub_config(name);
    const model m = model_from_hf_config(config, printable(parse_hub_id(name).repo));
    return {m, std::move(config)};
  }
  if (is_path(name)) {
    nlohmann::json config;
    try {
      config = read_hf_config(name);
    } catch (const vramfit::error& e) {  // the file cannot be read: named as --model's
      detail::raise("--model " + message_of(e));
    }
    const model m = model_from_hf_config(config, printable(hf_model_name(name)));
    return {m, std::move(config)};
  }
  return {cli::lookup(
              presets, name, "--model", [](const preset& p) { return std::string_view(p.key); },
              [](const preset& p) { return std::string_view(p.value.name); },
              " (a preset; a config.json path also works)")
              .value,
          std::nullopt};
}

/// The weights as `given` (--weights), else as the model's config.json quantization_config
/// describes them, else bf16.
inline weight_layout weights_for(const std::optional<weight_layout>& given, const named_model& m) {
  if (given) return *given;
  if (m.config)
    if (const auto w = hf_weight_layout(*m.config)) return *w;
  return plain_weights<bf16>::value;
}

/// A GPU preset by its key or name in any case ("H100", "a100-80gb"), or a GPU given by its
/// capacity ("96GiB", "44GB").
inline gpu gpu_named(const std::string& key) {
  if (!key.empty() && key[0] >= '0' && key[0] <= '9') {
    constexpr std::size_t longest = sizeof(gpu::name) - sizeof("GPU of ");  // its name's room
    const std::string shown = "--gpu '" + shown_value(key) + "'";
    if (key.size() > longest)
      detail::raise(shown + " is longer than " + std::to_string(longest) +
                    " characters: write a capacity such as 96GiB or 44GB");
    try {
      const gpu g = gpu_with_capacity(key);
      if (g.capacity > bytes{}) return g;
    } catch (const vramfit::error&) {  // the library's message names no option; overflow too
    }
    // "4090" is a card's number more often than a capacity: name the presets it is part of.
    std::vector<std::string> keys, holding;
    for (const gpu_preset& p : gpu_presets) {
      keys.emplace_back(p.key);
      if (std::string_view(p.key).find(key) != std::string_view::npos) holding.emplace_back(p.key);
    }
    std::string presets;
    for (const std::string& k : holding.empty() ? close_matches(key, keys) : holding)
      presets += (presets.empty() ? "" : " or ") + k;
    detail::raise(shown +
                  " is not a capacity of at most 8 EiB such as 96GiB, 44GB or 1.5TiB (units B, "
                  "KiB, MiB, GiB, TiB, PiB, KB, MB, GB, TB, PB) in whole bytes, nor a GPU preset" +
                  (presets.empty() ? std::string(" (vramfit gpus lists them)")
                                   : "; did you mean " + presets + "?"));
  }
  return cli::lookup(
             gpu_presets, key, "--gpu", [](const gpu_preset& p) { return std::string_view(p.key); },
             [](const gpu_preset& p) { return std::string_view(p.value.name); },
             ", or a capacity such as 96GiB or 44GB")
      .value;
}

/// The largest count an option takes (2^30): far past any real batch, sequence, degree or rank,
/// and small enough that the formulas' products of a few of them stay within int64.
inline constexpr std::int64_t largest_count = std::int64_t{1} << 30;

/// A validator of integers from `least` to largest_count, named as such in the error.
inline CLI::Validator count_from(std::int64_t least, const char* name) {
  return CLI::Validator(
      [least](std::string& value) -> std::string {
        try {
          std::size_t used = 0;
          const long long n = std::stoll(value, &used);
          if (n >= least && n <= largest_count && used == value.size()) return {};
        } catch (const std::logic_error&) {
        }
        return "must be an integer from " + std::to_string(least) + " to " +
               std::to_string(largest_count) + ", got " + value;
      },
      name);
}

/// An option that takes a positive integer (at most largest_count).
inline const CLI::Validator positive = count_from(1, "POSITIVE");
/// An option that takes a count of 0 or more (at most largest_count).
inline const CLI::Validator non_negative = count_from(0, "NONNEGATIVE");

/// Registers option `name`, whose text is one of `table`'s names, as its value in `value` (a
/// Value, or an optional one left unset unless given): looked up once, as the command line is
/// parsed, in any case or by a unique beginning, or as one of `aliases` (choose). Its captured
/// default is `value`'s name.
template <class Value, std::size_t N, class Stored>
CLI::Option* add_choice(CLI::App& cmd, const std::string& name, Stored& value,
                        const named<Value> (&table)[N], const char* what, const std::string& help,
                        alias_list aliases = {}) {
  const std::string option = name.substr(0, name.find(','));  // "--format,-f": "--format"
  const auto parse = [&value, &table, what, option, aliases](const CLI::results_t& words) {
    try {
      value = cli::choose(table, words.front(), what, aliases);
    } catch (const vramfit::error& e) {  // named as the user wrote it, unless it already is
      const std::string message = message_of(e);
      if (message.find(option) != std::string::npos) throw;
      detail::raise(option + ": " + message);
    }
    return true;
  };
  std::function<std::string()> default_name;  // an optional value has none
  if constexpr (std::is_same_v<Stored, Value>)
    default_name = [&value, &table] { return std::string(name_of(table, value)); };
  return cmd.add_option(name, parse, help, false, default_name)
      ->type_name("TEXT")
      ->run_callback_for_default();  // a --framework default goes through it too
}

/// The formats of one estimate (train and infer).
inline void add_estimate_format(CLI::App& cmd, output_format& format) {
  add_choice(cmd, "--format,-f", format, estimate_formats, "--format",
             "table, markdown, json or svg")
      ->type_name(choice_type(estimate_formats))
      ->capture_default_str();
}

/// --metric, which decides the verdict, the largest micro-batch, sequence, batch and context.
inline void add_metric_option(CLI::App& cmd, memory_metric& metric) {
  add_choice(cmd, "--metric", metric, memory_metrics, "--metric",
             "What is compared with the GPU's memory: " + choice_list(memory_metrics))
      ->type_name(choice_type(memory_metrics))
      ->capture_default_str();
}

/// The framework `name` names, for `subcommand`.
inline const cli::framework& framework_named(const std::string& name, std::string_view subcommand) {
  std::string known;
  for (const cli::framework& f : cli::frameworks) {
    if (cli::same_name(name, f.name)) {
      const bool trains = subcommand == "plan" || subcommand == "min-gpus";  // train's options
      if (subcommand == f.subcommand || (trains && std::string_view(f.subcommand) == "train"))
        return f;
      detail::raise(std::string("--framework ") + f.name + " applies to vramfit " + f.subcommand +
                    ", not " + std::string(subcommand));
    }
    known += (known.empty() ? "" : ", ") + std::string(f.name);
  }
  detail::raise("unknown --framework '" + shown_value(name) + "'; known: " + known);
}

/// Fills in from `f` each option the command line left out, where its recipe `applies`: its
/// text read by the option's own parser, as if given (but not counted as given).
template <class Applies>
inline void apply_framework(const cli::framework& f, CLI::App& cmd, Applies&& applies) {
  for (const cli::framework_default& d : f.defaults) {
    if (!applies(d.recipe)) continue;  // an option of another subcommand, or another recipe's
    CLI::Option* option = cmd.get_option(d.option);
    if (option->count() == 0) option->default_val(std::string(d.value));
  }
}

/// The first long name of an option ("--micro-batch").
inline std::string long_name(const CLI::Option& o) {
  return o.get_lnames().empty() ? o.get_name() : "--" + o.get_lnames().front();
}

}  // namespace vramfit::cli
