// Static tier: element formats, their exact bits per element and storage, at compile time.
#include <vramfit/dtype.hpp>

namespace {
using namespace vramfit;

static_assert(Dtype<bf16> && Dtype<nf4_double_quant> && Dtype<group_quantized<4, 32>>);
static_assert(!Dtype<int> && !Dtype<bytes>);
static_assert(StorageDtype<fp32> && !StorageDtype<tf32>);

// Bits per element, by hand: payload + scale bits / block (+ second level / (block1 * block2)).
static_assert(bits_per_element(fp32::value) == ratio{32, 1});
static_assert(bits_per_element(nf4::value) == ratio{9, 2});  // 4 + 32/64
static_assert(bits_per_element(nf4_double_quant::value) ==
              ratio{2113, 512});                                      // 4 + 8/64 + 32/16384
static_assert(bits_per_element(mxfp4::value) == ratio{17, 4});        // 4 + 8/32
static_assert(bits_per_element(nvfp4::value) == ratio{9, 2});         // 4 + 8/16
static_assert(bits_per_element(gptq_int4::value) == ratio{133, 32});  // 4 + (16 + 4)/128
static_assert(bits_per_element(group_quantized<8, 64, bf16, 0>::value) ==
              ratio{33, 4});  // 8 + 16/64

// Sub-byte storage rounds up to whole bytes per tensor: 3 int4 elements take 2 bytes.
static_assert(storage_bytes<int4>(3) == bytes{2});
static_assert(storage_bytes<bf16>(7) == bytes{14});

// Usable as a template argument.
template <element_format F>
struct format_of {
  static constexpr element_format value = F;
};
static_assert(format_of<nvfp4::value>::value == nvfp4::value);
}  // namespace
