// SPDX-License-Identifier: MIT
// vramfit: the command-line face of the library. It evaluates the same constexpr formulas at run
// time, from a preset or a Hugging Face config.json. Bad input: one message on stderr, exit 2.
// "Does not fit": exit 1, only with --check.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>
#include <vramfit/hf_config.hpp>
#include <vramfit/vramfit.hpp>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

#include "choices.hpp"
#include "frameworks.hpp"
#include "plan_view.hpp"
#include "render.hpp"
#include "timeline_view.hpp"

namespace {
using namespace vramfit;

/// Everything `vramfit train` reads.
struct train_options {
  std::string model = "llama-3-8b";
  std::string precision = "bf16-fp32-master";
  std::string optimizer = "adamw";
  std::string framework;  ///< its defaults fill in what is not given (frameworks.hpp)
  std::optional<std::string> optimizer_impl;  ///< unset: what the optimizer's library picks
  bool optimizer_in_backward = false;
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
  std::int64_t fsdp_version = 1;
  std::string reshard_after_forward;
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

/// --reshard-after-forward as layout::reshard_after_forward: true 0, false 1, or a rank count.
std::int64_t reshard_ranks(const std::string& text) {
  if (text.empty() || cli::same_name(text, "true")) return 0;
  if (cli::same_name(text, "false")) return 1;
  std::int64_t ranks = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ranks);
  if (ec != std::errc{} || end != text.data() + text.size() || ranks < 2)
    detail::raise(
        "--reshard-after-forward must be true, false or a rank count of 2 or more, got '" +
        text.substr(0, 40) + "'");
  return ranks;
}

training_plan_value build_plan(const train_options& o, const model& m) {
  training t{m, cli::choose(cli::precisions, o.precision, "precision"),
             cli::choose(cli::optimizers, o.optimizer, "optimizer")};
  if (o.optimizer_impl)
    t.optimizer = with_implementation(
        t.optimizer,
        cli::choose(cli::optimizer_impls, *o.optimizer_impl, "optimizer implementation"));
  t.optimizer.options.in_backward = o.optimizer_in_backward;
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
  l.fsdp_version = o.fsdp_version;
  l.reshard_after_forward = reshard_ranks(o.reshard_after_forward);
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
  if (o.non_reentrant && o.recompute != "full" && o.framework.empty())
    detail::raise(
        "--non-reentrant applies to --recompute full only (op-sac is always "
        "non-reentrant)");
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
  std::string framework;
  std::string format = "table";
  bool check = false;
};

/// Everything `vramfit load` reads.
struct load_options {
  std::string model = "llama-3-8b";
  std::string weights = "bf16";
  std::string init = "meta";
  std::string checkpoint = "bf16";
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::string gpu = "h100";
  std::string format = "table";
  bool check = false;
};

int run_load(const load_options& o) {
  const model m = load_model(o.model);
  const gpu g = gpu_named(o.gpu);
  const weight_layout w = cli::choose(cli::weight_layouts, o.weights, "weight format");
  const load_kind how = cli::choose(cli::load_kinds, o.init, "initialization");
  const element_format& checkpoint =
      cli::choose(cli::checkpoint_formats, o.checkpoint, "checkpoint format");
  const layout l = validated(layout{.tensor = o.tp, .pipeline = o.pp}, m);
  const loading_peak p = load_peak(m, w, how, l, checkpoint);
  // Loading runs no matmul and no collective: the CUDA context is the one overhead.
  const memory_ledger context = overheads(
      {.cublas_workspace = 0, .nccl_buffers = 0, .fragmentation_percent = 0}, g, p.device, 1);
  const bytes required = p.device + total(context);
  const bool fits = required <= g.capacity;
  std::ostringstream title;
  title << "Loading " << m.name << " | weights " << w.name << " | " << o.init << " init | "
        << l.world() << (l.world() == 1 ? " GPU" : " GPUs");
  const std::string verdict = fits ? "fits, " + to_string(g.capacity - required) + " free"
                                   : "does not fit, " + to_string(required - g.capacity) + " over";
  if (o.format == "json") {
    const nlohmann::json j{{"configuration", title.str()},
                           {"weights", p.weights.count},
                           {"transient", (p.device - p.weights).count},
                           {"transient_what", p.transient},
                           {"peak_allocated", p.device.count},
                           {"host", p.host.count},
                           {"overhead", total(context).count},
                           {"total", required.count},
                           {"device", {{"name", g.name}, {"capacity", g.capacity.count}}},
                           {"fits", fits}};
    std::cout << j.dump(2) << "\n";
  } else {
    report::table t({"what", "bytes"});
    t.add({"loaded weights", to_string(p.weights)});
    t.add({std::string("beside them: ") + p.transient, to_string(p.device - p.weights)});
    t.add({"peak allocated", to_string(p.device)});
    t.add({"CUDA context", to_string(total(context))});
    t.add({"total", to_string(required)});
    if (p.host > bytes{}) t.add({"host memory", to_string(p.host)});
    std::cout << title.str() << "\n\n"
              << t << "\n  " << g.name << ": " << to_string(g.capacity) << " -> " << verdict
              << "\n";
  }
  return o.check && !fits ? 1 : 0;
}

/// The framework `name` names, for `subcommand`.
const cli::framework& framework_named(const std::string& name, std::string_view subcommand) {
  std::string known;
  for (const cli::framework& f : cli::frameworks) {
    if (cli::same_name(name, f.name)) {
      if (subcommand == f.subcommand ||
          (subcommand == "plan" && std::string_view(f.subcommand) == "train"))
        return f;
      detail::raise(std::string("--framework ") + f.name + " applies to vramfit " + f.subcommand +
                    ", not " + std::string(subcommand));
    }
    known += (known.empty() ? "" : ", ") + std::string(f.name);
  }
  detail::raise("unknown --framework '" + name.substr(0, 40) + "'; known: " + known);
}

/// Fills in from `f` each option the command line left out, through `set(option, value)`.
template <class Set>
void apply_framework(const cli::framework& f, const CLI::App& cmd, bool lora, Set&& set) {
  for (const cli::framework_default& d : f.defaults) {
    if (cmd.get_option(d.option)->count() > 0) continue;
    if ((d.recipe == cli::recipe::full_finetune && lora) ||
        (d.recipe == cli::recipe::lora && !lora))
      continue;
    set(std::string_view(d.option), std::string(d.value));
  }
}

/// --framework's defaults for train and plan.
void apply_framework(const CLI::App& cmd, train_options& o) {
  if (o.framework.empty()) return;
  const cli::framework& f = framework_named(o.framework, cmd.get_name());
  apply_framework(f, cmd, o.lora_rank > 0 || o.qlora, [&](std::string_view option, std::string v) {
    if (option == "--precision") o.precision = v;
    if (option == "--optimizer") o.optimizer = v;
    if (option == "--optimizer-impl") o.optimizer_impl = v;
    if (option == "--optimizer-in-backward") o.optimizer_in_backward = true;
    if (option == "--recompute") o.recompute = v;
    if (option == "--non-reentrant") o.non_reentrant = true;
    if (option == "--loss") o.loss = v;
    if (option == "--fsdp-version") o.fsdp_version = std::stoll(v);
    if (option == "--zero-impl") o.zero_impl = v;
  });
}

/// --framework's defaults for infer.
void apply_framework(const CLI::App& cmd, infer_options& o) {
  if (o.framework.empty()) return;
  const cli::framework& f = framework_named(o.framework, cmd.get_name());
  apply_framework(f, cmd, false, [&](std::string_view option, std::string v) {
    if (option == "--utilization") o.utilization = std::stoll(v);
    if (option == "--block") o.block = std::stoll(v);
  });
}

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

/// `vramfit plan`: the space to search and the cluster its ranking assumes.
struct plan_options {
  std::int64_t gpus = 8;
  std::int64_t global_batch = 0;
  std::int64_t top = 10;
  bool all = false;
  std::int64_t max_tp = 0, max_pp = 0, max_cp = 0;
  bool no_offload = false;
  std::optional<std::string> sharding;
  cluster net{};
};

/// The train options `plan` decides itself: given, they fix that knob (or make no sense).
const std::set<std::string> decided_by_plan = {"--dp",
                                               "--tp",
                                               "--sp",
                                               "--pp",
                                               "--pp-stages",
                                               "--cp",
                                               "--ep",
                                               "--zero",
                                               "--zero-impl",
                                               "--fsdp",
                                               "--fsdp-group",
                                               "--fsdp-version",
                                               "--recompute",
                                               "--micro-batch",
                                               "--grad-accum",
                                               "--schedule",
                                               "--virtual-stages",
                                               "--offload",
                                               "--offload-to",
                                               "--model",
                                               "--gpu",
                                               "--format",
                                               "--check",
                                               "--timeline",
                                               "--sweep",
                                               "--sweep-max"};

/// The first long name of an option ("--micro-batch").
std::string long_name(const CLI::Option& o) {
  return o.get_lnames().empty() ? o.get_name() : "--" + o.get_lnames().front();
}

/// The `vramfit train` arguments that reproduce candidate `c`'s memory: the model, the GPU, the
/// train options the user gave `plan` that it does not decide, then the candidate's layout.
std::vector<std::string> train_argv(const CLI::App& cmd, const std::vector<std::string>& train,
                                    const train_options& o, const plan_candidate& c) {
  std::vector<std::string> argv{"vramfit", "train", "--model", o.model, "--gpu", o.gpu};
  for (const CLI::Option* opt : cmd.get_options()) {
    const std::string name = long_name(*opt);
    if (opt->count() == 0 || decided_by_plan.count(name) ||
        std::find(train.begin(), train.end(), name) == train.end())
      continue;
    if (opt->get_expected_min() == 0) {  // a flag
      argv.push_back(name);
      continue;
    }
    for (const std::string& value : opt->results()) argv.insert(argv.end(), {name, value});
  }
  const layout& l = c.layout;
  auto add = [&](const char* name, std::int64_t v) {
    argv.insert(argv.end(), {name, std::to_string(v)});
  };
  add("--dp", l.data);
  if (l.tensor > 1) add("--tp", l.tensor);
  if (l.sequence) argv.push_back("--sp");
  if (l.pipeline > 1) add("--pp", l.pipeline);
  if (c.virtual_stages > 1) {
    argv.insert(argv.end(), {"--schedule", "interleaved"});
    add("--virtual-stages", c.virtual_stages);
  } else if (o.schedule == "gpipe") {
    argv.insert(argv.end(), {"--schedule", "gpipe"});
  }
  if (l.context > 1) add("--cp", l.context);
  if (l.expert > 1) add("--ep", l.expert);
  if (l.implementation == shard_implementation::fsdp) {
    argv.insert(argv.end(), {"--fsdp", l.shard_group > 0           ? "hybrid"
                                       : l.zero == sharding::zero2 ? "grad-op"
                                                                   : "full"});
    if (l.shard_group > 0) add("--fsdp-group", l.shard_group);
    if (o.fsdp_version != 1) add("--fsdp-version", o.fsdp_version);
  } else if (l.zero != sharding::none) {
    add("--zero", static_cast<int>(l.zero));
    argv.insert(argv.end(),
                {"--zero-impl",
                 l.implementation == shard_implementation::megatron ? "megatron" : "deepspeed"});
  }
  argv.insert(argv.end(), {"--recompute", cli::recompute_name(c.recompute)});
  if (c.recompute == recompute_kind::full && c.recompute_layers > 0)
    add("--recompute-layers", c.recompute_layers);
  add("--micro-batch", c.micro_batch);
  if (c.micro_batches > 1) add("--grad-accum", c.micro_batches);
  if (l.optimizer_offload != offload_target::none)
    argv.insert(argv.end(), {"--offload", cli::offload_name(l)});
  return argv;
}

std::string joined(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

/// The search space: what the user fixed with train options, bounded by the plan options.
search_space space_of(const CLI::App& cmd, const train_options& o, const plan_options& p) {
  const auto given = [&](const char* name) { return cmd.get_option(name)->count() > 0; };
  for (const char* name :
       {"--grad-accum", "--pp-stages", "--offload", "--offload-to", "--recompute-layers"})
    if (given(name))
      detail::raise(std::string(name) + " is not a plan option: " +
                    (std::string(name) == "--grad-accum"
                         ? "the plan derives micro-batches from --global-batch"
                     : std::string(name) == "--pp-stages" ? "the plan splits the layers evenly"
                     : std::string(name) == "--recompute-layers"
                         ? "the plan recomputes the fewest layers that fit"
                         : "the plan offloads only when nothing else fits (--no-offload: never)"));
  if (p.top <= 0 || static_cast<std::size_t>(p.top) > search_result::max_top)
    detail::raise("--top must be between 1 and " + std::to_string(search_result::max_top) +
                  ", got " + std::to_string(p.top));
  search_space s{.gpus = p.gpus, .global_batch = p.global_batch};
  if (given("--dp")) s.data = o.dp;
  if (given("--tp")) s.tensor = o.tp;
  if (given("--pp")) s.pipeline = o.pp;
  if (given("--cp")) s.context = o.cp;
  if (given("--ep")) s.expert = o.ep;
  if (given("--virtual-stages")) s.virtual_stages = o.virtual_stages;
  if (given("--micro-batch")) s.micro_batch = o.micro_batch;
  if (given("--schedule") && o.schedule != "interleaved") s.virtual_stages = 1;
  if (given("--recompute"))
    s.recompute = static_cast<int>(cli::choose(cli::recomputes, o.recompute, "recompute policy"));
  s.max_tensor = p.max_tp;
  s.max_pipeline = p.max_pp;
  s.max_context = p.max_cp;
  s.try_offload = !p.no_offload;
  s.top = static_cast<std::size_t>(p.top);
  s.prune = !p.all;
  s.net = p.net;
  // The sharding: --sharding names a family; --zero (with --zero-impl) or --fsdp fix a stage.
  std::optional<sharding_family> family;
  if (p.sharding) family = cli::choose(cli::sharding_families, *p.sharding, "sharding");
  auto fix = [&](sharding_family f, int stage) {
    if (family && *family != f && *family != sharding_family::any)
      detail::raise("--sharding " + *p.sharding + " contradicts the --zero/--fsdp given");
    family = f;
    s.zero = stage;
  };
  if (o.zero) {
    if (*o.zero < 0 || *o.zero > 3)
      detail::raise("--zero must be 0, 1, 2 or 3, got " + std::to_string(*o.zero));
    const shard_implementation impl =
        cli::choose(cli::zero_implementations, o.zero_impl, "ZeRO implementation");
    if (impl == shard_implementation::paper)
      detail::raise("plan searches deepspeed's and megatron's ZeRO, not the paper's");
    fix(impl == shard_implementation::megatron ? sharding_family::megatron
                                               : sharding_family::deepspeed,
        *o.zero);
  }
  if (!o.fsdp.empty()) {
    if (o.zero) detail::raise("--zero and --fsdp are two ways to shard: choose one");
    const fsdp_strategy f = cli::choose(cli::fsdp_strategies, o.fsdp, "FSDP strategy");
    fix(sharding_family::fsdp, f == fsdp_strategy::no_shard        ? 0
                               : f == fsdp_strategy::shard_grad_op ? 2
                                                                   : 3);
    if (f == fsdp_strategy::hybrid_shard) {
      if (o.fsdp_group <= 0)
        detail::raise("--fsdp hybrid needs --fsdp-group (ranks per shard group)");
      s.shard_group = o.fsdp_group;
    }
  }
  if (o.fsdp_group != 0 && s.shard_group == 0)
    detail::raise("--fsdp-group applies to --fsdp hybrid only");
  if (!o.reshard_after_forward.empty())
    detail::raise(
        "plan searches FSDP with reshard_after_forward=True; give "
        "--reshard-after-forward to train");
  s.sharding = family.value_or(sharding_family::deepspeed);
  return s;
}

bool stderr_is_terminal() {
#if __has_include(<unistd.h>)
  return isatty(STDERR_FILENO) != 0;
#else
  return false;
#endif
}

/// A progress bar on stderr once a search has run for half a second, when stderr is a terminal.
class progress_bar {
 public:
  void operator()(std::int64_t done, std::int64_t total) {
    if (!terminal_) return;
    const double elapsed = std::chrono::duration<double>(clock::now() - start_).count();
    if (elapsed < 0.5 || done * 100 / total == shown_) return;
    shown_ = done * 100 / total;
    std::cerr << "\rvramfit: searching layouts " << shown_ << "% (" << done << " of " << total
              << " structures)" << std::flush;
    drawn_ = true;
  }
  ~progress_bar() {
    if (drawn_) std::cerr << "\r" << std::string(72, ' ') << "\r" << std::flush;
  }

 private:
  using clock = std::chrono::steady_clock;
  bool terminal_ = stderr_is_terminal();
  clock::time_point start_ = clock::now();
  std::int64_t shown_ = -1;
  bool drawn_ = false;
};

int run_plan(const CLI::App& cmd, const std::vector<std::string>& train, const train_options& o,
             const plan_options& p) {
  const model m = load_model(o.model);
  const gpu g = gpu_named(o.gpu);
  if (o.timeline) detail::raise("--timeline applies to `vramfit train`");
  if (o.sweep.size()) detail::raise("--sweep applies to `vramfit train`");
  if (p.gpus > max_world_size)
    detail::raise("--gpus must be at most " + std::to_string(max_world_size) + ", got " +
                  std::to_string(p.gpus));
  const search_space space = space_of(cmd, o, p);
  // The model, precision, optimizer, fine-tuning and batch options, on one GPU: the search
  // decides the layout, micro-batch and recompute.
  train_options single = o;
  single.dp = single.tp = single.pp = single.cp = single.ep = single.virtual_stages = 1;
  single.micro_batch = single.grad_accum = 1;
  single.sp = false;
  single.zero.reset();
  single.fsdp.clear();
  single.fsdp_group = 0;
  if (single.schedule == "interleaved") single.schedule = "1f1b";
  const training_plan_value base = build_plan(single, m);
  std::vector<plan_candidate> listed;
  search_result r;
  {
    progress_bar bar;
    const auto list = [&](const plan_candidate& c) {
      if (p.all) listed.push_back(c);
    };
    r = search_layouts(base, g, space, list, std::ref(bar));
  }
  std::vector<cli::ranked_layout> ranked;
  for (const plan_candidate& c : r.best) ranked.push_back({c, train_argv(cmd, train, o, c)});
  const cluster_figures f = figures_of(space.net, g);

  // Counts of the rest, by reason; broken rules by rule.
  const char* reasons[] = {"ranked", "does_not_fit", "breaks_a_rule", "batch_indivisible",
                           "slower", "outranked"};
  nlohmann::json counts = nlohmann::json::object(), rules = nlohmann::json::object();
  for (std::size_t i = 0; i < rejection_count; ++i) counts[reasons[i]] = r.counts[i];
  for (std::size_t i = 0; i < layout_rule_count; ++i)
    if (r.rules[i] > 0) rules[to_string(static_cast<layout_rule>(i))] = r.rules[i];
  std::ostringstream title;
  title << "Planning " << m.name << " on " << report::grouped(p.gpus) << " x " << g.name << " | "
        << base.setup.precision.name << " | " << base.setup.optimizer.name << " | "
        << base.setup.finetune.name << " | global batch " << report::grouped(r.global_batch)
        << " x " << report::grouped(o.seq_len) << " tokens";
  char assumptions[400];
  std::snprintf(assumptions, sizeof assumptions,
                "Ranked by an estimated step time, not a measurement: %.0f%% of %.0f TFLOP/s%s "
                "per GPU, %.0f GB/s within nodes of %lld GPUs%s, %.0f GB/s between nodes "
                "(docs/planner.md). Memory per GPU is exact.",
                100 * space.net.mfu, f.flops / space.net.mfu / 1e12,
                f.assumed_peak ? " (an H100's: the GPU's peak is unknown)" : "", f.intra / 1e9,
                static_cast<long long>(f.gpus_per_node),
                f.assumed_link ? " (an H100's NVLink: the GPU's link is unknown)" : "",
                f.inter / 1e9);
  if (o.format == "json") {
    nlohmann::json best = nlohmann::json::array();
    for (const cli::ranked_layout& c : ranked) best.push_back(cli::to_json(c, g));
    nlohmann::json answer{{"device", {{"name", g.name}, {"capacity", g.capacity.count}}},
                          {"gpus", p.gpus},
                          {"global_batch", r.global_batch},
                          {"sequence", o.seq_len},
                          {"estimate",
                           {{"note", assumptions},
                            {"flops_per_second", f.flops},
                            {"intra_node_bytes_per_second", f.intra},
                            {"inter_node_bytes_per_second", f.inter},
                            {"gpus_per_node", f.gpus_per_node}}},
                          {"chosen", best.empty() ? nlohmann::json(nullptr) : best[0]},
                          {"candidates", best},
                          {"offload_searched", r.offloaded},
                          {"rejected", counts},
                          {"broken_rules", rules},
                          {"memory_evaluations", r.memory_evaluations}};
    if (p.all) {
      nlohmann::json all = nlohmann::json::array();
      for (const plan_candidate& c : listed) {
        nlohmann::json j = cli::to_json({c, {}}, g);
        j.erase("argv");
        j["verdict"] = reasons[static_cast<int>(c.verdict)];
        if (c.verdict == rejection::breaks_a_rule) j["rule"] = to_string(c.rule);
        all.push_back(j);
      }
      answer["all"] = all;
    }
    std::cout << answer.dump(2) << "\n";
  } else if (o.format == "svg") {
    cli::print_plan_svg(std::cout, title.str(), ranked, g);
  } else {
    std::cout << (o.format == "markdown" ? "**" + title.str() + "**" : title.str()) << "\n\n"
              << assumptions << "\n\n";
    if (ranked.empty()) {
      std::cout << "No layout of " << report::grouped(p.gpus) << " GPUs fits"
                << (r.offloaded ? ", even with offload" : "") << ".\n\n";
    } else {
      if (r.offloaded) std::cout << "Nothing fits without offload; offloaded layouts:\n\n";
      std::cout << cli::plan_table(ranked, g) << "\nReproduce #1: `" << joined(ranked.front().argv)
                << "`\n\n";
    }
    std::cout << "Candidates: " << report::grouped(r.candidates()) << "; ranked " << r.counts[0]
              << ", outranked " << report::grouped(r.counts[5]) << ", does not fit "
              << report::grouped(r.counts[1]) << ", breaks a rule " << report::grouped(r.counts[2])
              << ", batch does not divide " << report::grouped(r.counts[3]) << ", cannot beat #"
              << space.top << " (not evaluated) " << report::grouped(r.counts[4]) << ".\n";
    for (std::size_t i = 0; i < layout_rule_count; ++i)
      if (r.rules[i] > 0)
        std::cout << "  " << to_string(static_cast<layout_rule>(i)) << ": "
                  << report::grouped(r.rules[i]) << "\n";
    if (p.all) {
      report::table t({"layout", "micro-batch", "recompute", "per GPU", "step (s)", "verdict"});
      for (const plan_candidate& c : listed)
        t.add({cli::describe(c), std::to_string(c.micro_batch), cli::recompute_label(c),
               c.required == bytes{} ? "-" : to_string(c.required),
               c.time.total() > 0 ? cli::seconds(c.time.total()) : "-",
               c.verdict == rejection::breaks_a_rule ? to_string(c.rule)
                                                     : reasons[static_cast<int>(c.verdict)]});
      std::cout << "\nEvery candidate:\n\n" << t;
    }
  }
  return o.check && ranked.empty() ? 1 : 0;
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

int run_frameworks(const std::string& format) {
  nlohmann::json rows = nlohmann::json::array();
  report::table t({"framework", "command", "option", "value", "recipe", "source"});
  constexpr const char* recipes[] = {"", "full fine-tuning", "LoRA"};
  for (const cli::framework& f : cli::frameworks) {
    nlohmann::json defaults = nlohmann::json::array();
    for (const cli::framework_default& d : f.defaults) {
      const char* recipe = recipes[static_cast<int>(d.recipe)];
      defaults.push_back(
          {{"option", d.option}, {"value", d.value}, {"recipe", recipe}, {"source", d.source}});
      t.add({f.name, f.subcommand, d.option, d.value, recipe, d.source});
    }
    rows.push_back({{"key", f.name},
                    {"summary", f.summary},
                    {"command", f.subcommand},
                    {"defaults", defaults}});
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
  cmd.add_option("--framework", o.framework,
                 "torchtitan, torchtune, deepspeed, megatron, fsdp1 or hf-trainer: its defaults "
                 "for the options not given (vramfit frameworks lists them)");
  cmd.add_option("--precision", o.precision,
                 "fp32, bf16, fp16, amp-bf16, amp-fp16, bf16-fp32-master, "
                 "bf16-fp32-master-16bit-grads, fp16-fp32-master, fp8")
      ->capture_default_str();
  cmd.add_option(
         "--optimizer", o.optimizer,
         "sgd, sgd-momentum, adam, adamw, adamw-amsgrad, adamw-fused, adagrad, rmsprop, adadelta, "
         "adamax, nadam, radam, rprop, lion, adafactor, adamw-8bit, paged-adamw-8bit, muon")
      ->capture_default_str();
  cmd.add_option("--optimizer-impl", o.optimizer_impl,
                 "for-loop, foreach or fused (default: what torch.optim picks on CUDA)");
  cmd.add_flag("--optimizer-in-backward", o.optimizer_in_backward,
               "Step each parameter as its gradient is ready and free the gradient (torchtune "
               "optimizer_in_bwd): no full set of gradients");
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
  cmd.add_option("--recompute", o.recompute,
                 "none, selective (the attention core), full, or op-sac (torchtitan's op-level "
                 "selective checkpointing: every second matmul and attention outputs kept)")
      ->capture_default_str();
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
  cmd.add_option("--fsdp-version", o.fsdp_version,
                 "1: FullyShardedDataParallel; 2: fully_shard (fp32 sharded parameters under "
                 "mixed precision, gradients reduced through a copy-in buffer)")
      ->capture_default_str();
  cmd.add_option("--reshard-after-forward", o.reshard_after_forward,
                 "FSDP2 full sharding: true (the default), false (units stay gathered until "
                 "their backward) or N (resharded over N ranks)");
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
void add_load_options(CLI::App& c, load_options& o) {
  c.add_option("--model,-m", o.model, "A preset or a config.json path")->capture_default_str();
  c.add_option("--weights", o.weights, "The loaded format, as infer's --weights")
      ->capture_default_str();
  c.add_option("--init", o.init,
               "meta (created on the meta device, each tensor materialized in its format: "
               "from_pretrained), device (built in fp32 on the GPU, then cast) or host (built in "
               "fp32 on the host, then moved)")
      ->capture_default_str();
  c.add_option("--checkpoint-dtype", o.checkpoint,
               "The checkpoint's format, which bitsandbytes quantizes from: bf16, fp16 or fp32")
      ->capture_default_str();
  c.add_option("--tp", o.tp, "Tensor-parallel degree")->check(positive)->capture_default_str();
  c.add_option("--pp", o.pp, "Pipeline-parallel degree")->check(positive)->capture_default_str();
  c.add_option("--gpu,-g", o.gpu, "A GPU preset or a capacity such as 96GiB")
      ->capture_default_str();
  c.add_option("--format,-f", o.format, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  c.add_flag("--check", o.check, "Exit with status 1 when it does not fit");
}

void add_infer_options(CLI::App& c, infer_options& o) {
  c.add_option("--model,-m", o.model, "A preset or a config.json path")->capture_default_str();
  c.add_option("--framework", o.framework,
               "vllm: its defaults for the options not given (vramfit frameworks lists them)");
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
      "plan",
      "Search every layout of N GPUs (DP x TP x PP x CP x EP, sharding, recompute, micro-batch, "
      "virtual stages; offload if nothing else fits) and rank those that fit by estimated step "
      "time. Train options given fix their knob (--tp 8: only TP 8)");
  add_train_options(*plan_cmd, plan);
  std::vector<std::string> train_names;  // the train options, for the argv of each candidate
  for (const CLI::Option* o : plan_cmd->get_options()) train_names.push_back(long_name(*o));
  plan_cmd->add_option("--gpus", space.gpus, "GPUs every candidate uses")
      ->check(positive)
      ->capture_default_str();
  plan_cmd->add_option("--global-batch", space.global_batch,
                       "Sequences per optimizer step (default: one per GPU)");
  plan_cmd->add_option("--top", space.top, "How many layouts to show")->capture_default_str();
  plan_cmd->add_flag("--all", space.all,
                     "List every candidate with its verdict (evaluates all: slower)");
  plan_cmd
      ->add_option("--max-tp", space.max_tp,
                   "Largest tensor-parallel degree (default: the GPUs of a node)")
      ->check(positive);
  plan_cmd->add_option("--max-pp", space.max_pp, "Largest pipeline degree (default: the layers)")
      ->check(positive);
  plan_cmd->add_option("--max-cp", space.max_cp, "Largest context-parallel degree")
      ->check(positive);
  plan_cmd->add_flag("--no-offload", space.no_offload, "Never offload to the host");
  plan_cmd->add_option("--sharding", space.sharding,
                       "Sharding to search: deepspeed (default), megatron, fsdp or any");
  plan_cmd->add_option("--gpus-per-node", space.net.gpus_per_node, "GPUs per node")
      ->check(positive)
      ->capture_default_str();
  plan_cmd->add_option("--intra-bw", space.net.intra_node_gb_per_s,
                       "GB/s per GPU and direction within a node (default: the GPU's link)");
  plan_cmd
      ->add_option("--inter-bw", space.net.inter_node_gb_per_s,
                   "GB/s per GPU and direction between nodes")
      ->capture_default_str();
  plan_cmd
      ->add_option("--host-bw", space.net.host_gb_per_s, "GB/s per GPU to the host, for offload")
      ->capture_default_str();
  plan_cmd->add_option("--mfu", space.net.mfu, "Fraction of the peak FLOP/s the matmuls reach")
      ->capture_default_str();
  plan_cmd->add_option("--peak-tflops", space.net.peak_tflops,
                       "Dense 16-bit TFLOP/s per GPU (default: the GPU's datasheet figure)");
  load_options load;
  CLI::App* load_cmd = app.add_subcommand(
      "load", "Memory per GPU while a model is loaded or initialized, before its first step");
  add_load_options(*load_cmd, load);
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
  CLI::App* frameworks_cmd = app.add_subcommand(
      "frameworks", "List the --framework presets: the defaults each sets, and their sources");
  frameworks_cmd->add_option("--format,-f", list_format, "table or json")
      ->check(CLI::IsMember({"table", "json"}));
  // Help and errors say "vramfit", not the path the tool was started from.
  char program_name[] = "vramfit";
  if (argc > 0) argv[0] = program_name;
  try {
    app.parse(argc, argv);
    if (train_cmd->parsed()) {
      apply_framework(*train_cmd, train);
      return run_train(train);
    }
    if (load_cmd->parsed()) return run_load(load);
    if (infer_cmd->parsed()) {
      apply_framework(*infer_cmd, infer);
      return run_infer(infer);
    }
    if (plan_cmd->parsed()) {
      apply_framework(*plan_cmd, plan);
      return run_plan(*plan_cmd, train_names, plan, space);
    }
    if (models_cmd->parsed()) return run_models(list_format);
    if (gpus_cmd->parsed()) return run_gpus(list_format);
    if (frameworks_cmd->parsed()) return run_frameworks(list_format);
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
