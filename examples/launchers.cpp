// What users copy into a training launcher or a serving script. Each plan is checked at compile
// time; main() prints each breakdown, the computed blocks of docs/launchers.md.
#include <iostream>
#include <sstream>
#include <string>
#include <vramfit/vramfit.hpp>

#include "report.hpp"

using namespace vramfit;
using namespace vramfit::literals;

// [start:fsdp]
// Llama-3-8B on 8 x H100 with FSDP, PyTorch AMP (bf16), 8192-token sequences, full recompute.
using llama_fsdp =
    training_plan<models::llama_3_8b, amp<bf16>, adamw<>, full_finetune, parallel<fsdp<8>>,
                  activation_options{
                      .micro_batch = 1, .sequence = 8192, .recompute = recompute_kind::full}>;
static_assert(check_fits<llama_fsdp, gpus::h100_80gb>());
// [end:fsdp]

// [start:mixtral]
// Seed article 003: Mixtral-8x7B on a 44 GB card (the article's GB are GiB: "1 GB = 1024^3
// bytes"). A custom GPU is one line.
using card_44gb = gpu_type<gpu{"44 GiB card", 44 * GiB, gpu_generation::ampere, "seed 003"}>;

// Case C, a 4-bit base with LoRA r = 16 on the experts: fits.
using mixtral_c = training_plan<
    models::mixtral_8x7b, mixed<bf16, bf16>, adam<>, qlora<16, "w1,w2,w3">, single_gpu,
    activation_options{.micro_batch = 1, .sequence = 1024, .recompute = recompute_kind::full}>;
static_assert(fits<mixtral_c, card_44gb>);

// Case A, routers only: the frozen weights alone are 93 GB in bf16; with the frozen linears
// in NF4 (as QLoRA keeps them) it fits.
constexpr finetuning routers_over_nf4 = [] {
  finetuning f = partial<select::kinds(tensor_kind::router)>::value;
  f.quantized_base = nf4_double_quant::value;
  f.unquantized_base = bf16::value;
  return f;
}();
constexpr training_plan_value mixtral_a{
    training{models::mixtral_8x7b::value, mixed<bf16, bf16>::value, adam<>::value,
             routers_over_nf4},
    activation_options{.micro_batch = 1, .sequence = 1024, .recompute = recompute_kind::full}};
static_assert(fit(mixtral_a, card_44gb::value).fits());
// [end:mixtral]

// [start:qlora65b]
// QLoRA (Dettmers et al. 2023): LLaMA-65B on one 48 GB GPU, LoRA r = 64 on every linear layer,
// paged AdamW (its states in host memory), full recompute. A custom model is one line too.
using llama_65b = model_type<model{.name = "LLaMA-65B",
                                   .hidden = 8192,
                                   .layers = 80,
                                   .heads = 64,
                                   .kv_heads = 64,
                                   .head_dim = 128,
                                   .ffn = 22016,
                                   .vocab = 32000}>;
static_assert(parameters(tensors(llama_65b::value)) == 65'285'660'672);
using qlora_65b = training_plan<
    llama_65b, pure<bf16>, adamw<optimizer_options{.paged = true}>, qlora<64>, single_gpu,
    activation_options{.micro_batch = 1, .sequence = 2048, .recompute = recompute_kind::full}>;
static_assert(check_fits<qlora_65b, gpus::rtx_a6000>());
// [end:qlora65b]

// [start:offload]
// ZeRO-3 with parameters and optimizer offloaded to the CPU: Llama-3-8B on one 24 GB RTX 4090.
using offloaded =
    training_plan<models::llama_3_8b, mixed<bf16, bf16>, adamw<>, full_finetune,
                  parallel<zero<3, 1>, offload<offload_target::cpu, offload_target::cpu>>,
                  activation_options{
                      .micro_batch = 1, .sequence = 2048, .recompute = recompute_kind::full}>;
static_assert(check_fits<offloaded, gpus::rtx_4090>());
// The host holds the bf16 weights and gradient partitions, the fp32 gradients, master weights and
// Adam states: 2 + 2 + 4 + 4 + 8 = 20 B per parameter (stage3.py; DeepSpeed's own estimator
// counts 18, without the bf16 gradient buffer).
static_assert(total(offloaded::breakdown().entries, memory_space::host) ==
              bytes{20 * 8'030'261'248});
// [end:offload]

// [start:server]
// A serving budget: Llama-3-8B in bf16 on one H100 with vLLM's defaults there (90 %, a profile
// run of 8192 tokens in 1024 sequences) and 16-token blocks: how many 8192-token conversations
// its KV pool holds at once.
constexpr gpu h100 = gpus::h100_80gb::value;
constexpr serving_budget budget = serve(models::llama_3_8b::value, {}, plain_weights<bf16>::value,
                                        {.block_tokens = 16}, 8192, h100, vllm_defaults(h100));
static_assert(budget.sequences >= 50);
// [end:server]

namespace {
/// A breakdown entry by entry, and its peak against the GPU's capacity.
std::string breakdown_text(const timed_ledger& l, const gpu& device) {
  std::ostringstream out;
  out << report::ledger_table(l.entries) << "\nPeak per GPU: **" << to_string(peak(l)) << "** of "
      << to_string(device.capacity) << " (" << device.name << "), at the " << to_string(l.peak_at)
      << ".\n";
  return out.str();
}
}  // namespace

int main() {
  const report::page_blocks page(std::cout, "launchers.cpp");
  page.print("llama-fsdp",
             breakdown_text(llama_fsdp::breakdown_on<gpus::h100_80gb>(), gpus::h100_80gb::value));
  page.print("mixtral-c", breakdown_text(mixtral_c::breakdown_on<card_44gb>(), card_44gb::value));
  page.print("mixtral-a", breakdown_text(breakdown(mixtral_a, card_44gb::value), card_44gb::value));
  constexpr finetuning case_b = [] {
    finetuning f = partial<select::kinds(tensor_kind::expert).layers(0, 6).experts(0, 2),
                           select::kinds(tensor_kind::router)>::value;
    f.quantized_base = nf4_double_quant::value;
    f.unquantized_base = bf16::value;
    return f;
  }();
  const training_plan_value mixtral_b{
      training{models::mixtral_8x7b::value, mixed<bf16, bf16>::value, adam<>::value, case_b},
      mixtral_a.batch};
  page.print("mixtral-b", breakdown_text(breakdown(mixtral_b, card_44gb::value), card_44gb::value));
  page.print("qlora-65b",
             breakdown_text(qlora_65b::breakdown_on<gpus::rtx_a6000>(), gpus::rtx_a6000::value));
  page.print("offload",
             breakdown_text(offloaded::breakdown_on<gpus::rtx_4090>(), gpus::rtx_4090::value));
  std::ostringstream server;
  server << "| | bytes |\n|---|---:|\n"
         << "| 90 % of " << to_string(budget.total) << " (cudaMemGetInfo's total) | "
         << to_string(budget.requested) << " |\n"
         << "| weights | " << to_string(budget.weights) << " |\n"
         << "| profile run (8192 tokens, sampler on 1024 sequences) | "
         << to_string(budget.profile_peak) << " |\n"
         << "| non-torch (measured increase at TP 1) | " << to_string(budget.non_torch) << " |\n"
         << "| **KV pool** | **" << to_string(budget.kv_pool) << "** |\n\n"
         << report::grouped(budget.kv_tokens) << " KV tokens: " << report::grouped(budget.sequences)
         << " conversations of 8192 tokens at once.\n";
  page.print("server", server.str());
}
