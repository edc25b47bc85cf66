// Unit tier: the planners against brute-force evaluation at run time.
#include <doctest/doctest.h>

#include <vramfit/planner.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;

namespace {
const training_plan_value llama{
    training{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value, full_finetune::value,
             parallel<fsdp<8>>::value},
    activation_options{.micro_batch = 1, .sequence = 4096, .recompute = recompute_kind::full}};
const gpu& h100 = gpus::h100_80gb::value;

bool fits_with(training_plan_value p, std::int64_t micro_batch, std::int64_t sequence) {
  p.batch.micro_batch = micro_batch;
  p.batch.sequence = sequence;
  return fit(p, h100).fits();
}
}  // namespace

TEST_CASE("the largest micro-batch, by brute force") {
  const std::int64_t best = max_micro_batch(llama, h100, 256);
  std::int64_t brute = 0;
  for (std::int64_t b = 1; b <= 256; ++b)
    if (fits_with(llama, b, 4096)) brute = b;
  CHECK(best == brute);
  CHECK(best > 1);
}

TEST_CASE("the longest sequence: it fits, one step more does not") {
  const std::int64_t s = max_sequence(llama, h100);
  CHECK(s % 128 == 0);
  CHECK(fits_with(llama, 1, s));
  CHECK_FALSE(fits_with(llama, 1, s + 128));
}

TEST_CASE("the smallest data-parallel degree, by brute force") {
  training_plan_value p = llama;
  p.batch.recompute = recompute_kind::none;
  const std::int64_t n = min_data_parallel(p, h100);
  std::int64_t brute = 0;
  for (std::int64_t d = 1; d <= 1024 && brute == 0; d *= 2) {
    training_plan_value q = p;
    q.setup.layout.data = d;
    if (fit(q, h100).fits()) brute = d;
  }
  CHECK(n == brute);
  CHECK(n > 1);
}

TEST_CASE("the layout search picks the cheapest candidate that fits, by brute force") {
  const training_plan_value p{
      training{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value},
      activation_options{.micro_batch = 2, .sequence = 4096}};
  const search_result r = search_layouts(p, h100, {.gpus = 8});
  REQUIRE(r.chosen >= 0);
  // Every candidate, evaluated in the same order: the first that fits is the chosen one, and
  // every earlier one either breaks a rule or does not fit.
  std::int64_t first = -1;
  for (std::size_t i = 0; i < r.candidates.size(); ++i) {
    const candidate& c = r.candidates[i];
    if (c.verdict == rejection::breaks_a_rule) continue;
    training_plan_value q = p;
    q.setup.layout = c.layout;
    q.batch.recompute = c.recompute;
    const bool fits = fit(q, h100).fits();
    if (fits && first < 0) first = static_cast<std::int64_t>(i);
    if (static_cast<std::int64_t>(i) < r.chosen) CHECK(c.verdict == rejection::does_not_fit);
  }
  CHECK(first == r.chosen);
  const candidate& chosen = r.candidates[static_cast<std::size_t>(r.chosen)];
  CHECK(chosen.required <= h100.capacity);
  CHECK(chosen.layout.world() == 8);
  // A layout that breaks a rule (TP 8 with Llama-3-8B is fine; PP with DeepSpeed ZeRO-2/3 is not).
  bool saw_rule = false;
  for (const candidate& c : r.candidates)
    saw_rule = saw_rule || c.verdict == rejection::breaks_a_rule;
  CHECK(saw_rule);
}

TEST_CASE("no layout fits: the search says so") {
  const training_plan_value p{
      training{models::llama_3_1_405b::value, fp32_training::value, adamw<>::value},
      activation_options{.micro_batch = 1, .sequence = 2048}};
  const search_result r = search_layouts(p, gpus::l4::value, {.gpus = 2, .try_offload = false});
  CHECK(r.chosen == -1);
  for (const candidate& c : r.candidates) CHECK(c.verdict != rejection::chosen);
}
