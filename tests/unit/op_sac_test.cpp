// Unit tier: torchtitan's op-level selective activation checkpointing, hand-derived per layer:
// each checkpointed block keeps its input, the outputs of its 1st, 3rd, ... aten.mm, the flash
// attention's output and log-sum-exp and, with sequence parallelism, its reduce-scatter outputs.
#include <doctest/doctest.h>

#include <vramfit/presets.hpp>
#include <vramfit/step_time.hpp>
#include <vramfit/timeline.hpp>

using namespace vramfit;

namespace {
constexpr std::int64_t tokens = 4096;  // one sequence of 4,096 tokens

bytes kept(const model& m, const layout& l = {}, bool moe = false,
           attention_kind attention = attention_kind::flash) {
  const activation_options o{.micro_batch = 1, .sequence = tokens, .attention = attention};
  return layer_activation_bytes(m, pure<bf16>::value, o, l, moe, recompute_kind::op_sac);
}
}  // namespace

TEST_CASE("op-level SAC on Llama-3-8B keeps q, v, gate and down outputs and attention's") {
  // Matmuls in forward order: q 4096, k 1024, v 1024, o 4096, gate 14336, up 14336, down 4096
  // outputs per token; the 1st, 3rd, 5th and 7th are cached: 4096 + 1024 + 14336 + 4096 = 23552.
  // Flash attention: its output (32 heads x 128) and an fp32 log-sum-exp per head (128 bytes).
  // The block's input: 4096. All in bf16: 2 x (4096 + 23552 + 4096) + 128 = 63,616 bytes a token.
  CHECK(kept(models::llama_3_8b::value) == bytes{63'616LL * tokens});  // 260,571,136
  // Eager attention has no SDPA to cache: 2 x (4096 + 23552) a token.
  CHECK(kept(models::llama_3_8b::value, {}, false, attention_kind::eager) ==
        bytes{55'296LL * tokens});
}

TEST_CASE("op-level SAC under tensor and sequence parallelism caches local outputs") {
  // TP 2 + SP: q 2048, v 512 (4 of 8 KV heads), gate 7168 and down's whole 4096-wide partial
  // sums per token are cached; each row-parallel linear (o, down) adds its reduce-scattered
  // output, 4096 wide over half the tokens; attention 16 heads (2048 + 64 bytes of LSE); the
  // input is split over the two ranks (2048).
  // 2 x (2048 + 2048 + 512 + 7168 + 4096 + 2 x 2048) + 64 = 44,096 bytes a token.
  const layout tp_sp{.tensor = 2, .sequence = true};
  CHECK(kept(models::llama_3_8b::value, tp_sp) == bytes{44'096LL * tokens});
}

TEST_CASE("op-level SAC counts only bias-free linears: biased ones and Conv1D run as addmm") {
  // Qwen2.5-7B: q, k and v carry biases (addmm), so the mm count starts at o: o 3584 (1st),
  // gate (2nd), up 18944 (3rd), down (4th). Attention 28 x 128 = 3584 plus 28 x 4 bytes of LSE;
  // input 3584: 2 x (3584 + 3584 + 18944 + 3584) + 112 = 59,504 bytes a token.
  CHECK(kept(models::qwen2_5_7b::value) == bytes{59'504LL * tokens});
  // GPT-2's Conv1D layers call addmm: only the input and attention (768 + 12 x 4 bytes) remain.
  CHECK(kept(models::gpt2::value) == bytes{(2LL * (768 + 768) + 48) * tokens});
}

TEST_CASE("op-level SAC recomputes an MoE layer's router and routed experts") {
  // Mixtral-8x7B's MoE layer: q (1st, 4096), k, v (3rd, 1024), o; the router's mm is forced to
  // recompute and the experts run as grouped GEMMs: 2 x (4096 + 4096 + 1024 + 4096) + 128.
  CHECK(kept(models::mixtral_8x7b::value, {}, true) == bytes{26'752LL * tokens});
}

TEST_CASE("op-level SAC's recompute repeats the uncached matmuls") {
  // Llama-3-8B: k (1024 x 4096), o (4096 x 4096) and up (14336 x 4096) of each layer's
  // q, k, v, o (4096 + 1024 + 1024 + 4096 rows) and gate, up, down (3 x 14336 x 4096).
  const model_work w = work_of(training{models::llama_3_8b::value}, tokens);
  CHECK(w.op_sac_recomputed ==
        doctest::Approx((1024.0 + 4096 + 14336) / (4096 + 1024 + 1024 + 4096 + 3 * 14336)));
}

TEST_CASE("op-level SAC keeps each layer's cache through forward and recomputes the rest") {
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  const activation_options o{
      .micro_batch = 1, .sequence = tokens, .recompute = recompute_kind::op_sac};
  const step_timeline tl = step_timeline_of(t, o);
  bytes saved{};
  for (const memory_entry& e : tl.ledger)
    if (e.role == entry_role::saved_activations) saved = e.size;
  CHECK(saved == bytes{63'616LL * tokens * 32});
  bytes recomputed{};
  for (const timeline_event& e : tl.events)
    if (std::string(e.what) == "recomputed layer") recomputed = e.delta;
  CHECK(recomputed ==
        layer_activation_bytes(t.model, t.precision, o, {}, false, recompute_kind::none));
}

TEST_CASE("op-level SAC with LoRA is an error: the adapters' matmuls change the count") {
  training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  t.finetune = lora_finetuning(16, "q_proj,v_proj");
  CHECK_THROWS_WITH_AS(
      layer_activation_bytes(t.model, t.precision, {.recompute = recompute_kind::op_sac}, {}, false,
                             recompute_kind::op_sac, t.finetune),
      doctest::Contains("op-level selective checkpointing"), error);
}
