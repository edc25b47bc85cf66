// Unit tier: the activation ledger against what PyTorch autograd saves, measured by
// tests/validation/saved_tensors.py (saved_tensors_hooks, deduplicated by storage) for small
// GPT-2-style and Llama-style blocks on the CPU, in fp32 and bf16. Target: within 1% per layer.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vramfit/activations.hpp>
#include <vramfit/hf_config.hpp>

using namespace vramfit;

TEST_CASE("per-layer activation bytes agree with PyTorch autograd's saved tensors") {
  std::ifstream in(std::string(VRAMFIT_TEST_DATA_DIR) + "/../validation/saved_tensors.json");
  REQUIRE(in.good());
  const nlohmann::json data = nlohmann::json::parse(in);
  const auto& rows = data.at("measurements");
  REQUIRE(rows.size() >= 16);
  for (const auto& r : rows) {
    const std::string family_name = r.at("family");
    const std::string dtype = r.at("dtype");
    const std::int64_t h = r.at("hidden"), heads = r.at("heads"), ffn = r.at("ffn");
    const std::int64_t s = r.at("seq"), b = r.at("batch");
    const bool gpt2 = family_name == "gpt2";
    const bool dropout = gpt2 && r.at("dropout").get<bool>();
    model m{.hidden = h, .layers = 3, .heads = heads, .ffn = ffn, .vocab = 100};
    if (gpt2) {
      m.family = family::gpt2;
      m.kv_heads = heads;
      m.head_dim = h / heads;
      m.mlp = mlp_kind::gelu;
      m.norm = norm_kind::layernorm;
      m.bias = bias_kind::all;
      m.positions = position_kind::learned;
      m.max_positions = s;
    } else {
      m.kv_heads = r.at("kv_heads");
      m.head_dim = r.at("head_dim");
    }
    const bool bf16_run = dtype == "bfloat16";
    const precision p = bf16_run ? pure<bf16>::value : fp32_training::value;
    const activation_options o{.micro_batch = b,
                               .sequence = s,
                               .attention = attention_kind::eager,
                               .attention_dropout = dropout,
                               .hidden_dropout = dropout,
                               // PyTorch's CPU dropout keeps its mask in the input's dtype.
                               .dropout_mask_bits = bf16_run ? 16 : 32};
    bytes predicted = layer_activation_bytes(m, p, o, {}, false, recompute_kind::none);
    // PyTorch 1.13 (Debian's python3-torch) saves the input of mean(dim) (MeanBackward1
    // _saved_self): in Hugging Face's RMSNorm that is x.pow(2), 4 bytes x tokens x hidden per
    // norm. PyTorch 2.x saves only its sizes (derivatives.yaml: mean.dim), as vramfit models.
    const std::int64_t tokens = s * b;
    if (!gpt2 && data.at("torch").get<std::string>().rfind("1.", 0) == 0)
      predicted += bytes{2 * 4 * tokens * h};
    const std::int64_t measured = r.at("middle_layer_bytes");
    CAPTURE(family_name);
    CAPTURE(dtype);
    CAPTURE(h);
    CAPTURE(measured);
    CAPTURE(predicted.count);
    const double error =
        std::abs(static_cast<double>(predicted.count - measured)) / static_cast<double>(measured);
    CHECK(error < 0.01);
  }
}

// Real Hugging Face decoder layers on an H200 with the GPU's kernels (torch 2.11, transformers
// 5.17; tests/validation/saved_tensors_hf.py): cuDNN attention in 16 bits and the
// memory-efficient kernel in fp32, Phi-3's fused projections, and the mask a sliding window
// makes (Phi-3's 2,047 and Mistral's 4,096, reached by 4,096 tokens). Each layer's bytes to the
// byte, but for the two int64 scalars (the dropout RNG's seed and offset) the attention kernels
// save, which vramfit leaves out.
TEST_CASE("per-layer bytes of Hugging Face models agree with autograd's saved tensors on a GPU") {
  const std::string dir = std::string(VRAMFIT_TEST_DATA_DIR) + "/../validation/";
  std::ifstream in(dir + "gpu/h200/saved_tensors_hf.json");
  REQUIRE(in.good());
  const nlohmann::json data = nlohmann::json::parse(in);
  const nlohmann::json& cases = data.at("cases");
  REQUIRE(cases.size() == 7);
  for (const nlohmann::json& c : cases) {
    std::ifstream config(dir + "../../" + c.at("config_file").get<std::string>());
    REQUIRE(config.good());
    const model m = model_from_hf_config(nlohmann::json::parse(config));
    const bool fp32 = c.at("dtype") == "fp32";
    const activation_options o{
        .micro_batch = c.at("batch"), .sequence = c.at("seq"), .attention = attention_kind::flash};
    const bytes predicted = layer_activation_bytes(
        m, fp32 ? fp32_training::value : pure<bf16>::value, o, {}, false, recompute_kind::none);
    const std::int64_t measured = c.at("per_layer_bytes").at(1);  // a middle layer
    CAPTURE(c.at("model").get<std::string>());
    CAPTURE(c.at("seq").get<std::int64_t>());
    CHECK(predicted.count + 16 == measured);
  }
}
