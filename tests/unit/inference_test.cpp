// Unit tier: inference memory: KV bytes per token of 21 models
// (docs/sources.md#kv-cache-per-token), the vLLM paper's OPT-13B figures, seed article 002's
// weights, sliding windows, paged blocks, tensor parallel, quantized KV, the serving budget, the
// solvers against brute force, loading peaks.
#include <doctest/doctest.h>

#include <cmath>
#include <string_view>
#include <vramfit/inference.hpp>
#include <vramfit/load.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
using namespace vramfit::literals;

TEST_CASE("KV-cache bytes per token, bf16, for 21 models (2 x layers x KV heads x head_dim x 2)") {
  const struct {
    std::string_view key;
    std::int64_t bytes;
  } table[] = {
      {"llama-2-7b", 524'288},    {"llama-2-13b", 819'200},
      {"llama-2-70b", 327'680},   {"llama-3-8b", 131'072},
      {"mistral-7b", 131'072},    {"mixtral-8x7b", 131'072},
      {"llama-3-70b", 327'680},   {"llama-3.1-405b", 516'096},
      {"mixtral-8x22b", 229'376}, {"falcon-7b", 8'192},
      {"deepseek-v3", 70'272},    {"deepseek-v2", 69'120},
      {"qwen2.5-0.5b", 12'288},   {"qwen2.5-7b", 57'344},
      {"qwen2.5-72b", 327'680},   {"gemma-2-2b", 106'496},
      {"gemma-2-9b", 344'064},    {"gemma-2-27b", 376'832},
      {"phi-3-mini", 393'216},    {"gpt2", 36'864},
      {"gpt2-xl", 307'200},
  };
  for (const auto& row : table) {
    CAPTURE(row.key);
    CHECK(kv_bytes_per_token(*find_preset(row.key), {}) == bytes{row.bytes});
  }
  // Llama-2-7B's 512 KiB per token, said in binary units.
  CHECK(to_string(kv_bytes_per_token(models::llama_2_7b::value, {})) == "512.00 KiB");
}

TEST_CASE(
    "the vLLM paper's OPT-13B: 800 KiB per token, 1.6 GB per request, 15.7K slots in 12 GiB") {
  // Kwon et al. 2023 §3: 2 x 5120 x 40 x 2 bytes; Table 1: 12 GB of KV memory -> 15.7K slots
  // (the slot count implies GiB).
  const model opt13b{.name = "OPT-13B",
                     .hidden = 5120,
                     .layers = 40,
                     .heads = 40,
                     .kv_heads = 40,
                     .head_dim = 128,
                     .ffn = 20480,
                     .vocab = 50272};
  const bytes per_token = kv_bytes_per_token(opt13b, {});
  CHECK(per_token == 800 * KiB);
  CHECK(to_string(per_token * 2048, GiB) == "1.56 GiB");  // "1.6 GB"
  CHECK((12 * GiB).count / per_token.count == 15'728);    // "15.7K"
}

TEST_CASE("seed 002: Llama-2-7B's weights in fp32, fp16, int8 and int4") {
  // The article counts 7e9 parameters: 26.08 GiB in fp32, about 13, 6.5 and 3.26 GiB.
  constexpr std::int64_t seven_billion = 7'000'000'000;
  CHECK(to_string(storage_bytes<fp32>(seven_billion)) == "26.08 GiB");
  CHECK(to_string(storage_bytes<fp16>(seven_billion)) == "13.04 GiB");
  CHECK(to_string(storage_bytes<int8>(seven_billion)) == "6.52 GiB");
  CHECK(to_string(storage_bytes<int4>(seven_billion)) == "3.26 GiB");
  // The real model: 6,738,415,616 parameters (+ 32 x 64 fp32 rotary inv_freq buffers).
  const model& m = models::llama_2_7b::value;
  CHECK(weight_bytes(m, {}, plain_weights<fp32>::value) == bytes{4 * 6'738'415'616 + 32 * 64 * 4});
  CHECK(weight_bytes(m, {}, plain_weights<fp16>::value) == bytes{2 * 6'738'415'616 + 32 * 64 * 4});
}

TEST_CASE("seed 002: Llama-2-70B in 4 bits runs on a 48 GB RTX A6000") {
  const model& m = models::llama_2_70b::value;
  const request_shape one{.batch = 1, .prompt = 2048};
  const bytes need = inference_required(m, {}, gptq<>::value, {}, one, gpus::rtx_a6000::value);
  CHECK(need < gpus::rtx_a6000::value.capacity);
  // ... and not in bf16, nor on a 24 GB card in 4 bits.
  CHECK(inference_required(m, {}, plain_weights<bf16>::value, {}, one, gpus::rtx_a6000::value) >
        gpus::rtx_a6000::value.capacity);
  CHECK(inference_required(m, {}, gptq<>::value, {}, one, gpus::rtx_4090::value) >
        gpus::rtx_4090::value.capacity);
}

TEST_CASE("a Hugging Face prefill's working memory, by hand and measured on an H100") {
  // Llama-3-8B cut to 2 layers, 8 sequences of 4,096 tokens (tau = 32,768), bf16. At layer 1's
  // MLP: the embeddings and the layer input the model loop keeps bound, the residual and the
  // normed input (4 tau h), SiLU(gate), up and their product (3 tau f), 2 B each.
  model m = models::llama_3_8b::value;
  m.layers = 2;
  const std::int64_t tau = 8 * 4096, h = 4096, f = 14336;
  const request_shape r{.batch = 8, .prompt = 4096};
  const bytes transients = inference_working_bytes(m, {}, r, bf16::value, false) +
                           loop_held_bytes(m, {}, r, bf16::value, 0);
  CHECK(transients == bytes{2 * (4 * tau * h + 3 * tau * f)});
  // tests/validation/gpu/inference.jsonl, llama3-8b-2l/infer/bf16/b8s4096/sdpa/keep1 (torch 2.11,
  // transformers 5.17): peak_allocated less the weights before the call, the 268,435,456 B cache
  // and the 2,052,096 B of bf16 logits.
  const std::int64_t measured = 7'206'151'168 - 3'043'271'680 - 268'435'456 - 2'052'096;
  CHECK(transients.count == doctest::Approx(measured).epsilon(0.0001));
  // One layer on the stage: its input is the embeddings.
  m.layers = 1;
  CHECK(loop_held_bytes(m, {}, r, bf16::value, 0) == bytes{2 * tau * h});
}

TEST_CASE("every position's logits: the final norm's output and the logits, measured to the byte") {
  // Qwen2.5-0.5B, model(input_ids) on 8 x 4,096 tokens (tau = 32,768) in bf16: the head's output
  // (tau x 151,936) beside the final norm's (tau x 896), 2 B each. tests/validation/gpu/
  // inference.jsonl, qwen2.5-0.5b/infer/bf16/b8s4096/sdpa/keep0: peak_allocated 11,484,113,920 B
  // less the weights before the call (1,065,462,784) and the cache (402,653,184).
  const model& m = models::qwen2_5_0_5b::value;
  const std::int64_t tau = 8 * 4096;
  const request_shape r{.batch = 8, .prompt = 4096, .all_logits = true};
  CHECK(all_logits_bytes(m, r, bf16::value) == bytes{2 * tau * 896 + 2 * tau * 151'936});
  CHECK(all_logits_bytes(m, r, bf16::value) == bytes{11'484'113'920 - 1'065'462'784 - 402'653'184});
  // It is the forward's working memory when larger than the layers'.
  for (const memory_entry& e : inference_memory(m, {}, weight_layout{}, {}, r))
    if (e.component == component::activations) CHECK(e.size == all_logits_bytes(m, r, bf16::value));
}

TEST_CASE("quantized weight layouts, by hand") {
  // Llama-3-8B: the linear weights of the layers (32 x 218,103,808 = 6,979,321,856 parameters)
  // in GPTQ int4 g128 (0.5 B + fp16 scale and 4-bit zero per 128 inputs per row), embedding and
  // head (2 x 525,336,576) and norms (65 x 4096) in fp16.
  const model& m = models::llama_3_8b::value;
  const std::int64_t per_layer_rows_cols[][2] = {{4096, 4096}, {1024, 4096},  {1024, 4096},
                                                 {4096, 4096}, {14336, 4096}, {14336, 4096},
                                                 {4096, 14336}};
  std::int64_t linear = 0;
  for (const auto& rc : per_layer_rows_cols)
    linear += rc[0] * rc[1] / 2 + rc[0] * (rc[1] / 128) * (2 + 0) + rc[0] * (rc[1] / 128) / 2;
  const std::int64_t other = 2 * (2 * 525'336'576 + 65 * 4096);
  CHECK(weight_bytes(m, {}, gptq<>::value) == bytes{32 * linear + other});
  // bitsandbytes int8: one fp32 scale per output row of every linear.
  std::int64_t int8 = 0;
  for (const auto& rc : per_layer_rows_cols) int8 += rc[0] * rc[1] + 4 * rc[0];
  CHECK(weight_bytes(m, {}, bnb_int8::value) == bytes{32 * int8 + other});
  // FP8 per tensor: one fp32 scale per weight.
  std::int64_t fp8 = 0;
  for (const auto& rc : per_layer_rows_cols) fp8 += rc[0] * rc[1] + 4;
  CHECK(weight_bytes(m, {}, fp8_weights<>::value) == bytes{32 * fp8 + other});
}

TEST_CASE("sliding windows cap their layers' cache and paged blocks round up") {
  // Mistral-7B: every layer windowed at 4096; an 8192-token request keeps 4096 tokens a layer.
  const request_shape long_request{.batch = 1, .prompt = 8192};
  CHECK(kv_cache_bytes(models::mistral_7b::value, {}, {}, long_request) == 128 * KiB * 4096);
  // Gemma-2-2B: layers 0, 2, ... windowed (13 of 26); 4096 B per token and layer.
  CHECK(kv_cache_bytes(models::gemma_2_2b::value, {}, {}, long_request) ==
        bytes{13 * 4096 * 4096 + 13 * 4096LL * 8192});
  // Paged blocks of 16: 1000 tokens take 63 blocks = 1008 tokens; 3 sequences x 2 beams.
  const request_shape r{.batch = 3, .beams = 2, .prompt = 900, .generated = 100};
  CHECK(kv_cache_bytes(models::llama_3_8b::value, {}, {.block_tokens = 16}, r) ==
        128 * KiB * 1008 * 6);
}

TEST_CASE("Hugging Face's cache keeps the prompt's storage in its sliding-window layers") {
  // Phi-3-mini: 32 layers, all windowed at 2,047 tokens, 32 KV heads of 96: 2 x 32 x 96 x 2 B =
  // 12,288 B a token and layer. After an 8,192-token prefill DynamicSlidingWindowLayer holds a
  // slice of the prompt's keys and values whose storage is all 8,192 tokens: 3 GiB, as measured
  // on an H200 (tests/validation/gpu/h200/full_size_inference.jsonl: the returned cache's CUDA
  // tensors hold 3,221,225,728 B, this and 32 tensors of 8 B, one a layer).
  const model& m = models::phi_3_mini::value;
  const request_shape prefill{.batch = 1, .prompt = 8192};
  CHECK(kv_cache_bytes(m, {}, {.prompt_views = true}, prefill) == bytes{32LL * 12288 * 8192});
  CHECK(kv_cache_bytes(m, {}, {}, prefill) == bytes{32LL * 12288 * 2047});  // a window each
  // A prompt within the window grows the cache to the window as it decodes, views or not.
  const request_shape inside{.batch = 1, .prompt = 1024, .generated = 4096};
  CHECK(kv_cache_bytes(m, {}, {.prompt_views = true}, inside) == bytes{32LL * 12288 * 2047});
}

TEST_CASE("Phi-3's fused gate_up output stays alive while its MLP runs, by hand") {
  // A layer's transients in bf16 for 8,192 tokens: the residual and the normed input (2 h), then
  // the MLP. Llama-style gate, up and product: 3 I. Phi-3 keeps gate_up's 2 I output (the
  // activation and the product read views of it) beside the activation and the product: 4 I.
  constexpr std::int64_t tokens = 8192;
  CHECK(inference_working_bytes(models::phi_3_mini::value, {}, {.prompt = tokens}, bf16::value,
                                false) == bytes{(2 * 3072 + 4 * 8192) * tokens * 2});
  CHECK(inference_working_bytes(models::llama_3_8b::value, {}, {.prompt = tokens}, bf16::value,
                                false) == bytes{(2 * 4096 + 3 * 14336) * tokens * 2});
}

TEST_CASE("tensor parallel splits KV heads, replicates them past their count, never splits MLA") {
  // Llama-2-70B has 8 KV heads: over 16 ranks each rank keeps one whole head per layer.
  CHECK(kv_bytes_per_token(models::llama_2_70b::value, {}, 16) == bytes{80 * 2 * 1 * 128 * 2});
  CHECK(kv_bytes_per_token(models::llama_2_70b::value, {}, 4) == bytes{80 * 2 * 2 * 128 * 2});
  CHECK(kv_bytes_per_token(models::deepseek_v3::value, {}, 8) == bytes{70'272});
}

TEST_CASE("quantized KV: fp8 halves it, int8 with an fp16 scale per head adds 2 bytes a head") {
  const model& m = models::llama_3_8b::value;
  CHECK(kv_bytes_per_token(m, {.format = fp8_e4m3::value}) == bytes{65'536});
  CHECK(kv_bytes_per_token(m, {.format = group_quantized<8, 128, fp16, 0>::value}) ==
        bytes{32 * 2 * 8 * (128 + 2)});
}

TEST_CASE("bad requests are errors that name the problem") {
  const model& m = models::llama_3_8b::value;
  CHECK_THROWS_WITH(kv_cache_bytes(m, {}, {}, {.batch = 0}),
                    "vramfit: batch must be positive, got 0");
  CHECK_THROWS_WITH(kv_cache_bytes(m, {}, {}, {.prompt = -1}),
                    "vramfit: prompt length must not be negative, got -1");
  CHECK_THROWS_WITH(kv_cache_bytes(m, {}, {.format = nf4::value}, {}),
                    doctest::Contains("KV cache format nf4 cannot hold a growing cache"));
  CHECK_THROWS_WITH(kv_cache_bytes(m, {}, {.format = tf32::value}, {}),
                    doctest::Contains("tf32 is a compute-only format"));
  CHECK_THROWS_AS(kv_cache_bytes(m, {}, {.block_tokens = -16}, {}), vramfit::error);
}

namespace {
double to_gib(bytes b) {
  return static_cast<double>(b.count) / (1LL << 30);
}
}  // namespace

TEST_CASE("vLLM's KV pool, by hand: Llama-3-8B on an H100 with vLLM's defaults there") {
  const model& m = models::llama_3_8b::value;
  const gpu& h100 = gpus::h100_80gb::value;
  const vllm_settings v = vllm_defaults(h100);
  CHECK(v.max_num_batched_tokens == 8192);  // vllm serve on a GPU of 70 GiB or more
  CHECK(v.max_num_seqs == 1024);
  const serving_budget b =
      serve(m, {}, plain_weights<bf16>::value, {.block_tokens = 16}, 8192, h100, v);
  CHECK(b.total == bytes{81080LL << 20});       // cudaMemGetInfo's 79.18 GiB, not 81559 MiB
  CHECK(b.requested == bytes{76'516'687'872});  // floor(85,018,542,080 x 0.9)
  CHECK(b.weights == bytes{2 * 8'030'261'248});
  // The sampler on 1024 rows of 128,256 logits: bf16 logits 2 B, fp32 copy 4, sorted values 4
  // and indices 8, ATen's reverse indices 8, cub's alternate keys 4 and values 8; and the
  // forward's hidden states [8192, 4096] in bf16. The forward's own peak, 8192 x (2 x 4096 +
  // 3 x 14336) x 2 B = 838,860,800, is smaller.
  CHECK(b.profile_peak == bytes{1024LL * 128'256 * 38 + 8192LL * 4096 * 2});
  CHECK(b.non_torch == bytes{139'586'437});  // the measured 0.13 GiB
  CHECK(b.kv_pool == bytes{55'258'772'603});
  // 2 x 8 KV heads x 128 x 2 B x 32 layers = 131,072 B per token; whole 16-token blocks.
  CHECK(b.kv_tokens == 55'258'772'603 / (131'072 * 16) * 16);
  CHECK(b.sequences == 51);
  // llm-d's vLLM run of Llama-3.1-8B (same shapes) logged a 51.38 GiB KV pool and a 4.76 GiB
  // peak activation on this GPU: within 0.2 % and 1.1 %.
  CHECK(std::abs(to_gib(b.kv_pool) / 51.38 - 1) < 0.002);
  CHECK(std::abs(to_gib(b.profile_peak) / 4.76 - 1) < 0.011);
}

TEST_CASE("vLLM's pool under pipeline parallelism holds each rank's own layers") {
  // Llama-3-70B over 2 stages: 40 layers of 2 x 8 KV heads x 128 x 2 B per token on a rank.
  const model& m = models::llama_3_70b::value;
  const gpu& h100 = gpus::h100_80gb::value;
  const serving_budget b = serve(m, layout{.pipeline = 2}, plain_weights<bf16>::value,
                                 {.block_tokens = 16}, 4096, h100, vllm_defaults(h100));
  CHECK(b.kv_tokens == b.kv_pool.count / (4096LL * 40 * 16) * 16);
  CHECK(b.kv_tokens > 0);
  CHECK_THROWS_WITH(serve(models::bert_base_uncased::value, {}, plain_weights<bf16>::value, {}, 512,
                          h100, vllm_defaults(h100)),
                    doctest::Contains("is an encoder: it keeps no KV cache"));
}

TEST_CASE("vLLM's defaults by GPU and entry point, and the sort's batches of 2^31 - 1") {
  CHECK(vllm_defaults(gpus::a100_80gb::value).max_num_seqs == 256);  // A100s are excluded
  CHECK(vllm_defaults(gpus::a100_80gb::value).max_num_batched_tokens == 2048);
  CHECK(vllm_defaults(gpus::l40s::value).max_num_seqs == 256);  // under 70 GiB
  CHECK(vllm_defaults(gpus::h200::value, 1, vllm_entrypoint::llm_class).max_num_batched_tokens ==
        16384);
  CHECK(vllm_defaults(gpus::h100_80gb::value, 2).non_torch == bytes{55 * (1LL << 30) / 100});
  // 16384 rows of a 262,144 vocabulary: 2^32 logits. ATen sorts floor((2^31 - 1) / 262,144) =
  // 8191 rows at a time, so its reverse indices and cub's buffers (20 B) cover 8191 rows.
  model m = models::llama_3_8b::value;
  m.vocab = 262'144;
  const vllm_settings v{.max_num_batched_tokens = 16384, .max_num_seqs = 16384};
  CHECK(profile_run_peak(m, {}, plain_weights<bf16>::value, v) ==
        bytes{16384LL * 262'144 * 18 + 8191LL * 262'144 * 20 + 16384LL * 4096 * 2});
}

TEST_CASE("the solvers agree with brute force") {
  const model& m = models::llama_3_8b::value;
  const gpu& g = gpus::l4::value;
  const request_shape r{.batch = 1, .prompt = 4096};
  const std::int64_t batch = max_batch(m, {}, awq<>::value, {}, r, g, 512);
  std::int64_t brute = 0;
  for (std::int64_t n = 1; n <= 512; ++n) {
    request_shape x = r;
    x.batch = n;
    if (inference_required(m, {}, awq<>::value, {}, x, g) <= g.capacity) brute = n;
  }
  CHECK(batch == brute);
  CHECK(batch > 0);
  // The longest context: it fits, one more token does not.
  const std::int64_t context = max_context(m, {}, awq<>::value, {}, {.batch = 4}, g);
  request_shape at{.batch = 4, .prompt = context};
  CHECK(inference_required(m, {}, awq<>::value, {}, at, g) <= g.capacity);
  at.prompt = context + 1;
  CHECK(inference_required(m, {}, awq<>::value, {}, at, g) > g.capacity);
  // The smallest tensor-parallel degree for Llama-3-70B in bf16 on H100s: the first that fits.
  const model& big = models::llama_3_70b::value;
  const std::int64_t tp =
      min_tensor_parallel(big, plain_weights<bf16>::value, {}, r, gpus::h100_80gb::value);
  std::int64_t first = 0;
  for (std::int64_t t : {1, 2, 4, 8}) {
    if (first == 0 && inference_required(big, {.tensor = t}, plain_weights<bf16>::value, {}, r,
                                         gpus::h100_80gb::value) <= gpus::h100_80gb::value.capacity)
      first = t;
  }
  CHECK(tp == first);
  CHECK(tp == 2);
}

TEST_CASE("seed 004: creating the model in its final format halves the loading peak") {
  // Raschka's ViT-L/16 with a 10-class head (303,311,882 parameters): "1.24 GB vs 0.65 GB" of
  // max_memory_reserved, decimal GB, when built in fp32 on the GPU then cast to bf16 versus
  // created in bf16 (Fabric init_module). vramfit counts the tensors (allocated), so reserved
  // memory is a little higher.
  model vit = models::vit_l_16::value;
  vit.encoder.classes = 10;
  REQUIRE(parameters(tensors(vit)) == 303'311'882);
  const loading_peak cast =
      load_peak(vit, plain_weights<bf16>::value, load_kind::fp32_on_device_then_cast);
  const loading_peak direct = load_peak(vit, plain_weights<bf16>::value, load_kind::direct);
  // fp32 model + the largest tensor (4096 x 1024) in bf16 while it is cast.
  CHECK(cast.device == bytes{4 * 303'311'882 + 2 * 4096 * 1024});
  CHECK(direct.device == bytes{2 * 303'311'882});
  CHECK(to_string(cast.device, GB) == "1.22 GB");    // measured 1.24 GB reserved
  CHECK(to_string(direct.device, GB) == "0.61 GB");  // measured 0.65 GB reserved
  const loading_peak host = load_peak(vit, plain_weights<bf16>::value, load_kind::fp32_on_host);
  CHECK(host.host == bytes{4 * 303'311'882});
}

TEST_CASE("eager attention in a prefill: the scores at softmax, by hand and as traced") {
  // Llama-3-8B, one sequence of 4,096 tokens (tau), bf16. At eager_attention_forward's softmax:
  // the normed input (tau h), Q (tau x 32 x 128), K and V repeated to 32 heads (2 x 32 x tau x
  // 128), 2 B each, and per score (32 x tau x tau) the masked scores (2 B), their fp32 copy and
  // softmax's fp32 output (4 + 4); beside them the forward's 4D causal mask (tau x tau x 2 B).
  const model& m = models::llama_3_8b::value;
  const std::int64_t tau = 4096, h = 4096, f = 14336;
  const request_shape eager{.prompt = tau, .attention = attention_kind::eager};
  const std::int64_t held = 2 * (tau * h + tau * 32 * 128 + 2 * 32 * tau * 128);
  const std::int64_t scores = 32 * tau * tau;
  CHECK(attention_working_bytes(m, {}, eager, bf16::value) == bytes{held + 10 * scores});
  CHECK(eager_mask_bytes(eager, bf16::value) == bytes{2 * tau * tau});
  CHECK(inference_working_bytes(m, {}, eager, bf16::value, false) ==
        bytes{held + 10 * scores + 2 * tau * tau});
  CHECK(held + 10 * scores + 2 * tau * tau == 5'536'481'280);
  // fp32: the matmul's output and its scaled copy, 4 + 4 B per score, 4 B per element; fp16 on
  // CUDA: softmax's half_to_float kernel, then .to(): 2 + 4 + 2.
  CHECK(attention_working_bytes(m, {}, eager, fp32::value) == bytes{2 * held + 8 * scores});
  CHECK(attention_working_bytes(m, {}, eager, fp16::value) == bytes{held + 8 * scores});
  // sdpa: K and V repeated and the kernel's output, no scores: the MLP's set stays the larger
  // (the residual and normed input, gate, up and their product), as with flash.
  const request_shape sdpa{.prompt = tau, .attention = attention_kind::sdpa};
  CHECK(attention_working_bytes(m, {}, sdpa, bf16::value) ==
        bytes{2 * (tau * h + 2 * tau * 32 * 128 + 2 * 32 * tau * 128)});
  CHECK(inference_working_bytes(m, {}, sdpa, bf16::value, false) ==
        bytes{2 * tau * (2 * h + 3 * f)});
  CHECK(inference_working_bytes(m, {}, sdpa, bf16::value, false) ==
        inference_working_bytes(m, {}, request_shape{.prompt = tau}, bf16::value, false));
  // The CPU trace (tests/validation/eager_prefill_trace.txt): 2 sequences of 64 tokens, 8 heads
  // of 16 with 2 KV heads: above the query, the cache's K and V and the mask, 720,896 B in bf16
  // and 655,360 B in fp32 (the repeated K and V and the scores); the normed input is not traced.
  model small = m;
  small.hidden = 128;
  small.heads = 8;
  small.kv_heads = 2;
  small.head_dim = 16;
  const request_shape traced{.batch = 2, .prompt = 64, .attention = attention_kind::eager};
  const std::int64_t normed_and_query = 2 * (128 * 128);  // elements: 128 tokens x 128, twice
  CHECK(attention_working_bytes(small, {}, traced, bf16::value) ==
        bytes{720'896 + 2 * normed_and_query});
  CHECK(attention_working_bytes(small, {}, traced, fp32::value) ==
        bytes{655'360 + 4 * normed_and_query});
  // Other attention functions (GPT-2's, MLA, sinks) are refused, not guessed.
  CHECK_THROWS_AS(attention_working_bytes(models::gpt2::value, {}, eager, bf16::value), error);
}

TEST_CASE("every position's logits need a vocabulary: a ViT's request is refused by name") {
  const model& vit = models::vit_l_16::value;
  const request_shape all{.prompt = 197, .all_logits = true};
  CHECK_THROWS_WITH(all_logits_bytes(vit, all, bf16::value),
                    doctest::Contains("ViT-L/16 has no vocabulary"));
  // A language model's: the final norm's output and the logits, [197, hidden] and [197, vocab].
  const model& gpt2 = models::gpt2::value;
  CHECK(all_logits_bytes(gpt2, all, bf16::value) == bytes{2 * 197 * (768 + 50257)});
}
