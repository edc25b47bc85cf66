// Unit tier: GPU presets, runtime overheads, plans and the fit check.
#include <doctest/doctest.h>

#include <vramfit/fit.hpp>
#include <vramfit/planner.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;
using namespace vramfit::literals;

TEST_CASE("GPU capacities are the driver's totals, not the marketing figures") {
  // nvidia-smi: H100 81559 MiB, A100 80GB 81920 MiB (modal-client#2797); "80 GB" is neither.
  CHECK(gpus::h100_80gb::value.capacity == bytes{85'520'809'984});
  CHECK(gpus::a100_80gb::value.capacity == 80_GiB);
  CHECK(gpus::h100_80gb::value.capacity > 80_GB);
  CHECK(gpus::h100_80gb::value.capacity < 80_GiB);
  CHECK(find_gpu("h200")->capacity == 143771 * MiB);
  CHECK(find_gpu("nope") == nullptr);
  for (const gpu_preset& g : gpu_presets) {
    CAPTURE(g.key);
    CHECK(g.value.capacity > 16_GB);
    CHECK(std::string(g.value.source).size() > 10);
  }
}

TEST_CASE("runtime overheads follow their stated defaults") {
  const memory_ledger single = overheads({}, gpus::h100_80gb::value, 100_GiB, 1);
  // 768 MiB outside the allocator (measured on an H100 and an H200), Hopper's 32 MiB cuBLAS
  // workspace, 5 % of 100 GiB.
  CHECK(total(single, component::overhead) == 768 * MiB + 32 * MiB + 5_GiB);
  // What each metric leaves out: nothing (nvidia-smi); the context and cuBLAS's workspace, outside
  // the caching allocator (reserved); and the 5 % reserve too (allocated).
  CHECK(not_counted(single, memory_metric::nvidia_smi) == bytes{0});
  CHECK(not_counted(single, memory_metric::reserved) == 768 * MiB + 32 * MiB);
  CHECK(not_counted(single, memory_metric::allocated) == 768 * MiB + 32 * MiB + 5_GiB);
  const memory_ledger volta = overheads({.allocator = {.expandable_segments = true}},
                                        gpus::v100_16gb::value, bytes{100}, 8);
  // 1343 MiB context (measured on a V100), 8 MiB cuBLAS, NCCL's data-parallel ring of 8 in a
  // node without NVLS (24 channels x 12 MiB + 32 x 6 MiB, nccl_memory_test.cpp), 1 % of 100 B.
  CHECK(total(volta, component::overhead) ==
        1343 * MiB + bytes{4096 * 1024 * 2 + 16 * 1024 * 8} + 480 * MiB + bytes{1});
  CHECK(total(overheads({.cuda_context = 0, .cublas_workspace = 0, .fragmentation_percent = 0},
                        gpus::h100_80gb::value, 1_GiB, 1),
              component::overhead) == bytes{0});
}

namespace {
using qlora_plan = training_plan<models::llama_3_8b, pure<bf16>, adamw<>, qlora<16>, single_gpu,
                                 activation_options{.micro_batch = 1, .sequence = 4096}>;
using full_plan = training_plan<models::llama_3_8b, amp<bf16>, adamw<>, full_finetune, single_gpu,
                                activation_options{.micro_batch = 1, .sequence = 4096}>;
}  // namespace

TEST_CASE("fits and the report behind it") {
  static_assert(fits<qlora_plan, gpus::h100_80gb>);
  static_assert(!fits<full_plan, gpus::h100_80gb>);
  const fit_report r = fit(full_plan::value, gpus::h100_80gb::value);
  CHECK(r.available == gpus::h100_80gb::value.capacity);
  // required = the step's peak + the overheads; the components are their ledger totals.
  const timed_ledger l = breakdown(full_plan::value, gpus::h100_80gb::value);
  CHECK(r.required == peak(l));
  CHECK(r.overhead == total(l.entries, component::overhead));
  CHECK(r.required == full_plan::tensors_peak() + r.overhead);
  CHECK_FALSE(r.fits());
}

TEST_CASE("the most loaded rank of a pipeline is the one checked") {
  using piped =
      training_plan<models::llama_3_8b, mixed<bf16>, adamw<>, full_finetune,
                    parallel<pipeline_parallel<4>>,
                    activation_options{.micro_batch = 1, .sequence = 4096, .micro_batches = 8}>;
  const stage_state<timed_ledger> most = most_loaded_rank(piped::value);
  for (std::int64_t s = 0; s < 4; ++s)
    CHECK(peak(training_step(piped::value.setup, piped::value.batch, s)) <= peak(most.state));
  // Stage 0 holds 4 micro-batches of activations, the last stage one: stage 0 is the heaviest.
  CHECK(most.stage == 0);
}

TEST_CASE("inference plans fit the same way") {
  // Seed 002: Llama-2-70B in 4 bits on a 48 GB card, one 4096-token request.
  using served = inference_plan<models::llama_2_70b, gptq<>, request_shape{.prompt = 4096}>;
  static_assert(fits<served, gpus::rtx_a6000>);
  static_assert(!fits<served, gpus::rtx_4090>);
  const fit_report r = fit(served::value, gpus::rtx_a6000::value);
  CHECK(r.kv_cache == bytes{327'680LL * 4096});
  CHECK(r.weights == weight_bytes(models::llama_2_70b::value, {}, gptq<>::value));
  CHECK(r.gradients == bytes{0});
  CHECK(r.required == peak(served::breakdown_on<gpus::rtx_a6000>()));
}

TEST_CASE("one estimate builds its step timeline once, the allocator's replay included") {
  training_plan_value p{training{models::qwen2_5_0_5b::value, mixed<bf16>::value, adamw<>::value},
                        activation_options{.micro_batch = 1, .sequence = 1024},
                        {.reserve = reserve_model::simulated}};
  const std::int64_t before = detail::timelines_built;
  const fit_report simulated = fit(p, gpus::h100_80gb::value);
  CHECK(detail::timelines_built - before == 1);
  // The replay reserved more than the tensors' peak: it ran, on that timeline.
  CHECK(simulated.overhead > fit(detail::without_reserve(p), gpus::h100_80gb::value).overhead);
  // A pipeline compares its distinct stages: the first, a middle and the last of 4 (Qwen's 24
  // layers split evenly), one timeline each.
  p.setup.layout.pipeline = 4;
  const std::int64_t piped = detail::timelines_built;
  (void)fit(p, gpus::h100_80gb::value);
  CHECK(detail::timelines_built - piped == 3);
}

TEST_CASE("a GPU given by its capacity keeps the text in its name, or is refused") {
  const gpu g = gpu_with_capacity("96GiB");
  CHECK(std::string_view(g.name) == "GPU of 96GiB");
  CHECK(g.capacity == 96_GiB);
  // Longer text than its name holds (24 characters) is refused, not cut.
  CHECK_THROWS_WITH(gpu_with_capacity("96.00000000000000000000GiB"),
                    doctest::Contains("at most 24 characters, got '96.00000000000000000000GiB'"));
}

TEST_CASE("Transformer Engine's persistent cuBLAS workspace, by GPU generation") {
  // TransformerEngine cpp_extensions/gemm.py get_cublas_workspace_size_bytes: 32 MiB + 1 KiB from
  // compute capability 9 on, 4 MiB before; made once per device and kept.
  training_plan_value p{training{models::llama_3_8b::value, pure<bf16>::value, adamw<>::value},
                        activation_options{.micro_batch = 1, .sequence = 1024}};
  auto workspace = [&](const gpu& g) {
    for (const memory_entry& e : estimate(p, g).ledger.entries)
      if (std::string_view(e.name) == "Transformer Engine cuBLAS workspace") return e.size;
    return bytes{};
  };
  CHECK(workspace(gpus::h100_80gb::value) == bytes{});  // Hugging Face's code runs no TE GEMM
  p.batch.code = model_code::megatron_te;
  CHECK(workspace(gpus::h100_80gb::value) == bytes{32 * 1024 * 1024 + 1024});
  CHECK(workspace(gpus::a100_80gb::value) == bytes{4 * 1024 * 1024});
}

TEST_CASE("TP overlap's buffers outside PyTorch's allocator: userbuffers or AsyncTP's workspace") {
  // Llama-3-70B, TP 8 with SP, one sequence of 8,192 tokens (hidden 8,192) in bf16.
  training_plan_value p{training{models::llama_3_70b::value, mixed<bf16>::value, adamw<>::value},
                        activation_options{.micro_batch = 1, .sequence = 8192}};
  p.setup.layout.tensor = 8;
  p.setup.layout.sequence = true;
  p.setup.layout.data = 8;
  auto entry = [&](const char* name) {
    for (const memory_entry& e : estimate(p, gpus::h100_80gb::value).ledger.entries)
      if (std::string_view(e.name) == name) return e;
    return memory_entry{};
  };
  CHECK(entry("TP overlap buffers").size == bytes{});
  // Transformer Engine's initialize_ub with Megatron-LM's shape [s x b / cp, hidden]: twelve
  // buffers of 8,192 x 8,192 bf16 elements (128 MiB each), registered outside the allocator;
  // its cuBLAS workspace repeated for 3 streams.
  p.setup.layout.tp_overlap = tp_comm_overlap::userbuffers;
  CHECK(entry("TP overlap buffers").size == 12 * 128 * MiB);
  CHECK(entry("TP overlap buffers").role == entry_role::outside_allocator);
  CHECK(entry("Transformer Engine cuBLAS workspace").size == bytes{3 * (32 * 1024 * 1024 + 1024)});
  // Under FP8 the eight all-gathers' buffers hold 1-byte elements (fp8_buf): 4 x 128 + 8 x 64.
  p.setup.precision = fp8_compute::value;
  CHECK(entry("TP overlap buffers").size == (4 * 128 + 8 * 64) * MiB);
  // CP 2 halves the tokens a rank holds: [4,096 x 8,192].
  p.setup.precision = mixed<bf16>::value;
  p.setup.layout.context = 2;
  p.setup.layout.data = 4;
  CHECK(entry("TP overlap buffers").size == 12 * 64 * MiB);
  // AsyncTP's symmetric-memory workspace: two output chunks of a matmul-reduce-scatter,
  // [4,096 / 8 x 8,192] bf16 each (8 MiB); no Transformer Engine workspace.
  p.setup.layout.tp_overlap = tp_comm_overlap::async_tp;
  CHECK(entry("TP overlap buffers").size == 2 * 8 * MiB);
  CHECK(entry("Transformer Engine cuBLAS workspace").size == bytes{});
}
