// Unit tier: every preset's parameter count against its official integer
// (docs/sources.md#parameter-counts: keras-hub presets, model cards, HF API safetensors totals).
#include <doctest/doctest.h>

#include <string_view>
#include <vramfit/presets.hpp>
#include <vramfit/tensors.hpp>

using namespace vramfit;

namespace {
struct official {
  std::string_view key;
  std::int64_t parameters;
  const char* source;
};

constexpr official official_counts[] = {
    {"gpt2", 124'439'808, "keras-hub gpt2_base_en"},
    {"gpt2-medium", 354'823'168, "keras-hub gpt2_medium_en"},
    {"gpt2-large", 774'030'080, "keras-hub gpt2_large_en"},
    {"gpt2-xl", 1'557'611'200, "keras-hub gpt2_extra_large_en"},
    {"llama-2-7b", 6'738'415'616, "keras-hub llama2_7b_en"},
    {"llama-2-13b", 13'015'864'320, "HF API safetensors total minus 40 x 64 inv_freq"},
    {"llama-2-70b", 68'976'648'192, "HF API safetensors total minus 80 x 64 inv_freq"},
    {"llama-3-8b", 8'030'261'248, "keras-hub llama3_8b_en; HF API (Llama-3.1-8B)"},
    {"llama-3-70b", 70'553'706'496, "HF API safetensors total (Llama-3.1-70B)"},
    {"llama-3.1-405b", 405'853'388'800, "HF API safetensors total"},
    {"mistral-7b", 7'241'732'096, "keras-hub mistral_7b_en"},
    {"mixtral-8x7b", 46'702'792'704, "keras-hub mixtral_8_7b_en"},
    {"mixtral-8x22b", 140'620'634'112, "HF counts table"},
    {"qwen2.5-0.5b", 494'032'768, "keras-hub qwen presets; 942.3 MiB bf16 safetensors"},
    {"qwen2.5-7b", 7'615'616'512, "keras-hub qwen presets"},
    {"qwen2.5-72b", 72'706'203'648, "keras-hub qwen presets"},
    {"qwen3-0.6b", 596'049'920, "keras-hub qwen3_0.6b_en"},
    {"qwen3-8b", 8'190'735'360, "keras-hub qwen3_8b_en"},
    {"qwen3-30b-a3b", 30'532'122'624, "keras-hub qwen3_moe_30b_a3b_en"},
    {"gemma-2-2b", 2'614'341'888, "keras-hub gemma presets; Gemma 2 paper Table 2"},
    {"gemma-2-9b", 9'241'705'984, "keras-hub gemma presets; Gemma 2 paper Table 2"},
    {"gemma-2-27b", 27'227'128'320, "keras-hub gemma presets; Gemma 2 paper Table 2"},
    {"phi-3-mini", 3'821'079'552, "keras-hub phi3 presets"},
    {"falcon-7b", 6'921'720'704, "count from config (tied head; the Hub's 7.22B counts it twice)"},
    {"deepseek-v3", 671'026'404'352, "config_671B.json; README '671B'"},
    {"deepseek-v2", 235'741'434'880, "config_236B.json; paper '236B'"},
    // Rounded in the gpt-oss model card (arXiv 2508.10925): "116.8B" and "20.9B"; derived by hand
    // in hf_config_test.cpp.
    {"gpt-oss-20b", 20'914'757'184, "count from config; model card 20.9B"},
    {"gpt-oss-120b", 116'829'156'672, "count from config; model card 116.8B"},
    {"bert-base-uncased", 109'482'240, "BertModel with pooler; _PRETRAINED_PARAMS 'bert-base'"},
    {"bert-large-uncased", 335'141'888, "keras-hub bert presets"},
    {"distilbert-base-uncased", 66'362'880, "keras-hub distil_bert_base_en_uncased"},
    {"vit-l-16", 304'326'632, "torchvision ViT_L_16_Weights num_params"},
};
}  // namespace

TEST_CASE("every preset has its official parameter count, exactly") {
  CHECK(std::size(official_counts) == std::size(presets));
  for (const official& o : official_counts) {
    CAPTURE(o.key);
    CAPTURE(o.source);
    const model* m = find_preset(o.key);
    REQUIRE(m != nullptr);
    CHECK(parameters(tensors(*m)) == o.parameters);
  }
}

TEST_CASE("presets are usable in constant expressions") {
  static_assert(parameters(tensors(models::llama_3_8b::value)) == 8'030'261'248);
  static_assert(parameters(tensors(models::deepseek_v3::value)) == 671'026'404'352);
  static_assert(find_preset("mixtral-8x7b")->moe.routed_experts == 8);
  CHECK(find_preset("no-such-model") == nullptr);
}

TEST_CASE("MoE active parameters per token") {
  // models.json params_active_per_token (derived from the configs: non-expert + top-2 experts).
  CHECK(active_parameters(models::mixtral_8x7b::value, tensors(models::mixtral_8x7b::value)) ==
        12'879'925'248);
  CHECK(active_parameters(models::mixtral_8x22b::value, tensors(models::mixtral_8x22b::value)) ==
        39'152'031'744);
  // DeepSeek publish rounded figures: V3 "37B activated" (README), V2 "21B activated" (paper).
  const std::int64_t v3 =
      active_parameters(models::deepseek_v3::value, tensors(models::deepseek_v3::value));
  CHECK(v3 >= 37'000'000'000);
  CHECK(v3 < 38'000'000'000);
  const std::int64_t v2 =
      active_parameters(models::deepseek_v2::value, tensors(models::deepseek_v2::value));
  CHECK(v2 >= 21'000'000'000);
  CHECK(v2 < 22'000'000'000);
  // Qwen3-30B-A3B: "3.3B activated" (model card): all but 120 of 128 experts in 48 layers of
  // 3 x 2048 x 768 each.
  CHECK(active_parameters(models::qwen3_30b_a3b::value, tensors(models::qwen3_30b_a3b::value)) ==
        30'532'122'624 - 48LL * 120 * 3 * 2048 * 768);
  CHECK(30'532'122'624 - 48LL * 120 * 3 * 2048 * 768 == 3'353'032'704);
  // A dense model's active parameters are all of them.
  CHECK(active_parameters(models::llama_3_8b::value, tensors(models::llama_3_8b::value)) ==
        8'030'261'248);
}

TEST_CASE("checkpoints store more than the parameters where the reference says so") {
  // HF API safetensors totals for Llama-2 include 64 fp32 inv_freq values per layer.
  CHECK(checkpoint_elements(tensors(models::llama_2_7b::value)) == 6'738'417'664);
  CHECK(checkpoint_elements(tensors(models::llama_2_13b::value)) == 13'015'866'880);
  CHECK(checkpoint_elements(tensors(models::llama_2_70b::value)) == 68'976'653'312);
  // GPT-2's checkpoint stores 12 causal-mask buffers of 1024 x 1024: the Hub's "137M".
  CHECK(checkpoint_elements(tensors(models::gpt2::value)) == 124'439'808 + 12 * 1024 * 1024);
  // DeepSeek-V3's router score-correction bias: 256 per MoE layer, 58 MoE layers (+14,848).
  CHECK(checkpoint_elements(tensors(models::deepseek_v3::value)) == 671'026'404'352 + 58 * 256);
  CHECK(checkpoint_tensors(tensors(models::deepseek_v3::value)) ==
        parameter_tensors(tensors(models::deepseek_v3::value)) + 58);
}

TEST_CASE("BERT with a classification head") {
  // HF model_memory_anatomy: AutoModelForSequenceClassification("bert-large-uncased") with 2
  // labels has 335,143,938 parameters (BertModel's 335,141,888 + a 1024 x 2 classifier + 2).
  model m = models::bert_large_uncased::value;
  m.encoder.classes = 2;
  CHECK(parameters(tensors(m)) == 335'143'938);
}
