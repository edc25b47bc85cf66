// Unit tier: the planner's step-time estimate (kernel_time.hpp, step_time.hpp) against hand
// derivations of the formulas it cites.
#include <doctest/doctest.h>

#include <algorithm>

#include <vramfit/presets.hpp>
#include <vramfit/step_time.hpp>

using namespace vramfit;

namespace {
const gpu& h100 = gpus::h100_80gb::value;

/// A Hopper card whose matmuls run at 1 PFLOP/s (its peak) with no memory bound and no waves,
/// and whose collectives reach the whole link: matmul terms are FLOPs / 1e15, FlashAttention-2's
/// FLOPs / 3.5e14 (35 % of the peak on Hopper).
constexpr gpu ideal_card{"Ideal", 80 * GiB,  gpu_generation::hopper, "test", 1000, 450,
                         {},      1'000'000, 1'000'000'000'000,      0};
constexpr cluster whole_rates{.compute_efficiency = 1, .network_efficiency = 1};

training_plan_value llama_plan(std::int64_t sequence = 4096) {
  return {training{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value},
          activation_options{.sequence = sequence}};
}

// Llama-3-8B per token: 6 FLOPs per multiplied weight (8,030,261,248 parameters, Meta's count,
// less the token embedding's 525,336,576 and the 65 RMSNorms' 266,240), and FlashAttention's
// causal core: 4·s·h·d / 2 forward, 2.5 times that backward, over 32 layers of 32 heads of 128
// at s = 4,096; on the ideal card, the seconds per token of each.
constexpr double matmul_flops = 6.0 * (8'030'261'248 - 525'336'576 - 266'240);
constexpr double attention_flops = 3.5 * 4 * 4096.0 * 32 * 128 / 2 * 32;
constexpr double token_seconds = matmul_flops / 1e15 + attention_flops / 3.5e14;
}  // namespace

TEST_CASE("a matmul: its FLOPs at the ceiling, the last wave part-full, or its operands' traffic") {
  const kernel_rates r{1e15, 1e12, 100};
  // 4,096 cubed: 32 x 32 tiles of 128 over 100 SMs take 11 waves, the last 24 % full.
  CHECK(detail::wave_efficiency(1024, 100) == doctest::Approx(1024.0 / 1100));
  CHECK(matmul_seconds(r, 4096, 4096, 4096, 2) ==
        doctest::Approx(2 * 4096.0 * 4096 * 4096 / (1e15 * 1024 / 1100)));
  // One token through an 8,192 x 8,192 weight: reading the weight bounds it (2 bytes each).
  CHECK(matmul_seconds(r, 1, 8192, 8192, 2) ==
        doctest::Approx((8192.0 + 8192.0 * 8192 + 8192) * 2 / 1e12));
  // Eight experts as one grouped matmul share the waves: 8 x 2 x 4 tiles, one wave of 100 SMs
  // (at 100 TB/s, lest their weights' traffic bound them).
  CHECK(matmul_seconds({1e15, 1e14, 100}, 256, 512, 4096, 2, 8) ==
        doctest::Approx(8 * 2 * 256.0 * 512 * 4096 / (1e15 * 64 / 100)));
  // The ideal rate, the search's bound: FLOPs at the ceiling, nothing else.
  CHECK(matmul_seconds(r, 1, 8192, 8192, 2, 1, true) == 2 * 8192.0 * 8192 / 1e15);
}

TEST_CASE("attention: causal halves the work, backward is 2.5 times forward") {
  const kernel_rates r{1e15, 1e12, 132};
  // Llama-3-405B at TP 8: 16 heads of 128; 8,192 queries are 64 blocks per head, 1,024 blocks
  // over 132 SMs (8 waves); at CP 16 a rank's 512 queries are 64 blocks: one wave, 48 % full.
  const attention_shape whole{1, 8192, 8192, 16, 128, true};
  const attention_seconds t = fused_attention_time(r, whole, 5e14, 4e14);
  const double flops = 4 * 8192.0 * 8192 * 16 * 128 / 2;
  CHECK(t.forward == doctest::Approx(flops / (5e14 * 1024 / 1056)));
  CHECK(t.backward == doctest::Approx(2.5 * flops / (4e14 * 1024 / 1056)));
  const attention_shape ring{1, 512, 8192, 16, 128, true};
  CHECK(fused_attention_time(r, ring, 5e14, 4e14).forward ==
        doctest::Approx(flops / 16 / (5e14 * 64 / 132)));
  // Unfused, at 100 TB/s: QKᵀ and PV as 16 batched matmuls each over the whole 512 x 512 score
  // matrix (16 x 4 x 4 tiles of 128 in 2 waves of 132, 16 x 4 x 1 in one), and the softmax's 3
  // passes over it.
  const attention_shape small{1, 512, 512, 16, 128, true};
  const double scores = 16 * 512.0 * 512;
  const double qk = 2 * scores * 128 / (1e15 * 256 / 264);
  const double pv = 2 * scores * 128 / (1e15 * 64 / 132);
  const attention_seconds eager = eager_attention_time({1e15, 1e14, 132}, small, 2);
  CHECK(eager.forward == doctest::Approx(qk + pv + 3 * scores * 2 / 1e14));
  CHECK(eager.backward == doctest::Approx(2 * eager.forward));
}

TEST_CASE("one GPU at ideal rates: 6N plus FlashAttention's causal FLOPs per token") {
  training_plan_value p = llama_plan();
  p.batch.micro_batch = 2;
  p.batch.micro_batches = 3;
  const step_time t = estimate_step_time(p, ideal_card, whole_rates);
  const double tokens = 6 * 4096;
  CHECK(t.compute == doctest::Approx(tokens * token_seconds));
  CHECK(t.recompute == 0);
  CHECK(t.total() == t.compute + t.optimizer);
  // Full recompute repeats the layers' forward: 2 per weight of the layers (not the head, as
  // large as the embedding) and the causal attention forward (Korthikanti et al. 2022 §5).
  p.batch.recompute = recompute_kind::full;
  const double forward =
      (matmul_flops / 3 - 2.0 * 525'336'576) / 1e15 + attention_flops / 3.5 / 3.5e14;
  CHECK(estimate_step_time(p, ideal_card, whole_rates).recompute ==
        doctest::Approx(tokens * forward));
  // Selective recompute repeats the attention core's forward only.
  p.batch.recompute = recompute_kind::selective;
  CHECK(estimate_step_time(p, ideal_card, whole_rates).recompute ==
        doctest::Approx(tokens * attention_flops / 3.5 / 3.5e14));
}

TEST_CASE("the optimizer step reads and writes what a rank updates, once") {
  // Mixed bf16 AdamW: fp32 master (4 + 4), two fp32 moments (16), the fp32 gradient read (4),
  // the bf16 weights written (2): 30 bytes per parameter; ZeRO-1 over 8 ranks updates 1/8.
  training_plan_value p = llama_plan();
  const cluster fast_memory{.memory_gb_per_s = 1000, .compute_efficiency = 1};
  CHECK(estimate_step_time(p, h100, fast_memory).optimizer ==
        doctest::Approx(8'030'261'248.0 * 30 / 1e12));
  p.setup.layout = {
      .data = 8, .zero = sharding::zero1, .implementation = shard_implementation::deepspeed};
  CHECK(estimate_step_time(p, h100, fast_memory).optimizer ==
        doctest::Approx(8'030'261'248.0 * 30 / 8 / 1e12));
}

TEST_CASE("the pipeline bubble: (p-1)/m of the slowest stage, (p-1)/(m·v) interleaved") {
  // Narayanan et al. 2021 §2.2.1 and §2.2.2. Llama-3-8B's 32 layers over 4 stages of 8: the
  // slowest stage is the last (8 layers and the head).
  training_plan_value p = llama_plan();
  p.setup.layout.pipeline = 4;
  p.batch.micro_batches = 8;
  const step_time one_f_one_b = estimate_step_time(p, ideal_card, whole_rates);
  CHECK(one_f_one_b.bubble / one_f_one_b.compute == doctest::Approx(3.0 / 8));
  p.batch.schedule = pipeline_schedule::interleaved;
  p.batch.virtual_stages = 2;
  const step_time interleaved = estimate_step_time(p, ideal_card, whole_rates);
  CHECK(interleaved.bubble / interleaved.compute == doctest::Approx(3.0 / 16));
  // The last stage: a quarter of the layers' matmuls and attention, and the whole head.
  const double head = 6.0 * 128'256 * 4096;
  const double stage = ((matmul_flops - head) / 4 + head) / 1e15 + attention_flops / 4 / 3.5e14;
  CHECK(one_f_one_b.compute == doctest::Approx(8 * 4096 * stage));
}

TEST_CASE("tensor parallel: four all-reduces of the hidden states per layer") {
  // Shoeybi et al. 2019 fig. 4: per layer two all-reduces forward and two backward, each
  // sending 2(t-1)/t of b·s·h bf16 elements; Llama-3-8B, TP 8, b 1, s 4096, 32 layers, within
  // a node: NVLink at 80 %, and each all-reduce's latency (NCCL's tuning model: 8.4 µs, then
  // the ring's 14 steps of 3.4 µs beat the tree's 2 x 7 of 4 µs): 56 µs.
  training_plan_value p = llama_plan();
  const cluster c{.network_efficiency = 0.8};
  p.setup.layout.tensor = 8;
  const double hidden = 4096.0 * 4096 * 2;
  const double per_layer = 4 * (2 * (7.0 / 8) * hidden / (0.8 * 450e9) + 56e-6);
  CHECK(estimate_step_time(p, h100, c).tensor == doctest::Approx(32 * per_layer));
  // Full recompute repeats the forward pair.
  p.batch.recompute = recompute_kind::full;
  CHECK(estimate_step_time(p, h100, c).tensor == doctest::Approx(1.5 * 32 * per_layer));
  // TP 16 spans two nodes of 8: each node's 8 members drive their 8 NICs, 8 x 50 GB/s; the
  // tree's 2 x (7 x 4 + 14) µs beats the ring's 2 x (14 x 3.4 + 14): 8.4 + 84 µs.
  p.batch.recompute = recompute_kind::none;
  p.setup.model = models::llama_3_1_405b::value;  // 128 heads take TP 16
  p.setup.layout.tensor = 16;
  const double big = 2 * (15.0 / 16) * 4096.0 * 16384 * 2 / (0.8 * 400e9) + 92.4e-6;
  CHECK(estimate_step_time(p, h100, c).tensor == doctest::Approx(126 * 4 * big));
}

TEST_CASE("tensor parallel overlapped: each collective shows only beyond its matmul's chunks") {
  // Llama-3-8B, TP 8 with SP, 1 x 4,096 tokens on the ideal card (matmuls at 1 PFLOP/s, NVLink
  // at 450 GB/s). One all-gather or reduce-scatter receives 7/8 of the 4,096 x 4,096 bf16
  // hidden states, plus its latency (8.4 µs and 7 ring steps of 3.4 µs).
  training_plan_value p = llama_plan();
  layout& l = p.setup.layout;
  l.tensor = 8;
  l.sequence = true;
  const double exposed = estimate_step_time(p, ideal_card, whole_rates).tensor;
  const double one = 7.0 / 8 * 4096 * 4096 * 2 / 450e9 + (8.4e-6 + 7 * 3.4e-6);
  CHECK(exposed == doctest::Approx(32 * 8 * one));  // 4 collectives forward, 4 backward
  // Each rank's matmuls over the 4,096 gathered tokens, forward (backward: twice, the input and
  // the weight gradients): Q, K and V (512 + 128 + 128 of 4,096 outputs), o_proj (512 inputs),
  // gate and up (2 x 1,792), down (1,792 inputs).
  const auto matmul = [](double in, double out) { return 2 * 4096.0 * in * out / 1e15; };
  const double around[4] = {matmul(4096, 768), matmul(512, 4096), matmul(4096, 3584),
                            matmul(1792, 4096)};
  // Chunked in 8, a collective overlaps 7/8 of its matmul (the chunk at hand while the next
  // arrives); what remains shows.
  double per_layer = 0;
  for (const double g : around)
    per_layer += std::max(0.0, one - g * 7 / 8) + std::max(0.0, one - 2 * g * 7 / 8);
  // Here gate and up hide their all-gather both ways, down its reduce-scatter backward.
  CHECK(std::max(0.0, one - around[2] * 7 / 8) == 0);
  CHECK(std::max(0.0, one - 2 * around[3] * 7 / 8) == 0);
  for (const tp_comm_overlap kind : {tp_comm_overlap::userbuffers, tp_comm_overlap::async_tp}) {
    l.tp_overlap = kind;
    CHECK(estimate_step_time(p, ideal_card, whole_rates).tensor == doctest::Approx(32 * per_layer));
    // The search's bound takes none of it.
    CHECK(estimate_step_time(p, figures_of(whole_rates, ideal_card), work_of(p.setup, 4096), true)
              .tensor == 0);
  }
  // Without SP there is nothing to chunk (Megatron-LM refuses the flag).
  l.sequence = false;
  CHECK(check_layout(l, p.setup.model).rule ==
        layout_rule::tp_comm_overlap_needs_sequence_parallel);
}

TEST_CASE("data parallel: ZeRO-3 moves 3Ψ where DDP and ZeRO-1 move 2Ψ") {
  // Rajbhandari et al. 2019 §7.2: with compute too fast to hide anything, the exposed time is
  // the whole volume; pure bf16, 8 ranks in one node, one micro-batch.
  training_plan_value p{training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value},
                        activation_options{.sequence = 4096}};
  p.setup.layout.data = 8;
  const cluster instant{
      .peak_tflops = 1e9, .matmul_tflops = 1e9, .memory_gb_per_s = 1e9, .network_efficiency = 1};
  // Latencies (NCCL's tuning model): an all-reduce over the node 56 µs (as in the TP test), an
  // all-gather or reduce-scatter 8.4 + 7 x 3.4 = 32.2 µs; ZeRO-3 runs three per layer.
  const double psi = 8'030'261'248.0 * 2;
  CHECK(estimate_step_time(p, h100, instant).data ==
        doctest::Approx(2 * (7.0 / 8) * psi / 450e9 + 56e-6).epsilon(1e-6));
  p.setup.layout.zero = sharding::zero1;
  p.setup.layout.implementation = shard_implementation::deepspeed;
  CHECK(estimate_step_time(p, h100, instant).data ==
        doctest::Approx(2 * (7.0 / 8) * psi / 450e9 + 2 * 32.2e-6).epsilon(1e-6));
  p.setup.layout.zero = sharding::zero3;
  CHECK(estimate_step_time(p, h100, instant).data ==
        doctest::Approx(3 * (7.0 / 8) * psi / 450e9 + 96 * 32.2e-6).epsilon(1e-6));
  // At real rates ZeRO-3's prefetched gathers hide behind the step's compute.
  CHECK(estimate_step_time(p, h100).data == 0);
  // Over 16 ranks the group spans two nodes, 8 NICs each: 400 GB/s; 14 hops in a node and one
  // between: 8.4 + 14 x 3.4 + 14 = 70 µs a gather.
  p.setup.layout.data = 16;
  CHECK(estimate_step_time(p, h100, instant).data ==
        doctest::Approx(3 * (15.0 / 16) * psi / 400e9 + 96 * 70e-6).epsilon(1e-6));
  // With TP 8 the 2 data-parallel ranks are a node apart: one NIC each, one hop of 14 µs.
  p.setup.layout.tensor = 8;
  p.setup.layout.data = 2;
  CHECK(estimate_step_time(p, h100, instant).data ==
        doctest::Approx(3 * (1.0 / 2) * psi / 8 / 50e9 + 96 * 22.4e-6).epsilon(1e-6));
  // FSDP under AMP: fp32 parameters gathered in MixedPrecision's bf16 param_dtype, forward and
  // backward, and the fp32 gradients reduce-scattered.
  p.setup.precision = amp<bf16>::value;
  p.setup.layout = {
      .data = 8, .zero = sharding::zero3, .implementation = shard_implementation::fsdp};
  CHECK(estimate_step_time(p, h100, instant).data ==
        doctest::Approx((2 + 2) * (7.0 / 8) * psi / 450e9 + 96 * 32.2e-6).epsilon(1e-6));
}

TEST_CASE("context parallel: the K/V ring, exposed only beyond the attention it overlaps") {
  // Llama-3-8B, CP 2 over a 1 GB/s link: each rank passes its K and V (8 KV heads x 128, bf16,
  // 2,048 tokens) once forward and K, V and their gradients backward, in each of 32 layers, each
  // send 8.4 + 14 µs (NCCL's launch and network hop); its
  // attention: 2,048 queries against 4,096 keys, causal, at 35 % of 1 PFLOP/s.
  training_plan_value p = llama_plan();
  p.setup.layout.context = 2;
  const double kv = 2 * 2048.0 * 1024 * 2;
  const double ring = 3 * 32 * (kv / 1e9 + 22.4e-6);
  const double attention = 32 * 3.5 * 4 * 2048.0 * 4096 * 32 * 128 / 2 / 3.5e14;
  const cluster slow{.gpus_per_node = 1,
                     .inter_node_gb_per_s = 1,
                     .compute_efficiency = 1,
                     .network_efficiency = 1};
  CHECK(estimate_step_time(p, ideal_card, slow).context ==
        doctest::Approx(ring - attention).epsilon(1e-9));
  CHECK(estimate_step_time(p, h100).context == 0);  // NVLink: hidden behind attention
}

TEST_CASE("expert parallel: all-to-alls over NVLink and each rank's NIC at once") {
  // Mixtral-8x7B, EP 8 in a node: per MoE layer four all-to-alls of top-2 copies of the hidden
  // states, 7/8 of which leave the rank (GShard), each 8.4 + 3.4 µs of latency.
  training_plan_value p{training{models::mixtral_8x7b::value, mixed<bf16>::value, adamw<>::value},
                        activation_options{.sequence = 4096}};
  p.setup.layout.data = 8;
  p.setup.layout.expert = 8;
  const double copies = 4 * 4096.0 * 4096 * 2 * 2;
  CHECK(estimate_step_time(p, h100, whole_rates).expert ==
        doctest::Approx(32 * (copies * (7.0 / 8) / 450e9 + 4 * 11.8e-6)));
  // EP 8 over nodes of 4 GPUs: 3/8 to the node's others over NVLink, 4/8 through the NIC
  // (8.4 + 14 µs a send).
  p.setup.layout.data = 8;
  const cluster small_nodes{.gpus_per_node = 4, .compute_efficiency = 1, .network_efficiency = 1};
  CHECK(estimate_step_time(p, h100, small_nodes).expert ==
        doctest::Approx(32 * (copies * (4.0 / 8) / 50e9 + 4 * 22.4e-6)));
  // PP 4 over nodes of one GPU: one send forward and one backward per micro-batch.
  p.setup.layout = layout{.pipeline = 4};
  p.batch.micro_batches = 8;
  const double hidden = 4096.0 * 4096 * 2;
  CHECK(estimate_step_time(p, h100, {.gpus_per_node = 1, .network_efficiency = 1}).pipeline ==
        doctest::Approx(2 * 8 * (hidden / 50e9 + 22.4e-6)));
}

TEST_CASE("NCCL's latency: launch, ring hops within and between nodes, or the tree's") {
  // src/graph/tuning.cc, Simple protocol: 8.4 µs, ring hops 3.4 µs (NVLink) and 14 µs (net),
  // tree hops 4 µs (NVLink) and 14 µs (net). 1,024 ranks in 128 nodes of 8: the ring all-reduce
  // takes 2 x (896 x 3.4 + 127 x 14) µs, the tree 2 x (7 x 4 + 7 x 14): the tree.
  const cluster_figures f = figures_of({}, h100);
  using detail::collective;
  CHECK(detail::collective_latency(f, collective::all_reduce, 1024, 1) ==
        doctest::Approx(8.4e-6 + 2 * (7 * 4.0e-6 + 7 * 14.0e-6)));
  CHECK(detail::collective_latency(f, collective::gather, 1024, 1) ==
        doctest::Approx(8.4e-6 + 896 * 3.4e-6 + 127 * 14.0e-6));
  CHECK(detail::collective_latency(f, collective::send, 8, 1) == doctest::Approx(11.8e-6));
  CHECK(detail::collective_latency(f, collective::gather, 1, 1) == 0);
}

TEST_CASE("a GPU without a measured matmul or known bandwidth takes an H100's, and says so") {
  const cluster c{.compute_efficiency = 0.5};
  const cluster_figures f = figures_of(c, gpus::l40s::value);
  CHECK(f.assumed_matmul);
  CHECK_FALSE(f.assumed_memory);
  CHECK(f.kernels.matmul == doctest::Approx(362e12 * 794.5 / 989 * 0.5));
  CHECK(f.kernels.memory == doctest::Approx(864e9 * 0.5));
  CHECK_FALSE(figures_of(c, h100).assumed_matmul);
  CHECK(figures_of(c, h100).kernels.matmul == doctest::Approx(794.5e12 * 0.5));
}
