// A consumer of vramfit: includes the umbrella header, checks at compile time and at run time.
#include <vramfit/vramfit.hpp>

#include <iostream>

using namespace vramfit::literals;

// 7B parameters in bf16 (2 bytes each) fit in 80 GiB.
static_assert(vramfit::storage_bytes<vramfit::bf16>(7'000'000'000) < 80_GiB);

int main() {
  const vramfit::bytes weights = vramfit::storage_bytes<vramfit::bf16>(7'000'000'000);
  std::cout << "vramfit " << vramfit::version << ": " << weights << "\n";
  return weights == 14_GB ? 0 : 1;
}
