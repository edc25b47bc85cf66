// Unit tier: PyTorch FSDP (fsdp.hpp): dim-0 shards, the units it gathers, FSDP2's master and
// reduce-scatter copy, reshard_after_forward and hybrid sharding, derived by hand.
#include <doctest/doctest.h>

#include <string>
#include <vector>
#include <vramfit/presets.hpp>
#include <vramfit/timeline.hpp>
#include <vramfit/training.hpp>

#include "model_state_checks.hpp"
#include "tiny_llama.hpp"

using namespace vramfit;
using namespace vramfit::literals;
using namespace model_state_checks;

TEST_CASE("FSDP shards each tensor along dim 0 and gathers a whole unit") {
  // Llama-3-8B, FSDP full shard over 8 ranks, amp: fp32 parameters sharded, bf16 compute.
  const model& m = models::llama_3_8b::value;
  const memory_ledger l = model_states(training{m, amp<bf16>::value, adamw<>::value,
                                                full_finetune::value, parallel<fsdp<8>>::value});
  // Every dim 0 here divides by 8: exactly 4 B x P / 8.
  CHECK(entry(l, "weights (ZeRO-3 partition)") == bytes{4 * 8'030'261'248 / 8});
  CHECK(total(l, component::optimizer_states) == bytes{8 * 8'030'261'248 / 8});
  // Gathered in bf16: the root (embedding + final norm + head = 1,050,677,248 elements) around
  // the layers, the current and the prefetched layer (218,112,000 elements each: q, o 4096^2,
  // k, v 1024 x 4096, gate, up, down 4096 x 14336, two norms). In backward, FSDP1's flat
  // gradients, a layer's and the root's until its post-backward: bf16 as the gathered flat
  // parameter, and their cast to the fp32 reduce format (_post_backward_hook).
  const std::int64_t root = 2 * 128'256LL * 4096 + 4096;
  const std::int64_t layer = 2 * 4096LL * 4096 + 2 * 1024LL * 4096 + 3 * 4096LL * 14336 + 2 * 4096;
  CHECK(layer == 218'112'000);
  CHECK(entry(l, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{2 * root + 2 * 2 * layer});
  CHECK(entry(l, "FSDP layer gradients (unsharded, and their reduce-scatter copy)") ==
        bytes{(2 + 4) * layer});
  CHECK(entry(l, "FSDP root gradients (unsharded, to its post-backward)") == bytes{(2 + 4) * root});
}

TEST_CASE("FSDP2 shards the fp32 master as the parameter and reduces through a copy-in buffer") {
  // Llama-3-8B, fully_shard over 8 ranks with MixedPrecisionPolicy(param bf16, reduce fp32) on a
  // bf16 model with an fp32 master: the sharded parameter is the fp32 master itself (no 16-bit
  // shard, no separate master), its sharded gradient fp32.
  const model& m = models::llama_3_8b::value;
  const std::int64_t p = 8'030'261'248;
  const training t{m, mixed<bf16, bf16>::value, adamw<>::value, full_finetune::value,
                   parallel<fully_shard<8>>::value};
  const memory_ledger l = model_states(t);
  CHECK(entry(l, "weights (ZeRO-3 partition)") == bytes{4 * p / 8});
  CHECK(entry(l, "master weights (partition)") == bytes{0});
  CHECK(entry(l, "gradients (partition)") == bytes{4 * p / 8});
  CHECK(total(l, component::optimizer_states) == bytes{8 * p / 8});
  // The root unit (1,050,677,248 elements) and two layers (218,112,000 each) gathered in bf16;
  // in backward a unit's bf16 gradients and the fp32 reduce-scatter buffer they are copied into.
  const std::int64_t root = 2 * 128'256LL * 4096 + 4096;
  const std::int64_t layer = 218'112'000;
  CHECK(entry(l, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{2 * root + 2 * 2 * layer});
  CHECK(entry(l, "FSDP layer gradients (unsharded, and their reduce-scatter copy)") ==
        bytes{(2 + 4) * layer});
  CHECK(entry(l, "FSDP root gradients (unsharded, to its post-backward)") == bytes{(2 + 4) * root});
  // FSDP1 keeps the bf16 shard beside the fp32 master and reduces its flat bf16 gradient, which
  // its split's backward concatenates while the views' bf16 gradients still exist.
  const memory_ledger v1 = model_states(training{m, mixed<bf16, bf16>::value, adamw<>::value,
                                                 full_finetune::value, parallel<fsdp<8>>::value});
  CHECK(entry(v1, "weights (ZeRO-3 partition)") == bytes{2 * p / 8});
  CHECK(entry(v1, "master weights (partition)") == bytes{4 * p / 8});
  CHECK(entry(v1, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{2 * root + 2 * 2 * layer});
  CHECK(entry(v1, "FSDP layer gradients (unsharded, and their reduce-scatter copy)") ==
        bytes{(2 + 2) * layer});
  CHECK(entry(v1, "FSDP root gradients (unsharded, to its post-backward)") ==
        bytes{(2 + 2) * root});
}

TEST_CASE("FSDP's root gradients: the head's from its backward, the rest at the post-backward") {
  // Llama-3-8B, fully_shard over 8 ranks, bf16 compute with fp32 reduce: the head's backward
  // makes lm_head's and the final norm's bf16 gradients; the root's post-backward, last, adds
  // the embedding's, copies all three into the fp32 reduce-scatter input and frees them, then
  // the input once its output is the sharded gradient.
  const model& m = models::llama_3_8b::value;
  const training t{m, mixed<bf16, bf16>::value, adamw<>::value, full_finetune::value,
                   parallel<fully_shard<8>>::value};
  const step_timeline tl = step_timeline_of(t, activation_options{.sequence = 4096});
  const std::int64_t head = 128'256LL * 4096 + 4096, root = 2 * 128'256LL * 4096 + 4096;
  auto root_events = [](const step_timeline& timeline) {
    std::vector<std::int64_t> deltas;
    for (const timeline_event& e : timeline.events) {
      if (std::string_view(timeline.ledger[static_cast<std::size_t>(e.entry)].name) !=
          "FSDP root gradients (unsharded, to its post-backward)")
        continue;
      CHECK(e.phase == step_phase::backward);
      deltas.push_back(e.delta.count);
    }
    return deltas;
  };
  // The head's backward; the embedding's at the post-backward; the fp32 reduce-scatter input;
  // the unsharded ones, copied in; the input, once reduced.
  const std::vector<std::int64_t> fsdp2{2 * head, 2 * (root - head), 4 * root, -2 * root,
                                        -4 * root};
  CHECK(root_events(tl) == fsdp2);
  // FSDP1 under amp: the same bytes in its own way. The head's bf16 gradients wait in autograd's
  // split of the root's flat parameter until the embedding's backward
  // (tests/validation/fsdp1_root_gradient.py traces it), the flat gradient is cast to fp32.
  CHECK(root_events(step_timeline_of(training{m, amp<bf16>::value, adamw<>::value,
                                              full_finetune::value, parallel<fsdp<8>>::value},
                                     activation_options{.sequence = 4096})) == fsdp2);
  // In bf16 throughout, FSDP1's second copy is the flat gradient its split's backward
  // concatenates from the views' gradients.
  CHECK(root_events(step_timeline_of(training{m, pure<bf16>::value, adamw<>::value,
                                              full_finetune::value, parallel<fsdp<8>>::value},
                                     activation_options{.sequence = 4096})) ==
        std::vector<std::int64_t>{2 * head, 2 * (root - head), 2 * root, -2 * root, -2 * root});
  // A tied head's weight is the embedding (Qwen2.5-0.5B: 151,936 x 896, and the final norm):
  // all of the root's unsharded gradients come with the head's backward.
  const training tied{models::qwen2_5_0_5b::value, mixed<bf16, bf16>::value, adamw<>::value,
                      full_finetune::value, parallel<fully_shard<8>>::value};
  int head_events = 0;
  for (const timeline_event& e : step_timeline_of(tied, activation_options{}).events) {
    if (std::string_view(e.what) != "FSDP root gradients (the head's, unsharded)") continue;
    ++head_events;
    CHECK(e.delta == bytes{2 * (151'936LL * 896 + 896)});
  }
  CHECK(head_events == 1);
}

TEST_CASE("FSDP2 reshard_after_forward: False keeps every unit gathered, an int a share of it") {
  const model& m = models::llama_3_8b::value;
  const std::int64_t p = 8'030'261'248;
  const std::int64_t root = 2 * 128'256LL * 4096 + 4096;
  auto states = [&](const layout& l) {
    return model_states(
        training{m, mixed<bf16, bf16>::value, adamw<>::value, full_finetune::value, l});
  };
  // False: all of the model's bf16 parameters from forward to backward; the units are not
  // gathered again, so only their gradient buffers remain.
  const memory_ledger kept = states(parallel<fully_shard<8, 1>>::value);
  CHECK(entry(kept, "parameters kept gathered after forward (reshard_after_forward)") ==
        bytes{2 * p});
  CHECK(entry(kept, "gathered FSDP units (root + current and prefetched layers)") == bytes{0});
  CHECK(entry(kept, "FSDP root gradients (unsharded, to its post-backward)") ==
        bytes{(2 + 4) * root});
  // 4 of the 8 ranks: each keeps a quarter, and gathers units from it again.
  const memory_ledger quarter = states(parallel<fully_shard<8, 4>>::value);
  CHECK(entry(quarter, "parameters kept gathered after forward (reshard_after_forward)") ==
        bytes{2 * p / 4});
  CHECK(entry(quarter, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{2 * root + 2 * 2 * 218'112'000});
  // The rules: FSDP2 full sharding only, and a rank count dividing the shard ranks.
  CHECK(check_layout(parallel<fsdp<8>>::value, m).rule == layout_rule::none);
  layout v1 = parallel<fsdp<8>>::value;
  v1.reshard_after_forward = 4;
  CHECK(check_layout(v1, m).rule == layout_rule::reshard_after_forward_needs_fsdp2_full_shard);
  layout three = parallel<fully_shard<8>>::value;
  three.reshard_after_forward = 3;
  CHECK(check_layout(three, m).rule ==
        layout_rule::reshard_after_forward_must_divide_the_shard_ranks);
  layout version = parallel<fsdp<8>>::value;
  version.fsdp_version = 3;
  CHECK_THROWS_WITH_AS(validated(version, m),
                       doctest::Contains("the FSDP version must be 1 (FullyShardedDataParallel) "
                                         "or 2 (fully_shard), got 3"),
                       error);
}

TEST_CASE("FSDP1's prefetch and rate limiter: units gathered, frees deferred by record_stream") {
  // Llama-3-8B under amp, FSDP1 over 8 ranks: a layer unit gathers 218,112,000 bf16 elements and
  // autograd's flat gradient, the one freed with record_stream, is bf16 (as in the first test).
  const model& m = models::llama_3_8b::value;
  const std::int64_t layer = 218'112'000;
  auto run = [&](layout l) {
    return step_timeline_of(training{m, amp<bf16>::value, adamw<>::value, full_finetune::value, l},
                            activation_options{.micro_batch = 1, .sequence = 2048});
  };
  const std::int64_t root = 2 * 128'256LL * 4096 + 4096;
  // BACKWARD_PRE (the default) gathers the next unit before the current one's gradients; with
  // BACKWARD_POST and no forward prefetch one unit is gathered at a time (_prefetch_handle).
  layout post = parallel<fsdp<8>>::value;
  post.fsdp_backward_prefetch = fsdp_backward_prefetch::post;
  CHECK(entry(run(post).ledger, "gathered FSDP units (root + current layer)") ==
        bytes{2 * root + 2 * layer});
  post.fsdp_forward_prefetch = true;
  CHECK(entry(run(post).ledger, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{2 * root + 2 * 2 * layer});
  // The rate limiter waits for the free two units back: one unit's all-gather and one unit's
  // gradient are freed but not yet passed. Without it, all 2 x 32 all-gathers of the step but
  // the two gathered, and all 32 gradients but the one allocated.
  const layout limited = parallel<fsdp<8>>::value;
  CHECK(run(limited).deferred.gathered.each == bytes{2 * layer});
  CHECK(run(limited).deferred.gathered.count == 1);
  CHECK(run(limited).deferred.gradients.each == bytes{2 * layer});
  CHECK(run(limited).deferred.gradients.count == 1);
  layout unlimited = limited;
  unlimited.fsdp_limit_all_gathers = false;
  CHECK(run(unlimited).deferred.gathered.count == 62);
  CHECK(run(unlimited).deferred.gradients.count == 31);
  // FSDP2 frees without record_stream; one rank gathers nothing.
  CHECK(run(parallel<fully_shard<8>>::value).deferred.gathered.count == 0);
  CHECK(run(parallel<fsdp<1>>::value).deferred.gradients.count == 0);
  // The options are FSDP1's.
  layout v2 = parallel<fully_shard<8>>::value;
  v2.fsdp_limit_all_gathers = false;
  CHECK_THROWS_WITH_AS(validated(v2, m),
                       doctest::Contains("limit_all_gathers are options of FSDP1"), vramfit::error);
  layout deepspeed = parallel<zero<3, 8>>::value;
  deepspeed.fsdp_backward_prefetch = fsdp_backward_prefetch::none;
  CHECK(check_layout(deepspeed, m).rule == layout_rule::fsdp1_gathering_options_need_fsdp1);
}

TEST_CASE("an FSDP unit gathers frozen weights as stored and has gradients for trained ones") {
  // LoRA r = 16 on q_proj and v_proj of Llama-3-8B, bf16 base, FSDP over 8 ranks: the root unit
  // (embedding, final norm, head: 1,050,677,248 frozen bf16 elements) has no gradient; a layer
  // gathers its 218,112,000 frozen bf16 elements and its adapters (16 x (4096 + 4096) for q_proj,
  // 16 x (4096 + 1024) for v_proj) in the bf16 compute format, twice (current and prefetched);
  // the layer's adapters have the only (bf16) gradients, the views' and the flat one FSDP1's
  // split backward concatenates from them.
  const model& m = models::llama_3_8b::value;
  const std::int64_t root = 2 * 128'256LL * 4096 + 4096;
  training t{m, pure<bf16>::value, adamw<>::value, full_finetune::value, parallel<fsdp<8>>::value};
  t.finetune = lora_finetuning(16, "q_proj,v_proj");
  const std::int64_t adapters = 16 * (4096 + 4096) + 16 * (4096 + 1024);
  const memory_ledger l = model_states(t);
  CHECK(entry(l, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{2 * root + 2 * (2 * 218'112'000 + 2 * adapters)});
  CHECK(entry(l, "FSDP layer gradients (unsharded, and their reduce-scatter copy)") ==
        bytes{(2 + 2) * adapters});
  CHECK(entry(l, "FSDP root gradients (unsharded, to its post-backward)") == bytes{0});
}

TEST_CASE("hybrid FSDP shards within a group and replicates across groups") {
  // 16 ranks in groups of 8: the states are sharded 8 ways, as full sharding over 8 would be.
  const model& m = models::llama_3_8b::value;
  const auto states = [&](const layout& l) {
    return total(
        model_states(training{m, amp<bf16>::value, adamw<>::value, full_finetune::value, l}),
        component::optimizer_states);
  };
  CHECK(states(parallel<fsdp<16, fsdp_strategy::hybrid_shard, 8>>::value) ==
        states(parallel<fsdp<8>>::value));
  CHECK(states(parallel<fsdp<16>>::value) < states(parallel<fsdp<8>>::value));
}

TEST_CASE("QLoRA under FSDP: the packed 4-bit payload sharded and gathered, QuantStates whole") {
  // Llama-2-70B, NF4 with double quantization, LoRA r=8 on all-linear, FSDP over 2 ranks, as
  // peft's run_peft_qlora_fsdp.sh. Per layer the quantized weights are q, o (8192 x 8192),
  // k, v (1024 x 8192), gate, up, down (28672 x 8192). A weight of n elements keeps
  // ceil(n/64) uint8 absmax + ceil(n/64/256) fp32 nested absmax + a 4-byte offset whole, and
  // two code tables: NF4's 16 fp32 values and the nested dynamic map's 256 (64 + 1,024 bytes):
  //   q: 67,108,864 -> 1,048,576 + 4,096 * 4 + 4 + 1,088 = 1,066,052
  //   k: 8,388,608 -> 131,072 + 512 * 4 + 4 + 1,088 = 134,212
  //   gate: 234,881,024 -> 3,670,016 + 14,336 * 4 + 4 + 1,088 = 3,728,452
  // per layer 2 * 1,066,052 + 2 * 134,212 + 3 * 3,728,452 = 13,585,884; 80 layers.
  const model& m = models::llama_2_70b::value;
  const training t{m, pure<bf16>::value, adamw<>::value, qlora<8, "all-linear">::value,
                   parallel<fsdp<2>>::value};
  const memory_ledger l = model_states(t);
  CHECK(entry(l, "bitsandbytes QuantStates (absmax), whole on every rank") ==
        bytes{80 * 13'585'884LL});
  // The frozen shard: the packed payload (n / 2 bytes: 855,638,016 / 2 per layer) and the bf16
  // embeddings, head and norms (2 * 32,000 * 8,192 * 2 + 161 norms * 8,192 * 2), halved.
  const std::int64_t payload = 80 * (855'638'016LL / 2);
  const std::int64_t bf16_frozen = 2 * 32'000LL * 8'192 * 2 + 161 * 8'192LL * 2;
  CHECK(entry(l, "weights (frozen)") == bytes{(payload + bf16_frozen) / 2});
  // Gathered: the root (embeddings, final norm, head in bf16) and two layers, each its payload,
  // its two bf16 norms and its 1,294,336 LoRA elements in bf16; no QuantState.
  const std::int64_t root = 2 * 32'000LL * 8'192 * 2 + 8'192 * 2;
  const std::int64_t layer = 855'638'016LL / 2 + 2 * 8'192 * 2 + 1'294'336LL * 2;
  CHECK(entry(l, "gathered FSDP units (root + current and prefetched layers)") ==
        bytes{root + 2 * layer});
  // CPU offload moves the flat parameters' shards to the host; the QuantStates stay.
  training off = t;
  off.layout.parameter_offload = offload_target::cpu;
  off.layout.optimizer_offload = offload_target::cpu;
  const memory_ledger h = model_states(off);
  CHECK(entry(h, "bitsandbytes QuantStates (absmax), whole on every rank") ==
        bytes{80 * 13'585'884LL});
  CHECK(entry(h, "weights (frozen)") == bytes{(payload + bf16_frozen) / 2});
  CHECK(total(h, component::weights, memory_space::host) ==
        bytes{(payload + bf16_frozen) / 2} + entry(h, "weights (trained)"));
  CHECK(total(h, component::weights) ==
        bytes{80 * 13'585'884LL} + entry(h, "model buffers (states)"));
}
