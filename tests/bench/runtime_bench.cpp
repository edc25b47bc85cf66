// Run-time benchmarks (Google Benchmark): evaluations per second of the same constexpr formulas.
#include <benchmark/benchmark.h>

#include <vramfit/vramfit.hpp>

namespace {
using namespace vramfit;

const training_plan_value llama{
    training{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value, full_finetune::value,
             parallel<fsdp<8>>::value},
    activation_options{.micro_batch = 2, .sequence = 4096, .recompute = recompute_kind::full}};

// Inputs go through DoNotOptimize so that the compiler cannot fold the constexpr work away.
void tensor_ledger(benchmark::State& state) {
  model m = models::deepseek_v3::value;
  for (auto _ : state) {
    benchmark::DoNotOptimize(m);
    benchmark::DoNotOptimize(tensors(m));
  }
}
BENCHMARK(tensor_ledger);

void training_fit(benchmark::State& state) {
  training_plan_value plan = llama;
  for (auto _ : state) {
    benchmark::DoNotOptimize(plan);
    benchmark::DoNotOptimize(fit(plan, gpus::h100_80gb::value));
  }
}
BENCHMARK(training_fit);

/// A sweep: every preset x micro-batch 1..8 x 3 recompute policies, one fit each, at 2,048
/// tokens or a learned position table's length where that is shorter (GPT-2's 1,024).
void sweep(benchmark::State& state) {
  std::int64_t evaluations = 0;
  for (auto _ : state) {
    for (const preset& p : presets) {
      if (p.value.is_encoder()) continue;
      const bool short_table =
          p.value.positions == position_kind::learned && p.value.max_positions < 2048;
      const std::int64_t sequence = short_table ? p.value.max_positions : 2048;
      for (std::int64_t b = 1; b <= 8; b *= 2) {
        for (recompute_kind r :
             {recompute_kind::none, recompute_kind::selective, recompute_kind::full}) {
          training_plan_value plan{
              training{p.value, mixed<bf16>::value, adamw<>::value},
              activation_options{.micro_batch = b, .sequence = sequence, .recompute = r}};
          benchmark::DoNotOptimize(plan);
          benchmark::DoNotOptimize(fit(plan, gpus::h100_80gb::value));
          ++evaluations;
        }
      }
    }
  }
  state.counters["evaluations/s"] =
      benchmark::Counter(static_cast<double>(evaluations), benchmark::Counter::kIsRate);
}
BENCHMARK(sweep);

/// The whole layout search (DeepSpeed's sharding, every degree, recompute, micro-batch and
/// virtual stage count) for a model on N H100s, sequence 8192: time per search and memory
/// evaluations per second.
void search_on(benchmark::State& state, const model& m, std::int64_t gpus) {
  training_plan_value plan{training{m, mixed<bf16>::value, adamw<>::value},
                           activation_options{.sequence = 8192}};
  std::int64_t evaluations = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(plan);
    const search_result r = search_layouts(plan, gpus::h100_80gb::value, {.gpus = gpus});
    evaluations += r.memory_evaluations;
    benchmark::DoNotOptimize(r);
  }
  state.counters["evaluations/s"] =
      benchmark::Counter(static_cast<double>(evaluations), benchmark::Counter::kIsRate);
}
void layout_search_8(benchmark::State& state) {
  search_on(state, models::llama_3_8b::value, 8);
}
BENCHMARK(layout_search_8)->Unit(benchmark::kMillisecond);
void layout_search_405b_16384(benchmark::State& state) {
  search_on(state, models::llama_3_1_405b::value, 16384);
}
BENCHMARK(layout_search_405b_16384)->Unit(benchmark::kMillisecond);
void layout_search_671b_16384(benchmark::State& state) {
  search_on(state, models::deepseek_v3::value, 16384);
}
BENCHMARK(layout_search_671b_16384)->Unit(benchmark::kMillisecond);

void inference_max_batch(benchmark::State& state) {
  model m = models::llama_3_8b::value;
  for (auto _ : state) {
    benchmark::DoNotOptimize(m);
    benchmark::DoNotOptimize(
        max_batch(m, {}, plain_weights<bf16>::value, {}, {.prompt = 4096}, gpus::h100_80gb::value));
  }
}
BENCHMARK(inference_max_batch);

// Cost independent of config values (issue 17): the same evaluation as `vramfit train` and
// `vramfit infer` on a model with tiny dimensions and 2, 1,000,000 and 2^24 layers. The three
// times should be alike; a time that grows with the layers is a loop over them.
model tiny_with_layers(std::int64_t layers) {
  return model{.name = "tiny",
               .hidden = 8,
               .layers = layers,
               .heads = 2,
               .kv_heads = 2,
               .head_dim = 4,
               .ffn = 16,
               .vocab = 32};
}

/// What `vramfit train` evaluates: the most loaded rank, its breakdown on the GPU, the fit.
void train_by_layers(benchmark::State& state) {
  training_plan_value plan{
      training{tiny_with_layers(state.range(0)), mixed<bf16>::value, adamw<>::value,
               full_finetune::value, parallel<fsdp<8>>::value},
      activation_options{.micro_batch = 2, .sequence = 4096, .recompute = recompute_kind::full}};
  const gpu& g = gpus::h100_80gb::value;
  for (auto _ : state) {
    benchmark::DoNotOptimize(plan);
    benchmark::DoNotOptimize(most_loaded_rank(plan));
    benchmark::DoNotOptimize(breakdown(plan, g));
    benchmark::DoNotOptimize(fit(plan, g));
  }
}
BENCHMARK(train_by_layers)
    ->Arg(2)
    ->Arg(1'000'000)
    ->Arg(std::int64_t{1} << 24)
    ->Unit(benchmark::kMicrosecond);

/// The whole-step timeline alone, with the layer runs cut by partial recompute and two passes of
/// accumulated micro-batches: its cost must not grow with the layers either.
void timeline_by_layers(benchmark::State& state) {
  const training t{tiny_with_layers(state.range(0)), amp<bf16>::value, adamw<>::value};
  const activation_options o{.micro_batch = 2,
                             .sequence = 4096,
                             .micro_batches = 4,
                             .recompute = recompute_kind::full,
                             .recompute_layers = 1};
  for (auto _ : state) {
    benchmark::DoNotOptimize(t);
    benchmark::DoNotOptimize(step_timeline_of(t, o).peak);
  }
}
BENCHMARK(timeline_by_layers)
    ->Arg(2)
    ->Arg(1'000'000)
    ->Arg(std::int64_t{1} << 24)
    ->Unit(benchmark::kMicrosecond);

/// The caching allocator replayed over a stage's steps (reserved_memory): its cost grows with the
/// stage's layers (docs/allocator.md says why), up to max_replayed_layers. Llama-3.1-405B's 126
/// layers on one GPU is the yardstick (under 10 ms). The second argument: 1 replays in
/// full (replay_mode::full), 0 leaves out the steps it proves would repeat.
template <bool Sgd>
void reserved_memory_by_layers(benchmark::State& state) {
  model m = models::llama_3_1_405b::value;
  m.layers = state.range(0);
  const training t{m, mixed<bf16>::value, Sgd ? sgd<>::value : adamw<>::value};
  const activation_options o{.micro_batch = 1, .sequence = 4096};
  const replay_mode mode = state.range(1) != 0 ? replay_mode::full : replay_mode::skip_repeats;
  for (auto _ : state) {
    benchmark::DoNotOptimize(m);
    benchmark::DoNotOptimize(reserved_memory(t, o, {}, 0, {}, mode).reserved);
  }
}
// AdamW reserves more in its second step (its states), so every step up to the third is replayed;
// stateless SGD's third step starts where its second did, and is left out.
BENCHMARK(reserved_memory_by_layers<false>)
    ->ArgsProduct({{2, 32, 126}, {0, 1}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(reserved_memory_by_layers<true>)
    ->ArgsProduct({{2, 32, 126}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

/// A search on the replayed allocator: the largest micro-batch of Qwen3-30B-A3B (48 layers of
/// 128 experts) with FSDP over 32 GPUs at 4,096 tokens and full recompute, which replays the
/// allocator for each micro-batch it tries (the answer: 5). Run in a process that keeps glibc's
/// default heap policy, like the Python module.
void max_micro_batch_replayed(benchmark::State& state) {
  training_plan_value plan{
      training{models::qwen3_30b_a3b::value, mixed<bf16>::value, adamw<>::value,
               full_finetune::value, parallel<fsdp<32>>::value},
      activation_options{.micro_batch = 1, .sequence = 4096, .recompute = recompute_kind::full},
      runtime_overheads{.reserve = reserve_model::simulated}};
  for (auto _ : state) {
    benchmark::DoNotOptimize(plan);
    benchmark::DoNotOptimize(max_micro_batch(plan, gpus::h100_80gb::value));
  }
}
BENCHMARK(max_micro_batch_replayed)->Unit(benchmark::kMillisecond);

/// What `vramfit infer` evaluates: each stage's ledger, then the largest batch and context.
void infer_by_layers(benchmark::State& state) {
  model m = tiny_with_layers(state.range(0));
  const request_shape r{.prompt = 4096};
  const gpu& g = gpus::h100_80gb::value;
  for (auto _ : state) {
    benchmark::DoNotOptimize(m);
    const inference_plan_value p{m, plain_weights<bf16>::value, {}, r, {}, {}};
    benchmark::DoNotOptimize(breakdown(p, g));
    benchmark::DoNotOptimize(max_batch(m, {}, plain_weights<bf16>::value, {}, r, g, 65536));
    benchmark::DoNotOptimize(max_context(m, {}, plain_weights<bf16>::value, {}, r, g));
  }
}
BENCHMARK(infer_by_layers)
    ->Arg(2)
    ->Arg(1'000'000)
    ->Arg(std::int64_t{1} << 24)
    ->Unit(benchmark::kMicrosecond);
}  // namespace

BENCHMARK_MAIN();
