// SPDX-License-Identifier: MIT
// The whole tool as an object: its parser (every subcommand and option), and a run of it that
// writes to the streams it is given. main.cpp runs it on the process's streams; the Python module
// (examples/python) runs it in-process on strings and reads its parser for the keyword names.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "compare_command.hpp"
#include "completion.hpp"
#include "from_option.hpp"
#include "infer_command.hpp"
#include "input_checks.hpp"
#include "list_commands.hpp"
#include "load_command.hpp"
#include "min_gpus_command.hpp"
#include "params_command.hpp"
#include "plan_command.hpp"
#include "train_command.hpp"

namespace vramfit::cli {

/// The parser and the values it fills in. Its options point into it: it neither copies nor moves,
/// and it parses once. A subcommand's options are added when it is first needed: CLI11 checks each
/// new option's names against every earlier one of its subcommand, and building all ten
/// subcommands' options took 2.3 ms of every run (Release), where a run needs one.
class tool {
 public:
  tool();
  tool(const tool&) = delete;
  tool& operator=(const tool&) = delete;

  /// Runs the words after the program's name. Bad input: one line on `err` and 2; "does not fit"
  /// with --check: 1.
  int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

  /// The parser: the subcommands, and the options of those built so far.
  [[nodiscard]] const CLI::App& app() const { return app_; }
  /// Subcommand `name` with its options; std::invalid_argument when there is none (Python sees a
  /// ValueError).
  const CLI::App& subcommand(std::string_view name);

 private:
  /// Adds the options of `cmd`, once.
  void add_options(CLI::App* cmd);
  /// Adds the options of every subcommand that a word of `args` names (all of them for
  /// `completion`, which lists them): any subcommand the parse may enter has its options.
  void add_options_named(const std::vector<std::string>& args);
  int dispatch(std::ostream& out);
  /// dispatch with what --from's file said beside the answer: in its JSON, or before its text.
  int dispatch_from(std::ostream& out, std::ostream& err, const launcher_reading& reading);
  [[nodiscard]] output_format parsed_format() const;

  CLI::App app_{
      "vramfit: how much memory each GPU needs to train a large language model, and whether it "
      "fits.\n"
      "Every byte from the same constexpr formulas as the C++ library; sizes in GiB/MiB (2^30/2^20 "
      "B), or GB/MB with --units GB.",
      "vramfit"};  // help and errors say "vramfit", not the path the tool was started from
  prefixes units_ = prefixes::binary;
  train_options train_, fewest_, plan_, compared_;
  compare_options measured_;
  plan_options space_;
  std::vector<std::string> train_names_;  // the train options, for the argv of each candidate
  load_options load_;
  infer_options infer_;
  std::string params_;
  std::string from_;  // --from's kind: its words are expanded before the parse (from_option.hpp)
  output_format list_format_ = output_format::table;
  completion_shell shell_ = completion_shell::bash;
  CLI::App *train_cmd_, *min_gpus_cmd_, *plan_cmd_, *load_cmd_, *infer_cmd_, *compare_cmd_,
      *models_cmd_, *gpus_cmd_, *frameworks_cmd_, *completion_cmd_;
  std::vector<const CLI::App*> built_;  // the subcommands whose options are added
};

/// Keeps the train options that `cmd` always refuses out of its --help, completion and Python
/// keywords; still parsed, so that a refusal says why.
inline void hide_refused(CLI::App& cmd, std::initializer_list<const char*> names) {
  for (const char* name : names) cmd.get_option(name)->group("");
}

inline tool::tool() {
  app_.set_version_flag("--version", std::string("vramfit ") + vramfit::version);
  add_choice(app_, "--units", units_, unit_prefixes, "--units",
             "GiB (2^30 B, the default) or GB (10^9 B): how tables, Markdown and SVG write "
             "sizes; JSON gives bytes (before or after the subcommand)")
      ->type_name(choice_type(unit_prefixes));
  app_.fallthrough();  // `vramfit train --units GB` as well as `vramfit --units GB train`
  app_.require_subcommand(1);
  train_cmd_ = app_.add_subcommand("train", "Memory per GPU of a training step");
  min_gpus_cmd_ = app_.add_subcommand(
      "min-gpus", "The fewest GPUs a training configuration fits on (its data-parallel degree)");
  plan_cmd_ = app_.add_subcommand(
      "plan",
      "Search every layout of N GPUs (DP x TP x PP x CP x EP, sharding, recompute, micro-batch, "
      "virtual stages; offload if nothing else fits) and rank those that fit by estimated step "
      "time. Train options given fix their knob (--tp 8: only TP 8)");
  load_cmd_ = app_.add_subcommand(
      "load", "Memory per GPU while a model is loaded or initialized, before its first step");
  infer_cmd_ = app_.add_subcommand(
      "infer", "Memory per GPU of inference: weights, KV cache, working memory");
  compare_cmd_ = app_.add_subcommand(
      "compare",
      "A measured run (--snapshot or --log) beside the prediction for its configuration (train's "
      "options): the peaks, their phase, and where the allocated peak came from");
  models_cmd_ = app_.add_subcommand("models", "List the model presets");
  gpus_cmd_ = app_.add_subcommand("gpus", "List the GPU presets and their capacities");
  frameworks_cmd_ = app_.add_subcommand(
      "frameworks", "List the --framework presets: the defaults each sets, and their sources");
  completion_cmd_ =
      app_.add_subcommand("completion",
                          "A shell completion script, from this parser and its tables: "
                          "source <(vramfit completion bash), or zsh");
}

inline void tool::add_options(CLI::App* cmd) {
  if (std::find(built_.begin(), built_.end(), cmd) != built_.end()) return;
  built_.push_back(cmd);
  if (cmd == train_cmd_) {
    add_train_options(*cmd, train_);
    cmd->add_flag("--explain", train_.explain,
                  "Instead of the estimate, what autograd saves for one layer, tensor by "
                  "tensor: its part, bits, elements and bytes (table, markdown or json)");
    add_dtypes_option(*cmd, train_.dtypes, {"fp32", "amp-bf16", "bf16-fp32-master", "bf16"},
                      "One estimate per precision, a row each: --precision's names, "
                      "comma-separated or repeated; leave out --precision");
  } else if (cmd == min_gpus_cmd_) {
    add_train_options(*cmd, fewest_);
    hide_refused(*cmd, {"--dp", "--sweep", "--sweep-max", "--timeline"});
  } else if (cmd == plan_cmd_) {
    add_train_options(*cmd, plan_);
    for (const CLI::Option* o : cmd->get_options()) train_names_.push_back(long_name(*o));
    add_plan_options(*cmd, space_);
    hide_refused(*cmd, {"--reshard-after-forward", "--backward-prefetch", "--forward-prefetch",
                        "--limit-all-gathers", "--sweep", "--sweep-max", "--timeline"});
    for (const unsearchable_option& u : unsearchable_options) hide_refused(*cmd, {u.name});
  } else if (cmd == load_cmd_) {
    add_load_options(*cmd, load_);
  } else if (cmd == infer_cmd_) {
    add_infer_options(*cmd, infer_);
  } else if (cmd == compare_cmd_) {
    add_compare_options(*cmd, measured_);
    add_train_options(*cmd, compared_);
    hide_refused(*cmd, {"--sweep", "--sweep-max", "--timeline", "--check"});
  } else if (cmd == completion_cmd_) {
    add_choice(*cmd, "shell", shell_, completion_shells, "shell", "bash or zsh")
        ->required()
        ->type_name(choice_type(completion_shells));
  } else {  // models, gpus, frameworks
    add_choice(*cmd, "--format,-f", list_format_, list_formats, "--format", "table or json")
        ->type_name(choice_type(list_formats));
  }
  if (cmd == train_cmd_ || cmd == min_gpus_cmd_ || cmd == plan_cmd_ || cmd == infer_cmd_) {
    const std::string launchers = launcher_kind_list(cmd == infer_cmd_ ? "infer" : "train");
    if (!launchers.empty())  // read before the parse (from_option.hpp): here for --help and Python
      cmd->add_option("--from", from_,
                      "A launcher's own config as options (docs/from.md): " + launchers +
                          ". Options given win; keys not modeled are listed")
          ->type_name("KIND FILE");
  }
  // --params: N parameters without a model (train: their model states; infer: their weights).
  if (cmd == train_cmd_ || cmd == infer_cmd_)
    cmd->add_option("--params", params_,
                    "N parameters without a model, such as 7e9: their model states (train, with "
                    "--precision, --optimizer, --dp, --zero, --fsdp) or weights (infer, with "
                    "--weights); other options need a model");
}

inline void tool::add_options_named(const std::vector<std::string>& args) {
  for (CLI::App* sub : app_.get_subcommands({}))
    if (std::find(args.begin(), args.end(), sub->get_name()) != args.end()) {
      if (sub != completion_cmd_) {
        add_options(sub);
        continue;
      }
      for (CLI::App* each : app_.get_subcommands({})) add_options(each);
      return;
    }
}

inline const CLI::App& tool::subcommand(std::string_view name) {
  for (CLI::App* sub : app_.get_subcommands({}))
    if (sub->get_name() == name) {
      add_options(sub);
      return *sub;
    }
  throw std::invalid_argument("vramfit has no subcommand '" + std::string(name) + "'");
}

/// Refuses a first word that names no subcommand ("trian"), with the closest names: CLI11 would
/// say only that a subcommand is required.
inline void refuse_unknown_subcommand(const CLI::App& app, const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--units") {  // the one option before a subcommand that takes a value
      ++i;
      continue;
    }
    if (args[i].empty() || args[i].front() == '-') continue;
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (sub->get_name() == args[i]) return;
      names.push_back(sub->get_name());
    }
    detail::raise("unknown subcommand '" + shown_value(args[i]) + "'" +
                  did_you_mean(args[i], names) + " (vramfit --help lists them)");
  }
}

/// The words no option took, in the order given (CLI11's own message lists them last first): an
/// unknown option with the options closest to it, or a value that no option asked for.
inline std::string unexpected_words(const CLI::App& app) {
  const auto option_like = [](const std::string& w) {  // "-1" and "-.5" are values
    return w.size() > 1 && w.front() == '-' && (w[1] < '0' || w[1] > '9') && w[1] != '.';
  };
  const auto option_name = [](const std::string& w) { return w.substr(0, w.find('=')); };
  const std::vector<std::string> words = app.remaining(true);
  std::string command = "vramfit";
  for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
  if (words.empty()) return "unexpected arguments (see " + command + " --help)";
  const std::string& first = words.front();
  std::string message;
  if (option_like(first)) {
    const std::string name = option_name(first);  // "--micro-batchh=4"
    std::vector<std::string> names;
    const auto add = [&names](const CLI::App& cmd) {
      for (const CLI::Option* o : cmd.get_options()) {
        for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
        for (const std::string& s : o->get_snames()) names.push_back("-" + s);
      }
    };
    add(app);
    for (const CLI::App* sub : app.get_subcommands()) add(*sub);
    message = "unknown option '" + shown_value(name) + "'" + did_you_mean(name, names);
  } else {
    message = "unexpected argument '" + shown_value(first) + "': no option takes it";
  }
  std::string others;  // further unknown options; the values after them are theirs
  for (std::size_t i = 1; i < words.size(); ++i)
    if (option_like(words[i]))
      others += (others.empty() ? "" : ", ") + shown_value(option_name(words[i]));
  if (!others.empty()) message += " (unknown too: " + others + ")";
  return message + " (see " + command + " --help)";
}

inline int tool::run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    refuse_unknown_subcommand(app_, args);
    add_options_named(args);
    const std::optional<from_expansion> from = expand_from(app_, args);
    const std::vector<std::string>& words = from ? from->args : args;
    if (from) add_options_named(words);
    std::vector<std::string> reversed(words.rbegin(), words.rend());  // CLI11 takes them last first
    app_.parse(reversed);
    refuse_empty_values(app_);
    return from ? dispatch_from(out, err, from->reading) : dispatch(out);
  } catch (const CLI::CallForHelp& e) {
    return app_.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app_.exit(e, out, err);
  } catch (const CLI::CallForVersion& e) {
    return app_.exit(e, out, err);
  } catch (const CLI::ExtrasError&) {
    err << refusal_line(unexpected_words(app_)) << "\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    err << refusal_line(std::string(e.what()) + " (see vramfit --help)") << "\n";
    return 2;
  } catch (const std::exception& e) {
    err << refusal_line(e.what()) << "\n";
    return 2;
  }
}

inline output_format tool::parsed_format() const {
  return train_cmd_->parsed()      ? train_.format
         : min_gpus_cmd_->parsed() ? fewest_.format
         : plan_cmd_->parsed()     ? plan_.format
         : compare_cmd_->parsed()  ? compared_.format
                                   : infer_.format;
}

inline int tool::dispatch_from(std::ostream& out, std::ostream& err,
                               const launcher_reading& reading) {
  std::ostringstream answer;  // written whole once it succeeds: a refusal prints nothing else
  const int status = dispatch(answer);
  const output_format format = parsed_format();
  if (format == output_format::json) {
    nlohmann::json j = nlohmann::json::parse(answer.str());
    if (j.is_object()) {
      j["from"] = reading_json(reading);
      out << j.dump(2) << "\n";
      return status;
    }
  }
  // Before a table or Markdown; beside an SVG, or JSON that is not an object (--explain's
  // array), on the error stream so that the output keeps its shape.
  print_reading(format == output_format::table || format == output_format::markdown ? out : err,
                reading);
  out << answer.str();
  return status;
}

inline int tool::dispatch(std::ostream& out) {
  const size_style size{units_};
  if (train_cmd_->parsed() && !params_.empty())
    return run_train_params(out, *train_cmd_, train_, params_, size);
  if (infer_cmd_->parsed() && !params_.empty())
    return run_infer_params(out, *infer_cmd_, infer_, params_, size);
  if (train_cmd_->parsed()) {
    apply_framework(*train_cmd_, train_);
    return run_train(out, train_, size);
  }
  if (min_gpus_cmd_->parsed()) {
    apply_framework(*min_gpus_cmd_, fewest_);
    return run_min_gpus(out, fewest_, size);
  }
  if (load_cmd_->parsed()) return run_load(out, load_, size);
  if (infer_cmd_->parsed()) {
    apply_framework(*infer_cmd_, infer_);
    return run_infer(out, *infer_cmd_, infer_, size);
  }
  if (plan_cmd_->parsed()) {
    apply_framework(*plan_cmd_, plan_);
    return run_plan(out, *plan_cmd_, train_names_, plan_, space_, size);
  }
  if (compare_cmd_->parsed()) {
    apply_framework(*compare_cmd_, compared_);
    return run_compare(out, compared_, measured_, size);
  }
  if (models_cmd_->parsed()) return run_models(out, list_format_, size);
  if (gpus_cmd_->parsed()) return run_gpus(out, list_format_, size);
  if (frameworks_cmd_->parsed()) return run_frameworks(out, list_format_, size);
  if (completion_cmd_->parsed()) print_completion(out, app_, shell_, size);
  return 0;
}

}  // namespace vramfit::cli
