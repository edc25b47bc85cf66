// The step timeline (timeline.hpp) against the traced steps of tests/validation/step_traces.json
// (tests/validation/step_trace.py: every allocation of a Hugging Face-style training step, CUDA
// emulated and checked on an H100). Prints the computed blocks of docs/timeline.md; with --check
// it fails unless the peak is within 1 % in the median and 3 % at most, and in the traced phase.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "../../examples/report.hpp"

using namespace vramfit;

namespace {

/// The traced case as vramfit describes it (step_models.py: Llama, Qwen2, Mistral, GPT-2, Gemma 2,
/// DeepSeek-V2 and V3, Falcon, BERT and DistilBERT after transformers, ViT after torchvision; Llama
/// 3 blocks after torchtune, litgpt and torchtitan).
struct traced_case {
  training setup{};
  activation_options batch{};
};

traced_case describe(const nlohmann::json& k) {
  traced_case c{};
  model& m = c.setup.model;
  const bool gpt2 = k["family"] == "gpt2";
  m.family = gpt2 ? family::gpt2 : k["family"] == "phi3" ? family::phi3 : family::llama;
  m.hidden = k["hidden"];
  m.layers = k["layers"];
  m.heads = k["heads"];
  m.kv_heads = k["kv_heads"];
  m.head_dim = k["head_dim"];
  m.ffn = k["intermediate"];
  m.vocab = k["vocab"];
  m.tied_embeddings = k["tied"];
  m.qk_norm = k.value("qk_norm", false);  // Qwen3
  // transformers 5's Mixtral, Qwen3-MoE and gpt-oss: every layer routes.
  if (k.contains("moe") && !k["moe"].is_null()) {
    const nlohmann::json& e = k["moe"];
    m.moe = {.routed_experts = e["experts"], .top_k = e["top_k"], .expert_ffn = e["intermediate"]};
    if (e["router"] == "qwen3_moe") m.moe.layout = moe_layout::mlp_experts;
    if (e["router"] == "gpt_oss") m.moe.layout = moe_layout::gpt_oss;
  }
  // DeepSeek-V3 and V2: MLA, dense layers first, shared experts; V3's router has a score bias
  // (e_score_correction_bias), V2's softmax router none (presets.hpp deepseek_v2)
  if (k.contains("mla")) {
    const nlohmann::json& a = k["mla"];
    m.mla = {.q_lora_rank = a["q_lora_rank"],
             .kv_lora_rank = a["kv_lora_rank"],
             .qk_nope_head_dim = a["qk_nope_head_dim"],
             .qk_rope_head_dim = a["qk_rope_head_dim"],
             .v_head_dim = a["v_head_dim"]};
    m.moe.shared_experts = k["moe"]["shared_experts"];
    m.moe.first_dense_layers = k["moe"]["first_dense_layers"];
    m.moe.router_score_bias = k["family"] == "deepseek_v3";
    m.moe.group_limited = k["family"] == "deepseek_v3" ||
                          k["moe"].value("topk_method", "greedy") == "group_limited_greedy";
  }
  if (k["family"] == "qwen2") m.bias = bias_kind::qkv;  // Qwen2Attention: q, k and v biases
  if (k["family"] == "mistral") {  // every layer windowed (create_sliding_window_causal_mask)
    m.sliding_window = k["sliding_window"];
    m.sliding_window_period = 1;
  }
  if (k["family"] == "gpt_oss") {  // biased attention with sinks, windowed every other layer
    m.bias = bias_kind::attention;
    m.attention_sinks = true;
    m.sliding_window = k["sliding_window"];
    m.sliding_window_period = 2;
  }
  if (k["family"] == "gemma2" || k["family"] == "gemma3") {
    m.mlp = mlp_kind::geglu;
    m.norms_per_layer = 4;
    m.sliding_window = 4096;  // longer than the traced sequences: only the masks differ
    const bool gemma3 = k["family"] == "gemma3";  // five windows to a global layer
    m.sliding_window_period = gemma3 ? 6 : 2;
    m.sliding_layers_per_period = gemma3 ? 5 : 1;
    m.norm_plus_one = true;
    m.attention_softcap = k["attn_softcap"].get<double>() > 0;
    m.logit_softcap = k["final_softcap"].get<double>() > 0;
  }
  if (k["family"] == "falcon") {  // Falcon-7B: one LayerNorm read by attention and MLP, multi-query
    m.family = family::falcon;
    m.mlp = mlp_kind::gelu;
    m.norm = norm_kind::layernorm;
    m.norms_per_layer = 1;
    m.parallel_block = true;
    // Falcon-40B/180B's new_decoder_architecture: ln_attn and ln_mlp over the same input, kv_heads
    // grouped K/V heads (hf_config.hpp read_falcon's mapping)
    if (k.value("new_decoder_architecture", false)) m.norms_per_layer = 2;
  }
  // BertForSequenceClassification (post-LN, token types, pooler) and
  // DistilBertForSequenceClassification (post-LN, pre_classifier)
  if (k["family"] == "bert" || k["family"] == "distilbert") {
    const bool bert = k["family"] == "bert";
    m.family = bert ? family::bert : family::distilbert;
    m.mlp = mlp_kind::gelu;
    m.norm = norm_kind::layernorm;
    m.bias = bias_kind::all;
    m.positions = position_kind::learned;
    m.max_positions = k["max_positions"];
    m.encoder = {.token_types = bert ? k["token_types"].get<std::int64_t>() : 0,
                 .pooler = bert,
                 .classes = k["num_labels"]};
  }
  if (k["family"] ==
      "vit") {  // torchvision's VisionTransformer: pre-LN, packed in_proj, class token
    m.family = family::vit;
    m.mlp = mlp_kind::gelu;
    m.norm = norm_kind::layernorm;
    m.bias = bias_kind::all;
    m.positions = position_kind::learned;
    m.max_positions = k["max_positions"];
    m.encoder = {.image_size = k["image_size"],
                 .patch_size = k["patch_size"],
                 .channels = k["channels"],
                 .classes = k["num_labels"]};
  }
  if (gpt2) {
    m.mlp = mlp_kind::gelu;
    m.norm = norm_kind::layernorm;
    m.bias = bias_kind::all;
    m.positions = position_kind::learned;
    m.max_positions = k["max_positions"];
    m.gelu_in_python = true;
  }
  const std::string precision = k["precision"];
  c.setup.precision = precision == "fp32"   ? fp32_training::value
                      : precision == "bf16" ? pure<bf16>::value
                                            : amp<bf16>::value;
  const std::string impl = k["optimizer_impl"], name = k["optimizer"];
  optimizer_options o{};
  o.impl = impl == "fused"      ? optimizer_impl::fused
           : impl == "for-loop" ? optimizer_impl::for_loop
                                : optimizer_impl::foreach;
  o.momentum = name == "sgd";  // the traced SGD runs with momentum 0.9
  o.set_to_none = k.value("zero_grad", "set_to_none") == "set_to_none";
  c.setup.optimizer =
      name == "adamw" ? detail::make_optimizer("adamw", optimizer_kind::adam, 2, 1, o)
      : name == "sgd" ? detail::make_optimizer("sgd+momentum", optimizer_kind::sgd, 1, 0, o)
                      : detail::make_optimizer("adafactor", optimizer_kind::adafactor, 0, 1, o);
  if (!k["lora"].is_null()) {
    std::string targets;  // lora_finetuning copies it
    for (const nlohmann::json& module : k["lora"]["targets"]) {
      if (!targets.empty()) targets += ',';  // (not "," + string: GCC 12's -Wrestrict misfires)
      targets += module.get<std::string>();
    }
    // QLoRA (step_trace.py E16): the layers' linears in NF4 with double quantization.
    const element_format base =
        k.value("qlora", false) ? nf4_double_quant::value : element_format{};
    c.setup.finetune = lora_finetuning(k["lora"]["r"], targets.c_str(), fp32::value, base);
  }
  activation_options& a = c.batch;
  a.micro_batch = k["batch"];
  a.sequence = k["seq"];
  a.micro_batches = k["accumulation"];
  a.attention = k["attention"] == "eager" ? attention_kind::eager : attention_kind::flash;
  a.attention_dropout = a.hidden_dropout = k["dropout"].get<double>() > 0;
  a.recompute = k["checkpointing"] == "none" ? recompute_kind::none : recompute_kind::full;
  a.reentrant_checkpoint = k["checkpointing"] == "reentrant";
  if (k.contains("moe") && !k["moe"].is_null() && k["moe"]["implementation"] == "eager")
    a.experts = experts_implementation::eager;
  // Whose Llama code (step_models.py: torchtune's, litgpt's and torchtitan's own blocks).
  const std::string code = k.value("code", "hf");
  for (const model_code mc : {model_code::torchtitan, model_code::torchtitan_2024,
                              model_code::torchtune, model_code::litgpt, model_code::megatron_te})
    if (code == detail::traits_of(mc).name) a.code = mc;
  // Megatron's vocab-parallel cross-entropy (step_models.py megatron_language_model_loss).
  if (a.code == model_code::megatron_te) a.loss = loss_kind::vocab_parallel;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  std::ifstream in(VRAMFIT_STEP_TRACES);
  const nlohmann::json traces = nlohmann::json::parse(in);
  const report::page_blocks page(std::cout, "step_timeline.cpp");
  char line[512];
  std::vector<double> errors;
  // Each case's |error| under its family (the configuration's, with Qwen3 named apart from Llama,
  // whose block it is with q_norm and k_norm) and model code, in the order the families first come.
  std::vector<std::pair<std::string, std::vector<double>>> by_family;
  int wrong_phase = 0;
  std::string peaks =
      "| case | traced peak (B) | traced phase | vramfit peak (B) | vramfit event | error |\n"
      "|---|---:|---|---:|---|---:|\n";
  for (const nlohmann::json& c : traces["cases"]) {
    const traced_case tc = describe(c["case"]);
    const step_timeline tl = step_timeline_of(tc.setup, tc.batch);
    const timeline_event& e = tl.events[tl.peak.event];
    const auto traced = c["step2"]["peak"].get<std::int64_t>();
    const std::string phase = c["step2"]["peak_event"]["phase"];
    const double error =
        100.0 * static_cast<double>(tl.peak.alive.count - traced) / static_cast<double>(traced);
    errors.push_back(std::fabs(error));
    const nlohmann::json& k = c["case"];
    std::string family = k["family"];
    if (family == "llama" && k.value("qk_norm", false)) family = "qwen3";
    const std::string key = family + " | " + k.value("code", "hf");
    auto row = std::find_if(by_family.begin(), by_family.end(),
                            [&key](const auto& r) { return r.first == key; });
    if (row == by_family.end()) row = by_family.insert(by_family.end(), {key, {}});
    row->second.push_back(std::fabs(error));
    if (phase != to_string(e.phase)) ++wrong_phase;
    std::snprintf(line, sizeof line, "| %s | %lld | %s | %lld | %s: %s | %+.2f %% |\n",
                  c["name"].get<std::string>().c_str(), static_cast<long long>(traced),
                  phase.c_str(), static_cast<long long>(tl.peak.alive.count), to_string(e.phase),
                  e.what, error);
    peaks += line;
  }
  std::sort(errors.begin(), errors.end());
  const double median = errors[errors.size() / 2], most = errors.back();
  std::snprintf(line, sizeof line,
                "\nMedian |error| %.2f %%, largest %.2f %%, peak in another phase: %d of %zu.\n",
                median, most, wrong_phase, errors.size());
  page.print("peaks", peaks + line);

  // The peaks' errors by family and model code.
  std::string families =
      "| family | model code | cases | median \\|error\\| | largest \\|error\\| |\n"
      "|---|---|---:|---:|---:|\n";
  for (auto& [key, family_errors] : by_family) {
    std::sort(family_errors.begin(), family_errors.end());
    const std::size_t n = family_errors.size();
    const double family_median =
        n % 2 == 1 ? family_errors[n / 2] : (family_errors[n / 2 - 1] + family_errors[n / 2]) / 2;
    std::snprintf(line, sizeof line, "| %s | %zu | %.2f %% | %.2f %% |\n", key.c_str(), n,
                  family_median, family_errors.back());
    families += line;
  }
  page.print("by-family", families);

  // The optimizer step on its own: what it allocates above what the step holds when it starts.
  std::string steps =
      "| case | traced (B) | vramfit (B) | difference (B) |\n|---|---:|---:|---:|\n";
  int optimizer_misses = 0;
  for (const nlohmann::json& c : traces["cases"]) {
    const traced_case tc = describe(c["case"]);
    const memory_ledger ledger = training_step(tc.setup, tc.batch).entries;
    std::int64_t traced = 0;
    for (const nlohmann::json& p : c["step2"]["phase_peaks"])
      if (p["phase"] == "optimizer")
        traced = p["peak"].get<std::int64_t>() - p["alive_at_phase_start"].get<std::int64_t>();
    std::int64_t predicted = 0;
    for (const memory_entry& e : ledger)
      if (e.lifetime == lifetime::optimizer_step) predicted += e.size.count;
    const std::int64_t difference = predicted - traced;
    const std::int64_t allowed = std::max<std::int64_t>(16 * 1024, traced / 100);
    if (std::abs(difference) > allowed) ++optimizer_misses;
    std::snprintf(line, sizeof line, "| %s | %lld | %lld | %+lld |\n",
                  c["name"].get<std::string>().c_str(), static_cast<long long>(traced),
                  static_cast<long long>(predicted), static_cast<long long>(difference));
    steps += line;
  }
  std::snprintf(line, sizeof line, "\nOptimizer steps outside 1 %% and 16 KiB: %d of %zu.\n",
                optimizer_misses, errors.size());
  page.print("optimizer-step", steps + line);
  if (check && (median > 1.0 || most > 3.0 || wrong_phase > 0 || optimizer_misses > 0)) {
    std::fprintf(stderr,
                 "step timeline outside its bounds (median 1 %%, largest 3 %%, phase, optimizer "
                 "step)\n");
    return 1;
  }
  return 0;
}
