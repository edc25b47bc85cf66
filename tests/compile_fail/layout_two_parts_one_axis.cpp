// parallel<...> takes one part per axis: DDP and FSDP both set the data-parallel ranks, and the
// later would silently win.
// expect: layout_takes_one_part_per_axis
#include <vramfit/parallel.hpp>

constexpr auto l = vramfit::parallel<vramfit::ddp<8>, vramfit::fsdp<4>>::value;
