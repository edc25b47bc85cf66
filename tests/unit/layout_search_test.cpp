// Unit tier: the layout search against brute force over small spaces (the step-time estimate:
// step_time_test.cpp).
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

TEST_CASE("a framework release without selective or partial recompute: neither is ranked") {
  // Llama-3-70B at 4,096 tokens on 32 H100s, Megatron-LM: the memory-tight layouts recompute the
  // first layers of each stage; without partial recompute they recompute all of them.
  const training_plan_value plan{
      training{models::llama_3_70b::value, mixed<bf16>::value, adamw<>::value},
      activation_options{.sequence = 4096}};
  search_space space{
      .gpus = 32, .sharding = sharding_family::megatron, .top = search_result::max_top};
  const auto count = [](const search_result& r, bool partial) {
    return std::count_if(r.best.begin(), r.best.end(), [&](const plan_candidate& c) {
      return c.recompute == recompute_kind::full && (c.recompute_layers > 0) == partial;
    });
  };
  const search_result current = search_layouts(plan, h100, space);
  CHECK(count(current, true) > 0);
  CHECK(count(current, false) == 0);
  space.partial_recompute = false;
  const search_result v2 = search_layouts(plan, h100, space);
  CHECK(count(v2, true) == 0);
  CHECK(count(v2, false) > 0);
  // Selective recompute fixed: ranked by the current release, nothing by one without it.
  space.recompute = static_cast<int>(recompute_kind::selective);
  CHECK(search_layouts(plan, h100, space).found());
  space.selective_recompute = false;
  CHECK_FALSE(search_layouts(plan, h100, space).found());
}

TEST_CASE("a framework release without gradient accumulation: one micro-batch a replica") {
  // Llama-3-8B at 8,192 tokens without recompute, 32 sequences a step on 8 H100s: four a
  // replica at DP 8 fit only one at a time, so DP 8 accumulates; without accumulation each
  // unpipelined replica runs its whole batch at once (torchtitan before June 2025).
  const training_plan_value plan = llama_plan(8192);
  search_space space{.gpus = 8,
                     .global_batch = 32,
                     .recompute = static_cast<int>(recompute_kind::none),
                     .top = search_result::max_top};
  const auto accumulating = [](const search_result& r) {
    return std::count_if(r.best.begin(), r.best.end(), [](const plan_candidate& c) {
      return c.layout.pipeline == 1 && c.micro_batches > 1;
    });
  };
  const search_result current = search_layouts(plan, h100, space);
  CHECK(accumulating(current) > 0);
  space.gradient_accumulation = false;
  const search_result before = search_layouts(plan, h100, space);
  REQUIRE(before.found());
  CHECK(accumulating(before) == 0);
  // A pipeline still splits its batch into micro-batches.
  CHECK(std::any_of(before.best.begin(), before.best.end(), [](const plan_candidate& c) {
    return c.layout.pipeline > 1 && c.micro_batches > 1;
  }));
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
  CHECK_THROWS_WITH(search_layouts(plan, h100, {.gpus = 8, .net = {.compute_efficiency = 0}}),
                    doctest::Contains("compute efficiency must be positive"));
  CHECK_THROWS_WITH(search_layouts(plan, h100, {.gpus = 8, .net = {.network_efficiency = 2}}),
                    doctest::Contains("network efficiency must be at most 1, got 2"));
  CHECK_THROWS_WITH(search_layouts(plan, h100, {.gpus = 8, .net = {.memory_gb_per_s = -1}}),
                    doctest::Contains("memory bandwidth must be 0 (the GPU's figure) or positive"));
  CHECK_THROWS_WITH(search_layouts(plan, h100, {.gpus = 8, .net = {.inter_node_gb_per_s = -1}}),
                    doctest::Contains("inter-node bandwidth must be positive"));
  CHECK_THROWS_WITH(
      search_layouts(plan, h100, {.gpus = 8, .net = {.intra_node_gb_per_s = NAN}}),
      doctest::Contains("intra-node bandwidth must be 0 (the GPU's figure) or positive, got nan"));
  CHECK_THROWS_WITH(
      search_layouts(plan, h100, {.gpus = 8, .net = {.peak_tflops = -1}}),
      doctest::Contains("peak TFLOP/s must be 0 (the GPU's figure) or positive, got -1"));
}
