// SPDX-License-Identifier: MIT
// --from KIND FILE: a launcher's own config file as the words a user would have typed. The words
// go before the command line's, and an option the command line gives drops the file's: explicit
// flags override the file, and the file overrides its framework's defaults.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ecosystem_aliases.hpp"
#include "from_deepspeed.hpp"
#include "from_hf_trainer.hpp"
#include "from_torchtitan.hpp"
#include "from_torchtune.hpp"
#include "from_vllm.hpp"
#include "inputs.hpp"
#include "launcher_file.hpp"
#include "plan_space.hpp"
#include "suggest.hpp"

namespace vramfit::cli {

/// A kind of file --from reads: its framework, the subcommands it serves, and its format.
struct launcher_kind {
  const char* name;
  const char* framework;   ///< the --framework whose defaults fill in the rest
  const char* subcommand;  ///< "train" (also min-gpus and plan) or "infer"
  const char* format;      ///< "json", "toml", "yaml" (which reads JSON too) or "arguments"
  const char* example;     ///< what follows the kind in --help: "ds_config.json"
  void (*translate)(launcher_keys&);
  bool auto_ok = false;  ///< "auto" values allowed (Hugging Face's DeepSpeed integration)
  /// A command line's words (after `--`, last on vramfit's line) as a document, for "arguments".
  nlohmann::json (*read_arguments)(const std::vector<std::string>& words,
                                   const std::string& what) = nullptr;
};

inline constexpr launcher_kind launcher_kinds[] = {
    {"deepspeed", "deepspeed", "train", "json", "ds_config.json", translate_deepspeed, true},
    {"torchtitan", "torchtitan", "train", "toml", "job.toml", translate_torchtitan},
    {"torchtune", "torchtune", "train", "yaml", "recipe.yaml", translate_torchtune},
    {"hf-trainer", "hf-trainer", "train", "yaml", "args.yaml", translate_hf_trainer},
    {"accelerate", "hf-trainer", "train", "yaml", "accelerate.yaml", translate_accelerate},
    {"vllm", "vllm", "infer", "arguments", "-- MODEL --max-model-len N ...", translate_vllm, false,
     read_vllm_arguments},
};

/// The kinds for `subcommand`'s --help: "deepspeed ds_config.json, ...".
inline std::string launcher_kind_list(std::string_view subcommand) {
  std::string list;
  for (const launcher_kind& k : launcher_kinds)
    if (std::string_view(k.subcommand) == subcommand)
      list += (list.empty() ? "" : "; ") + std::string(k.name) + " " + k.example;
  return list;
}

/// The kind --from names, for `subcommand`.
inline const launcher_kind& launcher_kind_named(const std::string& name,
                                                std::string_view subcommand) {
  std::vector<std::string> known;
  for (const launcher_kind& k : launcher_kinds) {
    known.emplace_back(k.name);
    if (!same_name(name, k.name)) continue;
    const bool trains = subcommand == "train" || subcommand == "min-gpus" || subcommand == "plan";
    if (std::string_view(k.subcommand) == (trains ? "train" : subcommand)) return k;
    detail::raise(
        std::string("--from ") + k.name + " applies to vramfit " +
        (std::string_view(k.subcommand) == "train" ? "train, min-gpus and plan" : k.subcommand) +
        ", not " + std::string(subcommand));
  }
  std::string list = did_you_mean(name, known);
  if (list.empty())
    for (const std::string& k : known) list += (list.empty() ? "; known: " : ", ") + k;
  detail::raise("unknown --from '" + shown_value(name) + "'" + list);
}

/// Options a subcommand refuses that a file may set, with why the file's value is left out.
inline std::string_view dropped_by(std::string_view subcommand, std::string_view option) {
  if (subcommand == "min-gpus" && option == "--dp")
    return "min-gpus searches the data-parallel degree";
  if (subcommand == "plan") {
    if (option == "--dp" || option == "--grad-accum")
      return "plan searches it (give --gpus and --global-batch)";
    if (option == "--reshard-after-forward")
      return "plan searches FSDP with reshard_after_forward=True";
    if (option == "--backward-prefetch" || option == "--forward-prefetch" ||
        option == "--limit-all-gathers")
      return "plan searches FSDP1 with its defaults (BACKWARD_PRE, no forward prefetch, the rate "
             "limiter)";
    for (const unsearchable_option& u : unsearchable_options)
      if (option == u.name) return u.why;
  }
  return {};
}

/// The command line with --from's file in it, and what the file said.
struct from_expansion {
  std::vector<std::string> args;
  launcher_reading reading;
};

/// The option of `cmd` that the word `word` names ("--zero=3", "-b4"), if any; for a converting
/// alias, the option it sets.
inline const CLI::Option* option_in(const CLI::App& cmd, const std::string& word) {
  if (word.size() < 2 || word.front() != '-' || word == "--") return nullptr;
  const std::string name = word[1] == '-' ? word.substr(0, word.find('=')) : word.substr(0, 2);
  return real_option(cmd, cmd.get_option_no_throw(name));
}

/// `args` (the words after "vramfit") with --from's file expanded in place; nothing when no
/// --from is given.
inline std::optional<from_expansion> expand_from(const CLI::App& app,
                                                 const std::vector<std::string>& args) {
  std::size_t at = 0;  // the subcommand
  while (at < args.size() && (args[at].empty() || args[at].front() == '-'))
    at += args[at] == "--units" ? 2 : 1;
  if (at >= args.size()) return std::nullopt;
  const CLI::App* cmd = nullptr;
  for (const CLI::App* sub : app.get_subcommands({}))
    if (sub->get_name() == args[at]) cmd = sub;
  if (!cmd) return std::nullopt;
  std::size_t from = args.size(), end = args.size();  // --from's words: [from, end)
  for (std::size_t i = at + 1; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] != "--from" && !args[i].starts_with("--from=")) continue;
    if (from != args.size()) detail::raise("--from is given twice: give one launcher's file");
    from = i;
  }
  if (from == args.size()) return std::nullopt;
  const bool joined = args[from] != "--from";  // --from=deepspeed
  const std::size_t kind_at = joined ? from : from + 1;
  if (kind_at >= args.size())
    detail::raise("--from needs a kind and a file, such as --from deepspeed ds_config.json");
  const std::string kind_name = joined ? args[from].substr(7) : args[kind_at];
  const launcher_kind& kind = launcher_kind_named(kind_name, cmd->get_name());
  const std::string usage = std::string("--from ") + kind.name + " " + kind.example;
  nlohmann::json document;
  std::string source;
  if (std::string_view(kind.format) == "arguments") {  // the rest of the line, after --
    if (kind_at + 1 >= args.size() || args[kind_at + 1] != "--")
      detail::raise(usage + ": its arguments follow --, last on the line");
    end = args.size();
    source = std::string(kind.name) + " arguments";
    document = kind.read_arguments(
        {args.begin() + static_cast<std::ptrdiff_t>(kind_at) + 2, args.end()}, "--from " + source);
  } else {
    if (kind_at + 1 >= args.size() || args[kind_at + 1].empty())
      detail::raise("--from " + std::string(kind.name) + " needs a file: " + usage);
    end = kind_at + 2;
    source = std::string(kind.name) + " " + detail::quoted_path(args[kind_at + 1]);
    document = read_launcher_document(args[kind_at + 1], kind.format, "--from " + source);
  }
  launcher_keys keys(std::move(document), launcher_reading{kind.name, source, {}, {}, {}, {}},
                     kind.auto_ok);
  kind.translate(keys);
  from_expansion x{{}, std::move(keys).finish()};

  std::set<const CLI::Option*> given;  // the command line's own options win
  for (std::size_t i = at + 1; i < args.size() && args[i] != "--"; ++i)
    if (i < from || i >= end)
      if (const CLI::Option* o = option_in(*cmd, args[i])) given.insert(o);
  x.args.assign(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(from));
  x.reading.options.insert(x.reading.options.begin(),
                           {"--framework", kind.framework, std::string("--from ") + kind.name});
  std::vector<file_option> kept;
  for (file_option& o : x.reading.options) {
    const CLI::Option* option = cmd->get_option_no_throw(o.option);
    const std::string_view dropped = dropped_by(cmd->get_name(), o.option);
    if (!dropped.empty() || given.count(option)) {
      x.reading.overridden.push_back(
          {o.key, o.option + " " + o.value,
           dropped.empty() ? "the command line gives " + o.option : std::string(dropped)});
      continue;
    }
    if (!option) detail::raise("vramfit " + cmd->get_name() + " has no option " + o.option);
    x.args.push_back(o.option + "=" + o.value);
    kept.push_back(std::move(o));
  }
  x.reading.options = std::move(kept);
  x.args.insert(x.args.end(), args.begin() + static_cast<std::ptrdiff_t>(end), args.end());
  return x;
}

/// What the file said, as JSON: the options it set, those the command line overrode, and the
/// keys vramfit does not model.
inline nlohmann::json reading_json(const launcher_reading& r) {
  nlohmann::json options = nlohmann::json::array(), overridden = nlohmann::json::array(),
                 unmodeled = nlohmann::json::array(), no_effect = nlohmann::json::array();
  for (const file_option& o : r.options)
    options.push_back(
        {{"option", o.option}, {"value", printable(o.value)}, {"key", printable(o.key)}});
  for (const unmodeled_key& k : r.overridden)
    overridden.push_back(
        {{"key", printable(k.key)}, {"option", printable(k.value)}, {"why", k.why}});
  for (const unmodeled_key& k : r.unmodeled)
    unmodeled.push_back({{"key", printable(k.key)}, {"value", printable(k.value)}, {"why", k.why}});
  for (const std::string& key : r.no_effect) no_effect.push_back(printable(key));
  return {{"kind", r.kind},           {"source", printable(r.source)}, {"options", options},
          {"overridden", overridden}, {"not_modeled", unmodeled},      {"no_effect", no_effect}};
}

/// The same as lines of text, before a table or Markdown.
inline void print_reading(std::ostream& out, const launcher_reading& r) {
  out << "From " << printable(r.source) << ":";
  for (const file_option& o : r.options)
    out << " " << o.option << (o.value == "true" ? "" : " " + printable(o.value));
  out << "\n";
  for (const unmodeled_key& k : r.overridden)
    out << "  not taken: " << printable(k.key) << " (" << printable(k.value) << "): " << k.why
        << "\n";
  for (const unmodeled_key& k : r.unmodeled)
    out << "  not modeled: " << printable(k.key)
        << (k.value.empty() ? "" : " = " + printable(k.value)) << ": " << k.why << "\n";
  out << "\n";
}

}  // namespace vramfit::cli
