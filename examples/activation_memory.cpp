// Prints the tables of docs/activations.md: the saved-tensor ledger of a Llama-3-8B layer,
// Korthikanti et al.'s Table 2 reproduced, recompute and parallel choices, and a training step's
// peak.
#include <iostream>
#include <sstream>
#include <string>
#include <vramfit/vramfit.hpp>

#include "report.hpp"

// [start:step]
using namespace vramfit;
using namespace vramfit::literals;

// Llama-3-8B, FSDP over 8 GPUs with AMP bf16, micro-batch 2 x 4096 tokens, flash attention,
// full recompute: the whole step (model states + activations + transients) fits an 80 GB H100.
constexpr training fsdp8{models::llama_3_8b::value, amp<bf16>::value, adamw<>::value,
                         full_finetune::value, parallel<fsdp<8>>::value};
constexpr activation_options batch{
    .micro_batch = 2, .sequence = 4096, .recompute = recompute_kind::full};
static_assert(peak(training_step(fsdp8, batch)) < 80_GB);
// [end:step]

namespace {
report::table saved_tensor_table(const saved_tensor_ledger& l) {
  report::table t({"saved tensor", "bytes", "recomputed by selective"});
  bytes sum{};
  for (const saved_tensor& s : l) {
    t.add({s.name, report::grouped(s.size.count), s.recomputed_by_selective ? "yes" : ""});
    sum += s.size;
  }
  t.add({"**layer total**", report::grouped(sum.count) + " (" + to_string(sum) + ")", ""});
  return t;
}
}  // namespace

int main() {
  const report::page_blocks page(std::cout, "activation_memory.cpp");
  const model& llama = models::llama_3_8b::value;
  const activation_options eager{
      .micro_batch = 1, .sequence = 4096, .attention = attention_kind::eager};
  const activation_options flash{.micro_batch = 1, .sequence = 4096};
  page.print("eager-layer",
             saved_tensor_table(layer_saved_tensors(llama, pure<bf16>::value, eager, {})));
  page.print("flash-layer",
             saved_tensor_table(layer_saved_tensors(llama, pure<bf16>::value, flash, {})));

  // Korthikanti et al. 2022, Table 2: GPT-3 175B at s 2048, b 1, t 8, norm statistics left out.
  const model gpt3{.name = "GPT-3 175B",
                   .family = family::gpt2,
                   .hidden = 12288,
                   .layers = 96,
                   .heads = 96,
                   .kv_heads = 96,
                   .head_dim = 128,
                   .ffn = 4 * 12288,
                   .vocab = 51200,
                   .mlp = mlp_kind::gelu,
                   .norm = norm_kind::layernorm,
                   .bias = bias_kind::all,
                   .tied_embeddings = true,
                   .positions = position_kind::learned,
                   .max_positions = 2048};
  report::table k({"technique", "paper's formula", "vramfit (bytes)", "GiB"});
  struct row {
    const char* name;
    const char* formula;
    layout l;
    recompute_kind r;
  };
  const row rows[] = {
      {"no parallelism", "sbh(34 + 5as/h)", {}, recompute_kind::none},
      {"tensor parallel", "sbh(10 + 24/t + 5as/(ht))", {.tensor = 8}, recompute_kind::none},
      {"tensor + sequence parallel",
       "sbh/t (34 + 5as/h)",
       {.tensor = 8, .sequence = true},
       recompute_kind::none},
      {"tensor parallel + selective recompute",
       "sbh(10 + 24/t)",
       {.tensor = 8},
       recompute_kind::selective},
      {"tensor + sequence + selective",
       "34 sbh/t",
       {.tensor = 8, .sequence = true},
       recompute_kind::selective},
      {"full recompute", "2 sbh", {.tensor = 8}, recompute_kind::full},
  };
  for (const row& r : rows) {
    const activation_options o{.micro_batch = 1,
                               .sequence = 2048,
                               .attention = attention_kind::eager,
                               .attention_dropout = true,
                               .hidden_dropout = true,
                               .recompute = r.r,
                               .norm_statistics = false};
    const bytes b = layer_activation_bytes(gpt3, pure<fp16>::value, o, r.l, false, r.r);
    k.add({r.name, r.formula, report::grouped(b.count), to_string(b, GiB)});
  }
  page.print("korthikanti", k);

  // A training step of Llama-3-8B on one GPU, micro-batch 1 x 4096, AMP bf16, AdamW.
  report::table steps({"attention", "recompute", "activations", "model states", "peak"});
  const training single{llama, amp<bf16>::value, adamw<>::value};
  for (attention_kind a : {attention_kind::eager, attention_kind::flash}) {
    for (recompute_kind r : {recompute_kind::none, recompute_kind::selective, recompute_kind::full,
                             recompute_kind::op_sac}) {
      const activation_options o{
          .micro_batch = 1, .sequence = 4096, .attention = a, .recompute = r};
      const timed_ledger l = training_step(single, o);
      const bytes acts = total(l.entries, component::activations);
      const char* names[] = {"none", "selective", "full", "op-level SAC"};
      steps.add({a == attention_kind::eager ? "eager" : "flash", names[static_cast<int>(r)],
                 to_string(acts), to_string(total(l.entries) - acts), to_string(peak(l))});
    }
  }
  page.print("steps", steps);

  const timed_ledger l = training_step(fsdp8, batch);
  std::ostringstream step;
  step << report::ledger_table(l.entries) << "\nPeak: " << to_string(peak(l)) << " at the "
       << to_string(l.peak_at) << ".\n";
  page.print("fsdp-step", step.str());
}
