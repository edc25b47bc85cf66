// Unit tier: DeepSpeed ZeRO as its optimizer allocates (deepspeed_zero.hpp): stage3.py's and
// stage_1_and_2.py's buffers for T0_3B and by hand.
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

TEST_CASE("DeepSpeed's pipeline engine runs 1F1B only, and the planner keeps to it") {
  // deepspeed/runtime/pipe/engine.py steps TrainSchedule (schedule.py): no interleaved chunks,
  // no GPipe schedule.
  const training t = pipelined_zero1_llama(shard_implementation::deepspeed);
  activation_options o{.micro_batch = 1, .sequence = 1024, .micro_batches = 4};
  CHECK(total(activations(t, o)) > bytes{});
  for (const pipeline_schedule s : {pipeline_schedule::interleaved, pipeline_schedule::gpipe}) {
    o.schedule = s;
    o.virtual_stages = s == pipeline_schedule::interleaved ? 2 : 1;
    CHECK_THROWS_WITH_AS(activations(t, o), doctest::Contains("runs the 1F1B schedule only"),
                         error);
  }
  // Searched with a GPipe schedule or interleaved chunks, no DeepSpeed layout is ranked.
  training_plan_value base{{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value},
                           {.sequence = 2048, .schedule = pipeline_schedule::gpipe}};
  for (const pipeline_schedule s : {pipeline_schedule::gpipe, pipeline_schedule::interleaved}) {
    base.batch.schedule = s;
    const search_result found =
        search_layouts(base, gpus::h100_80gb::value,
                       {.gpus = 16, .sharding = sharding_family::deepspeed, .top = 32});
    REQUIRE(found.found());
    for (const plan_candidate& c : found.best) {
      CAPTURE(c.layout.pipeline);
      if (c.layout.zero != sharding::none && c.layout.pipeline > 1) {
        CHECK(s == pipeline_schedule::interleaved);
        CHECK(c.virtual_stages == 1);
      }
    }
  }
}
