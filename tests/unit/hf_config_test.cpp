// Unit tier: Hugging Face config.json import. tests/data/hf/<preset>.json are configs written from
// the public field names of each model's config.json; import and preset must agree exactly.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>
#include <vramfit/hf_config.hpp>
#include <vramfit/hf_quantization.hpp>
#include <vramfit/inference.hpp>
#include <vramfit/presets.hpp>
#include <vramfit/tensors.hpp>

using namespace vramfit;
using nlohmann::json;

namespace {
const std::filesystem::path data_dir = VRAMFIT_TEST_DATA_DIR;

json llama_config() {
  return json::parse(R"({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 128256})");
}
}  // namespace

TEST_CASE("import and preset agree for every preset") {
  for (const preset& p : presets) {
    const std::string key = p.key;
    CAPTURE(key);
    model imported = load_hf_config(data_dir / "hf" / (std::string(p.key) + ".json"));
    CHECK(std::string(imported.name) == p.key);
    // What config.json cannot say: the display name, and whether an older transformers version
    // wrote rotary buffers into the checkpoint.
    detail::copy_name(imported.name, p.value.name);
    imported.checkpoint_rotary_buffers = p.value.checkpoint_rotary_buffers;
    CHECK(imported == p.value);
    CHECK(parameters(tensors(imported)) == parameters(tensors(p.value)));
  }
}

TEST_CASE("a config names the model after its folder") {
  const auto dir = std::filesystem::temp_directory_path() / "vramfit-test" / "My-Model";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << llama_config().dump();
  CHECK(std::string(load_hf_config(dir / "config.json").name) == "My-Model");
}

TEST_CASE("bad configs are errors that name the field or the rule") {
  json c = llama_config();
  c.erase("hidden_size");
  CHECK_THROWS_WITH(model_from_hf_config(c),
                    "vramfit: config.json (model_type 'llama'): missing field 'hidden_size'");

  c = llama_config();
  c["num_attention_heads"] = "32";
  CHECK_THROWS_WITH(model_from_hf_config(c),
                    "vramfit: config.json (model_type 'llama'): field "
                    "'num_attention_heads' must be an integer, got \"32\"");

  c = llama_config();
  c["num_key_value_heads"] = 5;
  CHECK_THROWS_WITH(
      model_from_hf_config(c, "odd"),
      "vramfit: model 'odd': attention heads (32) must be a multiple of KV heads (5)");

  c = llama_config();
  c["hidden_size"] = 1.29e93;  // a whole number no int64 holds (the config fuzzer's find)
  CHECK_THROWS_WITH(model_from_hf_config(c),
                    "vramfit: config.json (model_type 'llama'): field 'hidden_size' must be an "
                    "integer, got 1.29e+93");

  c = llama_config();
  c["num_hidden_layers"] = -2;
  CHECK_THROWS_WITH(model_from_hf_config(c, "neg"),
                    "vramfit: model 'neg': layers must be positive, got -2");

  c = llama_config();
  c["tie_word_embeddings"] = "yes";
  CHECK_THROWS_WITH(model_from_hf_config(c), doctest::Contains("must be true or false"));

  c = llama_config();
  c["model_type"] = "mamba";
  CHECK_THROWS_WITH(model_from_hf_config(c),
                    doctest::Contains("model_type 'mamba' is not supported; "
                                      "supported: gpt2, llama"));
  c.erase("model_type");
  CHECK_THROWS_WITH(model_from_hf_config(c), doctest::Contains("missing field 'model_type'"));
  CHECK_THROWS_WITH(model_from_hf_config(json::array()), doctest::Contains("a JSON object"));

  json mixtral = llama_config();
  mixtral["model_type"] = "mixtral";
  mixtral["num_local_experts"] = 8;
  mixtral["num_experts_per_tok"] = 9;
  CHECK_THROWS_WITH(model_from_hf_config(mixtral, "m"),
                    "vramfit: model 'm': top-k (9) must be between 1 and the routed experts (8)");
  mixtral.erase("num_local_experts");
  CHECK_THROWS_WITH(model_from_hf_config(mixtral),
                    doctest::Contains("missing field 'num_local_experts'"));
}

TEST_CASE("unreadable and malformed files are errors") {
  CHECK_THROWS_WITH(load_hf_config(data_dir / "no-such-file.json"),
                    doctest::Contains("no-such-file.json' does not exist"));
  const auto bad = std::filesystem::temp_directory_path() / "vramfit-test-bad.json";
  std::ofstream(bad) << "{\"model_type\": \"llama\", ";
  CHECK_THROWS_WITH(load_hf_config(bad), doctest::Contains("is not valid JSON"));
  // A number past a double is refused as the file's fault, without nlohmann's exception id
  // (fuzz_launcher found it uncaught: out_of_range.406, not a parse_error).
  std::ofstream(bad) << R"({"model_type": "llama", "hidden_size": 1e888888888888889})";
  CHECK_THROWS_WITH(load_hf_config(bad),
                    doctest::Contains("is not valid JSON: number overflow parsing "
                                      "'1e888888888888889'"));
  try {
    load_hf_config(bad);
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("json.exception") == std::string::npos);
  }
}

TEST_CASE("optional fields take their Hugging Face defaults") {
  json c = llama_config();
  c.erase("num_key_value_heads");  // LlamaConfig: defaults to num_attention_heads
  const model m = model_from_hf_config(c);
  CHECK(m.kv_heads == 32);
  CHECK(m.head_dim == 128);  // hidden / heads
  CHECK_FALSE(m.tied_embeddings);
  c["attention_bias"] = true;  // q, k, v and o biases
  CHECK(parameters(tensors(model_from_hf_config(c))) ==
        parameters(tensors(m)) + 32 * (4096 + 4096 + 4096 + 4096));
}

namespace {
json config_of(const char* file) {
  std::ifstream in(data_dir / "hf" / (std::string(file) + ".json"));
  return json::parse(in);
}
std::int64_t count_of(const char* file) {
  return parameters(tensors(load_hf_config(data_dir / "hf" / (std::string(file) + ".json"))));
}
/// Whether `n` rounds to `tenths` tenths of `unit` (20.9B: 209, 1e8).
bool rounds_to(std::int64_t n, std::int64_t tenths, std::int64_t unit) {
  return (10 * n + unit / 2) / unit == tenths;
}
}  // namespace

TEST_CASE("Falcon-40B: new_decoder_architecture, grouped K/V heads and two LayerNorms") {
  // tiiuae/falcon-40b's config.json fields. By hand, per layer: query_key_value 8,192 x (128 +
  // 2 x 8) heads of 64 = 75,497,472; dense 8,192 x 8,192; dense_h_to_4h and dense_4h_to_h
  // 2 x 8,192 x 32,768 (4 x hidden); ln_attn and ln_mlp, a weight and a bias each, 4 x 8,192; no
  // biases (bias false). The tied embedding 65,024 x 8,192 once, and ln_f's weight and bias.
  const model m = load_hf_config(data_dir / "hf" / "falcon-40b.json");
  CHECK(m.family == family::falcon);
  CHECK(m.norms_per_layer == 2);
  CHECK(m.kv_heads == 8);
  CHECK(m.head_dim == 64);
  CHECK(m.parallel_block);
  CHECK(m.tied_embeddings);
  const std::int64_t qkv = 8192LL * (128 + 2 * 8) * 64;
  CHECK(qkv == 75'497'472);
  const std::int64_t layer = qkv + 8192LL * 8192 + 2 * 8192LL * 32768 + 4 * 8192;
  CHECK(layer == 679'510'016);
  CHECK(parameters(tensors(m)) == 60 * layer + 65024LL * 8192 + 2 * 8192);
  CHECK(parameters(tensors(m)) == 41'303'293'952);
}

TEST_CASE("Qwen3: per-head q_norm and k_norm of head_dim") {
  const model m = load_hf_config(data_dir / "hf" / "qwen3-0.6b.json");
  CHECK(m.qk_norm);
  CHECK(m.head_dim == 128);  // explicit: hidden 1024 / 16 heads would be 64
  std::int64_t q_norm = 0, k_norm = 0;
  for_each_tensor(tensors(m), [&](const tensor& t) {
    if (t.name == "model.layers.27.self_attn.q_norm.weight") q_norm = t.group->elements();
    if (t.name == "model.layers.27.self_attn.k_norm.weight") k_norm = t.group->elements();
  });
  CHECK(q_norm == 128);
  CHECK(k_norm == 128);
  // Model card: 0.6B, of which 0.44B non-embedding (tied: the embedding once); keras-hub's
  // exact 596,049,920 is in presets_test.cpp.
  CHECK(rounds_to(count_of("qwen3-0.6b"), 6, 1'000'000'000));
  CHECK((count_of("qwen3-0.6b") - 151936LL * 1024 + 5'000'000) / 10'000'000 == 44);
}

TEST_CASE("Qwen3-MoE: experts in every layer unless mlp_only_layers lists the first ones") {
  json c = config_of("qwen3-30b-a3b");
  const model all_moe = model_from_hf_config(c);
  CHECK(all_moe.moe.layout == moe_layout::mlp_experts);
  bool named = false;
  for_each_tensor(tensors(all_moe), [&](const tensor& t) {
    if (t.name == "model.layers.47.mlp.experts.127.down_proj.weight") named = true;
    CHECK(t.name.find("block_sparse_moe") == std::string::npos);
  });
  CHECK(named);
  // Two dense layers of intermediate_size 6144 in place of two MoE layers: each swaps a router
  // (128 x 2048) and 128 experts (3 x 2048 x 768) for one MLP of 3 x 2048 x 6144.
  c["mlp_only_layers"] = {0, 1};
  CHECK(parameters(tensors(model_from_hf_config(c))) ==
        30'532'122'624 - 2 * (128LL * 2048 + 128LL * 3 * 2048 * 768) + 2 * 3LL * 2048 * 6144);
  c["mlp_only_layers"] = {1};
  CHECK_THROWS_WITH(model_from_hf_config(c),
                    doctest::Contains("mlp_only_layers other than the first layers"));
  c["mlp_only_layers"] = json::array();
  c["decoder_sparse_step"] = 2;
  CHECK_THROWS_WITH(model_from_hf_config(c),
                    "vramfit: config.json (model_type 'qwen3_moe'): decoder_sparse_step = 2 is "
                    "not modelled (only every layer, 1)");
}

TEST_CASE("gpt-oss: exact counts by hand, the model card's figures and its MXFP4 checkpoints") {
  // Per layer: q 4096 x 2880, k and v 512 x 2880, o 2880 x 4096, each with a bias; 64 sinks;
  // router 32 x 2880 + 32; per expert gate_up 2880 x 5760 + 5760 and down 2880 x 2880 + 2880;
  // two norms of 2880. Outside: embedding and head 201088 x 2880, final norm 2880.
  const std::int64_t attention =
      4096LL * 2880 + 4096 + 2 * (512LL * 2880 + 512) + 2880LL * 4096 + 2880 + 64;
  const std::int64_t expert = 2880LL * 5760 + 5760 + 2880LL * 2880 + 2880;
  const std::int64_t outside = 2 * 201088LL * 2880 + 2880;
  auto total = [&](std::int64_t layers, std::int64_t experts) {
    return outside + layers * (attention + experts * (2880 + 1) + experts * expert + 2 * 2880);
  };
  CHECK(count_of("gpt-oss-20b") == total(24, 32));
  CHECK(count_of("gpt-oss-120b") == total(36, 128));
  CHECK(total(24, 32) == 20'914'757'184);
  CHECK(total(36, 128) == 116'829'156'672);
  // Model card (arXiv 2508.10925): 20.9B and 116.8B total; 3.6B and 5.1B active per token, which
  // leaves out the embedding table (a lookup).
  CHECK(rounds_to(total(24, 32), 209, 1'000'000'000));
  CHECK(rounds_to(total(36, 128), 1168, 1'000'000'000));
  const model small = models::gpt_oss_20b::value, large = models::gpt_oss_120b::value;
  const std::int64_t embedding = 201088LL * 2880;
  CHECK(active_parameters(small, tensors(small)) == total(24, 32) - 24 * 28 * expert);
  CHECK(rounds_to(active_parameters(small, tensors(small)) - embedding, 36, 1'000'000'000));
  CHECK(rounds_to(active_parameters(large, tensors(large)) - embedding, 51, 1'000'000'000));
  // Checkpoints: the expert matrices in MXFP4 (4 bits and one E8M0 scale byte per 32 values:
  // 17/32 bytes each), everything else in bf16. Model card: 12.8 GiB and 60.8 GiB.
  auto checkpoint = [&](std::int64_t layers, std::int64_t experts) {
    const std::int64_t matrices = layers * experts * (2880LL * 5760 + 2880LL * 2880);
    return matrices / 32 * 17 + 2 * (total(layers, experts) - matrices);
  };
  CHECK(weight_bytes(small, {}, mxfp4_experts::value).count == checkpoint(24, 32));
  CHECK(weight_bytes(large, {}, mxfp4_experts::value).count == checkpoint(36, 128));
  CHECK(rounds_to(checkpoint(24, 32), 128, std::int64_t{1} << 30));
  CHECK(rounds_to(checkpoint(36, 128), 608, std::int64_t{1} << 30));
  // Every other layer from layer 0 keeps a 128-token window: at 1,000 tokens 12 layers keep 128
  // and 12 keep 1,000, 8 KV heads of 64 in bf16 each.
  const request_shape r{.prompt = 1000};
  CHECK(kv_cache_bytes(small, {}, {}, r).count == 2 * 8 * 64 * 2 * (12 * 1000 + 12 * 128));
}

TEST_CASE("a hidden size whose default MLP width overflows is refused by name") {
  // GPT2Config's and GPTBigCodeConfig's n_inner defaults to 4 x n_embd; the config fuzzer's find
  // was n_embd = INT64_MIN, whose product overflowed before any check.
  for (const char* file : {"gpt2", "starcoder"}) {
    json c = config_of(file);
    c.erase("n_inner");
    c["n_embd"] = std::numeric_limits<std::int64_t>::min();
    CHECK_THROWS_WITH(model_from_hf_config(c),
                      doctest::Contains("field 'n_embd' = -9223372036854775808: 4 x it, the MLP "
                                        "width's default, overflows int64"));
  }
}

TEST_CASE("Gemma 2: (1 + weight) norms, and soft-capping unless a field is null") {
  // Gemma2Config's defaults (attn_logit_softcapping 50.0, final_logit_softcapping 30.0) cap;
  // null turns a soft-capping off (modeling_gemma2.py: `if ... is not None`).
  json c = config_of("gemma-2-9b");
  const model capped = model_from_hf_config(c);
  CHECK(capped.norm_plus_one);
  CHECK(capped.attention_softcap);
  CHECK(capped.logit_softcap);
  const model& preset = models::gemma_2_9b::value;
  CHECK((preset.norm_plus_one && preset.attention_softcap && preset.logit_softcap));
  c.erase("attn_logit_softcapping");
  CHECK(model_from_hf_config(c).attention_softcap);
  c["attn_logit_softcapping"] = nullptr;
  c["final_logit_softcapping"] = nullptr;
  CHECK_FALSE(model_from_hf_config(c).attention_softcap);
  CHECK_FALSE(model_from_hf_config(c).logit_softcap);
  c["final_logit_softcapping"] = -30.0;
  CHECK_THROWS_WITH(
      model_from_hf_config(c),
      doctest::Contains("field 'final_logit_softcapping' must be a positive number or null"));
  CHECK_FALSE(model_from_hf_config(config_of("llama-3-8b")).norm_plus_one);
}

TEST_CASE("Gemma 3: Gemma 2's block with q_norm and k_norm, five windows to a global layer") {
  // google/gemma-3-1b-it (model_type gemma3_text). By hand: the embedding 262,144 x 1,152
  // (tied); per layer q 1,152 x 1,024, k and v 1,152 x 256, o 1,024 x 1,152, gate, up and down
  // 3 x 1,152 x 6,912, four norms of 1,152, q_norm and k_norm of 256; a final norm.
  const model m = load_hf_config(data_dir / "hf" / "gemma-3-1b-it.json");
  const std::int64_t layer =
      1152 * 1024 + 2 * 1152 * 256 + 1024 * 1152 + 3 * 1152 * 6912 + 4 * 1152 + 2 * 256;
  CHECK(parameters(tensors(m)) == 262'144LL * 1152 + 26 * layer + 1152);
  CHECK(parameters(tensors(m)) == 999'885'952);
  CHECK((m.norm_plus_one && m.qk_norm && m.norms_per_layer == 4 && m.tied_embeddings));
  // Gemma3TextConfig leaves soft-capping off (None) unless a field sets it.
  CHECK_FALSE(m.attention_softcap);
  CHECK_FALSE(m.logit_softcap);
  // Layer i has the 512-token window unless (i + 1) % 6 == 0: 22 of the 26 layers.
  CHECK(m.sliding_window == 512);
  CHECK(detail::sliding_layers(m, 0, 26) == 22);
  CHECK(detail::sliding_layers(m, 5, 7) == 5);  // layers 5 to 11, of which 5 and 11 are global
  // Newer transformers list the same pattern in layer_types.
  json c = config_of("gemma-3-1b-it");
  c.erase("sliding_window_pattern");
  c["layer_types"] = json::array();
  for (int i = 0; i < 26; ++i)
    c["layer_types"].push_back((i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
  CHECK(model_from_hf_config(c) == model_from_hf_config(config_of("gemma-3-1b-it")));
  c.erase("layer_types");
  c["sliding_window_pattern"] = 1;  // every layer global
  CHECK(model_from_hf_config(c).sliding_window == 0);
  c["sliding_window_pattern"] = 6;
  c["sliding_window"] = nullptr;  // the layers get None: no window anywhere
  CHECK(model_from_hf_config(c).sliding_window == 0);
  c.erase("sliding_window");  // Gemma3TextConfig's default
  CHECK(model_from_hf_config(c).sliding_window == 4096);
  for (const char* pattern : {"0", "65"}) {
    c["sliding_window_pattern"] = std::stoi(pattern);
    const std::string refusal =
        std::string("field 'sliding_window_pattern' must be from 1 to 64, got ") + pattern;
    CHECK_THROWS_WITH(model_from_hf_config(c), doctest::Contains(refusal.c_str()));
  }
  // google/gemma-3-4b-it: Gemma3Config's text_config names five fields; Gemma3TextConfig's
  // defaults give the rest (8 heads, 4 KV heads of 256, vocabulary 262,208). By hand, the text
  // decoder alone: per layer q 2,560 x 2,048, k and v 2,560 x 1,024, o 2,048 x 2,560, the MLP
  // 3 x 2,560 x 10,240, norms 4 x 2,560 + 2 x 256.
  const model four = load_hf_config(data_dir / "hf" / "gemma-3-4b-it.json");
  const std::int64_t four_layer =
      2560 * 2048 + 2 * 2560 * 1024 + 2048 * 2560 + 3 * 2560 * 10240 + 4 * 2560 + 2 * 256;
  CHECK(parameters(tensors(four)) == 262'208LL * 2560 + 34 * four_layer + 2560);
  CHECK(detail::sliding_layers(four, 0, 34) == 29);
}

TEST_CASE("gpt-oss: layer_types decide the windows") {
  json c = config_of("gpt-oss-20b");
  c["layer_types"] = json::array();
  for (int i = 0; i < 24; ++i) c["layer_types"].push_back("sliding_attention");
  CHECK(model_from_hf_config(c).sliding_window_period == 1);
  for (auto& t : c["layer_types"]) t = "full_attention";
  CHECK(model_from_hf_config(c).sliding_window == 0);
  c["layer_types"][1] = "sliding_attention";
  CHECK_THROWS_WITH(
      model_from_hf_config(c),
      doctest::Contains("layer_types starting with a full-attention layer are not modelled"));
  // A run of one window and two full layers, broken at layer 3.
  for (auto& t : c["layer_types"]) t = "sliding_attention";
  c["layer_types"][1] = c["layer_types"][2] = "full_attention";
  CHECK_THROWS_WITH(model_from_hf_config(c),
                    doctest::Contains("only 1 sliding layers then 2 full ones, repeated, are "
                                      "modelled; layer 4 differs"));
  c["layer_types"].erase(0);
  CHECK_THROWS_WITH(model_from_hf_config(c),
                    doctest::Contains("'layer_types' must list one type per layer (24)"));
  c.erase("layer_types");  // GptOssConfig's default: alternating from a sliding layer 0
  CHECK(model_from_hf_config(c) == model_from_hf_config(config_of("gpt-oss-20b")));
}

TEST_CASE("GPTBigCode: SantaCoder and StarCoder by hand, MQA, learned positions, tied") {
  // Per layer: two LayerNorms (2 x 2 x h), c_attn (h + 2 x 128) x h + its bias, c_proj h x h + h,
  // c_fc 4h x h + 4h, c_proj h x 4h + h. Outside: wte vocab x h, wpe positions x h, ln_f 2h.
  auto total = [](std::int64_t h, std::int64_t layers, std::int64_t vocab, std::int64_t positions) {
    const std::int64_t layer =
        4 * h + (h + 256) * h + (h + 256) + h * h + h + 4 * h * h + 4 * h + 4 * h * h + h;
    return vocab * h + positions * h + layers * layer + 2 * h;
  };
  const model santacoder = load_hf_config(data_dir / "hf" / "gpt_bigcode-santacoder.json");
  CHECK(santacoder.kv_heads == 1);
  CHECK(santacoder.tied_embeddings);
  CHECK_FALSE(santacoder.gelu_in_python);  // gelu_pytorch_tanh
  CHECK(parameters(tensors(santacoder)) == total(2048, 24, 49280, 2048));
  CHECK(total(2048, 24, 49280, 2048) == 1'124'886'528);
  // "1.1B" (bigcode/santacoder model card) and "15.5B" (StarCoder paper, arXiv 2305.06161); the
  // exact 15,517,456,384 is also what published tables list for StarCoder-15B fine-tunes.
  CHECK(rounds_to(1'124'886'528, 11, 1'000'000'000));
  CHECK(count_of("starcoder") == total(6144, 40, 49152, 8192));
  CHECK(total(6144, 40, 49152, 8192) == 15'517'456'384);
  json c = config_of("gpt_bigcode-santacoder");
  c["multi_query"] = false;  // c_attn becomes 3h x h + 3h: K and V grow from 128 to 2048 rows
  CHECK(parameters(tensors(model_from_hf_config(c))) ==
        1'124'886'528 + 24 * 2 * (2048LL - 128) * (2048 + 1));
  c["add_cross_attention"] = true;
  CHECK_THROWS_WITH(model_from_hf_config(c), doctest::Contains("add_cross_attention = true"));
}

TEST_CASE("DistilBERT: DistilBertModel, and its sequence classifier") {
  const model m = load_hf_config(data_dir / "hf" / "distilbert-base-uncased.json");
  CHECK(m.family == family::distilbert);
  CHECK(m.dropout);
  // DistilBertForSequenceClassification with 2 labels: pre_classifier 768 x 768 + 768 and
  // classifier 2 x 768 + 2 (Keras's summary of TFDistilBertForSequenceClassification: 590,592
  // and 1,538, total 66,955,010).
  json c = config_of("distilbert-base-uncased");
  c["architectures"] = {"DistilBertForSequenceClassification"};
  c["id2label"] = {{"0", "NEGATIVE"}, {"1", "POSITIVE"}};
  CHECK(parameters(tensors(model_from_hf_config(c))) == 66'955'010);
  CHECK(66'955'010 == 66'362'880 + 768 * 768 + 768 + 2 * 768 + 2);
  c["sinusoidal_pos_embds"] = true;
  CHECK_THROWS_WITH(model_from_hf_config(c), doctest::Contains("sinusoidal_pos_embds = true"));
}

TEST_CASE("dropout a config leaves out takes its configuration class's default") {
  // DistilBertConfig: dropout = attention_dropout = 0.1; GPT2Config: resid_pdrop, embd_pdrop,
  // attn_pdrop = 0.1; LlamaConfig: attention_dropout = 0.0.
  json d = config_of("distilbert-base-uncased");
  d.erase("dropout");
  d.erase("attention_dropout");
  CHECK(model_from_hf_config(d).dropout);
  d["dropout"] = 0.0;
  CHECK(model_from_hf_config(d).dropout);  // attention_dropout still 0.1
  d["attention_dropout"] = nullptr;        // null: the default too
  CHECK(model_from_hf_config(d).dropout);
  d["attention_dropout"] = 0.0;
  CHECK_FALSE(model_from_hf_config(d).dropout);
  json g = config_of("gpt2");
  for (const char* f : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) g[f] = 0.0;
  CHECK_FALSE(model_from_hf_config(g).dropout);
  g.erase("attn_pdrop");
  CHECK(model_from_hf_config(g).dropout);
  json l = llama_config();
  l.erase("attention_dropout");
  CHECK_FALSE(model_from_hf_config(l).dropout);
}

TEST_CASE("BigBird: BERT's tensors with 4,096 positions and a classifier with a dense layer") {
  const model m = load_hf_config(data_dir / "hf" / "bigbird-roberta-base.json");
  CHECK(m.family == family::bert);
  CHECK(m.gelu_in_python);  // hidden_act gelu_new
  // BigBirdModel: word 50358 x 768, positions 4096 x 768, token types 2 x 768, embedding
  // LayerNorm; 12 BERT layers of 7,087,872 (4 x (768^2 + 768), 768 x 3072 + 3072,
  // 3072 x 768 + 768, two LayerNorms); pooler 768^2 + 768.
  const std::int64_t layer = 4 * (768 * 768 + 768) + 768 * 3072 + 3072 + 3072 * 768 + 768 + 4 * 768;
  CHECK(layer == 7'087'872);
  const std::int64_t base =
      50358LL * 768 + 4096 * 768 + 2 * 768 + 2 * 768 + 12 * layer + 768 * 768 + 768;
  CHECK(parameters(tensors(m)) == base);
  CHECK(base == 127'468'800);
  // The Hub's "128M" for google/bigbird-roberta-base is the checkpoint's BigBirdForPreTraining:
  // with its heads (transform 768^2 + 768 and LayerNorm, decoder bias 50358 on the tied
  // embedding, next-sentence 2 x 768 + 2) it rounds to 128M.
  CHECK((base + 768 * 768 + 768 + 2 * 768 + 50358 + 2 * 768 + 2 + 500'000) / 1'000'000 == 128);
  json c = config_of("bigbird-roberta-base");
  c["architectures"] = {"BigBirdForSequenceClassification"};
  c["num_labels"] = 2;
  // BigBirdClassificationHead: dense 768 x 768 + 768, out_proj 2 x 768 + 2.
  CHECK(parameters(tensors(model_from_hf_config(c))) == base + 768 * 768 + 768 + 2 * 768 + 2);
  c["use_bias"] = false;
  CHECK_THROWS_WITH(model_from_hf_config(c), doctest::Contains("use_bias = false"));
}

TEST_CASE("Mistral 3: the text decoder of text_config, the vision tower not counted") {
  // Mistral-Small-3.1-24B: the text decoder is Mistral-Small-24B's, 23,572,403,200 (keras-hub
  // magistral_small_2506_en and devstral_small_1_1, the same decoder). The Pixtral vision
  // encoder (403,305,472) and the projector (35,652,608) make the Hub's 24.0B; neither is here.
  const model m = load_hf_config(data_dir / "hf" / "mistral-small-3.1-24b.json");
  CHECK(parameters(tensors(m)) == 23'572'403'200);
  CHECK(std::string(m.name) == "mistral-small-3.1-24b");
  CHECK(m.sliding_window == 0);  // sliding_window null
  json c = config_of("mistral-small-3.1-24b");
  c["text_config"].erase("model_type");  // Mistral3Config: a MistralConfig by default
  CHECK(model_from_hf_config(c) == model_from_hf_config(config_of("mistral-small-3.1-24b")));
  c["text_config"].erase("hidden_size");
  CHECK_THROWS_WITH(model_from_hf_config(c),
                    "vramfit: config.json text_config (model_type 'mistral'): missing field "
                    "'hidden_size'");
  c.erase("text_config");
  CHECK_THROWS_WITH(model_from_hf_config(c),
                    "vramfit: config.json (model_type 'mistral3'): missing field 'text_config' "
                    "(the text decoder's configuration)");
  c = config_of("mistral-small-3.1-24b");
  c["model_type"] = "llava";  // Pixtral-12B's config: LlavaConfig with a Mistral text_config
  CHECK(parameters(tensors(model_from_hf_config(c))) == 23'572'403'200);
}

TEST_CASE("quantization_config: the weight layout a checkpoint loads as") {
  // transformers utils/quantization_config.py: GPTQConfig(bits, group_size, desc_act),
  // AwqConfig, BitsAndBytesConfig, FineGrainedFP8Config, Mxfp4Config.
  auto layout = [](const char* q) {
    json c = llama_config();
    c["quantization_config"] = json::parse(q);
    return hf_weight_layout(c);
  };
  CHECK_FALSE(hf_weight_layout(llama_config()).has_value());
  const model m = model_from_hf_config(llama_config());
  auto bytes_of = [&](const weight_layout& w) { return weight_bytes(m, {}, w); };
  CHECK(bytes_of(*layout(R"({"quant_method": "gptq", "bits": 4, "group_size": 128})")) ==
        bytes_of(gptq<>::value));
  CHECK(bytes_of(*layout(R"({"quant_method": "gptq", "bits": 4, "group_size": 128,
                             "desc_act": true})")) == bytes_of(gptq<4, 128, true>::value));
  CHECK(bytes_of(*layout(R"({"quant_method": "gptq", "bits": 8, "group_size": 64})")) ==
        bytes_of(gptq<8, 64>::value));
  CHECK(bytes_of(*layout(R"({"quant_method": "awq", "bits": 4, "group_size": 128})")) ==
        bytes_of(awq<>::value));
  CHECK(std::string(layout(R"({"quant_method": "bitsandbytes", "load_in_4bit": true,
      "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true})")
                        ->name) == bnb_4bit<>::value.name);
  CHECK(std::string(layout(R"({"quant_method": "bitsandbytes", "load_in_4bit": true,
      "bnb_4bit_quant_type": "fp4"})")
                        ->name) == bnb_4bit<fp4>::value.name);
  CHECK(std::string(layout(R"({"quant_method": "bitsandbytes", "load_in_8bit": true})")->name) ==
        bnb_int8::value.name);
  CHECK(std::string(layout(R"({"quant_method": "fp8", "weight_block_size": [128, 128]})")->name) ==
        fp8_weights<>::value.name);
  CHECK(std::string(layout(R"({"quant_method": "mxfp4"})")->name) == mxfp4_experts::value.name);
  // GPTQ's group_size -1: one scale per output row.
  const weight_layout per_row = *layout(R"({"quant_method": "gptq", "bits": 4, "group_size": -1})");
  CHECK(bytes_of(per_row) < bytes_of(gptq<>::value));
  CHECK_THROWS_WITH(layout(R"({"quant_method": "bitsandbytes"})"),
                    doctest::Contains("neither load_in_4bit nor load_in_8bit"));
  CHECK_THROWS_WITH(layout(R"({"quant_method": "hqq"})"),
                    doctest::Contains("field 'quant_method' = \"hqq\" is not one vramfit reads"));
  CHECK_THROWS_WITH(layout(R"({"quant_method": "gptq", "bits": 5})"),
                    doctest::Contains("field 'bits' must be 2, 3, 4 or 8 for gptq, got 5"));
  CHECK_THROWS_WITH(layout(R"({"bits": 4})"), doctest::Contains("missing field 'quant_method'"));
  CHECK_THROWS_WITH(layout(R"({"quant_method": 4})"),
                    "vramfit: config.json quantization_config: field 'quant_method' must be a "
                    "string, got 4");
  CHECK_THROWS_WITH(layout(R"({"quant_method": "gptq", "group_size": "x"})"),
                    doctest::Contains("'group_size' must be an integer"));
  // The shipped gpt-oss configs name their MXFP4 experts.
  CHECK(std::string(hf_weight_layout(read_hf_config(data_dir / "hf" / "gpt-oss-20b.json"))->name) ==
        mxfp4_experts::value.name);
}

TEST_CASE("quantization_config's skip list: the modules it keeps unquantized, by hand") {
  // transformers 5 quantizers_utils.py should_convert_module: a module stays unquantized when a
  // listed name matches it as a regex from its start (re.match) or is the end of its name.
  // A small Llama: hidden 256, 4 layers, 4 heads of 64 (2 KV heads), MLP 512, vocab 1000.
  json c = json::parse(R"({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
    "vocab_size": 1000})");
  const model m = model_from_hf_config(c);
  auto layout_of = [&](const char* q) {
    c["quantization_config"] = json::parse(q);
    return *hf_weight_layout(c);
  };
  auto fp8_keeping = [&](const char* names, layout l = {}, std::int64_t stage = 0) {
    const std::string q =
        std::string(R"({"quant_method": "fp8", "modules_to_not_convert": )") + names + "}";
    return weight_bytes(m, l, layout_of(q.c_str()), stage).count;
  };
  // FP8 per tensor: one byte per weight and a 4-byte scale per tensor; bf16 for the rest.
  // Per layer: q [256, 256], k and v [128, 256], o [256, 256]: 196,608 weights in 4 tensors;
  // gate and up [512, 256], down [256, 512]: 393,216 in 3; two norms of 256 in bf16.
  const std::int64_t attention = 196'608, mlp = 393'216;
  const std::int64_t layer = attention + mlp + 7 * 4 + 2 * 256 * 2;  // 590,876
  // Outside the layers: the embedding and lm_head [1000, 256] and the final norm, in bf16.
  const std::int64_t outside = 2 * 256'000 * 2 + 256 * 2;       // 1,024,512
  CHECK(fp8_keeping(R"(["lm_head"])") == 4 * layer + outside);  // 3,388,016
  // No list: transformers' default keeps the head (get_keys_to_not_convert); a list given
  // replaces it (get_modules_to_not_convert, add_default_skips=False): [] converts lm_head too.
  CHECK(weight_bytes(m, {}, layout_of(R"({"quant_method": "fp8"})")).count == 4 * layer + outside);
  CHECK(fp8_keeping("[]") == 4 * layer + outside - (256'000 * 2 - (256'000 + 4)));
  // Attention kept in bf16 in every layer: 2 bytes per weight instead of 1 and the 4 scales.
  CHECK(fp8_keeping(R"(["lm_head", "model.layers.*.self_attn"])") ==
        4 * (layer + attention - 4 * 4) + outside);  // 4,174,384
  // Bare "self_attn" is neither the start nor the end of q_proj's name: transformers 5 converts
  // the projections (the attention module it matches has no weight of its own).
  CHECK(fp8_keeping(R"(["lm_head", "self_attn"])") == 4 * layer + outside);
  // "down_proj" ends every layer's down projection [256, 512].
  CHECK(fp8_keeping(R"(["lm_head", "down_proj"])") ==
        4 * (layer + 131'072 - 4) + outside);  // 3,912,288
  // One layer's linears: "model.layers.1." (its '.' any character) matches layers 1 and 10-19;
  // the model has layers 0-3.
  CHECK(fp8_keeping(R"(["lm_head", "model.layers.1."])") ==
        4 * layer + attention + mlp - 7 * 4 + outside);  // 3,977,812
  // Per pipeline stage: layer 3 is on the second of two stages (layers 2 and 3, the head).
  const layout pp2{.pipeline = 2};
  CHECK(fp8_keeping(R"(["lm_head", "model.layers.3."])", pp2, 0) ==
        fp8_keeping(R"(["lm_head"])", pp2, 0));
  CHECK(fp8_keeping(R"(["lm_head", "model.layers.3."])", pp2, 1) ==
        fp8_keeping(R"(["lm_head"])", pp2, 1) + attention + mlp - 7 * 4);
  // A regex over the layer numbers: the even layers' down_proj, counted without a loop over
  // the layers (the layout keeps two ranges, [0, 1) and [2, 3)).
  const weight_layout even = layout_of(
      R"({"quant_method": "fp8", "modules_to_not_convert": ["lm_head",
          "model\\.layers\\.[0-9]*[02468]\\.mlp\\.down_proj$"]})");
  CHECK(even.exceptions.ranges.size() == 2);
  CHECK(weight_bytes(m, {}, even).count == 4 * layer + 2 * (131'072 - 4) + outside);
  // bitsandbytes 8-bit: llm_int8_skip_modules [] converts lm_head to int8 with its row scales:
  // 256,000 + 4 x 1,000 bytes instead of fp16's 512,000.
  CHECK(weight_bytes(m, {}, layout_of(R"({"quant_method": "bitsandbytes", "load_in_8bit": true,
                                          "llm_int8_skip_modules": []})"))
            .count == weight_bytes(m, {}, bnb_int8::value).count - (512'000 - 260'000));
  // AWQ adds its list to the defaults (quantizer_awq.py add_default_skips=True): the head stays.
  CHECK(weight_bytes(m, {}, layout_of(R"({"quant_method": "awq",
                                          "modules_to_not_convert": []})")) ==
        weight_bytes(m, {}, awq<>::value));
  // Names that match nothing are ignored, as transformers ignores them.
  CHECK(fp8_keeping(R"(["lm_head", "vision_tower", "model.layers.7.mlp"])") == 4 * layer + outside);
  // The layout's groups belong to this model: another is refused.
  const model other = model_from_hf_config(llama_config());
  CHECK_THROWS_WITH(weight_bytes(other, {}, even),
                    doctest::Contains("were resolved for a model of"));
  // Refusals name the field.
  CHECK_THROWS_WITH(layout_of(R"({"quant_method": "fp8", "modules_to_not_convert": "lm_head"})"),
                    "vramfit: config.json quantization_config: field 'modules_to_not_convert' "
                    "must be a list of module names, got \"lm_head\"");
  CHECK_THROWS_WITH(layout_of(R"({"quant_method": "bitsandbytes", "load_in_4bit": true,
                                  "llm_int8_skip_modules": ["lm_head", 3]})"),
                    "vramfit: config.json quantization_config: field 'llm_int8_skip_modules' "
                    "entry 1 must be a module name (a string), got 3");
  CHECK_THROWS_WITH(layout_of(R"({"quant_method": "fp8",
                                  "modules_to_not_convert": ["(q|k)_proj"]})"),
                    doctest::Contains("not groups, alternatives"));
  CHECK_THROWS_WITH(layout_of(R"({"quant_method": "fp8", "modules_to_not_convert": ["*"]})"),
                    doctest::Contains("entry \"*\": nothing to repeat"));
}

TEST_CASE("published skip lists: Qwen3-30B-A3B-Thinking-2507-FP8 and gpt-oss MXFP4") {
  // huggingface.co/Qwen/Qwen3-30B-A3B-Thinking-2507-FP8 config.json: lm_head and each of the 48
  // layers' mlp.gate and norms (its safetensors keep mlp.gate.weight [128, 2048] in bf16).
  // vramfit's FP8 layout converts no router: the list keeps lm_head, and changes no byte.
  const json qwen = config_of("qwen3-30b-a3b-thinking-2507-fp8");
  const model m = model_from_hf_config(qwen);
  const tensor_ledger ledger = tensors(m);
  const weight_layout w = *hf_weight_layout(qwen);
  CHECK(w.exceptions.ranges.empty());
  CHECK(w.exceptions.outside_layers != 0);  // lm_head
  CHECK(weight_bytes(m, {}, w) == weight_bytes(m, {}, fp8_weights<>::value));
  // The same names under bitsandbytes, which converts the routers: the 48 names resolve to one
  // range over layers [0, 48) of the router group, kept in bf16 instead of NF4 (no double
  // quantization: bnb_4bit_use_double_quant is not given).
  json bnb = qwen;
  bnb["quantization_config"] = {
      {"quant_method", "bitsandbytes"},
      {"load_in_4bit", true},
      {"llm_int8_skip_modules", qwen["quantization_config"]["modules_to_not_convert"]}};
  const weight_layout kept = *hf_weight_layout(bnb);
  REQUIRE(kept.exceptions.ranges.size() == 1);
  const kept_range& r = kept.exceptions.ranges[0];
  CHECK((r.first_layer == 0 && r.layer_count == 48 && std::popcount(r.groups) == 1));
  const tensor_group& router = ledger[static_cast<std::size_t>(std::countr_zero(r.groups))];
  CHECK(router.kind == tensor_kind::router);
  CHECK(weight_bytes(m, {}, kept) ==
        weight_bytes(m, {}, bnb_4bit<nf4>::value) +
            (storage_bytes(bf16::value, 128 * 2048) - storage_bytes(nf4::value, 128 * 2048)) * 48);
  // transformers 5 packs a layer's experts into one module, "...mlp.experts": its name's end
  // keeps them all, as the prefix "model.layers.*.mlp.experts" does.
  json packed = qwen, prefix = qwen;
  packed["quantization_config"]["modules_to_not_convert"] = {"lm_head", "mlp.experts"};
  prefix["quantization_config"]["modules_to_not_convert"] = {"lm_head",
                                                             "model.layers.*.mlp.experts"};
  CHECK(weight_bytes(m, {}, *hf_weight_layout(packed)) ==
        weight_bytes(m, {}, *hf_weight_layout(prefix)));
  CHECK(weight_bytes(m, {}, *hf_weight_layout(packed)) > weight_bytes(m, {}, w));
  // The experts are one format per layer: a name that picks one expert is refused.
  json one_expert = qwen;
  one_expert["quantization_config"]["modules_to_not_convert"] = {"lm_head", "experts.5.up_proj"};
  CHECK_THROWS_WITH(hf_weight_layout(one_expert),
                    doctest::Contains("keeps 1 of the 128 routed experts of a layer"));
  // gpt-oss (huggingface.co/openai/gpt-oss-20b config.json): self_attn, router, embed_tokens and
  // lm_head, which its MXFP4 layout keeps in bf16 already: the same bytes.
  const json oss = config_of("gpt-oss-20b");
  const model g = model_from_hf_config(oss);
  CHECK(weight_bytes(g, {}, *hf_weight_layout(oss)) == weight_bytes(g, {}, mxfp4_experts::value));
  // Keeping the experts of the last layer ("model.layers.23.mlp.experts") adds them in bf16.
  json last = oss;
  last["quantization_config"]["modules_to_not_convert"].push_back("model.layers.23.mlp.experts");
  bytes experts{};
  for (const tensor_group& t : tensors(g))
    if (t.kind == tensor_kind::expert && t.rank == 2)
      experts += storage_bytes(bf16::value, t.elements()) * t.experts -
                 storage_bytes(mxfp4::value, t.elements()) * t.experts;
  CHECK(weight_bytes(g, {}, *hf_weight_layout(last)) ==
        weight_bytes(g, {}, mxfp4_experts::value) + experts);
}

namespace {
/// The model `config` imports, or nullopt where the import refuses it; `refusal` gets the message.
std::optional<model> imported(const json& config, std::string& refusal) {
  try {
    return model_from_hf_config(config);
  } catch (const vramfit::error& e) {
    refusal = e.what();
    return std::nullopt;
  }
}

/// Valid values of the JSON type of `value` other than it: what shows whether a field is read.
std::vector<json> other_values(const json& value) {
  if (value.is_boolean()) return {!value.get<bool>()};
  if (value.is_number()) return {0, 1, 2, value.get<double>() * 2 + 1};
  if (value.is_string()) return {"other"};
  return {json()};  // null: as if absent
}
}  // namespace

TEST_CASE("every wrongly typed config.json field is refused by name, or is a field never read") {
  // Issue 38, class 2: a field of the wrong JSON type (a dropout written as a string) must not
  // read as absent. A field is read when another value of its type, or null, changes the model
  // or is refused; such a field given a value of another type must be refused naming it.
  const std::vector<json> wrong = {"0.1", json::array({1}), json::object(), true, 0.5, 1e300};
  std::size_t read_fields = 0;
  for (const auto& file : std::filesystem::directory_iterator(data_dir / "hf")) {
    const json config = json::parse(std::ifstream(file.path()));
    std::string refusal;
    const std::optional<model> base = imported(config, refusal);
    if (!base) continue;  // a config kept to be refused
    for (const auto& item : config.items()) {
      const std::string field = item.key();  // not a structured binding: CAPTURE takes it
      const json& value = item.value();
      bool read = false;
      for (const json& other : other_values(value)) {
        json changed = config;
        changed[field] = other;
        const std::optional<model> m = imported(changed, refusal);
        read = read || !m || *m != *base;
      }
      read_fields += read ? 1 : 0;
      for (const json& w : wrong) {
        // A number is no wrong type for a float field, nor for a null one (Gemma 3's soft-capping
        // fields: null or a positive number).
        if (w.type() == value.type() ||
            (w.is_number() && (value.is_number_float() || value.is_null())))
          continue;
        json changed = config;
        changed[field] = w;
        refusal.clear();
        const std::optional<model> m = imported(changed, refusal);
        CAPTURE(file.path().filename());
        CAPTURE(field);
        CAPTURE(w.dump());
        CAPTURE(refusal);
        if (read)
          CHECK((!m && refusal.find("'" + field + "'") != std::string::npos));
        else
          CHECK((!m || *m == *base));
      }
    }
  }
  CHECK(read_fields > 100);
}

namespace {
// transformers activations.py ACT2CLS, typed out again here: the test's own list.
const std::vector<std::string> transformers_activations = {"gelu",
                                                           "gelu_10",
                                                           "gelu_fast",
                                                           "gelu_new",
                                                           "gelu_python",
                                                           "gelu_pytorch_tanh",
                                                           "gelu_python_tanh",
                                                           "gelu_accurate",
                                                           "hardswish",
                                                           "laplace",
                                                           "leaky_relu",
                                                           "linear",
                                                           "mish",
                                                           "quick_gelu",
                                                           "relu",
                                                           "relu2",
                                                           "relu6",
                                                           "sigmoid",
                                                           "silu",
                                                           "sqrtsoftplus",
                                                           "swish",
                                                           "tanh",
                                                           "prelu",
                                                           "xielu"};
}  // namespace

TEST_CASE("activation fields: transformers' names only, and only those whose memory is counted") {
  // Issue 38: an unknown or unmodelled activation read as the default. Expected by hand: the
  // names that save only their input read as the fused GELU; gelu_new's Python form only where
  // the MLP is not gated; every other name transformers knows is refused as not modelled.
  const std::vector<std::string> keeps_input = {"gelu", "gelu_pytorch_tanh", "silu",  "swish",
                                                "mish", "hardswish",         "relu6", "leaky_relu"};
  const std::vector<std::string> python = {"gelu_new", "gelu_python_tanh"};
  struct field_of {
    const char* config;
    const char* field;
    bool gated;
  };
  const field_of fields[] = {{"llama-3-8b", "hidden_act", true},
                             {"mixtral-8x7b", "hidden_act", true},
                             {"qwen3-30b-a3b", "hidden_act", true},
                             {"phi-3-mini", "hidden_act", true},
                             {"deepseek-v3", "hidden_act", true},
                             {"gemma-2-2b", "hidden_activation", true},
                             {"gpt2", "activation_function", false},
                             {"starcoder", "activation_function", false},
                             {"bert-base-uncased", "hidden_act", false},
                             {"bigbird-roberta-base", "hidden_act", false},
                             {"distilbert-base-uncased", "activation", false},
                             {"falcon-7b", "activation", false},
                             {"vit-l-16", "hidden_act", false}};
  std::size_t checked = 0;
  for (const field_of& f : fields) {
    for (const std::string& act : transformers_activations) {
      json c = config_of(f.config);
      c[f.field] = act;
      CAPTURE(f.config);
      CAPTURE(act);
      const bool plain =
          std::find(keeps_input.begin(), keeps_input.end(), act) != keeps_input.end();
      const bool in_python =
          !f.gated && std::find(python.begin(), python.end(), act) != python.end();
      if (plain || in_python) {
        CHECK(model_from_hf_config(c).gelu_in_python == in_python);
      } else {
        CHECK_THROWS_WITH(model_from_hf_config(c),
                          doctest::Contains((std::string("field '") + f.field + "' = \"" + act +
                                             "\" is not modelled")
                                                .c_str()));
      }
      ++checked;
    }
    for (const char* unknown : {"Gelu", "gelu ", "", "swiglu", "geglu"}) {
      json c = config_of(f.config);
      c[f.field] = unknown;
      CAPTURE(unknown);
      CHECK_THROWS_WITH(model_from_hf_config(c),
                        doctest::Contains((std::string("field '") + f.field +
                                           "' must be an activation transformers knows")
                                              .c_str()));
    }
  }
  CHECK(checked == 13 * 24);
  // The defaults, when the field is absent: GPT-2's and BigBird's gelu_new, BERT's gelu.
  for (const auto& [file, field, python_default] :
       {std::tuple{"gpt2", "activation_function", true},
        std::tuple{"bigbird-roberta-base", "hidden_act", true},
        std::tuple{"bert-base-uncased", "hidden_act", false}}) {
    json c = config_of(file);
    c.erase(field);
    CHECK(model_from_hf_config(c).gelu_in_python == python_default);
  }
  // gpt-oss's experts never read hidden_act (modeling_gpt_oss.py GptOssExperts).
  json oss = config_of("gpt-oss-20b");
  const model base = model_from_hf_config(oss);
  oss["hidden_act"] = "relu";
  CHECK(model_from_hf_config(oss) == base);
}

TEST_CASE("enumerated fields: DeepSeek's topk_method and BERT's position_embedding_type") {
  json c = config_of("deepseek-v3");
  CHECK(model_from_hf_config(c).moe.router_score_bias);
  c["topk_method"] = "greedy";
  CHECK_FALSE(model_from_hf_config(c).moe.router_score_bias);
  c["topk_method"] = "noaux";
  CHECK_THROWS_WITH(model_from_hf_config(c),
                    "vramfit: config.json (model_type 'deepseek_v3'): field 'topk_method' must be "
                    "\"greedy\", \"group_limited_greedy\" or \"noaux_tc\", got \"noaux\"");
  json bert = config_of("bert-base-uncased");
  const model absolute = model_from_hf_config(bert);
  bert["position_embedding_type"] = "absolute";
  CHECK(model_from_hf_config(bert) == absolute);
  bert["position_embedding_type"] = "relative_key";
  CHECK_THROWS_WITH(model_from_hf_config(bert),
                    doctest::Contains("field 'position_embedding_type' = \"relative_key\" (a "
                                      "distance embedding per layer) is not modelled"));
  bert["position_embedding_type"] = "rotary";
  CHECK_THROWS_WITH(model_from_hf_config(bert),
                    doctest::Contains("field 'position_embedding_type' must be \"absolute\""));
}

namespace {
/// The layout `config`'s quantization_config loads as, or nullopt where it is refused.
std::optional<weight_layout> quantized(const json& config, std::string& refusal) {
  try {
    return hf_weight_layout(config);
  } catch (const vramfit::error& e) {
    refusal = e.what();
    return std::nullopt;
  }
}

/// Two layouts that load the same: the same name, flags and bytes of a Llama-3-8B and a gpt-oss.
bool same_layout(const weight_layout& a, const weight_layout& b) {
  static const model llama = model_from_hf_config(config_of("llama-3-8b"));
  static const model oss = model_from_hf_config(config_of("gpt-oss-20b"));
  return std::string(a.name) == b.name && a.experts_only == b.experts_only &&
         a.quantize_routers == b.quantize_routers && a.act_order_index == b.act_order_index &&
         a.quantized_at_load == b.quantized_at_load &&
         weight_bytes(llama, {}, a) == weight_bytes(llama, {}, b) &&
         weight_bytes(oss, {}, a) == weight_bytes(oss, {}, b);
}
}  // namespace

TEST_CASE("every wrongly typed quantization_config field is refused by name, or is never read") {
  // The nested object hf_weight_layout reads, as the config property above: every field of each
  // method's quantization_config, given another value of its type and values of other types.
  std::vector<json> configs;
  for (const char* q :
       {R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true})",
        R"({"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": true})",
        R"({"quant_method": "bitsandbytes", "load_in_4bit": true, "load_in_8bit": false,
            "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true})",
        R"({"quant_method": "bitsandbytes", "load_in_8bit": true})",
        R"({"quant_method": "fp8", "weight_block_size": [128, 128]})"}) {
    json c = llama_config();
    c["quantization_config"] = json::parse(q);
    configs.push_back(c);
  }
  configs.push_back(config_of("gpt-oss-20b"));  // mxfp4, as shipped
  const std::vector<json> wrong = {"4", json::array({1}), json::object(), true, 0.5, 1e300, json()};
  std::size_t read_fields = 0, checked = 0;
  for (const json& config : configs) {
    std::string refusal;
    const std::optional<weight_layout> base = quantized(config, refusal);
    REQUIRE(base.has_value());
    for (const auto& item : config["quantization_config"].items()) {
      const std::string field = item.key();
      const json& value = item.value();
      bool read = false;
      std::vector<json> others = other_values(value);
      others.push_back(json());  // null: as if absent
      if (value.is_string()) others.push_back("nf4x");
      for (const json& other : others) {
        json changed = config;
        changed["quantization_config"][field] = other;
        const std::optional<weight_layout> w = quantized(changed, refusal);
        read = read || !w || !same_layout(*w, *base);
      }
      read_fields += read ? 1 : 0;
      for (const json& w : wrong) {
        if (w.type() == value.type() || w.is_null() || (w.is_number() && value.is_number_float()))
          continue;
        json changed = config;
        changed["quantization_config"][field] = w;
        refusal.clear();
        const std::optional<weight_layout> layout = quantized(changed, refusal);
        CAPTURE(config["quantization_config"].dump());
        CAPTURE(field);
        CAPTURE(w.dump());
        CAPTURE(refusal);
        if (read)
          CHECK((!layout && refusal.find("'" + field + "'") != std::string::npos));
        else
          CHECK((!layout || same_layout(*layout, *base)));
        CHECK(refusal.find('\n') == std::string::npos);
        ++checked;
      }
    }
  }
  // gptq: quant_method, bits, group_size, desc_act; awq: quant_method, bits, group_size;
  // bitsandbytes 4-bit: all five; 8-bit: both; fp8 and mxfp4: quant_method.
  CHECK(read_fields == 4 + 3 + 5 + 2 + 1 + 1);
  CHECK(checked > 90);
  json c = llama_config();
  c["quantization_config"] = "gptq";
  CHECK_THROWS_WITH(hf_weight_layout(c),
                    "vramfit: config.json: field 'quantization_config' must be an object, got "
                    "\"gptq\"");
  // 2^64 - 1 is no int64: read as one it wrapped to -1, GPTQ's "one scale per row".
  c["quantization_config"] =
      json::parse(R"({"quant_method": "gptq", "group_size": 18446744073709551615})");
  CHECK_THROWS_WITH(hf_weight_layout(c),
                    doctest::Contains("field 'group_size' must be an integer, got "
                                      "18446744073709551615"));
}
