// The README's first example: exact weight bytes of a real model, checked at compile time.
#include <iostream>
// [start:quickstart]
#include <vramfit/vramfit.hpp>
using namespace vramfit::literals;

// Llama-2-7B has 6,738,415,616 parameters (Hugging Face model card).
constexpr vramfit::bytes weights = vramfit::storage_bytes<vramfit::nf4_double_quant>(6'738'415'616);

// In 4-bit NF4 with double quantization its weights fit a 24 GB card with room to spare.
static_assert(weights < 24_GB);
// [end:quickstart]

int main() {
  std::cout << "Llama-2-7B weights in NF4+DQ: " << weights << "\n";
}
