// Unit tier: DDP's gradient buckets (ddp.hpp).
#include <doctest/doctest.h>

#include <string>
#include <vramfit/presets.hpp>
#include <vramfit/timeline.hpp>
#include <vramfit/training.hpp>

#include "model_state_checks.hpp"
#include "tiny_llama.hpp"

using namespace vramfit;
using namespace vramfit::literals;
using namespace model_state_checks;

TEST_CASE("DDP keeps bucket copies of the gradients unless they are bucket views") {
  const model& m = models::llama_3_8b::value;
  const std::int64_t p = 8'030'261'248;
  const memory_ledger copies = model_states(
      training{m, amp<bf16>::value, adamw<>::value, full_finetune::value, parallel<ddp<8>>::value});
  CHECK(entry(copies, "DDP gradient buckets") == bytes{4 * p});
  const memory_ledger views = model_states(training{
      m, amp<bf16>::value, adamw<>::value, full_finetune::value, parallel<ddp<8, true>>::value});
  CHECK(entry(views, "DDP gradient buckets") == bytes{0});
}
