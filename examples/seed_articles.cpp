// Prints the tables of docs/seed-articles.md: every worked example of the five source articles,
// the article's figure beside vramfit's. The tests check the same numbers.
#include <iostream>
#include <string>
#include <vramfit/vramfit.hpp>

#include "report.hpp"

using namespace vramfit;
using namespace vramfit::literals;

namespace {
/// Model-state bytes per parameter of one 4096 x 4096 weight.
std::string per_parameter(const precision& p, const optimizer& o) {
  tensor_ledger one{};
  tensor_group g{};
  g.name.parts[0] = "weight";
  g.shape[0] = g.shape[1] = 4096;
  g.rank = 2;
  g.kind = tensor_kind::mlp;
  one.push_back(g);
  const memory_ledger l = model_states(training{models::llama_3_8b::value, p, o}, one, 0);
  const bytes b = total(l, component::weights) + total(l, component::gradients) +
                  total(l, component::master_weights) + total(l, component::optimizer_states);
  return std::to_string(b.count / (4096 * 4096)) + " B";
}

std::string states(const memory_ledger& l, component c, byte_unit u) {
  return to_string(total(l, c), u);
}
}  // namespace

int main() {
  const report::page_blocks page(std::cout, "seed_articles.cpp");
  // 000: model states of mixed-precision Adam (the ZeRO view).
  report::table t0({"item", "article", "vramfit"});
  t0.add({"fp16 weights + fp16 gradients + fp32 master, m, v", "16 B per parameter (2 + 2 + 12)",
          per_parameter(mixed<fp16, fp16>::value, adam<>::value)});
  page.print("000", t0);

  // 001: bytes per parameter (after the Hugging Face docs).
  report::table t1({"item", "article", "vramfit"});
  t1.add({"fp32 weights and gradients, SGD", "4 + 4 + 0",
          per_parameter(fp32_training::value, sgd<>::value)});
  t1.add({"fp32, SGD with momentum", "4 + 4 + 4",
          per_parameter(fp32_training::value, sgd<optimizer_options{.momentum = true}>::value)});
  t1.add({"fp32, AdamW", "4 + 4 + 8", per_parameter(fp32_training::value, adamw<>::value)});
  t1.add({"mixed precision (fp32 + fp16 copy), AdamW", "6 + 4 + 8 = 18",
          per_parameter(amp<fp16>::value, adamw<>::value)});
  page.print("001", t1);

  // 002: memory from the parameter count, 7e9 x bytes and the exact model.
  report::table t2({"item", "article", "vramfit, 7e9 x bytes", "vramfit, the real model"});
  constexpr std::int64_t seven = 7'000'000'000;
  const model& l7 = models::llama_2_7b::value;
  t2.add({"Llama-2-7B fp32", "26.08 GiB", to_string(storage_bytes<fp32>(seven)),
          to_string(weight_bytes(l7, {}, plain_weights<fp32>::value))});
  t2.add({"Llama-2-7B fp16", "about 13 GiB", to_string(storage_bytes<fp16>(seven)),
          to_string(weight_bytes(l7, {}, plain_weights<fp16>::value))});
  t2.add({"Llama-2-7B int8", "about 6.5 GiB", to_string(storage_bytes<int8>(seven)),
          to_string(weight_bytes(l7, {}, bnb_int8::value)) + " (bitsandbytes)"});
  t2.add({"Llama-2-7B int4", "3.26 GiB", to_string(storage_bytes<int4>(seven)),
          to_string(weight_bytes(l7, {}, gptq<>::value)) + " (GPTQ g128)"});
  const request_shape one{.prompt = 4096};
  t2.add({"Llama-2-70B int4 on a 48 GB RTX A6000", "runs", "-",
          to_string(inference_required(models::llama_2_70b::value, {}, gptq<>::value, {}, one,
                                       gpus::rtx_a6000::value)) +
              " of " + to_string(gpus::rtx_a6000::value.capacity) + " with 4096 tokens: runs"});
  page.print("002", t2);

  // 003: Mixtral-8x7B on a 44 GB card, as mixed<bf16, bf16> with Adam.
  const model& mx = models::mixtral_8x7b::value;
  report::table t3({"item", "article", "vramfit"});
  t3.add({"one expert", "about 1.76e8 parameters, 352 MB in bf16",
          report::grouped(3LL * 4096 * 14336) + " parameters, " +
              to_string(storage_bytes<bf16>(3LL * 4096 * 14336), MB)});
  t3.add({"all experts", "about 90 GB",
          to_string(storage_bytes<bf16>(parameters(tensors(mx), tensor_kind::expert)), GB)});
  t3.add({"case A: routers", "4096 x 8 per layer, tiny",
          report::grouped(parameters(tensors(mx), tensor_kind::router)) + " parameters"});
  const memory_ledger b =
      model_states(training{mx, mixed<bf16, bf16>::value, adam<>::value,
                            partial<select::kinds(tensor_kind::expert).layers(0, 6).experts(0, 2),
                                    select::kinds(tensor_kind::router)>::value});
  t3.add({"case B: gradients", "4.23 GB", states(b, component::gradients, GB)});
  t3.add({"case B: Adam m and v", "16.9 GB", states(b, component::optimizer_states, GB)});
  t3.add({"case B: master weights", "8.46 GB", states(b, component::master_weights, GB)});
  const finetuning c_mode = qlora<16, "w1,w2,w3">::value;
  t3.add({"case C: LoRA parameters", "0.885M per expert, 226.6M",
          report::grouped(trainable_parameters(c_mode, tensors(mx)))});
  const memory_ledger c =
      model_states(training{mx, mixed<bf16, bf16>::value, adam<>::value, c_mode});
  t3.add(
      {"case C: Adam + master", "2.72 GB",
       to_string(total(c, component::optimizer_states) + total(c, component::master_weights), GB)});
  page.print("003", t3);

  // 004: cutting transformer memory (after Raschka), ViT-L/16 with a 10-class head.
  model vit = models::vit_l_16::value;
  vit.encoder.classes = 10;
  report::table t4({"item", "article", "vramfit"});
  t4.add(
      {"model created on the GPU in fp32, then bf16", "1.24 GB",
       to_string(
           load_peak(vit, plain_weights<bf16>::value, load_kind::fp32_on_device_then_cast).device,
           GB)});
  t4.add({"model created directly in bf16", "0.65 GB",
          to_string(load_peak(vit, plain_weights<bf16>::value, load_kind::direct).device, GB)});
  const auto adam_states = total(model_states(training{vit, pure<bf16>::value, adam<>::value}),
                                 component::optimizer_states);
  const auto sgd_states = total(model_states(training{vit, pure<bf16>::value, sgd<>::value}),
                                component::optimizer_states);
  t4.add({"Adam's states vs SGD's (bf16-true)", "2/3 fewer numbers with SGD",
          to_string(adam_states, GB) + " vs " + to_string(sgd_states, GB)});
  page.print("004", t4);
}
