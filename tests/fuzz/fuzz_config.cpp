// libFuzzer target: Hugging Face config.json import, then the formulas on whatever it accepts.
// Any input must end in a model, a vramfit::error, or a rejected JSON: never a crash, a
// sanitizer report or an uncaught exception.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vramfit/hf_config.hpp>
#include <vramfit/vramfit.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const nlohmann::json config = nlohmann::json::parse(data, data + size, nullptr, false);
  if (config.is_discarded()) return 0;
  try {
    const vramfit::model m = vramfit::model_from_hf_config(config, "fuzz");
    const vramfit::tensor_ledger ledger = vramfit::tensors(m);
    (void)vramfit::parameters(ledger);
    const vramfit::training_plan_value plan{
        vramfit::training{m, vramfit::mixed<vramfit::bf16>::value, vramfit::adamw<>::value},
        vramfit::activation_options{.micro_batch = 1, .sequence = 512}};
    (void)vramfit::fit(plan, vramfit::gpus::h100_80gb::value);
    (void)vramfit::kv_bytes_per_token(m, {});
  } catch (const vramfit::error&) {
    // A clear error is the right answer to a bad config.
  }
  return 0;
}
