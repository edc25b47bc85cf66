// Prints the tables of docs/inference.md: KV cache per token of every preset, weights in every
// runtime layout, serving budgets, the solvers' answers and loading peaks.
#include <iostream>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "report.hpp"

// [start:serve]
using namespace vramfit;

// Seed article 002: Llama-2-70B in 4-bit GPTQ serves a 4096-token request on a 48 GB RTX A6000...
constexpr request_shape one_request{.batch = 1, .prompt = 4096};
static_assert(inference_required(models::llama_2_70b::value, {}, gptq<>::value, {}, one_request,
                                 gpus::rtx_a6000::value) <= gpus::rtx_a6000::value.capacity);

// ... and the solvers answer at compile time too: how many such requests fit at once.
constexpr std::int64_t batch = max_batch(models::llama_2_70b::value, {}, gptq<>::value, {},
                                         one_request, gpus::rtx_a6000::value, 64);
static_assert(batch >= 4);
// [end:serve]

int main() {
  const report::page_blocks page(std::cout, "inference_memory.cpp");
  // KV cache per token, every layer at full length, one GPU.
  report::table kv({"preset", "bf16", "fp8", "int8 (+fp16 scale per head)", "bf16, TP 8"});
  for (const preset& p : presets) {
    if (p.value.is_encoder()) continue;
    kv_cache_config int8{group_quantized<8, 128, fp16, 0>::value};
    int8.format.level1.block = p.value.is_mla() ? 1 << 20 : p.value.head_dim;
    const bool tp8 = p.value.heads % 8 == 0 &&
                     (p.value.is_mla() || p.value.kv_heads % 8 == 0 || 8 % p.value.kv_heads == 0);
    kv.add({std::string("`") + p.key + "`", to_string(kv_bytes_per_token(p.value, {})),
            to_string(kv_bytes_per_token(p.value, {fp8_e4m3::value})),
            to_string(kv_bytes_per_token(p.value, int8)),
            tp8 ? to_string(kv_bytes_per_token(p.value, {}, 8)) : "-"});
  }
  page.print("kv-per-token", kv);

  const char* keys[] = {"llama-2-7b", "llama-3-8b", "mixtral-8x7b", "llama-2-70b", "deepseek-v3"};
  const weight_layout layouts[] = {
      plain_weights<bf16>::value, bnb_int8::value,      bnb_4bit<>::value,   gptq<>::value,
      fp8_weights<>::value,       nvfp4_weights::value, mxfp4_experts::value};
  std::vector<std::string> header{"preset"};
  for (const weight_layout& w : layouts) header.push_back(w.name);
  report::table weights(header);
  for (const char* key : keys) {
    std::vector<std::string> row{std::string("`") + key + "`"};
    for (const weight_layout& w : layouts)
      row.push_back(to_string(weight_bytes(*find_preset(key), {}, w)));
    weights.add(row);
  }
  page.print("weights", weights);

  // The largest batch of requests of each context, one GPU, KV cache in bf16.
  report::table solve({"model, weights", "GPU", "context 2048", "context 8192", "context 32768"});
  struct row {
    const char* key;
    weight_layout w;
    gpu g;
  };
  const row rows[] = {{"llama-3-8b", plain_weights<bf16>::value, gpus::h100_80gb::value},
                      {"llama-3-8b", awq<>::value, gpus::l4::value},
                      {"llama-3-8b", awq<>::value, gpus::rtx_4090::value},
                      {"mistral-7b", plain_weights<bf16>::value, gpus::a100_40gb::value},
                      {"llama-2-70b", gptq<>::value, gpus::rtx_a6000::value},
                      {"qwen2.5-72b", fp8_weights<>::value, gpus::h200::value}};
  for (const row& r : rows) {
    std::vector<std::string> cells{std::string("`") + r.key + "`, " + r.w.name, r.g.name};
    for (std::int64_t context : {2048, 8192, 32768})
      cells.push_back(report::grouped(
          max_batch(*find_preset(r.key), {}, r.w, {}, {.prompt = context}, r.g, 4096)));
    solve.add(cells);
  }
  page.print("requests", solve);

  // Serving budgets: vLLM's defaults for each GPU, 16-token blocks.
  report::table budget({"model, GPU", "profile run", "KV pool", "KV tokens", "sequences of 8192"});
  for (const row& r : rows) {
    const serving_budget b =
        serve(*find_preset(r.key), {}, r.w, {.block_tokens = 16}, 8192, r.g, vllm_defaults(r.g));
    budget.add({std::string("`") + r.key + "` " + r.w.name + ", " + r.g.name,
                to_string(b.profile_peak), to_string(b.kv_pool), report::grouped(b.kv_tokens),
                report::grouped(b.sequences)});
  }
  page.print("budgets", budget);

  // The smallest tensor-parallel degree on H100s, bf16 weights, 8192 tokens.
  report::table tp({"preset", "TP degree"});
  for (const char* key :
       {"llama-3-8b", "llama-3-70b", "qwen2.5-72b", "mixtral-8x22b", "llama-3.1-405b"}) {
    const std::int64_t t = min_tensor_parallel(*find_preset(key), plain_weights<bf16>::value, {},
                                               {.prompt = 8192}, gpus::h100_80gb::value);
    tp.add({std::string("`") + key + "`", t == 0 ? "does not fit on 64" : std::to_string(t)});
  }
  page.print("min-tp", tp);

  // Loading peaks (seed article 004).
  report::table load(
      {"preset", "final bf16", "built in fp32 on the GPU, then cast", "host, fp32 on the host"});
  for (const char* key : {"vit-l-16", "llama-2-7b", "llama-3-8b"}) {
    const model& m = *find_preset(key);
    load.add(
        {std::string("`") + key + "`",
         to_string(load_peak(m, plain_weights<bf16>::value, load_kind::direct).device),
         to_string(
             load_peak(m, plain_weights<bf16>::value, load_kind::fp32_on_device_then_cast).device),
         to_string(load_peak(m, plain_weights<bf16>::value, load_kind::fp32_on_host).host)});
  }
  page.print("loading", load);
}
