// SPDX-License-Identifier: MIT
// `vramfit models`, `gpus` and `frameworks`: the presets as tables or JSON.
#pragma once

#include <iterator>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vramfit/vramfit.hpp>

#include "frameworks.hpp"
#include "render.hpp"
#include "sizes.hpp"

namespace vramfit::cli {

/// A listing as JSON rows or as its table.
inline int print_list(std::ostream& out, output_format format, const nlohmann::json& rows,
                      const report::table& t) {
  if (format == output_format::json)
    out << rows.dump(2) << "\n";
  else
    out << t;
  return 0;
}

inline int run_models(std::ostream& out, output_format format, const size_style& size) {
  sizes_not_written(size, "models", "lists parameter counts, not sizes");
  nlohmann::json rows = nlohmann::json::array();
  report::table t({"preset", "name", "parameters", "active per token", "layers", "hidden"});
  for (const preset& p : presets) {
    const tensor_ledger l = tensors(p.value);
    rows.push_back({{"key", p.key},
                    {"name", p.value.name},
                    {"parameters", parameters(l)},
                    {"active_parameters", active_parameters(p.value, l)}});
    t.add({p.key, p.value.name, report::grouped(parameters(l)),
           report::grouped(active_parameters(p.value, l)), std::to_string(p.value.layers),
           std::to_string(p.value.hidden)});
  }
  return print_list(out, format, rows, t);
}

inline int run_gpus(std::ostream& out, output_format format, const size_style& size) {
  sizes_not_written(size, "gpus", "gives every capacity in GiB and in GB");
  nlohmann::json rows = nlohmann::json::array();
  report::table t({"preset", "name", "GiB", "GB", "bytes", "source"});
  for (const gpu_preset& g : gpu_presets) {
    rows.push_back({{"key", g.key},
                    {"name", g.value.name},
                    {"capacity", g.value.capacity.count},
                    {"source", g.value.source}});
    t.add({g.key, g.value.name, to_string(g.value.capacity, GiB), to_string(g.value.capacity, GB),
           report::grouped(g.value.capacity.count), g.value.source});
  }
  return print_list(out, format, rows, t);
}

inline int run_frameworks(std::ostream& out, output_format format, const size_style& size) {
  sizes_not_written(size, "frameworks", "lists option defaults, not sizes");
  nlohmann::json rows = nlohmann::json::array();
  report::table t({"framework", "command", "option", "value", "recipe", "source"});
  constexpr const char* recipes[] = {"",
                                     "full fine-tuning",
                                     "LoRA",
                                     "FSDP with --pp",
                                     "with --pp",
                                     "plan",
                                     "with --dp or --cp, and min-gpus; not with --zero",
                                     "with --fsdp (FSDP1) in train and min-gpus"};
  static_assert(std::size(recipes) == static_cast<std::size_t>(recipe::fsdp1) + 1,
                "a text per recipe");
  for (const cli::framework& f : cli::frameworks) {
    nlohmann::json defaults = nlohmann::json::array();
    for (const cli::framework_default& d : f.defaults) {
      const char* recipe = recipes[static_cast<int>(d.recipe)];
      defaults.push_back(
          {{"option", d.option}, {"value", d.value}, {"recipe", recipe}, {"source", d.source}});
      t.add({f.name, f.subcommand, d.option, d.value, recipe, d.source});
    }
    rows.push_back({{"key", f.name},
                    {"summary", f.summary},
                    {"command", f.subcommand},
                    {"defaults", defaults}});
  }
  return print_list(out, format, rows, t);
}

}  // namespace vramfit::cli
