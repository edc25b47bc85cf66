// Hostile input (issue 17): sizes past the model's bounds, counts past int64, files that are not
// config files, names cut inside a character, and the closed forms that keep every cost
// independent of the number of layers and stages, each against a hand-derived number or the
// definition it replaces.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vramfit/hf_config.hpp>
#include <vramfit/vramfit.hpp>

using namespace vramfit;
using nlohmann::json;

namespace {
const std::filesystem::path data_dir = VRAMFIT_TEST_DATA_DIR;

json config_of(const char* preset) {
  std::ifstream in(data_dir / "hf" / (std::string(preset) + ".json"));
  return json::parse(in);
}

/// A Llama with every width 8 and one head: 464 parameters a layer (q, k, v, o: 4 x 64; gate,
/// up, down: 3 x 64; two norms: 16) and 136 outside them (embedding and head 64 each, norm 8).
model tiny_llama(std::int64_t layers) {
  model m = models::llama_3_8b::value;
  m.hidden = m.ffn = m.vocab = m.head_dim = 8;
  m.heads = m.kv_heads = 1;
  m.layers = layers;
  return validated(m);
}

/// The stage a full search over every stage picks: the first of the highest peaks.
template <class LedgerOf>
std::int64_t most_loaded_by_search(std::int64_t stages, LedgerOf ledger_of) {
  std::int64_t most = 0;
  for (std::int64_t s = 1; s < stages; ++s)
    if (peak(ledger_of(s)) > peak(ledger_of(most))) most = s;
  return most;
}
}  // namespace

TEST_CASE("sizes past the model's bounds are errors that name the field and the bound") {
  json c = config_of("llama-3-8b");
  c["head_dim"] = 576460752303423489LL;  // 2^59 + 1: head_dim x heads overflowed before
  CHECK_THROWS_WITH(model_from_hf_config(c, "x"),
                    "vramfit: model 'x': head_dim must be at most 16777216, got "
                    "576460752303423489");
  c = config_of("llama-3-8b");
  c["num_hidden_layers"] = 2147483648LL;
  CHECK_THROWS_WITH(model_from_hf_config(c, "x"), doctest::Contains("layers must be at most"));
  json d = config_of("deepseek-v3");
  d["qk_nope_head_dim"] = 9223372036854775807LL;
  CHECK_THROWS_WITH(model_from_hf_config(d, "x"),
                    doctest::Contains("MLA qk_nope_head_dim must be at most 16777216"));
  // A value past int64 is shown as written, not wrapped to -1.
  c = config_of("llama-3-8b");
  c["num_hidden_layers"] = 18446744073709551615ULL;
  CHECK_THROWS_WITH(model_from_hf_config(c, "x"),
                    doctest::Contains("field 'num_hidden_layers' must be at most "
                                      "9223372036854775807, got 18446744073709551615"));
}

TEST_CASE("only regular, shallow, small files are read as config.json") {
  const auto dir = std::filesystem::temp_directory_path() / "vramfit-hostile";
  std::filesystem::create_directories(dir);
  // A folder is a checkpoint: its config.json is read, and there is none here.
  std::filesystem::remove(dir / "config.json");
  CHECK_THROWS_WITH(load_hf_config(dir), doctest::Contains("config.json' does not exist"));
  const auto fifo = dir / "pipe.json";
  std::filesystem::remove(fifo);
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(load_hf_config(fifo), doctest::Contains("is not a regular file"));

  // 100,000 nested arrays overflowed the stack when a message wrote the value back.
  const auto nested = dir / "nested.json";
  std::ofstream(nested) << R"({"model_type": "llama", "hidden_size": )" << std::string(100'000, '[')
                        << std::string(100'000, ']') << "}";
  CHECK_THROWS_WITH(load_hf_config(nested), doctest::Contains("nests deeper than 64 levels"));
  // Brackets inside strings do not nest.
  CHECK_NOTHROW(detail::parse_config(R"({"a": ")" + std::string(100, '[') + R"("})", "text"));
  // A deep but permitted value is named by its kind, not written out.
  json c = config_of("llama-3-8b");
  c["hidden_size"] = json::parse(std::string(60, '[') + std::string(60, ']'));
  CHECK_THROWS_WITH(model_from_hf_config(c), doctest::Contains("got an array of"));
}

TEST_CASE("names are cut at a character boundary") {
  char name[40];
  std::string e_acute;  // U+00E9, two bytes: 19 fit in 39 bytes, the 20th does not
  for (int i = 0; i < 40; ++i) e_acute += "\xC3\xA9";
  detail::copy_name(name, e_acute.c_str());
  CHECK(std::strlen(name) == 38);
  std::string euro;  // U+20AC, three bytes: exactly 13 fill 39 bytes
  for (int i = 0; i < 20; ++i) euro += "\xE2\x82\xAC";
  detail::copy_name(name, euro.c_str());
  CHECK(std::strlen(name) == 39);
  CHECK(std::string(name) == euro.substr(0, 39));
  detail::copy_name(name, "plain");
  CHECK(std::string(name) == "plain");
}

TEST_CASE("a million layers: exact figures from closed forms") {
  const model m = tiny_llama(1'000'000);
  CHECK(parameters(tensors(m)) == 464LL * 1'000'000 + 136);  // the tiny Llama's hand count
  const training t{m, pure<bf16>::value, sgd<>::value};
  const activation_options o{.micro_batch = 1, .sequence = 16};
  const bytes one_layer = layer_activation_bytes(m, t.precision, o, t.layout, false, o.recompute);
  CHECK(total(activations(t, o), component::activations) >= one_layer * 1'000'000);
  // Full recompute of the first 10 layers only: those 10 keep just their input (16 tokens x 8
  // x bf16), and backward adds one recomputed layer.
  activation_options partial = o;
  partial.recompute = recompute_kind::full;
  partial.recompute_layers = 10;
  const bytes saved = total(activations(t, partial), component::activations);
  CHECK(total(activations(t, o), component::activations) - saved ==
        (one_layer - bytes{16 * 8 * 2}) * 10 - one_layer);
}

TEST_CASE("closed forms agree with the per-layer and per-stage definitions they replace") {
  // The largest layer of DeepSeek-V3 is its first MoE layer (three dense layers come first).
  const model ds = models::deepseek_v3::value;
  const tensor_ledger ds_tensors = tensors(ds);
  const layer_size largest = largest_layer(ds_tensors, ds.layers);
  CHECK(largest.layer == 3);
  for (std::int64_t layer = 0; layer < ds.layers; ++layer)
    CHECK(layer_parameters(ds_tensors, layer) <= largest.parameters);

  // The first layer of a stage is the sum of the earlier stages' layers.
  for (const std::int64_t layers : {1, 7, 32, 61, 126})
    for (std::int64_t pp = 1; pp <= layers && pp <= 40; ++pp) {
      const layout l{.pipeline = pp};
      std::int64_t first = 0;
      for (std::int64_t s = 0; s < pp; ++s) {
        CHECK(l.first_layer_of_stage(layers, s) == first);
        CHECK(stage_of_layer(l, layers, first) == s);
        first += l.layers_of_stage(layers, s);
      }
    }

  // The most loaded stage, over the distinct stages only, is the one a search of every stage
  // finds: MoE models with dense first layers, a partial selection, sliding windows.
  for (const std::int64_t pp : {2, 3, 5, 7, 12, 20}) {
    training t{ds, mixed<bf16>::value, adamw<>::value};
    t.layout.pipeline = pp;
    CHECK(most_loaded_stage(t).stage ==
          most_loaded_by_search(pp, [&](std::int64_t s) { return model_states(t, s); }));
    t.finetune = partial<select::kinds(tensor_kind::mlp).layers(7, 20)>::value;
    CHECK(most_loaded_stage(t).stage ==
          most_loaded_by_search(pp, [&](std::int64_t s) { return model_states(t, s); }));
    const training_plan_value plan{t, {.micro_batch = 1, .sequence = 512, .micro_batches = 8}};
    CHECK(most_loaded_rank(plan).stage == most_loaded_by_search(pp, [&](std::int64_t s) {
            return training_step(plan.setup, plan.batch, s);
          }));
    const model gemma = models::gemma_2_9b::value;  // sliding window on every other layer
    const layout l{.pipeline = pp};
    const request_shape r{.batch = 4, .prompt = 8192};
    const auto ledger_of = [&](std::int64_t s) {
      return inference_memory(gemma, l, plain_weights<bf16>::value, {}, r, s);
    };
    CHECK(most_loaded_gpu(gemma, l, plain_weights<bf16>::value, {}, r, gpus::h100_80gb::value)
              .stage == most_loaded_by_search(pp, ledger_of));
  }

  // Gemma-2-9B's KV cache on stage 1 of 3 (layers 14-27): the 7 even layers keep the 4,096-token
  // window, the 7 odd ones the whole 8,192 tokens; 2 x 8 KV heads x 256 x 2 bytes per token.
  const request_shape r{.prompt = 8192};
  CHECK(kv_cache_bytes(models::gemma_2_9b::value, layout{.pipeline = 3}, {}, r, 1) ==
        bytes{8192LL * (7 * 8192 + 7 * 4096)});
}

TEST_CASE("layouts and budgets past their limits are errors in the user's terms") {
  const model m = models::llama_3_8b::value;
  layout l{.data = std::int64_t{1} << 61, .tensor = 4};
  CHECK_THROWS_WITH(validated(l, m), doctest::Contains("the layout spans more than 16777216 GPUs"));
  l = layout{.pipeline = 2};
  l.stage_layers.push_back(9223372036854775807LL);
  l.stage_layers.push_back(9223372036854775807LL);
  CHECK_THROWS_WITH(validated(l, m),
                    "vramfit: the pipeline stages' layers sum to more than the model's 32");
  // DeepSpeed ZeRO-3's limits take 0 (zero/config.py ge=0), not less.
  l = layout{.data = 8, .zero = sharding::zero3, .implementation = shard_implementation::deepspeed};
  l.zero3_max_live_elements = 0;
  l.zero3_reuse_distance_elements = 0;
  l.zero3_persistence_threshold = 0;
  CHECK(check_layout(l, m).rule == layout_rule::none);
  l.zero3_max_live_elements = -1;
  CHECK_THROWS_WITH(validated(l, m),
                    "vramfit: the ZeRO-3 max live parameters must not be "
                    "negative, got -1");
  l.zero3_max_live_elements = 0;
  l.zero3_reuse_distance_elements = -2;
  CHECK_THROWS_WITH(validated(l, m),
                    "vramfit: the ZeRO-3 max reuse distance must not be "
                    "negative, got -2");
  l.zero3_reuse_distance_elements = 0;
  l.zero3_persistence_threshold = -3;
  CHECK_THROWS_WITH(validated(l, m),
                    "vramfit: the ZeRO-3 persistence threshold must not be "
                    "negative, got -3");
  // The largest of each, the coordinator's reach saturating: every parameter persistent.
  l.zero3_max_live_elements = l.zero3_reuse_distance_elements = l.zero3_persistence_threshold =
      std::numeric_limits<std::int64_t>::max();
  const memory_ledger kept =
      model_states(training{m, mixed<bf16, bf16>::value, adamw<>::value, full_finetune::value, l});
  CHECK(size_of(kept, entry_role::gathered_parameters) == bytes{});
  const gpu& h100 = gpus::h100_80gb::value;
  CHECK_THROWS_WITH(
      serve(m, {}, plain_weights<bf16>::value, {}, 4096, h100, {.utilization_percent = 0}),
      "vramfit: GPU memory utilization must be 1 to 100 percent, got 0");
  CHECK_THROWS_WITH(
      serve(m, {}, plain_weights<bf16>::value, {}, 4096, h100, {.max_num_seqs = 0}),
      "vramfit: vLLM's max_num_batched_tokens and max_num_seqs must be positive, got 8192 and 0");
  CHECK_THROWS_WITH(
      serve(m, {}, plain_weights<bf16>::value, {}, 4096, h100, {.non_torch = bytes{-1}}),
      doctest::Contains("must not be negative, got -1"));
  CHECK_THROWS_WITH(serve(m, {}, plain_weights<bf16>::value, {}, 0, h100, {}),
                    doctest::Contains("context must be positive, got 0"));
}

TEST_CASE("fine-tuning that would train nothing is an error naming the valid choices") {
  const model m = models::llama_3_8b::value;
  training t{m, pure<bf16>::value, adamw<>::value, lora_finetuning(8, "q_proj,foo")};
  CHECK_THROWS_WITH(model_states(t), doctest::Contains("LoRA target 'foo' matches no weight"));
  t.finetune = partial<select::kinds(tensor_kind::mlp).layers(100, 101)>::value;
  CHECK_THROWS_WITH(model_states(t),
                    "vramfit: trainable selection 1 matches no tensor of model 'Llama-3-8B': its "
                    "layers are 0-31, and the kinds must be among the model's tensors");
  t.finetune = partial<select::kinds(tensor_kind::mlp).layers(30, 10)>::value;  // 30 and 31
  CHECK(trainable_parameters(t.finetune, tensors(m)) == 2LL * 3 * 4096 * 14336);
}
