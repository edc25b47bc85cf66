// The layout search from C++: at run time over a whole cluster, and at compile time over a space
// narrow enough for the compilers' constexpr limits (docs/planner.md).
#include <cstdio>
// [start:search]
#include <vramfit/vramfit.hpp>
using namespace vramfit;

// Llama-3-70B, bf16 with fp32 master weights, AdamW, sequences of 8192 tokens.
constexpr training_plan_value llama70{
    training{models::llama_3_70b::value, mixed<bf16>::value, adamw<>::value},
    activation_options{.sequence = 8192}};

// In a launcher's build: ZeRO-3 over 64 H100s with full recompute fits, at some micro-batch of
// the 512-sequence global batch (a handful of memory evaluations: within clang's limits).
static_assert(search_layouts(llama70, gpus::h100_80gb::value,
                             {.gpus = 64,
                              .global_batch = 512,
                              .tensor = 1,
                              .pipeline = 1,
                              .context = 1,
                              .zero = 3,
                              .recompute = 2,
                              .top = 1})
                  .found());

int main() {
  // At run time: every layout of 64 GPUs, the five fastest that fit.
  const search_result r =
      search_layouts(llama70, gpus::h100_80gb::value,
                     {.gpus = 64, .global_batch = 512, .sharding = sharding_family::any, .top = 5});
  for (const plan_candidate& c : r.best)
    std::printf(
        "DP %lld (ZeRO-%d) TP %lld PP %lld CP %lld, micro-batch %lld: %.1f GiB, %.0f tokens/s\n",
        static_cast<long long>(c.layout.data), static_cast<int>(c.layout.zero),
        static_cast<long long>(c.layout.tensor), static_cast<long long>(c.layout.pipeline),
        static_cast<long long>(c.layout.context), static_cast<long long>(c.micro_batch),
        static_cast<double>(c.required.count) / (1 << 30), c.tokens_per_second);
}
// [end:search]
