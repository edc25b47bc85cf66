// SGD has no amsgrad and no centered state: asking for them is an error, not a silent no-op.
// expect: optimizer_must_have_the_option
#include <vramfit/optimizer.hpp>

using namespace vramfit;
constexpr auto moments = sgd<optimizer_options{.amsgrad = true, .centered = true}>::value.moments;
