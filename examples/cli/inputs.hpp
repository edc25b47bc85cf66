// SPDX-License-Identifier: MIT
// What every subcommand reads the same way: a model, a GPU, a framework's defaults, the output
// formats and positive integers.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <string_view>
#include <vramfit/hf_config.hpp>
#include <vramfit/vramfit.hpp>

#include "choices.hpp"
#include "frameworks.hpp"

namespace vramfit::cli {

/// A preset by its key or its name in any case ("Llama-3-8B"), or a config.json file.
inline model load_model(const std::string& name) {
  const bool path_like = name.find('/') != std::string::npos ||
                         (name.size() > 5 && name.substr(name.size() - 5) == ".json");
  if (path_like || std::filesystem::exists(name)) return load_hf_config(name);
  return cli::lookup(
             presets, name, "model", [](const preset& p) { return std::string_view(p.key); },
             [](const preset& p) { return std::string_view(p.value.name); },
             " (a preset; a config.json path also works)")
      .value;
}

/// A GPU preset by its key or name in any case ("H100", "a100-80gb"), or a GPU given by its
/// capacity ("96GiB", "44GB").
inline gpu gpu_named(const std::string& key) {
  if (!key.empty() && key[0] >= '0' && key[0] <= '9') return gpu_with_capacity(key);
  return cli::lookup(
             gpu_presets, key, "GPU", [](const gpu_preset& p) { return std::string_view(p.key); },
             [](const gpu_preset& p) { return std::string_view(p.value.name); },
             ", or a capacity such as 96GiB or 44GB")
      .value;
}

/// An option that takes a positive integer, named as such in the error.
inline const CLI::Validator positive(
    [](std::string& value) -> std::string {
      try {
        std::size_t used = 0;
        if (std::stoll(value, &used) > 0 && used == value.size()) return {};
      } catch (const std::logic_error&) {
      }
      return "must be a positive integer, got " + value;
    },
    "POSITIVE");

/// The formats of one estimate (train and infer).
inline void add_estimate_format(CLI::App& cmd, std::string& format) {
  cmd.add_option("--format,-f", format, "table, markdown, json or svg")
      ->check(CLI::IsMember({"table", "markdown", "json", "svg"}))
      ->capture_default_str();
}

/// The framework `name` names, for `subcommand`.
inline const cli::framework& framework_named(const std::string& name, std::string_view subcommand) {
  std::string known;
  for (const cli::framework& f : cli::frameworks) {
    if (cli::same_name(name, f.name)) {
      if (subcommand == f.subcommand ||
          (subcommand == "plan" && std::string_view(f.subcommand) == "train"))
        return f;
      detail::raise(std::string("--framework ") + f.name + " applies to vramfit " + f.subcommand +
                    ", not " + std::string(subcommand));
    }
    known += (known.empty() ? "" : ", ") + std::string(f.name);
  }
  detail::raise("unknown --framework '" + name.substr(0, 40) + "'; known: " + known);
}

/// Fills in from `f` each option the command line left out, through `set(option, value)`.
template <class Applies, class Set>
inline void apply_framework(const cli::framework& f, const CLI::App& cmd, Applies&& applies,
                            Set&& set) {
  for (const cli::framework_default& d : f.defaults)
    if (cmd.get_option(d.option)->count() == 0 && applies(d.recipe))
      set(std::string_view(d.option), std::string(d.value));
}

/// The first long name of an option ("--micro-batch").
inline std::string long_name(const CLI::Option& o) {
  return o.get_lnames().empty() ? o.get_name() : "--" + o.get_lnames().front();
}

}  // namespace vramfit::cli
