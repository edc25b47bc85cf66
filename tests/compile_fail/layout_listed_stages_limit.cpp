// At most 64 pipeline stages can be listed one by one (the layout is a structural value of fixed
// size); 65 listed stages of one layer each are refused with the limit's name.
// expect: at most max_listed_stages
#include <vramfit/parallel.hpp>

using namespace vramfit;
constexpr layout too_many =
    parallel<pipeline_parallel<65, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                               1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                               1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1>>::value;
