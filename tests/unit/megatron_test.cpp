// Unit tier: Megatron-LM's bytes per parameter with and without the distributed optimizer
// (megatron.hpp), against its dist_optimizer.md table.
#include <doctest/doctest.h>

#include <string>
#include <vramfit/layout_search.hpp>
#include <vramfit/presets.hpp>
#include <vramfit/timeline.hpp>
#include <vramfit/training.hpp>

#include "model_state_checks.hpp"
#include "tiny_llama.hpp"

using namespace vramfit;
using namespace vramfit::literals;
using namespace model_state_checks;

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

TEST_CASE("Megatron-LM without the distributed optimizer: fp16 params and grads are 20 B") {
  const std::int64_t n = 1024LL * 1024;
  const training t{stand_in,
                   mixed<fp16, fp16>::value,
                   adam<>::value,
                   full_finetune::value,
                   {.implementation = shard_implementation::megatron}};
  CHECK(states_on_device(model_states(t, one_matrix(1024, 1024), 0)) == bytes{20 * n});
}

TEST_CASE("Megatron-LM's schedules are 1F1B and interleaved 1F1B: no GPipe") {
  // megatron/core/pipeline_parallel/schedules.py get_forward_backward_func: no pipelining,
  // pipelining without interleaving (1F1B) or with it.
  const training t = pipelined_zero1_llama(shard_implementation::megatron);
  activation_options o{.micro_batch = 1, .sequence = 1024, .micro_batches = 4};
  o.schedule = pipeline_schedule::interleaved;
  o.virtual_stages = 2;
  CHECK(total(activations(t, o)) > bytes{});
  o.schedule = pipeline_schedule::gpipe;
  o.virtual_stages = 1;
  CHECK_THROWS_WITH_AS(activations(t, o), doctest::Contains("no GPipe schedule"), error);
  // Searched with a GPipe schedule, no Megatron layout with a pipeline is ranked.
  const training_plan_value base{{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value},
                                 {.sequence = 2048, .schedule = pipeline_schedule::gpipe}};
  const search_result found = search_layouts(
      base, gpus::h100_80gb::value, {.gpus = 16, .sharding = sharding_family::megatron, .top = 32});
  REQUIRE(found.found());
  for (const plan_candidate& c : found.best)
    CHECK((c.layout.zero == sharding::none || c.layout.pipeline == 1));
}
