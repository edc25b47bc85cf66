// A fine-tuning mode holds at most four selections: a fifth is an error, not an overflow.
// expect: static_vector_capacity_exceeded
#include <vramfit/finetune.hpp>

using namespace vramfit;
constexpr finetuning five = [] {
  finetuning f{"partial", finetune_kind::partial};
  for (int i = 0; i < 5; ++i) f.trainable.push_back(select::kinds(tensor_kind::router));
  return f;
}();
