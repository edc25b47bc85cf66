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
  CHECK(fits_with(llama, 1, s));
  CHECK_FALSE(fits_with(llama, 1, s + 1));
  CHECK(max_sequence(llama, h100, std::int64_t{1} << 22, 128) == s / 128 * 128);
  // Context parallel 4 with sequence parallel over TP 2 splits the sequence 8 ways.
  training_plan_value split = llama;
  split.setup.layout.context = 4;
  split.setup.layout.tensor = 2;
  split.setup.layout.sequence = true;
  CHECK(max_sequence(split, h100) % 8 == 0);
  // GPT-2 stops at its 1024 positions; a ViT takes its 197 tokens or nothing.
  training_plan_value gpt2 = llama;
  gpt2.setup.model = models::gpt2::value;
  CHECK(max_sequence(gpt2, h100) == 1024);
  training_plan_value vit = llama;
  vit.setup.model = models::vit_l_16::value;
  vit.batch.sequence = 197;
  CHECK(max_sequence(vit, h100) == 197);
  CHECK(max_sequence(vit, gpu_with_capacity("1GiB")) == 0);
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

TEST_CASE("with the allocator replayed: it fits, one more does not, and nothing past the bound") {
  // Qwen2.5-0.5B on a 24 GiB GPU: the searches start at the largest micro-batch (sequence) whose
  // tensors alone fit, past which nothing fits, then replay the allocator downwards.
  const gpu small = gpu_with_capacity("24GiB");
  training_plan_value p{training{models::qwen2_5_0_5b::value, mixed<bf16>::value, adamw<>::value},
                        activation_options{.micro_batch = 1, .sequence = 512}};
  p.overheads.reserve = reserve_model::simulated;
  p.overheads.cuda_context = 512 * MiB.size;  // the boundaries below were found with 512 MiB
  auto fits_at = [&](std::int64_t micro_batch, std::int64_t sequence) {
    training_plan_value q = p;
    q.batch.micro_batch = micro_batch;
    q.batch.sequence = sequence;
    return fit(q, small).fits();
  };
  const std::int64_t bound = max_micro_batch(detail::without_reserve(p), small, 64);
  const std::int64_t best = max_micro_batch(p, small, 64);
  CHECK(best > 2);
  CHECK(bound > best);  // the replay, not the tensors, stops the search
  CHECK(fits_at(best, 512));
  CHECK_FALSE(fits_at(best + 1, 512));
  for (std::int64_t b = bound + 1; b <= 64; ++b) CHECK_FALSE(fits_at(b, 512));
  // Between them the reserve is not monotone: micro-batch 10 fits where 9 does not (the
  // activations' blocks round into segments differently), so the answer is a local largest.
  CHECK_FALSE(fits_at(9, 512));
  CHECK(fits_at(10, 512));
  const std::int64_t limit = max_sequence(detail::without_reserve(p), small, 8192, 128);
  const std::int64_t longest = max_sequence(p, small, 8192, 128);
  CHECK(longest > 1024);
  CHECK(limit > longest);
  CHECK(fits_at(1, longest));
  CHECK_FALSE(fits_at(1, longest + 128));
  for (std::int64_t s = limit + 128; s <= 8192; s += 128) CHECK_FALSE(fits_at(1, s));
  // The smallest data-parallel degree of Llama-3-8B's FSDP with the replay, every degree tried.
  training_plan_value sharded = p;
  sharded.setup.model = models::llama_3_8b::value;
  sharded.setup.layout = parallel<fsdp<8>>::value;
  sharded.batch = {.micro_batch = 1, .sequence = 4096, .recompute = recompute_kind::full};
  std::int64_t fewest = 0;
  for (std::int64_t d = 1; d <= 1024 && fewest == 0; d *= 2) {
    training_plan_value q = sharded;
    q.setup.layout.data = d;
    if (fit(q, small).fits()) fewest = d;
  }
  CHECK(fewest > 1);
  CHECK(min_data_parallel(sharded, small) == fewest);
}
