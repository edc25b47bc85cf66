// Unit tier: training model states against independent numbers: the seed articles' bytes per
// parameter, the ZeRO paper's Table 1, DeepSpeed's estimator outputs for T0_3B, Megatron-LM's
// bytes per parameter, and hand derivations.
#include <doctest/doctest.h>

#include <cmath>
#include <string_view>
#include <utility>
#include <vector>
#include <vramfit/deepspeed_estimate.hpp>
#include <vramfit/presets.hpp>
#include <vramfit/timeline.hpp>
#include <vramfit/training.hpp>

#include "tiny_llama.hpp"

using namespace vramfit;
using namespace vramfit::literals;

namespace {
/// A ledger of one [rows, cols] linear weight: every parameter is a matmul weight.
constexpr tensor_ledger one_matrix(std::int64_t rows, std::int64_t cols) {
  tensor_ledger l{};
  tensor_group g{};
  g.name.parts[0] = "linear.weight";
  g.shape[0] = rows;
  g.shape[1] = cols;
  g.rank = 2;
  g.kind = tensor_kind::mlp;
  l.push_back(g);
  return l;
}

/// A stand-in model for ledgers built by hand (used only by the layout rules).
constexpr model stand_in{.name = "stand-in",
                         .hidden = 64,
                         .layers = 1,
                         .heads = 1,
                         .kv_heads = 1,
                         .head_dim = 64,
                         .ffn = 64,
                         .vocab = 64};

/// Weights + gradients + master weights + optimizer states on the device.
bytes states_on_device(const memory_ledger& l) {
  return total(l, component::weights) + total(l, component::gradients) +
         total(l, component::master_weights) + total(l, component::optimizer_states);
}

/// The communication buckets (entries named "... bucket"), which DeepSpeed's estimators omit.
bytes buckets(const memory_ledger& l) {
  bytes sum{};
  for (const memory_entry& e : l)
    if (std::string(e.name).find("bucket") != std::string::npos) sum += e.size;
  return sum;
}

bytes entry(const memory_ledger& l, const char* name) {
  for (const memory_entry& e : l)
    if (std::string(e.name) == name) return e.size;
  return bytes{};
}
}  // namespace

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

TEST_CASE("Megatron-LM: 18 bytes per parameter, 6 + 12/d with the distributed optimizer") {
  // megatron/training/theoretical_memory_usage.py and dist_optimizer.md: bf16 params 2, fp32 main
  // grads 4, fp32 master + Adam 12 (sharded over d with the distributed optimizer).
  const std::int64_t n = 8192LL * 8192;
  const tensor_ledger w = one_matrix(8192, 8192);
  const training megatron{stand_in, mixed<bf16, fp32>::value, adam<>::value};
  CHECK(states_on_device(model_states(megatron, w, 0)) == bytes{18 * n});
  for (std::int64_t d : {2, 4, 8, 64}) {
    CAPTURE(d);
    training sharded = megatron;
    sharded.layout.data = d;
    sharded.layout.zero = sharding::zero1;
    sharded.layout.implementation = shard_implementation::megatron;
    CHECK(states_on_device(model_states(sharded, w, 0)) == bytes{6 * n + 12 * n / d});
  }
  // The table's other rows: fp16 params and grads 20 / 4 + 16/d; fp32 16 / 8 + 8/d.
  const training half{
      stand_in,
      mixed<fp16, fp16>::value,
      adam<>::value,
      full_finetune::value,
      {.data = 8, .zero = sharding::zero1, .implementation = shard_implementation::megatron}};
  CHECK(states_on_device(model_states(half, w, 0)) == bytes{4 * n + 16 * n / 8});
  const training single{
      stand_in,
      fp32_training::value,
      adam<>::value,
      full_finetune::value,
      {.data = 8, .zero = sharding::zero1, .implementation = shard_implementation::megatron}};
  CHECK(states_on_device(model_states(single, w, 0)) == bytes{8 * n + 8 * n / 8});
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

TEST_CASE("Megatron-LM without the distributed optimizer: fp16 params and grads are 20 B") {
  const std::int64_t n = 1024LL * 1024;
  const training t{stand_in,
                   mixed<fp16, fp16>::value,
                   adam<>::value,
                   full_finetune::value,
                   {.implementation = shard_implementation::megatron}};
  CHECK(states_on_device(model_states(t, one_matrix(1024, 1024), 0)) == bytes{20 * n});
}

namespace {
/// bigscience/T0_3B as AutoModel loads it (T5Model, no LM head), by hand from its config:
/// d_model 2048, d_kv 64 x 32 heads, d_ff 5120 (gated-gelu), 24 encoder + 24 decoder layers,
/// vocab 32128, 32 relative-position buckets.
constexpr tensor_ledger t0_3b() {
  tensor_ledger l{};
  auto add = [&l](const char* name, std::int64_t rows, std::int64_t cols, std::int64_t layers) {
    tensor_group g{};
    g.name.parts[0] = name;
    g.shape[0] = rows;
    g.shape[1] = cols;
    g.rank = cols > 0 ? 2 : 1;
    if (cols == 0) g.shape[1] = 0;
    g.kind = tensor_kind::mlp;
    g.layer_count = layers;
    l.push_back(g);
  };
  add("shared.weight", 32128, 2048, 0);
  add("encoder.block.{layer}.layer.0.SelfAttention.q/k/v/o.weight", 4 * 2048, 2048, 24);
  add("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 32, 32, 0);
  add("encoder.block.{layer}.layer.{0,1}.layer_norm.weight", 2 * 2048, 0, 24);
  add("encoder.block.{layer}.layer.1.DenseReluDense.wi_0/wi_1/wo.weight", 3 * 5120, 2048, 24);
  add("encoder.final_layer_norm.weight", 2048, 0, 0);
  add("decoder.block.{layer}.layer.{0,1}.{Self,EncDec}Attention.q/k/v/o.weight", 8 * 2048, 2048,
      24);
  add("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 32, 32, 0);
  add("decoder.block.{layer}.layer.{0,1,2}.layer_norm.weight", 3 * 2048, 0, 24);
  add("decoder.block.{layer}.layer.2.DenseReluDense.wi_0/wi_1/wo.weight", 3 * 5120, 2048, 24);
  add("decoder.final_layer_norm.weight", 2048, 0, 0);
  return l;
}
}  // namespace

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

TEST_CASE("DeepSpeed ZeRO-3 as stage3.py allocates: T0_3B, fp16, by hand") {
  // Per GPU: the fp16 parameter and gradient partitions (grad_partitions_flat_buffer in the
  // gradient-accumulation dtype), fp32 master and Adam's two states: 16 B x params / N for the
  // whole run, where the estimator counts 18; in the step, one sub-group (sub_group_size 1e9) of
  // gradients flattened (fp16) and cast (fp32): 6 B x min(params / N, 1e9).
  const tensor_ledger t5 = t0_3b();
  const std::int64_t params = 2'783'959'040;
  model t5_shape = stand_in;
  t5_shape.layers = 24;
  for (const std::int64_t n : {1, 2, 4}) {
    CAPTURE(n);
    const training t{
        t5_shape,
        mixed<fp16, fp16>::value,
        adam<>::value,
        full_finetune::value,
        {.data = n, .zero = sharding::zero3, .implementation = shard_implementation::deepspeed}};
    const memory_ledger l = model_states(t, t5, 0);
    const std::int64_t partition = (params + n - 1) / n;
    CHECK(entry(l, "gradient partitions (flat buffer)") == bytes{2 * partition});
    CHECK(states_on_device(l) - entry(l, "gradients flattened and cast to fp32 (one group)") ==
          bytes{16 * partition});
    const std::int64_t group = partition < 1'000'000'000 ? partition : 1'000'000'000;
    CHECK(entry(l, "gradients flattened and cast to fp32 (one group)") == bytes{6 * group});
    // The bucket (reduce_bucket_size 5e8 fp16 elements) for the whole run, its concatenated copy
    // in backward.
    CHECK(entry(l, "ZeRO reduce bucket") == bytes{1'000'000'000});
    CHECK(entry(l, "ZeRO-3 reduce-scatter copy of the bucket") == bytes{1'000'000'000});
  }
}

TEST_CASE("DeepSpeed ZeRO-1 and ZeRO-2: gradients as stage_1_and_2.py keeps them") {
  using testing::tiny_llama;
  constexpr std::int64_t params = testing::tiny_llama_parameters;  // 1,432
  const std::int64_t n = 4;
  for (const sharding stage : {sharding::zero1, sharding::zero2}) {
    CAPTURE(static_cast<int>(stage));
    const training t{tiny_llama,
                     mixed<bf16, bf16>::value,
                     adamw<>::value,
                     full_finetune::value,
                     {.data = n, .zero = stage, .implementation = shard_implementation::deepspeed}};
    const memory_ledger l = model_states(t);
    // ZeRO-1 accumulates whole bf16 gradients, ZeRO-2 its partition (grads_in_partition).
    CHECK(total(l, component::gradients) -
              entry(l, "gradients flattened and cast to fp32 (one group)") ==
          bytes{stage == sharding::zero1 ? 2 * params : 2 * params / n});
    // The step: the group's partition flattened (bf16) and cast (fp32), 6 B per element.
    CHECK(entry(l, "gradients flattened and cast to fp32 (one group)") == bytes{6 * params / n});
    // The reduce buffer of reduce_bucket_size (5e8) bf16 elements whatever the model's size
    // (stage_1_and_2.py backward: torch.empty(int(self.reduce_bucket_size))), and the flattened
    // copy of the 1,432 gradients in it, in backward only; overlap_comm adds a second buffer.
    CHECK(entry(l, "ZeRO reduce bucket") == bytes{2 * 500'000'000 + 2 * params});
    training overlapped = t;
    overlapped.layout.zero_overlap_comm = true;
    CHECK(entry(model_states(overlapped), "ZeRO reduce bucket") ==
          bytes{2 * 2 * 500'000'000 + 2 * params});
    // ZeRO-1 reduces into the partition before the step: 3/4 of the gradients go.
    const step_timeline tl =
        step_timeline_of(t, activation_options{.micro_batch = 1, .sequence = 4});
    bytes reduced{};
    for (const timeline_event& e : tl.events)
      if (std::string(e.what) == "gradients reduced into the ZeRO-1 partition") reduced = e.delta;
    CHECK(reduced == (stage == sharding::zero1 ? bytes{-2 * params * 3 / 4} : bytes{}));
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

TEST_CASE("DDP keeps bucket copies of the gradients unless they are bucket views") {
  const model& m = models::llama_3_8b::value;
  const std::int64_t p = 8'030'261'248;
  const memory_ledger copies = model_states(
      training{m, amp<bf16>::value, adamw<>::value, full_finetune::value, parallel<ddp<8>>::value});
  CHECK(entry(copies, "DDP gradient buckets") == bytes{4 * p});
  const memory_ledger views = model_states(training{
      m, amp<bf16>::value, adamw<>::value, full_finetune::value, parallel<ddp<8, true>>::value});
  CHECK(entry(views, "DDP gradient buckets") == bytes{0});
}

TEST_CASE("FSDP shards each tensor along dim 0 and gathers a whole unit") {
  // Llama-3-8B, FSDP full shard over 8 ranks, amp: fp32 parameters sharded, bf16 compute.
  const model& m = models::llama_3_8b::value;
  const memory_ledger l = model_states(training{m, amp<bf16>::value, adamw<>::value,
                                                full_finetune::value, parallel<fsdp<8>>::value});
  // Every dim 0 here divides by 8: exactly 4 B x P / 8.
  CHECK(entry(l, "weights (ZeRO-3 partition)") == bytes{4 * 8'030'261'248 / 8});
  CHECK(total(l, component::optimizer_states) == bytes{8 * 8'030'261'248 / 8});
  // Gathered in bf16: the root (embedding + final norm + head = 1,050,677,248 elements) around
  // the layers, the current and the prefetched layer (218,112,000 elements each: q, o 4096^2,
  // k, v 1024 x 4096, gate, up, down 4096 x 14336, two norms). In backward, FSDP1's flat
  // gradients (fp32 under amp): a layer's, and the root's until its post-backward.
  const std::int64_t root = 2 * 128'256LL * 4096 + 4096;
  const std::int64_t layer = 2 * 4096LL * 4096 + 2 * 1024LL * 4096 + 3 * 4096LL * 14336 + 2 * 4096;
  CHECK(layer == 218'112'000);
  CHECK(entry(l, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{2 * root + 2 * 2 * layer});
  CHECK(entry(l, "FSDP layer gradients (unsharded, and their reduce-scatter copy)") ==
        bytes{4 * layer});
  CHECK(entry(l, "FSDP root gradients (unsharded, to its post-backward)") == bytes{4 * root});
}

TEST_CASE("FSDP2 shards the fp32 master as the parameter and reduces through a copy-in buffer") {
  // Llama-3-8B, fully_shard over 8 ranks with MixedPrecisionPolicy(param bf16, reduce fp32) on a
  // bf16 model with an fp32 master: the sharded parameter is the fp32 master itself (no 16-bit
  // shard, no separate master), its sharded gradient fp32.
  const model& m = models::llama_3_8b::value;
  const std::int64_t p = 8'030'261'248;
  const training t{m, mixed<bf16, bf16>::value, adamw<>::value, full_finetune::value,
                   parallel<fully_shard<8>>::value};
  const memory_ledger l = model_states(t);
  CHECK(entry(l, "weights (ZeRO-3 partition)") == bytes{4 * p / 8});
  CHECK(entry(l, "master weights (partition)") == bytes{0});
  CHECK(entry(l, "gradients (partition)") == bytes{4 * p / 8});
  CHECK(total(l, component::optimizer_states) == bytes{8 * p / 8});
  // The root unit (1,050,677,248 elements) and two layers (218,112,000 each) gathered in bf16;
  // in backward a unit's bf16 gradients and the fp32 reduce-scatter buffer they are copied into.
  const std::int64_t root = 2 * 128'256LL * 4096 + 4096;
  const std::int64_t layer = 218'112'000;
  CHECK(entry(l, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{2 * root + 2 * 2 * layer});
  CHECK(entry(l, "FSDP layer gradients (unsharded, and their reduce-scatter copy)") ==
        bytes{(2 + 4) * layer});
  CHECK(entry(l, "FSDP root gradients (unsharded, to its post-backward)") == bytes{(2 + 4) * root});
  // FSDP1 keeps the bf16 shard beside the fp32 master and reduces its flat bf16 gradient.
  const memory_ledger v1 = model_states(training{m, mixed<bf16, bf16>::value, adamw<>::value,
                                                 full_finetune::value, parallel<fsdp<8>>::value});
  CHECK(entry(v1, "weights (ZeRO-3 partition)") == bytes{2 * p / 8});
  CHECK(entry(v1, "master weights (partition)") == bytes{4 * p / 8});
  CHECK(entry(v1, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{2 * root + 2 * 2 * layer});
  CHECK(entry(v1, "FSDP root gradients (unsharded, to its post-backward)") == bytes{2 * root});
}

TEST_CASE("FSDP2's root gradients: the head's from its backward, the rest at the post-backward") {
  // Llama-3-8B, fully_shard over 8 ranks, bf16 compute with fp32 reduce: the head's backward
  // makes lm_head's and the final norm's bf16 gradients; the root's post-backward, last, adds
  // the embedding's, copies all three into the fp32 reduce-scatter input and frees them, then
  // the input once its output is the sharded gradient.
  const model& m = models::llama_3_8b::value;
  const training t{m, mixed<bf16, bf16>::value, adamw<>::value, full_finetune::value,
                   parallel<fully_shard<8>>::value};
  const step_timeline tl = step_timeline_of(t, activation_options{.sequence = 4096});
  const std::int64_t head = 128'256LL * 4096 + 4096, root = 2 * 128'256LL * 4096 + 4096;
  std::vector<std::pair<step_phase, std::int64_t>> root_events;
  for (const timeline_event& e : tl.events)
    if (std::string_view(tl.ledger[static_cast<std::size_t>(e.entry)].name) ==
        "FSDP root gradients (unsharded, to its post-backward)")
      root_events.emplace_back(e.phase, e.delta.count);
  REQUIRE(root_events.size() == 5);
  CHECK(root_events[0].second == 2 * head);           // the head's backward
  CHECK(root_events[1].second == 2 * (root - head));  // the embedding's, at the post-backward
  CHECK(root_events[2].second == 4 * root);           // the fp32 reduce-scatter input
  CHECK(root_events[3].second == -2 * root);          // the unsharded ones, copied in
  CHECK(root_events[4].second == -4 * root);          // the input, once reduced
  for (const auto& [phase, delta] : root_events) CHECK(phase == step_phase::backward);
  // A tied head's weight is the embedding (Qwen2.5-0.5B: 151,936 x 896, and the final norm):
  // all of the root's unsharded gradients come with the head's backward.
  const training tied{models::qwen2_5_0_5b::value, mixed<bf16, bf16>::value, adamw<>::value,
                      full_finetune::value, parallel<fully_shard<8>>::value};
  int head_events = 0;
  for (const timeline_event& e : step_timeline_of(tied, activation_options{}).events) {
    if (std::string_view(e.what) != "FSDP root gradients (the head's, unsharded)") continue;
    ++head_events;
    CHECK(e.delta == bytes{2 * (151'936LL * 896 + 896)});
  }
  CHECK(head_events == 1);
}

TEST_CASE("FSDP2 reshard_after_forward: False keeps every unit gathered, an int a share of it") {
  const model& m = models::llama_3_8b::value;
  const std::int64_t p = 8'030'261'248;
  const std::int64_t root = 2 * 128'256LL * 4096 + 4096;
  auto states = [&](const layout& l) {
    return model_states(
        training{m, mixed<bf16, bf16>::value, adamw<>::value, full_finetune::value, l});
  };
  // False: all of the model's bf16 parameters from forward to backward; the units are not
  // gathered again, so only their gradient buffers remain.
  const memory_ledger kept = states(parallel<fully_shard<8, 1>>::value);
  CHECK(entry(kept, "parameters kept gathered after forward (reshard_after_forward)") ==
        bytes{2 * p});
  CHECK(entry(kept, "gathered FSDP units (root + current and prefetched layers)") == bytes{0});
  CHECK(entry(kept, "FSDP root gradients (unsharded, to its post-backward)") ==
        bytes{(2 + 4) * root});
  // 4 of the 8 ranks: each keeps a quarter, and gathers units from it again.
  const memory_ledger quarter = states(parallel<fully_shard<8, 4>>::value);
  CHECK(entry(quarter, "parameters kept gathered after forward (reshard_after_forward)") ==
        bytes{2 * p / 4});
  CHECK(entry(quarter, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{2 * root + 2 * 2 * 218'112'000});
  // The rules: FSDP2 full sharding only, and a rank count dividing the shard ranks.
  CHECK(check_layout(parallel<fsdp<8>>::value, m).rule == layout_rule::none);
  layout v1 = parallel<fsdp<8>>::value;
  v1.reshard_after_forward = 4;
  CHECK(check_layout(v1, m).rule == layout_rule::reshard_after_forward_needs_fsdp2_full_shard);
  layout three = parallel<fully_shard<8>>::value;
  three.reshard_after_forward = 3;
  CHECK(check_layout(three, m).rule ==
        layout_rule::reshard_after_forward_must_divide_the_shard_ranks);
  layout version = parallel<fsdp<8>>::value;
  version.fsdp_version = 3;
  CHECK_THROWS_WITH_AS(validated(version, m),
                       doctest::Contains("the FSDP version must be 1 (FullyShardedDataParallel) "
                                         "or 2 (fully_shard), got 3"),
                       error);
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

TEST_CASE("an FSDP unit gathers frozen weights as stored and has gradients for trained ones") {
  // LoRA r = 16 on q_proj and v_proj of Llama-3-8B, bf16 base, FSDP over 8 ranks: the root unit
  // (embedding, final norm, head: 1,050,677,248 frozen bf16 elements) has no gradient; a layer
  // gathers its 218,112,000 frozen bf16 elements and its adapters (16 x (4096 + 4096) for q_proj,
  // 16 x (4096 + 1024) for v_proj) in the bf16 compute format, twice (current and prefetched);
  // the layer's adapters have the only (bf16) gradients.
  const model& m = models::llama_3_8b::value;
  const std::int64_t root = 2 * 128'256LL * 4096 + 4096;
  training t{m, pure<bf16>::value, adamw<>::value, full_finetune::value, parallel<fsdp<8>>::value};
  t.finetune = lora_finetuning(16, "q_proj,v_proj");
  const std::int64_t adapters = 16 * (4096 + 4096) + 16 * (4096 + 1024);
  const memory_ledger l = model_states(t);
  CHECK(entry(l, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{2 * root + 2 * (2 * 218'112'000 + 2 * adapters)});
  CHECK(entry(l, "FSDP layer gradients (unsharded, and their reduce-scatter copy)") ==
        bytes{2 * adapters});
  CHECK(entry(l, "FSDP root gradients (unsharded, to its post-backward)") == bytes{0});
}

TEST_CASE("ZeRO-1/2 with the optimizer offloaded: 16-bit weights and a staging buffer on the GPU") {
  // DeepSpeed's estimator (offload_optimizer=cpu) counts 2 P on the GPU; stage_1_and_2.py also
  // keeps a staging buffer of the largest parameter (the 128,256 x 4096 embedding) in fp16, and
  // ZeRO-1 its whole fp16 gradients until the boundary. On the host, per rank of 4: a pinned
  // fp16 copy of the parameter partition, fp32 gradients, master and Adam's two states.
  const model& m = models::llama_3_8b::value;
  const std::int64_t p = 8'030'261'248;
  const bytes staging{2 * 128'256LL * 4096};
  for (const sharding stage : {sharding::zero1, sharding::zero2}) {
    CAPTURE(static_cast<int>(stage));
    const memory_ledger l =
        model_states(training{m,
                              mixed<fp16, fp16>::value,
                              adam<>::value,
                              full_finetune::value,
                              {.data = 4,
                               .zero = stage,
                               .implementation = shard_implementation::deepspeed,
                               .optimizer_offload = offload_target::cpu}});
    CHECK(total(l) - buckets(l) ==
          bytes{2 * p} + staging + (stage == sharding::zero1 ? bytes{2 * p} : bytes{}));
    CHECK(total(l, memory_space::host) == bytes{(2 + 4 + 4 + 8) * p / 4});
  }
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

TEST_CASE("hybrid FSDP shards within a group and replicates across groups") {
  // 16 ranks in groups of 8: the states are sharded 8 ways, as full sharding over 8 would be.
  const model& m = models::llama_3_8b::value;
  const auto states = [&](const layout& l) {
    return total(
        model_states(training{m, amp<bf16>::value, adamw<>::value, full_finetune::value, l}),
        component::optimizer_states);
  };
  CHECK(states(parallel<fsdp<16, fsdp_strategy::hybrid_shard, 8>>::value) ==
        states(parallel<fsdp<8>>::value));
  CHECK(states(parallel<fsdp<16>>::value) < states(parallel<fsdp<8>>::value));
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
                        "linear modules: embed_tokens, q_proj, k_proj, v_proj, "
                        "o_proj, gate_proj, up_proj, down_proj, lm_head"));
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
