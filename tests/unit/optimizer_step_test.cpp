// Unit tier: the optimizer step's temporaries by implementation (optimizer.hpp step_scratch_of),
// derived by hand from torch/optim's statements, and the H100 measurements they must meet.
#include <doctest/doctest.h>

#include <string>

#include <vramfit/presets.hpp>
#include <vramfit/timeline.hpp>
#include <vramfit/training.hpp>

using namespace vramfit;

namespace {

std::int64_t temporaries(const training& t) {
  std::int64_t sum = 0;
  for (const memory_entry& e : model_states(t))
    if (e.lifetime == lifetime::optimizer_step) sum += e.size.count;
  return sum;
}

// Hidden 256, 3 layers, 4 heads of 64 with 2 KV heads, FFN 512, vocab 1024, untied, bf16. In the
// order the model registers them (what the optimizer's list holds), in bytes: embedding
// E = 1024 x 256 x 2 = 524,288; per layer q, o 131,072, k, v 65,536, gate, up 262,144, down
// 262,144, two norms 512; final norm 512; head E. Every size is a whole number of 512 B blocks.
constexpr model hand_model{.name = "hand",
                           .hidden = 256,
                           .layers = 3,
                           .heads = 4,
                           .kv_heads = 2,
                           .head_dim = 64,
                           .ffn = 512,
                           .vocab = 1024};
constexpr std::int64_t E = 524'288, q = 131'072, norm = 512;
constexpr std::int64_t N = 2 * E + 3 * (2 * q + 2 * 65'536 + 3 * 262'144 + 2 * norm) + norm;

std::int64_t step_of(const optimizer& o) {
  return temporaries(training{hand_model, pure<bf16>::value, o});
}

}  // namespace

TEST_CASE("the hand model's list is what the test says") {
  CHECK(parameters(tensors(hand_model)) * 2 == N);
  CHECK(N == 4'591'104);
}

TEST_CASE("foreach: lists as large as every updated tensor together") {
  // _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), one list.
  CHECK(step_of(adamw<>::value) == N);
  CHECK(step_of(adam<>::value) == N);
  CHECK(step_of(nadam<>::value) == N);    // _foreach_sqrt(exp_avg_sqs)
  CHECK(step_of(radam<>::value) == N);    // buffer = _foreach_sqrt(exp_avg_sqs)
  CHECK(step_of(rmsprop<>::value) == N);  // avg = _foreach_sqrt(square_avgs)
  CHECK(step_of(adamax<>::value) == N);   // _foreach_abs(grads)
  // Two lists: std = _foreach_sqrt(sums) and numerator = _foreach_mul(grads, -clr); std and
  // deltas = _foreach_add(square_avgs / acc_deltas, eps).
  CHECK(step_of(adagrad<>::value) == 2 * N);
  CHECK(step_of(adadelta<>::value) == 2 * N);
  // signs = _foreach_mul(grads, prevs), then per tensor torch.where(signs[i].eq(etaminus), 0,
  // grads[i]): at the largest a bool mask (1 B per element) and a copy.
  CHECK(step_of(rprop<>::value) == N + E + E / 2);
  // Adafactor only with foreach=True: var_estimates of every tensor.
  CHECK(step_of(adafactor<optimizer_options{.impl = optimizer_impl::foreach}>::value) == N);
  // In place: SGD without weight decay.
  CHECK(step_of(sgd<>::value) == 0);
  CHECK(step_of(sgd<optimizer_options{.momentum = true}>::value) == 0);
}

TEST_CASE("for-loop: the tensor being updated and what the previous one left bound") {
  constexpr optimizer_options loop{.impl = optimizer_impl::for_loop};
  // denom = (exp_avg_sq.sqrt() / c).add_(eps): sqrt and quotient of the head (2E) beside the
  // final norm's denom, still bound to the name.
  CHECK(step_of(adamw<loop>::value) == 2 * E + norm);
  CHECK(step_of(nadam<loop>::value) == 2 * E + norm);
  // std = state_sum.sqrt().add_(eps) (Adagrad), avg = square_avg.sqrt() (RMSprop): layer 0's q
  // beside the embedding's.
  CHECK(step_of(adagrad<loop>::value) == q + E);
  CHECK(step_of(rmsprop<loop>::value) == q + E);
  // std = square_avg.add(eps).sqrt_() and delta = acc_delta.add(eps).sqrt_(): layer 0's q beside
  // the embedding's std and delta, both still bound.
  CHECK(step_of(adadelta<loop>::value) == q + E + E);
  CHECK(step_of(adamax<loop>::value) == E);  // grad.abs().add_(eps), unnamed
  CHECK(step_of(radam<loop>::value) == 4 * E);
  CHECK(step_of(rprop<loop>::value) == 3 * E);
  CHECK(step_of(sgd<loop>::value) == 0);
  // Lion (lion-pytorch): exp_avg.clone().mul_(beta1).add(grad): two copies of the largest.
  CHECK(step_of(lion<>::value) == 2 * E);
  // MuonWithAuxAdam's adam_update for the head: four copies, beside the final norm's update.
  CHECK(step_of(muon<>::value) == 4 * E + norm);
}

TEST_CASE("for-loop Adafactor: the column norm's staging buffer of a tall matrix") {
  // The embedding and head, 1024 x 256: a thread would read 1024 / 4 = 256 values, so the dim -2
  // norm splits each column: grid_x = 256 / 128 = 2, ctas = min(2112 / 2, 256 / 16) = 16,
  // staging 512 x 16 x 256 = 2,097,152 B and one 512 B block of semaphores. Beside it the row mean
  // (1024 x 2 B) and the column mean (256 x 2 B); for the head also down_proj's old column mean
  // (512 x 2 B) and the final norm's update (512 B). Smaller matrices need no staging buffer.
  CHECK(column_norm_staging(1024, 256) == bytes{2'097'152 + 512});
  CHECK(column_norm_staging(1020, 4096) == bytes{});  // 255 values a thread: no split
  CHECK(step_of(adafactor<>::value) == 2'097'664 + 2048 + 512 + 1024 + norm);
}

TEST_CASE(
    "fused kernels, bitsandbytes and offloaded optimizers allocate nothing, DeepSpeed its flat "
    "gradients") {
  CHECK(step_of(adamw<optimizer_options{.impl = optimizer_impl::fused}>::value) == 0);
  CHECK(step_of(sgd<optimizer_options{.impl = optimizer_impl::fused}>::value) == 0);
  CHECK(step_of(adamw_8bit<>::value) == 0);
  training deepspeed{hand_model, mixed<bf16>::value, adamw<>::value};
  // DeepSpeed's FusedAdam steps in place over a flat partition; what its step allocates is the
  // partition's gradients flattened (stage_1_and_2.py step), here already fp32: the hand model's
  // 2,295,552 parameters (65,536 x 2 + 32,768 x 2 + 131,072 x 3 + 512 per layer, 3 layers, two
  // 262,144 tables and a 256 norm) over 2 ranks, 4 B each.
  deepspeed.layout = {
      .data = 2, .zero = sharding::zero1, .implementation = shard_implementation::deepspeed};
  CHECK(temporaries(deepspeed) == 2'295'552 / 2 * 4);
  training offloaded{hand_model, mixed<bf16>::value, adamw<>::value};
  offloaded.layout = {.data = 2,
                      .zero = sharding::zero2,
                      .implementation = shard_implementation::paper,
                      .optimizer_offload = offload_target::cpu};
  CHECK(temporaries(offloaded) == 0);
}

TEST_CASE("FSDP: the optimizer sees each rank's dim-0 shards") {
  training t{hand_model, pure<bf16>::value, adamw<>::value};
  t.layout = {.data = 4, .zero = sharding::zero3, .implementation = shard_implementation::fsdp};
  // Every dim 0 divides by 4 and every shard is a whole number of blocks but the norms' (128 B).
  CHECK(temporaries(t) == (N - 7 * norm) / 4 + 7 * 512);
}

TEST_CASE("defaults are what each library picks on CUDA, and choices are checked") {
  CHECK(adamw<>::value.options.impl == optimizer_impl::foreach);
  CHECK(adafactor<>::value.options.impl == optimizer_impl::for_loop);
  CHECK(lion<>::value.options.impl == optimizer_impl::for_loop);
  CHECK(adamw_8bit<>::value.options.impl == optimizer_impl::fused);
  const optimizer loop = with_implementation(adamw<>::value, optimizer_impl::for_loop);
  CHECK(std::string(loop.name) == "adamw (for-loop)");
  CHECK(std::string(with_implementation(loop, optimizer_impl::automatic).name) == "adamw");
  CHECK(std::string(with_implementation(adafactor<>::value, optimizer_impl::foreach).name) ==
        "adafactor (foreach)");
  CHECK_THROWS_WITH_AS(with_implementation(rprop<>::value, optimizer_impl::fused),
                       doctest::Contains("implementation (fused: adam"), error);
  CHECK_THROWS_AS(with_implementation(lion<>::value, optimizer_impl::foreach), error);
}

TEST_CASE("Llama-3-8B cut to 2 layers on an H100, torch 2.11 (tests/validation/gpu/steps.jsonl)") {
  // The optimizer phase's peak of max_memory_allocated less what was allocated when it began.
  model m = models::llama_3_8b::value;
  m.layers = 2;
  auto measured = [&](const precision& p, const optimizer& o) {
    return temporaries(training{m, p, o});
  };
  CHECK(measured(pure<bf16>::value, adamw<>::value) == 2'973'802'496);
  CHECK(measured(fp32_training::value, adamw<>::value) == 5'947'604'992);
  CHECK(measured(amp<bf16>::value, adamw<>::value) == 5'947'604'992);
  CHECK(measured(pure<bf16>::value,
                 adamw<optimizer_options{.impl = optimizer_impl::for_loop}>::value) ==
        2'101'354'496);
  CHECK(measured(pure<bf16>::value,
                 adamw<optimizer_options{.impl = optimizer_impl::fused}>::value) == 0);
  CHECK(measured(pure<bf16>::value, sgd<optimizer_options{.momentum = true}>::value) == 0);
  // torch.optim.Adafactor(lr=1e-3): the embedding's update beside layer 0's q_proj column norm.
  CHECK(measured(pure<bf16>::value, adafactor<>::value) == 1'184'915'968);
}

TEST_CASE("an optimizer in backward steps one tensor at a time and frees each gradient") {
  // torchtune optimizer_in_bwd: one optimizer per parameter, stepped by the parameter's
  // post-accumulate-grad hook, then zero_grad(set_to_none=True).
  auto in_backward = [](optimizer o) {
    o.options.in_backward = true;
    return training{hand_model, pure<bf16>::value, o};
  };
  auto step_entry = [](const memory_ledger& l) {
    for (const memory_entry& e : l)
      if (std::string(e.name) == "optimizer step temporaries (one tensor, in backward)")
        return e.size.count;
    return std::int64_t{-1};
  };
  // foreach on a list of one tensor: the head's exp_avg_sq_sqrt (E); for-loop: its sqrt and
  // quotient, with no previous tensor's denom still bound (2E).
  CHECK(step_entry(model_states(in_backward(adamw<>::value))) == E);
  constexpr optimizer_options loop{.impl = optimizer_impl::for_loop};
  CHECK(step_entry(model_states(in_backward(adamw<loop>::value))) == 2 * E);
  // The most gradient held at once. The timeline steps a layer half's tensors together after
  // its backward (PyTorch's engine runs each AccumulateGrad as soon as it is ready, so it holds
  // one tensor's): gate and up with the layer's two norms, 2 x 262,144 + 2 x 512 bytes, more than
  // the head's with the final norm's (E + 512). Nothing is left for a step at the end.
  const training t = in_backward(adamw<>::value);
  const activation_options o{.micro_batch = 1, .sequence = 64};
  const timed_ledger step = training_step(t, o);
  for (const memory_entry& e : step.entries)
    if (e.component == component::gradients) CHECK(e.size == bytes{2 * 262'144 + 2 * norm});
  CHECK(step.peak_at != moment::optimizer_step);
  const step_timeline tl = step_timeline_of(t, o);
  CHECK(std::string(tl.events[tl.events.size() - 1].what) != "gradients freed");
  // torchtune's rule: no gradient accumulation; DeepSpeed's flat buffers have no hooks.
  CHECK_THROWS_WITH_AS(training_step(t, {.micro_batch = 1, .sequence = 64, .micro_batches = 2}),
                       doctest::Contains("needs one micro-batch per step"), error);
  training deepspeed = t;
  deepspeed.layout = parallel<zero<2, 2>>::value;
  CHECK_THROWS_WITH_AS(training_step(deepspeed, o), doctest::Contains("flat gradient buffers"),
                       error);
}

TEST_CASE("zero_grad(set_to_none=False) keeps the gradients, and backward adds into them") {
  // torch < 2.0's default (pytorch/pytorch#92731): zero_grad zeroes .grad in place, so the N
  // bytes of bf16 gradients stay from step to step. AccumulateGrad adds each new gradient into
  // its .grad (torch/csrc/autograd/functions/accumulate_grad.h), which frees it.
  auto with = [](bool set_to_none) {
    training t{hand_model, pure<bf16>::value, adamw<>::value};
    t.optimizer.options.set_to_none = set_to_none;
    return t;
  };
  const activation_options o{.micro_batch = 1, .sequence = 64};
  const step_timeline kept = step_timeline_of(with(false), o);
  const step_timeline freed = step_timeline_of(with(true), o);
  CHECK(kept.at_start - freed.at_start == bytes{N});
  // The head's backward starts with the loss's gradients; until then set_to_none=True holds no
  // gradient, set_to_none=False all of them.
  auto alive_at_loss_gradients = [](const step_timeline& tl) {
    bytes alive = tl.at_start;
    for (const timeline_event& e : tl.events) {
      alive += e.delta;
      if (std::string(e.what) == "loss gradients") return alive;
    }
    return bytes{-1};
  };
  CHECK(alive_at_loss_gradients(kept) - alive_at_loss_gradients(freed) == bytes{N});
  // Backward makes every parameter's new gradient once (N bytes) and frees each once added in,
  // so the step ends where it started.
  bytes change{}, made{}, freed_again{};
  for (const timeline_event& e : kept.events) {
    const bytes all = e.delta * (e.first_layer >= 0 ? e.layers : 1);
    change += all;
    if (e.new_gradient) (e.delta > bytes{} ? made : freed_again) += all;
  }
  CHECK(made == bytes{N});
  CHECK(freed_again == bytes{-N});
  CHECK(change == bytes{});
  CHECK(std::string(kept.events.back().what) != "gradients freed");
  // Sharded, flat or pipelined gradients are no per-parameter .grad tensors.
  training sharded = with(false);
  sharded.layout = parallel<fsdp<2>>::value;
  CHECK_THROWS_WITH_AS(training_step(sharded, o), doctest::Contains("not with sharded gradients"),
                       error);
}

TEST_CASE("optional optimizer states, switched at run time as torch.optim creates them") {
  // torch/optim/rmsprop.py _init_group: square_avg, momentum_buffer when momentum > 0, grad_avg
  // when centered; adam.py: max_exp_avg_sq when amsgrad; sgd.py: momentum_buffer.
  const optimizer r = with_state_options(rmsprop<>::value, false, true, true);
  CHECK(r.moments == 3);
  CHECK(std::string(r.name) == "rmsprop+momentum+centered");
  CHECK(with_state_options(adamw<>::value, true, false, false).moments == 3);
  CHECK(std::string(with_state_options(adamw<>::value, true, false, false).name) ==
        "adamw+amsgrad");
  CHECK(with_state_options(sgd<optimizer_options{.momentum = true}>::value, false, false, false)
            .moments == 0);
  // The implementation stays: fused AdamW with amsgrad is still fused.
  const optimizer fused = with_state_options(
      adamw<optimizer_options{.impl = optimizer_impl::fused}>::value, true, false, false);
  CHECK(fused.options.impl == optimizer_impl::fused);
  CHECK_THROWS_WITH(with_state_options(lion<>::value, true, false, false),
                    "vramfit: lion has no amsgrad (amsgrad: adam, "
                    "adamw; momentum: sgd, rmsprop; centered: rmsprop)");
  CHECK_THROWS_WITH(with_state_options(sgd<>::value, false, false, true),
                    doctest::Contains("sgd has no centered"));
}
