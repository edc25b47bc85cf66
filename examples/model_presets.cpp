// Prints the tables of docs/models.md: every preset with its parameters, what its checkpoint
// stores, the parameters a token passes through, and the parameters by kind, all from the tensor
// ledger.
#include <iostream>
#include <vramfit/vramfit.hpp>

#include "report.hpp"

// [start:ledger]
// A preset is a type whose value is checked at compile time; its ledger is a constant.
constexpr vramfit::tensor_ledger mixtral = vramfit::tensors(vramfit::models::mixtral_8x7b::value);
static_assert(vramfit::parameters(mixtral) == 46'702'792'704);
static_assert(vramfit::active_parameters(vramfit::models::mixtral_8x7b::value, mixtral) ==
              12'879'925'248);
static_assert(vramfit::parameters(mixtral, vramfit::tensor_kind::router) == 32 * 8 * 4096);
// [end:ledger]

// [start:custom]
// A custom architecture is a model{...} aggregate; model_type checks the rules at compile time.
using tiny_gqa = vramfit::model_type<vramfit::model{.name = "tiny-gqa",
                                                    .hidden = 512,
                                                    .layers = 4,
                                                    .heads = 8,
                                                    .kv_heads = 2,
                                                    .head_dim = 64,
                                                    .ffn = 1536,
                                                    .vocab = 32000,
                                                    .tied_embeddings = true}>;
// Embedding 32000 x 512 (tied: no head); per layer 2 norms of 512, q and o 512 x 512, k and v
// 128 x 512, SwiGLU 3 x 512 x 1536; final norm 512.
static_assert(vramfit::parameters(vramfit::tensors(tiny_gqa::value)) ==
              32000 * 512 + 4 * (2 * 512 + 2 * 512 * 512 + 2 * 128 * 512 + 3 * 512 * 1536) + 512);
// [end:custom]

int main() {
  using namespace vramfit;
  using report::grouped;
  report::table totals(
      {"preset", "parameters", "checkpoint", "active per token", "tensors", "largest layer"});
  report::table kinds(
      {"preset", "embedding", "attention", "mlp", "expert", "norm", "head", "router"});
  for (const preset& p : presets) {
    const tensor_ledger ledger = tensors(p.value);
    const layer_size largest = largest_layer(ledger, p.value.layers);
    totals.add({std::string("`") + p.key + "`", grouped(parameters(ledger)),
                grouped(checkpoint_elements(ledger)), grouped(active_parameters(p.value, ledger)),
                grouped(parameter_tensors(ledger)),
                grouped(largest.parameters) + " (layer " + std::to_string(largest.layer) + ")"});
    std::vector<std::string> row{std::string("`") + p.key + "`"};
    for (int k = 0; k < 7; ++k)
      row.push_back(grouped(parameters(ledger, static_cast<tensor_kind>(k))));
    kinds.add(row);
  }
  const report::page_blocks page(std::cout, "model_presets.cpp");
  page.print("totals", totals);
  page.print("by-kind", kinds);
}
