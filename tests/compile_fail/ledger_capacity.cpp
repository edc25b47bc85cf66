// A fine-tuning mode holds at most four selections: a fifth is an error naming the limit, not an
// overflow.
// expect: list_must_not_exceed_its_capacity
#include <vramfit/finetune.hpp>

using namespace vramfit;
constexpr finetuning five = [] {
  finetuning f{"partial", finetune_kind::partial};
  for (int i = 0; i < 5; ++i) f.trainable.push_back(select::kinds(tensor_kind::router));
  return f;
}();
