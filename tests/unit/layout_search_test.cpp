// Unit tier: the layout search against brute force over small spaces, and the step-time estimate
// against hand derivations of the formulas it cites.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>
#include <vramfit/layout_search.hpp>
#include <vramfit/presets.hpp>

#include "candidate_plan.hpp"

using namespace vramfit;

namespace {
const gpu& h100 = gpus::h100_80gb::value;

training_plan_value llama_plan(std::int64_t sequence = 4096) {
  return {training{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value},
          activation_options{.sequence = sequence}};
}

struct found_layout {
  double time = 0;
  bytes required{};
};

/// Every layout of `n` GPUs that DeepSpeed runs (DDP or its ZeRO; no CP, 1F1B only: as
/// framework_support.hpp's rules), written as plain loops over every
/// degree, stage, virtual stage count, recompute (full: the fewest first layers that fit at the
/// chosen micro-batch) and micro-batch: for each layout (structure,
/// sharding, virtual stages) the fastest configuration that fits, fastest first.
std::vector<found_layout> brute_force(const training_plan_value& plan, std::int64_t n,
                                      std::int64_t global_batch, const gpu& device = h100) {
  std::vector<found_layout> best;
  const model& m = plan.setup.model;
  for (std::int64_t tp = 1; tp <= std::min<std::int64_t>(n, 8); ++tp)
    for (std::int64_t pp = 1; pp <= n; ++pp)
      for (std::int64_t cp = 1; cp <= n; ++cp) {
        // DeepSpeed has no ring context parallelism.
        if (n % (tp * pp * cp) != 0 || plan.batch.sequence % cp != 0 || cp > 1) continue;
        const std::int64_t dp = n / (tp * pp * cp);
        for (int stage = 0; stage <= 3; ++stage) {
          layout l{.data = dp, .tensor = tp, .pipeline = pp, .context = cp};
          l.sequence = tp > 1 && (plan.batch.sequence / cp) % tp == 0;
          l.zero = static_cast<sharding>(stage);
          // Stage 0 is plain DDP, what `train` evaluates without --zero.
          if (stage > 0) l.implementation = shard_implementation::deepspeed;
          if ((stage > 0 && dp * cp == 1) || check_layout(l, m).rule != layout_rule::none ||
              global_batch % dp != 0)
            continue;
          const std::int64_t per_replica = global_batch / dp;
          for (std::int64_t v = 1; v <= m.layers; ++v) {
            if (v > 1 && (pp == 1 || m.layers % (pp * v) != 0)) continue;
            // DeepSpeed's pipeline engine runs 1F1B only, unsharded too.
            if (v > 1) continue;
            // Per recompute policy the fastest micro-batch (ties: the larger); across policies
            // the fastest (ties: the smaller memory).
            found_layout fastest{};
            for (int r = 0; r <= static_cast<int>(recompute_kind::op_sac); ++r) {
              found_layout policy{};
              training_plan_value chosen = plan;
              for (std::int64_t b = 1; b <= per_replica; ++b) {
                if (per_replica % b != 0 || (v > 1 && (per_replica / b) % pp != 0)) continue;
                training_plan_value q = plan;
                q.setup.layout = l;
                q.batch.recompute = static_cast<recompute_kind>(r);
                q.batch.micro_batch = b;
                q.batch.micro_batches = per_replica / b;
                q.batch.virtual_stages = v;
                q.batch.schedule =
                    v > 1 ? pipeline_schedule::interleaved : pipeline_schedule::one_f_one_b;
                const bytes required = fit(q, device).required;
                if (required > device.capacity) continue;
                const double t = estimate_step_time(q, device).total();
                if (policy.time == 0 || t <= policy.time) {
                  policy = {t, required};
                  chosen = q;
                }
              }
              // Full recompute: of the fewest first layers per stage that fit at that size.
              const std::int64_t most = (m.layers + pp - 1) / pp;
              for (std::int64_t k = 1; policy.time > 0 && r == 2 && k < most; ++k) {
                training_plan_value q = chosen;
                q.batch.recompute_layers = k;
                const bytes required = fit(q, device).required;
                if (required > device.capacity) continue;
                policy = {estimate_step_time(q, device).total(), required};
                break;
              }
              if (policy.time > 0 &&
                  (fastest.time == 0 || policy.time < fastest.time ||
                   (policy.time == fastest.time && policy.required < fastest.required)))
                fastest = policy;
            }
            if (fastest.time > 0) best.push_back(fastest);
          }
        }
      }
  std::sort(best.begin(), best.end(), [](const found_layout& a, const found_layout& b) {
    return a.time != b.time ? a.time < b.time : a.required < b.required;
  });
  return best;
}

/// The times of a search's ranked layouts.
std::vector<double> times(const search_result& r) {
  std::vector<double> t;
  for (const plan_candidate& c : r.best) t.push_back(c.time.total());
  return t;
}
}  // namespace

TEST_CASE("with full recompute fixed, pruning keeps what the layer refinement can reach") {
  // Full recompute of fewer layers is faster than of all: the bounds that prune must be those of
  // one layer per stage, or a layout whose refined time beats the cut would be cut.
  const training_plan_value plan = llama_plan();
  for (const std::int64_t gpus : {8, 16}) {
    CAPTURE(gpus);
    const search_space space{.gpus = gpus, .global_batch = 2 * gpus, .recompute = 2, .top = 5};
    search_space unpruned = space;
    unpruned.prune = false;
    CHECK(times(search_layouts(plan, h100, space)) == times(search_layouts(plan, h100, unpruned)));
  }
}

TEST_CASE(
    "with the replayed allocator, a layout ranked with the share that no longer fits is "
    "replaced") {
  // The search ranks with the fixed share and replays the allocator for each candidate that would
  // rank: on a card one byte too small for the share's fastest layout once replayed, the top
  // still holds as many layouts as fit (brute force over the replay), each of them fitting.
  training_plan_value plan = llama_plan();
  plan.setup.model.layers = 4;
  const search_space space{.gpus = 8, .global_batch = 8, .top = 3};
  const search_result shared = search_layouts(plan, h100, space);
  REQUIRE(shared.found());
  plan.overheads.reserve = reserve_model::simulated;
  const bytes replayed = fit(testing::trained_as(plan, shared.best[0]), h100).required;
  REQUIRE(replayed > shared.best[0].required);
  gpu tight = h100;
  tight.capacity = replayed - bytes{1};
  const std::vector<found_layout> brute = brute_force(plan, 8, 8, tight);
  const search_result found = search_layouts(plan, tight, space);
  CHECK(found.best.size() == std::min<std::size_t>(3, brute.size()));
  REQUIRE(found.found());
  CHECK(found.best[0].time.total() >= brute[0].time);
  for (const plan_candidate& c : found.best)
    CHECK(fit(testing::trained_as(plan, c), tight).required == c.required);
  CHECK(found.best[0].required <= tight.capacity);
}

TEST_CASE("the search ranks what brute force ranks, pruned or not") {
  struct {
    std::int64_t gpus, global_batch;
  } cases[] = {{8, 8}, {8, 32}, {6, 12}, {16, 16}};
  for (const auto& c : cases) {
    CAPTURE(c.gpus);
    CAPTURE(c.global_batch);
    const training_plan_value plan = llama_plan();
    const std::vector<found_layout> brute = brute_force(plan, c.gpus, c.global_batch);
    REQUIRE(brute.size() >= 5);
    const search_space space{.gpus = c.gpus, .global_batch = c.global_batch, .top = 5};
    search_space unpruned = space;
    unpruned.prune = false;
    const search_result pruned = search_layouts(plan, h100, space);
    const search_result full = search_layouts(plan, h100, unpruned);
    CHECK(times(pruned) == times(full));
    REQUIRE(pruned.best.size() == 5);
    for (std::size_t i = 0; i < 5; ++i) {
      CAPTURE(i);
      CHECK(pruned.best[i].time.total() == doctest::Approx(brute[i].time).epsilon(1e-12));
    }
    CHECK(pruned.best[0].required == brute[0].required);
    // Every candidate is counted once, by its verdict.
    CHECK(full.counts[static_cast<int>(rejection::slower)] == 0);
    CHECK(pruned.memory_evaluations < full.memory_evaluations);
  }
}

TEST_CASE("each ranked candidate fits, and its figures are what train evaluates") {
  const training_plan_value plan = llama_plan(8192);
  const search_result r = search_layouts(plan, h100, {.gpus = 64, .global_batch = 256});
  REQUIRE(r.found());
  for (const plan_candidate& c : r.best) {
    const training_plan_value q = testing::trained_as(plan, c);
    CHECK(c.layout.world() == 64);
    CHECK(c.layout.data * c.micro_batch * c.micro_batches == 256);
    CHECK(fit(q, h100).required == c.required);
    CHECK(c.required <= h100.capacity);
    CHECK(estimate_step_time(q, h100).total() == c.time.total());
  }
}

TEST_CASE("fixed knobs are kept, bounds respected, and the rest counted by reason") {
  const training_plan_value plan = llama_plan();
  const search_result tp8 = search_layouts(plan, h100, {.gpus = 16, .tensor = 8});
  REQUIRE(tp8.found());
  for (const plan_candidate& c : tp8.best) CHECK(c.layout.tensor == 8);
  const search_result z3 = search_layouts(plan, h100, {.gpus = 16, .zero = 3, .recompute = 2});
  REQUIRE(z3.found());
  for (const plan_candidate& c : z3.best) {
    CHECK(c.layout.zero == sharding::zero3);
    CHECK(c.recompute == recompute_kind::full);
  }
  const search_result hybrid = search_layouts(
      plan, h100, {.gpus = 16, .sharding = sharding_family::fsdp, .zero = 3, .shard_group = 4});
  REQUIRE(hybrid.found());
  for (const plan_candidate& c : hybrid.best) CHECK(c.layout.shard_group == 4);
  // Llama-3-8B's 32 heads: TP 3 breaks a rule; every candidate is counted once.
  const search_result six = search_layouts(plan, h100, {.gpus = 6, .max_tensor = 6});
  CHECK(six.rules[static_cast<int>(layout_rule::tensor_parallel_must_divide_attention_heads)] > 0);
  std::int64_t counted = 0;
  for (const std::int64_t n : six.counts) counted += n;
  CHECK(counted == six.candidates());
  CHECK(six.counts[static_cast<int>(rejection::ranked)] ==
        static_cast<std::int64_t>(six.best.size()));
}

TEST_CASE("offload only when nothing fits without it, none when nothing fits at all") {
  training_plan_value plan = llama_plan();
  const search_result one = search_layouts(plan, h100, {.gpus = 1});
  REQUIRE(one.found());  // 8B with AdamW needs 16 B per weight: only ZeRO-Offload fits one H100
  CHECK(one.offloaded);
  for (const plan_candidate& c : one.best) CHECK(c.layout.optimizer_offload == offload_target::cpu);
  CHECK_FALSE(search_layouts(plan, h100, {.gpus = 1, .try_offload = false}).found());
  CHECK_FALSE(search_layouts(plan, h100, {.gpus = 8}).offloaded);
}

TEST_CASE("bad search spaces are errors naming the rule") {
  const training_plan_value plan = llama_plan();
  CHECK_THROWS_WITH(search_layouts(plan, h100, {.gpus = 0}),
                    doctest::Contains("GPUs to search must be between 1 and 16777216, got 0"));
  CHECK_THROWS_WITH(search_layouts(plan, h100, {.gpus = 8, .global_batch = -1}),
                    doctest::Contains("global batch must be between 1 and"));
  CHECK_THROWS_WITH(search_layouts(plan, h100, {.gpus = 8, .net = {.mfu = 0}}),
                    doctest::Contains("utilisation must be positive"));
  CHECK_THROWS_WITH(search_layouts(plan, h100, {.gpus = 8, .net = {.mfu = 2}}),
                    doctest::Contains("utilisation must be at most 1, got 2"));
  CHECK_THROWS_WITH(search_layouts(plan, h100, {.gpus = 8, .net = {.inter_node_gb_per_s = -1}}),
                    doctest::Contains("inter-node bandwidth must be positive"));
  CHECK_THROWS_WITH(
      search_layouts(plan, h100, {.gpus = 8, .net = {.intra_node_gb_per_s = NAN}}),
      doctest::Contains("intra-node bandwidth must be 0 (the GPU's figure) or positive, got nan"));
  CHECK_THROWS_WITH(
      search_layouts(plan, h100, {.gpus = 8, .net = {.peak_tflops = -1}}),
      doctest::Contains("peak TFLOP/s must be 0 (the GPU's figure) or positive, got -1"));
}

TEST_CASE("FLOPs per token: torchtitan's 6N + 12lhqt, N without the token embedding") {
  // Llama-3-8B: 8,030,261,248 parameters (Meta), token embedding 128,256 x 4,096 = 525,336,576.
  const model_work w = work_of(training{models::llama_3_8b::value}, 4096);
  const double six_n = 6.0 * (8'030'261'248 - 525'336'576);
  const double attention = 12.0 * 32 * 32 * 128 * 4096;
  CHECK(w.training() == six_n + attention);  // 51,471,998,976
  CHECK(w.training() == 51'471'998'976.0);
  // LoRA: frozen weights skip their weight gradient, 4 per weight instead of 6.
  training lora{models::llama_3_8b::value};
  lora.finetune = lora_finetuning(16, "q_proj,v_proj");
  const model_work l = work_of(lora, 4096);
  // PEFT's count for r = 16 on q_proj and v_proj: 32 x (2 x 16 x 4096 + 16 x (4096 + 1024)).
  CHECK(l.trainable_share == doctest::Approx(6'815'744.0 / 8'030'261'248));
  CHECK(l.training() == doctest::Approx((2 + l.trainable_share) * six_n / 3 + attention));
}

TEST_CASE("step time on one GPU: FLOPs at the stated efficiency, nothing else") {
  training_plan_value p = llama_plan();
  p.batch.micro_batch = 2;
  p.batch.micro_batches = 3;
  const step_time t = estimate_step_time(p, h100, {.mfu = 0.4});
  CHECK(t.compute == doctest::Approx(6 * 4096 * 51'471'998'976.0 / (989e12 * 0.4)));
  CHECK(t.total() == t.compute);
  // Full recompute adds one forward pass of the layers: 2N' + 4lhqt per token, N' without
  // the token embedding and the head (Korthikanti et al. 2022 §5).
  p.batch.recompute = recompute_kind::full;
  const double forward = 2.0 * (8'030'261'248 - 2 * 525'336'576) + 4.0 * 32 * 32 * 128 * 4096;
  CHECK(estimate_step_time(p, h100, {.mfu = 0.4}).compute ==
        doctest::Approx(6 * 4096 * (51'471'998'976.0 + forward) / (989e12 * 0.4)));
}

TEST_CASE("the pipeline bubble: (p-1)/m of the ideal time, (p-1)/(m·v) interleaved") {
  // Narayanan et al. 2021 §2.2.1 and §2.2.2. Llama-3-8B's 32 layers over 4 stages of 8: the
  // slowest stage is the last (8 layers and the head), and the ratio does not depend on it.
  training_plan_value p = llama_plan();
  p.setup.layout.pipeline = 4;
  p.batch.micro_batches = 8;
  const step_time one_f_one_b = estimate_step_time(p, h100);
  CHECK(one_f_one_b.bubble / one_f_one_b.compute == doctest::Approx(3.0 / 8));
  p.batch.schedule = pipeline_schedule::interleaved;
  p.batch.virtual_stages = 2;
  const step_time interleaved = estimate_step_time(p, h100);
  CHECK(interleaved.bubble / interleaved.compute == doctest::Approx(3.0 / 16));
  // The last stage: 8 layers and the head, of 32 layers and the head in all.
  const model_work w = work_of(p.setup, 4096);
  const double head = (2 + w.trainable_share) * w.head;
  const double stage = (w.training() - head) / 4 + head;
  CHECK(one_f_one_b.compute == doctest::Approx(8 * 4096 * stage / (989e12 * 0.5)));
}

TEST_CASE("tensor parallel: four all-reduces of the hidden states per layer, within the node") {
  // Shoeybi et al. 2019 fig. 4: per layer two all-reduces forward and two backward, each
  // sending 2(t-1)/t of b·s·h bf16 elements; Llama-3-8B, TP 8, b 1, s 4096, 32 layers.
  training_plan_value p = llama_plan();
  p.setup.layout.tensor = 8;
  const double hidden = 4096.0 * 4096 * 2;
  const double per_layer = 4 * 2 * (7.0 / 8) * hidden;
  CHECK(estimate_step_time(p, h100).tensor == doctest::Approx(32 * per_layer / 450e9));
  // Full recompute repeats the forward pair; TP 16 spans two nodes of 8: the inter-node link.
  p.batch.recompute = recompute_kind::full;
  CHECK(estimate_step_time(p, h100).tensor == doctest::Approx(1.5 * 32 * per_layer / 450e9));
  p.batch.recompute = recompute_kind::none;
  p.setup.model = models::llama_3_1_405b::value;  // 128 heads take TP 16
  p.setup.layout.tensor = 16;
  const double big = 4 * 2 * (15.0 / 16) * 4096.0 * 16384 * 2;
  CHECK(estimate_step_time(p, h100).tensor == doctest::Approx(126 * big / 50e9));
}

TEST_CASE("data parallel: ZeRO-3 moves 3Ψ where DDP and ZeRO-1 move 2Ψ") {
  // Rajbhandari et al. 2019 §7.2: with compute too fast to hide anything, the exposed time is
  // the whole volume; pure bf16, 8 ranks in one node, one micro-batch.
  training_plan_value p{training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value},
                        activation_options{.sequence = 4096}};
  p.setup.layout.data = 8;
  const cluster instant{.peak_tflops = 1e15};
  const double psi = 8'030'261'248.0 * 2;
  CHECK(estimate_step_time(p, h100, instant).data ==
        doctest::Approx(2 * (7.0 / 8) * psi / 450e9).epsilon(1e-6));
  p.setup.layout.zero = sharding::zero1;
  p.setup.layout.implementation = shard_implementation::deepspeed;
  CHECK(estimate_step_time(p, h100, instant).data ==
        doctest::Approx(2 * (7.0 / 8) * psi / 450e9).epsilon(1e-6));
  p.setup.layout.zero = sharding::zero3;
  CHECK(estimate_step_time(p, h100, instant).data ==
        doctest::Approx(3 * (7.0 / 8) * psi / 450e9).epsilon(1e-6));
  // At the stated efficiency ZeRO-3's prefetched gathers hide behind the step's compute.
  CHECK(estimate_step_time(p, h100).data == 0);
  // Over 16 ranks the group spans two nodes: the inter-node link.
  p.setup.layout.data = 16;
  CHECK(estimate_step_time(p, h100, instant).data ==
        doctest::Approx(3 * (15.0 / 16) * psi / 50e9).epsilon(1e-6));
  // FSDP under AMP: fp32 parameters gathered in MixedPrecision's bf16 param_dtype, forward and
  // backward, and the fp32 gradients reduce-scattered.
  p.setup.precision = amp<bf16>::value;
  p.setup.layout = {
      .data = 8, .zero = sharding::zero3, .implementation = shard_implementation::fsdp};
  CHECK(estimate_step_time(p, h100, instant).data ==
        doctest::Approx((2 + 2) * (7.0 / 8) * psi / 450e9).epsilon(1e-6));
}

TEST_CASE("context parallel: the K/V ring, exposed only beyond the attention it overlaps") {
  // Llama-3-8B, CP 2 over a 1 GB/s link: each rank passes its K and V (8 KV heads x 128, bf16,
  // 2,048 tokens) once forward and K, V and their gradients backward, in each of 32 layers.
  training_plan_value p = llama_plan();
  p.setup.layout.context = 2;
  const double kv = 2 * 2048.0 * 1024 * 2;
  const double ring = 3 * kv * 32;
  const double attention = 4096.0 * 3 * (4.0 * 32 * 32 * 128 * 4096) / (2 * 989e12 * 0.5);
  const cluster slow{.gpus_per_node = 1, .inter_node_gb_per_s = 1};
  CHECK(estimate_step_time(p, h100, slow).context ==
        doctest::Approx(ring / 1e9 - attention).epsilon(1e-9));
  CHECK(estimate_step_time(p, h100).context == 0);  // NVLink: hidden behind attention
}

TEST_CASE("expert parallel and pipeline sends: hand-derived volumes") {
  // Mixtral-8x7B, EP 8 in a node: per MoE layer four all-to-alls of top-2 copies of the hidden
  // states, 7/8 of which leave the rank (GShard).
  training_plan_value p{training{models::mixtral_8x7b::value, mixed<bf16>::value, adamw<>::value},
                        activation_options{.sequence = 4096}};
  p.setup.layout.data = 8;
  p.setup.layout.expert = 8;
  const double hidden = 4096.0 * 4096 * 2;
  CHECK(estimate_step_time(p, h100).expert ==
        doctest::Approx(32 * 4 * hidden * 2 * (7.0 / 8) / 450e9));
  // PP 4 over nodes of one GPU: one send forward and one backward per micro-batch.
  p.setup.layout = layout{.pipeline = 4};
  p.batch.micro_batches = 8;
  CHECK(estimate_step_time(p, h100, {.gpus_per_node = 1}).pipeline ==
        doctest::Approx(2 * 8 * hidden / 50e9));
}
