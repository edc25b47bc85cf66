// SPDX-License-Identifier: MIT
// --params N: the quick answer without a model, "N parameters in this precision": train gives the
// model states (weights, gradients, master weights, optimizer states), infer the weights. What
// needs a model's shape (activations, KV cache, buffers, parallel layouts) is refused, not
// guessed.
#pragma once

#include <CLI/CLI.hpp>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "../report.hpp"
#include "infer_command.hpp"
#include "render.hpp"
#include "sizes.hpp"
#include "train_setup.hpp"

namespace vramfit::cli {

/// --params: "7e9", "6.738415616e9" or "494032768".
inline std::int64_t parameter_count(const std::string& text) {
  return whole_count(text, "--params", "parameters", "7e9");
}

/// The count `n` that --params gives, after refusing every other option of `cmd` but those in
/// `allowed` and a format other than a table or JSON.
inline std::int64_t params_given(const CLI::App& cmd,
                                 std::initializer_list<std::string_view> allowed, const char* needs,
                                 const std::string& n, output_format format) {
  for (const CLI::Option* o : cmd.get_options()) {
    if (o->count() == 0) continue;
    const std::vector<std::string>& long_names = o->get_lnames();
    const std::string name = long_names.empty() ? o->get_name() : long_names[0];
    bool ok = name == "params" || name == "help";
    for (std::string_view a : allowed) ok = ok || name == a;
    if (name == "model") detail::raise("--params stands for a model: give --params or --model");
    if (!ok)
      detail::raise("--params counts " + std::string(needs) + " of N parameters; --" + name +
                    " needs a model (give --model instead)");
  }
  if (format != output_format::table && format != output_format::json)
    detail::raise(std::string("--params prints a table or json, got -f ") +
                  name_of(estimate_formats, format));
  return parameter_count(n);
}

/// One flat tensor of `n` parameters: per-parameter figures do not depend on its shape (but
/// factored optimizers', Adafactor's and Muon's, which are refused).
inline tensor_ledger flat_tensor(std::int64_t n) {
  tensor_ledger one{};
  tensor_group g{};
  g.name.parts[0] = "parameters";
  g.shape[0] = n;
  g.rank = 1;
  g.kind = tensor_kind::mlp;
  one.push_back(g);
  return one;
}

/// Prints `rows` (name, bytes) with their total against `device`: a table or JSON.
inline int print_params(std::ostream& out, output_format format, const std::string& title,
                        std::int64_t n, const std::vector<std::pair<std::string, bytes>>& rows,
                        const gpu& device, bool check, const size_style& size) {
  bytes total{};
  for (const auto& [name, b] : rows) total += b;
  const bool fits = total <= device.capacity;
  const double per_parameter = static_cast<double>(total.count) / static_cast<double>(n);
  if (format == output_format::json) {
    nlohmann::json memory;
    for (const auto& [name, b] : rows) memory[name] = b.count;
    memory["total"] = total.count;
    out << nlohmann::json{{"configuration", title},
                          {"params", n},
                          {"memory", memory},
                          {"bytes_per_parameter", per_parameter},
                          {"device", device_json(device)},
                          {"fits", fits}}
               .dump(2)
        << "\n";
  } else {
    out << title << "\n\n";
    for (const auto& [name, b] : rows) {
      char line[96];
      std::snprintf(line, sizeof line, "  %-18s %14s\n", name.c_str(), size(b).c_str());
      out << line;
    }
    char line[96];
    std::snprintf(line, sizeof line, "  %-18s %14s  (%.4g B per parameter)\n", "total",
                  size(total).c_str(), per_parameter);
    out << line << "\n  " << device.name << ": " << size(device.capacity) << " -> "
        << fit_verdict(total, device.capacity, size)
        << "\n  Nothing else is counted: no activations, buffers or runtime overheads.\n";
  }
  return check && !fits ? 1 : 0;
}

/// `vramfit train --params N`: the model states of N trained parameters, sharded as --dp,
/// --zero and --fsdp say.
inline int run_train_params(std::ostream& out, const CLI::App& cmd, const train_options& o,
                            const std::string& n, const size_style& size) {
  const std::int64_t count = params_given(
      cmd,
      {"precision", "grad-dtype", "optimizer", "optimizer-impl", "amsgrad", "momentum", "centered",
       "dp", "zero", "zero-impl", "fsdp", "fsdp-version", "gpu", "format", "check"},
      "the model states", n, o.format);
  reject_inapplicable(cmd, o);  // --zero-impl without --zero, --fsdp-version without --fsdp
  // The layout and policies as for any model; the states are those of the flat tensor.
  const model& stand_in = models::llama_3_8b::value;
  const training_plan_value plan = build_plan(for_model(o, stand_in), stand_in);
  const training& t = plan.setup;
  if (t.optimizer.kind == optimizer_kind::adafactor || t.optimizer.kind == optimizer_kind::muon)
    detail::raise(std::string(t.optimizer.name) +
                  "'s states depend on the shapes of the weight matrices: give --model");
  const memory_ledger l = model_states(t, flat_tensor(count), 0);
  std::string title = "Model states of " + report::grouped(count) + " parameters | " +
                      t.precision.name + " | " + t.optimizer.name;
  if (t.layout.data > 1) title += " | data " + std::to_string(t.layout.data);
  std::vector<std::pair<std::string, bytes>> rows;
  for (component c : {component::weights, component::gradients, component::master_weights,
                      component::optimizer_states})
    if (total(l, c) > bytes{}) rows.emplace_back(to_string(c), total(l, c));
  return print_params(out, o.format, title, count, rows, gpu_named(o.gpu), o.check, size);
}

/// `vramfit infer --params N`: N weights in the --weights layout.
inline int run_infer_params(std::ostream& out, const CLI::App& cmd, const infer_options& o,
                            const std::string& n, const size_style& size) {
  const std::int64_t count =
      params_given(cmd, {"weights", "gpu", "format", "check"}, "the weights", n, o.format);
  const weight_layout w = weights_for(o.weights, {models::llama_3_8b::value, std::nullopt});
  const std::string title = "Weights of " + report::grouped(count) + " parameters | " + w.name;
  return print_params(out, o.format, title, count, {{"weights", storage_bytes(w.linear, count)}},
                      gpu_named(o.gpu), o.check, size);
}

}  // namespace vramfit::cli
