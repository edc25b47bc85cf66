// Unit tier: the peak of loading a model onto the GPU (load.hpp), derived by hand; the seed
// article's ViT cases are in inference_test.cpp.
#include <doctest/doctest.h>

#include <limits>

#include <vramfit/load.hpp>
#include <vramfit/presets.hpp>

using namespace vramfit;

namespace {
constexpr std::int64_t llama_parameters = 8'030'261'248;  // Meta's count for Llama-3-8B
constexpr std::int64_t embedding = 128'256LL * 4096;      // the token embedding (and the head)
constexpr std::int64_t mlp_matrix = 14'336LL * 4096;      // gate, up and down
const model& llama = models::llama_3_8b::value;
}  // namespace

TEST_CASE("through the meta device the GPU only ever holds the loaded weights") {
  const loading_peak p = load_peak(llama, plain_weights<bf16>::value, load_kind::direct);
  CHECK(p.device == bytes{2 * llama_parameters});
  CHECK(p.device == p.weights);
  // A pre-quantized checkpoint (GPTQ) loads as stored: nothing beside it either.
  const loading_peak q = load_peak(llama, gptq<>::value, load_kind::direct);
  CHECK(q.device == q.weights);
}

TEST_CASE("built in fp32 on the device, then cast: the fp32 model and one cast tensor") {
  // nn.Module._apply casts the token embedding first: 4 B x P of fp32 parameters beside its bf16
  // copy (2 B x 128,256 x 4,096), the largest tensor. Under TP 2 and PP 2 the last stage is the
  // fuller (the head's rows split like the embedding's, plus the final norm): its share.
  CHECK(load_peak(llama, plain_weights<bf16>::value, load_kind::fp32_on_device_then_cast).device ==
        bytes{4 * llama_parameters + 2 * embedding});
  const layout tp_pp{.tensor = 2, .pipeline = 2};
  const loading_peak split =
      load_peak(llama, plain_weights<bf16>::value, load_kind::fp32_on_device_then_cast, tp_pp);
  CHECK(split.device ==
        weight_bytes(llama, tp_pp, plain_weights<fp32>::value, 1) + bytes{2 * embedding / 2});
  CHECK(split.weights == weight_bytes(llama, tp_pp, plain_weights<bf16>::value, 1));
  CHECK(split.weights - weight_bytes(llama, tp_pp, plain_weights<bf16>::value, 0) ==
        bytes{2 * 4096});
  // Kept in fp32, nothing is cast.
  CHECK(load_peak(llama, plain_weights<fp32>::value, load_kind::fp32_on_device_then_cast).device ==
        bytes{4 * llama_parameters});
  CHECK_THROWS_WITH_AS(load_peak(llama, bnb_4bit<>::value, load_kind::fp32_on_device_then_cast),
                       doctest::Contains("load quantized weights directly"), error);
}

TEST_CASE("bitsandbytes quantizes each linear as it arrives: one 16-bit matrix beside the rest") {
  // NF4 for every linear of the layers (the head stays bf16): the largest is an MLP matrix,
  // 14,336 x 4,096 in bf16 before it is quantized; under TP 2 half of it.
  const loading_peak p = load_peak(llama, bnb_4bit<>::value, load_kind::direct);
  CHECK(p.weights == weight_bytes(llama, {}, bnb_4bit<>::value));
  CHECK(p.device == p.weights + bytes{2 * mlp_matrix});
  const loading_peak tp2 = load_peak(llama, bnb_4bit<>::value, load_kind::direct, {.tensor = 2});
  CHECK(tp2.device - tp2.weights == bytes{mlp_matrix});
  // From an fp32 checkpoint the matrix arrives in fp32.
  const loading_peak wide = load_peak(llama, bnb_4bit<>::value, load_kind::direct, {}, fp32::value);
  CHECK(wide.device - wide.weights == bytes{4 * mlp_matrix});
}

TEST_CASE("a broken layout is refused before it picks the stages to load") {
  // Fuzz-found: a pipeline degree of -2^63 overflowed while choosing the last stage.
  CHECK_THROWS_WITH_AS(load_peak(llama, plain_weights<bf16>::value, load_kind::direct,
                                 {.pipeline = std::numeric_limits<std::int64_t>::min()}),
                       doctest::Contains("pipeline"), error);
}
