// LoRA adapters have a positive rank.
// expect: lora_rank_must_be_positive
#include <vramfit/finetune.hpp>

using namespace vramfit;
constexpr auto rank = lora<0>::value.lora.rank;
