// SPDX-License-Identifier: MIT
// vramfit: the command-line face of the library. It evaluates the same constexpr formulas at run
// time, from a preset or a Hugging Face config.json. Bad input: one message on stderr, exit 2.
// "Does not fit": exit 1, only with --check.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "completion.hpp"
#include "infer_command.hpp"
#include "list_commands.hpp"
#include "load_command.hpp"
#include "min_gpus_command.hpp"
#include "params_command.hpp"
#include "plan_command.hpp"
#include "train_command.hpp"

using namespace vramfit;
using namespace vramfit::cli;

/// The whole tool; main() is a call of it, and the option-parsing fuzzer calls it too.
int vramfit_cli_main(int argc, char** argv) {
  CLI::App app{
      "vramfit: how much memory each GPU needs to train a large language model, and whether it "
      "fits.\n"
      "Every byte from the same constexpr formulas as the C++ library; sizes in GiB/MiB (2^30/2^20 "
      "B), or GB/MB with --units GB."};
  app.set_version_flag("--version", std::string("vramfit ") + vramfit::version);
  std::string units = "GiB";
  app.add_option("--units", units,
                 "GiB (2^30 B, the default) or GB (10^9 B): how tables, Markdown and SVG write "
                 "sizes; JSON gives bytes (before or after the subcommand)")
      ->check(CLI::IsMember({"GiB", "GB"}));
  app.fallthrough();  // `vramfit train --units GB` as well as `vramfit --units GB train`
  app.require_subcommand(1);
  train_options train;
  CLI::App* train_cmd = app.add_subcommand("train", "Memory per GPU of a training step");
  add_train_options(*train_cmd, train);
  train_options fewest;
  CLI::App* min_gpus_cmd = app.add_subcommand(
      "min-gpus", "The fewest GPUs a training configuration fits on (its data-parallel degree)");
  add_train_options(*min_gpus_cmd, fewest);
  train_options plan;
  plan_options space;
  CLI::App* plan_cmd = app.add_subcommand(
      "plan",
      "Search every layout of N GPUs (DP x TP x PP x CP x EP, sharding, recompute, micro-batch, "
      "virtual stages; offload if nothing else fits) and rank those that fit by estimated step "
      "time. Train options given fix their knob (--tp 8: only TP 8)");
  add_train_options(*plan_cmd, plan);
  std::vector<std::string> train_names;  // the train options, for the argv of each candidate
  for (const CLI::Option* o : plan_cmd->get_options()) train_names.push_back(long_name(*o));
  plan_cmd->add_option("--gpus", space.gpus, "GPUs every candidate uses")
      ->check(positive)
      ->capture_default_str();
  plan_cmd->add_option("--global-batch", space.global_batch,
                       "Sequences per optimizer step (default: one per GPU)");
  plan_cmd->add_option("--top", space.top, "How many layouts to show")->capture_default_str();
  plan_cmd->add_flag("--all", space.all,
                     "List every candidate with its verdict (evaluates all: slower)");
  plan_cmd
      ->add_option("--max-tp", space.max_tp,
                   "Largest tensor-parallel degree (default: the GPUs of a node)")
      ->check(positive);
  plan_cmd->add_option("--max-pp", space.max_pp, "Largest pipeline degree (default: the layers)")
      ->check(positive);
  plan_cmd->add_option("--max-cp", space.max_cp, "Largest context-parallel degree")
      ->check(positive);
  plan_cmd->add_flag("--no-offload", space.no_offload, "Never offload to the host");
  plan_cmd->add_option("--sharding", space.sharding,
                       "Sharding to search: deepspeed (default), megatron, fsdp or any");
  plan_cmd->add_option("--gpus-per-node", space.net.gpus_per_node, "GPUs per node")
      ->check(positive)
      ->capture_default_str();
  plan_cmd->add_option("--intra-bw", space.net.intra_node_gb_per_s,
                       "GB/s per GPU and direction within a node (default: the GPU's link)");
  plan_cmd
      ->add_option("--inter-bw", space.net.inter_node_gb_per_s,
                   "GB/s per GPU and direction between nodes")
      ->capture_default_str();
  plan_cmd
      ->add_option("--host-bw", space.net.host_gb_per_s, "GB/s per GPU to the host, for offload")
      ->capture_default_str();
  plan_cmd->add_option("--mfu", space.net.mfu, "Fraction of the peak FLOP/s the matmuls reach")
      ->capture_default_str();
  plan_cmd->add_option("--peak-tflops", space.net.peak_tflops,
                       "Dense 16-bit TFLOP/s per GPU (default: the GPU's datasheet figure)");
  load_options load;
  CLI::App* load_cmd = app.add_subcommand(
      "load", "Memory per GPU while a model is loaded or initialized, before its first step");
  add_load_options(*load_cmd, load);
  infer_options infer;
  CLI::App* infer_cmd =
      app.add_subcommand("infer", "Memory per GPU of inference: weights, KV cache, working memory");
  add_infer_options(*infer_cmd, infer);
  train_cmd->add_flag("--explain", train.explain,
                      "Instead of the estimate, what autograd saves for one layer, tensor by "
                      "tensor: its part, bits, elements and bytes (table, markdown or json)");
  // --params: N parameters without a model (train: their model states; infer: their weights).
  std::string params;
  for (CLI::App* cmd : {train_cmd, infer_cmd})
    cmd->add_option("--params", params,
                    "N parameters without a model, such as 7e9: their model states (train, with "
                    "--precision, --optimizer, --dp, --zero, --fsdp) or weights (infer, with "
                    "--weights); other options need a model");
  std::string list_format = "table";
  CLI::App* models_cmd = app.add_subcommand("models", "List the model presets");
  models_cmd->add_option("--format,-f", list_format, "table or json")
      ->check(CLI::IsMember({"table", "json"}));
  CLI::App* gpus_cmd = app.add_subcommand("gpus", "List the GPU presets and their capacities");
  gpus_cmd->add_option("--format,-f", list_format, "table or json")
      ->check(CLI::IsMember({"table", "json"}));
  CLI::App* frameworks_cmd = app.add_subcommand(
      "frameworks", "List the --framework presets: the defaults each sets, and their sources");
  frameworks_cmd->add_option("--format,-f", list_format, "table or json")
      ->check(CLI::IsMember({"table", "json"}));
  std::string shell;
  CLI::App* completion_cmd =
      app.add_subcommand("completion",
                         "A shell completion script, from this parser and its tables: "
                         "source <(vramfit completion bash), or zsh");
  completion_cmd->add_option("shell", shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  // Help and errors say "vramfit", not the path the tool was started from.
  char program_name[] = "vramfit";
  if (argc > 0) argv[0] = program_name;
  try {
    app.parse(argc, argv);
    size_prefixes = units == "GB" ? prefixes::decimal : prefixes::binary;
    if (train_cmd->parsed() && !params.empty()) return run_train_params(*train_cmd, train, params);
    if (infer_cmd->parsed() && !params.empty()) return run_infer_params(*infer_cmd, infer, params);
    if (train_cmd->parsed()) {
      apply_framework(*train_cmd, train);
      return run_train(train);
    }
    if (min_gpus_cmd->parsed()) {
      apply_framework(*min_gpus_cmd, fewest);
      return run_min_gpus(fewest);
    }
    if (load_cmd->parsed()) return run_load(load);
    if (infer_cmd->parsed()) {
      apply_framework(*infer_cmd, infer);
      return run_infer(infer);
    }
    if (plan_cmd->parsed()) {
      apply_framework(*plan_cmd, plan);
      return run_plan(*plan_cmd, train_names, plan, space);
    }
    if (models_cmd->parsed()) return run_models(list_format);
    if (gpus_cmd->parsed()) return run_gpus(list_format);
    if (frameworks_cmd->parsed()) return run_frameworks(list_format);
    if (completion_cmd->parsed()) {
      print_completion(std::cout, app, shell);
      return 0;
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "vramfit: " << e.what() << " (see vramfit --help)\n";
    return 2;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    std::cerr << (what.rfind("vramfit:", 0) == 0 ? what : "vramfit: " + what) << "\n";
    return 2;
  }
  return 0;
}

#ifndef VRAMFIT_CLI_NO_MAIN
int main(int argc, char** argv) {
  return vramfit_cli_main(argc, argv);
}
#endif
