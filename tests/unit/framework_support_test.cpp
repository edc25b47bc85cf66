// Unit tier: the layout search ranks only what each framework runs (framework_support.hpp), and
// counts what it sets aside by rule.
#include <doctest/doctest.h>

#include <string>
#include <vector>
#include <vramfit/layout_search.hpp>
#include <vramfit/presets.hpp>

#include "candidate_plan.hpp"
#include "tiny_llama.hpp"

using namespace vramfit;

namespace {
const gpu& h100 = gpus::h100_80gb::value;

/// A searched family and the framework its FSDP candidates are (the plan's FSDP version).
struct family_case {
  const char* name;
  sharding_family family;
  std::int64_t fsdp_version;
};
constexpr family_case families[] = {{"deepspeed", sharding_family::deepspeed, 1},
                                    {"megatron", sharding_family::megatron, 1},
                                    {"torchtitan", sharding_family::fsdp, 2},
                                    {"fsdp1", sharding_family::fsdp, 1}};

training_plan_value plan_of(const model& m, std::int64_t sequence, std::int64_t fsdp_version) {
  training_plan_value p{training{m, mixed<bf16>::value, adamw<>::value},
                        activation_options{.sequence = sequence}};
  p.setup.layout.fsdp_version = fsdp_version;
  return p;
}

/// The frameworks that run `l` when `family` is searched: its sharding's, or for plain DDP the
/// family's (written out here, not taken from the search).
std::vector<framework> runners(const layout& l, sharding_family family, std::int64_t fsdp_version) {
  const framework fsdp = fsdp_version == 2 ? framework::torchtitan : framework::fsdp1;
  if (l.implementation == shard_implementation::deepspeed) return {framework::deepspeed};
  if (l.implementation == shard_implementation::megatron) return {framework::megatron};
  if (l.implementation == shard_implementation::fsdp) return {fsdp};
  switch (family) {
    case sharding_family::deepspeed:
      return {framework::deepspeed};
    case sharding_family::megatron:
      return {framework::megatron};
    case sharding_family::fsdp:
      return {fsdp};
    case sharding_family::any:
      break;
  }
  return {framework::deepspeed, framework::megatron, fsdp};
}

bool supported(const plan_candidate& c, const training_plan_value& plan, sharding_family family) {
  const training_plan_value q = testing::trained_as(plan, c);
  for (const framework f : runners(c.layout, family, plan.setup.layout.fsdp_version))
    if (check_support(f, c.layout, q.batch) == support_rule::none) return true;
  return false;
}

std::int64_t set_aside(const search_result& r, support_rule rule) {
  return r.set_aside[static_cast<int>(rule)];
}
}  // namespace

TEST_CASE("each family ranks only what its framework runs, and counts the rest by rule") {
  // Tiny Llama (2 layers, 4 heads, 2 KV heads, FFN 16), sequence 12, 4 GPUs, global batch 4.
  // The structures (TP, PP, CP; DP the rest; EP 1, dense), all valid, SP wherever TP > 1:
  //   s1 DP 4 | s2 CP 2, DP 2 | s3 CP 4 | s4 PP 2, DP 2 | s5 PP 2, CP 2 | s6 TP 2, DP 2
  //   s7 TP 2, CP 2 | s8 TP 2, PP 2 | s9 TP 4
  // DP x CP is 4 for s1-s3, 2 for s4-s7, 1 for s8-s9 (DDP only there). One layer per stage under
  // PP 2: no virtual stages.
  //
  // DeepSpeed (DDP, ZeRO-1/2/3): CP set aside in s2, s3, s7 (4 each) and s5 (DDP, ZeRO-1; its
  // ZeRO-2/3 break check_layout's rule first, as do s4's): 14; ZeRO-2/3 with PP: 4 broken.
  // Under --schedule gpipe, 1F1B only: s4's DDP and ZeRO-1, s8's DDP: 3 (s5's already for CP).
  // Megatron-LM (DDP, distributed optimizer): nothing; under gpipe s4 2, s5 2, s8 1: 5.
  // torchtitan (DDP, FSDP grad-op and full, HSDP groups of 2 in s1 only): sequence 12 not
  // divisible by TP x 2 CP = 8 in s3 (3), s7 (3), s9 (1): 7; DDP beside CP, TP or PP in s2, s4,
  // s5, s6: 4 (s8's DDP has DP 1: no DDP at all).
  // FSDP1: s2-s7 three each (18) and s8, s9 one each: 20.
  model m = testing::tiny_llama;
  struct expected {
    std::int64_t deepspeed_cp, deepspeed_1f1b, megatron_gpipe, titan_sequence, titan_ddp, fsdp1;
  };
  for (const bool gpipe : {false, true}) {
    CAPTURE(gpipe);
    const expected want = gpipe ? expected{14, 3, 5, 7, 4, 20} : expected{14, 0, 0, 7, 4, 20};
    for (const family_case& f : families) {
      const std::string name = f.name;
      CAPTURE(name);
      training_plan_value plan = plan_of(m, 12, f.fsdp_version);
      if (gpipe) plan.batch.schedule = pipeline_schedule::gpipe;
      std::vector<plan_candidate> evaluated;
      const search_space space{.gpus = 4,
                               .global_batch = 4,
                               .sharding = f.family,
                               .top = search_result::max_top,
                               .prune = false};
      const search_result r = search_layouts(plan, h100, space, [&](const plan_candidate& c) {
        if (c.verdict != rejection::unsupported && c.verdict != rejection::breaks_a_rule &&
            c.verdict != rejection::batch_indivisible)
          evaluated.push_back(c);
      });
      REQUIRE(r.found());
      for (const plan_candidate& c : evaluated) CHECK(supported(c, plan, f.family));
      for (const plan_candidate& c : r.best) CHECK(supported(c, plan, f.family));
      using enum support_rule;
      std::int64_t total = 0;
      for (const std::int64_t n : r.set_aside) total += n;
      CHECK(total == r.counts[static_cast<int>(rejection::unsupported)]);
      if (name == "deepspeed") {
        CHECK(set_aside(r, deepspeed_has_no_ring_context_parallel) == want.deepspeed_cp);
        CHECK(set_aside(r, deepspeed_pipeline_runs_one_f_one_b) == want.deepspeed_1f1b);
        CHECK(total == want.deepspeed_cp + want.deepspeed_1f1b);
        CHECK(r.rules[static_cast<int>(
                  layout_rule::deepspeed_forbids_zero2_or_3_with_pipeline_parallel)] == 4);
      } else if (name == "megatron") {
        CHECK(set_aside(r, megatron_has_no_gpipe) == want.megatron_gpipe);
        CHECK(total == want.megatron_gpipe);
      } else if (name == "torchtitan") {
        CHECK(set_aside(r, torchtitan_sequence_must_divide_by_tp_and_2cp) == want.titan_sequence);
        CHECK(set_aside(r, torchtitan_ddp_runs_alone) == want.titan_ddp);
        CHECK(total == want.titan_sequence + want.titan_ddp);
      } else {
        CHECK(set_aside(r, fsdp1_is_data_parallel_only) == want.fsdp1);
        CHECK(total == want.fsdp1);
      }
    }
  }
}

TEST_CASE("torchtitan's tensor parallelism without sequence parallelism is set aside") {
  // s6-s9 of the case above hold TP 2 or 4; without SP each breaks the rule before the DDP one,
  // unless the sequence rule comes first (s7, s9: 4 of their shardings): s6 3, s8 1.
  const training_plan_value plan = plan_of(testing::tiny_llama, 12, 2);
  const search_result r = search_layouts(plan, h100,
                                         {.gpus = 4,
                                          .global_batch = 4,
                                          .sharding = sharding_family::fsdp,
                                          .sequence_parallel = false,
                                          .top = search_result::max_top,
                                          .prune = false});
  CHECK(set_aside(r, support_rule::torchtitan_tensor_parallel_is_sequence_parallel) == 4);
  for (const plan_candidate& c : r.best) CHECK((c.layout.tensor == 1 || c.layout.sequence));
}

TEST_CASE("any family: each candidate runs on the framework of its sharding") {
  const training_plan_value plan = plan_of(testing::tiny_llama, 12, 2);
  std::vector<plan_candidate> evaluated;
  const search_result r = search_layouts(
      plan, h100,
      {.gpus = 4, .global_batch = 4, .sharding = sharding_family::any, .top = 8, .prune = false},
      [&](const plan_candidate& c) {
        if (c.verdict != rejection::unsupported && c.verdict != rejection::breaks_a_rule)
          evaluated.push_back(c);
      });
  REQUIRE(r.found());
  for (const plan_candidate& c : evaluated) CHECK(supported(c, plan, sharding_family::any));
  // DeepSpeed's ZeRO with CP is set aside (s2, s3, s7: 3 each; s5: ZeRO-1, its ZeRO-2/3 break
  // check_layout's rule first): 10; Megatron-LM runs DDP with CP, so that is not.
  CHECK(set_aside(r, support_rule::deepspeed_has_no_ring_context_parallel) == 10);
}
