// SPDX-License-Identifier: MIT
// The layout search: every way to lay a training job over N GPUs (data x tensor x pipeline x
// context, experts within data x context; ZeRO/FSDP sharding; virtual pipeline stages; recompute;
// micro-batch; offload as a last resort), each checked for memory exactly and ranked by the
// step-time estimate of step_time.hpp. Constexpr, streaming: it keeps the best k and counts the
// rest by why they lost.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "detail/static_vector.hpp"
#include "fit.hpp"
#include "framework_support.hpp"
#include "step_time.hpp"

namespace vramfit {

/// The largest micro-batch the search tries, and the most sizes it tries per layout: the smallest
/// 512 divisors of the replica's batch (only a batch with more divisors below 4,096 loses some).
inline constexpr std::int64_t max_micro_batch_searched = 4096;
inline constexpr std::size_t max_micro_batches = 512;
/// Layer counts of full recompute the search replays beyond a micro-batch's least-memory one when
/// that does not fit: the replayed reserve's segments round, so one or two layers fewer may fit
/// where all do not (tests/unit/framework_support_test.cpp found a 4-layer stage that fit with 3
/// recomputed, not with 4). Further off the search takes the tensors' growth to outweigh the
/// rounding: an assumption, which the brute-force test checks on stages of at most 4 layers.
inline constexpr std::int64_t rounding_neighbours = 2;
/// The most model chunks per pipeline rank the search tries (a fixed count may be larger): the
/// cost would otherwise grow with the layers' divisors.
inline constexpr std::int64_t max_virtual_stages_searched = 16;
/// The largest global batch, in sequences: its divisors are found by trial division.
inline constexpr std::int64_t max_global_batch = std::int64_t{1} << 30;

/// Which sharding implementations the search tries, each only in the layouts its framework runs
/// (framework_support.hpp).
enum class sharding_family : unsigned char {
  deepspeed,  ///< DDP, ZeRO-1, ZeRO-2, ZeRO-3 (DeepSpeed's buffers; no ZeRO-2/3 with PP)
  megatron,   ///< DDP, Megatron-LM's distributed optimizer
  /// DDP, FSDP SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD over every shard group: torchtitan's with
  /// the plan's FSDP version 2, accelerate's FSDP1 with version 1 (fsdp_framework)
  fsdp,
  any,  ///< all of the above
};

/// What the search may vary. A positive degree fixes that knob; 0 searches it within its bound.
struct search_space {
  std::int64_t gpus = 8;          ///< every candidate uses all of them
  std::int64_t global_batch = 0;  ///< sequences per optimizer step; 0: one per GPU
  std::int64_t data = 0, tensor = 0, pipeline = 0, context = 0, expert = 0;
  std::int64_t virtual_stages = 0;  ///< model chunks per pipeline rank (interleaved 1F1B)
  std::int64_t micro_batch = 0;
  std::int64_t max_tensor = 0;    ///< 0: the GPUs of a node (TP across nodes is never faster)
  std::int64_t max_pipeline = 0;  ///< 0: the model's layers
  std::int64_t max_context = 0;   ///< 0: as far as the sequence divides
  sharding_family sharding = sharding_family::deepspeed;
  int zero = -1;                  ///< a fixed sharding stage 0-3; -1: every stage of the family
  int recompute = -1;             ///< a fixed recompute_kind; -1: none, selective, full, op_sac
  std::int64_t shard_group = 0;   ///< a fixed hybrid FSDP shard group; 0: every proper one
  bool sequence_parallel = true;  ///< Megatron SP with every TP degree the sequence divides by
  bool try_offload = true;        ///< optimizer (and ZeRO-3 weight) offload when nothing else fits
  /// What an earlier release of a framework lacks, left out when false. Megatron-LM of 2021 (v2)
  /// had neither; both came with v3.0 in 2022 (Korthikanti et al. 2022), as did SP.
  bool selective_recompute = true;  ///< recompute of part of a layer (selective, op-level)
  bool partial_recompute = true;    ///< full recompute of only the first N layers of a stage
  /// Several micro-batches per step without a pipeline (torchtitan had none before June 2025:
  /// each rank ran its batch at once unless a pipeline split it).
  bool gradient_accumulation = true;
  cluster net{};
  std::size_t top = 10;  ///< candidates kept, fastest first: 1 to search_result::max_top
  bool prune = true;     ///< skip candidates whose best possible time cannot reach the top
};

/// Why a candidate is not among the best.
enum class rejection : unsigned char {
  ranked,             ///< kept: among the best `top`, or listed for --all
  does_not_fit,       ///< needs more than the GPU has at every micro-batch (as `train` counts)
  breaks_a_rule,      ///< a layout rule (check_layout), e.g. TP must divide the heads
  unsupported,        ///< set aside: its framework cannot run it (check_support)
  batch_indivisible,  ///< the global batch does not split into its micro-batches and replicas
  slower,             ///< its best possible time is beyond the k-th best: not evaluated
  outranked,          ///< evaluated and fits, but k faster ones were found (the last reason)
};
inline constexpr std::size_t rejection_count = static_cast<std::size_t>(rejection::outranked) + 1;

/// One layout of the search, with its memory and estimated time.
struct plan_candidate {
  vramfit::layout layout{};
  recompute_kind recompute = recompute_kind::none;
  /// Full recompute of the first N layers of each stage; -1: all of them.
  std::int64_t recompute_layers = -1;
  std::int64_t micro_batch = 1;
  std::int64_t micro_batches = 1;   ///< per step and data-parallel replica
  std::int64_t virtual_stages = 1;  ///< 1: plain 1F1B
  bytes required{};                 ///< the most loaded rank's peak with runtime overheads
  step_time time{};
  double tokens_per_second = 0;
  rejection verdict = rejection::ranked;
  layout_rule rule = layout_rule::none;       ///< for breaks_a_rule
  support_rule support = support_rule::none;  ///< for unsupported
};

/// The best candidates, fastest first, and the count of every other one by reason.
struct search_result {
  /// The most candidates a result keeps (the largest search_space::top).
  static constexpr std::size_t max_top = 32;
  detail::static_vector<plan_candidate, max_top> best{};
  std::int64_t counts[rejection_count] = {};        ///< by rejection, ranked ones included
  std::int64_t rules[layout_rule_count] = {};       ///< breaks_a_rule, by rule
  std::int64_t set_aside[support_rule_count] = {};  ///< unsupported, by rule
  std::int64_t memory_evaluations = 0;              ///< fit() calls
  bool offloaded = false;  ///< nothing fit without offload: offloaded layouts were searched
  std::int64_t global_batch = 0;

  [[nodiscard]] constexpr bool found() const { return !best.empty(); }
  [[nodiscard]] constexpr std::int64_t candidates() const {
    std::int64_t n = 0;
    for (const std::int64_t c : counts) n += c;
    return n;
  }
};

namespace detail {

namespace rules {
[[noreturn]] inline void searched_gpus_must_be_in_range(std::int64_t gpus, std::int64_t limit) {
  raise("the GPUs to search must be between 1 and " + str(limit) + ", got " + str(gpus));
}
[[noreturn]] inline void ranked_count_must_be_in_range(std::size_t top, std::size_t limit) {
  raise("the layouts to rank must be between 1 and " + std::to_string(limit) + ", got " +
        std::to_string(top));
}
[[noreturn]] inline void global_batch_must_be_in_range(std::int64_t batch, std::int64_t limit) {
  raise("the global batch must be between 1 and " + str(limit) +
        " sequences (0: one per GPU), got " + str(batch));
}
}  // namespace rules

/// Calls visit(d) for every divisor d of n up to `limit`, ascending, by trial division: 2·sqrt(n)
/// steps (8,192 for the largest world, 65,536 for the largest global batch).
template <class Visit>
constexpr void for_each_divisor(std::int64_t n, std::int64_t limit, Visit visit) {
  std::int64_t root = 1;
  while ((root + 1) * (root + 1) <= n) ++root;
  for (std::int64_t i = 1; i <= root && i <= limit; ++i)
    if (n % i == 0) visit(i);
  for (std::int64_t i = root; i >= 1; --i)  // the cofactors above sqrt(n), ascending
    if (n % i == 0 && n / i != i && n / i <= limit) visit(n / i);
}

/// Whether candidate a is preferred to b: faster, then less memory, then less model parallelism.
constexpr bool ranks_before(const plan_candidate& a, const plan_candidate& b) {
  const double ta = a.time.total(), tb = b.time.total();
  if (ta != tb) return ta < tb;
  if (a.required != b.required) return a.required < b.required;
  const std::int64_t ma = a.layout.tensor * a.layout.pipeline * a.layout.context;
  const std::int64_t mb = b.layout.tensor * b.layout.pipeline * b.layout.context;
  return ma < mb;
}

struct ignore_candidate {
  constexpr void operator()(const plan_candidate&) const {}
};
struct ignore_progress {
  constexpr void operator()(std::int64_t, std::int64_t) const {}
};

/// A positive fixed value, else a positive bound, else the fallback.
constexpr std::int64_t bound_of(std::int64_t fixed, std::int64_t max, std::int64_t fallback) {
  return fixed > 0 ? fixed : max > 0 ? max : fallback;
}
constexpr bool allowed(std::int64_t fixed, std::int64_t value) {
  return fixed <= 0 || fixed == value;
}

/// The search, one level per member: parallel structure, sharding, virtual stages and recompute,
/// micro-batch.
template <class Listed, class Progress>
class layout_searcher {
  using micro_batch_sizes = static_vector<std::int64_t, max_micro_batches>;
  /// A candidate without its recompute policy and micro-batch, queued by the least time any of
  /// them could take: its layout's degrees and sharding (not the whole layout, whose list of
  /// stage sizes would make it 600 bytes).
  struct bounded {
    std::int64_t data, tensor, pipeline, context, expert, shard_group, virtual_stages;
    std::int64_t per_replica;  ///< sequences per data-parallel replica and step
    double bound;
    std::int64_t order;  ///< enumeration order: ties keep it
    sharding zero;
    shard_implementation implementation;
    offload_target optimizer_offload, parameter_offload;
    bool sequence;

    static constexpr bounded of(const plan_candidate& c, std::int64_t per_replica,
                                std::int64_t order) {
      const layout& l = c.layout;
      return {l.data,
              l.tensor,
              l.pipeline,
              l.context,
              l.expert,
              l.shard_group,
              c.virtual_stages,
              per_replica,
              0.0,
              order,
              l.zero,
              l.implementation,
              l.optimizer_offload,
              l.parameter_offload,
              l.sequence};
    }
    [[nodiscard]] constexpr plan_candidate candidate() const {
      plan_candidate c{};
      c.layout = {.data = data,
                  .tensor = tensor,
                  .sequence = sequence,
                  .pipeline = pipeline,
                  .context = context,
                  .expert = expert,
                  .zero = zero,
                  .implementation = implementation,
                  .shard_group = shard_group,
                  .optimizer_offload = optimizer_offload,
                  .parameter_offload = parameter_offload};
      c.virtual_stages = virtual_stages;
      return c;
    }
  };

 public:
  constexpr layout_searcher(const training_plan_value& plan, const gpu& device,
                            const search_space& space, Listed& listed, Progress& progress)
      : plan_(plan),
        own_(plan.overheads),
        m_(plan.setup.model),
        g_(device),
        space_(space),
        listed_(listed),
        progress_(progress) {
    // One allocator simulation per evaluation would cost the search its speed: it ranks with the
    // fixed-share reserve, and confirmed() checks each candidate that would rank with the replay.
    plan_.overheads.reserve = reserve_model::share;
    const std::int64_t n = space.gpus;
    if (n <= 0 || n > max_world_size) rules::searched_gpus_must_be_in_range(n, max_world_size);
    net_ = figures_of(space.net, device);
    r_.global_batch = space.global_batch > 0 ? space.global_batch : n;
    if (space.global_batch < 0 || r_.global_batch > max_global_batch)
      rules::global_batch_must_be_in_range(space.global_batch, max_global_batch);
    if (space.top == 0 || space.top > search_result::max_top)
      rules::ranked_count_must_be_in_range(space.top, search_result::max_top);
    top_ = space.top;
    work_ = work_of(plan.setup, plan.batch.sequence);
  }

  /// Two passes per offload setting: every candidate's lower bound of its step time (cheap: no
  /// memory), then memory for the candidates in order of that bound, so that the best k are
  /// found early and the rest are cut without a memory evaluation.
  constexpr search_result run() {
    std::int64_t done = 0;
    for (const bool offloaded : {false, true}) {
      if (offloaded && (r_.found() || !space_.try_offload)) break;
      r_.offloaded = offloaded;
      std::vector<bounded> queue;
      for_each_structure([&](const layout& l) { structure(l, offloaded, queue); });
      std::sort(queue.begin(), queue.end(), [](const bounded& a, const bounded& b) {
        return a.bound != b.bound ? a.bound < b.bound : a.order < b.order;
      });
      const std::int64_t total = done + static_cast<std::int64_t>(queue.size());
      for (const bounded& b : queue) {
        progress_(done++, total);
        compete(b);
      }
    }
    return r_;
  }

 private:
  /// Every tp | n (up to the bound), pp | n/tp, cp | n/(tp·pp), dp the rest, ep | dp·cp.
  template <class Visit>
  constexpr void for_each_structure(Visit visit) const {
    const search_space& s = space_;
    const std::int64_t n = s.gpus;
    for_each_divisor(n, bound_of(s.tensor, s.max_tensor, s.net.gpus_per_node), [&](auto tp) {
      if (!allowed(s.tensor, tp)) return;
      for_each_divisor(n / tp, bound_of(s.pipeline, s.max_pipeline, m_.layers), [&](auto pp) {
        if (!allowed(s.pipeline, pp)) return;
        for_each_divisor(n / (tp * pp), bound_of(s.context, s.max_context, n), [&](auto cp) {
          const std::int64_t dp = n / (tp * pp * cp);
          // CP splits the sequence (activations.hpp's rule): only degrees that divide it.
          if (!allowed(s.context, cp) || !allowed(s.data, dp) || plan_.batch.sequence % cp != 0)
            return;
          for_each_divisor(dp * cp, m_.is_moe() ? m_.moe.routed_experts : 1, [&](auto ep) {
            if (!allowed(s.expert, ep)) return;
            visit(layout{
                .data = dp,
                .tensor = tp,
                .sequence = s.sequence_parallel && tp > 1 && (plan_.batch.sequence / cp) % tp == 0,
                .pipeline = pp,
                .context = cp,
                .expert = ep});
          });
        });
      });
    });
  }

  /// A structure's shardings and virtual-stage counts that break no rule, queued with their
  /// bounds.
  constexpr void structure(const layout& l, bool offloaded, std::vector<bounded>& queue) {
    plan_candidate c{};
    c.layout = l;
    if (const layout_violation v = check_layout(l, m_); v.rule != layout_rule::none) {
      c.rule = v.rule;
      return reject(c, rejection::breaks_a_rule);
    }
    if (r_.global_batch % l.data != 0) return reject(c, rejection::batch_indivisible);
    const std::int64_t per_replica = r_.global_batch / l.data;
    const micro_batch_sizes sizes = sizes_of(per_replica);
    const auto shard = [&](sharding stage, shard_implementation impl, std::int64_t group) {
      if (space_.zero >= 0 && space_.zero != static_cast<int>(stage)) return;
      // Nothing to shard over (DP x CP: Megatron-LM's and FSDP2's group; DeepSpeed and FSDP1,
      // which shard over DP, run no CP), unless ZeRO-Offload moves one GPU's optimizer to the host.
      if (stage != sharding::none && l.data * l.context == 1 && !offloaded) return;
      if (offloaded && stage == sharding::none) return;
      plan_candidate s = c;
      s.layout.zero = stage;
      s.layout.implementation = impl;
      s.layout.shard_group = group;
      if (offloaded) {
        s.layout.optimizer_offload = offload_target::cpu;
        if (stage == sharding::zero3) s.layout.parameter_offload = offload_target::cpu;
      }
      sharded(s, per_replica, sizes, queue);
    };
    using enum shard_implementation;
    const sharding_family f = space_.sharding;
    const bool any = f == sharding_family::any;
    shard(sharding::none, layout{}.implementation, 0);  // plain DDP, as `train` without --zero
    if (f == sharding_family::deepspeed || any)
      for (const sharding s : {sharding::zero1, sharding::zero2, sharding::zero3})
        shard(s, deepspeed, 0);
    if (f == sharding_family::megatron || any) shard(sharding::zero1, megatron, 0);
    if (f == sharding_family::fsdp || any) {
      if (space_.shard_group == 0) {
        shard(sharding::zero2, fsdp, 0);
        shard(sharding::zero3, fsdp, 0);
      }
      // Hybrid sharding: every proper shard group of the data-parallel ranks.
      for_each_divisor(l.data, l.data - 1, [&](std::int64_t group) {
        if (group > 1 && allowed(space_.shard_group, group)) shard(sharding::zero3, fsdp, group);
      });
    }
  }

  /// One sharding of a structure: a queued candidate per virtual-stage count.
  constexpr void sharded(plan_candidate c, std::int64_t per_replica, const micro_batch_sizes& sizes,
                         std::vector<bounded>& queue) {
    if (const layout_violation v = check_layout(c.layout, m_); v.rule != layout_rule::none) {
      c.rule = v.rule;
      return reject(c, rejection::breaks_a_rule);
    }
    // Virtual stages: 1, or a divisor of each stage's layers (Megatron-LM needs layers
    // divisible by p·v), not under a GPipe schedule given (interleaving is another schedule);
    // each set aside where its framework cannot run it.
    const std::int64_t pp = c.layout.pipeline;
    const bool gpipe = plan_.batch.schedule == pipeline_schedule::gpipe;
    const std::int64_t chunks = pp > 1 && !gpipe && m_.layers % pp == 0 ? m_.layers / pp : 1;
    for_each_divisor(chunks, bound_of(space_.virtual_stages, 0, max_virtual_stages_searched),
                     [&](std::int64_t v) {
                       if (!allowed(space_.virtual_stages, v)) return;
                       c.virtual_stages = v;
                       c.support = unsupported(c, per_replica);
                       if (c.support != support_rule::none)
                         return reject(c, rejection::unsupported);
                       bounded b =
                           bounded::of(c, per_replica, static_cast<std::int64_t>(queue.size()));
                       const micro_batch_sizes usable = usable_sizes(b, sizes);
                       // No usable size: bound 0, first in the queue, rejected there.
                       bool first = true, runs = false;
                       for_each_recompute(
                           c, per_replica,
                           [&](plan_candidate& e) {
                             runs = true;
                             if (usable.empty()) return;
                             const double t = lower_bound(e, b.per_replica, usable);
                             if (first || t < b.bound) b.bound = t;
                             first = false;
                           },
                           [&](plan_candidate& e) { reject(e, rejection::unsupported); });
                       if (runs) queue.push_back(b);
                     });
  }

  /// The frameworks that run candidate `c`'s sharding: its implementation's, or for plain DDP
  /// those of the family searched.
  [[nodiscard]] constexpr static_vector<framework, framework_count> frameworks_of(
      const plan_candidate& c) const {
    const framework fsdp = fsdp_framework(plan_.setup.layout.fsdp_version);
    static_vector<framework, framework_count> runs{};
    switch (c.layout.implementation) {
      case shard_implementation::deepspeed:
        runs.push_back(framework::deepspeed);
        return runs;
      case shard_implementation::megatron:
        runs.push_back(framework::megatron);
        return runs;
      case shard_implementation::fsdp:
        runs.push_back(fsdp);
        return runs;
      case shard_implementation::unnamed:
      case shard_implementation::paper:
        break;
    }
    const sharding_family f = space_.sharding;
    const bool any = f == sharding_family::any;
    if (f == sharding_family::deepspeed || any) runs.push_back(framework::deepspeed);
    if (f == sharding_family::megatron || any) runs.push_back(framework::megatron);
    if (f == sharding_family::fsdp || any) runs.push_back(fsdp);
    return runs;
  }

  /// The rule that sets candidate `c` aside: none when a framework of its runs it, else the
  /// first framework's.
  [[nodiscard]] constexpr support_rule unsupported(const plan_candidate& c,
                                                   std::int64_t per_replica) const {
    const training_plan_value p = plan_of(c, per_replica, 1);  // with the user's TP overlap
    support_rule first = support_rule::none;
    for (const framework f : frameworks_of(c)) {
      const support_rule r = check_support(f, p.setup.layout, p.batch);
      if (r == support_rule::none) return r;
      if (first == support_rule::none) first = r;
    }
    return first;
  }

  /// Each recompute policy the space allows, on a copy of `c` (op-level SAC not with LoRA, whose
  /// adapters' matmuls it does not model): to `visit` where a framework of `c` runs it, else,
  /// its rule in `support`, to `set_aside`.
  template <class Visit, class SetAside>
  constexpr void for_each_recompute(const plan_candidate& c, std::int64_t per_replica, Visit visit,
                                    SetAside set_aside) const {
    using enum recompute_kind;
    for (int k = 0; k <= static_cast<int>(op_sac); ++k) {
      const auto kind = static_cast<recompute_kind>(k);
      if (space_.recompute >= 0 && space_.recompute != k) continue;
      if (!space_.selective_recompute && kind != none && kind != full) continue;
      if (kind == op_sac && plan_.setup.finetune.kind == finetune_kind::lora) continue;
      plan_candidate e = c;
      e.recompute = kind;
      e.support = unsupported(e, per_replica);
      if (e.support == support_rule::none)
        visit(e);
      else
        set_aside(e);
    }
  }
  /// The same, what no framework of `c` runs left out (set aside already, by sharded()).
  template <class Visit>
  constexpr void for_each_recompute(const plan_candidate& c, std::int64_t per_replica,
                                    Visit visit) const {
    for_each_recompute(c, per_replica, visit, [](const plan_candidate&) {});
  }

  /// Whether a framework of `e` recomputes the first N layers of a stage under full recompute,
  /// not only all of them.
  [[nodiscard]] constexpr bool recomputes_some_layers(plan_candidate e,
                                                      std::int64_t per_replica) const {
    e.recompute_layers = 1;
    return space_.partial_recompute && e.recompute == recompute_kind::full &&
           unsupported(e, per_replica) == support_rule::none;
  }

  /// The micro-batch sizes a queued candidate may use: the interleaved schedule needs a
  /// multiple of p micro-batches (Megatron-LM's rule); without gradient accumulation only a
  /// pipeline runs more than one.
  [[nodiscard]] constexpr micro_batch_sizes usable_sizes(const bounded& b,
                                                         const micro_batch_sizes& sizes) const {
    micro_batch_sizes usable{};
    for (const std::int64_t size : sizes) {
      const std::int64_t count = b.per_replica / size;
      if (b.virtual_stages > 1 && count % b.pipeline != 0) continue;
      if (!space_.gradient_accumulation && b.pipeline == 1 && count > 1) continue;
      usable.push_back(size);
    }
    return usable;
  }

  /// A queued candidate's recompute policies, each evaluated unless its bound is beyond the k-th
  /// best; the fastest of them competes for the top, the others count as outranked.
  constexpr void compete(const bounded& b) {
    if (beyond_cut(b.bound)) {
      for_each_recompute(b.candidate(), b.per_replica,
                         [&](plan_candidate& e) { reject(e, rejection::slower); });
      return;
    }
    const micro_batch_sizes sizes = usable_sizes(b, sizes_of(b.per_replica));
    plan_candidate fastest{};
    bool found = false;
    for_each_recompute(b.candidate(), b.per_replica, [&](plan_candidate& e) {
      if (!evaluate(e, b.per_replica, sizes)) return;
      if (would_rank(e) && !(found && ranks_before(fastest, e)) &&
          !confirmed(e, b.per_replica, sizes))
        return;
      if (found) listed_(ranks_before(e, fastest) ? fastest : e);
      if (!found || ranks_before(e, fastest)) fastest = e;
      if (found) ++r_.counts[static_cast<int>(rejection::outranked)];
      found = true;
    });
    if (found) keep(fastest);
  }

  /// Whether `e` would enter the top.
  [[nodiscard]] constexpr bool would_rank(const plan_candidate& e) const {
    return r_.best.size() < top_ || ranks_before(e, r_.best[top_ - 1]);
  }

  /// `e` with the plan's own overheads (the replayed allocator) where the search ranked it with
  /// the fixed share: as it is, or else the fastest setting of its recompute policy that fits
  /// then (fastest_as_trained), its time estimated again; false, with `e` rejected, when none fits.
  constexpr bool confirmed(plan_candidate& e, std::int64_t per_replica,
                           const micro_batch_sizes& sizes) {
    if (!replays_allocator(own_)) return true;
    ++r_.memory_evaluations;
    const training_plan_value p = as_trained(e, per_replica, e.micro_batch);
    if (const bytes needs = fit(p, g_, scratch_).required; needs <= g_.capacity) {
      e = taken(e, p, needs);
      return true;
    }
    if (const plan_candidate tried = e; fastest_as_trained(e, per_replica, sizes, &tried))
      return true;
    reject(e, rejection::does_not_fit);
    return false;
  }

  /// `c` as plan `p` runs it, needing `needs`: its micro-batch and time from `p`.
  [[nodiscard]] constexpr plan_candidate taken(plan_candidate c, const training_plan_value& p,
                                               bytes needs) const {
    c.micro_batch = p.batch.micro_batch;
    c.micro_batches = p.batch.micro_batches;
    c.required = needs;
    c.time = estimate_step_time(p, net_, work_);
    c.tokens_per_second = tokens_per_second(p, c.time);
    return c;
  }

  /// The plan of candidate `e` at micro-batch `size` with the plan's own overheads (the replayed
  /// allocator), as `train` evaluates it.
  [[nodiscard]] constexpr training_plan_value as_trained(const plan_candidate& e,
                                                         std::int64_t per_replica,
                                                         std::int64_t size) const {
    training_plan_value p = plan_of(e, per_replica, size);
    p.overheads = own_;
    return p;
  }

  /// The fastest setting of `e`'s recompute policy (a micro-batch of `sizes` and, under full
  /// recompute, the layers recomputed) at which `e` fits as `train` evaluates it, into `e`; false
  /// when none is found, or when the plan does not replay the allocator (the share is its own
  /// figure). `refused`: a setting of `e` already replayed and refused (confirmed()'s).
  ///
  /// The replayed reserve is no share of the peak and, as its segments round, monotone neither in
  /// the micro-batch nor in the layers recomputed. So each micro-batch is replayed at its least
  /// memory (every layer recomputed) and, under full recompute, either bisected towards fewer
  /// layers when that fits, or tried at the `rounding_neighbours` next fewer layer counts when it
  /// does not: a constant number of replays per micro-batch, whatever the depth. The tensors'
  /// peak without a reserve bounds the replay from below: it skips layer counts, and ends the scan
  /// at the first micro-batch where recomputing every layer exceeds the card. A micro-batch whose
  /// fastest setting cannot beat the one found is not replayed.
  constexpr bool fastest_as_trained(plan_candidate& e, std::int64_t per_replica,
                                    const micro_batch_sizes& sizes,
                                    const plan_candidate* refused = nullptr) {
    if (!replays_allocator(own_)) return false;
    runtime_overheads no_reserve = plan_.overheads;
    no_reserve.fragmentation_percent = 0;
    const bool full = e.recompute == recompute_kind::full;
    const bool some = recomputes_some_layers(e, per_replica);
    const std::int64_t most = full ? (m_.layers + e.layout.pipeline - 1) / e.layout.pipeline : 1;
    const auto recomputing = [&](std::int64_t k) {  // `e` with its first k layers recomputed
      plan_candidate c = e;
      c.recompute_layers = k >= most ? -1 : k;
      return c;
    };
    const auto at = [&](std::int64_t size, std::int64_t k) {
      return plan_of(recomputing(k), per_replica, size);
    };
    const auto peak_fits = [&](std::int64_t size, std::int64_t k) {
      training_plan_value p = at(size, k);
      p.overheads = no_reserve;
      ++r_.memory_evaluations;
      return fit(p, g_, scratch_).required <= g_.capacity;
    };
    bool found = false;
    // Replays layer count k at `size`: true, with `e` the faster of it and the one found, when it
    // fits.
    const auto replay_fits = [&](std::int64_t size, std::int64_t k) {
      const auto layers = [&](std::int64_t n) { return n < 0 || n >= most ? most : n; };
      if (refused && size == refused->micro_batch && layers(refused->recompute_layers) == layers(k))
        return false;
      const training_plan_value p = as_trained(recomputing(k), per_replica, size);
      ++r_.memory_evaluations;
      const bytes needs = fit(p, g_, scratch_).required;
      if (needs > g_.capacity) return false;
      plan_candidate c = e;
      c.recompute_layers = p.batch.recompute_layers;
      const plan_candidate t = taken(c, p, needs);
      if (!found || t.time.total() <= e.time.total()) e = t;  // ties: the larger micro-batch
      found = true;
      return true;
    };
    for (const std::int64_t size : sizes) {
      if (!peak_fits(size, most)) break;  // the least memory at this size exceeds the card
      // The fewest layers whose tensors fit (memory falls as layers are recomputed).
      const std::int64_t fewest =
          most - (some ? largest_fitting(1, most - 1,
                                         [&](std::int64_t t) { return peak_fits(size, most - t); })
                       : 0);
      if (found && estimate_step_time(at(size, fewest), net_, work_).total() > e.time.total())
        continue;
      if (replay_fits(size, most)) {
        // Fewer layers recomputed run faster: the fewest that fit, as if the replay were monotone.
        largest_fitting(1, most - fewest,
                        [&](std::int64_t t) { return replay_fits(size, most - t); });
        continue;
      }
      for (std::int64_t k = most - 1; k >= fewest && k >= most - rounding_neighbours; --k)
        if (replay_fits(size, k)) break;
    }
    return found;
  }

  /// Whether a time cannot reach the top: the top is full and its k-th is faster.
  [[nodiscard]] constexpr bool beyond_cut(double time) const {
    return space_.prune && r_.best.size() == top_ && time > r_.best[top_ - 1].time.total();
  }

  /// The divisors of the replica's batch the search tries as micro-batches, ascending.
  [[nodiscard]] constexpr micro_batch_sizes sizes_of(std::int64_t per_replica) const {
    micro_batch_sizes sizes{};
    for_each_divisor(per_replica, bound_of(space_.micro_batch, 0, max_micro_batch_searched),
                     [&](std::int64_t b) {
                       if (allowed(space_.micro_batch, b) && sizes.size() < max_micro_batches)
                         sizes.push_back(b);
                     });
    return sizes;
  }

  /// The plan of candidate `e` at its micro-batch `size`.
  [[nodiscard]] constexpr training_plan_value plan_of(const plan_candidate& e,
                                                      std::int64_t per_replica,
                                                      std::int64_t size) const {
    training_plan_value p = plan_;
    // What the search does not choose stays the user's: the FSDP API, DeepSpeed's buffers.
    const layout& given = plan_.setup.layout;
    p.setup.layout = e.layout;
    p.setup.layout.fsdp_version = given.fsdp_version;
    p.setup.layout.zero_reduce_bucket_elements = given.zero_reduce_bucket_elements;
    p.setup.layout.zero_overlap_comm = given.zero_overlap_comm;
    p.setup.layout.zero3_prefetch_bucket_elements = given.zero3_prefetch_bucket_elements;
    p.setup.layout.zero3_sub_group_elements = given.zero3_sub_group_elements;
    p.setup.layout.zero3_max_live_elements = given.zero3_max_live_elements;
    p.setup.layout.zero3_reuse_distance_elements = given.zero3_reuse_distance_elements;
    p.setup.layout.zero3_persistence_threshold = given.zero3_persistence_threshold;
    // The user's TP overlap, where it applies: it chunks SP's collectives.
    if (e.layout.sequence) p.setup.layout.tp_overlap = given.tp_overlap;
    p.batch.recompute = e.recompute;
    p.batch.recompute_layers = e.recompute == recompute_kind::full ? e.recompute_layers : -1;
    p.batch.virtual_stages = e.virtual_stages;
    if (e.virtual_stages > 1)
      p.batch.schedule = pipeline_schedule::interleaved;
    else if (p.batch.schedule == pipeline_schedule::interleaved)
      p.batch.schedule = pipeline_schedule::one_f_one_b;
    p.batch.micro_batch = size;
    p.batch.micro_batches = per_replica / size;
    return p;
  }

  /// `e` with the least recompute its refinement may reach: full recompute of one layer per
  /// stage (fewest_recomputed_layers) where its framework recomputes some layers only.
  [[nodiscard]] constexpr plan_candidate least_recompute(plan_candidate e,
                                                         std::int64_t per_replica) const {
    if (recomputes_some_layers(e, per_replica)) e.recompute_layers = 1;
    return e;
  }

  /// A lower bound of candidate `e`'s time over every size and layer count, before any memory is
  /// evaluated: the kernels at their ideal rate (the same work at any micro-batch, the bubble
  /// growing with it), and the communication terms that shrink with the micro-batch (gathers per
  /// micro-batch, the CP exchange that attention hides) at the better end.
  [[nodiscard]] constexpr double lower_bound(const plan_candidate& e, std::int64_t per_replica,
                                             const micro_batch_sizes& sizes) const {
    const plan_candidate least = least_recompute(e, per_replica);
    constexpr bool ideal = true;
    const step_time small =
        estimate_step_time(plan_of(least, per_replica, sizes[0]), net_, work_, ideal);
    const step_time large = estimate_step_time(plan_of(least, per_replica, sizes[sizes.size() - 1]),
                                               net_, work_, ideal);
    step_time low = small;
    for (double step_time::*term : {&step_time::data, &step_time::offload, &step_time::context})
      low.*term = std::min(small.*term, large.*term);
    return low.total();
  }

  using step_times = static_vector<step_time, max_micro_batches>;

  /// The fastest of the first `count` sizes; ties go to the larger micro-batch.
  static constexpr std::size_t fastest_of(const step_times& times, std::size_t count) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < count; ++i)
      if (times[i].total() <= times[best].total()) best = i;
    return best;
  }

  /// The fastest of `sizes` at which `e` fits, from the fastest (`chosen`), memory in e.required;
  /// false if none. Memory grows with b (1F1B holds min(p, m)·b): the fitting sizes are
  /// a prefix. The smallest says if any fits, then the fastest, else the fastest below its end.
  constexpr bool fastest_fitting(plan_candidate& e, std::int64_t per_replica,
                                 const micro_batch_sizes& sizes, const step_times& times,
                                 std::size_t& chosen) {
    const auto required = [&](std::size_t i) {
      ++r_.memory_evaluations;
      return fit(plan_of(e, per_replica, sizes[i]), g_, scratch_).required;
    };
    e.required = required(0);
    if (e.required > g_.capacity) return false;
    if (chosen == 0) return true;
    const bytes at_fastest = required(chosen);
    if (at_fastest <= g_.capacity) {
      e.required = at_fastest;
      return true;
    }
    const auto fitting = static_cast<std::size_t>(largest_fitting(
        1, static_cast<std::int64_t>(chosen) - 1,
        [&](std::int64_t i) { return required(static_cast<std::size_t>(i)) <= g_.capacity; }));
    chosen = fastest_of(times, fitting + 1);
    if (chosen > 0) e.required = required(chosen);
    return true;
  }

  /// The micro-batch of candidate `e` (from `sizes`) that fits and runs fastest; false, with
  /// the candidate rejected, when none does or none can beat the top. Full recompute then covers
  /// the fewest layers per stage that fit at that micro-batch.
  constexpr bool evaluate(plan_candidate& e, std::int64_t per_replica,
                          const micro_batch_sizes& sizes) {
    if (sizes.empty()) {
      reject(e, rejection::batch_indivisible);
      return false;
    }
    if (beyond_cut(lower_bound(e, per_replica, sizes))) {
      reject(e, rejection::slower);
      return false;
    }
    step_times times{};
    for (std::size_t i = 0; i < sizes.size(); ++i)
      times.push_back(estimate_step_time(plan_of(e, per_replica, sizes[i]), net_, work_));
    std::size_t chosen = fastest_of(times, sizes.size());
    if (beyond_cut(
            estimate_step_time(plan_of(least_recompute(e, per_replica), per_replica, sizes[chosen]),
                               net_, work_)
                .total())) {
      reject(e, rejection::slower);
      return false;
    }
    if (!fastest_fitting(e, per_replica, sizes, times, chosen)) {
      // The share is no bound of the replayed reserve: `train` may fit a setting it does not.
      if (!fastest_as_trained(e, per_replica, sizes)) {
        reject(e, rejection::does_not_fit);
        return false;
      }
      if (!beyond_cut(e.time.total())) return true;
      reject(e, rejection::slower);
      return false;
    }
    e.time = times[chosen];
    e.micro_batch = sizes[chosen];
    e.micro_batches = per_replica / sizes[chosen];
    if (recomputes_some_layers(e, per_replica)) fewest_recomputed_layers(e, per_replica);
    e.tokens_per_second = tokens_per_second(plan_of(e, per_replica, e.micro_batch), e.time);
    if (beyond_cut(e.time.total())) {
      reject(e, rejection::slower);
      return false;
    }
    return true;
  }

  /// Full recompute of the fewest first layers per stage that still fit at `e`'s micro-batch:
  /// memory falls and time grows with the layers recomputed (Megatron-LM
  /// --recompute-num-layers with the block method), so a bisection finds them.
  constexpr void fewest_recomputed_layers(plan_candidate& e, std::int64_t per_replica) {
    const std::int64_t most = (m_.layers + e.layout.pipeline - 1) / e.layout.pipeline;
    const auto with_layers = [&](std::int64_t k) {
      plan_candidate c = e;
      c.recompute_layers = k;
      return plan_of(c, per_replica, e.micro_batch);
    };
    // Memory falls with the layers recomputed: the counts below `most` that fit are a prefix of
    // the layers spared.
    const std::int64_t spared = largest_fitting(1, most - 1, [&](std::int64_t t) {
      ++r_.memory_evaluations;
      return fit(with_layers(most - t), g_, scratch_).required <= g_.capacity;
    });
    const std::int64_t k = most - spared;
    if (k >= most) return;
    const training_plan_value p = with_layers(k);
    ++r_.memory_evaluations;
    e.recompute_layers = k;
    e.required = fit(p, g_, scratch_).required;
    e.time = estimate_step_time(p, net_, work_);
  }

  constexpr void reject(plan_candidate c, rejection why) {
    c.verdict = why;
    ++r_.counts[static_cast<int>(why)];
    if (why == rejection::breaks_a_rule) ++r_.rules[static_cast<int>(c.rule)];
    if (why == rejection::unsupported) ++r_.set_aside[static_cast<int>(c.support)];
    listed_(c);
  }

  /// Into the best, in order; what falls off the end is outranked.
  constexpr void keep(const plan_candidate& c) {
    std::size_t at = r_.best.size();
    while (at > 0 && ranks_before(c, r_.best[at - 1])) --at;
    if (at >= top_) {
      ++r_.counts[static_cast<int>(rejection::outranked)];
      plan_candidate o = c;
      o.verdict = rejection::outranked;
      return listed_(o);
    }
    listed_(c);
    ++r_.counts[static_cast<int>(rejection::ranked)];
    if (r_.best.size() == top_) {
      --r_.counts[static_cast<int>(rejection::ranked)];
      ++r_.counts[static_cast<int>(rejection::outranked)];
      r_.best.count = top_ - 1;
    }
    r_.best.push_back(c);
    for (std::size_t i = r_.best.size() - 1; i > at; --i) {
      const plan_candidate t = r_.best[i];
      r_.best[i] = r_.best[i - 1];
      r_.best[i - 1] = t;
    }
  }

  training_plan_value plan_;  ///< searched with the fixed-share reserve
  runtime_overheads own_{};   ///< the plan's own, which confirmed() checks with
  const model& m_;
  const gpu& g_;
  const search_space& space_;
  Listed& listed_;
  Progress& progress_;
  search_result r_{};
  std::size_t top_ = 10;
  cluster_figures net_{};
  model_work work_{};
  replay_scratch scratch_{};  ///< the allocator replays' buffers, reused from one to the next
};

}  // namespace detail

/// Searches layouts (and micro-batch, recompute) of `space.gpus` GPUs for `plan` on `device`: the
/// fastest `space.top` that fit, fastest first, the rest counted by why they lost. `listed` sees
/// each verdict as decided (`best`: who stayed); `progress(done, total)` runs per structure.
template <class Listed = detail::ignore_candidate, class Progress = detail::ignore_progress>
constexpr search_result search_layouts(const training_plan_value& plan, const gpu& device,
                                       const search_space& space = {}, Listed listed = {},
                                       Progress progress = {}) {
  return detail::layout_searcher<Listed, Progress>(plan, device, space, listed, progress).run();
}

}  // namespace vramfit
