// Reserved memory: the step timeline replayed tensor by tensor through the simulated caching
// allocator (reserved_memory.hpp), and what the estimates and the planner make of it.
#include <doctest/doctest.h>

#include <algorithm>

#include <vramfit/vramfit.hpp>

#include "candidate_plan.hpp"
#include "tiny_llama.hpp"

using namespace vramfit;

namespace {
struct named_case {
  const char* name;
  training t;
  activation_options o;
  std::int64_t stage = 0;
};

std::vector<named_case> cases() {
  const model& llama = models::llama_3_8b::value;
  const training sharded{llama, mixed<bf16>::value, adamw<>::value, full_finetune::value,
                         parallel<fsdp<8>>::value};
  training zero3{llama, mixed<bf16>::value, adamw<>::value};
  zero3.layout = {
      .data = 8, .zero = sharding::zero3, .implementation = shard_implementation::deepspeed};
  training pipeline{llama, mixed<bf16>::value, adamw<>::value};
  pipeline.layout = {.tensor = 2, .sequence = true, .pipeline = 4};
  training lora{llama, pure<bf16>::value, adamw<>::value, lora_finetuning(16, "q_proj,v_proj")};
  training in_backward{llama, pure<bf16>::value,
                       adamw_8bit<optimizer_options{.paged = true, .in_backward = true}>::value};
  training kept{models::gpt2::value, amp<fp16>::value, adamw<>::value};
  kept.optimizer.options.set_to_none = false;
  return {
      {"GPT-2, AMP, eager",
       {models::gpt2::value, amp<fp16>::value, adamw<>::value},
       {.micro_batch = 4, .sequence = 1024, .attention = attention_kind::eager}},
      {"Llama-3-8B, FSDP x 8, full recompute",
       sharded,
       {.micro_batch = 2, .sequence = 4096, .recompute = recompute_kind::full}},
      {"Llama-3-8B, ZeRO-3, selective recompute, 4 micro-batches",
       zero3,
       {.micro_batch = 1,
        .sequence = 4096,
        .micro_batches = 4,
        .recompute = recompute_kind::selective}},
      {"Llama-3-8B, TP 2 + SP, 4 stages, the second",
       pipeline,
       {.micro_batch = 1, .sequence = 4096, .micro_batches = 8},
       1},
      {"Llama-3-8B, LoRA", lora, {.micro_batch = 2, .sequence = 2048}},
      {"GPT-2, AMP, gradients kept by zero_grad(set_to_none=False), 2 micro-batches",
       kept,
       {.micro_batch = 4, .sequence = 1024, .micro_batches = 2}},
      {"Llama-3-8B, 8-bit AdamW in backward",
       in_backward,
       {.micro_batch = 1, .sequence = 2048, .recompute = recompute_kind::full}},
      {"Mixtral-8x7B, EP 8",
       {models::mixtral_8x7b::value, mixed<bf16>::value, adamw<>::value, full_finetune::value,
        parallel<fsdp<8>, expert_parallel<8>>::value},
       {.micro_batch = 1, .sequence = 2048, .recompute = recompute_kind::full}},
      {"Qwen3-30B-A3B, torchtitan's code (stacked experts), EP 8",
       {models::qwen3_30b_a3b::value, mixed<bf16>::value, adamw<>::value, full_finetune::value,
        parallel<fsdp<8>, expert_parallel<8>>::value},
       {.micro_batch = 1, .sequence = 2048, .code = model_code::torchtitan}},
  };
}
}  // namespace

TEST_CASE("mul_div: a share of a byte count without the product overflowing") {
  CHECK(detail::mul_div(7, 5, 3) == 11);
  // (10^18 + 3)(10^9 + 9) / (4 x 10^12 + 11), floor, computed exactly in Python.
  CHECK(detail::mul_div(1'000'000'000'000'000'003, 1'000'000'009, 4'000'000'000'011) ==
        250'000'002'249'312);
  CHECK_THROWS_AS(detail::mul_div(std::int64_t{1} << 62, 4, 1), overflow_error);
}

TEST_CASE("each layer event's tensors add up to its bytes") {
  for (const named_case& c : cases()) {
    CAPTURE(c.name);
    const step_timeline tl = step_timeline_of(c.t, c.o, c.stage);
    const tensor_ledger tensors = vramfit::tensors(c.t.model);
    for (const timeline_event& e : tl.events) {
      if (!e.pieces || e.first_layer < 0) continue;
      std::vector<layer_piece> pieces;
      bool full = false;
      for (const timeline_run& r : tl.runs)
        if (r.first == e.first_layer) full = r.full;
      detail::for_each_layer_tensor(c.t, c.o, tensors, e.first_layer, tl.layers.experts_per_rank,
                                    tl.layers.shards, tl.layers.sharded_grads, full,
                                    [&](const layer_piece& x) { pieces.push_back(x); });
      bytes sum{};
      for (bytes size : detail::sizes_of(pieces, *e.pieces)) sum += size;
      CAPTURE(e.what);
      CHECK(sum == (e.delta > bytes{} ? e.delta : -e.delta));
    }
  }
}

TEST_CASE("reserved covers allocated, which covers the timeline's peak") {
  for (const named_case& c : cases()) {
    CAPTURE(c.name);
    const reserved_memory_estimate r = reserved_memory(c.t, c.o, {}, c.stage);
    const step_timeline tl = step_timeline_of(c.t, c.o, c.stage);
    CHECK(r.allocated >= tl.peak.alive);
    // Rounding to 512 B adds less than 512 B a tensor; no step holds a million tensors.
    CHECK(r.allocated - tl.peak.alive < bytes{512 * 1'000'000});
    CHECK(r.reserved >= r.allocated);
    CHECK(r.reserved >= r.first_step_reserved);
    CHECK(r.largest_free_at_peak <= r.reserved - r.allocated);
    CHECK(r.stable_step >= 1);
    CHECK(r.stable_step <= reserved_steps_simulated);
    // Expandable segments only grow their mappings by pages at the end: never more segments.
    const reserved_memory_estimate x =
        reserved_memory(c.t, c.o, parse_alloc_conf("expandable_segments:True"), c.stage);
    CHECK(x.allocated >= tl.peak.alive);
    CHECK(x.reserved >= x.allocated);
  }
}

TEST_CASE("tiny Llama: every tensor rounds to one 512-byte block of one 2 MiB small segment") {
  // Hidden 8, sequence 4: no tensor reaches 512 B, so each request is one block; blocks of one
  // size never fragment, so one small segment holds them all while fewer than 4096 are alive.
  const training t{testing::tiny_llama, mixed<bf16>::value, adamw<>::value};
  const activation_options o{.micro_batch = 1, .sequence = 4};
  const reserved_memory_estimate r = reserved_memory(t, o);
  CHECK(r.reserved == bytes{2 << 20});
  CHECK(r.allocated.count % 512 == 0);
  CHECK(r.allocated >= step_timeline_of(t, o).peak.alive);
  CHECK(r.stable_step == 1);
  // And in a constant expression.
  static_assert(reserved_memory(training{testing::tiny_llama, mixed<bf16>::value, adamw<>::value},
                                activation_options{.micro_batch = 1, .sequence = 4})
                    .reserved == bytes{2 << 20});
}

TEST_CASE("FSDP's side streams: each stream's requests take segments of their own") {
  // Tiny Llama's tensors are all under 512 B: on one stream they share one 2 MiB small segment.
  // A stream's pool holds only blocks its own requests made (get_free_block), so the first
  // request of each side stream takes a 2 MiB small segment more (get_allocation_size:
  // kSmallBuffer), and none later: the streams' blocks go back to their own pools.
  auto fsdp = [](std::int64_t ranks, std::int64_t api) {
    training t{testing::tiny_llama, mixed<bf16>::value, adamw<>::value};
    t.layout = {.data = ranks,
                .zero = sharding::zero3,
                .implementation = shard_implementation::fsdp,
                .fsdp_version = api};
    return t;
  };
  const activation_options o{.micro_batch = 1, .sequence = 4};
  auto streams_of = [&](const training& t) {
    bool used[3]{};
    for (const timeline_event& e : step_timeline_of(t, o).events)
      if (e.delta > bytes{}) used[static_cast<int>(e.stream)] = true;
    return std::vector<bool>{used[0], used[1], used[2]};
  };
  // One rank, FSDP2: the sharded gradients are foreach_reduce's output, made on the
  // reduce-scatter stream; nothing is all-gathered (FSDPParamGroup.unshard, world_size == 1).
  CHECK(streams_of(fsdp(1, 2)) == std::vector<bool>{true, true, false});
  CHECK(reserved_memory(fsdp(1, 2), o).reserved == bytes{4 << 20});
  // One rank, FSDP1: NO_SHARD, all on the default stream.
  CHECK(streams_of(fsdp(1, 1)) == std::vector<bool>{true, false, false});
  CHECK(reserved_memory(fsdp(1, 1), o).reserved == bytes{2 << 20});
  // Two ranks: the gathered parameters come from the all-gather (FSDP1: unshard) stream too.
  for (std::int64_t api : {1, 2}) {
    CAPTURE(api);
    CHECK(streams_of(fsdp(2, api)) == std::vector<bool>{true, true, true});
    CHECK(reserved_memory(fsdp(2, api), o).reserved == bytes{6 << 20});
  }
}

TEST_CASE(
    "FSDP's gathered parameters: the all-gathered unit on its stream, the rest on the default") {
  // Llama-3-8B, FSDP2 over 8 ranks: the largest unit is the root (embedding and head, 2 x
  // 128,256 x 4,096, and the final norm, 4,096, in bf16: 2,101,354,496 B). Its all-gather
  // output is one allocation of the all-gather stream, the rest of the buffer (the unsharded
  // parameters copied out of it, the unit's gradients) the default stream's; both go at the
  // optimizer step.
  training t{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value, full_finetune::value,
             parallel<fsdp<8>>::value};
  t.layout.fsdp_version = 2;
  const step_timeline tl = step_timeline_of(t, {.micro_batch = 1, .sequence = 1024});
  const int gathered = entry_with(tl.ledger, entry_role::gathered_parameters);
  REQUIRE(gathered >= 0);
  bytes side{}, main{}, freed{};
  for (const timeline_event& e : tl.events) {
    if (e.entry != gathered) continue;
    if (e.delta < bytes{})
      freed -= e.delta;
    else
      (e.stream == alloc_stream::all_gather ? side : main) += e.delta;
  }
  CHECK(side == bytes{(2 * 128'256 * 4'096 + 4'096) * 2});
  CHECK(side + main == tl.ledger[static_cast<std::size_t>(gathered)].size);
  CHECK(freed == side + main);
}

TEST_CASE("Adam's states, created in the first step, move later steps' activations") {
  // torch.optim creates exp_avg and exp_avg_sq in the first step(), from the cache the freed
  // activations left: the second step's forward finds their blocks taken and reserves more.
  const training adam{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value};
  const activation_options o{.micro_batch = 1, .sequence = 2048};
  const reserved_memory_estimate r = reserved_memory(adam, o);
  CHECK(r.stable_step == 2);
  CHECK(r.reserved > r.first_step_reserved);
  // Plain SGD has no state: the second step repeats the first on a cache holding all it needs.
  const training sgd_plain{models::llama_3_8b::value, mixed<bf16>::value, sgd<>::value};
  const reserved_memory_estimate s = reserved_memory(sgd_plain, o);
  CHECK(s.stable_step == 1);
  CHECK(s.reserved == s.first_step_reserved);
}

TEST_CASE("gradients kept between steps: the first step's backward makes them, and they stay") {
  // zero_grad(set_to_none=False): plain SGD's first step ends with the gradients its backward
  // made, so the second starts with them and its activations find their blocks taken; with
  // set_to_none=True the second step repeats the first (the test above).
  training sgd_kept{models::llama_3_8b::value, mixed<bf16>::value, sgd<>::value};
  sgd_kept.optimizer.options.set_to_none = false;
  const activation_options o{.micro_batch = 1, .sequence = 2048};
  const reserved_memory_estimate r = reserved_memory(sgd_kept, o);
  CHECK(r.stable_step == 2);
  CHECK(r.reserved > r.first_step_reserved);
  // The steady step holds them throughout: its allocated peak is the timeline's, each tensor
  // rounded up by less than 512 B (its 291 parameters' weights, master copies and gradients,
  // and 32 layers' activations: fewer than 10,000 tensors).
  const step_timeline tl = step_timeline_of(sgd_kept, o);
  CHECK(r.allocated >= tl.peak.alive);
  CHECK(r.allocated - tl.peak.alive < bytes{512 * 10'000});
}

TEST_CASE("estimates take the simulated reserve, the planner confirms with it") {
  const training t{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value,
                   full_finetune::value, parallel<fsdp<8>>::value};
  const activation_options o{.micro_batch = 2, .sequence = 4096};
  training_plan_value simulated{t, o, {.reserve = reserve_model::simulated}};
  const timed_ledger l = breakdown(simulated, gpus::h100_80gb::value);
  const timed_ledger tensors_only = most_loaded_rank(simulated).state;
  const reserved_memory_estimate r = reserved_memory(t, o);
  const int simulated_reserve = entry_with(l.entries, entry_role::allocator_reserve);
  REQUIRE(simulated_reserve >= 0);
  const memory_entry& reserve = l.entries[static_cast<std::size_t>(simulated_reserve)];
  CHECK(std::string_view(reserve.name) == "caching allocator: reserved beyond allocated");
  // The blocks' rounding is allocated, the rest of the replay's reserved memory is not.
  CHECK(r.allocated >= peak(tensors_only));
  CHECK(reserve.size == r.reserved - r.allocated);
  // Context, cuBLAS, NCCL's FSDP communicator of 8 H100s in a node (nccl_memory_test.cpp: a
  // 24-channel ring of 12 MiB each, 32 x 6 MiB of channel structures, 258 MiB of NVLS).
  CHECK(peak(l) == r.reserved + 768 * MiB + 32 * MiB + (288 + 192 + 258) * MiB);
  // Each metric counts the replay's own peak: max_memory_reserved, max_memory_allocated.
  const gpu& h100 = gpus::h100_80gb::value;
  CHECK(fit(l, h100, memory_metric::nvidia_smi).required == peak(l));
  CHECK(fit(l, h100, memory_metric::reserved).required == r.reserved);
  CHECK(fit(l, h100, memory_metric::allocated).required == r.allocated);
  training_plan_value by_allocated = simulated;
  by_allocated.overheads.metric = memory_metric::allocated;
  CHECK(fit(by_allocated, h100).required == r.allocated);
  CHECK(max_micro_batch(by_allocated, h100) >= max_micro_batch(simulated, h100));
  // A fixed share given takes the fallback.
  simulated.overheads.fragmentation_percent = 5;
  const memory_ledger shared = breakdown(simulated, gpus::h100_80gb::value).entries;
  const int share = entry_with(shared, entry_role::allocator_reserve);
  REQUIRE(share >= 0);
  CHECK(std::string_view(shared[static_cast<std::size_t>(share)].name) ==
        "allocator fragmentation reserve");
  // The planner's kept candidates fit with the simulated reserve.
  training_plan_value base{{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value},
                           {.sequence = 4096},
                           {.reserve = reserve_model::simulated}};
  const search_result found = search_layouts(base, gpus::h100_80gb::value, {.gpus = 8, .top = 3});
  REQUIRE(found.found());
  for (const plan_candidate& c : found.best) {
    CHECK(fit(testing::trained_as(base, c), gpus::h100_80gb::value).required == c.required);
    CHECK(c.required <= gpus::h100_80gb::value.capacity);
  }
}

TEST_CASE("a stage deeper than the replay takes takes the fixed share") {
  model deep = models::gpt2::value;
  deep.layers = max_replayed_layers + 1;
  const training t{deep, mixed<bf16>::value, sgd<>::value};
  const activation_options o{.micro_batch = 1, .sequence = 8};
  CHECK_THROWS_WITH(reserved_memory(t, o),
                    doctest::Contains("simulated for stages of at most 1024 layers, got 1025"));
  const training_plan_value p{t, o, {.reserve = reserve_model::simulated}};
  CHECK_FALSE(simulated_reserve(p, most_loaded_step(p)).has_value());
  const memory_ledger l = breakdown(p, gpus::h100_80gb::value).entries;
  const int share = entry_with(l, entry_role::allocator_reserve);
  REQUIRE(share >= 0);
  CHECK(std::string_view(l[static_cast<std::size_t>(share)].name) ==
        "allocator fragmentation reserve");
}

TEST_CASE("the loss's tensors as the allocator sees them") {
  // transformers ForCausalLMLoss under bf16: the logits [2048, 128256] in bf16 (first), their
  // fp32 copy; its backward the nll_loss and log_softmax gradients, fp32 each.
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  const memory_ledger l = step_timeline_of(t, {.micro_batch = 1, .sequence = 2048}).ledger;
  const std::int64_t logits = 2048 * 128256;
  const memory_entry& forward = l[static_cast<std::size_t>(entry_with(l, entry_role::logits))];
  CHECK(forward.tensors == 2);
  CHECK(forward.first_tensor == bytes{logits * 2});
  CHECK(forward.size == bytes{logits * 6});
  const memory_entry& backward = *std::find_if(l.begin(), l.end(), [](const memory_entry& e) {
    return std::string_view(e.name) == "logits gradient";
  });
  CHECK(backward.tensors == 2);
  CHECK(backward.size == bytes{logits * 8});
}

namespace {
/// Every statistic the replay reports, equal to the byte.
void check_same(const reserved_memory_estimate& fast, const reserved_memory_estimate& full) {
  CHECK(fast.reserved == full.reserved);
  CHECK(fast.allocated == full.allocated);
  CHECK(fast.largest_free_at_peak == full.largest_free_at_peak);
  CHECK(fast.first_step_reserved == full.first_step_reserved);
  CHECK(fast.stable_step == full.stable_step);
  CHECK(fast.out_of_memory == full.out_of_memory);
  for (const auto& [a, b] : {std::pair{fast.large_at_peak, full.large_at_peak},
                             std::pair{fast.small_at_peak, full.small_at_peak}}) {
    CHECK(a.allocated == b.allocated);
    CHECK(a.reserved == b.reserved);
    CHECK(a.segments == b.segments);
  }
}

/// The layouts the comparison crosses with the models: one GPU, FSDP, DeepSpeed ZeRO-1 and 3.
std::vector<layout> compared_layouts() {
  return {{},
          parallel<fsdp<8>>::value,
          {.data = 4, .zero = sharding::zero1, .implementation = shard_implementation::deepspeed},
          {.data = 8, .zero = sharding::zero3, .implementation = shard_implementation::deepspeed}};
}
}  // namespace

TEST_CASE("the replay that skips proven repeats equals the full replay, byte for byte") {
  // What the fast path leaves out it proves would repeat (replay_mode): over presets, precision,
  // optimizers with and without state, recompute, micro-batches, sharding and layer counts, its
  // every statistic must equal the full replay's. (Most of these leave out a step: 113 of 160
  // when this was written.)
  const model compared_models[] = {models::gpt2::value, models::llama_3_8b::value,
                                   models::qwen2_5_0_5b::value, models::mixtral_8x7b::value};
  const precision precisions[] = {mixed<bf16>::value, pure<bf16>::value, amp<fp16>::value};
  const optimizer optimizers[] = {adamw<>::value, sgd<>::value};
  const recompute_kind recomputes[] = {recompute_kind::none, recompute_kind::selective,
                                       recompute_kind::full};
  std::int64_t compared = 0;
  for (std::int64_t layers = 1; layers <= 40; ++layers) {
    for (std::size_t i = 0; i < 4; ++i) {
      // The axes turn at different periods of k, so that their values mix across the cases.
      const std::size_t k = static_cast<std::size_t>(layers) * 4 + i;
      model m = compared_models[i];
      m.layers = layers;
      training t{m, precisions[k % 3], optimizers[k / 3 % 2]};
      t.layout = compared_layouts()[k / 2 % 4];
      const activation_options o{.micro_batch = 1 + static_cast<std::int64_t>(k % 2),
                                 .sequence = 256 << (k % 4),
                                 .micro_batches = 1 + static_cast<std::int64_t>(k / 5 % 2),
                                 .recompute = recomputes[k / 7 % 3]};
      CAPTURE(m.name);
      CAPTURE(layers);
      CAPTURE(k);
      check_same(reserved_memory(t, o), reserved_memory(t, o, {}, 0, {}, replay_mode::full));
      ++compared;
    }
  }
  CHECK(compared == 160);
}

TEST_CASE("the fast replay equals the full one for deep stages and allocator options") {
  const alloc_conf confs[] = {{},
                              parse_alloc_conf("expandable_segments:True"),
                              parse_alloc_conf("max_split_size_mb:256"),
                              parse_alloc_conf("roundup_power2_divisions:4"),
                              parse_alloc_conf("garbage_collection_threshold:0.6")};
  for (const std::int64_t layers : {1, 2, 3, 97, 126, 300}) {
    for (const optimizer& opt : {adamw<>::value, sgd<>::value}) {
      model m = models::qwen2_5_0_5b::value;
      m.layers = layers;
      const training t{m, mixed<bf16>::value, opt};
      const activation_options o{.micro_batch = 2, .sequence = 1024};
      for (const alloc_conf& c : confs) {
        CAPTURE(layers);
        // Also under a memory fraction (garbage collection acts only there: the replay then
        // compares no states) and a device limit that the deep stages exceed (the refusals
        // count in the state compared).
        for (const allocator_limits limits :
             {allocator_limits{}, allocator_limits{.device = bytes{std::int64_t{24} << 30},
                                  .fraction_limit = bytes{std::int64_t{20} << 30}}})
          check_same(reserved_memory(t, o, c, 0, limits),
                     reserved_memory(t, o, c, 0, limits, replay_mode::full));
      }
    }
  }
}

TEST_CASE("replays in one scratch answer as replays in buffers of their own") {
  // A search passes one replay_scratch to every replay: what one replay leaves in it (blocks,
  // segments, held tensors, the state compared) must never reach the next. Unlike replays in
  // turn, larger and smaller, with and without steps left out, out of memory, expandable
  // segments and garbage collection, each equal to its replay in fresh buffers. A replay whose
  // persistent tensors are made as the one before's starts from a copy of that state: one at
  // another micro-batch may, one under other allocator settings or limits must not.
  struct replayed {
    training t;
    activation_options o;
    alloc_conf conf;
    allocator_limits limits;
    replay_mode mode;
  };
  const training llama{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value,
                       full_finetune::value, parallel<fsdp<8>>::value};
  const training sgd_plain{models::llama_3_8b::value, mixed<bf16>::value, sgd<>::value};
  training mixtral{models::mixtral_8x7b::value, mixed<bf16>::value, adamw<>::value};
  mixtral.model.layers = 3;
  mixtral.layout = {
      .data = 8, .zero = sharding::zero3, .implementation = shard_implementation::deepspeed};
  training qwen{models::qwen2_5_0_5b::value, mixed<bf16>::value, adamw<>::value};
  qwen.model.layers = 97;
  const activation_options one{.micro_batch = 1, .sequence = 2048};
  const activation_options two{.micro_batch = 2, .sequence = 1024};
  const allocator_limits tight{.device = bytes{std::int64_t{24} << 30},
                               .fraction_limit = bytes{std::int64_t{20} << 30}};
  const std::vector<replayed> replays = {
      {llama, one, {}, {}, replay_mode::skip_repeats},
      {sgd_plain, one, {}, {}, replay_mode::skip_repeats},
      {qwen, two, parse_alloc_conf("expandable_segments:True"), {}, replay_mode::skip_repeats},
      {mixtral, two, {}, {}, replay_mode::full},
      {qwen, two, parse_alloc_conf("garbage_collection_threshold:0.6"), tight,
       replay_mode::skip_repeats},
      {sgd_plain, two, {}, {}, replay_mode::skip_repeats},
      {qwen, two, parse_alloc_conf("max_split_size_mb:256"), tight, replay_mode::skip_repeats},
      {training{testing::tiny_llama, mixed<bf16>::value, adamw<>::value},
       {.micro_batch = 1, .sequence = 4},
       {},
       {},
       replay_mode::skip_repeats},
      {llama, two, {}, {}, replay_mode::full},
      {sgd_plain, one, {}, {}, replay_mode::skip_repeats},
      {sgd_plain, one, parse_alloc_conf("max_split_size_mb:256"), {}, replay_mode::skip_repeats},
      {sgd_plain, one, parse_alloc_conf("max_split_size_mb:256"), tight, replay_mode::full},
      {sgd_plain, two, parse_alloc_conf("max_split_size_mb:256"), tight, replay_mode::full},
  };
  for (const bool reversed : {false, true}) {
    replay_scratch scratch;
    for (std::size_t k = 0; k < replays.size(); ++k) {
      const replayed& r = replays[reversed ? replays.size() - 1 - k : k];
      CAPTURE(reversed);
      CAPTURE(k);
      const step_timeline tl = step_timeline_of(r.t, r.o);
      check_same(reserved_memory(r.t, r.o, tl, r.conf, 0, r.limits, r.mode, scratch),
                 reserved_memory(r.t, r.o, tl, r.conf, 0, r.limits, r.mode));
    }
  }
  // The planner's searches, which reuse one, and a fit through one: as without.
  training_plan_value p{llama, one, {.reserve = reserve_model::simulated}};
  replay_scratch scratch;
  for (const std::int64_t b : {4, 1, 2}) {
    p.batch.micro_batch = b;
    CHECK(fit(p, gpus::h100_80gb::value, scratch) == fit(p, gpus::h100_80gb::value));
  }
  // And in a constant expression: two replays in one scratch (one layer, plain SGD: within
  // clang's default constexpr steps).
  static_assert([] {
    model m = testing::tiny_llama;
    m.layers = 1;
    const training t{m, mixed<bf16>::value, sgd<>::value};
    const activation_options o{.micro_batch = 1, .sequence = 4};
    const step_timeline tl = step_timeline_of(t, o);
    replay_scratch s;
    const reserved_memory_estimate first =
        reserved_memory(t, o, tl, {}, 0, {}, replay_mode::full, s);
    const reserved_memory_estimate second =
        reserved_memory(t, o, tl, {}, 0, {}, replay_mode::skip_repeats, s);
    return first.reserved == bytes{2 << 20} && second.reserved == first.reserved &&
           second.allocated == first.allocated && second.stable_step == first.stable_step;
  }());
}

TEST_CASE("a later step that starts where the one before started is left out") {
  // Plain SGD keeps no state: the second step reserves nothing new and ends where it started,
  // so the third would repeat it; the fast path stops there, with the full replay's numbers.
  const training sgd_plain{models::llama_3_8b::value, mixed<bf16>::value, sgd<>::value};
  const activation_options o{.micro_batch = 1, .sequence = 2048};
  const reserved_memory_estimate fast = reserved_memory(sgd_plain, o);
  CHECK(fast.stable_step == 1);
  check_same(fast, reserved_memory(sgd_plain, o, {}, 0, {}, replay_mode::full));
}

TEST_CASE("torchtitan's stacked experts: one tensor per expert weight and layer") {
  // Qwen3-30B-A3B (48 layers, 128 experts of width 768, h 2048) over EP 8: 16 experts a rank.
  // Hugging Face's code registers each expert's gate_proj, up_proj and down_proj; torchtitan's
  // GroupedExperts one w1, w2 and w3 over the rank's experts (models/common/moe.py). Per layer
  // both hold q, k, v and o, the two QK norms, the two block norms and the router gate; the
  // embedding, the final norm and the head come once.
  const training t{models::qwen3_30b_a3b::value, pure<bf16>::value, adamw<>::value,
                   full_finetune::value, parallel<fsdp<8>, expert_parallel<8>>::value};
  const auto hf = replayed_parameters(t, model_code::hf);
  const auto titan = replayed_parameters(t, model_code::torchtitan);
  CHECK(hf.size() == 48 * (9 + 3 * 16) + 3);
  CHECK(titan.size() == 48 * (9 + 3) + 3);
  const auto elements = [](const std::vector<detail::replay_parameter>& held) {
    std::int64_t n = 0;
    for (const detail::replay_parameter& p : held) n += p.elements;
    return n;
  };
  CHECK(elements(hf) == elements(titan));
  CHECK(std::count_if(titan.begin(), titan.end(), [](const detail::replay_parameter& p) {
          return p.elements == 16 * 768 * 2048;
        }) == 48 * 3);
  // A layer's new gradients as the replay allocates them: one per weight.
  const auto gradients = [&](model_code code) {
    std::int64_t n = 0;
    detail::for_each_layer_tensor(t, {.code = code}, tensors(t.model), 0, 16, 8, false, false,
                                  [&](const layer_piece& x) {
                                    if (x.kind == layer_tensor::gradient) n += x.count;
                                  });
    return n;
  };
  CHECK(gradients(model_code::hf) == 9 + 3 * 16);
  CHECK(gradients(model_code::torchtitan) == 9 + 3);
}
