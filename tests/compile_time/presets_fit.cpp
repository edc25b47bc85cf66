// Compile-time tier: check_fits for every preset at a layout it is trained with, full fine-tuning
// in bf16 with fp32 master weights and AdamW, one sequence per micro-batch with full recompute,
// on an H100: each static_assert is one constant evaluation within the compiler's default
// limits (tests/CMakeLists.txt compiles this file without raising them).
#include <vramfit/fit.hpp>
#include <vramfit/presets.hpp>

namespace {
using namespace vramfit;

template <Model M, Layout L, std::int64_t Sequence = 4096>
constexpr bool fits_an_h100() {
  using plan =
      training_plan<M, mixed<bf16>, adamw<>, full_finetune, L,
                    activation_options{
                        .micro_batch = 1, .sequence = Sequence, .recompute = recompute_kind::full}>;
  return check_fits<plan, gpus::h100_80gb>();
}

// Models of up to 3B parameters on one GPU.
static_assert(fits_an_h100<models::gpt2, single_gpu, 1024>());
static_assert(fits_an_h100<models::gpt2_medium, single_gpu, 1024>());
static_assert(fits_an_h100<models::gpt2_large, single_gpu, 1024>());
static_assert(fits_an_h100<models::gpt2_xl, single_gpu, 1024>());
static_assert(fits_an_h100<models::qwen2_5_0_5b, single_gpu>());
static_assert(fits_an_h100<models::qwen3_0_6b, single_gpu>());
static_assert(fits_an_h100<models::gemma_2_2b, single_gpu>());
static_assert(fits_an_h100<models::bert_base_uncased, single_gpu, 512>());
static_assert(fits_an_h100<models::bert_large_uncased, single_gpu, 512>());
static_assert(fits_an_h100<models::distilbert_base_uncased, single_gpu, 512>());
static_assert(fits_an_h100<models::vit_l_16, single_gpu, 197>());

// 4B to 30B: FSDP over a node or two.
static_assert(fits_an_h100<models::phi_3_mini, parallel<fsdp<8>>>());
static_assert(fits_an_h100<models::llama_2_7b, parallel<fsdp<8>>>());
static_assert(fits_an_h100<models::llama_2_13b, parallel<fsdp<8>>>());
static_assert(fits_an_h100<models::llama_3_8b, parallel<fsdp<8>>>());
static_assert(fits_an_h100<models::mistral_7b, parallel<fsdp<8>>>());
static_assert(fits_an_h100<models::qwen2_5_7b, parallel<fsdp<8>>>());
static_assert(fits_an_h100<models::qwen3_8b, parallel<fsdp<8>>>());
static_assert(fits_an_h100<models::gemma_2_9b, parallel<fsdp<8>>>());
static_assert(fits_an_h100<models::gemma_2_27b, parallel<fsdp<16>>>());
static_assert(fits_an_h100<models::falcon_7b, parallel<fsdp<8>>>());
static_assert(fits_an_h100<models::gpt_oss_20b, parallel<fsdp<16>>>());
static_assert(fits_an_h100<models::qwen3_30b_a3b, parallel<fsdp<16>>>());
static_assert(fits_an_h100<models::mixtral_8x7b, parallel<fsdp<32>>>());

// 70B and up: FSDP over many nodes, or tensor, pipeline and expert parallelism.
static_assert(fits_an_h100<models::llama_2_70b, parallel<fsdp<64>>>());
static_assert(fits_an_h100<models::llama_3_70b, parallel<fsdp<64>>>());
static_assert(fits_an_h100<models::qwen2_5_72b, parallel<fsdp<64>>>());
static_assert(fits_an_h100<models::mixtral_8x22b, parallel<fsdp<128>>>());
static_assert(fits_an_h100<models::gpt_oss_120b, parallel<fsdp<128>>>());
static_assert(fits_an_h100<models::deepseek_v2, parallel<fsdp<128>>>());
// The Llama 3 paper's 405B layout (TP 8, PP 16, FSDP 64) and DeepSeek-V3's (PP 16, EP 64,
// ZeRO-1).
static_assert(fits_an_h100<models::llama_3_1_405b,
                           parallel<tensor_parallel<8, true>, pipeline_parallel<16>, fsdp<64>>>());
static_assert(fits_an_h100<models::deepseek_v3,
                           parallel<pipeline_parallel<16>, expert_parallel<64>, zero<1, 64>>>());

}  // namespace
