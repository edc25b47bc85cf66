// Unit tier: training model states against independent numbers: the seed articles' bytes per
// parameter, the ZeRO paper's Table 1, DeepSpeed's estimator outputs for T0_3B, and hand
// derivations. Each framework's own buffers: fsdp_test, deepspeed_zero_test, megatron_test,
// ddp_test.
#include <doctest/doctest.h>

#include <cmath>
#include <string_view>
#include <utility>
#include <vector>
#include <vramfit/deepspeed_estimate.hpp>
#include <vramfit/presets.hpp>
#include <vramfit/timeline.hpp>
#include <vramfit/training.hpp>

#include "model_state_checks.hpp"
#include "tiny_llama.hpp"

using namespace vramfit;
using namespace vramfit::literals;
using namespace model_state_checks;

TEST_CASE("bytes per parameter: the ZeRO paper's 16 and the seed articles' optimizer figures") {
  const std::int64_t n = 1'000'000;  // one 1000 x 1000 weight
  const tensor_ledger w = one_matrix(1000, 1000);
  // ZeRO paper §3.1 / seed 000: fp16 weights 2 + fp16 gradients 2 + fp32 master, m, v 12 = 16.
  const training zero_paper{stand_in, mixed<fp16, fp16>::value, adam<>::value};
  CHECK(states_on_device(model_states(zero_paper, w, 0)) == bytes{16 * n});
  CHECK(total(model_states(zero_paper, w, 0), component::optimizer_states) == bytes{8 * n});
  // Seed 001 (after the HF docs): optimizer bytes per parameter in fp32 training: SGD 0,
  // SGD with momentum 4, AdamW 8; seed 002: bitsandbytes 8-bit AdamW 2 (+ fp32 block scales,
  // 2 x 4 B per 256 elements: 8000000/256 = 31250 bytes here).
  const auto states = [&](const optimizer& o) {
    return total(model_states(training{stand_in, fp32_training::value, o}, w, 0),
                 component::optimizer_states);
  };
  CHECK(states(sgd<>::value) == bytes{0});
  CHECK(states(sgd<optimizer_options{.momentum = true}>::value) == bytes{4 * n});
  CHECK(states(adamw<>::value) == bytes{8 * n});
  CHECK(states(adamw_8bit<>::value) == bytes{2 * n + 2 * 4 * (n / 256 + 1)});
  // fp32 training: weights 4 + gradients 4.
  const memory_ledger plain =
      model_states(training{stand_in, fp32_training::value, sgd<>::value}, w, 0);
  CHECK(states_on_device(plain) == bytes{8 * n});
}

TEST_CASE("the HF rule: mixed-precision AdamW is 18 bytes per parameter") {
  // HF "Model training anatomy": weights 4 (fp32) + 2 (fp16 copy), gradients 4, AdamW 8 = 18, when
  // every parameter is a matmul weight (autocast copies only those).
  const std::int64_t n = 4096LL * 4096;
  const memory_ledger l =
      model_states(training{stand_in, amp<fp16>::value, adamw<>::value}, one_matrix(4096, 4096), 0);
  CHECK(states_on_device(l) == bytes{18 * n});
  CHECK(entry(l, "autocast / fp8 weight copies") == bytes{2 * n});
  // Adam's step counter lives on the host unless fused (torch/optim/adam.py): 4 bytes.
  CHECK(total(l, memory_space::host) == bytes{4});
}

TEST_CASE("ZeRO paper Table 1: every cell within its printed rounding") {
  // Rajbhandari et al. 2019, Table 1: per-device model states in GB (10^9 B) for mixed-precision
  // Adam (K = 12): P_os, P_os+g, P_os+g+p. Printed values as {value x 10^decimals, decimals}.
  struct printed {
    std::int64_t scaled;
    int decimals;
  };
  struct row {
    std::int64_t n_d;
    printed cells[9];
  };
  const row table[] = {
      {1,
       {{120, 0},
        {120, 0},
        {120, 0},
        {2048, 0},
        {2048, 0},
        {2048, 0},
        {16000, 0},
        {16000, 0},
        {16000, 0}}},
      {4,
       {{525, 1},
        {413, 1},
        {30, 0},
        {896, 0},
        {704, 0},
        {512, 0},
        {7000, 0},
        {5500, 0},
        {4000, 0}}},
      {16,
       {{356, 1},
        {216, 1},
        {75, 1},
        {608, 0},
        {368, 0},
        {128, 0},
        {4750, 0},
        {2875, 0},
        {1000, 0}}},
      {64,
       {{314, 1}, {166, 1}, {188, 2}, {536, 0}, {284, 0}, {32, 0}, {4187, 0}, {2218, 0}, {250, 0}}},
      {256,
       {{304, 1}, {154, 1}, {47, 2}, {518, 0}, {263, 0}, {8, 0}, {4046, 0}, {2054, 0}, {625, 1}}},
      {1024,
       {{301, 1}, {151, 1}, {12, 2}, {513, 0}, {257, 0}, {2, 0}, {4011, 0}, {2013, 0}, {156, 1}}},
  };
  const std::int64_t models[] = {7'500'000'000, 128'000'000'000, 1'000'000'000'000};
  for (const row& r : table) {
    for (int m = 0; m < 3; ++m) {
      for (int stage = 1; stage <= 3; ++stage) {
        const printed cell = r.cells[m * 3 + stage - 1];
        CAPTURE(r.n_d);
        CAPTURE(models[m]);
        CAPTURE(stage);
        // Ψ as one [Ψ / 1000, 1000] matrix; the paper's ZeRO: exactly the policy's states / N_d.
        const training t{stand_in,
                         mixed<fp16, fp16>::value,
                         adam<>::value,
                         full_finetune::value,
                         {.data = r.n_d,
                          .zero = static_cast<sharding>(stage),
                          .implementation = shard_implementation::paper}};
        const bytes b = states_on_device(model_states(t, one_matrix(models[m] / 1000, 1000), 0));
        const double gb = static_cast<double>(b.count) / 1e9;
        const double scale = std::pow(10.0, cell.decimals);
        // The paper both rounds and truncates: within one unit of the last printed digit.
        CHECK(std::abs(gb * scale - static_cast<double>(cell.scaled)) <= 1.0);
      }
    }
  }
}

TEST_CASE("the gradients' format: a choice under an fp32 master, the parameters' otherwise") {
  // mixed<bf16> with bf16 gradients is mixed<bf16, bf16>, named alike; back to fp32 is mixed<bf16>.
  const precision p = with_gradients(mixed<bf16>::value, bf16::value);
  CHECK(std::string(p.name) == mixed<bf16, bf16>::value.name);
  CHECK(std::string(p.gradients.name) == "bf16");
  CHECK(std::string(with_gradients(p, fp32::value).name) == "mixed-bf16");
  CHECK(std::string(with_gradients(mixed<bf16>::value, fp16::value).name) ==
        "mixed-bf16-fp16-grads");
  // Seed 000's 16 bytes per parameter: bf16 weights and gradients, fp32 master, Adam's two fp32
  // moments.
  const tensor_ledger w = one_matrix(1000, 1000);
  const memory_ledger l = model_states(training{stand_in, p, adam<>::value}, w, 0);
  CHECK(states_on_device(l) == bytes{16 * 1'000'000});
  CHECK_THROWS_WITH(with_gradients(amp<bf16>::value, bf16::value),
                    doctest::Contains("gradients_take_the_parameters_format: under amp-bf16"));
  CHECK_THROWS_WITH(with_gradients(pure<bf16>::value, fp16::value),
                    doctest::Contains("its parameter's format (bf16), not fp16"));
  CHECK_THROWS_WITH(with_gradients(mixed<bf16>::value, nf4::value),
                    doctest::Contains("plain float format"));
}

TEST_CASE("DeepSpeed's ZeRO-3 estimator for T0_3B, every cell") {
  // HF Transformers DeepSpeed docs: estimate_zero3_model_states_mem_needs_all_live for
  // bigscience/T0_3B: "2783M total params, 65M largest layer params"; "GB" there are GiB.
  const tensor_ledger t5 = t0_3b();
  REQUIRE(parameters(t5) == 2'783'959'040);
  const std::int64_t largest = 32128LL * 2048;  // shared.weight, the largest module's
  struct cell {
    std::int64_t gpus;
    bool offload_optimizer, offload_params, zero_init;
    const char* per_cpu;
    const char* per_gpu;
  };
  const cell table[] = {
      {1, true, true, true, "70.00 GiB", "0.25 GiB"},
      {1, true, true, false, "70.00 GiB", "0.25 GiB"},
      {1, true, false, true, "62.23 GiB", "5.43 GiB"},
      {1, true, false, false, "62.23 GiB", "5.43 GiB"},
      {1, false, false, true, "0.37 GiB", "46.91 GiB"},
      {1, false, false, false, "15.56 GiB", "46.91 GiB"},
      {2, true, true, true, "70.00 GiB", "0.25 GiB"},
      {2, true, true, false, "70.00 GiB", "0.25 GiB"},
      {2, true, false, true, "62.23 GiB", "2.84 GiB"},
      {2, true, false, false, "62.23 GiB", "2.84 GiB"},
      {2, false, false, true, "0.74 GiB", "23.58 GiB"},
      {2, false, false, false, "31.11 GiB", "23.58 GiB"},
  };
  for (const cell& c : table) {
    CAPTURE(c.gpus);
    CAPTURE(c.offload_optimizer);
    CAPTURE(c.offload_params);
    CAPTURE(c.zero_init);
    const deepspeed_estimate e = deepspeed_zero3_estimate(
        parameters(t5), largest, c.gpus, 1, c.offload_optimizer, c.offload_params, c.zero_init);
    CHECK(to_string(e.per_gpu, GiB) == std::string(c.per_gpu));
    CHECK(to_string(e.per_node_cpu, GiB) == std::string(c.per_cpu));
  }
}

TEST_CASE("seed 003: Mixtral-8x7B fine-tuning cases A, B and C") {
  // The article's accounting (bf16 weights and gradients, fp32 Adam m and v, fp32 master
  // weights: 16 B per trained parameter) is mixed<bf16, bf16> with Adam; its GB are 10^9 B.
  const model& mixtral = models::mixtral_8x7b::value;
  const auto trained_states = [](const memory_ledger& l) {
    return entry(l, "weights (trained)") + total(l, component::gradients) +
           total(l, component::master_weights) + total(l, component::optimizer_states);
  };

  // Case A, routers only: 4096 x 8 per layer, 32 layers = 1,048,576 parameters ("MB level").
  const memory_ledger a =
      model_states(training{mixtral, mixed<bf16, bf16>::value, adam<>::value,
                            partial<select::kinds(tensor_kind::router)>::value});
  CHECK(entry(a, "weights (trained)") == bytes{2 * 1'048'576});
  CHECK(trained_states(a) == bytes{16 * 1'048'576});  // 16.78 MB

  // Case B, the bottom 6 layers x 2 experts + the routers: 6 x 2 x 176,160,768 + 1,048,576.
  const std::int64_t b_params = 6 * 2 * 176'160'768LL + 1'048'576;
  const memory_ledger b =
      model_states(training{mixtral, mixed<bf16, bf16>::value, adam<>::value,
                            partial<select::kinds(tensor_kind::expert).layers(0, 6).experts(0, 2),
                                    select::kinds(tensor_kind::router)>::value});
  CHECK(entry(b, "weights (trained)") == bytes{2 * b_params});
  CHECK(to_string(entry(b, "weights (trained)"), GB) == "4.23 GB");           // article: 4.23
  CHECK(to_string(total(b, component::gradients), GB) == "4.23 GB");          // 4.23
  CHECK(to_string(total(b, component::optimizer_states), GB) == "16.92 GB");  // 16.9
  CHECK(to_string(total(b, component::master_weights), GB) == "8.46 GB");     // 8.46
  CHECK(to_string(trained_states(b), GB) == "33.84 GB");                      // 33.8
  // Our stated assumption: the article leaves the frozen weights out. In bf16 they are
  // 2 x (46,702,792,704 - b_params) bytes = 89.18 GB on their own, so case B needs them offloaded
  // or quantized to fit the 44 GB card at all.
  CHECK(entry(b, "weights (frozen)") == bytes{2 * (46'702'792'704 - b_params)});

  // Case C, a 4-bit base and LoRA r = 16 on every expert's w1, w2, w3: per expert
  // 16 x ((4096 + 14336) x 3) = 884,736 ("0.885M"), 8 x 32 experts: 226,492,416 ("226.6M").
  const memory_ledger c = model_states(
      training{mixtral, mixed<bf16, bf16>::value, adam<>::value, qlora<16, "w1,w2,w3">::value});
  const std::int64_t lora_params = 884'736LL * 8 * 32;
  CHECK(entry(c, "weights (trained)") == bytes{2 * lora_params});
  CHECK(to_string(entry(c, "weights (trained)"), GB) == "0.45 GB");   // 0.45
  CHECK(to_string(total(c, component::gradients), GB) == "0.45 GB");  // 0.45
  CHECK(to_string(total(c, component::optimizer_states) + total(c, component::master_weights),
                  GB) == "2.72 GB");                     // 2.72
  CHECK(to_string(trained_states(c), GB) == "3.62 GB");  // 3.6
  // The frozen base: NF4 + double quantization for every linear weight in the layers, bf16 for
  // the embedding, the norms and the head, all well under 44 GB.
  CHECK(entry(c, "weights (frozen)") < 44_GB - trained_states(c));
}

TEST_CASE("transformers 5 with bitsandbytes keeps an MoE's packed experts and router unquantized") {
  // bitsandbytes#1849: the 4-bit conversion replaces nn.Linear modules, and transformers 5 holds
  // Qwen3-30B-A3B's experts and routers as plain parameters. Per layer (48): 128 experts of three
  // [768, 2048] slices and a [128, 2048] router. A slice of n = 1,572,864 elements is 2n bytes in
  // bf16 and n/2 + n/64 + 4 n/(64 x 256) + 4 + 1,088 = 812,484 bytes in NF4 with double
  // quantization (4-bit codes, an 8-bit absmax per 64, an fp32 one per 256 of those, an fp32
  // offset, and the QuantState's two code tables of 16 and 256 fp32 values); the router's
  // 262,144 elements 524,288 and 136,324 bytes.
  const model& m = models::qwen3_30b_a3b::value;
  finetuning kept = qlora<16, "q_proj,v_proj">::value;
  kept.base_exceptions.keeps_moe_parameters = true;
  const auto frozen = [&](const finetuning& f) {
    return entry(model_states(training{m, mixed<bf16, bf16>::value, adam<>::value, f}),
                 "weights (frozen)");
  };
  const std::int64_t slices = 48LL * 128 * 3;
  const std::int64_t per_slice = 2 * 1'572'864 - 812'484, per_router = 524'288 - 136'324;
  CHECK(frozen(kept) - frozen(qlora<16, "q_proj,v_proj">::value) ==
        bytes{slices * per_slice + 48 * per_router});
}

TEST_CASE("every optimizer's states on a tiny model, to the byte") {
  using testing::tiny_llama;
  static_assert(testing::tiny_llama_parameters == 1352 && testing::tiny_llama_tensors == 21);
  const std::int64_t p = testing::tiny_llama_parameters;
  const std::int64_t t = testing::tiny_llama_tensors;
  // Adafactor: rows + columns per matrix (embedding 10 + 8, head 18, per layer q 16, k 12, v 12,
  // o 16, gate 24, up 24, down 24), a full variance per vector (5 norms x 8).
  const std::int64_t factored = 18 + 18 + 2 * (16 + 12 + 12 + 16 + 24 + 24 + 24) + 5 * 8;
  // Muon: a momentum for the 14 hidden matrices (2 x 576 elements), the auxiliary Adam's two
  // moments for the embedding, the head and the norms (80 + 80 + 40).
  const std::int64_t muon_states = 2 * 576 + 2 * (80 + 80 + 40);
  struct expected {
    optimizer opt;
    std::int64_t device;  // fp32 training: bytes on the device
    std::int64_t host;    // 0-d step (and mu_product) tensors off the device
  };
  const expected table[] = {
      {sgd<>::value, 0, 0},
      {sgd<optimizer_options{.momentum = true}>::value, 4 * p, 0},
      {adam<>::value, 8 * p, 4 * t},
      {adamw<>::value, 8 * p, 4 * t},
      {adamw<optimizer_options{.amsgrad = true}>::value, 12 * p, 4 * t},
      {adamw<optimizer_options{.impl = optimizer_impl::fused}>::value, 8 * p + 4 * t, 0},
      {adamw<optimizer_options{.capturable = true}>::value, 8 * p + 4 * t, 0},
      {adagrad<>::value, 4 * p, 4 * t},
      {rmsprop<>::value, 4 * p, 4 * t},
      {rmsprop<optimizer_options{.momentum = true, .centered = true}>::value, 12 * p, 4 * t},
      {adadelta<>::value, 8 * p, 4 * t},
      {adamax<>::value, 8 * p, 4 * t},
      {nadam<>::value, 8 * p, 8 * t},  // step and mu_product
      {radam<>::value, 8 * p, 4 * t},
      {rprop<>::value, 8 * p, 4 * t},
      {lion<>::value, 4 * p, 0},
      {adafactor<>::value, 4 * factored, 4 * t},
      // Every tensor is under bitsandbytes' min_8bit_size (4096): fp32 states, no step tensor.
      {adamw_8bit<>::value, 8 * p, 0},
      {adamw_8bit<optimizer_options{.paged = true}>::value, 0, 8 * p},
      {muon<>::value, 4 * muon_states, 0},
  };
  for (const expected& e : table) {
    CAPTURE(e.opt.name);
    const memory_ledger l = model_states(training{tiny_llama, fp32_training::value, e.opt});
    CHECK(total(l, component::optimizer_states) == bytes{e.device});
    CHECK(total(l, component::optimizer_states, memory_space::host) == bytes{e.host});
  }
  // States follow the updated tensor: bf16 under pure bf16, fp32 on the master copy otherwise.
  CHECK(total(model_states(training{tiny_llama, pure<bf16>::value, adamw<>::value}),
              component::optimizer_states) == bytes{4 * p});
  CHECK(total(model_states(training{tiny_llama, mixed<bf16>::value, adamw<>::value}),
              component::optimizer_states) == bytes{8 * p});
}

TEST_CASE("8-bit AdamW on large tensors: one byte per state and an fp32 scale per 256") {
  // A 4096 x 4096 weight: 2 x (16,777,216 + 4 x 65,536) bytes.
  const memory_ledger l = model_states(
      training{stand_in, fp32_training::value, adamw_8bit<>::value}, one_matrix(4096, 4096), 0);
  CHECK(total(l, component::optimizer_states) == bytes{2 * (16'777'216 + 4 * 65'536)});
}

TEST_CASE("tensor and pipeline parallel: each stage's weights, by hand") {
  // Llama-3-8B, TP 2, PP 4 (8 layers a stage), bf16 weights. One layer on a TP rank:
  // q and o 4096 x 4096 / 2, k and v 1024 x 4096 / 2 (4 of 8 KV heads), gate, up, down
  // 3 x 4096 x 14336 / 2, two norms of 4096 replicated = 109,060,096.
  const std::int64_t layer =
      (2 * 4096 * 4096 + 2 * 1024 * 4096) / 2 + 3 * 4096 * 14336 / 2 + 2 * 4096;
  REQUIRE(layer == 109'060'096);
  const std::int64_t vocab_half = 128'256 / 2 * 4096;  // the embedding or head on one TP rank
  const training t{models::llama_3_8b::value, pure<bf16>::value, sgd<>::value, full_finetune::value,
                   parallel<tensor_parallel<2>, pipeline_parallel<4>>::value};
  CHECK(entry(model_states(t, 0), "weights") == bytes{2 * (8 * layer + vocab_half)});
  CHECK(entry(model_states(t, 1), "weights") == bytes{2 * 8 * layer});
  CHECK(entry(model_states(t, 3), "weights") == bytes{2 * (8 * layer + 4096 + vocab_half)});

  // Uneven stages: 11, 11, 10 layers.
  const training uneven{models::llama_3_8b::value, pure<bf16>::value, sgd<>::value,
                        full_finetune::value, parallel<pipeline_parallel<3, 11, 11, 10>>::value};
  CHECK(entry(model_states(uneven, 1), "weights") == bytes{2 * 11 * 218'112'000LL});
  CHECK(entry(model_states(uneven, 2), "weights") ==
        bytes{2 * (10 * 218'112'000LL + 4096 + 128'256LL * 4096)});
}

TEST_CASE("KV heads are replicated when the TP degree exceeds them") {
  // Llama-2-70B has 8 KV heads; over 16 ranks each holds one whole head (128 rows), not half.
  const training t{models::llama_2_70b::value, pure<bf16>::value, sgd<>::value,
                   full_finetune::value, parallel<tensor_parallel<16>>::value};
  const tensor_ledger ledger = tensors(t.model);
  for (const tensor_group& g : ledger) {
    if (g.name.str().find("k_proj.weight") != std::string::npos) {
      const auto s = detail::tp_local_shape(g, t.model, 16);
      CHECK(s.second == 128);
      CHECK(s.last == 8192);
    }
  }
}

TEST_CASE("expert parallel: each rank holds its share of the experts") {
  // Mixtral-8x7B over 8 expert-parallel ranks: one expert per layer per rank.
  const training t{models::mixtral_8x7b::value, pure<bf16>::value, sgd<>::value,
                   full_finetune::value, parallel<ddp<8>, expert_parallel<8>>::value};
  const std::int64_t non_expert = 46'702'792'704 - 8LL * 32 * 176'160'768;
  CHECK(entry(model_states(t), "weights") == bytes{2 * (non_expert + 32LL * 176'160'768)});
}

TEST_CASE(
    "a sharded layout names its implementation, which zero<> and unsharded layouts need not") {
  const model m = models::llama_3_8b::value;
  // The words "ZeRO-3 over 8 ranks" are three different byte counts (training-guide.md): the
  // layout must say whose. zero<S, N> says DeepSpeed's, as the CLI's --zero does.
  const layout unnamed{.data = 8, .zero = sharding::zero3};
  CHECK(check_layout(unnamed, m).rule == layout_rule::sharding_must_name_its_implementation);
  CHECK_THROWS_WITH_AS(validated(unnamed, m),
                       doctest::Contains("ZeRO stage 3 shards as its implementation does: name "
                                         "layout::implementation"),
                       error);
  CHECK(parallel<zero<3, 8>>::value.implementation == shard_implementation::deepspeed);
  CHECK(check_layout(parallel<zero<3, 8>>::value, m).rule == layout_rule::none);
  CHECK(check_layout(layout{.data = 8}, m).rule == layout_rule::none);
  // Unsharded, the unnamed layout is plain PyTorch: per-tensor blocks the allocator rounds.
  // 3,000 elements under autocast: fp32 weight and gradient, 12,000 B each and 12,288 as 512 B
  // blocks, and the bf16 copy autocast casts, 6,000 B and 6,144 as blocks.
  const tensor_ledger w = one_matrix(1000, 3);
  const auto rounding = [&](shard_implementation impl) {
    training t{stand_in, mixed<bf16>::value, sgd<>::value};
    t.layout = {.data = 2, .implementation = impl};
    return entry(model_states(t, w, 0), "allocator rounding (512 B blocks)");
  };
  CHECK(rounding(shard_implementation::unnamed) == rounding(shard_implementation::paper));
  CHECK(rounding(shard_implementation::unnamed) == bytes{2 * (12288 - 12000) + (6144 - 6000)});
  CHECK(rounding(shard_implementation::deepspeed) == bytes{});
}

TEST_CASE("the most loaded pipeline stage") {
  // Llama-3-8B over 4 stages of 8 layers: the last stage also holds the final norm, so it is
  // 4096 parameters heavier than the first (the embedding and the head are the same size): 18 B
  // of model states each, plus 4 B of foreach AdamW's step temporary (exp_avg_sq_sqrt, fp32).
  const training t{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value,
                   full_finetune::value, parallel<pipeline_parallel<4>>::value};
  const stage_states most = most_loaded_stage(t);
  CHECK(most.stage == 3);
  CHECK(peak(most.ledger) - peak(model_states(t, 0)) == bytes{(18 + 4) * 4096});
  // Tied embeddings: GPT-2's last stage keeps its own copy of the word embedding for the head.
  const training gpt2{models::gpt2::value, mixed<bf16>::value, adamw<>::value, full_finetune::value,
                      parallel<pipeline_parallel<2>>::value};
  const bytes wte{2 * 50257 * 768};
  CHECK(entry(model_states(gpt2, 1), "weights") == bytes{2 * (6 * 7'087'872 + 2 * 768)} + wte);
}

TEST_CASE("trainable parameters of the whole model") {
  const tensor_ledger mixtral = tensors(models::mixtral_8x7b::value);
  CHECK(trainable_parameters(full_finetune::value, mixtral) == 46'702'792'704);
  CHECK(trainable_parameters(partial<select::kinds(tensor_kind::router)>::value, mixtral) ==
        32 * 8 * 4096);
  // Seed 003 case C: 884,736 per expert x 8 experts x 32 layers.
  CHECK(trainable_parameters(lora<16, "w1,w2,w3">::value, mixtral) == 884'736LL * 8 * 32);
  // LoRA on Llama-3-8B's q and v: 32 x 16 x ((4096 + 4096) + (4096 + 1024)).
  CHECK(trainable_parameters(lora<16>::value, tensors(models::llama_3_8b::value)) ==
        32 * 16 * (8192 + 5120));
  CHECK_THROWS_WITH(lora_finetuning(0, "q_proj"), "vramfit: LoRA rank must be positive, got 0");
  CHECK_THROWS_WITH(
      model_states(training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
                            lora_finetuning(8, "w1")}),
      doctest::Contains("LoRA target 'w1' matches no weight of model 'Llama-3-8B'; its "
                        "modules: embed_tokens, q_proj, k_proj, v_proj, "
                        "o_proj, gate_proj, up_proj, down_proj, lm_head, or all-linear"));
}

TEST_CASE("peft's default LoRA targets follow config.json's model_type") {
  // peft utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.
  CHECK(std::string_view(peft_default_lora_targets("gpt2")) == "c_attn");
  CHECK(std::string_view(peft_default_lora_targets("bert")) == "query,value");
  CHECK(std::string_view(peft_default_lora_targets("falcon")) == "query_key_value");
  CHECK(std::string_view(peft_default_lora_targets("gemma3_text")) == "q_proj,v_proj");
  // Types the mapping lacks: get_peft_model asks for target_modules.
  for (const char* type : {"qwen3_moe", "phi3", "deepseek_v3", "gpt_oss", "distilbert", "big_bird",
                           "vit", "gemma3", "llava", "mistral3", ""})
    CHECK(peft_default_lora_targets(type) == nullptr);
  const auto adapters = [](const model& m, std::int64_t rank) {
    return trainable_parameters(lora_finetuning(rank, peft_default_lora_targets(m.hf_model_type)),
                                tensors(m));
  };
  // r x (in + out) per adapted weight. GPT-2, r 8 on c_attn [768 -> 2304] in 12 layers.
  CHECK(adapters(models::gpt2::value, 8) == 12 * 8 * (768 + 2304));
  // BERT-base, r 8 on query and value [768 -> 768] in 12 layers.
  CHECK(adapters(models::bert_base_uncased::value, 8) == 12 * 2 * 8 * (768 + 768));
  // Falcon-7B, r 16 on query_key_value [4544 -> (71 + 2) x 64] in 32 layers: 4,718,592, the
  // trainable count public Falcon-7B QLoRA walkthroughs print (0.13 % of 3,613,463,424).
  CHECK(adapters(models::falcon_7b::value, 16) == 32 * 16 * (4544 + 73 * 64));
  CHECK(adapters(models::falcon_7b::value, 16) == 4'718'592);
  // Mixtral: q [4096 -> 4096] and v [4096 -> 1024] in 32 layers.
  CHECK(adapters(models::mixtral_8x7b::value, 16) == 32 * 16 * ((4096 + 4096) + (4096 + 1024)));
  CHECK(peft_default_lora_targets(models::qwen3_30b_a3b::value.hf_model_type) == nullptr);
}

TEST_CASE("the caching allocator rounds every tensor up to 512 bytes") {
  // One 1000 x 1000 fp32 weight: 4,000,000 B is 7812.5 blocks, so each of the weight, its
  // gradient and AdamW's two moments gains 256 B; the fused optimizer's 0-d step on the device
  // takes a whole 512 B block for its 4 B (+508).
  const memory_ledger l =
      model_states(training{stand_in, fp32_training::value,
                            adamw<optimizer_options{.impl = optimizer_impl::fused}>::value},
                   one_matrix(1000, 1000), 0);
  CHECK(entry(l, "allocator rounding (512 B blocks)") == bytes{4 * 256 + 508});
  // Flat buffers (DeepSpeed) have no per-tensor rounding.
  const memory_ledger flat = model_states(
      training{
          stand_in,
          mixed<fp16, fp16>::value,
          adam<>::value,
          full_finetune::value,
          {.data = 2, .zero = sharding::zero1, .implementation = shard_implementation::deepspeed}},
      one_matrix(1000, 1000), 0);
  CHECK(entry(flat, "allocator rounding (512 B blocks)") == bytes{0});
}

TEST_CASE("context-parallel ranks share the sharding of model states") {
  // Llama-3-8B's 8,030,261,248 parameters. torchtitan shards FSDP over dp_shard x cp
  // (parallel_dims.py), so FSDP 1 x CP 8 keeps what FSDP 8 keeps: per rank a dim-0 shard of
  // every tensor (each dim 0 divides by 8), fp32 master and AdamW's two fp32 moments.
  const std::int64_t p = 8'030'261'248;
  auto component_of = [](const layout& l, component c) {
    const training t{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value,
                     full_finetune::value, l};
    return total(model_states(t), c);
  };
  const layout cp8{
      .context = 8, .zero = sharding::zero3, .implementation = shard_implementation::fsdp};
  const layout dp8{
      .data = 8, .zero = sharding::zero3, .implementation = shard_implementation::fsdp};
  CHECK(component_of(cp8, component::master_weights) == bytes{4 * p / 8});
  CHECK(component_of(cp8, component::optimizer_states) == bytes{8 * p / 8});
  CHECK(component_of(cp8, component::weights) == component_of(dp8, component::weights));
  // Megatron's distributed optimizer over DP 2 x CP 4: its fp32 states are split 8 ways.
  const layout megatron{.data = 2,
                        .context = 4,
                        .zero = sharding::zero1,
                        .implementation = shard_implementation::megatron};
  CHECK(component_of(megatron, component::optimizer_states) == bytes{8 * p / 8});
  // Without sharding, every context-parallel rank keeps all of them.
  CHECK(component_of({.context = 8}, component::optimizer_states) == bytes{8 * p});
}
