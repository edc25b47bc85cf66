// SPDX-License-Identifier: MIT
// `vramfit infer`: weights, KV cache and working memory of inference, or vLLM's serving budget.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "dtypes_view.hpp"
#include "ecosystem_aliases.hpp"
#include "inputs.hpp"
#include "render.hpp"
#include "sizes.hpp"

namespace vramfit::cli {

/// Everything `vramfit infer` reads.
struct infer_options {
  std::string model = "llama-3-8b";
  std::optional<weight_layout> weights;  ///< unset: the config's quantization_config, or bf16
  std::optional<std::vector<std::string>> dtypes;  ///< --dtypes: a row per weight format
  element_format kv_dtype = bf16::value;
  std::int64_t batch = 1;
  std::int64_t beams = 1;
  std::int64_t context = 0;  ///< 0: 4096 within a learned position table
  std::int64_t generate = 0;
  std::int64_t block = 0;
  std::int64_t prefill_chunk = 0;
  bool all_logits = false;  ///< --logits all
  attention_kind attention = attention_kind::flash;
  std::int64_t cuda_graphs_mib = 0;
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::string gpu = "h100";
  std::optional<std::int64_t> utilization;
  std::optional<std::int64_t> max_num_batched_tokens, max_num_seqs, non_torch_mib;
  std::string framework;
  memory_metric metric = memory_metric::nvidia_smi;
  output_format format = output_format::table;
  bool check = false;
};

inline void add_infer_options(CLI::App& c, infer_options& o) {
  c.add_option("--model,-m", o.model,
               "A preset, a config.json path or its text, or a Hugging Face id in the local cache")
      ->capture_default_str();
  c.add_option("--framework", o.framework,
               "vllm: its defaults for the options not given (vramfit frameworks lists them)");
  add_choice(
      c, "--weights", o.weights, weight_layouts, "weight format",
      choice_list(weight_layouts) + " (default: a config.json's quantization_config, else bf16)",
      torch_dtypes);
  add_dtypes_option(c, o.dtypes, {"bf16", "fp8", "int8", "nf4", "gptq"},
                    "One estimate per weight format, a row each: --weights' names, "
                    "comma-separated or repeated; leave out --weights");
  add_choice(c, "--kv-dtype", o.kv_dtype, kv_formats, "KV dtype", choice_list(kv_formats),
             kv_dtypes)
      ->capture_default_str();
  c.add_option("--batch,-b", o.batch, "Sequences")->check(positive)->capture_default_str();
  c.add_option("--beams", o.beams, "Beams per sequence (each keeps its own cache)")
      ->check(positive)
      ->capture_default_str();
  c.add_option("--context,-c,--max-model-len", o.context,
               "Prompt tokens per sequence, vLLM's max_model_len (default: 4096, or a learned "
               "position table's rows "
               "when fewer)")
      ->check(positive);
  c.add_option("--generate", o.generate, "Tokens generated per sequence")
      ->check(non_negative)
      ->capture_default_str();
  c.add_option("--block", o.block,
               "Paged KV blocks of this many tokens (vLLM: 16; 0: none, Hugging Face's cache, "
               "whose sliding-window layers keep the whole prompt after prefill)")
      ->check(non_negative)
      ->capture_default_str();
  c.add_option("--prefill-chunk", o.prefill_chunk,
               "Chunked prefill: tokens per forward (0: whole prompt)")
      ->check(non_negative)
      ->capture_default_str();
  add_choice(c, "--attention", o.attention, attentions, "attention", choice_list(attentions))
      ->capture_default_str();
  add_choice(c, "--logits", o.all_logits, logit_choices, "--logits",
             "last (generate(): the last position's, with fp32 probabilities) or all (a plain "
             "model(input_ids) call, as evaluation and perplexity make: every position's)")
      ->type_name(choice_type(logit_choices))
      ->capture_default_str();
  c.add_option("--cuda-graphs", o.cuda_graphs_mib, "MiB of captured CUDA graphs")
      ->capture_default_str();
  c.add_option("--tp,--tensor-parallel-size", o.tp, "Tensor-parallel degree")
      ->check(positive)
      ->capture_default_str();
  c.add_option("--pp,--pipeline-parallel-size", o.pp, "Pipeline-parallel degree")
      ->check(positive)
      ->capture_default_str();
  c.add_option("--gpu,-g", o.gpu, "A GPU preset or a capacity such as 96GiB")
      ->capture_default_str();
  c.add_option("--utilization", o.utilization,
               "vLLM's KV pool: gpu_memory_utilization in percent (e.g. 90) of the total "
               "cudaMemGetInfo reports, less weights, profile run, non-torch and --cuda-graphs "
               "(--gpu-memory-utilization 0.9, vLLM's fraction: 90)");
  c.add_option("--max-num-batched-tokens", o.max_num_batched_tokens,
               "vLLM profile run's tokens (default: 8192 on GPUs of 70 GiB or more but A100s, "
               "else 2048, as vllm serve)")
      ->check(positive);
  c.add_option("--max-num-seqs", o.max_num_seqs,
               "vLLM profile run's sequences, the sampler's rows (default: 1024, or 256)")
      ->check(positive);
  c.add_option("--non-torch", o.non_torch_mib,
               "MiB outside torch after vLLM's baseline snapshot (default: the measured 0.13 GiB "
               "at TP 1, 0.55 GiB at TP 2 or more)");
  add_metric_option(c, o.metric);
  add_estimate_format(c, o.format);
  c.add_flag("--check", o.check, "Exit with status 1 when it does not fit");
  add_vllm_aliases(c);
}

/// --framework's defaults for infer, which its parser writes into `o`.
inline void apply_framework(CLI::App& cmd, infer_options& o) {
  if (o.framework.empty()) return;
  const cli::framework& f = framework_named(o.framework, cmd.get_name());
  apply_framework(f, cmd, [](recipe r) { return r == recipe::any; });
}

/// `mib` MiB as bytes, for an option that takes a size in MiB.
inline bytes checked_size(std::int64_t mib, const char* option) {
  constexpr std::int64_t most = std::int64_t{1} << 40;  // MiB in 1 EiB: no GPU holds more
  if (mib < 0 || mib > most)
    detail::raise(std::string(option) + " takes MiB from 0 to " + std::to_string(most) + ", got " +
                  std::to_string(mib));
  return bytes{mib * MiB.size};
}

/// The request `o` describes, checked: vLLM's pool options need --utilization, and a pool is
/// sized for no single request's shape.
inline request_shape request_of(const infer_options& o) {
  const bool serving = o.utilization.has_value();
  if (!serving && (o.max_num_batched_tokens || o.max_num_seqs || o.non_torch_mib))
    detail::raise(
        "--max-num-batched-tokens, --max-num-seqs and --non-torch size vLLM's KV pool: give "
        "--utilization too");
  if (serving && (o.beams > 1 || o.prefill_chunk > 0 || o.all_logits ||
                  o.attention != attention_kind::flash || o.metric != memory_metric::nvidia_smi ||
                  o.format == output_format::markdown || o.format == output_format::svg))
    detail::raise(
        "--utilization sizes vLLM's KV pool (table or json): --beams, --prefill-chunk, --logits "
        "all, --attention (Hugging Face's), --metric and -f markdown|svg describe one request's "
        "memory; leave them out");
  if (o.prefill_chunk >= o.context)
    detail::raise("--prefill-chunk " + std::to_string(o.prefill_chunk) +
                  " is not shorter than the prompt (" + std::to_string(o.context) +
                  " tokens): it would prefill it whole; leave it out");
  if (o.utilization && (*o.utilization < 1 || *o.utilization > 100))
    detail::raise("--utilization must be a percentage from 1 to 100, got " +
                  std::to_string(*o.utilization));
  return {.batch = o.batch,
          .beams = o.beams,
          .prompt = o.context,
          .generated = o.generate,
          .prefill_chunk = o.prefill_chunk,
          .cuda_graphs = checked_size(o.cuda_graphs_mib, "--cuda-graphs").count,
          .all_logits = o.all_logits,
          .attention = o.attention};
}

/// What a run of infer sizes, resolved from its options.
struct infer_setup {
  const model& m;
  weight_layout w;
  kv_cache_config kv;
  layout l;
  gpu g;
  request_shape r;
  std::int64_t context;
  std::string title;
  runtime_overheads overheads;
};

/// vLLM's KV pool at --utilization: what it leaves for the cache, as a table or JSON.
inline int run_serving(std::ostream& out, const infer_options& o, const infer_setup& s,
                       const size_style& size) {
  vllm_settings v = vllm_defaults(s.g, o.tp);
  v.utilization_percent = *o.utilization;
  if (o.max_num_batched_tokens) v.max_num_batched_tokens = *o.max_num_batched_tokens;
  if (o.max_num_seqs) v.max_num_seqs = *o.max_num_seqs;
  if (o.non_torch_mib) v.non_torch = checked_size(*o.non_torch_mib, "--non-torch");
  v.cuda_graphs = bytes{s.r.cuda_graphs};
  const serving_budget b = serve(s.m, s.l, s.w, s.kv, s.context, s.g, v);
  const bool fits = b.sequences >= o.batch;  // --batch sequences of the context in the pool
  nlohmann::json j{{"configuration", s.title},
                   {"device", device_json(s.g)},
                   {"max_num_batched_tokens", v.max_num_batched_tokens},
                   {"max_num_seqs", v.max_num_seqs},
                   {"requested", b.requested.count},
                   {"weights", b.weights.count},
                   {"profile_peak", b.profile_peak.count},
                   {"non_torch", b.non_torch.count},
                   {"cuda_graphs", b.cuda_graphs.count},
                   {"kv_pool", b.kv_pool.count},
                   {"kv_tokens", b.kv_tokens},
                   {"sequences", b.sequences},
                   {"fits", fits}};
  j["device"]["cuda_total"] = b.total.count;
  if (o.format == output_format::json) {
    out << j.dump(2) << "\n";
  } else {
    out << s.title << "\nvLLM KV pool at " << *o.utilization << " % of " << s.g.name << " ("
        << (s.g.cuda_total > bytes{} ? size(b.total) + " as cudaMemGetInfo reports"
                                     : size(b.total) + ", its capacity: no cudaMemGetInfo reading")
        << "; profile run " << v.max_num_batched_tokens << " tokens in " << v.max_num_seqs
        << " sequences)\n\n"
        << "  requested          " << size(b.requested) << "\n"
        << "  - weights          " << size(b.weights) << "\n"
        << "  - profile run peak " << size(b.profile_peak) << "\n"
        << "  - non-torch        " << size(b.non_torch) << "\n"
        << "  - CUDA graphs      " << size(b.cuda_graphs) << "\n"
        << "  = KV pool          " << size(b.kv_pool) << "\n\n"
        << "  " << report::grouped(b.kv_tokens) << " KV tokens, " << report::grouped(b.sequences)
        << " concurrent sequences of " << s.context << " tokens\n\n"
        << "  " << s.g.name << ": a KV pool of " << report::grouped(b.sequences)
        << " sequences, batch " << report::grouped(o.batch) << " -> "
        << (fits ? "fits" : "does not fit") << "\n";
  }
  return o.check && !fits ? 1 : 0;
}

/// One request's memory on the most loaded GPU.
inline cli::estimate request_estimate(const infer_setup& s) {
  cli::estimate e;
  e.title = s.title;
  e.model_name = s.m.name;
  e.parameters = parameters(tensors(s.m));
  e.device = s.g;
  const stage_states most = most_loaded_gpu(s.m, s.l, s.w, s.kv, s.r, s.g, s.overheads);
  e.ledger = by_lifetimes(most.ledger);
  e.stage = most.stage;
  e.metric = s.overheads.metric;
  e.fit.required = peak(e.ledger) - not_counted(most.ledger, e.metric);
  e.fit.available = s.g.capacity;
  return e;
}

/// The most sequences at this context (0: not one fits).
inline std::int64_t most_sequences(const infer_setup& s) {
  return max_batch(s.m, s.l, s.w, s.kv, s.r, s.g, 65536, s.overheads);
}

/// The longest context at this batch (0: not one token fits).
inline std::int64_t longest_context(const infer_setup& s) {
  return max_context(s.m, s.l, s.w, s.kv, s.r, s.g, std::int64_t{1} << 24, s.overheads);
}

/// One request's memory on the most loaded GPU, in the format asked for.
inline int run_request(std::ostream& out, const infer_options& o, const infer_setup& s,
                       const size_style& size) {
  const cli::estimate e = request_estimate(s);
  const int status = o.check && !e.fit.fits() ? 1 : 0;
  if (o.format == output_format::markdown) {
    cli::print_markdown(out, e, size);
    return status;
  }
  if (o.format == output_format::svg) {
    cli::print_svg(out, e, size);
    return status;
  }
  const std::int64_t batch = most_sequences(s), longest = longest_context(s);
  if (o.format == output_format::json) {
    nlohmann::json j = cli::to_json(e);
    j["max_batch"] = batch;
    j["max_context"] = longest;
    out << j.dump(2) << "\n";
  } else {
    cli::print_table(out, e, size);
    out << "  At this context, "
        << cli::up_to(batch, "up to ", " sequences fit", "not one sequence fits")
        << "; at this batch, " << cli::up_to(longest, "up to ", " tokens", "not one token fits")
        << ".\n";
  }
  return status;
}

/// Refuses what an encoder cannot do: it generates nothing (no --generate, --beams), and a ViT
/// reads a fixed image (no --context) into one row of class logits (no --logits all).
inline void encoder_request(const CLI::App& cmd, const infer_options& o, const model& m) {
  if (!m.is_encoder()) return;
  const std::string what = std::string(m.name) + " is an encoder";
  if (o.generate != 0 || o.beams != 1)
    detail::raise(what + ": it generates no tokens; leave out --generate and --beams");
  if (m.family != family::vit) return;
  if (cmd.get_option("--context")->count() > 0)
    detail::raise(what + " of images: its sequence is its " + std::to_string(m.max_positions) +
                  " image tokens; leave out --context");
  if (cmd.get_option("--logits")->count() > 0)
    detail::raise(what + " of images: its logits are one row of classes; leave out --logits");
}

/// What `o` sizes with weights `w`, its title naming them as `weights`.
inline infer_setup setup_of(const infer_options& o, const model& m, const weight_layout& w,
                            const std::string& weights) {
  // int8 and int4 KV keep an fp16 scale per head and token: group over head_dim.
  // Unpaged is Hugging Face's DynamicCache, whose sliding-window layers keep the prompt's storage.
  kv_cache_config kv{o.kv_dtype, o.block, o.block == 0};
  if (kv.format.level1.block > 0)
    kv.format.level1.block = m.is_mla() ? m.mla.kv_lora_rank + m.mla.qk_rope_head_dim : m.head_dim;
  infer_setup s{m,
                w,
                kv,
                validated(layout{.tensor = o.tp, .pipeline = o.pp}, m),
                gpu_named(o.gpu),
                request_of(o),
                detail::checked_add(o.context, o.generate),
                "",
                {.metric = o.metric}};
  std::ostringstream title;
  title << "Inference " << m.name << " | weights " << weights << " | KV "
        << name_of(kv_formats, o.kv_dtype) << " | " << s.l.world()
        << (s.l.world() == 1 ? " GPU" : " GPUs") << (o.tp > 1 ? " TP " + std::to_string(o.tp) : "")
        << (o.pp > 1 ? " PP " + std::to_string(o.pp) : "") << " | batch " << o.batch
        << (o.beams > 1 ? " x " + std::to_string(o.beams) + " beams" : "") << " | context "
        << s.context << (s.r.all_logits ? " | every position's logits" : "")
        << (s.r.attention != attention_kind::flash
                ? " | " + std::string(name_of(attentions, s.r.attention)) + " attention"
                : "");
  s.title = title.str();
  return s;
}

/// --dtypes: each weight format's request as `infer --weights X` estimates it, a row each.
inline int run_infer_dtypes(std::ostream& out, const CLI::App& cmd, const infer_options& o,
                            const model& m, const size_style& size) {
  const auto given = [&](const char* name) { return cmd.get_option(name)->count() > 0; };
  if (given("--weights"))
    detail::raise("--dtypes gives a row per weight format: leave out --weights");
  if (o.utilization || o.check || o.format == output_format::svg)
    detail::raise(
        "--dtypes compares one request's memory per weight format (table, markdown or json): "
        "leave out --utilization, --check and -f svg");
  const auto chosen =
      dtypes_chosen(*o.dtypes, weight_layouts, "--dtypes weight format", torch_dtypes);
  std::vector<dtypes_row> rows;
  for (const named<weight_layout>* w : chosen) {
    const infer_setup s = setup_of(o, m, w->value, w->name);
    rows.push_back(
        row_of(w->name, request_estimate(s), most_sequences(s), longest_context(s), false));
  }
  const infer_setup shown = setup_of(o, m, chosen.front()->value, "per row");
  print_dtypes(
      out, o.format, shown.title, shown.g,
      {"weights_format", "weights format", "max_batch", "max batch", "max_context", "max context"},
      rows, size);
  return 0;
}

inline int run_infer(std::ostream& out, const CLI::App& cmd, const infer_options& given,
                     const size_style& size) {
  const named_model named = load_model(given.model);
  const model& m = named.value;
  encoder_request(cmd, given, m);
  infer_options o = given;
  if (o.context == 0) o.context = default_sequence(m, 4096);
  if (o.dtypes) return run_infer_dtypes(out, cmd, o, m, size);
  const weight_layout w = weights_for(o.weights, named);
  const infer_setup s = setup_of(o, m, w, w.name);
  return o.utilization ? run_serving(out, o, s, size) : run_request(out, o, s, size);
}

}  // namespace vramfit::cli
