// The README's first example: a training launcher that refuses to compile a plan that does not
// fit, and prints the per-GPU breakdown of one that does.
#include <iostream>
// [start:quickstart]
#include <vramfit/vramfit.hpp>
using namespace vramfit;

// Llama-3-8B, bf16 with fp32 master weights, AdamW, FSDP over 8 GPUs,
// micro-batch 2 x 4096 tokens, flash attention, full activation recompute.
using plan =
    training_plan<models::llama_3_8b, mixed<bf16>, adamw<>, full_finetune, parallel<fsdp<8>>,
                  activation_options{
                      .micro_batch = 2, .sequence = 4096, .recompute = recompute_kind::full}>;

static_assert(check_fits<plan, gpus::h100_80gb>());  // or it does not compile, with the numbers
// [end:quickstart]

int main() {
  const fit_report r = fit(plan::value, gpus::h100_80gb::value);
  std::cout << "Llama-3-8B, FSDP x 8, per GPU: " << to_string(r.required) << " of "
            << to_string(r.available) << "\n";
}
