// Unit tier: the tensor ledger of small models, derived by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <vector>
#include <vramfit/presets.hpp>
#include <vramfit/tensors.hpp>

#include "tiny_llama.hpp"

using namespace vramfit;
using vramfit::testing::tiny_llama;

TEST_CASE("a tiny Llama's ledger, tensor by tensor") {
  const tensor_ledger ledger = tensors(tiny_llama);
  std::vector<std::string> names;
  std::map<std::string, std::int64_t> elements;
  for_each_tensor(ledger, [&](const tensor& t) {
    names.push_back(t.name);
    elements[t.name] = t.group->elements();
  });
  CHECK(layer_parameters(ledger, 0) == testing::tiny_llama_layer_parameters);
  CHECK(layer_parameters(ledger, 1) == testing::tiny_llama_layer_parameters);
  CHECK(layer_parameters(ledger, 2) == 0);
  CHECK(parameters(ledger) == testing::tiny_llama_parameters);
  CHECK(parameter_tensors(ledger) == testing::tiny_llama_tensors);
  CHECK(names.size() == 21);
  CHECK(names.front() == "model.embed_tokens.weight");
  CHECK(names.back() == "lm_head.weight");
  CHECK(elements.at("model.layers.1.self_attn.k_proj.weight") == 32);
  CHECK(elements.at("model.layers.0.mlp.down_proj.weight") == 128);
  CHECK(parameters(ledger, tensor_kind::attention) == 2 * (64 + 32 + 32 + 64));
  CHECK(parameters(ledger, tensor_kind::mlp) == 2 * 3 * 128);
  CHECK(parameters(ledger, tensor_kind::norm) == 2 * 16 + 8);
  CHECK(parameters(ledger, tensor_kind::embedding) == 80);
  CHECK(parameters(ledger, tensor_kind::head) == 80);
}

TEST_CASE("kinds partition the parameters for every preset") {
  for (const preset& p : presets) {
    CAPTURE(p.key);
    const tensor_ledger ledger = tensors(p.value);
    std::int64_t sum = 0;
    for (int k = 0; k < tensor_kind_count; ++k)
      sum += parameters(ledger, static_cast<tensor_kind>(k));
    CHECK(sum == parameters(ledger));
    std::int64_t expanded = 0;
    std::int64_t count = 0;
    for_each_tensor(ledger, [&](const tensor& t) {
      if (t.group->role == tensor_role::parameter) {
        expanded += t.group->elements();
        ++count;
      }
    });
    CHECK(expanded == parameters(ledger));
    CHECK(count == parameter_tensors(ledger));
  }
}

TEST_CASE("Mixtral's experts and router, by hand") {
  const model& m = models::mixtral_8x7b::value;
  const tensor_ledger ledger = tensors(m);
  // One expert: 3 x 4096 x 14336 = 176,160,768 (seed 003: "about 1.76e8, 352 MB in bf16").
  const std::int64_t expert = 3LL * 4096 * 14336;
  CHECK(expert == 176'160'768);
  CHECK(parameters(ledger, tensor_kind::expert) == expert * 8 * 32);
  CHECK(parameters(ledger, tensor_kind::router) == 4096LL * 8 * 32);  // seed 003 case A
  std::int64_t experts_seen = 0;
  for_each_tensor(ledger, [&](const tensor& t) {
    if (t.name == "model.layers.31.block_sparse_moe.experts.7.w2.weight") {
      CHECK(t.layer == 31);
      CHECK(t.expert == 7);
      CHECK(t.group->elements() == 4096LL * 14336);
    }
    if (t.expert >= 0) ++experts_seen;
  });
  CHECK(experts_seen == 3 * 8 * 32);
}

TEST_CASE("the largest layer") {
  // DeepSeek-V3: dense layers 0-2 are smaller than the MoE layers; all MoE layers are equal, so
  // the first MoE layer (3) is the largest.
  const tensor_ledger v3 = tensors(models::deepseek_v3::value);
  const layer_size largest = largest_layer(v3, 61);
  CHECK(largest.layer == 3);
  // MLA attention: q_a 1536x7168 + q_a norm 1536 + q_b (128*192)x1536 + kv_a 576x7168 +
  // kv_a norm 512 + kv_b (128*256)x512 + o 7168x(128*128); 2 norms of 7168; router 256x7168;
  // 257 experts (256 routed + 1 shared) of 3 x 7168 x 2048.
  const std::int64_t attention = 1536LL * 7168 + 1536 + 128LL * 192 * 1536 + 576LL * 7168 + 512 +
                                 128LL * 256 * 512 + 7168LL * 128 * 128;
  CHECK(largest.parameters == attention + 2 * 7168 + 256LL * 7168 + 257LL * 3 * 7168 * 2048);
  // A dense model: every layer is the same size, the first one wins.
  CHECK(largest_layer(tensors(models::llama_3_8b::value), 32).layer == 0);
}

TEST_CASE("families name and fuse tensors as their implementations do") {
  auto first_names = [](const model& m) {
    std::vector<std::string> names;
    for_each_tensor(tensors(m), [&](const tensor& t) {
      if (t.layer <= 0) names.push_back(t.name);
    });
    return names;
  };
  const auto gpt2 = first_names(models::gpt2::value);
  CHECK(std::find(gpt2.begin(), gpt2.end(), "transformer.h.0.attn.c_attn.weight") != gpt2.end());
  const auto phi3 = first_names(models::phi_3_mini::value);
  CHECK(std::find(phi3.begin(), phi3.end(), "model.layers.0.self_attn.qkv_proj.weight") !=
        phi3.end());
  CHECK(std::find(phi3.begin(), phi3.end(), "model.layers.0.mlp.gate_up_proj.weight") !=
        phi3.end());
  const auto falcon = first_names(models::falcon_7b::value);
  CHECK(std::find(falcon.begin(), falcon.end(),
                  "transformer.h.0.self_attention.query_key_value.weight") != falcon.end());
  const auto vit = first_names(models::vit_l_16::value);
  CHECK(std::find(vit.begin(), vit.end(),
                  "encoder.layers.encoder_layer_0.self_attention.in_proj_weight") != vit.end());
  // Falcon-7B's fused QKV: 71 query heads + 1 K + 1 V head of 64 -> 4672 x 4544.
  for (const tensor_group& g : tensors(models::falcon_7b::value)) {
    if (g.name.str().find("query_key_value") != std::string::npos) {
      CHECK(g.shape[0] == 4672);
      CHECK(g.shape[1] == 4544);
    }
  }
}

TEST_CASE("gpt-oss: fused experts listed one slice per expert, router and sinks") {
  const tensor_ledger ledger = tensors(models::gpt_oss_20b::value);
  std::map<std::string, const tensor_group*> named;
  for_each_tensor(ledger, [&](const tensor& t) { named[t.name] = t.group; });
  // modeling_gpt_oss.py: gate_up_proj [E, h, 2f] and down_proj [E, f, h] are [in, out] per expert.
  const tensor_group* gate_up = named.at("model.layers.23.mlp.experts.gate_up_proj[31]");
  CHECK(gate_up->shape[0] == 2880);
  CHECK(gate_up->shape[1] == 5760);
  CHECK(gate_up->input_major);
  CHECK(named.at("model.layers.0.mlp.experts.down_proj_bias[0]")->elements() == 2880);
  CHECK(named.at("model.layers.0.mlp.router.bias")->kind == tensor_kind::router);
  CHECK(named.at("model.layers.0.self_attn.sinks")->elements() == 64);
  CHECK(named.at("model.layers.0.self_attn.o_proj.bias")->elements() == 2880);
  // Router: 32 x 2880 weights and 32 biases in each of 24 layers.
  CHECK(parameters(ledger, tensor_kind::router) == 24 * (32 * 2880 + 32));
}
