// SPDX-License-Identifier: MIT
// vramfit: the command-line face of the library. It evaluates the same constexpr formulas at run
// time, from a preset or a Hugging Face config.json. Bad input: one message on stderr, exit 2.
// "Does not fit": exit 1, only with --check.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>
#include <vramfit/hf_config.hpp>
#include <vramfit/vramfit.hpp>

#include "choices.hpp"
#include "render.hpp"
#include "timeline_view.hpp"

namespace {
using namespace vramfit;

/// Everything `vramfit train` reads.
struct train_options {
  std::string model = "llama-3-8b";
  std::string precision = "bf16-fp32-master";
  std::string optimizer = "adamw";
  std::optional<std::string> optimizer_impl;  ///< unset: what the optimizer's library picks
  std::int64_t micro_batch = 1;
  std::int64_t seq_len = 2048;
  std::int64_t grad_accum = 1;
  std::string attention = "flash";
  std::optional<double> dropout;
  std::string recompute = "none";
  std::int64_t recompute_layers = -1;
  bool non_reentrant = false;
  std::string activation_offload = "none";
  std::string loss = "fp32-upcast";
  std::int64_t dp = 1;
  std::optional<int> zero;
  std::string zero_impl = "deepspeed";
  std::string fsdp;
  std::int64_t fsdp_group = 0;
  std::int64_t tp = 1;
  bool sp = false;
  std::int64_t pp = 1;
  std::vector<std::int64_t> pp_stages;
  std::string schedule = "1f1b";
  std::int64_t virtual_stages = 1;
  std::int64_t cp = 1;
  std::int64_t ep = 1;
  std::string offload = "none";
  std::string offload_to = "cpu";
  std::int64_t lora_rank = 0;
  std::string lora_targets = "q_proj,v_proj";
  bool qlora = false;
  std::vector<std::string> trainable;
  std::string gpu = "h100";
  bool expandable_segments = false;
  std::string format = "table";
  std::string sweep;
  std::int64_t sweep_max = 0;
  bool check = false;
  bool timeline = false;
};

/// A preset by its key or its name in any case ("Llama-3-8B"), or a config.json file.
model load_model(const std::string& name) {
  const bool path_like = name.find('/') != std::string::npos ||
                         (name.size() > 5 && name.substr(name.size() - 5) == ".json");
  if (path_like || std::filesystem::exists(name)) return load_hf_config(name);
  return cli::lookup(
             presets, name, "model", [](const preset& p) { return std::string_view(p.key); },
             [](const preset& p) { return std::string_view(p.value.name); },
             " (a preset; a config.json path also works)")
      .value;
}

/// A GPU preset by its key or name in any case ("H100", "a100-80gb"), or a GPU given by its
/// capacity ("96GiB", "44GB").
gpu gpu_named(const std::string& key) {
  if (!key.empty() && key[0] >= '0' && key[0] <= '9') return gpu_with_capacity(key);
  return cli::lookup(
             gpu_presets, key, "GPU", [](const gpu_preset& p) { return std::string_view(p.key); },
             [](const gpu_preset& p) { return std::string_view(p.value.name); },
             ", or a capacity such as 96GiB or 44GB")
      .value;
}

/// "kinds[:first-last layers[:first-last experts]]", e.g. "expert:0-5:0-1" or "router".
tensor_selector parse_selector(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
  if (parts.empty() || parts.size() > 3)
    detail::raise("--trainable '" + text + "': use kinds[:layers[:experts]]");
  tensor_selector s{};
  std::stringstream kinds(parts[0]);
  for (std::string kind; std::getline(kinds, kind, ',');)
    s.kinds |= 1u << static_cast<int>(cli::choose(cli::kinds, kind, "tensor kind"));
  auto range = [&text](const std::string& r, std::int64_t& first, std::int64_t& count) {
    if (r == "*") return;
    const auto dash = r.find('-');
    try {
      const std::int64_t a = std::stoll(r.substr(0, dash));
      const std::int64_t b = dash == std::string::npos ? a : std::stoll(r.substr(dash + 1));
      if (a < 0 || b < a || b >= bounds::layers) throw std::invalid_argument(r);
      first = a;
      count = b - a + 1;
    } catch (const std::logic_error&) {
      detail::raise("--trainable '" + text + "': '" + r + "' is not a range such as 0-5 (below " +
                    std::to_string(bounds::layers) + ")");
    }
  };
  if (parts.size() > 1) range(parts[1], s.first_layer, s.layer_count);
  if (parts.size() > 2) range(parts[2], s.first_expert, s.expert_count);
  return s;
}

training_plan_value build_plan(const train_options& o, const model& m) {
  training t{m, cli::choose(cli::precisions, o.precision, "precision"),
             cli::choose(cli::optimizers, o.optimizer, "optimizer")};
  if (o.optimizer_impl)
    t.optimizer = with_implementation(
        t.optimizer,
        cli::choose(cli::optimizer_impls, *o.optimizer_impl, "optimizer implementation"));
  if (o.lora_rank < 0)
    detail::raise("--lora-rank must be positive (0: no LoRA), got " + std::to_string(o.lora_rank));
  if (o.qlora || o.lora_rank > 0) {
    const std::int64_t rank = o.lora_rank > 0 ? o.lora_rank : 16;
    t.finetune =
        o.qlora
            ? lora_finetuning(
                  rank, o.lora_targets == "q_proj,v_proj" ? "all-linear" : o.lora_targets.c_str(),
                  {}, nf4_double_quant::value, bf16::value)
            : lora_finetuning(rank, o.lora_targets.c_str());
  } else if (o.lora_targets != "q_proj,v_proj") {
    detail::raise("--lora-targets applies with --lora-rank or --qlora only");
  } else if (!o.trainable.empty()) {
    if (o.trainable.size() > 4) detail::raise("at most 4 --trainable selections");
    t.finetune = finetuning{"partial", finetune_kind::partial};
    for (const std::string& s : o.trainable) t.finetune.trainable.push_back(parse_selector(s));
  }
  layout& l = t.layout;
  l.data = o.dp;
  l.tensor = o.tp;
  l.sequence = o.sp;
  l.pipeline = o.pp;
  l.context = o.cp;
  l.expert = o.ep;
  if (o.pp_stages.size() > max_listed_stages)
    detail::raise("--pp-stages lists at most " + std::to_string(max_listed_stages) +
                  " stages, got " + std::to_string(o.pp_stages.size()) +
                  "; leave it out for even stages");
  for (std::int64_t layers : o.pp_stages) l.stage_layers.push_back(layers);
  if (o.zero) {
    if (*o.zero < 0 || *o.zero > 3)
      detail::raise("--zero must be 0, 1, 2 or 3, got " + std::to_string(*o.zero));
    l.zero = static_cast<sharding>(*o.zero);
    l.implementation = cli::choose(cli::zero_implementations, o.zero_impl, "ZeRO implementation");
  }
  if (!o.fsdp.empty()) {
    if (o.zero) detail::raise("--zero and --fsdp are two ways to shard: choose one");
    const fsdp_strategy s = cli::choose(cli::fsdp_strategies, o.fsdp, "FSDP strategy");
    l.implementation = shard_implementation::fsdp;
    l.zero = s == fsdp_strategy::shard_grad_op ? sharding::zero2
             : s == fsdp_strategy::no_shard    ? sharding::none
                                               : sharding::zero3;
    if (s == fsdp_strategy::hybrid_shard) {
      if (o.fsdp_group <= 0)
        detail::raise("--fsdp hybrid needs --fsdp-group (ranks per shard group)");
      l.shard_group = o.fsdp_group;
    }
  }
  if (o.fsdp_group != 0 && l.shard_group == 0)
    detail::raise("--fsdp-group applies to --fsdp hybrid only");
  const offload_target target = cli::choose(cli::offload_targets, o.offload_to, "offload target");
  if (o.offload == "optimizer" || o.offload == "all") l.optimizer_offload = target;
  if (o.offload == "all") l.parameter_offload = target;
  if (o.offload != "none" && o.offload != "optimizer" && o.offload != "all")
    detail::raise("unknown --offload '" + o.offload + "'; known: none, optimizer, all");
  validated(l, m);

  const bool dropout = o.dropout ? *o.dropout > 0 : m.dropout;
  if (o.dropout && !(*o.dropout >= 0 && *o.dropout < 1))  // NaN fails both comparisons
    detail::raise("--dropout must be a probability in [0, 1), got " + std::to_string(*o.dropout));
  if (o.recompute_layers < -1)
    detail::raise("--recompute-layers must be a layer count or -1 (all), got " +
                  std::to_string(o.recompute_layers));
  if (o.recompute_layers != -1 && o.recompute != "full")
    detail::raise("--recompute-layers applies to --recompute full only");
  if (o.activation_offload != "none" && o.activation_offload != "cpu")
    detail::raise("unknown --activation-offload '" + o.activation_offload.substr(0, 40) +
                  "'; known: none, cpu");
  if (o.non_reentrant && o.recompute != "full")
    detail::raise("--non-reentrant applies to --recompute full only");
  activation_options a{.micro_batch = o.micro_batch,
                       .sequence = o.seq_len,
                       .micro_batches = o.grad_accum,
                       .attention = cli::choose(cli::attentions, o.attention, "attention"),
                       .attention_dropout = dropout,
                       .hidden_dropout = dropout,
                       .recompute = cli::choose(cli::recomputes, o.recompute, "recompute policy"),
                       .recompute_layers = o.recompute_layers,
                       .reentrant_checkpoint = !o.non_reentrant,
                       .offload = o.activation_offload == "cpu",
                       .loss = cli::choose(cli::losses, o.loss, "loss"),
                       .schedule = cli::choose(cli::schedules, o.schedule, "pipeline schedule"),
                       .virtual_stages = o.virtual_stages};
  detail::check(a, l);
  return {t, a, runtime_overheads{.expandable_segments = o.expandable_segments}};
}

std::string describe(const train_options& o, const training_plan_value& p) {
  std::ostringstream s;
  s << "Training " << p.setup.model.name << " | " << p.setup.precision.name << " | "
    << p.setup.optimizer.name << " | " << p.setup.finetune.name;
  const layout& l = p.setup.layout;
  s << " | " << l.world() << (l.world() == 1 ? " GPU" : " GPUs");
  if (l.data > 1 || l.zero != sharding::none) {
    s << " (data " << l.data;
    if (l.zero != sharding::none)
      s << (l.implementation == shard_implementation::fsdp ? ", FSDP" : ", ZeRO-")
        << (l.implementation == shard_implementation::fsdp
                ? ""
                : std::to_string(static_cast<int>(l.zero)));
    s << ")";
  }
  if (l.tensor > 1) s << " TP " << l.tensor << (l.sequence ? "+SP" : "");
  if (l.pipeline > 1) s << " PP " << l.pipeline;
  if (l.context > 1) s << " CP " << l.context;
  if (l.expert > 1) s << " EP " << l.expert;
  s << " | micro-batch " << o.micro_batch << " x " << o.seq_len;
  if (o.grad_accum > 1) s << " x " << o.grad_accum << " accumulated";
  s << " | " << o.attention << " attention, recompute " << o.recompute;
  return s.str();
}

cli::estimate estimate_of(const train_options& o, const training_plan_value& p, const gpu& g) {
  const stage_states most = most_loaded_rank(p);
  cli::estimate e;
  e.title = describe(o, p);
  e.model_name = p.setup.model.name;
  const tensor_ledger ledger = tensors(p.setup.model);
  e.parameters = parameters(ledger);
  e.trainable_parameters = trainable_parameters(p.setup.finetune, ledger);
  e.device = g;
  e.ledger = breakdown(p, g);
  e.fit = fit(p, g);
  e.peak_at = peak_moment(e.ledger);
  e.stage = most.stage;
  const model& m = p.setup.model;
  for (bool moe : {false, true}) {
    if (moe && !m.is_moe()) continue;
    const bytes b = layer_activation_bytes(m, p.setup.precision, p.batch, p.setup.layout, moe,
                                           p.batch.recompute);
    if (b > e.activations_per_layer) e.activations_per_layer = b;
  }
  return e;
}

int run_train(const train_options& o) {
  const model m = load_model(o.model);
  const gpu device = gpu_named(o.gpu);
  const gpu* g = &device;
  const training_plan_value plan = build_plan(o, m);
  if (!o.sweep.empty()) {
    if (o.timeline) detail::raise("--timeline shows one step: leave out --sweep");
    if (o.sweep != "micro-batch" && o.sweep != "seq-len")
      detail::raise("unknown --sweep '" + o.sweep + "'; known: micro-batch, seq-len");
    const std::int64_t start = o.sweep == "micro-batch" ? o.micro_batch : o.seq_len;
    if (o.sweep_max != 0 && o.sweep_max < start)
      detail::raise("--sweep-max must be at least the first value (" + std::to_string(start) +
                    "), got " + std::to_string(o.sweep_max));
    const std::int64_t stop = o.sweep_max > 0 ? o.sweep_max : detail::checked_mul(start, 64);
    std::vector<cli::sweep_point> points;  // doubling: at most 63 points
    for (std::int64_t x = start;; x *= 2) {
      train_options swept = o;
      (o.sweep == "micro-batch" ? swept.micro_batch : swept.seq_len) = x;
      try {
        points.push_back({x, fit(build_plan(swept, m), *g).required});
      } catch (const overflow_error&) {
        detail::raise("--sweep-max: at " + o.sweep + " " + std::to_string(x) +
                      " the memory no longer fits in 64 bits; choose a smaller --sweep-max");
      }
      if (x > stop / 2) break;  // the next value passes the last (and may not fit in 64 bits)
    }
    const std::string title = describe(o, plan) + " | sweep " + o.sweep;
    if (o.format == "svg") {
      cli::print_sweep_svg(std::cout, title, o.sweep.c_str(), points, *g);
    } else if (o.format == "json") {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& p : points)
        rows.push_back(
            {{o.sweep, p.x}, {"total", p.required.count}, {"fits", p.required <= g->capacity}});
      std::cout << nlohmann::json{{"configuration", title},
                                  {"device", {{"name", g->name}, {"capacity", g->capacity.count}}},
                                  {"sweep", rows}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << title << "\n\n";
      for (const auto& p : points)
        std::cout << "  " << o.sweep << " " << p.x << ": " << to_string(p.required)
                  << (p.required <= g->capacity ? "  fits\n" : "  does not fit\n");
    }
    return 0;
  }
  const cli::estimate e = estimate_of(o, plan, *g);
  if (o.timeline) {
    const step_timeline tl = step_timeline_of(plan.setup, plan.batch, e.stage);
    const cli::timeline_view v{e, tl};
    if (o.format == "json")
      std::cout << cli::timeline_json(v).dump(2) << "\n";
    else if (o.format == "svg")
      cli::print_timeline_svg(std::cout, v);
    else
      cli::print_timeline_table(std::cout, v, o.format == "markdown");
  } else if (o.format == "json")
    std::cout << cli::to_json(e).dump(2) << "\n";
  else if (o.format == "markdown")
    cli::print_markdown(std::cout, e);
  else if (o.format == "svg")
    cli::print_svg(std::cout, e);
  else
    cli::print_table(std::cout, e);
  return o.check && !e.fit.fits() ? 1 : 0;
}

/// Everything `vramfit infer` reads.
struct infer_options {
  std::string model = "llama-3-8b";
  std::string weights = "bf16";
  std::string kv_dtype = "bf16";
  std::int64_t batch = 1;
  std::int64_t beams = 1;
  std::int64_t context = 4096;
  std::int64_t generate = 0;
  std::int64_t block = 0;
  std::int64_t prefill_chunk = 0;
  std::int64_t cuda_graphs_mib = 0;
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::string gpu = "h100";
  std::optional<std::int64_t> utilization;
  std::string format = "table";
  bool check = false;
};

int run_infer(const infer_options& o) {
  const model m = load_model(o.model);
  const gpu g = gpu_named(o.gpu);
  const weight_layout w = cli::choose(cli::weight_layouts, o.weights, "weight format");
  // int8 and int4 KV keep an fp16 scale per head and token: group over head_dim.
  kv_cache_config kv{cli::choose(cli::kv_formats, o.kv_dtype, "KV dtype"), o.block};
  if (kv.format.level1.block > 0)
    kv.format.level1.block = m.is_mla() ? m.mla.kv_lora_rank + m.mla.qk_rope_head_dim : m.head_dim;
  const layout l = validated(layout{.tensor = o.tp, .pipeline = o.pp}, m);
  if (o.cuda_graphs_mib < 0) detail::raise("--cuda-graphs must not be negative");
  const request_shape r{.batch = o.batch,
                        .beams = o.beams,
                        .prompt = o.context,
                        .generated = o.generate,
                        .prefill_chunk = o.prefill_chunk,
                        .cuda_graphs = (o.cuda_graphs_mib * MiB).count};
  if (o.utilization && (*o.utilization < 1 || *o.utilization > 100))
    detail::raise("--utilization must be a percentage from 1 to 100, got " +
                  std::to_string(*o.utilization));
  std::ostringstream title;
  title << "Inference " << m.name << " | weights " << w.name << " | KV " << o.kv_dtype << " | "
        << l.world() << (l.world() == 1 ? " GPU" : " GPUs")
        << (o.tp > 1 ? " TP " + std::to_string(o.tp) : "")
        << (o.pp > 1 ? " PP " + std::to_string(o.pp) : "") << " | batch " << o.batch
        << (o.beams > 1 ? " x " + std::to_string(o.beams) + " beams" : "") << " | context "
        << o.context + o.generate;
  if (o.utilization) {
    const serving_budget b = serve(m, l, w, kv, r, g, *o.utilization);
    const nlohmann::json j{{"configuration", title.str()},
                           {"device", {{"name", g.name}, {"capacity", g.capacity.count}}},
                           {"requested", b.requested.count},
                           {"weights", b.weights.count},
                           {"forward_peak", b.forward_peak.count},
                           {"non_torch", b.non_torch.count},
                           {"kv_pool", b.kv_pool.count},
                           {"kv_tokens", b.kv_tokens},
                           {"sequences", b.sequences}};
    if (o.format == "json") {
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << title.str() << "\nServing budget at " << *o.utilization << " % of " << g.name
                << " (" << to_string(g.capacity) << ")\n\n"
                << "  requested          " << to_string(b.requested) << "\n"
                << "  - weights          " << to_string(b.weights) << "\n"
                << "  - forward peak     " << to_string(b.forward_peak) << "\n"
                << "  - non-torch        " << to_string(b.non_torch) << "\n"
                << "  = KV pool          " << to_string(b.kv_pool) << "\n\n"
                << "  " << report::grouped(b.kv_tokens) << " KV tokens, "
                << report::grouped(b.sequences) << " concurrent sequences of "
                << o.context + o.generate << " tokens\n";
    }
    return o.check && b.sequences < o.batch ? 1 : 0;
  }
  cli::estimate e;
  e.title = title.str();
  e.model_name = m.name;
  e.parameters = parameters(tensors(m));
  e.device = g;
  const stage_states most = most_loaded_gpu(m, l, w, kv, r, g);
  e.ledger = most.ledger;
  e.stage = most.stage;
  e.peak_at = peak_moment(e.ledger);
  e.fit.required = peak(e.ledger);
  e.fit.available = g.capacity;
  if (o.format == "json")
    std::cout << cli::to_json(e).dump(2) << "\n";
  else if (o.format == "markdown")
    cli::print_markdown(std::cout, e);
  else if (o.format == "svg")
    cli::print_svg(std::cout, e);
  else {
    cli::print_table(std::cout, e);
    std::cout << "  At this context, up to " << report::grouped(max_batch(m, l, w, kv, r, g, 65536))
              << " sequences fit; at this batch, up to "
              << report::grouped(max_context(m, l, w, kv, r, g)) << " tokens.\n";
  }
  return o.check && !e.fit.fits() ? 1 : 0;
}

/// `vramfit plan`: the train options, and the space to search.
struct plan_options {
  std::int64_t gpus = 8;
  std::int64_t max_tp = 8;
  std::int64_t max_pp = 4;
  bool no_offload = false;
  std::string sharding = "deepspeed";
};

std::string describe_layout(const candidate& c) {
  const layout& l = c.layout;
  std::ostringstream s;
  s << "DP " << l.data;
  if (l.zero != sharding::none)
    s << (l.implementation == shard_implementation::fsdp
              ? (l.zero == sharding::zero3 ? " FSDP full" : " FSDP grad-op")
              : " ZeRO-" + std::to_string(static_cast<int>(l.zero)));
  if (l.tensor > 1) s << ", TP " << l.tensor;
  if (l.pipeline > 1) s << ", PP " << l.pipeline;
  const char* recompute[] = {"none", "selective", "full"};
  s << ", recompute " << recompute[static_cast<int>(c.recompute)];
  if (l.optimizer_offload != offload_target::none) s << ", optimizer offloaded";
  return s.str();
}

int run_plan(const train_options& o, const plan_options& space) {
  const model m = load_model(o.model);
  const gpu g = gpu_named(o.gpu);
  if (o.timeline) detail::raise("--timeline applies to `vramfit train`");
  const training_plan_value base = build_plan(o, m);
  if (space.gpus > max_world_size)
    detail::raise("--gpus must be at most " + std::to_string(max_world_size) + ", got " +
                  std::to_string(space.gpus));
  if (space.sharding != "deepspeed" && space.sharding != "fsdp")
    detail::raise("unknown --sharding '" + space.sharding + "'; known: deepspeed, fsdp");
  const search_result r =
      search_layouts(base, g,
                     {.gpus = space.gpus,
                      .max_tensor = space.max_tp,
                      .max_pipeline = space.max_pp,
                      .try_offload = !space.no_offload,
                      .sharding = space.sharding == "fsdp" ? shard_implementation::fsdp
                                                           : shard_implementation::deepspeed});
  const char* verdicts[] = {"chosen", "does not fit", "breaks a rule", "costlier (not evaluated)"};
  nlohmann::json candidates = nlohmann::json::array();
  report::table t({"layout", "required", "verdict"});
  for (const candidate& c : r.candidates) {
    const std::string verdict = c.verdict == rejection::breaks_a_rule
                                    ? std::string("breaks a rule: ") + c.rule
                                    : verdicts[static_cast<int>(c.verdict)];
    candidates.push_back(
        {{"layout", describe_layout(c)}, {"required", c.required.count}, {"verdict", verdict}});
    if (c.verdict != rejection::costlier)
      t.add({describe_layout(c), c.required == bytes{} ? "-" : to_string(c.required), verdict});
  }
  nlohmann::json answer{{"device", {{"name", g.name}, {"capacity", g.capacity.count}}},
                        {"gpus", space.gpus},
                        {"candidates", candidates},
                        {"unlisted_candidates", r.unlisted}};
  std::ostringstream text;
  text << "Searching layouts of " << space.gpus << " x " << g.name << " for " << m.name << " | "
       << base.setup.precision.name << " | " << base.setup.optimizer.name << " | micro-batch "
       << o.micro_batch << " x " << o.seq_len << "\n"
       << "Cost order: no offload, then less model parallelism, then less recompute, then a "
          "lower ZeRO stage.\n\n";
  if (r.chosen >= 0) {
    const candidate& c = r.candidates[static_cast<std::size_t>(r.chosen)];
    training_plan_value chosen = base;
    chosen.setup.layout = c.layout;
    chosen.batch.recompute = c.recompute;
    const std::int64_t batch = max_micro_batch(chosen, g, 1024);
    const std::int64_t sequence = max_sequence(chosen, g);
    answer["chosen"] = {{"layout", describe_layout(c)},
                        {"required", c.required.count},
                        {"max_micro_batch", batch},
                        {"max_sequence", sequence}};
    text << "Chosen: " << describe_layout(c) << ", " << to_string(c.required) << " per GPU\n"
         << "With it: micro-batch up to " << batch << " at " << o.seq_len
         << " tokens; sequences up to " << report::grouped(sequence) << " tokens at micro-batch "
         << o.micro_batch << "\n\n";
  } else {
    answer["chosen"] = nullptr;
    text << "No layout of " << space.gpus << " GPUs fits.\n\n";
  }
  if (o.format == "json")
    std::cout << answer.dump(2) << "\n";
  else
    std::cout << text.str() << (o.format == "markdown" ? "" : "Candidates evaluated:\n\n") << t
              << (r.unlisted > 0
                      ? "\n... and " + std::to_string(r.unlisted) + " more candidates, not listed\n"
                      : std::string());
  return o.check && r.chosen < 0 ? 1 : 0;
}

int run_models(const std::string& format) {
  nlohmann::json rows = nlohmann::json::array();
  report::table t({"preset", "name", "parameters", "active per token", "layers", "hidden"});
  for (const preset& p : presets) {
    const tensor_ledger l = tensors(p.value);
    rows.push_back({{"key", p.key},
                    {"name", p.value.name},
                    {"parameters", parameters(l)},
                    {"active_parameters", active_parameters(p.value, l)}});
    t.add({p.key, p.value.name, report::grouped(parameters(l)),
           report::grouped(active_parameters(p.value, l)), std::to_string(p.value.layers),
           std::to_string(p.value.hidden)});
  }
  if (format == "json")
    std::cout << rows.dump(2) << "\n";
  else
    std::cout << t;
  return 0;
}

int run_gpus(const std::string& format) {
  nlohmann::json rows = nlohmann::json::array();
  report::table t({"preset", "name", "capacity", "bytes", "source"});
  for (const gpu_preset& g : gpu_presets) {
    rows.push_back({{"key", g.key},
                    {"name", g.value.name},
                    {"capacity", g.value.capacity.count},
                    {"source", g.value.source}});
    t.add({g.key, g.value.name, to_string(g.value.capacity),
           report::grouped(g.value.capacity.count), g.value.source});
  }
  if (format == "json")
    std::cout << rows.dump(2) << "\n";
  else
    std::cout << t;
  return 0;
}

/// An option that takes a positive integer, named as such in the error.
const CLI::Validator positive(
    [](std::string& value) -> std::string {
      try {
        std::size_t used = 0;
        if (std::stoll(value, &used) > 0 && used == value.size()) return {};
      } catch (const std::logic_error&) {
      }
      return "must be a positive integer, got " + value;
    },
    "POSITIVE");

/// The formats of one estimate (train and infer).
void add_estimate_format(CLI::App& cmd, std::string& format) {
  cmd.add_option("--format,-f", format, "table, markdown, json or svg")
      ->check(CLI::IsMember({"table", "markdown", "json", "svg"}))
      ->capture_default_str();
}

void add_train_options(CLI::App& cmd, train_options& o) {
  cmd.add_option("--model,-m", o.model, "A preset (see `vramfit models`) or a config.json path")
      ->capture_default_str();
  cmd.add_option("--precision", o.precision,
                 "fp32, bf16, fp16, amp-bf16, amp-fp16, bf16-fp32-master, fp16-fp32-master, fp8")
      ->capture_default_str();
  cmd.add_option(
         "--optimizer", o.optimizer,
         "sgd, sgd-momentum, adam, adamw, adamw-amsgrad, adamw-fused, adagrad, rmsprop, adadelta, "
         "adamax, nadam, radam, rprop, lion, adafactor, adamw-8bit, paged-adamw-8bit, muon")
      ->capture_default_str();
  cmd.add_option("--optimizer-impl", o.optimizer_impl,
                 "for-loop, foreach or fused (default: what torch.optim picks on CUDA)");
  cmd.add_option("--micro-batch,-b", o.micro_batch, "Sequences per micro-batch")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--seq-len,-s", o.seq_len, "Tokens per sequence")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--grad-accum", o.grad_accum,
                 "Micro-batches per optimizer step (gradient accumulation, pipeline)")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--attention", o.attention, "eager or flash")->capture_default_str();
  cmd.add_option("--dropout", o.dropout,
                 "Dropout probability; overrides the model's (GPT-2, BERT: 0.1)");
  cmd.add_option("--recompute", o.recompute, "none, selective or full")->capture_default_str();
  cmd.add_option("--recompute-layers", o.recompute_layers,
                 "Full recompute for this many layers per stage (-1: all)")
      ->capture_default_str();
  cmd.add_option("--activation-offload", o.activation_offload,
                 "cpu: keep saved activations on the host and bring each layer back for its "
                 "backward (torchtune enable_activation_offloading), or none")
      ->capture_default_str();
  cmd.add_flag("--non-reentrant", o.non_reentrant,
               "Checkpoint with use_reentrant=False (Hugging Face's default is True)");
  cmd.add_option("--loss", o.loss, "fp32-upcast (Hugging Face), native or fused-chunked")
      ->capture_default_str();
  cmd.add_option("--dp", o.dp, "Data-parallel degree")->check(positive)->capture_default_str();
  cmd.add_option("--zero", o.zero, "ZeRO stage over the data-parallel ranks: 0, 1, 2 or 3");
  cmd.add_option("--zero-impl", o.zero_impl,
                 "deepspeed, paper or megatron (Megatron's distributed optimizer with --zero 1)")
      ->capture_default_str();
  cmd.add_option("--fsdp", o.fsdp,
                 "PyTorch FSDP over the data-parallel ranks: full, grad-op, hybrid or none");
  cmd.add_option("--fsdp-group", o.fsdp_group, "Ranks per shard group for --fsdp hybrid");
  cmd.add_option("--tp", o.tp, "Tensor-parallel degree")->check(positive)->capture_default_str();
  cmd.add_flag("--sp", o.sp, "Sequence parallelism (with --tp)");
  cmd.add_option("--pp", o.pp, "Pipeline-parallel degree")->check(positive)->capture_default_str();
  cmd.add_option("--pp-stages", o.pp_stages, "Layers per pipeline stage, e.g. 11,11,10")
      ->delimiter(',');
  cmd.add_option("--schedule", o.schedule, "Pipeline schedule: 1f1b, interleaved or gpipe")
      ->capture_default_str();
  cmd.add_option("--virtual-stages", o.virtual_stages, "Model chunks per rank (interleaved)")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--cp", o.cp, "Context-parallel degree")->check(positive)->capture_default_str();
  cmd.add_option("--ep", o.ep, "Expert-parallel degree")->check(positive)->capture_default_str();
  cmd.add_option(
         "--offload", o.offload,
         "none, optimizer (master, states, gradient partitions) or all (also ZeRO-3 weights)")
      ->capture_default_str();
  cmd.add_option("--offload-to", o.offload_to, "cpu or nvme")->capture_default_str();
  cmd.add_option("--lora-rank", o.lora_rank, "LoRA rank (0: no LoRA)");
  cmd.add_option("--lora-targets", o.lora_targets, "Comma-separated module names, or all-linear")
      ->capture_default_str();
  cmd.add_flag("--qlora", o.qlora,
               "QLoRA: NF4 base (double quantization), bf16 embeddings and head, LoRA r=16 on "
               "all-linear unless set");
  cmd.add_option("--trainable", o.trainable,
                 "Train only kinds[:layers[:experts]], e.g. router or expert:0-5:0-1 (repeatable)");
  cmd.add_option("--gpu,-g", o.gpu, "A GPU preset (see `vramfit gpus`) or a capacity such as 96GiB")
      ->capture_default_str();
  cmd.add_flag("--expandable-segments", o.expandable_segments,
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (smaller fragmentation reserve)");
  add_estimate_format(cmd, o.format);
  cmd.add_option("--sweep", o.sweep,
                 "Repeat for doubling micro-batch or seq-len: micro-batch or seq-len");
  cmd.add_option("--sweep-max", o.sweep_max, "Last value of the sweep (default: 64 x the first)");
  cmd.add_flag("--check", o.check, "Exit with status 1 when the plan does not fit");
  cmd.add_flag("--timeline", o.timeline,
               "Show the step as allocations and frees (with -f svg: a plot of the step)");
}
void add_infer_options(CLI::App& c, infer_options& o) {
  c.add_option("--model,-m", o.model, "A preset or a config.json path")->capture_default_str();
  c.add_option(
       "--weights", o.weights,
       "fp32, bf16, fp16, int8 (bitsandbytes), nf4 (double quantization), nf4-no-dq, fp4, fp4-dq, "
       "gptq, awq, fp8, fp8-per-channel, "
       "mxfp4 (experts), nvfp4")
      ->capture_default_str();
  c.add_option("--kv-dtype", o.kv_dtype,
               "bf16, fp16, fp32, fp8, int8, int4 (int8/int4 with an fp16 scale per head)")
      ->capture_default_str();
  c.add_option("--batch,-b", o.batch, "Sequences")->check(positive)->capture_default_str();
  c.add_option("--beams", o.beams, "Beams per sequence (each keeps its own cache)")
      ->check(positive)
      ->capture_default_str();
  c.add_option("--context,-c", o.context, "Prompt tokens per sequence")
      ->check(positive)
      ->capture_default_str();
  c.add_option("--generate", o.generate, "Tokens generated per sequence")->capture_default_str();
  c.add_option("--block", o.block, "Paged KV blocks of this many tokens (vLLM: 16; 0: none)")
      ->capture_default_str();
  c.add_option("--prefill-chunk", o.prefill_chunk,
               "Chunked prefill: tokens per forward (0: whole prompt)")
      ->capture_default_str();
  c.add_option("--cuda-graphs", o.cuda_graphs_mib, "MiB of captured CUDA graphs")
      ->capture_default_str();
  c.add_option("--tp", o.tp, "Tensor-parallel degree")->check(positive)->capture_default_str();
  c.add_option("--pp", o.pp, "Pipeline-parallel degree")->check(positive)->capture_default_str();
  c.add_option("--gpu,-g", o.gpu, "A GPU preset or a capacity such as 96GiB")
      ->capture_default_str();
  c.add_option("--utilization", o.utilization,
               "Serving budget in vLLM's style: gpu_memory_utilization in percent (e.g. 90)");
  add_estimate_format(c, o.format);
  c.add_flag("--check", o.check, "Exit with status 1 when it does not fit");
}
}  // namespace

/// The whole tool; main() is a call of it, and the option-parsing fuzzer calls it too.
int vramfit_cli_main(int argc, char** argv) {
  CLI::App app{
      "vramfit: how much memory each GPU needs to train a large language model, and whether it "
      "fits.\n"
      "Every byte from the same constexpr formulas as the C++ library; sizes in GiB/MiB (2^30/2^20 "
      "B)."};
  app.set_version_flag("--version", std::string("vramfit ") + vramfit::version);
  app.require_subcommand(1);
  train_options train;
  CLI::App* train_cmd = app.add_subcommand("train", "Memory per GPU of a training step");
  add_train_options(*train_cmd, train);
  train_options plan;
  plan_options space;
  CLI::App* plan_cmd = app.add_subcommand(
      "plan", "Search layouts (ZeRO stage, TP, PP, recompute, offload) for the cheapest that fits");
  add_train_options(*plan_cmd, plan);
  plan_cmd->add_option("--gpus", space.gpus, "GPUs every candidate uses")
      ->check(positive)
      ->capture_default_str();
  plan_cmd->add_option("--max-tp", space.max_tp, "Largest tensor-parallel degree to try")
      ->check(positive)
      ->capture_default_str();
  plan_cmd->add_option("--max-pp", space.max_pp, "Largest pipeline degree to try")
      ->check(positive)
      ->capture_default_str();
  plan_cmd->add_flag("--no-offload", space.no_offload, "Do not try optimizer offload");
  plan_cmd->add_option("--sharding", space.sharding, "deepspeed (ZeRO) or fsdp")
      ->capture_default_str();
  infer_options infer;
  CLI::App* infer_cmd =
      app.add_subcommand("infer", "Memory per GPU of inference: weights, KV cache, working memory");
  add_infer_options(*infer_cmd, infer);
  std::string list_format = "table";
  CLI::App* models_cmd = app.add_subcommand("models", "List the model presets");
  models_cmd->add_option("--format,-f", list_format, "table or json")
      ->check(CLI::IsMember({"table", "json"}));
  CLI::App* gpus_cmd = app.add_subcommand("gpus", "List the GPU presets and their capacities");
  gpus_cmd->add_option("--format,-f", list_format, "table or json")
      ->check(CLI::IsMember({"table", "json"}));
  // Help and errors say "vramfit", not the path the tool was started from.
  char program_name[] = "vramfit";
  if (argc > 0) argv[0] = program_name;
  try {
    app.parse(argc, argv);
    if (train_cmd->parsed()) return run_train(train);
    if (infer_cmd->parsed()) return run_infer(infer);
    if (plan_cmd->parsed()) return run_plan(plan, space);
    if (models_cmd->parsed()) return run_models(list_format);
    if (gpus_cmd->parsed()) return run_gpus(list_format);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "vramfit: " << e.what() << " (see vramfit --help)\n";
    return 2;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    std::cerr << (what.rfind("vramfit:", 0) == 0 ? what : "vramfit: " + what) << "\n";
    return 2;
  }
  return 0;
}

#ifndef VRAMFIT_CLI_NO_MAIN
int main(int argc, char** argv) {
  return vramfit_cli_main(argc, argv);
}
#endif
