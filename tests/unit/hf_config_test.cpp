// Unit tier: Hugging Face config.json import. tests/data/hf/<preset>.json are configs written from
// the public field names of each model's config.json; import and preset must agree exactly.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <vramfit/hf_config.hpp>
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
