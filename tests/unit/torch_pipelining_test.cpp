// Unit tier: what torch.distributed.pipelining keeps beside the micro-batches' activations
// (pipeline_runtime), and FSDP2's gradients under it (fsdp.hpp), derived by hand.
#include <doctest/doctest.h>

#include <vramfit/presets.hpp>
#include <vramfit/timeline.hpp>

#include "model_state_checks.hpp"

using namespace vramfit;
using namespace model_state_checks;

namespace {

// Llama-3-8B in bf16 over 4 stages of 8 layers, TP 2 with sequence parallelism, micro-batches of
// 2 x 1,024 tokens, 8 of them per step.
constexpr std::int64_t b = 2, s = 1024, h = 4096, vocab = 128'256, tp = 2, mb = 8;
// A stage's input or output: [b, s / TP, h] in bf16.
constexpr std::int64_t boundary = b * s / tp * h * 2;
// The last stage's output: the logits, vocabulary-parallel, in bf16.
constexpr std::int64_t logits = b * s * (vocab / tp) * 2;

memory_ledger stage(std::int64_t rank, pipeline_runtime runtime,
                    pipeline_schedule schedule = pipeline_schedule::one_f_one_b,
                    std::int64_t chunks = 1) {
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value,
                   full_finetune::value,
                   parallel<pipeline_parallel<4>, tensor_parallel<tp, true>>::value};
  const activation_options o{.micro_batch = b,
                             .sequence = s,
                             .micro_batches = mb,
                             .schedule = schedule,
                             .virtual_stages = chunks,
                             .runtime = runtime};
  return activations(t, o, rank);
}

constexpr const char* receive_buffers =
    "pipeline receive buffers (inputs, output gradients: one per micro-batch)";
constexpr const char* held_outputs = "pipeline stage outputs (held for their backward)";
constexpr const char* kept_outputs =
    "pipeline stage outputs (every micro-batch's, to the next step)";
constexpr const char* input_gradients =
    "pipeline input gradients (in the receive buffers, to the next step)";

}  // namespace

TEST_CASE("Megatron's schedules keep nothing beside the micro-batches' activations") {
  for (std::int64_t rank : {0, 1, 3}) {
    const memory_ledger l = stage(rank, pipeline_runtime::megatron);
    CHECK(entry(l, receive_buffers) == bytes{});
    CHECK(entry(l, held_outputs) == bytes{});
  }
}

TEST_CASE("torch pipelining: a receive buffer per micro-batch, outputs held while in flight") {
  // 1F1B holds min(4 - r, 8) micro-batches on rank r. The first stage receives no input but each
  // output's gradient (8 buffers), a middle one both (16), the last only inputs (8).
  const memory_ledger first = stage(0, pipeline_runtime::torch);
  CHECK(entry(first, receive_buffers) == bytes{8 * boundary});
  CHECK(entry(first, held_outputs) == bytes{4 * boundary});
  CHECK(entry(first, input_gradients) == bytes{});
  const memory_ledger middle = stage(1, pipeline_runtime::torch);
  CHECK(entry(middle, receive_buffers) == bytes{16 * boundary});
  CHECK(entry(middle, held_outputs) == bytes{3 * boundary});
  // The last stage's output is its logits, one micro-batch's in flight.
  const memory_ledger last = stage(3, pipeline_runtime::torch);
  CHECK(entry(last, receive_buffers) == bytes{8 * boundary});
  CHECK(entry(last, held_outputs) == bytes{logits});
}

TEST_CASE("torch 2.6 keeps every micro-batch's output and input gradient to the next step") {
  const memory_ledger first = stage(0, pipeline_runtime::torch_2_6);
  CHECK(entry(first, kept_outputs) == bytes{mb * boundary});
  CHECK(entry(first, held_outputs) == bytes{});
  CHECK(entry(first, input_gradients) == bytes{});
  const memory_ledger last = stage(3, pipeline_runtime::torch_2_6);
  CHECK(entry(last, kept_outputs) == bytes{mb * logits});
  CHECK(entry(last, input_gradients) == bytes{mb * boundary});
  // torch 2.8 keeps the last stage's outputs only.
  const memory_ledger middle = stage(1, pipeline_runtime::torch_2_8);
  CHECK(entry(middle, held_outputs) == bytes{3 * boundary});
  CHECK(entry(middle, input_gradients) == bytes{mb * boundary});
  CHECK(entry(stage(3, pipeline_runtime::torch_2_8), kept_outputs) == bytes{mb * logits});
}

TEST_CASE("torch pipelining, interleaved: each chunk its buffers, the last chunk its logits") {
  // Two chunks on each of 4 ranks: the last rank holds min(4 x 1 + 2 x 1 - 1, 16) = 5
  // (micro-batch, chunk) pairs, one of them the last chunk's (its logits). Its first chunk
  // receives and sends, its last only receives: 3 buffers per micro-batch.
  const memory_ledger last = stage(3, pipeline_runtime::torch, pipeline_schedule::interleaved, 2);
  CHECK(entry(last, receive_buffers) == bytes{3 * mb * boundary});
  CHECK(entry(last, held_outputs) == bytes{4 * boundary + logits});
}

TEST_CASE("FSDP2 under pipelining adds the stage's unsharded gradients up in fp32") {
  // Llama-3-8B, fully_shard over 2 ranks with an fp32 master, 4 stages: stage 1 holds 8 layers
  // of 218,112,000 elements and nothing outside them. Every micro-batch's backward runs with
  // gradient sync off; the unsharded gradients are kept in the reduce dtype (fp32) until the
  // last one's reduction.
  const training t{models::llama_3_8b::value, mixed<bf16, bf16>::value, adamw<>::value,
                   full_finetune::value, parallel<fully_shard<2, 1>, pipeline_parallel<4>>::value};
  const activation_options o{.micro_batch = 1, .sequence = 1024, .micro_batches = 4};
  const step_timeline tl = step_timeline_of(t, o, 1);
  const bytes sum{4 * 8 * 218'112'000LL};
  CHECK(entry(tl.ledger, "unsharded gradients added up over the micro-batches") == sum);
  // Made with the first micro-batch's backward, gone with the last one's.
  bytes made{}, freed{};
  int first = -1, last = -1;
  for (std::size_t i = 0; i < tl.events.size(); ++i) {
    const timeline_event& e = tl.events[i];
    if (tl.ledger[static_cast<std::size_t>(e.entry)].role != entry_role::accumulated_gradients)
      continue;
    (e.delta > bytes{} ? made : freed) += e.delta;
    if (first < 0) first = static_cast<int>(i);
    last = static_cast<int>(i);
  }
  CHECK(made == sum);
  CHECK(freed == -sum);
  CHECK(tl.events[static_cast<std::size_t>(first)].micro_batch == 0);
  CHECK(tl.events[static_cast<std::size_t>(first)].phase == step_phase::backward);
  CHECK(tl.events[static_cast<std::size_t>(last)].micro_batch == 1);
  // Without a pipeline each micro-batch reduces its own.
  const training flat{models::llama_3_8b::value, mixed<bf16, bf16>::value, adamw<>::value,
                      full_finetune::value, parallel<fully_shard<2>>::value};
  CHECK(entry(model_states(flat), "unsharded gradients added up over the micro-batches") ==
        bytes{});
}
