// Unit tier: properties over thousands of generated configurations (seeded, reproducible), and
// the extremes: a 2-trillion-parameter MoE, a 10-million-token context, 100,000 GPUs, batch 65,536.
#include <doctest/doctest.h>

#include <random>
#include <vramfit/vramfit.hpp>

using namespace vramfit;

namespace {
/// Generated configurations: a random preset (decoders), precision, optimizer, batch shape,
/// attention and layout, from a fixed seed.
class generator {
 public:
  explicit generator(unsigned seed) : random_(seed) {}

  training_plan_value next() {
    const model* decoders[] = {&models::gpt2::value,         &models::llama_2_7b::value,
                               &models::llama_3_8b::value,   &models::mistral_7b::value,
                               &models::mixtral_8x7b::value, &models::qwen2_5_0_5b::value,
                               &models::gemma_2_2b::value,   &models::phi_3_mini::value,
                               &models::falcon_7b::value,    &models::deepseek_v2::value};
    const precision precisions[] = {fp32_training::value, amp<bf16>::value, pure<bf16>::value,
                                    mixed<bf16>::value, mixed<fp16, fp16>::value};
    const optimizer optimizers[] = {sgd<>::value, adamw<>::value, adafactor<>::value,
                                    adamw_8bit<>::value, lion<>::value};
    training_plan_value p{};
    p.setup.model = *decoders[pick(std::size(decoders))];
    // GPT-2's shapes with a learned position table long enough for every sequence tried.
    if (p.setup.model.positions == position_kind::learned) p.setup.model.max_positions = 8192;
    p.setup.precision = precisions[pick(std::size(precisions))];
    p.setup.optimizer = optimizers[pick(std::size(optimizers))];
    p.batch.micro_batch = 1 + static_cast<std::int64_t>(pick(4));
    p.batch.sequence = 128 << pick(5);
    p.batch.attention = pick(2) == 0 ? attention_kind::eager : attention_kind::flash;
    p.batch.recompute = static_cast<recompute_kind>(pick(3));
    p.setup.layout.data = std::int64_t{1} << pick(4);
    return p;
  }

 private:
  std::size_t pick(std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(random_);
  }
  std::mt19937 random_;
};

bytes required(const training_plan_value& p) {
  return fit(p, gpus::h100_80gb::value).required;
}
bytes activation_total(const training_plan_value& p) {
  return total(training_step(p.setup, p.batch).entries, component::activations);
}
}  // namespace

TEST_CASE("memory grows with micro-batch and sequence length (2,000 configurations)") {
  generator g(20261121);
  for (int i = 0; i < 1000; ++i) {
    const training_plan_value p = g.next();
    CAPTURE(p.setup.model.name);
    training_plan_value bigger = p;
    bigger.batch.micro_batch *= 2;
    CHECK(required(bigger) >= required(p));
    training_plan_value longer = p;
    longer.batch.sequence *= 2;
    CHECK(required(longer) >= required(p));
  }
}

namespace {
/// The ZeRO paper's model states: weights, gradients, master weights, optimizer states.
bytes model_state_bytes(const training_plan_value& p) {
  const memory_ledger l = model_states(p.setup);
  return total(l, component::weights) + total(l, component::gradients) +
         total(l, component::master_weights) + total(l, component::optimizer_states);
}
}  // namespace

TEST_CASE(
    "a higher ZeRO stage or a larger sharding degree never needs more (2,000 configurations)") {
  // Model states shrink with every stage (ZeRO paper §5). The whole step may not: ZeRO-3 gathers
  // its largest layer, which for a small model with a large embedding (GPT-2) costs more than
  // sharding its weights saves; that is real, and so the property is stated on model states.
  generator g(7);
  for (int i = 0; i < 500; ++i) {
    training_plan_value p = g.next();
    p.setup.layout.data = 8;
    p.setup.layout.implementation = shard_implementation::paper;
    CAPTURE(p.setup.model.name);
    bytes previous = model_state_bytes(p);
    for (int stage = 1; stage <= 3; ++stage) {
      p.setup.layout.zero = static_cast<sharding>(stage);
      const bytes now = model_state_bytes(p);
      CHECK(now <= previous);
      previous = now;
    }
    training_plan_value wider = p;
    wider.setup.layout.data = 16;
    CHECK(required(wider) <= required(p));
  }
}

TEST_CASE("recompute never increases activation memory (1,000 configurations)") {
  generator g(99);
  for (int i = 0; i < 1000; ++i) {
    training_plan_value p = g.next();
    p.batch.recompute = recompute_kind::none;
    const bytes none = activation_total(p);
    p.batch.recompute = recompute_kind::selective;
    const bytes selective = activation_total(p);
    p.batch.recompute = recompute_kind::full;
    const bytes full = activation_total(p);
    CHECK(selective <= none);
    CHECK(full <= selective + full);  // full keeps inputs only; its transient is one layer
    CHECK(total(training_step(p.setup, p.batch).entries, component::activations) == full);
  }
}

TEST_CASE("the ledger's entries sum to its totals, and the timed peak is what they hold there") {
  generator g(3);
  for (int i = 0; i < 1000; ++i) {
    const training_plan_value p = g.next();
    const timed_ledger timed = breakdown(p, gpus::h100_80gb::value);
    const memory_ledger& l = timed.entries;
    bytes by_component{}, by_component_at_peak{}, held{};
    for (int c = 0; c < component_count; ++c) {
      by_component += total(l, static_cast<component>(c));
      by_component_at_peak += at_peak(timed, static_cast<component>(c));
    }
    CHECK(by_component == total(l));
    REQUIRE(timed.at_peak.size() == l.size());
    for (std::size_t e = 0; e < l.size(); ++e) {
      const bytes at = timed.at_peak[e];
      CHECK(at >= bytes{});
      CHECK(at <= l[e].size);  // no entry holds more at the peak than at its fullest
      if (l[e].space != memory_space::device) CHECK(at == bytes{});
      held += at;
    }
    CHECK(peak(timed) == held);
    CHECK(by_component_at_peak == held);
    CHECK(peak(timed) <= total(l));
  }
}

namespace {
/// Every figure the tool reports for a training plan and for serving its model, on one GPU of
/// the most loaded pipeline stage.
struct figures {
  std::int64_t parameters = 0;
  bytes weights{}, gradients{}, master_weights{}, optimizer_states{}, activations{}, peak{};
  bytes kv_per_token{}, kv_cache{}, inference_weights{}, inference_peak{};
};

figures figures_of(const training_plan_value& p) {
  const model& m = p.setup.model;
  const gpu& g = gpus::h100_80gb::value;
  const fit_report r = fit(p, g);
  figures f{};
  f.parameters = parameters(tensors(m));
  f.weights = r.weights;
  f.gradients = r.gradients;
  f.master_weights = r.master_weights;
  f.optimizer_states = r.optimizer_states;
  f.activations = r.activations;
  f.peak = r.required;
  const request_shape requests{.batch = p.batch.micro_batch, .prompt = p.batch.sequence};
  f.kv_per_token = kv_bytes_per_token(m, {});
  f.kv_cache = kv_cache_bytes(m, {}, {}, requests);
  f.inference_weights = weight_bytes(m, {}, plain_weights<bf16>::value);
  f.inference_peak = inference_required(m, {}, plain_weights<bf16>::value, {}, requests, g);
  return f;
}

void check_not_smaller(const figures& more, const figures& fewer) {
  CHECK(more.parameters >= fewer.parameters);
  CHECK(more.weights >= fewer.weights);
  CHECK(more.gradients >= fewer.gradients);
  CHECK(more.master_weights >= fewer.master_weights);
  CHECK(more.optimizer_states >= fewer.optimizer_states);
  CHECK(more.activations >= fewer.activations);
  CHECK(more.peak >= fewer.peak);
  CHECK(more.kv_per_token >= fewer.kv_per_token);
  CHECK(more.kv_cache >= fewer.kv_cache);
  CHECK(more.inference_weights >= fewer.inference_weights);
  CHECK(more.inference_peak >= fewer.inference_peak);
}
}  // namespace

TEST_CASE("doubling the layers never decreases any figure (1,000 configurations)") {
  // Why it holds: every figure is a sum over the layers a GPU holds of terms that do not depend
  // on how many layers there are (a layer's parameters, states, saved activations and KV cache;
  // sliding-window layers stay every period-th layer, and MoE layers stay those after the first
  // dense ones), plus terms that do not depend on the layers at all (embeddings, head, loss, the
  // transients of one layer, ZeRO-3's gathered largest layer, the runtime overheads, which grow
  // with the peak). The layouts here have no pipeline, so the one GPU holds every layer and
  // doubling the layers doubles each layer sum. Not stated for pipeline layouts with fixed stage
  // lists (the same list no longer sums to the layers), nor per component of a pipeline's most
  // loaded stage, which may become another stage; the peak of even stages is checked below.
  generator g(1717);
  for (int i = 0; i < 500; ++i) {
    training_plan_value p = g.next();
    p.setup.layout.zero = static_cast<sharding>(i % 4);
    p.setup.layout.implementation =
        i % 3 == 0 ? shard_implementation::fsdp : shard_implementation::deepspeed;
    CAPTURE(p.setup.model.name);
    CAPTURE(i);
    training_plan_value doubled = p;
    doubled.setup.model.layers *= 2;
    check_not_smaller(figures_of(doubled), figures_of(p));
  }
  // Even pipeline stages: stage s holds floor(L / p) layers plus one when s < L mod p, which never
  // decreases when L doubles, and every stage's peak grows with its layers; so the most loaded
  // stage's peak, the largest of them, does not decrease either.
  for (int i = 0; i < 500; ++i) {
    training_plan_value p = g.next();
    p.setup.layout.pipeline = 1 + i % 4;
    p.setup.layout.implementation = shard_implementation::megatron;
    p.setup.layout.zero = i % 2 == 0 ? sharding::none : sharding::zero1;
    p.batch.micro_batches = 1 + i % 8;
    CAPTURE(p.setup.model.name);
    CAPTURE(i);
    training_plan_value doubled = p;
    doubled.setup.model.layers *= 2;
    CHECK(required(doubled) >= required(p));
  }
}

namespace {
constexpr training_plan_value compile_time_plan{
    training{models::mixtral_8x7b::value, amp<bf16>::value, adamw<>::value, full_finetune::value,
             parallel<zero<2, 8>, expert_parallel<8>>::value},
    activation_options{.micro_batch = 2, .sequence = 4096}};
constexpr fit_report compile_time_fit = fit(compile_time_plan, gpus::h100_80gb::value);
}  // namespace

TEST_CASE("compile-time and run-time results are identical") {
  training_plan_value run_time = compile_time_plan;  // a copy the compiler evaluates at run time
  volatile std::int64_t batch = 2;
  run_time.batch.micro_batch = batch;
  CHECK(fit(run_time, gpus::h100_80gb::value) == compile_time_fit);
}

TEST_CASE("extremes: exact results or a clear overflow error") {
  // A 2-trillion-parameter MoE: 64 layers, hidden 16384, 2048 experts of 4096.
  const model huge{.name = "2T MoE",
                   .hidden = 16384,
                   .layers = 64,
                   .heads = 128,
                   .kv_heads = 8,
                   .head_dim = 128,
                   .ffn = 53248,
                   .vocab = 256000,
                   .moe = {.routed_experts = 2048, .top_k = 8, .expert_ffn = 4096}};
  const std::int64_t experts = 64LL * 2048 * 3 * 16384 * 4096;
  CHECK(parameters(tensors(huge), tensor_kind::expert) == experts);
  CHECK(parameters(tensors(huge)) > 2'000'000'000'000);
  // Its model states over 100,000 GPUs with ZeRO-3: exact bytes.
  const training sharded{
      huge,
      mixed<bf16>::value,
      adamw<>::value,
      full_finetune::value,
      {.data = 100'000, .zero = sharding::zero3, .implementation = shard_implementation::paper}};
  CHECK(total(model_states(sharded), component::master_weights) ==
        divide_up(bytes{4 * parameters(tensors(huge))}, 100'000));
  // A 10-million-token context of Llama-3-8B: 131,072 B per token exactly.
  CHECK(kv_cache_bytes(models::llama_3_8b::value, {}, {}, {.prompt = 10'000'000}) ==
        bytes{131'072LL * 10'000'000});
  // Batch 65,536 at that context is 86 PB, still exact in int64 ...
  CHECK(
      kv_cache_bytes(models::llama_3_8b::value, {}, {}, {.batch = 65'536, .prompt = 10'000'000}) ==
      bytes{131'072LL * 10'000'000 * 65'536});
  // ... and with 1,000 beams each it overflows: a clear error, not a wrong number.
  const request_shape too_many{.batch = 65'536, .beams = 1000, .prompt = 10'000'000};
  CHECK_THROWS_AS(kv_cache_bytes(models::llama_3_8b::value, {}, {}, too_many), overflow_error);
  CHECK_THROWS_WITH(kv_cache_bytes(models::llama_3_8b::value, {}, {}, too_many),
                    doctest::Contains("count overflows int64"));
  // Batch 65,536 of 4096 tokens is still exact.
  CHECK(kv_cache_bytes(models::llama_3_8b::value, {}, {}, {.batch = 65'536, .prompt = 4096}) ==
        bytes{131'072LL * 4096 * 65'536});
  // Activations of a 10-million-token step on one GPU: exact, or overflow, never wrong.
  const training t{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value};
  const memory_ledger l = activations(t, {.micro_batch = 1, .sequence = 10'000'000});
  CHECK(total(l, component::activations) > bytes{10'000'000LL * 4096 * 2 * 32});
}
