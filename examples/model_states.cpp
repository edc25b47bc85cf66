// Prints the tables of docs/training.md: training model states per GPU, from the same constexpr
// formulas a launcher static_asserts against.
#include <iostream>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "report.hpp"

// [start:launcher]
using namespace vramfit;
using namespace vramfit::literals;

// Llama-3-8B, bf16 weights with fp32 master weights and gradients (Megatron's recipe), AdamW,
// ZeRO-1 over 8 GPUs as Megatron's distributed optimizer implements it.
constexpr training llama_zero1{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value,
                               full_finetune::value, parallel<distributed_optimizer<8>>::value};

// 2 + 4 + 12 / 8 bytes per parameter: the model states fit an 80 GB H100 with room for activations.
static_assert(peak(model_states(llama_zero1)) < 64_GiB);
// [end:launcher]

namespace {
std::string per_parameter(bytes b, std::int64_t params) {
  // Two decimals of bytes per parameter, exactly: round(100 * b / params) / 100.
  const std::int64_t hundredths = (b.count * 100 + params / 2) / params;
  return std::to_string(hundredths / 100) + "." + (hundredths % 100 < 10 ? "0" : "") +
         std::to_string(hundredths % 100);
}

std::string cell(bytes b) {
  return b == bytes{} ? "-" : to_string(b);
}

}  // namespace

int main() {
  const report::page_blocks page(std::cout, "model_states.cpp");
  // Bytes per parameter, precision x optimizer, on one 4096 x 4096 weight.
  constexpr std::int64_t n = 4096LL * 4096;
  tensor_ledger one{};
  {
    tensor_group g{};
    g.name.parts[0] = "weight";
    g.shape[0] = g.shape[1] = 4096;
    g.rank = 2;
    g.kind = tensor_kind::mlp;
    one.push_back(g);
  }
  const precision precisions[] = {fp32_training::value,     amp<bf16>::value,
                                  pure<bf16>::value,        mixed<bf16>::value,
                                  mixed<fp16, fp16>::value, fp8_compute::value};
  const optimizer optimizers[] = {
      sgd<>::value,        sgd<optimizer_options{.momentum = true}>::value,
      adamw<>::value,      adafactor<>::value,
      adamw_8bit<>::value, lion<>::value,
      muon<>::value};
  std::vector<std::string> header{"precision"};
  for (const optimizer& o : optimizers) header.push_back(o.name);
  report::table per_param(header);
  model stand_in = models::llama_3_8b::value;
  for (const precision& p : precisions) {
    std::vector<std::string> row{p.name};
    for (const optimizer& o : optimizers) {
      const memory_ledger l = model_states(training{stand_in, p, o}, one, 0);
      bytes states = total(l, component::weights) + total(l, component::gradients) +
                     total(l, component::master_weights) + total(l, component::optimizer_states);
      row.push_back(per_parameter(states, n));
    }
    per_param.add(row);
  }
  page.print("bytes-per-parameter", per_param);

  // Sharding Llama-3-8B over 8 GPUs.
  struct row {
    const char* name;
    precision p;
    layout l;
  };
  const row rows[] = {
      {"DDP, AMP bf16", amp<bf16>::value, parallel<ddp<8>>::value},
      {"Megatron distributed optimizer", mixed<bf16>::value,
       parallel<distributed_optimizer<8>>::value},
      {"DeepSpeed ZeRO-1, fp16", mixed<fp16, fp16>::value, parallel<zero<1, 8>>::value},
      {"DeepSpeed ZeRO-2, fp16", mixed<fp16, fp16>::value, parallel<zero<2, 8>>::value},
      {"DeepSpeed ZeRO-3, fp16", mixed<fp16, fp16>::value, parallel<zero<3, 8>>::value},
      {"DeepSpeed ZeRO-3 + CPU offload", mixed<fp16, fp16>::value,
       parallel<zero<3, 8>, offload<offload_target::cpu, offload_target::cpu>>::value},
      {"FSDP full shard, AMP bf16", amp<bf16>::value, parallel<fsdp<8>>::value},
      {"FSDP shard grad op, AMP bf16", amp<bf16>::value,
       parallel<fsdp<8, fsdp_strategy::shard_grad_op>>::value},
  };
  report::table sharded({"layout", "weights", "gradients", "master", "optimizer", "buffers",
                         "peak per GPU", "host per GPU"});
  for (const row& r : rows) {
    const memory_ledger l = model_states(
        training{models::llama_3_8b::value, r.p, adamw<>::value, full_finetune::value, r.l});
    sharded.add({r.name, cell(total(l, component::weights)), cell(total(l, component::gradients)),
                 cell(total(l, component::master_weights)),
                 cell(total(l, component::optimizer_states)), cell(total(l, component::buffers)),
                 to_string(peak(l)), cell(total(l, memory_space::host))});
  }
  page.print("sharded", sharded);
  page.print("zero3-ledger",
             report::ledger_table(model_states(
                 training{models::llama_3_8b::value, mixed<fp16, fp16>::value, adamw<>::value,
                          full_finetune::value, parallel<zero<3, 8>>::value})));

  // Fine-tuning Mixtral-8x7B (seed article 003): three choices of trained tensors.
  const finetuning modes[] = {partial<select::kinds(tensor_kind::router)>::value,
                              partial<select::kinds(tensor_kind::expert).layers(0, 6).experts(0, 2),
                                      select::kinds(tensor_kind::router)>::value,
                              qlora<16, "w1,w2,w3">::value};
  const char* names[] = {"A: routers only", "B: 6 layers x 2 experts + routers",
                         "C: NF4 base + LoRA r=16 on w1, w2, w3"};
  report::table cases(
      {"case", "trained weights", "frozen weights", "gradients", "master", "optimizer", "peak"});
  for (int i = 0; i < 3; ++i) {
    const memory_ledger l = model_states(
        training{models::mixtral_8x7b::value, mixed<bf16, bf16>::value, adam<>::value, modes[i]});
    const bytes trained = size_of(l, entry_role::trained_weights);
    const bytes frozen = size_of(l, entry_role::frozen_weights);
    cases.add({names[i], to_string(trained, prefixes::decimal),
               to_string(frozen, prefixes::decimal),
               to_string(total(l, component::gradients), prefixes::decimal),
               to_string(total(l, component::master_weights), prefixes::decimal),
               to_string(total(l, component::optimizer_states), prefixes::decimal),
               to_string(peak(l), prefixes::decimal)});
  }
  page.print("mixtral-cases", cases);
}
