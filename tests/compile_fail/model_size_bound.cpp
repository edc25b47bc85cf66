// Every size of a model has an upper bound that keeps the formulas' products inside 64 bits:
// a head_dim of 2^59 + 1 is refused by name, with the bound and the value.
// expect: model_size_must_not_exceed_its_bound
#include <vramfit/presets.hpp>

using namespace vramfit;
constexpr model huge_heads = [] {
  model m = models::llama_3_8b::value;
  m.head_dim = 576460752303423489;
  return m;
}();
using rejected = model_type<huge_heads>;
constexpr std::int64_t layers = rejected::value.layers;
