// Unit tier: Megatron-LM's bytes per parameter with and without the distributed optimizer
// (megatron.hpp), against its dist_optimizer.md table.
#include <doctest/doctest.h>

#include <string>
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
