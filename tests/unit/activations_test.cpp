// Unit tier: activation memory: Korthikanti et al. 2022 Table 2 as special cases of the ledger,
// hand-derived Llama-style blocks, recompute policies, pipeline in-flight micro-batches and the
// timeline of a training step.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <vramfit/inference.hpp>
#include <vramfit/presets.hpp>
#include <vramfit/timeline.hpp>

using namespace vramfit;

namespace {
/// A GPT block as Korthikanti et al. count it: 16-bit activations, 1-byte dropout masks,
/// dropout after attention and both residual branches, eager attention, a 4h GELU MLP.
constexpr model gpt(std::int64_t h, std::int64_t a) {
  return model{.name = "gpt",
               .family = family::gpt2,
               .hidden = h,
               .layers = 4,
               .heads = a,
               .kv_heads = a,
               .head_dim = h / a,
               .ffn = 4 * h,
               .vocab = 51200,
               .mlp = mlp_kind::gelu,
               .norm = norm_kind::layernorm,
               .bias = bias_kind::all,
               .tied_embeddings = true,
               .positions = position_kind::learned,
               .max_positions = 2048};
}

constexpr activation_options korthikanti(std::int64_t s, std::int64_t b, recompute_kind r) {
  // The paper leaves out the norms' per-row statistics; everything else is the ledger's own.
  return {.micro_batch = b,
          .sequence = s,
          .attention = attention_kind::eager,
          .attention_dropout = true,
          .hidden_dropout = true,
          .recompute = r,
          .norm_statistics = false};
}

bytes per_layer(const model& m, const activation_options& o, const layout& l, recompute_kind r) {
  return layer_activation_bytes(m, pure<fp16>::value, o, l, false, r);
}
}  // namespace

TEST_CASE("Korthikanti et al. 2022 Table 2, row by row") {
  struct shape {
    std::int64_t s, b, h, a, t;
  };
  // The paper's GPT-3 175B and MT-NLG 530B layers at t = 8, and small shapes.
  const shape shapes[] = {{2048, 1, 12288, 96, 8},
                          {2048, 1, 20480, 128, 8},
                          {1024, 4, 1024, 16, 2},
                          {512, 2, 768, 12, 4}};
  for (const shape& x : shapes) {
    CAPTURE(x.h);
    CAPTURE(x.t);
    const model m = gpt(x.h, x.a);
    const std::int64_t sbh = x.s * x.b * x.h;
    const std::int64_t as2b = x.a * x.s * x.s * x.b;  // 5as/h x sbh = 5 a s^2 b
    const layout none{};
    const layout tp{.tensor = x.t};
    const layout tp_sp{.tensor = x.t, .sequence = true};
    const auto o = [&](recompute_kind r) { return korthikanti(x.s, x.b, r); };
    // No parallelism: sbh (34 + 5as/h).
    CHECK(per_layer(m, o(recompute_kind::none), none, recompute_kind::none) ==
          bytes{34 * sbh + 5 * as2b});
    // Tensor parallel: sbh (10 + 24/t + 5as/(ht)).
    CHECK(per_layer(m, o(recompute_kind::none), tp, recompute_kind::none) ==
          bytes{10 * sbh + 24 * sbh / x.t + 5 * as2b / x.t});
    // Tensor + sequence parallel: sbh/t (34 + 5as/h).
    CHECK(per_layer(m, o(recompute_kind::none), tp_sp, recompute_kind::none) ==
          bytes{(34 * sbh + 5 * as2b) / x.t});
    // Tensor parallel + selective recompute: sbh (10 + 24/t).
    CHECK(per_layer(m, o(recompute_kind::selective), tp, recompute_kind::selective) ==
          bytes{10 * sbh + 24 * sbh / x.t});
    // Tensor + sequence parallel + selective recompute: 34 sbh / t.
    CHECK(per_layer(m, o(recompute_kind::selective), tp_sp, recompute_kind::selective) ==
          bytes{34 * sbh / x.t});
    // Full recompute: the layer input, 2 sbh.
    CHECK(per_layer(m, o(recompute_kind::full), tp, recompute_kind::full) == bytes{2 * sbh});
  }
  // The paper's own figures for GPT-3 175B at s = 2048, b = 1, t = 8: TP 0.539 GiB per layer,
  // TP + SP 0.334, TP + selective 0.305 (0.3047), TP + SP + selective 0.0996
  // (docs/sources.md#korthikanti).
  const model m = gpt(12288, 96);
  const auto o = korthikanti(2048, 1, recompute_kind::none);
  CHECK(to_string(per_layer(m, o, {.tensor = 8}, recompute_kind::none), GiB) == "0.54 GiB");
  CHECK(to_string(per_layer(m, o, {.tensor = 8, .sequence = true}, recompute_kind::none), GiB) ==
        "0.33 GiB");
  CHECK(to_string(per_layer(m, o, {.tensor = 8}, recompute_kind::selective), GiB) == "0.30 GiB");
  CHECK(to_string(per_layer(m, o, {.tensor = 8, .sequence = true}, recompute_kind::selective),
                  GiB) == "0.10 GiB");
}

TEST_CASE("norm statistics: what the paper leaves out is 8 bytes per row per LayerNorm") {
  const model m = gpt(1024, 16);
  activation_options o = korthikanti(1024, 2, recompute_kind::none);
  const bytes without = per_layer(m, o, {}, recompute_kind::none);
  o.norm_statistics = true;
  CHECK(per_layer(m, o, {}, recompute_kind::none) - without == bytes{2 * 8 * 1024 * 2});
}

namespace by_hand {
// A Llama-style block by hand: hidden 4096, 32 heads, 8 KV heads of 128, SwiGLU 14336, RMSNorm,
// rotary, no dropout, bf16 (Llama-3-8B's layer), s = 4096, b = 2.
constexpr std::int64_t s = 4096, b = 2, h = 4096, H = 32, kv = 8, d = 128, f = 14336;
constexpr std::int64_t tau = s * b;
// Two Hugging Face RMSNorms: x.to(fp32) 4 tau h, rsqrt 4 tau, normalized x (bf16) 2 tau h; and
// the norm outputs the next linears save, 2 tau h each.
constexpr std::int64_t norms = 2 * (4 * tau * h + 4 * tau + 2 * tau * h) + 2 * 2 * tau * h;
// SwiGLU: gate output, SiLU output, up output, their product: 4 x 2 tau f.
constexpr std::int64_t swiglu = 4 * 2 * tau * f;
}  // namespace by_hand

TEST_CASE("a Llama-style block with eager attention, by hand") {
  using namespace by_hand;
  // Eager (Hugging Face eager_attention_forward): the query 2 tau h; K and V repeated to all 32
  // heads (repeat_kv copies) 2 x 2 tau h; the fp32 softmax 4 b H s^2 and its bf16 copy, which
  // the value matmul saves, 2 b H s^2; the merged heads (o_proj input) 2 tau h.
  const std::int64_t attention = 2 * tau * h + 2 * 2 * tau * h + 6 * b * H * s * s + 2 * tau * h;
  const activation_options o{.micro_batch = b, .sequence = s, .attention = attention_kind::eager};
  CHECK(layer_activation_bytes(models::llama_3_8b::value, pure<bf16>::value, o, {}, false,
                               recompute_kind::none) == bytes{norms + attention + swiglu});
}

TEST_CASE("a Llama-style block with flash attention, by hand") {
  using namespace by_hand;
  // Flash: the query 2 tau h, K and V un-repeated (8 heads) 2 x 2 tau kv d, the output 2 tau h
  // (also the o_proj input), and an fp32 log-sum-exp per head and row: 4 b H s.
  const std::int64_t attention = 2 * tau * h + 2 * 2 * tau * kv * d + 2 * tau * h + 4 * b * H * s;
  const activation_options o{.micro_batch = b, .sequence = s, .attention = attention_kind::flash};
  CHECK(layer_activation_bytes(models::llama_3_8b::value, pure<bf16>::value, o, {}, false,
                               recompute_kind::none) == bytes{norms + attention + swiglu});
  // Selective recompute has nothing to drop under flash attention; full keeps the input.
  CHECK(layer_activation_bytes(models::llama_3_8b::value, pure<bf16>::value, o, {}, false,
                               recompute_kind::full) == bytes{2 * tau * h});
}

TEST_CASE("LoRA's first layer over a frozen embedding saves less, by hand") {
  using namespace by_hand;
  // No backward node for an operator none of whose inputs needs a gradient: the embedding's
  // output needs none, so the first layer's input norm saves nothing, its fp32 input 4 tau h and
  // rsqrt 4 tau (its normalized input, for the frozen weight, is not saved in any layer). With
  // q_proj and v_proj adapted, K needs no gradient, so eager's Q K^T keeps no Q (2 tau h): it is
  // saved only for K's gradient. V and the probabilities stay (Q and V need gradients).
  const activation_options o{.micro_batch = b, .sequence = s, .attention = attention_kind::eager};
  const model& m = models::llama_3_8b::value;
  const finetuning qv = lora_finetuning(16, "q_proj,v_proj");
  auto layer = [&](const finetuning& ft, bool input_grad) {
    return layer_activation_bytes(m, pure<bf16>::value, o, {}, false, recompute_kind::none, ft,
                                  input_grad);
  };
  CHECK(layer(qv, true) - layer(qv, false) == bytes{4 * tau * h + 4 * tau + 2 * tau * h});
  // All linears adapted: Q and K both need gradients, only the input norm goes.
  const finetuning all =
      lora_finetuning(16, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
  CHECK(layer(all, true) - layer(all, false) == bytes{4 * tau * h + 4 * tau});
  // Flash (SDPA) saves its inputs for any one's gradient: only the norm goes there too.
  activation_options flash = o;
  flash.attention = attention_kind::flash;
  CHECK(layer_activation_bytes(m, pure<bf16>::value, flash, {}, false, recompute_kind::none, qv) -
            layer_activation_bytes(m, pure<bf16>::value, flash, {}, false, recompute_kind::none, qv,
                                   false) ==
        bytes{4 * tau * h + 4 * tau});
  // Only the model's first layer, without checkpointing (enable_input_require_grads otherwise).
  CHECK(layer_input_frozen(m, o, qv, 0));
  CHECK_FALSE(layer_input_frozen(m, o, qv, 1));
  CHECK_FALSE(layer_input_frozen(m, o, full_finetune::value, 0));
  activation_options checkpointed = o;
  checkpointed.recompute = recompute_kind::full;
  CHECK_FALSE(layer_input_frozen(m, checkpointed, qv, 0));
  // The stage's saved activations count the exception once, whatever the number of layers.
  const training t{m, pure<bf16>::value, adam<>::value, qv};
  const bytes kept = detail::layers_of_stage(
                         t, o, {}, {.first_layer = 0, .layers = 32, .first = true, .last = true})
                         .kept;
  CHECK(kept == layer(qv, true) * 32 - bytes{4 * tau * h + 4 * tau + 2 * tau * h});
}

TEST_CASE("checkpointed layers keep the eager causal mask until backward, by hand") {
  // [b, 1, s, s] in the embeddings' format: fp32 under AMP (masking_utils eager_mask's dtype is
  // inputs_embeds.dtype), 2 x 1 x 64 x 64 x 4 = 32,768 B; without checkpointing it lives in
  // forward only, with it in the entry that lives to the end of backward.
  model m = models::llama_3_8b::value;
  m.layers = 2;
  activation_options o{.micro_batch = 2, .sequence = 64, .attention = attention_kind::eager};
  const training t{m, amp<bf16>::value, adam<>::value, full_finetune::value};
  auto entry = [](const memory_ledger& l, const char* prefix) {
    for (const memory_entry& e : l)
      if (std::string(e.name).rfind(prefix, 0) == 0) return e;
    return memory_entry{};
  };
  const memory_ledger plain = training_step(t, o).entries;
  CHECK(entry(plain, "causal attention mask").size == bytes{2 * 64 * 64 * 4});
  CHECK(entry(plain, "causal attention mask").lifetime == lifetime::forward);
  o.recompute = recompute_kind::full;
  const memory_ledger kept = training_step(t, o).entries;
  CHECK(entry(kept, "causal attention mask").size == bytes{});
  CHECK(entry(kept, "embedding inputs").size - entry(plain, "embedding inputs").size ==
        bytes{2 * 64 * 64 * 4});
}

TEST_CASE("the grouped experts' int32 offsets take one 512 B allocator block") {
  // [E] int32 offsets, 8 x 4 = 32 B, which the caching allocator rounds up to 512 B
  // (kMinBlockSize), as the traces count it.
  model m = models::llama_3_8b::value;
  m.moe = {.routed_experts = 8, .top_k = 2, .expert_ffn = 1024};
  const activation_options o{.micro_batch = 1, .sequence = 128};
  bool found = false;
  for (const saved_tensor& x : layer_saved_tensors(m, pure<bf16>::value, o, {}, true))
    if (std::string(x.name) == "expert row offsets (int32)") {
      found = true;
      CHECK(x.size == bytes{512});
    }
  CHECK(found);
}

TEST_CASE("the residual stream: fp32 under AMP, 16-bit where FSDP gathers the weights in bf16") {
  using namespace by_hand;
  // Full recompute keeps a layer's input, the residual stream. AMP's fp32 weights make the
  // embedding's output, and every residual add after it, fp32: 4 tau h. FSDP's MixedPrecision
  // gathers the weights in bf16 (param_dtype), so the layers compute and add in bf16: 2 tau h.
  const activation_options o{.micro_batch = b, .sequence = s, .attention = attention_kind::flash};
  CHECK(layer_activation_bytes(models::llama_3_8b::value, amp<bf16>::value, o, {}, false,
                               recompute_kind::full) == bytes{4 * tau * h});
  CHECK(layer_activation_bytes(models::llama_3_8b::value, amp<bf16>::value, o,
                               parallel<fsdp<8>>::value, false,
                               recompute_kind::full) == bytes{2 * tau * h});
}

TEST_CASE("Gemma 3's q_norm and k_norm save what its layer norms save, by hand") {
  // gemma-3-1b's heads (4 query, 1 KV, of 256) at 1 x 1,024 tokens: Gemma3RMSNorm keeps its
  // fp32 input, an fp32 rstd per head and token, the fp32 product with (1 + weight), and that
  // (1 + weight) itself; the bf16 cast back is read by the rotary, which saves none of it.
  model m{.name = "gemma-3-1b-like",
          .hidden = 1152,
          .layers = 26,
          .heads = 4,
          .kv_heads = 1,
          .head_dim = 256,
          .ffn = 6912,
          .vocab = 262'144,
          .mlp = mlp_kind::geglu,
          .norms_per_layer = 4,
          .tied_embeddings = true,
          .qk_norm = true,
          .norm_plus_one = true};
  const activation_options o{.micro_batch = 1, .sequence = 1024};
  const std::int64_t tokens = 1024;
  auto head_norm = [&](std::int64_t heads) {
    return 4 * tokens * heads * 256 * 2 + 4 * tokens * heads + 4 * 256;
  };
  const bytes with =
      layer_activation_bytes(m, pure<bf16>::value, o, {}, false, recompute_kind::none);
  m.qk_norm = false;
  CHECK(with - layer_activation_bytes(m, pure<bf16>::value, o, {}, false, recompute_kind::none) ==
        bytes{head_norm(4) + head_norm(1)});
}

TEST_CASE("a sliding window the sequence reaches: SDPA gets a mask, K and V repeat, by hand") {
  using namespace by_hand;
  // Mistral-7B's layer is Llama-3-8B's with a 4,096-token window. At 4,096 tokens Hugging Face
  // cannot leave the mask to is_causal, so it repeats K and V to all 32 heads (2 x 2 tau h, not
  // 2 x 2 tau kv d) and SDPA keeps the mask as a bf16 bias of b s^2; flash's other tensors stay:
  // Q 2 tau h, the output 2 tau h, the fp32 log-sum-exp 4 b H s.
  const model& m = models::mistral_7b::value;
  const std::int64_t attention = 2 * tau * h + 2 * 2 * tau * h + 2 * tau * h + 4 * b * H * s;
  const std::int64_t bias = 2 * b * s * s;
  const activation_options at_window{.micro_batch = b, .sequence = s};
  CHECK(attention_kernel(m, pure<bf16>::value, at_window) == attention_kind::sdpa);
  CHECK(layer_activation_bytes(m, pure<bf16>::value, at_window, {}, false, recompute_kind::none) ==
        bytes{norms + attention + bias + swiglu});
  // One token short of the window: no mask, grouped-query flash as Llama's.
  const activation_options under{.micro_batch = b, .sequence = s - 128};
  CHECK(attention_kernel(m, pure<bf16>::value, under) == attention_kind::flash);
  CHECK(layer_activation_bytes(m, pure<bf16>::value, under, {}, false, recompute_kind::none) ==
        layer_activation_bytes(models::llama_3_8b::value, pure<bf16>::value, under, {}, false,
                               recompute_kind::none));
  // In fp32 the mask's repeat lets the memory-efficient kernel run (not the math kernel that
  // grouped heads without a mask get): flash's tensors, in fp32.
  CHECK(attention_kernel(m, fp32_training::value, at_window) == attention_kind::sdpa);
  // The attention's backward returns dQ, dK and dV at the shapes it was given: K and V repeated
  // to 32 heads, 3 x 2 tau h in bf16; one token short of the window, grouped: (h + 2 kv d) 2 tau.
  // Before them, the incoming gradient: 2 tau h.
  CHECK(layer_backward_bytes(m, pure<bf16>::value, at_window, {}).attention ==
        bytes{4 * 2 * tau * h});
  CHECK(layer_backward_bytes(m, pure<bf16>::value, under, {}).attention ==
        bytes{(2 * h + 2 * kv * d) * 2 * (b * (s - 128))});
}

TEST_CASE("SDPA in fp32 with grouped-query heads runs the math kernel: eager's tensors, by hand") {
  using namespace by_hand;
  // No fp32 kernel of FlashAttention or cuDNN, and the memory-efficient one takes no GQA: the
  // math kernel saves Q scaled 4 tau h, K and V repeated to all 32 heads 2 x 4 tau h, the fp32
  // softmax 4 b H s^2 (no 16-bit copy in fp32), and the o_proj input 4 tau h. Norms and SwiGLU
  // as above, in fp32.
  const std::int64_t attention = 4 * tau * h + 2 * 4 * tau * h + 4 * b * H * s * s + 4 * tau * h;
  const std::int64_t fp32_norms = 2 * (4 * tau * h + 4 * tau + 4 * tau * h) + 2 * 4 * tau * h;
  const model& m = models::llama_3_8b::value;
  const activation_options o{.micro_batch = b, .sequence = s, .attention = attention_kind::flash};
  CHECK(attention_kernel(m, fp32_training::value, o) == attention_kind::eager);
  CHECK(layer_activation_bytes(m, fp32_training::value, o, {}, false, recompute_kind::none) ==
        bytes{fp32_norms + attention + 4 * tau * f * 4});
  // 16-bit inputs keep FlashAttention, as does fp32 without grouped heads (the memory-efficient
  // kernel: GPT-2), and Hugging Face's repeat_kv path (K and V already repeated).
  CHECK(attention_kernel(m, pure<bf16>::value, o) == attention_kind::flash);
  CHECK(attention_kernel(m, amp<bf16>::value, o) == attention_kind::flash);
  CHECK(attention_kernel(models::gpt2::value, fp32_training::value, o) == attention_kind::flash);
  CHECK(attention_kernel(m, fp32_training::value, {.attention = attention_kind::sdpa}) ==
        attention_kind::sdpa);
  // Measured on an H100 (torch 2.11, tests/validation/gpu/steps.jsonl): Qwen2.5-0.5B (14 heads,
  // 2 KV heads) in fp32 with SDPA peaks at the start of backward at 18,203,640,320 B with 2
  // sequences of 1,024 and 30,332,936,704 B with 4: 12,129,296,384 B for two sequences more.
  // With FlashAttention's tensors vramfit gave 25 % less; the math kernel's are within 1 %.
  const training t{models::qwen2_5_0_5b::value, fp32_training::value, adamw<>::value};
  auto step_peak = [&](std::int64_t sequences) {
    return peak(training_step(t, {.micro_batch = sequences, .sequence = 1024})).count;
  };
  const std::int64_t two_more = step_peak(4) - step_peak(2);
  CHECK(two_more == doctest::Approx(12'129'296'384).epsilon(0.01));
}

TEST_CASE("recompute policies never add activation memory") {
  const model& m = models::llama_3_8b::value;
  const training t{m, mixed<bf16>::value, adamw<>::value};
  for (attention_kind a : {attention_kind::eager, attention_kind::flash}) {
    activation_options o{.micro_batch = 1, .sequence = 2048, .attention = a};
    const bytes none = total(activations(t, o), component::activations);
    o.recompute = recompute_kind::selective;
    const bytes selective = total(activations(t, o), component::activations);
    o.recompute = recompute_kind::full;
    o.recompute_layers = 16;
    const bytes half = total(activations(t, o), component::activations);
    o.recompute_layers = -1;
    const bytes full = total(activations(t, o), component::activations);
    // Selective drops eager attention's scores and has nothing to drop under flash; full
    // recompute of half the layers keeps the other half whole.
    CHECK(selective <= none);
    CHECK((a == attention_kind::eager ? selective < none : selective == none));
    CHECK(half < none);
    CHECK(full < half);
  }
}

TEST_CASE("pipeline stages hold p - r micro-batches in 1F1B") {
  // 4 stages, 8 micro-batches: stage 0 holds 4 micro-batches of its 8 layers, stage 3 one.
  const model& m = models::llama_3_8b::value;
  const training t{m, mixed<bf16>::value, adamw<>::value, full_finetune::value,
                   parallel<pipeline_parallel<4>>::value};
  const activation_options o{.micro_batch = 1, .sequence = 2048, .micro_batches = 8};
  const bytes layer =
      layer_activation_bytes(m, mixed<bf16>::value, o, t.layout, false, recompute_kind::none);
  auto saved = [&](std::int64_t stage) {
    return size_of(activations(t, o, stage), entry_role::saved_activations);
  };
  CHECK(saved(0) == layer * 8 * 4);
  CHECK(saved(1) == layer * 8 * 3);
  CHECK(saved(3) == layer * 8 * 1);
  // GPipe keeps all 8; interleaved with 2 chunks keeps (4 + 8 - 1) / 2 chunks on stage 0.
  activation_options gpipe = o;
  gpipe.schedule = pipeline_schedule::gpipe;
  CHECK(micro_batches_in_flight(t.layout, gpipe, 3).num == 8);
  activation_options interleaved = o;
  interleaved.schedule = pipeline_schedule::interleaved;
  interleaved.virtual_stages = 2;
  const in_flight f = micro_batches_in_flight(t.layout, interleaved, 0);
  CHECK(f.num == 4 * (2 - 1) + 2 * 4 - 1);
  CHECK(f.den == 2);
}

TEST_CASE("interleaved: the embedding's chunk holds up to 2p micro-batches, the head's one") {
  // Megatron-Core, p = 4, v = 2, m = 8. Rank 0 runs chunk 0 of micro-batches 0-3, chunk 1 of 0-3,
  // chunk 0 of 4-6 before its first backward (chunk 1 of micro-batch 0), then chunk 0 of 7: 8 of
  // chunk 0 at once. Rank 3 runs chunks 0 of 0-3 before its first chunk-1 forward, whose backward
  // comes next: one micro-batch's final norm, head and loss at a time.
  const model& m = models::llama_3_8b::value;
  const training t{m, mixed<bf16>::value, adamw<>::value, full_finetune::value,
                   parallel<pipeline_parallel<4>>::value};
  activation_options o{.micro_batch = 1, .sequence = 2048, .micro_batches = 8};
  o.schedule = pipeline_schedule::interleaved;
  o.virtual_stages = 2;
  // Input ids, 8 B a token, for 8 micro-batches; bf16 cos and sin of 128 per token, per forward of
  // a chunk: (4 x 1 + 2 x 4 - 1) / 2 stages' worth.
  const std::int64_t tokens = 2048;
  CHECK(size_of(activations(t, o, 0), entry_role::embedding_inputs) ==
        bytes{8 * tokens * 8 + (2 * 128 * tokens * 2 * 11 + 1) / 2});
  const in_flight first = micro_batches_in_flight(t.layout, o, 0, model_chunk::first);
  CHECK((first.num == 8 && first.den == 1));
  o.micro_batches = 16;  // 2p of chunk 0 at most
  CHECK(micro_batches_in_flight(t.layout, o, 0, model_chunk::first).num == 8);
  // The head's tensors: those of the last stage under 1F1B, which holds one micro-batch (p - r).
  const memory_ledger head_stage = activations(t, o, 3);
  activation_options one_f_one_b = o;
  one_f_one_b.schedule = pipeline_schedule::one_f_one_b;
  one_f_one_b.virtual_stages = 1;
  const memory_ledger plain = activations(t, one_f_one_b, 3);
  auto head = [](const memory_ledger& l) {
    for (const memory_entry& e : l)
      if (e.lifetime == lifetime::until_head_backward) return e.size;
    return bytes{};
  };
  CHECK(head(plain) > bytes{});
  CHECK(head(head_stage) == head(plain));
  CHECK(micro_batches_in_flight(t.layout, o, 3, model_chunk::last).num == 1);
}

TEST_CASE("the step's peak is the largest moment, not a sum of maxima") {
  // PyTorch without accumulation: gradients appear in backward as activations are freed. The
  // peak is the start of backward (all activations + the logits' gradient), not weights +
  // gradients + activations.
  const model& m = models::llama_3_8b::value;
  const training t{m, amp<bf16>::value, adamw<>::value};
  const activation_options o{.micro_batch = 4, .sequence = 4096};
  const timed_ledger step = training_step(t, o);
  const bytes persistent_states = total(step.entries, component::weights) - bytes{} +
                                  total(step.entries, component::optimizer_states);
  const bytes gradients = total(step.entries, component::gradients);
  const bytes acts = total(step.entries, component::activations);
  CHECK(peak(step) < persistent_states + gradients + acts);
  CHECK(peak(step) >= persistent_states);
  // With gradient accumulation the gradients persist and coexist with the activations.
  activation_options accumulate = o;
  accumulate.micro_batches = 4;
  CHECK(peak(training_step(t, accumulate)) > peak(step));
}

TEST_CASE("bad batch shapes are errors") {
  const training t{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value};
  CHECK_THROWS_WITH(activations(t, {.micro_batch = 0}),
                    "vramfit: micro-batch must be positive, got 0");
  CHECK_THROWS_WITH(activations(t, {.sequence = -5}),
                    "vramfit: sequence length must be positive, got -5");
  const training cp{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value,
                    full_finetune::value, parallel<context_parallel<3>>::value};
  CHECK_THROWS_WITH(activations(cp, {.sequence = 4096}),
                    doctest::Contains("context parallel degree 3 must divide"));
}

TEST_CASE("eager attention's causal mask lives during forward only") {
  // Hugging Face's additive mask [b, 1, s, s] in bf16: 2 x 4096 x 4096 x 2 bytes; the add that
  // uses it saves nothing, so it is freed before backward and counts only at the end of forward.
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  const activation_options o{
      .micro_batch = 2, .sequence = 4096, .attention = attention_kind::eager};
  bool found = false;
  for (const memory_entry& e : activations(t, o)) {
    if (std::string(e.name) == "causal attention mask (eager)") {
      found = true;
      CHECK(e.size == bytes{2LL * 4096 * 4096 * 2});
      CHECK(e.lifetime == lifetime::forward);
    }
  }
  CHECK(found);
}

TEST_CASE(
    "Hugging Face's loss: the logits live during the loss, the log-probabilities until its "
    "backward") {
  // Llama-3-8B in bf16, one sequence of 1,024 tokens, vocabulary 128,256 (transformers
  // loss_utils ForCausalLMLoss: logits.float(), then cross_entropy).
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  const activation_options o{.micro_batch = 1, .sequence = 1024};
  const std::int64_t logits = 1024LL * 128256;
  auto entry = [&](const char* name) {
    for (const memory_entry& e : activations(t, o))
      if (std::string(e.name) == name) return e;
    FAIL("no entry " << name);
    return memory_entry{};
  };
  // The bf16 logits and their fp32 copy, 2 + 4 bytes each, freed when the loss returns.
  const memory_entry alive = entry("logits (loss forward)");
  CHECK(alive.size == bytes{logits * 6});
  CHECK(alive.lifetime == lifetime::forward);
  // Kept for the head's backward: the final RMSNorm's fp32 input, rstd and normalized input,
  // the head's bf16 input, the int64 labels and log_softmax's fp32 output.
  const memory_entry kept = entry("final norm, head input and loss");
  CHECK(kept.size == bytes{1024LL * 4096 * 4 + 1024 * 4 + 1024LL * 4096 * 2 + 1024LL * 4096 * 2 +
                           1024 * 8 + logits * 4});
  CHECK(kept.lifetime == lifetime::until_head_backward);
  // nll_loss's and log_softmax's fp32 gradients, at once, before any layer's backward.
  const memory_entry gradient = entry("logits gradient");
  CHECK(gradient.size == bytes{logits * 8});
  CHECK(alive_at(gradient, moment::start_of_backward));
  CHECK_FALSE(alive_at(gradient, moment::layer_backward));
  CHECK_FALSE(alive_at(kept, moment::layer_backward));
  // A layer's backward (and a recompute) starts after the loss's gradients are freed.
  const memory_entry layer = entry("activation gradients (one layer)");
  CHECK(alive_at(layer, moment::layer_backward));
  CHECK_FALSE(alive_at(layer, moment::start_of_backward));
}

TEST_CASE("the sequence a model can take, and the one it takes by default") {
  // GPT-2's wpe has 1024 rows, BERT's position_embeddings 512; ViT-L/16 sees (224 / 16)^2 + 1.
  CHECK(default_sequence(models::gpt2::value) == 1024);
  CHECK(default_sequence(models::bert_base_uncased::value) == 512);
  CHECK(default_sequence(models::vit_l_16::value) == 197);
  CHECK(default_sequence(models::llama_3_8b::value) == 2048);
  const training gpt2{models::gpt2::value, pure<bf16>::value, adamw<>::value};
  CHECK_THROWS_WITH(activations(gpt2, {.sequence = 1025}),
                    "vramfit: GPT-2 (124M)'s learned position table has 1024 rows: a sequence of "
                    "1025 tokens indexes past it");
  CHECK(total(activations(gpt2, {.sequence = 1024}), component::activations) > bytes{});
  const training vit{models::vit_l_16::value, pure<bf16>::value, adamw<>::value};
  CHECK_THROWS_WITH(activations(vit, {.sequence = 2048}),
                    doctest::Contains("sees 197 tokens per image"));
  CHECK_THROWS_WITH(kv_cache_bytes(models::gpt2::value, {}, {}, {.prompt = 1000, .generated = 25}),
                    doctest::Contains("a sequence of 1025 tokens indexes past it"));
}

TEST_CASE("torchtitan's per-layer SAC: every Nth layer recomputed") {
  // selective_ac_option "2" wraps blocks 2, 4, ... (1-based): 16 of Llama-3-8B's 32 layers, the
  // same bytes as the first 16 since its layers are alike; 5 of 32 for N = 6.
  const activation_options every{.recompute = recompute_kind::full, .recompute_every = 2};
  CHECK(checkpointed_layers(every, 32) == 16);
  CHECK(checkpointed_layers({.recompute = recompute_kind::full, .recompute_every = 6}, 32) == 5);
  const training t{models::llama_3_8b::value, pure<bf16>::value, sgd<>::value};
  activation_options first = every;
  first.recompute_every = 0;
  first.recompute_layers = 16;
  CHECK(peak(training_step(t, every)) == peak(training_step(t, first)));
  activation_options bad = every;
  bad.recompute_layers = 3;
  CHECK_THROWS_WITH(activations(t, bad),
                    "vramfit: recomputing one layer in every 2 is full recompute: give it with "
                    "recompute full and no layer count");
}

TEST_CASE("torchtune's chunked losses: every chunk's fp32 log-probabilities are saved") {
  // Llama-3-8B in bf16, 2 sequences of 1,024 tokens split into 8 chunks of 128 tokens
  // (torchtune modules/loss: CEWithChunkedOutputLoss, LinearCrossEntropyLoss).
  const std::int64_t logits = 2048LL * 128256, chunk = 2 * 128LL * 128256;
  const bytes head_norm_and_labels{2048LL * 4096 * 4 + 2048 * 4 + 2048LL * 4096 * 2 +
                                   2048LL * 4096 * 2 + 2048 * 8};
  for (const loss_kind loss : {loss_kind::chunked_output, loss_kind::linear_chunked}) {
    CAPTURE(static_cast<int>(loss));
    const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
    const memory_ledger l =
        activations(t, activation_options{.micro_batch = 2, .sequence = 1024, .loss = loss});
    auto size = [&](const char* name) {
      for (const memory_entry& e : l)
        if (std::string(e.name) == name) return e.size;
      return bytes{};
    };
    // Kept for backward: what Hugging Face's loss keeps, log_softmax's fp32 output of all chunks.
    CHECK(size("final norm, head input and loss") == head_norm_and_labels + bytes{logits * 4});
    // During the loss: all bf16 logits (CEWithChunkedOutputLoss receives them) or one chunk's
    // (LinearCrossEntropyLoss applies the head per chunk), and one chunk's fp32 copy.
    CHECK(size("logits (loss forward)") ==
          bytes{(loss == loss_kind::chunked_output ? logits : chunk) * 2 + chunk * 4});
    // Backward, one chunk at a time: nll_loss's and log_softmax's fp32 gradients.
    CHECK(size("logits gradient") == bytes{chunk * 8});
  }
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  CHECK_THROWS_WITH(
      activations(t, activation_options{.loss = loss_kind::linear_chunked, .loss_chunks = 0}),
      doctest::Contains("loss chunks must be positive, got 0"));
}

TEST_CASE("Megatron's vocab-parallel cross-entropy: one fp32 softmax, the gradient made in it") {
  // Llama-3-8B in bf16, 2 x 1,024 tokens: logits [2,048, 128,256]. Megatron-Core
  // tensor_parallel/cross_entropy.py: .float() copies the bf16 logits, max subtraction, exp and
  // division run in place on the copy, which is saved; backward writes the gradient into it, and
  // the engine casts that to bf16 for the output layer.
  const std::int64_t logits = 2048LL * 128256;
  const bytes head_norm_and_labels{2048LL * 4096 * 4 + 2048 * 4 + 2048LL * 4096 * 2 +
                                   2048LL * 4096 * 2 + 2048 * 8};
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  const activation_options o{.micro_batch = 2, .sequence = 1024, .loss = loss_kind::vocab_parallel};
  const memory_ledger l = activations(t, o);
  auto size = [&](const char* name) {
    for (const memory_entry& e : l)
      if (std::string(e.name) == name) return e.size;
    return bytes{};
  };
  CHECK(size("final norm, head input and loss") == head_norm_and_labels + bytes{logits * 4});
  CHECK(size("logits (loss forward)") == bytes{logits * 2});  // the copy is the saved softmax
  CHECK(size("logits gradient") == bytes{logits * 2});        // the cast, no fp32 gradients
  // In backward the cast comes first, then the softmax goes, then the output layer's gradients.
  std::vector<std::pair<std::string, std::int64_t>> order;
  for (const timeline_event& e : step_timeline_of(t, o).events)
    if (e.phase == step_phase::backward && e.first_layer < 0 && order.size() < 3)
      order.emplace_back(e.what, e.delta.count);
  using entry = std::pair<std::string, std::int64_t>;
  CHECK(order == std::vector<entry>{{"logits gradient (cast to the logits' format)", logits * 2},
                                    {"softmax (the logits gradient, in place)", -logits * 4},
                                    {"head and final norm gradients", 128256LL * 4096 * 2}});
  // In fp32 the copy is the logits themselves, and the gradient needs no cast.
  const training fp32_step{models::llama_3_8b::value, fp32_training::value, adamw<>::value};
  const memory_ledger f = activations(fp32_step, o);
  for (const memory_entry& e : f) {
    CHECK(std::string(e.name) != "logits (loss forward)");
    CHECK(std::string(e.name) != "logits gradient");
  }
}

TEST_CASE("GPT-2's gelu_new and its eager softmax under autocast, tensor by tensor") {
  // One GPT-2 layer, 1 x 1,024 tokens, no dropout: the MLP's [1,024, 3,072] intermediates and
  // the [1, 12, 1,024, 1,024] attention scores.
  const std::int64_t n = 1024LL * 3072, scores = 12LL * 1024 * 1024;
  model m = models::gpt2::value;
  m.dropout = false;
  const activation_options o{
      .micro_batch = 1, .sequence = 1024, .attention = attention_kind::eager};
  auto bytes_of = [&](const precision& p, const char* name) {
    for (const saved_tensor& s : layer_saved_tensors(m, p, o, layout{}))
      if (std::string(s.name) == name) return s.size;
    return bytes{};
  };
  // Under autocast pow keeps an fp32 copy of its input, tanh and 1 + tanh are fp32, 0.5 x and the
  // down projection's input bf16 (transformers NewGELUActivation; autocast's fp32 list).
  const precision mixed16 = amp<bf16>::value;
  CHECK(bytes_of(mixed16, "GELU input (kept by pow)") == bytes{4 * n});
  CHECK(bytes_of(mixed16, "GELU tanh output") == bytes{4 * n});
  CHECK(bytes_of(mixed16, "GELU 1 + tanh") == bytes{4 * n});
  CHECK(bytes_of(mixed16, "GELU 0.5 x") == bytes{2 * n});
  CHECK(bytes_of(mixed16, "GELU output (down input)") == bytes{2 * n});
  // Softmax runs in fp32 under autocast and .type(value.dtype) keeps a bf16 copy for P x V.
  CHECK(bytes_of(mixed16, "attention softmax output") == bytes{4 * scores});
  CHECK(bytes_of(mixed16, "attention probabilities (16-bit copy)") == bytes{2 * scores});
  // In fp32 all five GELU tensors are fp32 and the softmax output is the only copy.
  const precision single = fp32_training::value;
  CHECK(bytes_of(single, "GELU 0.5 x") == bytes{4 * n});
  CHECK(bytes_of(single, "attention softmax output") == bytes{4 * scores});
  CHECK(bytes_of(single, "attention probabilities (16-bit copy)") == bytes{});
  // A fused GELU (Korthikanti's accounting, gelu_in_python off) keeps its input and output only.
  m.gelu_in_python = false;
  CHECK(bytes_of(single, "MLP up/gate output") == bytes{4 * n});
  CHECK(bytes_of(single, "GELU tanh output") == bytes{});
}

TEST_CASE("a reentrant checkpoint holds the layer output's gradient through the layer's backward") {
  // torch/utils/checkpoint.py CheckpointFunction.backward keeps its grad argument until the inner
  // torch.autograd.backward returns: one more [b, s, h] tensor in the residual stream's format
  // (fp32 under AMP): 2 x 64 x 128 x 4 B. Traced: the same steps with use_reentrant True and
  // False peak 65,536 B apart in backward (tests/validation/step_traces.json).
  const model m{.name = "ckpt",
                .hidden = 128,
                .layers = 3,
                .heads = 4,
                .kv_heads = 2,
                .head_dim = 32,
                .ffn = 352,
                .vocab = 1024};
  const training t{m, amp<bf16>::value,
                   adamw<optimizer_options{.impl = optimizer_impl::fused}>::value};
  activation_options o{.micro_batch = 2,
                       .sequence = 64,
                       .attention = attention_kind::eager,
                       .recompute = recompute_kind::full};
  auto backward_peak = [&] {
    bytes most{};
    for_each_event(step_timeline_of(t, o), 1000,
                   [&](const timeline_event& e, std::size_t, std::int64_t, bytes alive) {
                     if (e.phase == step_phase::backward && alive > most) most = alive;
                   });
    return most;
  };
  const bytes reentrant = backward_peak();
  o.reentrant_checkpoint = false;
  CHECK(reentrant - backward_peak() == bytes{2 * 64 * 128 * 4});
}

TEST_CASE("one layer's backward working sets, by hand") {
  const layout one{};
  // Llama-3-8B, bf16, 1 x 2048 tokens: SwiGLU's backward holds the gradient of the down
  // projection's input and the two products of its mul (n = 2048 x 14336, 2 B each).
  const model& llama = models::llama_3_8b::value;
  const activation_options flash{.micro_batch = 1, .sequence = 2048};
  const std::int64_t n = 2048LL * 14336;
  CHECK(layer_backward_bytes(llama, pure<bf16>::value, flash, one).mlp == bytes{3 * 2 * n});
  // Flash attention: its incoming gradient (32 heads of 128), dQ, dK and dV (32 + 2 x 8 heads).
  CHECK(layer_backward_bytes(llama, pure<bf16>::value, flash, one).attention ==
        bytes{2048LL * (32 + 32 + 16) * 128 * 2});
  // Eager attention: the fp32 softmax's gradient, its backward output and the kernel's buffer,
  // each 32 heads x 2048 x 2048 x 4 B (Llama upcasts the softmax).
  activation_options eager = flash;
  eager.attention = attention_kind::eager;
  CHECK(layer_backward_bytes(llama, pure<bf16>::value, eager, one).attention ==
        bytes{3 * 32LL * 2048 * 2048 * 4});
  // GPT-2's gelu_new in Python over n = 1024 x 3072: the incoming gradient, two products of it
  // (fp32 in fp32 and under autocast, which adds the 16-bit cast of the result), in bf16 three.
  const model& gpt2 = models::gpt2::value;
  const activation_options g{.micro_batch = 1, .sequence = 1024};
  const std::int64_t m = 1024LL * 3072;
  CHECK(layer_backward_bytes(gpt2, fp32_training::value, g, one).mlp == bytes{12 * m});
  CHECK(layer_backward_bytes(gpt2, amp<bf16>::value, g, one).mlp == bytes{(3 * 4 + 2) * m});
  CHECK(layer_backward_bytes(gpt2, pure<bf16>::value, g, one).mlp == bytes{3 * 2 * m});
  // A fused GELU (gelu_backward): its input gradient and output.
  model fused = gpt2;
  fused.gelu_in_python = false;
  CHECK(layer_backward_bytes(fused, pure<bf16>::value, g, one).mlp == bytes{2 * 2 * m});
}

TEST_CASE("a tied embedding's gradient comes with the head's, position embeddings' at the end") {
  // GPT-2, fp32: the head's gradient is wte's (50257 x 768 x 4 B), held by the autograd engine
  // through the layers' backward; wpe's (1024 x 768 x 4 B) is made by the embedding backward.
  const training t{models::gpt2::value, fp32_training::value, sgd<>::value};
  const step_timeline tl = step_timeline_of(t, {.micro_batch = 1, .sequence = 1024});
  bytes head{}, positions{}, added{};
  std::vector<bytes> head_tensors;  // one event each, in backward's order
  std::vector<bytes> summed;        // the engine's out-of-place sum, then the head's gone
  for (const timeline_event& e : tl.events) {
    const std::string what = e.what;
    if (what == "head and final norm gradients") {
      head += e.delta;
      head_tensors.push_back(e.delta);
    }
    if (what == "embedding gradients") positions = e.delta;
    if (what == "embedding gradient (added into the tied head's)" && e.delta > bytes{})
      added = e.delta;
    if (what == "tied gradient: the head's plus the embedding's") summed.push_back(e.delta);
  }
  CHECK(head == bytes{50257LL * 768 * 4 + 2 * 768 * 4});  // with ln_f's weight and bias
  CHECK(head_tensors ==
        std::vector<bytes>{bytes{50257LL * 768 * 4}, bytes{768 * 4}, bytes{768 * 4}});
  CHECK(positions == bytes{1024LL * 768 * 4});
  CHECK(added == bytes{50257LL * 768 * 4});
  CHECK(summed == std::vector<bytes>{bytes{50257LL * 768 * 4}, -bytes{50257LL * 768 * 4}});
}

TEST_CASE("the residual stream's gradient lives from the head's backward to the embeddings'") {
  // One [b, s, h] tensor in the stream's format: under AMP fp32 (BERT's LayerNorm outputs fp32),
  // in bf16 2 B; with sequence parallelism each rank holds 1/TP of the tokens. BERT-base, 1 x 128
  // tokens: 128 x 768 x 4 B (the traced BERT step: its output LayerNorm's backward output is
  // freed 30 events later by the add after the MLP's backward, docs/timeline.md).
  const model& bert = models::bert_base_uncased::value;
  const activation_options o{.micro_batch = 1, .sequence = 128};
  CHECK(layer_backward_bytes(bert, amp<bf16>::value, o, {}).stream_gradient ==
        bytes{128 * 768 * 4});
  CHECK(layer_backward_bytes(bert, pure<bf16>::value, o, {}).stream_gradient ==
        bytes{128 * 768 * 2});
  const layout tp_sp{.tensor = 4, .sequence = true};
  CHECK(
      layer_backward_bytes(models::llama_3_8b::value, pure<bf16>::value, {.sequence = 2048}, tp_sp)
          .stream_gradient == bytes{2048 / 4 * 4096 * 2});
  // In the step: made after the head's gradients, when the head's weight copies (BERT's pooler
  // and classifier, saved by their linears for the input gradient) go; freed as the embeddings'
  // backward starts, after every layer's.
  const training t{bert, amp<bf16>::value, adamw<>::value};
  const step_timeline tl = step_timeline_of(t, o);
  std::vector<std::pair<std::string, std::int64_t>> order;
  for (const timeline_event& e : tl.events) {
    const std::string what = e.what;
    if (e.micro_batch == 0 && e.phase == step_phase::backward &&
        (what == "residual stream gradient" || what == "head weight copies" ||
         what == "MLP output linear: weight gradients" || what == "embedding gradients"))
      order.emplace_back(what, e.delta.count > 0 ? 1 : -1);
  }
  REQUIRE(order.size() >= 5);
  CHECK(order[0] == std::pair<std::string, std::int64_t>{"residual stream gradient", 1});
  CHECK(order[1] == std::pair<std::string, std::int64_t>{"head weight copies", -1});
  CHECK(order[2].first == "MLP output linear: weight gradients");
  CHECK(order[order.size() - 2] ==
        std::pair<std::string, std::int64_t>{"residual stream gradient", -1});
  CHECK(order.back().first == "embedding gradients");
}

TEST_CASE("autocast's copy of ViT's patch convolution weight lives from forward to its backward") {
  // ViT-L/16 under AMP: conv2d is on autocast's lower-precision list, so conv_proj's weight
  // (1,024 x 3 x 16 x 16) gets a cached bf16 copy, which the convolution saves for its input
  // gradient (the traced ViT AMP step holds it at its peak in layer 2's backward).
  const training t{models::vit_l_16::value, amp<bf16>::value, adamw<>::value};
  const step_timeline tl = step_timeline_of(t, {.micro_batch = 1, .sequence = 197});
  std::vector<std::pair<step_phase, std::int64_t>> copies;
  for (const timeline_event& e : tl.events)
    if (std::string(e.what) == "embedding weight copies")
      copies.emplace_back(e.phase, e.delta.count);
  const std::int64_t copy = 1024LL * 3 * 16 * 16 * 2;
  CHECK(copies == std::vector<std::pair<step_phase, std::int64_t>>{{step_phase::forward, copy},
                                                                   {step_phase::backward, -copy}});
  // In bf16 there is no autocast, so no copy.
  const training bf16_run{models::vit_l_16::value, pure<bf16>::value, adamw<>::value};
  for (const timeline_event& e : step_timeline_of(bf16_run, {.sequence = 197}).events)
    CHECK(std::string(e.what) != "embedding weight copies");
}

TEST_CASE("the loss's backward runs in autograd's order, tensor by tensor, by hand") {
  // Llama-3-8B, bf16, 1 x 1,024 tokens: L = 1,024 x 128,256 logits. Hugging Face's loss upcasts
  // the bf16 logits (2L B) to fp32 (4L B) and cross_entropy saves its log-probabilities (4L B).
  // Backward (traced on an H200, docs/gpu-measurements.md): nll_loss's gradient, log_softmax's,
  // the first freed and the log-probabilities with it, the cast's 16-bit gradient (2L B) while
  // log_softmax's lives, then lm_head's weight gradient (V x h x 2 B) and the norm's (h x 2 B)
  // before the 16-bit gradient goes, and last the norm's and head's inputs with the labels:
  // fp32 norm input 4 tau h, rstd 4 tau, normalized 2 tau h, head input 2 tau h, labels 8 tau.
  constexpr std::int64_t tau = 1024, h = 4096, V = 128256, L = tau * V;
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  const step_timeline tl = step_timeline_of(t, {.micro_batch = 1, .sequence = tau});
  std::vector<std::pair<std::string, std::int64_t>> loss_backward;
  bool in = false;
  for (const timeline_event& e : tl.events) {
    const std::string what = e.what;
    in = in || (what == "loss gradients" && e.micro_batch == 0);
    if (in) loss_backward.emplace_back(what, e.delta.count);
    if (in && what == "final norm and head input") break;
  }
  const std::vector<std::pair<std::string, std::int64_t>> expected{
      {"loss gradients", 4 * L},
      {"loss gradients", 4 * L},
      {"loss gradients", -4 * L},
      {"log-probabilities", -4 * L},
      {"logits gradient (16-bit)", 2 * L},
      {"loss gradients", -4 * L},
      {"head and final norm gradients", V * h * 2},
      {"head and final norm gradients", h * 2},
      {"logits gradient (16-bit)", -2 * L},
      {"final norm and head input", -(8 * tau * h + 12 * tau)}};
  CHECK(loss_backward == expected);
}

TEST_CASE("eager attention's backward frees each saved tensor after the op that last reads it") {
  // Llama-3-8B cut to 2 layers, bf16, 1 x 4,096 tokens, eager: S = 32 heads x 4,096 x 4,096
  // scores. Traced on an H200 (tests/validation/gpu/h200/traces/steps1-3_llama3-8b-2l_bf16_adamw_
  // b1s4096_eager.json, events 1624-1662 of step 2): the value matmul's V gradient (V B, event
  // 1627, freed at 1662 after the core: it waits) and 16-bit score gradient (2S B) come before its
  // inputs go (the bf16 probabilities 2S B and V repeated to 32 heads, 4,096 x 4,096 x 2 B) and
  // o_proj's input gradient (V B, allocated at 1624, before o_proj's input goes) goes; the
  // softmax's fp32 gradient (4S B) is cast from the score gradient, which then goes; the softmax
  // backward's output and its kernel's buffer (4S B each); the fp32 gradient and the saved softmax
  // output (4S B) go, the gradient cast back (2S B) and scaled (2S B) come, then the softmax
  // backward's own go. From the free of o_proj's input to the core's peak: 5,088 MiB.
  constexpr std::int64_t S = 32LL * 4096 * 4096, V = 4096LL * 4096 * 2;
  model m = models::llama_3_8b::value;
  m.layers = 2;
  const training t{m, pure<bf16>::value, adamw<>::value};
  const activation_options o{
      .micro_batch = 1, .sequence = 4096, .attention = attention_kind::eager};
  const step_timeline tl = step_timeline_of(t, o);
  std::vector<std::pair<std::string, std::int64_t>> core;
  bool in = false;
  for (const timeline_event& e : tl.events) {
    const std::string what = e.what;
    if (e.phase != step_phase::backward) continue;
    if (what == "attention weight gradients") break;
    if (in) core.emplace_back(what, e.delta.count);
    in = in || what == "attention output linear: weight copy freed" ||
         what == "attention output linear: input freed";
  }
  const std::vector<std::pair<std::string, std::int64_t>> expected{
      {"attention value matmul: V gradient (waits through the core)", V},
      {"attention value matmul: score gradient", 2 * S},
      {"attention value matmul: inputs freed", -(2 * S + V)},
      {"attention output linear: input gradient", -V},
      {"attention backward working set", 4 * S},
      {"attention value matmul: score gradient", -2 * S},
      {"attention backward working set", 8 * S},
      {"attention backward working set", -4 * S},
      {"attention softmax: output freed", -4 * S},
      {"attention scores: gradients cast and scaled", 4 * S},
      {"attention backward working set", -8 * S},
      {"attention scores: gradients cast and scaled", -4 * S},
      {"attention value matmul: V gradient (waits through the core)", -V}};
  CHECK(core == expected);
  std::int64_t rise = 0, most = 0;
  for (const auto& [what, delta] : core) most = std::max(most, rise += delta);
  CHECK(most == 5088LL << 20);
  // The step's peak is the loss's, as measured (tests/validation/gpu/steps.jsonl:
  // llama3-8b-2l/bf16/adamw/b1s4096/eager peaks at the start of backward).
  CHECK(training_step(t, o).peak_at == moment::start_of_backward);
  // SDPA keeps no scores: none of these events.
  const step_timeline flash = step_timeline_of(t, {.micro_batch = 1, .sequence = 4096});
  for (const timeline_event& e : flash.events)
    CHECK(std::string(e.what).find("attention value matmul") == std::string::npos);
}

TEST_CASE("SDPA's backward frees Q, K, V, its output and log-sum-exp as it ends") {
  // Llama-3-8B cut to 2 layers, bf16, 1 x 8,192 tokens, SDPA. Traced on an H200
  // (tests/validation/gpu/h200/traces/step1_llama3-8b-2l_bf16_adamw_b1s8192_sdpa.json): the
  // second layer's SDPA output (event 217, 64 MiB) is o_proj's input with no copy (event 222 is
  // o_proj's output), and after the flash backward's workspace (477-479) go K (16 MiB), Q (64 MiB),
  // V (16 MiB), the log-sum-exp (1 MiB) and that output (events 483-491), before the rotary's
  // and the projections' backward.
  constexpr std::int64_t mebibyte = 1 << 20;
  model m = models::llama_3_8b::value;
  m.layers = 2;
  const training t{m, pure<bf16>::value, adamw<>::value};
  std::int64_t core = 0, out = 0;
  for (const timeline_event& e : step_timeline_of(t, {.micro_batch = 1, .sequence = 8192}).events) {
    const std::string what = e.what;
    if (e.phase != step_phase::backward) continue;
    if (what == "attention SDPA: its inputs and output freed") core += e.delta.count;
    if (what == "attention output linear: input freed") out += e.delta.count;
    if (what == "attention weight gradients") break;  // the last layer's half only
  }
  CHECK(core == -(64 + 16 + 16 + 64 + 1) * mebibyte);
  CHECK(out == 0);  // o_proj's backward drops a reference, not the memory
}

TEST_CASE("a fused attention's backward: its incoming gradient, dQ, dK, dV and its workspace") {
  // The same trace, the second layer's attention half (events 472-480): o_proj's weight gradient
  // (32 MiB), its input gradient, which SDPA's backward reads (64 MiB), dQ (64 MiB), dK and dV
  // (16 MiB each), then cuDNN's workspace of 269,484,288 B allocated and freed, then the incoming
  // gradient freed. The workspace is dQ's fp32 accumulator (8,192 x 32 x 128 x 4 B), the fp32
  // row sums (8,192 x 32 x 4 B), and dK and dV at all 32 query heads in bf16 (2 x 8,192 x 32 x
  // 128 x 2 B), and 256 B of the engine's own, not modelled.
  constexpr std::int64_t mebibyte = 1 << 20;
  model m = models::llama_3_8b::value;
  m.layers = 2;
  const training t{m, pure<bf16>::value, adamw<>::value};
  std::vector<std::pair<std::string, std::int64_t>> events;
  for (const timeline_event& e : step_timeline_of(t, {.micro_batch = 1, .sequence = 8192}).events) {
    const std::string what = e.what;
    if (e.phase != step_phase::backward || what.rfind("MLP", 0) == 0) continue;
    if (what == "attention SDPA: its inputs and output freed") break;
    events.emplace_back(what, e.delta.count);
  }
  const std::int64_t workspace = 269'484'288 - 256;
  const std::vector<std::pair<std::string, std::int64_t>> expected{
      {"attention output linear: weight gradients", 32 * mebibyte},
      {"attention backward working set", 64 * mebibyte},  // o_proj's input gradient
      {"attention backward working set", 96 * mebibyte},  // dQ, dK, dV
      {"attention kernel: backward workspace", workspace},
      {"attention kernel: backward workspace", -workspace},
      {"attention backward working set", -64 * mebibyte}};
  CHECK(std::vector(events.end() - 6, events.end()) == expected);
  // The other traced workspaces, less the engine's 256 B (tests/validation/gpu: h200/traces at
  // events 471, 2630; traces/ at 2853, 1153): Llama at 1,024 tokens; Qwen2.5-0.5B (14 heads of
  // 64, 2 K/V heads) at 2 x 4,096 and 2 x 1,024 tokens; GPT-2 (12 heads of 64, no grouping: no
  // full-head dK and dV) at 4 x 1,024 tokens under fp16 autocast.
  const auto workspace_of = [](const model& x, const precision& p, std::int64_t batch,
                               std::int64_t sequence) {
    return layer_backward_bytes(x, p, {.micro_batch = batch, .sequence = sequence}, {})
        .attention_workspace;
  };
  CHECK(workspace_of(m, pure<bf16>::value, 1, 1024) == bytes{33'685'760 - 256});
  const model& qwen = models::qwen2_5_0_5b::value;
  CHECK(workspace_of(qwen, pure<bf16>::value, 2, 4096) == bytes{59'179'264 - 256});
  CHECK(workspace_of(qwen, amp<bf16>::value, 2, 1024) == bytes{14'795'008 - 256});
  CHECK(workspace_of(models::gpt2::value, amp<fp16>::value, 4, 1024) == bytes{12'779'776 - 256});
  // fp32 runs the memory-efficient kernel, whose workspace is not modelled; eager has none.
  CHECK(workspace_of(models::gpt2::value, fp32_training::value, 4, 1024) == bytes{});
  CHECK(layer_backward_bytes(m, pure<bf16>::value,
                             {.sequence = 1024, .attention = attention_kind::eager}, {})
            .attention_workspace == bytes{});
}

TEST_CASE(
    "an MLP's product or activation frees its inputs after its backward; a gate output later") {
  // Llama-3-8B cut to 2 layers, bf16, 1 x 4,096 tokens: each MLP tensor is 4,096 x 14,336 x 2 B
  // (F). After down_proj's input goes: its input gradient (F), the product's two factor
  // gradients (2F: mul_backward), the incoming gradient freed; then the factors it read last (the
  // activation's and up_proj's outputs, 2F), then the working gradients. The gate output, the
  // activation's input, stays to the half's end: up_proj's backward runs before the activation's
  // (tests/validation/mlp_backward_order.py). litgpt's activation runs after up_proj's forward,
  // so its backward comes first and the gate output goes with the factors (3F).
  constexpr std::int64_t F = 4096LL * 14336 * 2;
  model m = models::llama_3_8b::value;
  m.layers = 2;
  const training t{m, pure<bf16>::value, adamw<>::value};
  const auto mlp_half = [&](model_code code) {
    std::vector<std::pair<std::string, std::int64_t>> events;
    bool in = false;
    for (const timeline_event& e :
         step_timeline_of(t, {.micro_batch = 1, .sequence = 4096, .code = code}).events) {
      const std::string what = e.what;
      if (e.phase != step_phase::backward) continue;
      if (what == "MLP weight gradients") break;
      if (in) events.emplace_back(what, e.delta.count);
      in = in || what == "MLP output linear: input freed";
    }
    return events;
  };
  for (const auto& [code, factors] :
       {std::pair{model_code::hf, 2 * F}, std::pair{model_code::litgpt, 3 * F}}) {
    const std::vector<std::pair<std::string, std::int64_t>> expected{
        {"MLP backward working set", F},
        {"MLP backward working set", 2 * F},
        {"MLP backward working set", -F},
        {"MLP product or activation: inputs freed", -factors},
        {"MLP backward working set", -2 * F}};
    CHECK(mlp_half(code) == expected);
  }
  // A GELU MLP's working set is gelu_backward's: DistilBERT's up output (its input, 512 x 3,072
  // x 2 B) goes with it, before the weight gradients.
  model bert = models::distilbert_base_uncased::value;
  bert.layers = 2;
  bool freed = false;
  for (const timeline_event& e : step_timeline_of(training{bert, pure<bf16>::value, adamw<>::value},
                                                  {.micro_batch = 1, .sequence = 512})
                                     .events) {
    const std::string what = e.what;
    if (what == "MLP weight gradients") break;
    if (what != "MLP product or activation: inputs freed") continue;
    CHECK(e.delta.count == -512 * 3072 * 2);
    freed = true;
  }
  CHECK(freed);
}

TEST_CASE("Gemma 2's layer by hand, as traced (tests/validation/step_traces.json)") {
  // The traced shape: hidden 128, 4 heads of 48 (2 KV heads), GeGLU of 352, bf16, 2 x 64 tokens
  // (tau = 128), eager attention, soft-capped. Each of the four Gemma2RMSNorms keeps its fp32
  // input 4 tau h, rstd 4 tau, the fp32 product's input 4 tau h and its fp32 (1 + weight) 4h
  // (modeling_gemma2.py Gemma2RMSNorm.forward); the attention's and the MLP's inputs 2 tau h
  // each; Q and K, V repeated to 4 heads 3 x 2 tau 192; the tanh of the soft-capped scores 2S,
  // the fp32 softmax 4S and its bf16 copy 2S (S = 2 x 4 x 64 x 64); o_proj's input 2 tau 192;
  // the MLP's four 2 tau 352. The trace's per-layer total is 1,413,120 B, with SDPA 1,104,896.
  constexpr std::int64_t tau = 128, h = 128, S = 2 * 4 * 64 * 64;
  model m = models::gemma_2_2b::value;  // (1 + weight) norms, GeGLU, soft-capping, windows
  m.hidden = h;
  m.layers = 3;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 48;
  m.ffn = 352;
  m.vocab = 1024;
  const std::int64_t norms = 4 * (4 * tau * h + 4 * tau + 4 * tau * h + 4 * h);
  const std::int64_t eager = norms + 2 * 2 * tau * h + 3 * 2 * tau * 192 + (2 + 4 + 2) * S +
                             2 * tau * 192 + 4 * 2 * tau * 352;
  CHECK(eager == 1'413'120);
  activation_options o{.micro_batch = 2, .sequence = 64, .attention = attention_kind::eager};
  CHECK(layer_activation_bytes(m, pure<bf16>::value, o, {}, false, recompute_kind::none) ==
        bytes{eager});
  // SDPA drops the soft-capping (transformers' sdpa_attention_forward takes no softcap): in place
  // of the scores it keeps the fp32 log-sum-exp (2 x 4 x 64 x 4 B), and K and V unrepeated (native
  // GQA). The trace has 1,024 B more: cuDNN's two RNG tensors (seed, offset), not modelled.
  o.attention = attention_kind::flash;
  const std::int64_t sdpa = eager - (2 + 4 + 2) * S - 2 * 2 * tau * 96 + 4 * 2 * 4 * 64;
  CHECK(layer_activation_bytes(m, pure<bf16>::value, o, {}, false, recompute_kind::none) ==
        bytes{sdpa});
  CHECK(sdpa + 1024 == 1'104'896);
  // The final logits' tanh keeps its bf16 output (Gemma2ForCausalLM.forward) until the head's
  // backward: 2 tau V more at the start of backward than without the soft-capping.
  const training t{m, pure<bf16>::value, adamw<>::value};
  model uncapped = m;
  uncapped.logit_softcap = false;
  const training u{uncapped, pure<bf16>::value, adamw<>::value};
  CHECK(training_step(t, o).peak_at == moment::start_of_backward);
  CHECK(peak(training_step(t, o)) - peak(training_step(u, o)) == bytes{2 * tau * 1024});
}

TEST_CASE("activation offload keeps what layers save on the host and brings one layer back") {
  // torch.autograd.graph.save_on_cpu and torchtune's OffloadActivations: forward's saved tensors
  // go to the host; each layer's come back to the GPU for its backward and are freed there.
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  activation_options o{.micro_batch = 2, .sequence = 4096};
  const bytes per_layer =
      layer_activation_bytes(t.model, t.precision, o, {}, false, recompute_kind::none);
  auto at_loss_gradients = [&](const step_timeline& timeline) {
    bytes at{};
    for_each_event(timeline, 1, [&](const timeline_event& e, std::size_t, std::int64_t, bytes a) {
      if (std::string(e.what) == "loss gradients" && e.delta > bytes{}) at = a;
    });
    return at;
  };
  const bytes kept = at_loss_gradients(step_timeline_of(t, o));
  o.offload = true;
  const step_timeline tl = step_timeline_of(t, o);
  int reloads = 0;
  for (const timeline_event& e : tl.events) {
    if (std::string(e.what) != "saved tensors brought back from the host") continue;
    ++reloads;
    CHECK(e.delta == per_layer);
    CHECK(e.layers == 32);
  }
  CHECK(reloads == 1);
  bool host = false;
  bytes inputs{};
  for (const memory_entry& e : tl.ledger) {
    if (e.role == entry_role::saved_activations)
      host = e.space == memory_space::host && e.size == per_layer * 32;
    if (e.role == entry_role::embedding_inputs) inputs = e.size;
  }
  CHECK(host);
  // When the loss's gradients appear, none of the 32 layers' saved tensors (nor the inputs and
  // rotary tables they save) is on the GPU; the loss's own tensors are.
  CHECK(kept - at_loss_gradients(tl) == per_layer * 32 + inputs);
}

TEST_CASE("the layer brought back from the host is sized by what it holds at once") {
  // With activation offload, a layer's backward brings back what its forward kept; selective
  // recompute then adds the attention core while the MLP's saved tensors are already freed, so
  // the reloaded buffer never holds a whole un-recomputed layer. Under full recompute nothing
  // comes back (the recompute rebuilds the layer on the GPU), so the entry holds nothing.
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  activation_options o{.micro_batch = 1, .sequence = 4096, .attention = attention_kind::eager};
  o.offload = true;
  auto reloaded = [&](recompute_kind kind) {
    o.recompute = kind;
    const step_timeline tl = step_timeline_of(t, o);
    for (const memory_entry& e : tl.ledger)
      if (e.role == entry_role::reloaded_layer) {
        CHECK(e.size <= tl.peak.alive);
        return e.size;
      }
    FAIL("no reloaded-layer entry");
    return bytes{};
  };
  const bytes whole =
      layer_activation_bytes(t.model, t.precision, o, {}, false, recompute_kind::none);
  const bytes kept =
      layer_activation_bytes(t.model, t.precision, o, {}, false, recompute_kind::selective);
  const bytes selective = reloaded(recompute_kind::selective);
  CHECK(selective >= kept);
  CHECK(selective < whole);
  CHECK(reloaded(recompute_kind::full) == bytes{});
}

TEST_CASE("Qwen3's q_norm and k_norm keep what an RMSNorm keeps, per head") {
  // Qwen3-8B, 2 x 1,024 tokens in bf16, flash attention: per token and head of 128, each norm
  // keeps its fp32 input (4 x 128 bytes), an fp32 rstd (4) and its normalized input in bf16
  // (2 x 128); 32 query heads, 8 key heads.
  const std::int64_t tokens = 2 * 1024;
  const activation_options o{.micro_batch = 2, .sequence = 1024};
  model without = models::qwen3_8b::value;
  without.qk_norm = false;
  const bytes with_norms = layer_activation_bytes(models::qwen3_8b::value, pure<bf16>::value, o, {},
                                                  false, recompute_kind::none);
  const bytes plain =
      layer_activation_bytes(without, pure<bf16>::value, o, {}, false, recompute_kind::none);
  CHECK(with_norms - plain == bytes{tokens * (32 + 8) * (4 * 128 + 4 + 2 * 128)});
}

TEST_CASE(
    "gpt-oss: the sink column in eager attention, and its experts as transformers trains them") {
  const model& m = models::gpt_oss_20b::value;
  const std::int64_t s = 1024;
  const activation_options o{.micro_batch = 1, .sequence = s, .attention = attention_kind::eager};
  bytes mlp{};
  auto bytes_of = [&](const char* name) {
    bytes found{};
    for (const saved_tensor& t : layer_saved_tensors(m, pure<bf16>::value, o, layout{}, true))
      if (std::string(t.name) == name) found = t.size;
    return found;
  };
  for (const saved_tensor& t : layer_saved_tensors(m, pure<bf16>::value, o, layout{}, true))
    if (t.part == layer_part::mlp) mlp += t.size;
  // 64 heads of s rows over s keys and the sink, softmax in bf16 (no fp32 copy); max's int64
  // indices per row.
  CHECK(bytes_of("attention softmax output (with the sink column)") == bytes{2 * 64 * s * (s + 1)});
  CHECK(bytes_of("attention logits max indices (int64)") == bytes{8 * 64 * s});
  CHECK(bytes_of("attention probabilities (16-bit copy)") == bytes{});
  // The MLP half, 1,024 tokens routed to 4 experts each (n = 4,096 rows), h = f = 2,880, bf16:
  // the post-attention RMSNorm (fp32 input 4h, rstd 4, and the normalized input 4h: gpt-oss's
  // RMSNorm multiplies the weight in fp32 before it casts back), the router's input 2h; top-k
  // softmax 2 x 4 and indices 8 x 4 per token; per routed row under grouped_mm (transformers 5's
  // default) three int64 indices (token_idx, perm, inv_perm), the sorted input 2h, gate_up
  // 2 x 2f, five [n, f] tensors in bf16 (clamped gate, sigmoid, up + 1, GLU, their product),
  // the output 2h and its bf16 routing weight 2, and the 32 experts' int32 row offsets (128 B, one
  // 512 B allocator block). The
  // grouped GEMMs read the packed parameters whole: no expert weight is copied.
  const std::int64_t h = 2880, f = 2880, n = 4 * s;
  const std::int64_t norm = s * (4 * h + 4 + 4 * h);
  const std::int64_t router = s * 2 * h + s * (2 * 4 + 8 * 4);
  const std::int64_t experts = n * (24 + 2 * h + 2 * 2 * f + 5 * 2 * f + 2 * h + 2);
  CHECK(mlp == bytes{norm + router + experts + 512});
  // batched_mm copies each row's gate_up_proj and down_proj slices (3hf), which bmm keeps.
  activation_options batched = o;
  batched.experts = experts_implementation::batched_mm;
  bytes copies{};
  for (const saved_tensor& t : layer_saved_tensors(m, pure<bf16>::value, batched, layout{}, true))
    if (std::string(t.name) == "expert weights copied per routed row") copies = t.size;
  CHECK(copies == bytes{n * 3 * h * f * 2});
}

TEST_CASE("transformers 5's Mixtral experts: grouped_mm in the weights' format, eager per call") {
  // Mixtral-8x7B, one MoE layer's MLP half at 4,096 tokens (h = 4,096, f = 14,336, 8 experts,
  // top 2: n = 8,192 rows), from modeling_mixtral.py MixtralTopKRouter and integrations/moe.py
  // grouped_mm_experts_forward.
  const model& m = models::mixtral_8x7b::value;
  const std::int64_t tokens = 4096, h = 4096, f = 14336, e = 8, n = 2 * tokens;
  const activation_options o{.micro_batch = 1, .sequence = tokens};
  const auto mlp_half = [&](const precision& p, const activation_options& a) {
    bytes sum{};
    for (const saved_tensor& t : layer_saved_tensors(m, p, a, layout{}, true))
      if (t.part == layer_part::mlp) sum += t.size;
    return sum;
  };
  // bf16: the RMSNorm (fp32 input 4h, rstd 4, normalized input 2h), the router's input 2h, its
  // fp32 probabilities 4e, int64 indices 8 x 2, and the in-place renormalization's fp32 divisor
  // and pre-division copy 4 x 3 per token; per routed row the three int64 indices 24, the sorted
  // input 2h, gate_up 2 x 2f, the activation and the gated product 2f each, the output before
  // weighting 2h, and the routing weight in fp32 (Mixtral's router does not cast it back) 4; and
  // the 8 experts' int32 row offsets (32 B, one 512 B allocator block).
  const std::int64_t per_token = 4 * h + 4 + 2 * h + 2 * h + 4 * e + 8 * 2 + 4 * 3;
  const std::int64_t per_row = 24 + 2 * h + 4 * f + 2 * f + 2 * f + 2 * h + 4;
  CHECK(mlp_half(pure<bf16>::value, o) == bytes{tokens * per_token + n * per_row + 512});
  // AMP: the residual stream is fp32 and the grouped GEMMs run outside autocast in the fp32
  // parameters' format, so every per-row tensor but the indices and weights doubles; the
  // normalized input and the router's autocast input stay as in any AMP layer.
  const std::int64_t amp_token = 4 * h + 4 + 4 * h + 2 * h + 4 * e + 8 * 2 + 4 * 3;
  const std::int64_t amp_row = 24 + 4 * h + 8 * f + 4 * f + 4 * f + 4 * h + 4;
  CHECK(mlp_half(amp<bf16>::value, o) == bytes{tokens * amp_token + n * amp_row + 512});
  // eager under AMP: F.linear casts the rows and each hit expert's weight slices (a view of the
  // fp32 parameters) to bf16 on every call, and keeps both: all 8 experts' 3hf weights in bf16;
  // per row two int64 indices, bf16 activations, and index_add_ keeps its source, the weighted
  // output in the fp32 hidden states' format (derivatives.yaml index_add reads source).
  activation_options eager = o;
  eager.experts = experts_implementation::eager;
  const std::int64_t eager_row = 16 + 2 * h + 4 * f + 2 * f + 2 * f + 2 * h + 4 * h + 4;
  CHECK(mlp_half(amp<bf16>::value, eager) ==
        bytes{tokens * amp_token + n * eager_row + e * 3 * h * f * 2});
}

TEST_CASE("DeepSeek-V3's router: fp32 copies of its input and weight, sigmoid scores") {
  // modeling_deepseek_v3.py DeepseekV3TopkRouter.forward runs F.linear on
  // hidden_states.type(torch.float32) and self.weight.type(torch.float32), keeping both copies;
  // DeepseekV3MoE's sigmoid keeps its fp32 output; the top-8 weights' in-place division keeps an
  // fp32 divisor and pre-division copy. 4,096 tokens, h = 7,168, 256 routed experts, bf16.
  const model& m = models::deepseek_v3::value;
  const std::int64_t tokens = 4096, h = 7168, e = 256, k = 8;
  const activation_options o{.micro_batch = 1, .sequence = tokens};
  auto bytes_of = [&](const precision& p, const char* name) {
    bytes found{};
    for (const saved_tensor& t : layer_saved_tensors(m, p, o, layout{}, true))
      if (std::string(t.name) == name) found = t.size;
    return found;
  };
  const char* copies = "router input and weight (fp32 copies)";
  const char* scores = "router scores and the renormalization's divisor and copy";
  CHECK(bytes_of(pure<bf16>::value, copies) == bytes{tokens * h * 4 + e * h * 4});
  CHECK(bytes_of(pure<bf16>::value, scores) == bytes{tokens * e * 4 + tokens * (k + 1) * 4});
  // Under autocast the linear casts its fp32 input back to bf16 (and caches the weight's cast),
  // so the logits, scores and weights are bf16.
  CHECK(bytes_of(amp<bf16>::value, copies) == bytes{tokens * h * 2});
  CHECK(bytes_of(amp<bf16>::value, scores) == bytes{tokens * e * 2 + tokens * (k + 1) * 2});
}

TEST_CASE("every saved tensor names the source line that makes it") {
  // Each entry of every preset's layers, under each attention, with dropout, LoRA and AMP,
  // carries a file and an expression in transformers, peft or PyTorch, never an empty string.
  const auto cited = [](const char* source) {
    const std::string s = source;
    const bool file =
        s.find(".py ") != std::string::npos || s.find("derivatives.yaml") != std::string::npos ||
        s.find("torch SDPA") != std::string::npos || s.find("aten ") != std::string::npos;
    return file && s.find(':') != std::string::npos;
  };
  const finetuning lora_all = lora<16>::value;
  int checked = 0;
  for (const preset& p : presets) {
    for (const attention_kind a :
         {attention_kind::eager, attention_kind::flash, attention_kind::sdpa}) {
      activation_options o{.micro_batch = 2, .sequence = 256, .attention = a};
      o.attention_dropout = o.hidden_dropout = a == attention_kind::eager;
      for (const precision& pr : {mixed<bf16>::value, amp<bf16>::value}) {
        for (const bool moe : {false, true}) {
          if (moe && !p.value.is_moe()) continue;
          for (const finetuning& f : {full_finetune::value, lora_all}) {
            for (const saved_tensor& s : layer_saved_tensors(p.value, pr, o, layout{}, moe, f)) {
              const std::string what = std::string(p.key) + ": " + s.name + " <- " + s.source;
              INFO(what);
              CHECK(cited(s.source));
              ++checked;
            }
          }
        }
      }
    }
  }
  CHECK(checked > 1000);
  // The SwiGLU product's factors, read in modeling_llama.py LlamaMLP.forward.
  const saved_tensor_ledger llama =
      layer_saved_tensors(models::llama_3_8b::value, mixed<bf16>::value, {}, layout{});
  bool down = false;
  for (const saved_tensor& s : llama)
    if (std::string(s.name) == "gate x up (down input)")
      down = std::string(s.source) ==
             "modeling_llama.py LlamaMLP.forward: "
             "self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))";
  CHECK(down);
}

TEST_CASE("model codes: what each framework's Llama 3 block saves, derived by hand per token") {
  // Llama-3-8B's block in bf16, one rank, bytes per token; h hidden, q and k query and KV heads,
  // d head dim, f FFN width. Hugging Face (SDPA with enable_gqa): each RMSNorm keeps its fp32
  // input, fp32 rstd and bf16 normalized input (6h + 4) and its output for the linears (2h);
  // Q, K, V and the attention output 2(2q + 2k)d, the fp32 log-sum-exp 4q; SwiGLU's four
  // [f]-wide tensors 8f.
  const std::int64_t h = 4096, q = 32, k = 8, d = 128, f = 14336, s = 2048;
  const std::int64_t attention = 2 * (2 * q + 2 * k) * d + 4 * q;
  const std::int64_t repeated = 2 * (4 * q) * d + 4 * q;  // K and V with q heads
  const std::int64_t hf = 2 * (6 * h + 4 + 2 * h) + attention + 8 * f;
  // torchtitan on torch >= 2.9: the fused RMSNorm keeps its bf16 input and the rstd (2h + 4);
  // RoPE's gathered complex64 table rows add 4d.
  const std::int64_t titan = 2 * (2 * h + 4 + 2 * h) + attention + 4 * d + 8 * f;
  // torchtitan's 2024 model and torchtune: Hugging Face's norms, K and V repeated before SDPA.
  const std::int64_t titan_2024 = 2 * (6 * h + 4 + 2 * h) + repeated + 8 * f;
  // litgpt: repeated K and V, each norm's normalized input in fp32 (4h, not 2h), and cuDNN's
  // output heads-first (Q comes out of torch.cat) beside the copy reshape makes for proj (2qd);
  // besides, per block, each norm's fp32 weight copy (4h bytes, not per token).
  const std::int64_t litgpt = 2 * (4 * h + 4 + 4 * h + 2 * h) + repeated + 2 * q * d + 8 * f;
  // Megatron-Core with Transformer Engine: each fused norm-and-linear keeps its input, its rstd
  // and the normalized output (2h + 4 + 2h); the fused SwiGLU keeps its [2f] input, fc2 its [f]
  // input.
  const std::int64_t megatron = 2 * (2 * h + 4 + 2 * h) + attention + 6 * f;
  CHECK(hf == 200'840);  // the figures the sums give, written out
  CHECK(titan == 168'584);
  CHECK(titan_2024 == 213'128);
  CHECK(litgpt == 237'704);
  CHECK(megatron == 139'400);
  const model& m = models::llama_3_8b::value;
  auto per_token = [&](const model& of, model_code code, const layout& l, std::int64_t tokens) {
    activation_options o{.micro_batch = 1, .sequence = tokens};
    o.code = code;
    bytes sum{};
    for (const saved_tensor& t : layer_saved_tensors(of, pure<bf16>::value, o, l)) {
      INFO(t.name << " <- " << t.source);
      CHECK(std::string(t.source).find(':') != std::string::npos);
      // Each code cites its own files, never transformers' modeling files.
      if (code != model_code::hf)
        CHECK(std::string(t.source).find("modeling_") == std::string::npos);
      sum += t.size;
    }
    return sum;
  };
  CHECK(per_token(m, model_code::hf, {}, s) == bytes{hf * s});
  CHECK(per_token(m, model_code::torchtitan, {}, s) == bytes{titan * s});
  CHECK(per_token(m, model_code::torchtitan_2024, {}, s) == bytes{titan_2024 * s});
  CHECK(per_token(m, model_code::torchtune, {}, s) == bytes{titan_2024 * s});
  CHECK(per_token(m, model_code::litgpt, {}, s) == bytes{litgpt * s + 2 * 4 * h});
  // Transformer Engine's attention also keeps its RNG state, one 512 B block a layer.
  CHECK(per_token(m, model_code::megatron_te, {}, s) == bytes{megatron * s + 512});

  // Llama-3.1-405B at TP 8 with sequence parallelism, 8,192 tokens: the norms' h-wide terms and
  // the heads and FFN split over the 8 ranks. Hugging Face 740.5 MiB a layer, Megatron's fused
  // kernels 508.5 MiB (the model-code issue quoted about 740 and 544).
  const std::int64_t H = 16384, Q = 128, K = 8, F = 53248, t = 8, S = 8192;
  const std::int64_t heads = (2 * (2 * Q + 2 * K) * d + 4 * Q) / t;
  const layout tp_sp = parallel<tensor_parallel<8, true>>::value;
  const model& big = models::llama_3_1_405b::value;
  CHECK(per_token(big, model_code::hf, tp_sp, S) ==
        bytes{(16 * H + 8) / t * S + heads * S + 8 * F / t * S});
  CHECK(per_token(big, model_code::megatron_te, tp_sp, S) ==
        bytes{(8 * H + 8) / t * S + heads * S + 6 * F / t * S + 512});
  CHECK(per_token(big, model_code::megatron_te, tp_sp, S) == bytes{65'089LL * S + 512});

  // Modelled for a dense Llama 3 (torchtitan's also for its Qwen3), trained in full; the refusal
  // names the model.
  const activation_options titan_code{.code = model_code::torchtitan};
  const activation_options tune_code{.code = model_code::torchtune};
  CHECK_THROWS_WITH(
      layer_saved_tensors(models::qwen3_8b::value, pure<bf16>::value, tune_code, layout{}),
      doctest::Contains("model code torchtune is modelled for a dense Llama 3 only"));
  CHECK_THROWS_WITH(
      layer_saved_tensors(models::qwen3_8b::value, pure<bf16>::value, tune_code, layout{}),
      doctest::Contains("Qwen3-8B has QK norms"));
  CHECK_THROWS_WITH(
      layer_saved_tensors(models::gpt_oss_20b::value, pure<bf16>::value, titan_code, layout{}),
      doctest::Contains("model code torchtitan is modelled for a Llama 3, a Qwen3, dense or MoE, "
                        "or a DeepSeek-V2 or V3 (models/llama3, models/qwen3, "
                        "models/deepseek_v3), trained in full: gpt-oss-20b has experts"));
  CHECK_THROWS_WITH(layer_saved_tensors(models::mixtral_8x7b::value, pure<bf16>::value, titan_code,
                                        layout{}, true),
                    doctest::Contains("Mixtral-8x7B-v0.1 has experts"));
  CHECK_THROWS_WITH(
      layer_saved_tensors(m, pure<bf16>::value, titan_code, layout{}, false, lora<16>::value),
      doctest::Contains("Llama-3-8B is fine-tuned in part or with LoRA"));
}

/// What one torchtitan layer of `m` saves in bf16 over `tokens` tokens on one rank, each tensor
/// cited from torchtitan's code, none from Hugging Face's.
static bytes torchtitan_layer_bytes(const model& m, bool moe_layer, std::int64_t tokens) {
  const activation_options o{.micro_batch = 1, .sequence = tokens, .code = model_code::torchtitan};
  bytes sum{};
  for (const saved_tensor& t : layer_saved_tensors(m, pure<bf16>::value, o, layout{}, moe_layer)) {
    INFO(t.name << " <- " << t.source);
    CHECK(std::string(t.source).find("modeling_") == std::string::npos);
    sum += t.size;
  }
  return sum;
}

TEST_CASE("torchtitan's Qwen3, dense and MoE: what its block saves, derived by hand per token") {
  // torchtitan b5bcd76 models/qwen3 in bf16, one rank. Its attention is Llama 3's (fused norms:
  // 2h + 4 each; Q, K, V, the output and the fp32 log-sum-exp) with, per head, a fused RMSNorm
  // over the contiguous copies FusedQKVLinear makes of Q and K (2d + 4 a head) and CosSinRoPE's
  // gathered fp32 cos and sin rows (2d x 4 B, where ComplexRoPE's complex64 rows are 4d).
  const auto layer = torchtitan_layer_bytes;
  auto attention = [](std::int64_t h, std::int64_t q, std::int64_t k, std::int64_t d) {
    return (2 * h + 4) + 2 * h + 2 * (2 * q + 2 * k) * d + 4 * q + 8 * d + 2 * (q + k) * d +
           4 * (q + k);
  };
  // Qwen3-8B: h 4096, 32 query and 8 KV heads of 128, FFN 12288 (SwiGLU's four tensors, 8f).
  const std::int64_t dense = attention(4096, 32, 8, 128) + (2 * 4096 + 4) + 2 * 4096 + 8 * 12288;
  CHECK(dense == 163'112);
  CHECK(layer(models::qwen3_8b::value, false, 2048) == bytes{dense * 2048});
  // Qwen3-30B-A3B: h 2048, 32 and 4 heads of 128; 128 experts of 768, top 8. Per token: the
  // router's fp32 input (4h; autocast to float32) and softmax (4E), the top-k ids (8K), the
  // scores and route_norm's sum (4(K + 1)), the argsort's order and the routed tokens (16K), the
  // scores in expert order (4K); per routed row: the gathered bf16 input (2h), w1's output, silu's
  // and w3's (3 x 2F), the product (2F) and the fp32 output the weighting keeps (4h). Per layer:
  // the router weight's fp32 cast (4Eh) and the int32 offsets (one 512 B block).
  const std::int64_t h = 2048, E = 128, K = 8, F = 768;
  const std::int64_t router = 4 * h + 4 * E + 8 * K + 4 * (K + 1) + 16 * K + 4 * K;
  const std::int64_t row = 2 * h + 3 * 2 * F + 2 * F + 4 * h;
  const std::int64_t moe = attention(h, 32, 4, 128) + (2 * h + 4) + router + K * row;
  CHECK(moe == 197'660);
  CHECK(layer(models::qwen3_30b_a3b::value, true, 4096) == bytes{moe * 4096 + 4 * E * h + 512});

  // Across 4 EP ranks (32 experts each), read in AllToAllTokenDispatcher: the gather that puts the
  // received rows in expert order keeps its int64 index (8K a token); in forward the combine's
  // all-to-all output (2Kh a token) stays through the weighting.
  const training ep{models::qwen3_30b_a3b::value, pure<bf16>::value, adamw<>::value,
                    full_finetune::value, parallel<fsdp<4>, expert_parallel<4>>::value};
  const activation_options titan{
      .micro_batch = 1, .sequence = 4096, .code = model_code::torchtitan};
  bytes ep_layer{};
  for (const saved_tensor& t : layer_saved_tensors(ep.model, ep.precision, titan, ep.layout, true))
    ep_layer += t.size;
  CHECK(ep_layer == bytes{(moe + 8 * K) * 4096 + 4 * E * h + 512});
  auto forward_locals = [&titan](const training& t) {
    for (const memory_entry& e : activations(t, titan))
      if (std::string(e.name).starts_with("hidden states and MoE block locals")) return e.size;
    return bytes{};
  };
  const training one_rank{models::qwen3_30b_a3b::value, pure<bf16>::value, adamw<>::value};
  CHECK(forward_locals(ep) - forward_locals(one_rank) == bytes{2 * K * h * 4096});
}

/// Bytes per token torchtitan's MLA (models/deepseek_v3 at b5bcd76) saves in bf16 on one rank
/// with DeepSeek's attention shapes (128 heads, q_lora_rank 1536, kv_lora_rank 512, nope 128 +
/// rope 64, V 128) at hidden size `h`: attention_norm's input and rstd (2h + 4), its output, which
/// wq_a and wkv_a read (2h); q_norm's input (wq_a's output) and rstd, its output (wq_b's input):
/// 2 x 2 x 1536 + 4; wkv_a's whole output, which kv_norm's input view keeps (2 x 576), kv_norm's
/// rstd and output (4 + 2 x 512); ComplexRoPE's complex64 rows (8 x 32); the two cats, Q and K
/// (2 x 2 x 128 x 192); wkv_b's whole output, which V's view keeps (2 x 128 x 256); flex's
/// output, wo's input (2 x 128 x 128), and its fp32 log-sum-exp (4 x 128). Traced to the byte on
/// small DeepSeek-V3 and V2 shapes (tests/validation torchtitan-deepseek3-*, -deepseek2-*).
static std::int64_t titan_mla_bytes_per_token(std::int64_t h) {
  return (2 * h + 4) + 2 * h + (4 * 1536 + 4) + (2 * 576 + 4 + 2 * 512) + 8 * 32 + 4 * 128 * 192 +
         2 * 128 * 256 + 2 * 128 * 128 + 4 * 128;
}

/// Bytes per token of an MoE layer's MLP half in torchtitan's DeepSeek (bf16, one rank), `E`
/// experts, top `K` of width `F`, shared experts of width `shared`: ffn_norm's input and rstd
/// (2h + 4); the router (its fp32 input 4h, the sigmoid's or softmax's output 4E, top-k ids 8K,
/// with route_norm the division's scores and sum 4(K + 1), the argsort's order and routed tokens
/// 16K, the scores in expert order 4K; the group-limited choice keeps nothing); per routed row the
/// bf16 input, w1's, silu's and w3's outputs, the product and the fp32 output (2h + 8F + 4h);
/// then the shared experts: their input, the norm's output (2h), and SwiGLU's four tensors.
static std::int64_t titan_moe_mlp_bytes_per_token(std::int64_t h, std::int64_t E, std::int64_t K,
                                                  std::int64_t F, std::int64_t shared,
                                                  bool route_norm) {
  const std::int64_t router =
      4 * h + 4 * E + 8 * K + (route_norm ? 4 * (K + 1) : 0) + 16 * K + 4 * K;
  return (2 * h + 4) + router + K * (2 * h + 8 * F + 4 * h) + 2 * h + 8 * shared;
}

TEST_CASE("torchtitan's DeepSeek-V3: MLA and the MoE with shared experts, derived by hand") {
  // torchtitan b5bcd76 models/deepseek_v3 in bf16, one rank, DeepSeek-V3 (h 7168).
  const model& m = models::deepseek_v3::value;
  const std::int64_t h = 7168, tokens = 4096;
  const std::int64_t attention = titan_mla_bytes_per_token(h);
  CHECK(attention == 234'380);
  // The sigmoid router with route_norm, over 256 experts, top 8 of width 2048, one shared. Per
  // layer the router weight's fp32 cast and the int32 offsets of the 256 experts (1 KiB).
  const std::int64_t E = 256, K = 8, F = 2048;
  const std::int64_t moe_mlp = titan_moe_mlp_bytes_per_token(h, E, K, F, F, true);
  CHECK(moe_mlp == 550'152);
  // The first three layers' dense FeedForward (FFN 18432): its input and SwiGLU's four tensors.
  const std::int64_t dense_mlp = (2 * h + 4) + 2 * h + 8 * 18432;
  CHECK(torchtitan_layer_bytes(m, false, tokens) == bytes{(attention + dense_mlp) * tokens});
  CHECK(torchtitan_layer_bytes(m, true, tokens) ==
        bytes{(attention + moe_mlp) * tokens + 4 * E * h + 4 * E});
  const activation_options o{.micro_batch = 1, .sequence = tokens, .code = model_code::torchtitan};
  // Its buffers: a complex64 RoPE cache [s, 32] in each of 61 attentions, the two fp32 [256]
  // load-balancing buffers in each of the 58 MoE layers.
  const training t{m, pure<bf16>::value, adamw<>::value};
  bytes buffers{};
  for (const memory_entry& e : activations(t, o))
    if (std::string(e.name).starts_with("torchtitan's per-layer buffers")) buffers = e.size;
  CHECK(buffers == bytes{61 * tokens * 32 * 8 + 58 * 2 * 1024});
}

TEST_CASE("torchtitan's DeepSeek-V2 shapes: the softmax router without route_norm, by hand") {
  // torchtitan b5bcd76 models/deepseek_v3 runs V2's shapes too (its "236B" flavor): MLA as V3's
  // at h 5120, a softmax router with route_norm False and route_scale 16 over 160 experts in 8
  // groups, top 6, two shared experts of 1536.
  const model& m = models::deepseek_v2::value;
  const std::int64_t h = 5120, tokens = 4096;
  const std::int64_t attention = titan_mla_bytes_per_token(h);
  CHECK(attention == 226'188);
  // The router without route_norm's division (nothing kept for `* route_scale`, a Python float's
  // product), the two shared experts as one of 2 x 1536.
  const std::int64_t E = 160, K = 6, F = 1536;
  const std::int64_t moe_mlp = titan_moe_mlp_bytes_per_token(h, E, K, F, 2 * F, false);
  CHECK(moe_mlp == 324'396);
  // Per layer: the router weight's fp32 cast, and the 160 experts' int32 offsets (640 B, one
  // 512-byte-rounded block).
  CHECK(torchtitan_layer_bytes(m, true, tokens) ==
        bytes{(attention + moe_mlp) * tokens + 4 * E * h + 1024});
  // The first layer's dense FeedForward (FFN 12288).
  CHECK(torchtitan_layer_bytes(m, false, tokens) ==
        bytes{(attention + (2 * h + 4) + 2 * h + 8 * 12288) * tokens});
}

TEST_CASE("torchtitan's MoE backward: the fp32 weighting first, then the experts") {
  // Qwen3-30B-A3B cut to 1 layer, bf16, 1 x 4,096 tokens: N = 32,768 routed rows of h = 2,048,
  // 128 experts of F = 768. Backward meets the combine's weighting first
  // (token_dispatcher.py: routed_output_RD.to(torch.float32) * scores): its incoming gradient
  // cast to fp32 and one per operand, 3 x 4Nh, all gone before w2's backward (traced:
  // torchtitan-qwen3moe-bf16-flex-v256-s128-sgd-foreach peaks in that mul's backward). Then w2's
  // weight gradient (128 x 2,048 x 768 x 2 B), w2's input and the fp32 output it weighted go, and
  // the experts' working set: the gradients of w2's input, silu's and w3's outputs (3 x 2NF)
  // beside the experts' output gradient w2's backward read (2Nh), the first third apart.
  constexpr std::int64_t N = 4096LL * 8, h = 2048, F = 768;
  model m = models::qwen3_30b_a3b::value;
  m.layers = 1;
  const training t{m, pure<bf16>::value, adamw<>::value};
  const activation_options o{.micro_batch = 1, .sequence = 4096, .code = model_code::torchtitan};
  std::vector<std::pair<std::string, std::int64_t>> mlp;
  for (const timeline_event& e : step_timeline_of(t, o).events) {
    const std::string what = e.what;
    if (e.phase != step_phase::backward) continue;
    if (what == "MLP weight gradients") break;
    if (what.starts_with("MoE") || what.starts_with("MLP")) mlp.emplace_back(what, e.delta.count);
  }
  const std::int64_t working = N * (3 * F + h) * 2, third = working / 3;
  const std::vector<std::pair<std::string, std::int64_t>> expected{
      {"MoE combine backward", 3 * 4 * N * h},
      {"MoE combine backward", -3 * 4 * N * h},
      {"MLP output linear: weight gradients", 128 * h * F * 2},
      {"MLP output linear: input freed", -(2 * N * F + 4 * N * h)},
      {"MLP backward working set", third},
      {"MLP backward working set", working - third},
      {"MLP backward working set", -third},
      {"MLP backward working set", -(working - third)}};
  CHECK(mlp == expected);
  // Hugging Face's packed experts weight in the routing weights' format inside their own
  // grouped_mm_experts_forward: no such step before the experts' backward.
  for (const timeline_event& e : step_timeline_of(t, {.micro_batch = 1, .sequence = 4096}).events)
    CHECK(std::string(e.what).find("MoE combine") == std::string::npos);
}

TEST_CASE("Megatron-Core's MoE layer: router, permute, grouped linears, weighted SwiGLU") {
  // Mixtral-8x7B as Megatron's Mixtral recipe runs it (tests/validation E21), bf16, 1 x 4,096
  // tokens: h 4,096, 32 query and 8 KV heads of 128, 8 experts of F = 14,336, top 2.
  constexpr std::int64_t h = 4096, q = 32, kv = 8, d = 128, E = 8, K = 2, F = 14336, T = 4096;
  const model& m = models::mixtral_8x7b::value;
  const activation_options o{.micro_batch = 1, .sequence = T, .code = model_code::megatron_te};
  bytes sum{};
  for (const saved_tensor& x : layer_saved_tensors(m, pure<bf16>::value, o, layout{}, true)) {
    INFO(x.name << " <- " << x.source);
    CHECK(std::string(x.source).find("modeling_") == std::string::npos);
    sum += x.size;
  }
  // Per token: the attention half as in the dense layer (the fused norm-and-linear's input, rstd
  // and normalized output; Q, K, V and the output, the fp32 log-sum-exp); TENorm's input and rstd
  // and the router's input, its norm output (2h + 4 + 2h); the int64 top-k ids (8K), their fp32
  // softmax (4K), the aux loss's fp32 softmax (4E), the int64 argsort of the [E, T] routing map
  // (8E); per routed row the tokens (2h), the probability (2), fc1's output (4F) and the weighted
  // SwiGLU's (2F). Per layer: TE's RNG state, the tokens per expert and the 0-dim aux loss, one
  // 512 B block each.
  const std::int64_t attention = (2 * h + 4 + 2 * h) + 2 * (2 * q + 2 * kv) * d + 4 * q;
  const std::int64_t router = (2 * h + 4 + 2 * h) + 8 * K + 4 * K + 4 * E + 8 * E;
  const std::int64_t row = 2 * h + 2 + 4 * F + 2 * F;
  CHECK(attention + router + K * row == 241'924);
  CHECK(sum == bytes{241'924 * T + 3 * 512});

  // Backward meets the unpermute first: scatter_add_'s gather and the combine split's cat, two
  // [N, h] for N = 8,192 routed rows, gone before fc2's packed weight gradient (E x h x F x 2 B);
  // then fc2's input goes, and the working set: fc2's dgrad [N, F], the weighted SwiGLU's input
  // gradient [N, 2F] and the probabilities' [N] (traced: the step's peak at
  // weighted_swiglu_back in megatron-te-mixtral-bf16-sdpa-v256-s128-sgd-foreach).
  constexpr std::int64_t N = T * K;
  model one = m;
  one.layers = 1;
  std::vector<std::pair<std::string, std::int64_t>> mlp;
  for (const timeline_event& e :
       step_timeline_of(training{one, pure<bf16>::value, adamw<>::value}, o).events) {
    const std::string what = e.what;
    if (e.phase != step_phase::backward) continue;
    if (what == "MLP weight gradients") break;
    if (what.starts_with("MoE") || what.starts_with("MLP")) mlp.emplace_back(what, e.delta.count);
  }
  const std::int64_t working = N * (3 * F + 1) * 2, third = working / 3;
  const std::vector<std::pair<std::string, std::int64_t>> expected{
      {"MoE combine backward", 2 * 2 * N * h},
      {"MoE combine backward", -2 * 2 * N * h},
      {"MLP output linear: weight gradients", E * h * F * 2},
      {"MLP output linear: input freed", -2 * N * F},
      {"MLP backward working set", third},
      {"MLP backward working set", working - third},
      {"MLP backward working set", -third},
      {"MLP backward working set", -(working - third)}};
  CHECK(mlp == expected);

  // The dispatcher keeps its last routing to the layer's next forward: bf16 probabilities and
  // the bool map [T, E], the int64 [T K] mapping, each layer; the aux loss tracker's fp32
  // [layers] and the loss scale [1], one block each.
  bool found = false;
  for (const memory_entry& e : activations(training{m, pure<bf16>::value, adamw<>::value}, o))
    if (std::string(e.name) == "Megatron's MoE routing kept to the next forward") {
      found = true;
      CHECK(e.lifetime == lifetime::persistent);
      CHECK(e.size == bytes{(2 * T * E + T * E + 8 * T * K) * 32 + 2 * 512});
      CHECK(e.tensors == 3 * 32 + 2);
    }
  CHECK(found);

  // Across 2 EP ranks (4 experts each) the dispatch's all-to-all returns new tokens [N, h] and
  // probabilities [N], held through the experts beside their sorted copies; across 8 (one expert a
  // rank) there is no sorted copy, and fc1 keeps the all-to-all's output itself.
  auto forward_locals = [&](const layout& l) {
    for (const memory_entry& e :
         activations(training{m, pure<bf16>::value, adamw<>::value, full_finetune::value, l}, o))
      if (std::string(e.name).starts_with("hidden states and MoE block locals"))
        return std::pair{e.size, e.tensors};
    return std::pair{bytes{}, std::int64_t{0}};
  };
  const auto [one_rank, tensors] = forward_locals(layout{});
  const auto [two_ranks, two_tensors] = forward_locals(parallel<ddp<2>, expert_parallel<2>>::value);
  CHECK(two_ranks - one_rank == bytes{2 * N * h + 2 * N});
  CHECK(two_tensors - tensors == 2);
  CHECK(forward_locals(parallel<ddp<8>, expert_parallel<8>>::value).first == one_rank);

  // Only its softmax router over routed experts is modelled.
  model shared = m;
  shared.moe.shared_experts = 1;
  CHECK_THROWS_WITH(layer_saved_tensors(shared, pure<bf16>::value, o, layout{}, true),
                    doctest::Contains("model code megatron-te is modelled for a Llama 3, or with "
                                      "QK norms and a softmax top-k router"));
  CHECK_THROWS_WITH(
      layer_saved_tensors(models::deepseek_v3::value, pure<bf16>::value, o, layout{}, true),
      doctest::Contains("DeepSeek-V3 has MLA"));
}

TEST_CASE("torchtitan keeps a RoPE cache in every attention, sized to the training sequence") {
  auto buffers = [](const model& m, std::int64_t sequence, const layout& l, std::int64_t stage) {
    const training t{m, pure<bf16>::value, adamw<>::value, full_finetune::value, l};
    const activation_options o{
        .micro_batch = 1, .sequence = sequence, .code = model_code::torchtitan};
    for (const memory_entry& e : activations(t, o, stage))
      if (std::string(e.name).starts_with("torchtitan's per-layer buffers")) {
        CHECK(e.component == component::buffers);
        CHECK(e.lifetime == lifetime::persistent);
        return std::pair{e.size, e.tensors};
      }
    return std::pair{bytes{}, std::int64_t{0}};
  };
  // Llama-3-8B at 8,192 tokens: ComplexRoPE's complex64 [8192, 64] is 4 MiB in each of 32 layers.
  CHECK(buffers(models::llama_3_8b::value, 8192, layout{}, 0) ==
        std::pair{bytes{32 * 8192 * 64 * 8}, std::int64_t{32}});
  // Qwen3-30B-A3B at 4,096: CosSinRoPE's fp32 [4096, 2 x 128] is 4 MiB, and each MoE layer's two
  // fp32 [128] load-balancing buffers a 512 B block each; 48 layers, 24 on each of 2 stages.
  const std::int64_t qwen3_layer = 4096 * 256 * 4 + 2 * 512;
  CHECK(buffers(models::qwen3_30b_a3b::value, 4096, layout{}, 0) ==
        std::pair{bytes{48 * qwen3_layer}, std::int64_t{3 * 48}});
  CHECK(buffers(models::qwen3_30b_a3b::value, 4096, parallel<pipeline_parallel<2>>::value, 1) ==
        std::pair{bytes{24 * qwen3_layer}, std::int64_t{3 * 24}});
  // Hugging Face's code computes cos and sin per forward: no such buffers.
  const training hf{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  for (const memory_entry& e : activations(hf, {.micro_batch = 1, .sequence = 8192}))
    CHECK_FALSE(std::string(e.name).starts_with("torchtitan's"));
}

TEST_CASE("QLoRA's recompute holds up_proj's adapter outputs and the layer's locals") {
  // Llama-3-8B, bf16, NF4 base, fp32 adapters of rank 16 on every linear, 1 x 4,096 tokens, each
  // layer checkpointed without reentrance. Beside the saved tensors it remakes, the recompute
  // holds at up_proj's adapter: down_proj's adapter gradient that started it (fp32 [T, h], 4h a
  // token), the residual and the MLP input (2h + 2h), up_proj's cloned base output (2f), lora_B's
  // output and its scaled copy (4f + 4f); less what it has not saved yet: the up output (2f),
  // down_proj's fp32 input copy (4f) and its rank-16 lora_A output (4 x 16).
  constexpr std::int64_t h = 4096, f = 14336, r = 16, T = 4096;
  constexpr std::int64_t per_token = 4 * h + 4 * h + 2 * f + 8 * f - (2 * f + 4 * f + 4 * r);
  static_assert(per_token == 90'048);
  const training t{
      models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
      lora_finetuning(r, "all-linear", fp32::value, nf4_double_quant::value, bf16::value)};
  activation_options o{.micro_batch = 1, .sequence = T, .recompute = recompute_kind::full};
  auto recompute_holds = [&t](const activation_options& with) {
    std::vector<std::int64_t> held;
    for (const timeline_event& e : step_timeline_of(t, with).events)
      if (std::string(e.what).starts_with("QLoRA recompute") && e.delta > bytes{})
        held.push_back(e.delta.count);
    return held;
  };
  o.reentrant_checkpoint = false;
  CHECK(recompute_holds(o) == std::vector<std::int64_t>{per_token * T});
  // Reentrant checkpointing recomputes the whole layer before its backward: not this.
  o.reentrant_checkpoint = true;
  CHECK(recompute_holds(o).empty());
}

TEST_CASE("QLoRA: bitsandbytes dequantizes a 4-bit weight for each matmul, forward and backward") {
  // Llama-3-8B, bf16 with an NF4 (double quantization) base and LoRA on all linears, 1 x 2048
  // tokens. The MLP's three weights are 14336 x 4096: each matmul makes a bf16 copy of
  // 14336 x 4096 x 2 B = 117,440,512 B (MatMul4Bit); forward's fallback also makes two fp32
  // absmax of ceil(58,720,256 / 64) x 4 B = 3,670,016 B. The attention's largest is q or o,
  // 4096 x 4096 x 2 B; its input linears' largest, q.
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
                   qlora<16, "all-linear">::value};
  const activation_options o{.micro_batch = 1, .sequence = 2048};
  const step_timeline tl = step_timeline_of(t, o);
  constexpr std::int64_t mlp = 14336LL * 4096 * 2, attention = 4096LL * 4096 * 2;
  constexpr std::int64_t absmax = 14336LL * 4096 / 64 * 4;
  std::vector<std::pair<std::string, std::int64_t>> layer_one;  // layer 1's backward, in order
  bytes forward{};
  for (const timeline_event& e : tl.events) {
    const std::string what = e.what;
    if (what.starts_with("4-bit matmul") && e.phase == step_phase::forward && e.first_layer == 1)
      forward += e.delta > bytes{} ? e.delta : bytes{};
    if (what.starts_with("4-bit") && e.phase == step_phase::backward && e.first_layer <= 1 &&
        e.first_layer + e.layers > 1 && e.delta > bytes{})
      layer_one.emplace_back(what, e.delta.count);
  }
  CHECK(forward == bytes{mlp + 2 * absmax});
  using entry = std::pair<std::string, std::int64_t>;
  CHECK(layer_one ==
        std::vector<entry>{
            {"4-bit output linear: weight dequantized for the input gradient", mlp},
            {"4-bit input linears: weight dequantized for the input gradient", mlp},
            {"4-bit output linear: weight dequantized for the input gradient", attention},
            {"4-bit input linears: weight dequantized for the input gradient", attention}});
  // The first layer's input needs no gradient (the embeddings are frozen): Q, K and V compute
  // none, so nothing is dequantized for them.
  std::int64_t first_layer_inputs = 0;
  for (const timeline_event& e : tl.events)
    if (std::string(e.what) == "4-bit input linears: weight dequantized for the input gradient" &&
        e.first_layer == 0 && e.delta > bytes{})
      first_layer_inputs += e.delta.count;
  CHECK(first_layer_inputs == mlp);
  // One matmul's copy at a time: the ledger's entry is the largest, forward's.
  const auto dequantized = std::find_if(tl.ledger.begin(), tl.ledger.end(), [](const auto& e) {
    return std::string(e.name) == "dequantized 4-bit weight (one matmul's)";
  });
  REQUIRE(dequantized != tl.ledger.end());
  CHECK(dequantized->size == bytes{mlp + 2 * absmax});
}

TEST_CASE("a bitsandbytes QuantState is five tensors, each rounded on its own") {
  // quantize_4bit with compress_statistics: absmax (uint8 per 64), NF4's code (16 fp32), the
  // offset (one fp32), state2's absmax (fp32 per 256 absmax) and its code (256 fp32). For the
  // tiny model's gate projection (16 x 8 = 128 values): 2, 64, 4, 4 and 1,024 bytes.
  const detail::quant_state_tensors q = detail::quant_state_of(nf4_double_quant::value, {16, 8});
  REQUIRE(q.count == 5);
  CHECK(std::vector<bytes>(q.size, q.size + q.count) ==
        std::vector<bytes>{bytes{2}, bytes{64}, bytes{4}, bytes{4}, bytes{1024}});
  // Without double quantization: an fp32 absmax per 64 and the code.
  const detail::quant_state_tensors plain = detail::quant_state_of(nf4::value, {16, 8});
  CHECK(std::vector<bytes>(plain.size, plain.size + plain.count) ==
        std::vector<bytes>{bytes{8}, bytes{64}});
  // GPTQ's per-row scales are no QuantState.
  CHECK(detail::quant_state_of(gptq_int4::value, {16, 8}).count == 0);
}
