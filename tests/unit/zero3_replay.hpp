// Unit tier: DeepSpeed ZeRO-3's parameter coordinator replayed step by step, to check the closed
// form deepspeed_zero.hpp gives (zero3_gathering_of) against what the coordinator's rules do.
// Each rule is partitioned_param_coordinator.py's (read at deepspeedai/DeepSpeed edaa722), and
// partition_parameters.py's for the buffers; the trace is vramfit's: each parameter tensor a
// module of its own, in forward order, then the same in reverse (no recompute, no modules
// without parameters).
#pragma once

#include <cstdint>
#include <vector>
#include <vramfit/training.hpp>

namespace zero3_replay {
using namespace vramfit;

/// A parameter as the coordinator counts and gathers it.
struct parameter {
  std::int64_t numel = 0;
  bytes size{}, padded{};  ///< gathered; its all-gather output (ceil(numel / N) x N elements)
  bool persistent = false;
};

/// The parameters of a whole-model step (no pipeline), and the one each module fetches in forward
/// order; a tied head reads the token embedding's parameter again. Backward fetches them in
/// reverse, or, under full recompute (Hugging Face's gradient checkpointing), each layer's in
/// forward order (its recompute) and then in reverse.
struct trace {
  std::vector<parameter> parameters;
  std::vector<std::size_t> forward, backward;
};

inline trace trace_of(const training& t, bool recompute = false) {
  using namespace vramfit::detail;
  const tensor_ledger tensors = vramfit::tensors(t.model);
  const stage_model_states s = stage_model_states_of(t, tensors, 0);
  const std::int64_t n = s.n;
  trace tr;
  std::size_t embedding = SIZE_MAX;
  auto add = [&](const tensor_group& g, std::int64_t layer, bool before) {
    for_each_zero3_parameter(t, g, layer, s.experts_per_rank, [&](const zero3_parameter& z) {
      if (before && embedding == SIZE_MAX && g.kind == tensor_kind::embedding &&
          g.split == tp_split::vocab)
        embedding = tr.parameters.size();
      const std::int64_t padded = (z.numel + n - 1) / n * n;
      tr.parameters.push_back(
          {z.numel, z.size, z.size + elements_in(z.format, padded - z.numel), z.persistent});
      tr.forward.push_back(tr.parameters.size() - 1);
    });
  };
  const std::size_t first_layers = first_layer_group(tensors);
  for (std::size_t i = 0; i < first_layers; ++i)
    if (stage_holds(t.model, tensors[i], s.range, true)) add(tensors[i], -1, true);
  const std::size_t layers_begin = tr.forward.size();
  std::vector<std::size_t> layer_begins;
  for (std::int64_t layer = 0; layer < t.model.layers; ++layer) {
    layer_begins.push_back(tr.forward.size());
    for (const tensor_group& g : tensors)
      if (g.in_layer(layer)) add(g, layer, false);
  }
  const std::size_t layers_end = tr.forward.size();
  for (std::size_t i = first_layers; i < tensors.size(); ++i)
    if (tensors[i].layer_count == 0 && stage_holds(t.model, tensors[i], s.range, false))
      add(tensors[i], -1, false);
  if (t.model.tied_embeddings && embedding != SIZE_MAX) tr.forward.push_back(embedding);
  for (std::size_t i = tr.forward.size(); i-- > layers_end;) tr.backward.push_back(tr.forward[i]);
  layer_begins.push_back(layers_end);
  for (std::size_t l = layer_begins.size() - 1; l-- > 0;) {
    if (recompute)
      for (std::size_t i = layer_begins[l]; i < layer_begins[l + 1]; ++i)
        tr.backward.push_back(tr.forward[i]);
    for (std::size_t i = layer_begins[l + 1]; i-- > layer_begins[l];)
      tr.backward.push_back(tr.forward[i]);
  }
  for (std::size_t i = layers_begin; i-- > 0;) tr.backward.push_back(tr.forward[i]);
  return tr;
}

/// What the replay finds.
struct result {
  std::int64_t most_available = 0;     ///< the most __n_available_params counts
  std::int64_t available_at_turn = 0;  ///< what it counts as backward begins
  bytes peak{};  ///< the most gathered at once: all-gather outputs and the copies out of them
};

/// Replays a step with the trace complete (every step after the first). `coalesced`: past one
/// rank, where a prefetch of several parameters all-gathers into one flat buffer.
inline result replay(const trace& tr, const layout& l, bool coalesced) {
  const std::vector<parameter>& params = tr.parameters;
  const std::size_t f = tr.forward.size(), steps = f + tr.backward.size();
  auto at = [&](std::size_t step) { return step < f ? tr.forward[step] : tr.backward[step - f]; };
  // Elements of the modules before each step, and where each parameter is used next.
  std::vector<std::int64_t> before(steps + 1, 0);
  std::vector<std::size_t> next(steps, steps), last(params.size(), steps);
  for (std::size_t i = 0; i < steps; ++i) before[i + 1] = before[i] + params[at(i)].numel;
  for (std::size_t i = steps; i-- > 0;) {
    next[i] = last[at(i)];
    last[at(i)] = i;
  }
  // Per parameter: gathered (AVAILABLE or INFLIGHT), in the in-flight registry, the latest use
  // the prefetcher passed (__most_recent_step_id_param_fetched_for), its flat buffer.
  std::vector<char> gathered(params.size(), 0), inflight(params.size(), 0),
      batched(params.size(), 0);
  std::vector<std::int64_t> passed(params.size(), -1), flat_of(params.size(), -1);
  struct flat_buffer {
    bytes size, copies;
    std::int64_t unpopped;
    bool waited;
  };
  std::vector<flat_buffer> flats;
  for (std::size_t i = 0; i < params.size(); ++i) gathered[i] = params[i].persistent ? 1 : 0;
  result out;
  std::int64_t available = 0;
  bytes held{};
  auto grow = [&](bytes b) {
    held += b;
    if (held > out.peak) out.peak = held;
  };
  // __all_gather_params: one parameter into its own buffer (_all_gather_sequential), several
  // into one flat buffer (_all_gather_dtype).
  auto all_gather = [&](const std::vector<std::size_t>& list) {
    const bool flat = coalesced && list.size() > 1;
    flat_buffer b{{}, {}, static_cast<std::int64_t>(list.size()), false};
    for (std::size_t x : list) {
      available += params[x].numel;
      gathered[x] = inflight[x] = 1;
      flat_of[x] = flat ? static_cast<std::int64_t>(flats.size()) : -1;
      b.size += params[x].padded;
      b.copies += params[x].size;
      if (!flat) grow(coalesced ? params[x].padded : params[x].size);
    }
    if (flat) {
      flats.push_back(b);
      grow(b.size);
    }
    if (available > out.most_available) out.most_available = available;
  };
  // AllGatherCoalescedHandle.wait: the first copies every parameter out (torch.cat); the buffer
  // goes with its last parameter popped off the registry.
  auto wait = [&](std::size_t x) {
    inflight[x] = 0;
    if (flat_of[x] < 0) return;
    flat_buffer& b = flats[static_cast<std::size_t>(flat_of[x])];
    if (!b.waited) grow(b.copies);
    b.waited = true;
    if (--b.unpopped == 0) held -= b.size;
  };
  const std::int64_t live = l.zero3_max_live_elements, bucket = l.zero3_prefetch_bucket_elements;
  std::size_t queue = 0;  // the head of __param_queue
  std::vector<std::size_t> prefetch;
  for (std::size_t step = 0; step < steps; ++step) {
    const std::size_t x = at(step);
    if (step == f) out.available_at_turn = available;
    // fetch_sub_module: all-gather what the module lacks, wait, pop it off the queue.
    if (!gathered[x]) all_gather({x});
    if (inflight[x]) wait(x);
    if (queue == step) passed[x] = static_cast<std::int64_t>(queue++);
    if (bucket > 0) {
      const std::int64_t most = live - available < bucket ? live - available : bucket;
      std::int64_t prefetching = 0;
      prefetch.clear();
      while (queue < steps && prefetching < most) {
        const std::size_t y = at(queue);
        if (passed[y] < static_cast<std::int64_t>(queue))
          passed[y] = static_cast<std::int64_t>(queue);
        ++queue;
        if (gathered[y] || batched[y]) continue;
        batched[y] = 1;
        prefetch.push_back(y);
        prefetching += params[y].numel;
      }
      for (std::size_t y : prefetch) batched[y] = 0;
      if (!prefetch.empty()) all_gather(prefetch);
    }
    // release_sub_module at step + 1 (__params_to_release).
    const auto now = static_cast<std::int64_t>(step + 1);
    if (params[x].persistent || !gathered[x] || passed[x] > now) continue;
    const std::size_t again = next[step];
    if (again < steps && before[again] - before[step + 1] < l.zero3_reuse_distance_elements)
      continue;
    gathered[x] = 0;
    available -= params[x].numel;
    held -= flat_of[x] >= 0 || !coalesced ? params[x].size : params[x].padded;
    flat_of[x] = -1;
  }
  return out;
}

inline result replay(const training& t, bool recompute = false) {
  return replay(trace_of(t, recompute), t.layout, t.layout.shard_degree() > 1);
}

}  // namespace zero3_replay
