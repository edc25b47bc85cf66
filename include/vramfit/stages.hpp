// SPDX-License-Identifier: MIT
// Pipeline stages in closed form: which stage holds a layer, and the few stages that can be the
// most loaded, so that no cost grows with the number of layers or stages.
#pragma once

#include <cstdint>
#include <utility>

#include "detail/checked.hpp"
#include "detail/static_vector.hpp"
#include "finetune.hpp"
#include "ledger.hpp"
#include "parallel.hpp"
#include "tensors.hpp"

namespace vramfit {

/// The pipeline stage that holds `layer`: even stages give the first layers % pipeline stages one
/// layer more (layout::layers_of_stage); listed stages are searched (at most 64 of them).
constexpr std::int64_t stage_of_layer(const layout& l, std::int64_t layers, std::int64_t layer) {
  if (!l.stage_layers.empty()) {
    std::int64_t end = 0;
    for (std::size_t s = 0; s < l.stage_layers.size(); ++s) {
      end = detail::checked_add(end, l.stage_layers[s]);
      if (layer < end) return static_cast<std::int64_t>(s);
    }
    return l.pipeline - 1;
  }
  const std::int64_t q = layers / l.pipeline;
  const std::int64_t r = layers % l.pipeline;
  const std::int64_t long_layers = detail::checked_mul(r, q + 1);  // stages [0, r) hold q + 1
  return layer < long_layers ? layer / (q + 1) : r + (layer - long_layers) / q;
}

/// Layers at which what a layer holds can change: the edges of the tensor ledger's layer groups
/// (dense and MoE layers) and of the layer ranges a partial fine-tuning trains.
struct layer_edges {
  detail::static_vector<std::int64_t, 2 * 48 + 2 * 4> at{};  // two per ledger group and selector
};

constexpr layer_edges edges_of(const tensor_ledger& tensors, const finetuning& f = {}) {
  layer_edges e{};
  for (const tensor_group& g : tensors) {
    if (g.layer_count == 0) continue;
    e.at.push_back(g.first_layer);
    e.at.push_back(detail::checked_add(g.first_layer, g.layer_count));
  }
  for (const tensor_selector& s : f.trainable) {
    if (s.layer_count < 0) continue;
    e.at.push_back(s.first_layer);
    e.at.push_back(detail::checked_add(s.first_layer, s.layer_count));
  }
  return e;
}

/// Calls `visit(first, count)` for each run of layers [first, first + count) of [first, end) that
/// no cut splits, in order: the distinct layer groups a closed form walks instead of the layers.
template <class Cuts, class Visit>
constexpr void for_each_layer_run(std::int64_t first, std::int64_t end, const Cuts& cuts,
                                  Visit&& visit) {
  while (first < end) {
    std::int64_t next = end;
    for (std::int64_t cut : cuts)
      if (cut > first && cut < next) next = cut;
    visit(first, next - first);
    first = next;
  }
}

/// Calls `visit(stage)` (perhaps twice, a few hundred at most) for each stage that can need the
/// most, in closed form: in a run of stages with alike layers (broken at both ends and layer edges)
/// the first holds most (1F1B, interleaved, GPipe); with sliding windows, the run's first `period`.
template <class Visit>
constexpr void for_each_distinct_stage(const layout& l, const model& m, const layer_edges& edges,
                                       Visit&& visit) {
  const std::int64_t stages = l.pipeline;
  if (!l.stage_layers.empty()) {  // listed stages: at most the list's capacity
    for (std::int64_t s = 0; s < stages; ++s) visit(s);
    return;
  }
  const std::int64_t period = m.sliding_window > 0 ? m.sliding_window_period : 1;
  // Layer groups share edges (every MoE group starts at the first MoE layer): a stage is visited
  // once however many edges name it (past the first 64 distinct ones, again: visits repeat, the
  // answer does not change).
  constexpr std::size_t remembered = 64;
  detail::static_vector<std::int64_t, remembered> seen{};
  auto run_from = [&](std::int64_t first) {
    for (std::int64_t s = first; s < stages && s < first + period; ++s) {
      if (s < 0) continue;
      bool visited = false;
      for (const std::int64_t v : seen) visited = visited || v == s;
      if (visited) continue;
      if (seen.size() < remembered) seen.push_back(s);
      visit(s);
    }
  };
  run_from(0);
  run_from(1);
  run_from(m.layers % stages);  // the first of the shorter stages
  run_from(stages - 1);
  for (const std::int64_t edge : edges.at) {
    if (edge <= 0 || edge >= m.layers) continue;
    const std::int64_t s = stage_of_layer(l, m.layers, edge);
    run_from(s);
    run_from(s + 1);
  }
}

/// A pipeline stage and what `of(stage)` gives for it: its ledger, or its step's timeline.
template <class State>
struct stage_state {
  std::int64_t stage = 0;
  State state{};
};

/// The stage whose `of(stage)` peaks highest by `peak_of` (the first of equals), over the
/// distinct stages only.
template <class Of, class PeakOf>
constexpr auto most_loaded_by(const layout& l, const model& m, const layer_edges& edges, Of&& of,
                              PeakOf&& peak_of) {
  validated(l, m);  // the stage arithmetic needs a valid layout
  stage_state<decltype(of(std::int64_t{}))> most{-1, {}};
  bytes most_peak{};
  for_each_distinct_stage(l, m, edges, [&](std::int64_t s) {
    if (s == most.stage) return;
    auto state = of(s);
    const bytes p = peak_of(state);
    if (most.stage < 0 || p > most_peak || (p == most_peak && s < most.stage)) {
      most = {s, std::move(state)};
      most_peak = p;
    }
  });
  return most;
}

/// A pipeline stage and its ledger.
struct stage_states {
  std::int64_t stage = 0;
  memory_ledger ledger{};
};

/// The stage whose `ledger_of(stage)` peaks highest (the first of equals), over the distinct
/// stages only.
template <class LedgerOf>
constexpr stage_states most_loaded(const layout& l, const model& m, const layer_edges& edges,
                                   LedgerOf&& ledger_of) {
  const auto most = most_loaded_by(l, m, edges, ledger_of,
                                   [](const memory_ledger& ledger) { return peak(ledger); });
  return {most.stage, most.state};
}

}  // namespace vramfit
