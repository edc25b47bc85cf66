// SPDX-License-Identifier: MIT
// `vramfit train --explain`: what autograd saves for one layer, tensor by tensor, from the same
// per-operator ledger the estimate sums (activations.hpp layer_saved_tensors).
#pragma once

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "../report.hpp"
#include "choices.hpp"
#include "sizes.hpp"

namespace vramfit::cli {

/// The layers whose saved tensors differ: a dense one (the first layer's kind), and an MoE one
/// when the model has them.
struct explained_layer {
  const char* kind;
  saved_tensor_ledger tensors;
};

inline std::vector<explained_layer> explained_layers(const training_plan_value& p) {
  const training& t = p.setup;
  const model& m = t.model;
  std::vector<explained_layer> out;
  if (!m.is_moe_layer(0))
    out.push_back(
        {"dense", layer_saved_tensors(m, t.precision, p.batch, t.layout, false, t.finetune)});
  if (m.is_moe())
    out.push_back(
        {"MoE", layer_saved_tensors(m, t.precision, p.batch, t.layout, true, t.finetune)});
  return out;
}

/// Each saved tensor of one layer for one micro-batch on one rank: its half of the layer, bits
/// per element, elements (and per token, where whole), bytes, whether selective recompute drops
/// it, and the source line that makes it. A table, Markdown or JSON.
inline void print_explain(std::ostream& out, const std::string& title, const training_plan_value& p,
                          output_format format, const size_style& size) {
  const std::int64_t tokens =
      p.batch.micro_batch * (p.batch.sequence / p.setup.layout.context);  // checked by the plan
  const std::vector<explained_layer> layers = explained_layers(p);
  if (format == output_format::json) {
    nlohmann::json j{{"configuration", title}, {"tokens", tokens}};
    for (const explained_layer& l : layers) {
      nlohmann::json rows = nlohmann::json::array();
      bytes sum{};
      for (const saved_tensor& s : l.tensors) {
        rows.push_back({{"name", s.name},
                        {"part", s.part == layer_part::mlp ? "mlp" : "attention"},
                        {"bits", s.bits},
                        {"elements", s.elements},
                        {"bytes", s.size.count},
                        {"recomputed_by_selective", s.recomputed_by_selective},
                        {"source", s.source}});
        sum += s.size;
      }
      j["layers"].push_back({{"layer", l.kind}, {"tensors", rows}, {"total", sum.count}});
    }
    out << j.dump(2) << "\n";
    return;
  }
  const bool markdown = format == output_format::markdown;
  out << (markdown ? "**" + title + "**" : title) << "\n\n"
      << "What autograd saves for backward in one layer, per micro-batch of " +
             report::grouped(tokens) + " tokens on one GPU (activations.hpp):\n";
  for (const explained_layer& l : layers) {
    report::table t({"saved tensor", "part", "bits", "elements", "per token", "bytes",
                     "selective recompute", "source"});
    bytes sum{};
    for (const saved_tensor& s : l.tensors) {
      t.add({s.name, s.part == layer_part::mlp ? "MLP" : "attention", std::to_string(s.bits),
             report::grouped(s.elements),
             s.elements % tokens == 0 ? report::grouped(s.elements / tokens) : "-", size(s.size),
             s.recomputed_by_selective ? "dropped" : "kept", s.source});
      sum += s.size;
    }
    t.add({"**total**", "", "", "", "", "**" + size(sum) + "**", "", ""});
    out << "\n" << (markdown ? "### " : "") << l.kind << " layer\n\n" << t;
  }
}

}  // namespace vramfit::cli
