// Unit tier: what the model-state tests share: hand-built tensor ledgers and ledger sums.
#pragma once

#include <string>
#include <vramfit/presets.hpp>
#include <vramfit/training.hpp>

namespace model_state_checks {
using namespace vramfit;
/// A ledger of one [rows, cols] linear weight: every parameter is a matmul weight.
constexpr tensor_ledger one_matrix(std::int64_t rows, std::int64_t cols) {
  tensor_ledger l{};
  tensor_group g{};
  g.name.parts[0] = "linear.weight";
  g.shape[0] = rows;
  g.shape[1] = cols;
  g.rank = 2;
  g.kind = tensor_kind::mlp;
  l.push_back(g);
  return l;
}

/// A stand-in model for ledgers built by hand (used only by the layout rules).
inline constexpr model stand_in{.name = "stand-in",
                                .hidden = 64,
                                .layers = 1,
                                .heads = 1,
                                .kv_heads = 1,
                                .head_dim = 64,
                                .ffn = 64,
                                .vocab = 64};

/// Llama-3-8B over 2 data-parallel ranks and 2 pipeline stages with ZeRO-1 as `implementation`
/// shards it: where each framework's pipeline-schedule rules are checked.
constexpr training pipelined_zero1_llama(shard_implementation implementation) {
  return {models::llama_3_8b::value,
          mixed<bf16>::value,
          adamw<>::value,
          full_finetune::value,
          {.data = 2, .pipeline = 2, .zero = sharding::zero1, .implementation = implementation}};
}

/// Weights + gradients + master weights + optimizer states on the device.
inline bytes states_on_device(const memory_ledger& l) {
  return total(l, component::weights) + total(l, component::gradients) +
         total(l, component::master_weights) + total(l, component::optimizer_states);
}

/// The communication buckets (entries named "... bucket"), which DeepSpeed's estimators omit.
inline bytes buckets(const memory_ledger& l) {
  bytes sum{};
  for (const memory_entry& e : l)
    if (std::string(e.name).find("bucket") != std::string::npos) sum += e.size;
  return sum;
}

inline bytes entry(const memory_ledger& l, const char* name) {
  for (const memory_entry& e : l)
    if (std::string(e.name) == name) return e.size;
  return bytes{};
}

/// bigscience/T0_3B as AutoModel loads it (T5Model, no LM head), by hand from its config:
/// d_model 2048, d_kv 64 x 32 heads, d_ff 5120 (gated-gelu), 24 encoder + 24 decoder layers,
/// vocab 32128, 32 relative-position buckets.
inline constexpr tensor_ledger t0_3b() {
  tensor_ledger l{};
  auto add = [&l](const char* name, std::int64_t rows, std::int64_t cols, std::int64_t layers) {
    tensor_group g{};
    g.name.parts[0] = name;
    g.shape[0] = rows;
    g.shape[1] = cols;
    g.rank = cols > 0 ? 2 : 1;
    if (cols == 0) g.shape[1] = 0;
    g.kind = tensor_kind::mlp;
    g.layer_count = layers;
    l.push_back(g);
  };
  add("shared.weight", 32128, 2048, 0);
  add("encoder.block.{layer}.layer.0.SelfAttention.q/k/v/o.weight", 4 * 2048, 2048, 24);
  add("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 32, 32, 0);
  add("encoder.block.{layer}.layer.{0,1}.layer_norm.weight", 2 * 2048, 0, 24);
  add("encoder.block.{layer}.layer.1.DenseReluDense.wi_0/wi_1/wo.weight", 3 * 5120, 2048, 24);
  add("encoder.final_layer_norm.weight", 2048, 0, 0);
  add("decoder.block.{layer}.layer.{0,1}.{Self,EncDec}Attention.q/k/v/o.weight", 8 * 2048, 2048,
      24);
  add("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 32, 32, 0);
  add("decoder.block.{layer}.layer.{0,1,2}.layer_norm.weight", 3 * 2048, 0, 24);
  add("decoder.block.{layer}.layer.2.DenseReluDense.wi_0/wi_1/wo.weight", 3 * 5120, 2048, 24);
  add("decoder.final_layer_norm.weight", 2048, 0, 0);
  return l;
}
}  // namespace model_state_checks
