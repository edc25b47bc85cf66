// Prints the table of docs/element-formats.md: every element format, its exact bits per element,
// and the bytes of a 4096 x 4096 tensor and of Llama-2-7B's weights in it.
#include <cstdio>
#include <iostream>
#include <string>
#include <vramfit/vramfit.hpp>

#include "report.hpp"

namespace {
std::string decimals(double value, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}
}  // namespace

int main() {
  using namespace vramfit;
  constexpr std::int64_t llama2_7b = 6'738'415'616;  // Hugging Face model card
  const element_format formats[] = {fp64::value,      fp32::value,
                                    bf16::value,      fp16::value,
                                    fp8_e4m3::value,  fp8_e5m2::value,
                                    int8::value,      int4::value,
                                    nf4::value,       nf4_double_quant::value,
                                    mxfp4::value,     nvfp4::value,
                                    gptq_int4::value, group_quantized<8, 64, bf16, 0>::value};

  report::table by_format(
      {"format", "bits per element", "4096 x 4096 tensor", "Llama-2-7B weights"});
  for (const element_format& f : formats)
    by_format.add({f.name, decimals(bits_per_element(f).value(), 3),
                   std::to_string(storage_bytes(f, 4096, 4096).count) + " B",
                   to_string(storage_bytes(f, llama2_7b)) + " (" +
                       to_string(storage_bytes(f, llama2_7b), prefixes::decimal) + ")"});
  report::page_blocks(std::cout, "element_formats.cpp").print("formats", by_format);
}
