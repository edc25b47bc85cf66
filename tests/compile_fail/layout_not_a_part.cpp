// parallel<...> composes layout parts only: an optimizer is not one.
// expect: LayoutPart
#include <vramfit/optimizer.hpp>
#include <vramfit/parallel.hpp>

constexpr auto l = vramfit::parallel<vramfit::adamw<>>::value;
