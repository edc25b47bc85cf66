// SPDX-License-Identifier: MIT
// `vramfit train`: one estimate, a sweep of them, or the step's timeline.
#pragma once

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "dtypes_view.hpp"
#include "explain_view.hpp"
#include "inputs.hpp"
#include "render.hpp"
#include "sizes.hpp"
#include "timeline_view.hpp"
#include "train_setup.hpp"

namespace vramfit::cli {

inline std::string describe(const train_options& o, const training_plan_value& p) {
  std::ostringstream s;
  s << "Training " << p.setup.model.name << " | " << p.setup.precision.name << " | "
    << p.setup.optimizer.name << (p.setup.optimizer.options.set_to_none ? "" : ", grads kept")
    << " | " << p.setup.finetune.name;
  const layout& l = p.setup.layout;
  s << " | " << l.world() << (l.world() == 1 ? " GPU" : " GPUs");
  if (l.data > 1 || l.zero != sharding::none) {
    s << " (data " << l.data;
    if (l.zero != sharding::none)
      s << (l.implementation == shard_implementation::fsdp ? ", FSDP" : ", ZeRO-")
        << (l.implementation == shard_implementation::fsdp
                ? ""
                : std::to_string(static_cast<int>(l.zero)));
    // FSDP1's gathering where it is not torch's default.
    if (l.fsdp_backward_prefetch == fsdp_backward_prefetch::post) s << ", BACKWARD_POST";
    if (l.fsdp_backward_prefetch == fsdp_backward_prefetch::none) s << ", no backward prefetch";
    if (l.fsdp_forward_prefetch) s << ", forward prefetch";
    if (!l.fsdp_limit_all_gathers) s << ", no rate limiter";
    s << ")";
  }
  if (l.tensor > 1) s << " TP " << l.tensor << (l.sequence ? "+SP" : "");
  if (l.tp_overlap != tp_comm_overlap::none) s << " (" << name_of(tp_overlaps, l.tp_overlap) << ")";
  if (l.pipeline > 1) {
    s << " PP " << l.pipeline;
    if (o.virtual_stages > 1) s << " x " << o.virtual_stages << " chunks";
    s << " "
      << (o.schedule == pipeline_schedule::interleaved ? "interleaved 1F1B"
                                                       : name_of(schedules, o.schedule));
  }
  if (l.context > 1) s << " CP " << l.context;
  if (l.expert > 1) s << " EP " << l.expert;
  s << " | micro-batch " << o.micro_batch << " x " << o.seq_len;
  if (o.grad_accum > 1) s << " x " << o.grad_accum << " accumulated";
  s << " | " << name_of(attentions, o.attention) << " attention, recompute "
    << name_of(recomputes, o.recompute);
  if (o.recompute_every > 0) s << " (every " << o.recompute_every << " layers)";
  if (o.recompute_layers >= 0) s << " (first " << o.recompute_layers << " layers of a stage)";
  if (p.batch.code != model_code::hf)
    s << " | " << name_of(model_codes, p.batch.code) << " model code";
  else if (o.model_code != model_code::hf)
    s << " | Hugging Face's model code (" << name_of(model_codes, o.model_code)
      << "'s is modelled for " << detail::modelled_models(o.model_code) << ")";
  if (p.setup.model.is_moe() && p.batch.code == model_code::hf)  // the others run their own
    s << " | " << name_of(experts_implementations, p.batch.experts) << " experts";
  return s.str();
}

inline cli::estimate estimate_of(const train_options& o, const training_plan_value& p,
                                 const gpu& device) {
  training_estimate t = vramfit::estimate(p, device);
  // Asked for, the simulation happens or says why not (a stage deeper than it replays); by
  // default such a stage takes the fixed share, which its ledger entry names.
  const std::int64_t layers = stage_of(p.setup, t.stage).layers;
  if (!t.allocator && o.reserve == reserve_model::simulated && layers > max_replayed_layers)
    detail::rules::allocator_replay_needs_at_most_max_replayed_layers(layers);
  cli::estimate e;
  e.title = describe(o, p);
  e.model_name = p.setup.model.name;
  const tensor_ledger ledger = tensors(p.setup.model);
  e.parameters = parameters(ledger);
  e.trainable_parameters = trainable_parameters(p.setup.finetune, ledger);
  e.device = device;
  e.allocator = t.allocator;
  e.ledger = t.ledger;
  e.timeline = std::move(t.timeline);
  e.metric = p.overheads.metric;
  e.fit = fit(e.ledger, device, e.metric);
  e.stage = t.stage;
  const model& m = p.setup.model;
  for (bool moe : {false, true}) {
    if (moe && !m.is_moe()) continue;
    const bytes b = layer_activation_bytes(m, p.setup.precision, p.batch, p.setup.layout, moe,
                                           p.batch.recompute);
    if (b > e.activations_per_layer) e.activations_per_layer = b;
  }
  return e;
}

/// The swept values: the micro-batch or sequence given, doubled up to --sweep-max (by default 64
/// times it, within a learned position table).
inline std::vector<std::int64_t> swept_values(const train_options& o, const model& m) {
  const bool batch = *o.sweep == sweep_axis::micro_batch;
  const std::int64_t start = batch ? o.micro_batch : o.seq_len;
  if (o.sweep_max != 0 && o.sweep_max < start)
    detail::raise("--sweep-max must be at least the first value (" + std::to_string(start) +
                  "), got " + std::to_string(o.sweep_max));
  if (!batch && m.family == family::vit)
    detail::raise("a ViT's sequence is its image's " + std::to_string(m.max_positions) +
                  " tokens: sweep micro-batch instead");
  std::int64_t stop = o.sweep_max > 0 ? o.sweep_max : detail::checked_mul(start, 64);
  if (!batch && o.sweep_max == 0 && m.positions == position_kind::learned && m.max_positions < stop)
    stop = m.max_positions;
  std::vector<std::int64_t> values;  // doubling: at most 63
  for (std::int64_t x = start;; x *= 2) {
    values.push_back(x);
    if (x > stop / 2) break;  // the next value passes the last (and may not fit in 64 bits)
  }
  return values;
}

/// --sweep: the total at each doubling of the micro-batch or sequence, from the one given.
inline void run_sweep(std::ostream& out, const train_options& o, const model& m,
                      const training_plan_value& plan, const gpu& device, const size_style& size) {
  if (o.timeline) detail::raise("--timeline shows one step: leave out --sweep");
  const std::string axis = name_of(sweep_axes, *o.sweep);
  std::vector<sweep_point> points;
  replay_scratch scratch;  // the allocator replays' buffers, reused
  for (const std::int64_t x : swept_values(o, m)) {
    train_options swept = o;
    (*o.sweep == sweep_axis::micro_batch ? swept.micro_batch : swept.seq_len) = x;
    try {
      points.push_back({x, fit(build_plan(swept, m), device, scratch).required});
    } catch (const overflow_error&) {
      detail::raise("--sweep-max: at " + axis + " " + std::to_string(x) +
                    " the memory no longer fits in 64 bits; choose a smaller --sweep-max");
    }
  }
  const std::string title = describe(o, plan) + " | sweep " + axis;
  if (o.format == output_format::svg) {
    print_sweep_svg(out, title, axis.c_str(), points, device, size);
  } else if (o.format == output_format::json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& p : points)
      rows.push_back(
          {{axis, p.x}, {"total", p.required.count}, {"fits", p.required <= device.capacity}});
    out << nlohmann::json{{"configuration", title},
                          {"device", device_json(device)},
                          {"sweep", rows}}
               .dump(2)
        << "\n";
  } else {
    out << title << "\n\n";
    for (const auto& p : points)
      out << "  " << axis << " " << p.x << ": " << size(p.required)
          << (p.required <= device.capacity ? "  fits\n" : "  does not fit\n");
  }
}

/// One estimate in the format asked for: the table, Markdown, SVG or JSON, or its timeline.
inline void print_estimate(std::ostream& out, const train_options& o,
                           const training_plan_value& plan, const estimate& e, const gpu& device,
                           const size_style& size) {
  if (o.timeline) {
    const timeline_view v{e, e.timeline};
    if (o.format == output_format::json)
      out << timeline_json(v).dump(2) << "\n";
    else if (o.format == output_format::svg)
      print_timeline_svg(out, v, size);
    else
      print_timeline_table(out, v, o.format == output_format::markdown, size);
  } else if (o.format == output_format::json) {
    nlohmann::json j = to_json(e);
    j["max_micro_batch"] = max_micro_batch(plan, device);
    j["max_sequence"] = max_sequence(plan, device);
    out << j.dump(2) << "\n";
  } else if (o.format == output_format::markdown) {
    print_markdown(out, e, size);
  } else if (o.format == output_format::svg) {
    print_svg(out, e, size);
  } else {
    print_table(out, e, size);
    const std::int64_t batch = max_micro_batch(plan, device), longest = max_sequence(plan, device);
    out << "  At this sequence, "
        << up_to(batch, "up to ", " sequences per micro-batch fit", "not one sequence fits")
        << "; at this micro-batch, "
        << up_to(longest, "sequences up to ", " tokens", "not even a one-token sequence fits")
        << ".\n";
  }
}

/// --dtypes: each precision's step as `train --precision X` estimates it, a row each.
inline void run_train_dtypes(std::ostream& out, const train_options& o, const model& m,
                             const gpu& device, const size_style& size) {
  const auto chosen = dtypes_chosen(*o.dtypes, precisions, "--dtypes precision", torch_dtypes);
  std::vector<dtypes_row> rows;
  std::optional<training_plan_value> first;
  for (const named<vramfit::precision>* p : chosen) {
    train_options one = o;
    one.precision = p->value;
    const training_plan_value plan = build_plan(one, m);
    rows.push_back(row_of(p->name, estimate_of(one, plan, device), max_micro_batch(plan, device),
                          max_sequence(plan, device), true));
    if (!first) first = plan;
  }
  constexpr char per_row[] = "precision per row";  // the title's precision: each row's own
  static_assert(sizeof per_row <= sizeof first->setup.precision.name);
  std::copy(std::begin(per_row), std::end(per_row), first->setup.precision.name);
  print_dtypes(out, o.format, describe(o, *first), device,
               {"precision", "precision", "max_micro_batch", "max micro-batch", "max_sequence",
                "max sequence"},
               rows, size);
}

inline int run_train(std::ostream& out, const train_options& given, const size_style& size) {
  const named_model named = load_model(given.model);
  const model& m = named.value;
  const train_options o = for_model(given, named);
  const gpu g = gpu_named(o.gpu);
  if (o.dtypes) {  // before the plan of --precision, which no row uses
    run_train_dtypes(out, o, m, g, size);
    return 0;
  }
  const training_plan_value plan = build_plan(o, m);
  if (o.explain) {
    if (o.sweep || o.timeline || o.check || o.format == output_format::svg)
      detail::raise(
          "--explain lists one layer's saved tensors: leave out --sweep, --timeline, --check "
          "and -f svg");
    print_explain(out, describe(o, plan), plan, o.format, size);
    return 0;
  }
  if (o.sweep) {  // --check: whether the configuration given, the sweep's first, fits
    run_sweep(out, o, m, plan, g, size);
    return o.check && !fit(plan, g).fits() ? 1 : 0;
  }
  const estimate e = estimate_of(o, plan, g);
  print_estimate(out, o, plan, e, g, size);
  return o.check && !e.fit.fits() ? 1 : 0;
}

}  // namespace vramfit::cli
