// Unit tier: element formats: byte counts of real tensor shapes against hand computations.
#include <doctest/doctest.h>

#include <vramfit/dtype.hpp>

using namespace vramfit;

TEST_CASE("a 4096 x 4096 tensor in every format, by hand") {
  constexpr std::int64_t n = 4096LL * 4096;  // 16,777,216 elements
  struct row {
    element_format format;
    std::int64_t expected;
  };
  const row table[] = {
      {fp64::value, n * 8},  // 134,217,728
      {fp32::value, n * 4},  // 67,108,864
      {bf16::value, n * 2},  // 33,554,432
      {fp16::value, n * 2},  // 33,554,432
      {fp8_e4m3::value, n},  // 16,777,216
      {fp8_e5m2::value, n},  // 16,777,216
      {int8::value, n},      // 16,777,216
      {int4::value, n / 2},  // 8,388,608
      // NF4: n/2 codes + n/64 fp32 absmax = 8,388,608 + 262,144 * 4.
      {nf4::value, n / 2 + n / 64 * 4},  // 9,437,184
      // NF4 + DQ: codes + n/64 uint8 absmax + n/64/256 fp32 scales + one fp32 offset.
      {nf4_double_quant::value, n / 2 + n / 64 + n / 64 / 256 * 4 + 4},  // 8,654,852
      // bitsandbytes FP4 stores its codes and statistics as NF4 does, with or without DQ.
      {fp4::value, n / 2 + n / 64 * 4},
      {fp4_double_quant::value, n / 2 + n / 64 + n / 64 / 256 * 4 + 4},
      // MXFP4: codes + one E8M0 byte per 32 elements of a row.
      {mxfp4::value, n / 2 + 4096 * (4096 / 32)},  // 8,912,896
      // NVFP4: codes + one E4M3 byte per 16 elements of a row + one fp32 tensor scale.
      {nvfp4::value, n / 2 + 4096 * (4096 / 16) + 4},  // 9,437,188
      // GPTQ int4 g128: codes + fp16 scale and 4-bit zero per 128 elements of a row.
      {gptq_int4::value, n / 2 + 4096 * 32 * 2 + 4096 * 32 / 2},  // 8,716,288
      // Symmetric int8 with bf16 scales per 64: codes + 2 bytes per 64.
      {group_quantized<8, 64, bf16, 0>::value, n + 4096 * 64 * 2},  // 17,301,504
  };
  for (const row& r : table) {
    CAPTURE(r.format.name);
    CHECK(storage_bytes(r.format, 4096, 4096) == bytes{r.expected});
  }
  CHECK(storage_bytes(nf4_double_quant::value, 4096, 4096) == bytes{8'654'852});
}

TEST_CASE("blocks are counted per tensor, per row where the format says so") {
  // 65 NF4 elements: 33 bytes of codes (rounded up) + 2 absmax blocks of 4 bytes.
  CHECK(storage_bytes(nf4::value, 65) == bytes{41});
  // MXFP4 rows of 33: each row needs 2 scales; 2 rows x 33: 33 bytes of codes + 4 scale bytes.
  CHECK(storage_bytes(mxfp4::value, 2, 33) == bytes{37});
  // Flattened NF4 over the same 66 elements needs only 2 blocks: 33 + 8.
  CHECK(storage_bytes(nf4::value, 2, 33) == bytes{41});
}

TEST_CASE("quantized formats are named for their layout") {
  CHECK(std::string(gptq_int4::value.name) == "int4 g128");
  CHECK(std::string(group_quantized<8, 64, bf16, 0>::value.name) == "int8 g64 sym");
  CHECK(bits_per_element(nf4_double_quant::value).value() == doctest::Approx(4.127).epsilon(1e-4));
}

TEST_CASE("bad requests are errors with the rule named") {
  CHECK_THROWS_WITH(storage_bytes(tf32::value, 10),
                    doctest::Contains("tf32 is a compute-only format"));
  CHECK_THROWS_WITH(storage_bytes(bf16::value, 0, 10),
                    "vramfit: a tensor shape must be positive, got 0 x 10");
  CHECK_THROWS_AS(storage_bytes(fp64::value, INT64_MAX / 2), overflow_error);
}
