// Tensor parallel 4 and 6 KV heads divide neither one another.
// expect: tensor_parallel_and_kv_heads_must_divide_one_another
#include <vramfit/training.hpp>

using namespace vramfit;
constexpr model m{.name = "kv6",
                  .hidden = 1536,
                  .layers = 2,
                  .heads = 24,
                  .kv_heads = 6,
                  .head_dim = 64,
                  .ffn = 4096,
                  .vocab = 100};
constexpr auto l = model_states(training{m, pure<bf16>::value, adamw<>::value, full_finetune::value,
                                         parallel<tensor_parallel<4>>::value});
