// Only model types are models: a bare number is rejected by the vramfit::Model concept.
// expect: Model
#include <vramfit/model.hpp>

template <vramfit::Model M>
constexpr auto layers = M::value.layers;
constexpr auto n = layers<int>;
