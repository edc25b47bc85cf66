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
#include "zero3_replay.hpp"

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
    // Beside them, past one rank, the tensors of at most 1e5 elements stay gathered whole
    // (stage3_param_persistence_threshold): the 122 layer norms of 2,048 and the two relative
    // position biases of 32 x 32, 251,904 elements in fp16.
    const bytes persistent{n > 1 ? 2 * 251'904 : 0};
    CHECK(entry(l, "ZeRO-3 persistent parameters (gathered for the run)") == persistent);
    CHECK(states_on_device(l) - entry(l, "gradients flattened and cast to fp32 (one group)") -
              persistent ==
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

namespace {
/// `m` in bf16 (16-bit gradients) with AdamW under DeepSpeed ZeRO-3 over `n` ranks.
training zero3_bf16(const model& m, std::int64_t n) {
  return {m,
          mixed<bf16, bf16>::value,
          adamw<>::value,
          full_finetune::value,
          {.data = n, .zero = sharding::zero3, .implementation = shard_implementation::deepspeed}};
}

/// What ZeRO-3's coordinator holds over a step of `t` (one stage), in closed form.
detail::zero3_gathering gathering(const training& t) {
  const tensor_ledger tensors = vramfit::tensors(t.model);
  const detail::stage_model_states s = detail::stage_model_states_of(t, tensors, 0);
  return detail::zero3_gathering_of(t, tensors, s.range, s.experts_per_rank);
}

const char* const gathered_entry = "ZeRO-3 gathered parameters (fetched, prefetched and kept)";
const char* const persistent_entry = "ZeRO-3 persistent parameters (gathered for the run)";

// Llama-3-8B: embedding and head [128256, 4096] = 525,336,576 each; per layer q and o
// 16,777,216, k and v 4,194,304, gate, up and down 58,720,256 (218,103,808 in all), two norms of
// 4,096. Llama-2-70B: embedding and head [32000, 8192] = 262,144,000; per layer q and o
// 67,108,864, k and v 8,388,608, gate, up and down 234,881,024 (855,638,016), norms of 8,192.
constexpr std::int64_t l3_head = 525'336'576, l3_layer = 218'103'808, l3_mlp = 58'720'256;
constexpr std::int64_t l2_head = 262'144'000, l2_layer = 855'638'016, l2_mlp = 234'881'024;
constexpr std::int64_t l2_q = 67'108'864, l2_k = 8'388'608;
}  // namespace

TEST_CASE(
    "ZeRO-3's persistent parameters: every one of at most 1e5 elements, gathered for the run") {
  // parameter_offload.py mark_persistent_parameters: ds_numel <= param_persistence_threshold
  // (1e5). Llama's norms (4,096 and 8,192 elements) are; no other tensor is. Llama-3-8B: 65
  // norms (two per layer and the final one); Llama-2-70B: 161.
  const memory_ledger l3 = model_states(zero3_bf16(models::llama_3_8b::value, 8));
  CHECK(entry(l3, persistent_entry) == bytes{2 * 65 * 4096});
  const memory_ledger l2 = model_states(zero3_bf16(models::llama_2_70b::value, 8));
  CHECK(entry(l2, persistent_entry) == bytes{2 * 161 * 8192});
  // 1e8 takes every tensor but the embedding and the head, which are then all there is to
  // gather.
  training t = zero3_bf16(models::llama_3_8b::value, 8);
  t.layout.zero3_persistence_threshold = 100'000'000;
  const detail::zero3_gathering all = gathering(t);
  CHECK(all.persistent_numel == 8'030'261'248 - 2 * l3_head);
  CHECK(all.all == 2 * l3_head);
  CHECK(all.most == 2 * l3_head);
  // On one rank a parameter is its partition (partition_parameters.py _no_gather_coalesced):
  // nothing is gathered, nothing kept beside it.
  const memory_ledger one = model_states(zero3_bf16(models::llama_3_8b::value, 1));
  CHECK(entry(one, persistent_entry) == bytes{});
  CHECK(entry(one, gathered_entry) == bytes{});
}

TEST_CASE("ZeRO-3 without prefetch: the reuse distance keeps the end of forward, by hand") {
  // stage3_prefetch_bucket_size 0: each module all-gathers its parameter at its fetch and
  // releases it after, unless its next use is within max_reuse_distance (1e9) elements of the
  // modules between (partitioned_param_coordinator.py __params_to_release). The next use of a
  // parameter is its backward; the modules between are the rest of forward and the start of
  // backward, in reverse.
  SUBCASE("Llama-2-70B: the head and layer 79's down_proj and up_proj cross the turn") {
    training t = zero3_bf16(models::llama_2_70b::value, 8);
    t.layout.zero3_prefetch_bucket_elements = 0;
    // The head: its backward is the next module (0 elements between): kept. Layer 79's
    // down_proj: its two norms, the final norm, the head twice and the three norms again,
    // 524,337,152 < 1e9: kept. Its up_proj: down_proj twice more, 994,099,200 < 1e9: kept. Its
    // gate_proj: past 1e9 before its backward: released. So the head's backward finds the three
    // gathered: 731,906,048 elements, the most at once (a module alone is at most 262,144,000).
    const std::int64_t norms = 6 * 8192;
    CHECK(norms + 2 * l2_head < 1'000'000'000);
    CHECK(norms + 2 * l2_head + 2 * l2_mlp < 1'000'000'000);
    CHECK(norms + 2 * l2_head + 4 * l2_mlp >= 1'000'000'000);
    CHECK(gathering(t).most == l2_head + 2 * l2_mlp);
    // Each all-gathered alone, into its own buffer (_all_gather_sequential): 2 bytes each.
    CHECK(entry(model_states(t), gathered_entry) == bytes{2 * 731'906'048});
    // The replay of the coordinator finds the same, at the turn.
    const zero3_replay::result r = zero3_replay::replay(t);
    CHECK(r.most_available == l2_head + 2 * l2_mlp);
    CHECK(r.available_at_turn == l2_head + 2 * l2_mlp);
    CHECK(r.peak == bytes{2 * 731'906'048});
    // With no reuse distance every parameter goes after its module: the largest alone.
    t.layout.zero3_reuse_distance_elements = 0;
    CHECK(gathering(t).most == l2_head);
    CHECK(zero3_replay::replay(t).most_available == l2_head);
  }
  SUBCASE("Llama-3-8B: the head alone; with a reuse distance of 1.1e9 layer 31's down_proj too") {
    training t = zero3_bf16(models::llama_3_8b::value, 8);
    t.layout.zero3_prefetch_bucket_elements = 0;
    // Layer 31's down_proj: six norms and the head twice, 1,050,697,728 >= 1e9: released. The
    // embedding before the layers and the head at the turn are the most gathered: 525,336,576.
    const std::int64_t norms = 6 * 4096;
    CHECK(norms + 2 * l3_head >= 1'000'000'000);
    CHECK(gathering(t).most == l3_head);
    CHECK(zero3_replay::replay(t).most_available == l3_head);
    t.layout.zero3_reuse_distance_elements = 1'100'000'000;
    CHECK(norms + 2 * l3_head < 1'100'000'000);
    CHECK(norms + 2 * l3_head + 2 * l3_mlp >= 1'100'000'000);
    CHECK(gathering(t).most == l3_head + l3_mlp);
    CHECK(zero3_replay::replay(t).most_available == l3_head + l3_mlp);
  }
}

TEST_CASE("ZeRO-3 at DeepSpeed's defaults: the prefetcher fills max_live_parameters, by hand") {
  // Each fetch prefetches from the trace while the elements being prefetched are under
  // min(max_live_parameters - __n_available_params, prefetch_bucket_size) (1e9 and 5e7), passing
  // over what is gathered; a prefetch stops on the parameter that reaches it, so what is gathered
  // stays under 1e9 plus the largest parameter: the bound vramfit counts. The reuse distance's
  // share (the head, 525,336,576 and 731,906,048 elements above) is below it, and changes
  // nothing.
  SUBCASE("Llama-3-8B over 8 GPUs: the head crosses 1e9 at layer 27's up_proj") {
    const training t = zero3_bf16(models::llama_3_8b::value, 8);
    const detail::zero3_gathering g = gathering(t);
    CHECK(g.crossing == l3_head);
    CHECK(g.most == 1'000'000'000 - 1 + l3_head);  // 1,525,336,575
    CHECK(entry(model_states(t), gathered_entry) == bytes{2 * (1'000'000'000 - 1 + l3_head)});
    // The replay: at layer 27's up_proj the coordinator holds its up_proj and down_proj and
    // layers 28 to 31, 989,855,744 elements, 10,144,256 under 1e9; the queue's next entries are
    // the persistent norms (gathered already) and the head: 525,336,576 more, 0.7 % under the
    // bound. Each is all-gathered alone: 2 bytes an element.
    const std::int64_t held = 2 * l3_mlp + 4 * l3_layer;
    CHECK(held == 989'855'744);
    const zero3_replay::result r = zero3_replay::replay(t);
    CHECK(r.most_available == held + l3_head);  // 1,515,192,320
    CHECK(r.peak == bytes{2 * (held + l3_head)});
    // As backward begins: the head, layers 31 and 30 and layer 29's down_proj, whose backward
    // uses the prefetcher passed while they were gathered (the reuse distance alone keeps only
    // the head: a distance of 0 holds as much).
    CHECK(r.available_at_turn == l3_head + 2 * l3_layer + l3_mlp);
    training no_reuse = t;
    no_reuse.layout.zero3_reuse_distance_elements = 0;
    CHECK(zero3_replay::replay(no_reuse).most_available == r.most_available);
    CHECK(gathering(no_reuse).most == g.most);
  }
  SUBCASE("Llama-2-70B over 8 GPUs: the embedding crosses 1e9 at layer 1's k_proj in backward") {
    const training t = zero3_bf16(models::llama_2_70b::value, 8);
    CHECK(gathering(t).most == 1'000'000'000 - 1 + l2_head);  // 1,262,143,999
    CHECK(entry(model_states(t), gathered_entry) == bytes{2'524'287'998});
    // The replay: backward at layer 1's k_proj holds its k_proj and q_proj and all of layer 0,
    // 931,135,488, 68,864,512 under 1e9; the queue's next parameter is the embedding,
    // 262,144,000: 1,193,279,488, 5.5 % under the bound. The prefetch bucket holds the
    // prefetcher back here: a step earlier, 144 million under 1e9, it prefetched only 5e7's
    // worth.
    const std::int64_t held = l2_k + l2_q + l2_layer;
    CHECK(held == 931'135'488);
    const zero3_replay::result r = zero3_replay::replay(t);
    CHECK(r.most_available == held + l2_head);
    // Layer 1's v_proj, k_proj and q_proj were prefetched together into one flat buffer
    // (_all_gather_dtype), which the first wait copies out of (AllGatherCoalescedHandle.wait:
    // torch.cat) and which goes when q_proj's fetch pops the last of them: 83,886,080 elements
    // more for a moment, 2,554,331,136 bytes, 1.2 % over the bound, which leaves those copies
    // out.
    CHECK(r.peak == bytes{2 * (held + l2_head + 2 * l2_k + l2_q)});
  }
  SUBCASE("Hugging Face's full recompute: the same for Llama-3-8B, within the bound for 70B") {
    // Each layer's modules run again in forward order before their backward.
    CHECK(zero3_replay::replay(zero3_bf16(models::llama_3_8b::value, 8), true).most_available ==
          989'855'744 + l3_head);
    // Llama-2-70B: at layer 1's v_proj all of layer 0 is gathered with layer 1's v, k and q,
    // 939,524,096, and the embedding comes next: 1,201,668,096, 4.8 % under the bound.
    CHECK(zero3_replay::replay(zero3_bf16(models::llama_2_70b::value, 8), true).most_available ==
          2 * l2_k + l2_q + l2_layer + l2_head);
  }
  SUBCASE("max_live_parameters above the model: all of it is gathered") {
    training t = zero3_bf16(models::llama_3_8b::value, 8);
    t.layout.zero3_max_live_elements = 10'000'000'000;
    CHECK(gathering(t).most == 8'030'261'248 - 65 * 4096);
    CHECK(zero3_replay::replay(t).most_available == 8'030'261'248 - 65 * 4096);
  }
  SUBCASE("a model under half the reuse distance stays gathered from forward to backward") {
    // Qwen2.5-0.5B (494 million parameters, tied): every parameter's backward is within 1e9
    // elements of its forward, so all of it is kept into backward, with prefetch or without.
    training t = zero3_bf16(models::qwen2_5_0_5b::value, 8);
    const detail::zero3_gathering g = gathering(t);
    CHECK(g.most == g.all);
    CHECK(zero3_replay::replay(t).most_available == g.all);
  }
}

TEST_CASE("ZeRO-3's bound holds what the replayed coordinator holds, for every preset") {
  // The closed form against the replay over settings each side of DeepSpeed's defaults.
  struct setting {
    std::int64_t live, bucket, reuse, threshold;
  };
  const setting settings[] = {{1'000'000'000, 50'000'000, 1'000'000'000, 100'000},
                              {200'000'000, 50'000'000, 0, 100'000},
                              {5'000'000'000, 200'000'000, 3'000'000'000, 0},
                              {1'000'000'000, 0, 1'000'000'000'000, 100'000},
                              {0, 50'000'000, 1, 100'000'000}};
  for (const preset& p : presets) {
    const model& m = p.value;
    for (const setting& s : settings) {
      CAPTURE(m.name);
      CAPTURE(s.live);
      CAPTURE(s.bucket);
      CAPTURE(s.reuse);
      CAPTURE(s.threshold);
      training t = zero3_bf16(m, 4);
      t.layout.zero3_max_live_elements = s.live;
      t.layout.zero3_prefetch_bucket_elements = s.bucket;
      t.layout.zero3_reuse_distance_elements = s.reuse;
      t.layout.zero3_persistence_threshold = s.threshold;
      const detail::zero3_gathering g = gathering(t);
      const zero3_replay::result r = zero3_replay::replay(t);
      CHECK(r.most_available <= g.most);
      if (s.bucket == 0 || s.live == 0) CHECK(r.most_available == g.most);  // exact
      // Under Hugging Face's full recompute each layer's modules run again before their backward,
      // which the bound does not trace: the replay holds no more than it.
      CHECK(zero3_replay::replay(t, true).most_available <= g.most);
    }
  }
}

TEST_CASE("ZeRO-3's coordinator in a constant expression: tiny Llama by hand") {
  // Nothing persistent (threshold 0), no prefetch, over 2 ranks: with no reuse distance the
  // largest parameter alone (gate, up, down: 128 elements, 256 bytes); with DeepSpeed's 1e9 each
  // parameter's backward is near enough, and the whole model (1,432 elements) is gathered.
  constexpr auto gathered = [](std::int64_t reuse) {
    const training t{testing::tiny_llama,
                     mixed<bf16, bf16>::value,
                     adamw<>::value,
                     full_finetune::value,
                     {.data = 2,
                      .zero = sharding::zero3,
                      .implementation = shard_implementation::deepspeed,
                      .zero3_prefetch_bucket_elements = 0,
                      .zero3_reuse_distance_elements = reuse,
                      .zero3_persistence_threshold = 0}};
    return size_of(model_states(t), entry_role::gathered_parameters);
  };
  static_assert(gathered(0) == bytes{2 * 128});
  static_assert(gathered(1'000'000'000) == bytes{2 * testing::tiny_llama_parameters});
}
