// Tensor parallel 16 cannot split an FFN of 1000 columns.
// expect: tensor_parallel_must_divide_ffn
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr model m{.name = "ffn1000",
                  .hidden = 2048,
                  .layers = 2,
                  .heads = 32,
                  .kv_heads = 8,
                  .head_dim = 64,
                  .ffn = 1000,
                  .vocab = 100};
constexpr auto l = model_states(training{m, pure<bf16>::value, adamw<>::value, full_finetune::value,
                                         parallel<tensor_parallel<16>>::value});
