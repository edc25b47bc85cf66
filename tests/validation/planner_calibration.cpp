// The planner's step-time estimate (step_time.hpp) against published training throughput
// (tests/data/planner/published_runs.json, sources in its README): the two efficiencies of
// `cluster` are fitted on half of the rows (even positions of each source, by id) and the error
// is reported on the other half. Prints the computed blocks of docs/planner-calibration.md; with
// --check it fails unless the defaults are the fit and the held-out error is within its bounds.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

using namespace vramfit;
using json = nlohmann::json;

namespace {

/// One published run as the estimate sees it, with what was assumed where the source is silent.
struct run {
  std::string id, source, framework;
  training_plan_value plan;
  gpu device{};
  cluster net{};
  model_work work{};
  double published = 0;  ///< tokens per second per GPU, from the source's own figure
  bool fit = false;      ///< in the half the efficiencies are fitted on
  std::string assumed;
};

bool given(const json& row, const char* key) {
  return row.contains(key) && !row[key].is_null();
}
std::int64_t integer_or(const json& row, const char* key, std::int64_t fallback) {
  return given(row, key) ? row[key].get<std::int64_t>() : fallback;
}

/// A GPT block of the width the source gives (a classic GPT-2/Megatron block: LayerNorm, GELU,
/// learned positions, biases; heads of 128 where the source gives no count).
model gpt_block(const json& a, std::int64_t sequence, std::string& assumed) {
  model m = classic_block(family::gpt2);
  std::snprintf(m.name, sizeof m.name, "published GPT");
  m.hidden = a["hidden"];
  m.layers = a["layers"];
  m.heads = integer_or(a, "heads", 0);
  if (m.heads == 0) {
    m.heads = m.hidden / 128;
    assumed += "heads of 128; ";
  }
  m.kv_heads = m.heads;
  m.head_dim = m.hidden / m.heads;
  m.ffn = integer_or(a, "ffn", 0);
  if (m.ffn == 0) {
    m.ffn = 4 * m.hidden;
    assumed += "FFN 4h; ";
  }
  m.vocab = integer_or(a, "vocab", 0);
  if (m.vocab == 0) {
    m.vocab = 51200;  // GPT-3's 50,257 padded as Megatron-LM pads it
    assumed += "vocabulary 51,200; ";
  }
  m.max_positions = sequence;
  return m;
}

model model_of(const json& row, std::int64_t sequence, std::string& assumed) {
  if (!row["model"].is_string()) return gpt_block(row["model"], sequence, assumed);
  std::string key = row["model"];
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const model* m = find_preset(key);
  if (m == nullptr) throw std::runtime_error("no preset " + key);
  return *m;
}

/// Whether the run's framework is Megatron-LM v2 (2021) or BigScience's Megatron-DeepSpeed fork
/// of it.
bool megatron_v2(const std::string& source) {
  return source == "megatron-2021" || source == "bloom-tr11";
}

/// The GPU and the machines around it, as the source describes them.
void hardware_of(const json& row, run& r) {
  const std::string g = row["gpu"];
  r.device = gpus::h100_80gb::value;
  r.net.inter_node_gb_per_s = 50;  // one 400 Gb/s NIC per GPU (DGX H100, Grand Teton)
  if (g.starts_with("A100")) {
    r.device =
        g.find("40GB") != std::string::npos ? gpus::a100_40gb::value : gpus::a100_80gb::value;
    r.net.inter_node_gb_per_s = 25;  // 8 x 200 Gb/s HDR per node (Selene; llm-foundry 1600 Gb/s)
  } else if (g.starts_with("H100 96GB")) {
    r.device = gpus::h100_96gb::value;  // torchtitan's 500 W parts: no measured ceiling
  } else if (g.starts_with("H200")) {
    r.device = gpus::h200::value;
  } else if (g.starts_with("H800")) {
    r.net.intra_node_gb_per_s = 200;  // 400 GB/s NVLink in all, half per direction
  }
  if (r.source == "bloom-tr11") {  // Jean Zay: 4 NVLinks per GPU, 4 Omni-Path links per node
    r.net.intra_node_gb_per_s = 100;
    r.net.inter_node_gb_per_s = 4 * 12.5 / 8;
  }
}

/// Sharding: as published, else the framework's usual.
void sharding_of(const json& row, const std::string& framework, layout& l, std::string& assumed) {
  using enum shard_implementation;
  const std::string s = given(row, "sharding") ? row["sharding"].get<std::string>() : "";
  const auto set = [&](sharding z, shard_implementation i) {
    l.zero = z;
    l.implementation = i;
  };
  if (s == "distributed-optimizer") return set(sharding::zero1, megatron);
  if (s == "zero1") return set(sharding::zero1, deepspeed);
  if (s == "zero2") return set(sharding::zero2, fsdp);
  if (s == "fsdp-full" || s == "zero3") return set(sharding::zero3, fsdp);
  if (s == "none") return;
  if (framework == "megatron" || framework == "nemo" || framework == "meta-internal") {
    if (row["source"] == "megatron-2021") return;  // before the distributed optimizer
    assumed += "distributed optimizer; ";
    return set(sharding::zero1, megatron);
  }
  assumed += "full sharding; ";
  set(sharding::zero3, fsdp);
}

recompute_kind recompute_of(const json& row, std::string& assumed) {
  const std::string r = given(row, "recompute") ? row["recompute"].get<std::string>() : "";
  if (r == "full") return recompute_kind::full;
  if (r == "selective") return recompute_kind::selective;
  if (r == "op-sac") return recompute_kind::op_sac;
  if (r == "none") return recompute_kind::none;
  // Narayanan et al. 2021 count the recomputed forward (their 96·B·s·l·h² has four passes).
  if (row["source"] == "megatron-2021") {
    assumed += "full recompute (the source's FLOP count has it); ";
    return recompute_kind::full;
  }
  assumed += "no recompute; ";
  return recompute_kind::none;
}

/// Tokens per second per GPU from what the source published, in its own FLOP count.
double published_tokens_per_second(const json& row, const run& r) {
  if (given(row, "tokens_per_s_per_gpu")) return row["tokens_per_s_per_gpu"];
  if (given(row, "tokens_per_s_per_gpu_derived")) return row["tokens_per_s_per_gpu_derived"];
  const model& m = r.plan.setup.model;
  const double s = static_cast<double>(r.plan.batch.sequence);
  if (given(row, "step_time_s"))
    return static_cast<double>(row["global_batch_sequences"].get<std::int64_t>()) * s /
           row["step_time_s"].get<double>() / static_cast<double>(row["gpus"].get<std::int64_t>());
  const double tflops = row["tflops_per_gpu"];
  const double l = static_cast<double>(m.layers), h = static_cast<double>(m.hidden);
  if (row["source"] == "megatron-2021") {  // Narayanan et al. 2021 eq. 3, per token
    const double v = static_cast<double>(m.vocab);
    return tflops * 1e12 / (96 * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)));
  }
  // Model FLOPs: 6 per weight multiplied and 12·l·h·s of attention (Chowdhery et al. 2022).
  return tflops * 1e12 / (r.work.layers * 3 + r.work.head * 3 + 12 * l * h * s);
}

run run_of(const json& row) {
  run r{};
  r.id = row["id"];
  r.source = row["source"];
  const std::string framework = row["framework"];
  r.framework = framework;
  const std::int64_t sequence = row["seq_len"];
  model m = model_of(row, sequence, r.assumed);
  precision p = mixed<bf16>::value;
  if (!given(row, "precision"))
    r.assumed += "bf16; ";
  else if (row["precision"] == "fp8")
    p = fp8_compute::value;
  layout l{};
  l.tensor = integer_or(row, "tp", 0);
  l.pipeline = integer_or(row, "pp", 0);
  if (l.tensor == 0) {  // Narayanan et al. keep TP within a node of 8 and pipeline the rest
    const std::int64_t mp = row["model_parallel"];
    l.tensor = std::min<std::int64_t>(mp, 8);
    l.pipeline = mp / l.tensor;
    r.assumed += "TP " + std::to_string(l.tensor) + " x PP " + std::to_string(l.pipeline) + "; ";
  }
  l.context = integer_or(row, "cp", 1);
  l.data = row["gpus"].get<std::int64_t>() / (l.tensor * l.pipeline * l.context);
  l.expert = integer_or(row, "ep", 1);
  const bool megatron_family = framework != "deepspeed" && row["source"] != "megatron-2021";
  l.sequence =
      l.tensor > 1 &&
      (given(row, "sequence_parallel") ? row["sequence_parallel"].get<bool>() : megatron_family);
  sharding_of(row, framework, l, r.assumed);
  if (framework == "torchtitan") l.fsdp_version = 2;  // fully_shard; FSDP1 elsewhere
  activation_options o{.sequence = sequence};
  const std::int64_t global = row["global_batch_sequences"];
  // torchtitan at the benchmarks' commit (9dec370) splits a rank's batch into as many
  // micro-batches as pipeline ranks (pipelining_utils.py build_pipeline_schedule), and runs two
  // stages per rank on a looped schedule without split points (generate_split_points).
  const bool torchtitan_pipeline = framework == "torchtitan" && l.pipeline > 1;
  o.micro_batch = integer_or(row, "micro_batch", 0);
  if (o.micro_batch == 0) {
    o.micro_batch =
        torchtitan_pipeline ? std::max<std::int64_t>(1, global / (l.data * l.pipeline)) : 1;
    r.assumed += "micro-batch " + std::to_string(o.micro_batch) + "; ";
  }
  o.micro_batches = std::max<std::int64_t>(1, global / (l.data * o.micro_batch));
  o.recompute = recompute_of(row, r.assumed);
  // The attention and model code each framework runs: Megatron-LM's of 2021 and BigScience's
  // fork of it had no fused attention (FusedScaleMaskSoftmax between two batched matmuls,
  // megatron/model/transformer.py); Megatron-Core and NeMo run Transformer Engine (cuDNN
  // attention, FP8 casts fused); torchtitan's Float8Linear casts each matmul's operands itself.
  if (megatron_v2(r.source)) o.attention = attention_kind::eager;
  if (framework == "megatron" || framework == "nemo") o.code = model_code::megatron_te;
  // Every Megatron release's loss: _VocabParallelCrossEntropy (megatron/mpu/cross_entropy.py in
  // 2021 and BigScience's fork, core/tensor_parallel/cross_entropy.py since).
  if (framework == "megatron" || framework == "nemo") o.loss = loss_kind::vocab_parallel;
  if (framework == "torchtitan") o.code = model_code::torchtitan_2024;
  try {  // these codes are modelled for a dense Llama 3 only: others keep Hugging Face's
    detail::check_model_code(m, o, full_finetune::value);
  } catch (const vramfit::error&) {
    if (o.code != model_code::hf) r.assumed += "Hugging Face's model code; ";
    o.code = model_code::hf;
  }
  o.virtual_stages = integer_or(row, "virtual_stages", 0);
  if (o.virtual_stages == 0) {  // interleaved, its stages per rank not published
    o.virtual_stages = torchtitan_pipeline ? 2 : 1;
    r.assumed += o.virtual_stages == 1 ? "no interleaving; " : "2 stages per rank; ";
  }
  if (o.virtual_stages > 1) o.schedule = pipeline_schedule::interleaved;
  // TP's overlap as the source names it; each candidate of the run's search with SP takes it.
  if (given(row, "tp_comm_overlap"))
    l.tp_overlap = row["tp_comm_overlap"] == "userbuffers" ? tp_comm_overlap::userbuffers
                                                           : tp_comm_overlap::async_tp;
  r.plan = {training{m, p, adamw<>::value, full_finetune::value, l}, o};
  r.work = work_of(r.plan.setup, sequence);
  hardware_of(row, r);
  r.published = published_tokens_per_second(row, r);
  return r;
}

double estimated(const run& r, double compute, double network) {
  cluster c = r.net;
  c.compute_efficiency = compute;
  c.network_efficiency = network;
  const step_time t = estimate_step_time(r.plan, figures_of(c, r.device), r.work);
  return tokens_per_second(r.plan, t) / static_cast<double>(r.plan.setup.layout.world());
}

double error_of(const run& r, double compute, double network) {
  return estimated(r, compute, network) / r.published - 1;
}

/// Where the published layout stands in the planner's list for its GPUs and global batch: how
/// many ranked layouts the estimate puts before it, and how much faster it says the first is.
struct standing {
  std::size_t ahead = 0;
  double speedup = 1;
};
standing standing_of(const run& r) {
  const layout& l = r.plan.setup.layout;
  search_space space{.gpus = l.world(),
                     .global_batch = r.plan.batch.micro_batch * r.plan.batch.micro_batches * l.data,
                     .net = r.net,
                     .top = search_result::max_top};
  space.sharding = r.framework == "torchtitan" || r.framework == "llm-foundry"
                       ? sharding_family::fsdp
                   : r.framework == "deepspeed" ? sharding_family::deepspeed
                                                : sharding_family::megatron;
  if (megatron_v2(r.source)) {
    // What Megatron-LM of April 2021 (v2) ran, and BigScience's Megatron-DeepSpeed fork of it to
    // its last commit: TP, PP, DP, and full recompute of every layer or none (megatron/
    // arguments.py: --checkpoint-activations, and --checkpoint-num-layers, the layers per
    // checkpointed chunk). Sequence parallelism, selective and partial recompute
    // (--recompute-granularity, --recompute-num-layers) came with v3.0 in 2022 (Korthikanti et
    // al. 2022), the distributed optimizer the same year, context parallelism in 2023.
    space.sequence_parallel = space.selective_recompute = space.partial_recompute = false;
    space.context = 1;
  }
  if (r.source == "megatron-2021") space.zero = 0;
  // torchtitan gained gradient accumulation in June 2025 (pytorch/torchtitan#1238); the
  // benchmarks' commit of December 2024 ran a rank's batch at once unless a pipeline split it.
  if (r.source == "torchtitan-2024-12") space.gradient_accumulation = false;
  const search_result found = search_layouts(r.plan, r.device, space);
  const double published = estimate_step_time(r.plan, figures_of(r.net, r.device), r.work).total();
  standing s{};
  for (const plan_candidate& c : found.best)
    if (c.time.total() < published) ++s.ahead;
  if (found.found()) s.speedup = published / found.best[0].time.total();
  if (std::getenv("VRAMFIT_DEBUG") != nullptr && found.found()) {
    const auto show = [](const char* what, const step_time& t, const layout& k, std::int64_t b,
                         recompute_kind rc, std::int64_t v) {
      std::fprintf(
          stderr,
          "  %s DP%lld TP%lld%s PP%lld CP%lld EP%lld z%d/%d b%lld v%lld rc%d: comp %.2f rec %.2f "
          "bub %.2f opt %.2f tp %.2f cp %.2f ep %.2f pp %.2f dp %.2f = %.2f\n",
          what, (long long)k.data, (long long)k.tensor, k.sequence ? "+SP" : "",
          (long long)k.pipeline, (long long)k.context, (long long)k.expert, (int)k.zero,
          (int)k.implementation, (long long)b, (long long)v, (int)rc, t.compute, t.recompute,
          t.bubble, t.optimizer, t.tensor, t.context, t.expert, t.pipeline, t.data, t.total());
    };
    std::fprintf(stderr, "%s\n", r.id.c_str());
    show("published", estimate_step_time(r.plan, figures_of(r.net, r.device), r.work), l,
         r.plan.batch.micro_batch, r.plan.batch.recompute, r.plan.batch.virtual_stages);
    const plan_candidate& c = found.best[0];
    show("best     ", c.time, c.layout, c.micro_batch, c.recompute, c.virtual_stages);
  }
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  std::ifstream in(VRAMFIT_PUBLISHED_RUNS);
  const json rows = json::parse(in);
  std::vector<run> runs;
  std::map<std::string, int> position;
  std::vector<json> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const json& a, const json& b) { return a["id"] < b["id"]; });
  std::map<std::string, int> per_source;
  // A run without its layout or batch cannot be estimated (OPT-175B gives neither).
  std::erase_if(sorted, [](const json& row) {
    return (!given(row, "tp") && !given(row, "model_parallel")) ||
           !given(row, "global_batch_sequences");
  });
  for (const json& row : sorted) ++per_source[row["source"].get<std::string>()];
  for (const json& row : sorted) {
    run r{};
    try {
      r = run_of(row);
    } catch (const std::exception& e) {
      std::cerr << row["id"] << ": " << e.what() << "\n";
      return 2;
    }
    const int at = position[r.source]++;
    r.fit = per_source[r.source] > 1 && at % 2 == 0;
    runs.push_back(r);
  }
  // The fit: the efficiencies that minimise the mean |log(estimate / published)| on the half.
  double best = 1e300, compute = 0, network = 0;
  for (int ci = 30; ci <= 100; ++ci)
    for (int ni = 30; ni <= 100; ni += 5) {
      double loss = 0;
      for (const run& r : runs)
        if (r.fit) loss += std::abs(std::log1p(error_of(r, ci / 100.0, ni / 100.0)));
      if (loss < best) {
        best = loss;
        compute = ci / 100.0;
        network = ni / 100.0;
      }
    }
  const cluster defaults{};
  std::printf("<!-- output: planner_calibration.cpp#fit -->\n");
  std::printf(
      "Fitted on %zu rows: compute efficiency %.2f, network efficiency %.2f (defaults: "
      "%.2f, %.2f).\n",
      static_cast<std::size_t>(
          std::count_if(runs.begin(), runs.end(), [](const run& r) { return r.fit; })),
      compute, network, defaults.compute_efficiency, defaults.network_efficiency);
  std::printf("<!-- end output -->\n");
  std::map<std::string, std::vector<double>> held_out;
  std::vector<double> all_held;
  std::printf("<!-- output: planner_calibration.cpp#rows -->\n");
  std::printf(
      "| run | half | layout | published tokens/s/GPU | estimate | error | rank | "
      "speed-up claimed | assumed |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---:|---|\n");
  std::size_t near_top = 0, overclaimed = 0;
  for (const run& r : runs) {
    const double e = error_of(r, defaults.compute_efficiency, defaults.network_efficiency);
    const layout& l = r.plan.setup.layout;
    if (!r.fit) {
      held_out[r.source].push_back(std::abs(e));
      all_held.push_back(std::abs(e));
    }
    const standing st = standing_of(r);
    if (!r.fit && (st.ahead < 5 || st.speedup <= 1.05)) ++near_top;
    if (!r.fit && st.speedup > 1.3) ++overclaimed;
    std::printf(
        "| %s | %s | DP %lld TP %lld PP %lld CP %lld EP %lld | %.0f | %.0f | %+.1f%% | %zu | "
        "%.2fx | %s |\n",
        r.id.c_str(), r.fit ? "fit" : "held out", static_cast<long long>(l.data),
        static_cast<long long>(l.tensor), static_cast<long long>(l.pipeline),
        static_cast<long long>(l.context), static_cast<long long>(l.expert), r.published,
        estimated(r, defaults.compute_efficiency, defaults.network_efficiency), 100 * e,
        st.ahead + 1, st.speedup, r.assumed.c_str());
  }
  std::printf("<!-- end output -->\n");
  std::printf("<!-- output: planner_calibration.cpp#summary -->\n");
  std::printf("| source | held-out rows | median abs. error | largest |\n|---|---:|---:|---:|\n");
  for (const auto& [source, errors] : held_out)
    std::printf("| %s | %zu | %.1f%% | %.1f%% |\n", source.c_str(), errors.size(),
                100 * median(errors), 100 * *std::max_element(errors.begin(), errors.end()));
  std::printf("| **all** | %zu | %.1f%% | %.1f%% |\n", all_held.size(), 100 * median(all_held),
              100 * *std::max_element(all_held.begin(), all_held.end()));
  std::printf(
      "\nOf the %zu held-out layouts, %zu are in the planner's first five or within 5 %% of "
      "its first; for %zu it claims a speed-up above 1.3x.\n",
      all_held.size(), near_top, overclaimed);
  std::printf("<!-- end output -->\n");
  if (!check) return 0;
  // The recorded bound: held out, the median |error| was 10.7 % when the defaults were fitted.
  constexpr double median_bound = 0.115;
  bool ok = true;
  if (std::abs(compute - defaults.compute_efficiency) > 0.005 ||
      std::abs(network - defaults.network_efficiency) > 0.005) {
    std::cerr << "the defaults are not the fit\n";
    ok = false;
  }
  if (median(all_held) > median_bound) {
    std::cerr << "the held-out median error " << median(all_held) << " exceeds " << median_bound
              << "\n";
    ok = false;
  }
  return ok ? 0 : 1;
}
