// SPDX-License-Identifier: MIT
// An estimate of a training step's time, to rank layouts that fit: the model's FLOPs at a stated
// efficiency, the pipeline bubble, and the communication each parallel dimension adds over the
// links it crosses. Memory is exact; this is not: it is an analytic model with stated assumptions
// (docs/planner.md), used only to order candidates.
#pragma once

#include <cstdint>

#include "plan.hpp"

namespace vramfit {

/// What the estimate assumes about the machines beyond the GPU preset.
struct cluster {
  std::int64_t gpus_per_node = 8;  ///< a DGX/HGX node
  double intra_node_gb_per_s = 0;  ///< per GPU and direction; 0: the GPU preset's link
  /// Per GPU and direction between nodes: one 400 Gb/s InfiniBand NIC per GPU (DGX H100).
  double inter_node_gb_per_s = 50;
  double host_gb_per_s = 25;  ///< GPU to host for offload (PCIe, per direction, achieved)
  double peak_tflops = 0;     ///< dense 16-bit peak per GPU; 0: the GPU preset's
  double mfu = 0.5;           ///< fraction of the peak the step's matmuls reach
};

/// The figures the estimate used, and whether some were assumed for want of a preset's.
struct cluster_figures {
  double flops = 0;  ///< per GPU, per second, at the stated efficiency
  double intra = 0;  ///< bytes per second
  double inter = 0;
  double host = 0;
  std::int64_t gpus_per_node = 8;
  bool assumed_peak = false;  ///< the GPU has no known peak: an H100 SXM's was taken
  bool assumed_link = false;  ///< the GPU has no known link: an H100 SXM's NVLink was taken
};

namespace detail::rules {
[[noreturn]] inline void cluster_figure_must_be_positive(const char* what, double value) {
  raise(std::string(what) + " must be positive, got " + std::to_string(value));
}
[[noreturn]] inline void utilisation_must_be_at_most_one(double value) {
  raise("the model FLOPs utilisation must be at most 1, got " + std::to_string(value));
}
[[noreturn]] inline void gpu_figure_must_be_zero_or_positive(const char* what, double value) {
  raise(std::string(what) + " must be 0 (the GPU's figure) or positive, got " +
        std::to_string(value));
}
}  // namespace detail::rules

constexpr cluster_figures figures_of(const cluster& c, const gpu& device) {
  auto positive = [](const char* what, double v) {
    if (!(v > 0)) detail::rules::cluster_figure_must_be_positive(what, v);  // NaN too
  };
  positive("the inter-node bandwidth", c.inter_node_gb_per_s);
  positive("the host link bandwidth", c.host_gb_per_s);
  positive("the model FLOPs utilisation", c.mfu);
  if (c.mfu > 1) detail::rules::utilisation_must_be_at_most_one(c.mfu);
  if (c.gpus_per_node <= 0)
    detail::rules::cluster_figure_must_be_positive("GPUs per node",
                                                   static_cast<double>(c.gpus_per_node));
  // 0 takes the GPU preset's figure; negative or NaN is an error.
  if (!(c.peak_tflops >= 0))
    detail::rules::gpu_figure_must_be_zero_or_positive("the peak TFLOP/s", c.peak_tflops);
  if (!(c.intra_node_gb_per_s >= 0))
    detail::rules::gpu_figure_must_be_zero_or_positive("the intra-node bandwidth",
                                                       c.intra_node_gb_per_s);
  constexpr double h100_tflops = 989, h100_nvlink = 450;  // gpus::h100_80gb
  cluster_figures f{};
  double tflops = c.peak_tflops > 0 ? c.peak_tflops : static_cast<double>(device.dense_tflops);
  if (tflops == 0) {
    tflops = h100_tflops;
    f.assumed_peak = true;
  }
  double link =
      c.intra_node_gb_per_s > 0 ? c.intra_node_gb_per_s : static_cast<double>(device.link_gb_per_s);
  if (link == 0) {
    link = h100_nvlink;
    f.assumed_link = true;
  }
  f.flops = tflops * 1e12 * c.mfu;
  f.intra = link * 1e9;
  f.inter = c.inter_node_gb_per_s * 1e9;
  f.host = c.host_gb_per_s * 1e9;
  f.gpus_per_node = c.gpus_per_node;
  return f;
}

/// The model's figures, once per search. Forward FLOPs per token: 2 per weight multiplied (a tied
/// embedding as the head) + 4·layers·heads·head_dim·sequence, ignoring causality (PaLM appendix B,
/// torchtitan get_num_flop_per_token); backward: 2 + trainable_share times the weights' forward.
struct model_work {
  double layers = 0;     ///< the layers' weights, all layers
  double head = 0;       ///< the output projection
  double attention = 0;  ///< the attention core, all layers
  /// The layers' matmuls that op-level SAC does not cache, all layers: what its recompute repeats
  double op_sac_recomputed = 0;
  double trainable_share = 1;
  double parameters = 0;         ///< all of them, for what data parallelism moves
  double expert_parameters = 0;  ///< the routed experts' share of them
  /// Forward and backward of the layers and the head, without recompute.
  [[nodiscard]] constexpr double training() const {
    return (2 + trainable_share) * (layers + head) + 3 * attention;
  }
};

constexpr model_work work_of(const training& t, std::int64_t sequence) {
  const model& m = t.model;
  const tensor_ledger ledger = tensors(m);
  const auto d = [](std::int64_t v) { return static_cast<double>(v); };
  const double head =
      d(parameters(ledger, tensor_kind::head)) + (m.tied_embeddings ? d(m.vocab) * d(m.hidden) : 0);
  const double not_multiplied = d(parameters(ledger, tensor_kind::embedding));
  model_work f{};
  f.layers = 2 * (d(active_parameters(m, ledger)) - not_multiplied -
                  d(parameters(ledger, tensor_kind::head)));
  f.head = 2 * head;
  f.attention = 4 * d(m.layers) * d(m.heads) * d(m.head_dim) * d(sequence);
  f.parameters = d(parameters(ledger));
  f.trainable_share = d(trainable_parameters(t.finetune, ledger)) / f.parameters;
  f.expert_parameters = d(parameters(ledger, tensor_kind::expert));
  const std::int64_t dense = m.is_moe() ? m.moe.first_dense_layers : m.layers;
  for (const std::int64_t layer : {std::int64_t{0}, m.layers - 1}) {
    const std::int64_t count = layer == 0 ? dense : m.layers - dense;
    if (count == 0) continue;
    constexpr bool flash = true;  // any kernel: only the cached weights are read
    const op_sac_layer c = op_sac_cache(m, layout{}, layer, 1, 16, flash);
    f.op_sac_recomputed += 2 * d(c.all_weights - c.cached_weights) * d(count);
  }
  return f;
}

/// Seconds of one optimizer step on the most loaded rank, by cause.
struct step_time {
  double compute = 0;   ///< matmul FLOPs (recompute included) at the stated efficiency
  double bubble = 0;    ///< pipeline fill and drain: (p-1)/(m·v) of compute
  double tensor = 0;    ///< TP all-reduces (or SP all-gathers and reduce-scatters)
  double context = 0;   ///< CP ring exchanges of K and V not hidden behind attention
  double expert = 0;    ///< EP all-to-all dispatch and combine
  double pipeline = 0;  ///< PP sends of activations and their gradients
  double data = 0;      ///< DP/ZeRO/FSDP gathers and reductions not hidden behind compute
  double offload = 0;   ///< host transfers of offloaded states (the CPU's own step not counted)

  [[nodiscard]] constexpr double total() const {
    return compute + bubble + tensor + context + expert + pipeline + data + offload;
  }
};

namespace detail {

/// Bytes per element of a format, for communication volumes.
constexpr double element_bytes(const element_format& f) {
  const ratio r = bits_per_element(f);
  return static_cast<double>(r.num) / static_cast<double>(r.den) / 8;
}

/// Link bandwidth of a group of `size` ranks `stride` apart: inside a node when the node holds
/// whole groups, else the inter-node link (ranks ordered TP, CP, DP, PP from the innermost, as
/// Megatron-LM's "tp-cp-ep-dp-pp" and torchtitan's device mesh order them).
constexpr double group_bandwidth(const cluster_figures& c, std::int64_t size, std::int64_t stride) {
  const std::int64_t span = size * stride;  // below max_world_size
  return c.gpus_per_node % span == 0 ? c.intra : c.inter;
}

/// Bytes one rank sends in a ring all-reduce of `message` bytes over `n` ranks: 2(n-1)/n of it
/// (Patarasuk and Yuan 2009; NCCL's ring); an all-gather or a reduce-scatter sends half that.
constexpr double all_reduce_bytes(double message, std::int64_t n) {
  return 2 * message * static_cast<double>(n - 1) / static_cast<double>(n);
}
constexpr double gather_bytes(double message, std::int64_t n) {
  return all_reduce_bytes(message, n) / 2;
}

constexpr double as_double(std::int64_t v) {
  return static_cast<double>(v);
}

/// Forward and backward FLOPs per token of stage `stage`'s layers, recompute included, plus the
/// head on the last stage. Recompute repeats the forward of what it covers: all (full, the first
/// recompute_layers per stage) or the attention core (selective; Korthikanti et al. 2022 §5).
constexpr double stage_flops(const training_plan_value& p, const model_work& f,
                             std::int64_t stage) {
  const model& m = p.setup.model;
  const layout& l = p.setup.layout;
  const activation_options& o = p.batch;
  const double layer = (f.training() - (2 + f.trainable_share) * f.head) / as_double(m.layers);
  const double forward = (f.layers + f.attention) / as_double(m.layers);
  const std::int64_t layers = l.layers_of_stage(m.layers, stage);
  double extra = 0;
  if (o.recompute == recompute_kind::full)
    extra = forward * as_double(checkpointed_layers(o, layers));
  else if (o.recompute == recompute_kind::selective)
    extra = f.attention / as_double(m.layers) * as_double(layers);
  else if (o.recompute == recompute_kind::op_sac)  // eager attention has no SDPA to cache
    extra = (f.op_sac_recomputed + (o.attention == attention_kind::eager ? f.attention : 0)) /
            as_double(m.layers) * as_double(layers);
  return as_double(layers) * layer + extra +
         (stage == l.pipeline - 1 ? (2 + f.trainable_share) * f.head : 0);
}

/// The compute of one step and the pipeline's bubble. The pipeline runs at the pace of its
/// slowest stage: the first holds the most layers, the last the fewest plus the head.
constexpr void add_compute(step_time& s, const training_plan_value& p, const cluster_figures& c,
                           const model_work& f) {
  const layout& l = p.setup.layout;
  const activation_options& o = p.batch;
  const double first = stage_flops(p, f, 0), last = stage_flops(p, f, l.pipeline - 1);
  const double micro_batch_tokens = as_double(o.micro_batch) * as_double(o.sequence);
  const double per_micro_batch = micro_batch_tokens * (first > last ? first : last) /
                                 (as_double(l.tensor) * as_double(l.context) * c.flops);
  const double v = o.schedule == pipeline_schedule::interleaved ? as_double(o.virtual_stages) : 1;
  s.compute = as_double(o.micro_batches) * per_micro_batch;
  // Narayanan et al. 2021 §2.2: 1F1B (and GPipe) take p-1 extra micro-batch slots to fill and
  // drain; the interleaved schedule (p-1)/v.
  s.bubble = (as_double(l.pipeline) - 1) / v * per_micro_batch;
}

/// One micro-batch's hidden states on a rank: b x s/cp x h.
constexpr double hidden_state_bytes(const training_plan_value& p) {
  const activation_options& o = p.batch;
  return as_double(o.micro_batch) * as_double(o.sequence) / as_double(p.setup.layout.context) *
         as_double(p.setup.model.hidden) * element_bytes(p.setup.precision.compute);
}

/// The layers of the largest pipeline stage.
constexpr double layers_on_largest_stage(const training_plan_value& p) {
  const std::int64_t layers = p.setup.model.layers, stages = p.setup.layout.pipeline;
  return as_double((layers + stages - 1) / stages);
}

/// Megatron-LM: two all-reduces of the hidden states per layer forward, two backward (Narayanan
/// 2021 §3; Shoeybi 2019 fig. 4); sequence parallel: an all-gather and reduce-scatter each
/// (Korthikanti 2022 §4.2.2). Full recompute repeats forward's; op SAC the all-gathers/all-reduces.
constexpr double tensor_parallel_time(const training_plan_value& p, const cluster_figures& c) {
  const layout& l = p.setup.layout;
  const activation_options& o = p.batch;
  const double forward_passes = o.recompute == recompute_kind::full     ? 2
                                : o.recompute != recompute_kind::op_sac ? 1
                                : l.sequence                            ? 1.5
                                                                        : 2;
  const double per_layer =
      (2 * forward_passes + 2) * all_reduce_bytes(hidden_state_bytes(p), l.tensor);
  return as_double(o.micro_batches) * layers_on_largest_stage(p) * per_layer /
         group_bandwidth(c, l.tensor, 1);
}

/// Ring attention (Liu et al. 2023; Megatron-LM context parallel, torchtitan): each rank passes
/// its K and V shards cp-1 times forward; backward passes K, V and their gradients; the exchange
/// overlaps the attention blocks, so only what exceeds them is exposed.
constexpr double context_parallel_time(const training_plan_value& p, const cluster_figures& c,
                                       const model_work& f) {
  const model& m = p.setup.model;
  const layout& l = p.setup.layout;
  const activation_options& o = p.batch;
  const double tp = as_double(l.tensor), cp = as_double(l.context);
  const double micro_batches = as_double(o.micro_batches);
  const double kv_width =
      as_double(m.kv_heads * m.head_dim) / (m.kv_heads >= l.tensor ? tp : as_double(m.kv_heads));
  const double kv = 2 * as_double(o.micro_batch) * as_double(o.sequence) / cp * kv_width *
                    element_bytes(p.setup.precision.compute);
  const double ring = 3 * (cp - 1) * kv * micro_batches * layers_on_largest_stage(p);
  const double micro_batch_tokens = as_double(o.micro_batch) * as_double(o.sequence);
  const double attention_time = micro_batches * micro_batch_tokens * 3 * f.attention /
                                as_double(m.layers) * layers_on_largest_stage(p) /
                                (tp * cp * c.flops);
  const double exposed = ring / group_bandwidth(c, l.context, l.tensor) - attention_time;
  return exposed > 0 ? exposed : 0;
}

/// Dispatch and combine all-to-alls forward and backward (GShard, Lepikhin et al. 2020): top_k
/// copies of each token's hidden state, (ep-1)/ep of which leave the rank.
constexpr double expert_parallel_time(const training_plan_value& p, const cluster_figures& c) {
  const model& m = p.setup.model;
  const layout& l = p.setup.layout;
  const double ep = as_double(l.expert);
  const double moe_layers = as_double(m.layers - m.moe.first_dense_layers) / as_double(l.pipeline);
  const double per_layer = 4 * hidden_state_bytes(p) * as_double(m.moe.top_k) * (ep - 1) / ep;
  return as_double(p.batch.micro_batches) * moe_layers * per_layer /
         group_bandwidth(c, l.expert, l.tensor);
}

/// One send of the stage's output forward and of its gradient backward per micro-batch and model
/// chunk (split over TP under sequence parallelism).
constexpr double pipeline_parallel_time(const training_plan_value& p, const cluster_figures& c) {
  const layout& l = p.setup.layout;
  const activation_options& o = p.batch;
  const double v = o.schedule == pipeline_schedule::interleaved ? as_double(o.virtual_stages) : 1;
  const double message = hidden_state_bytes(p) / (l.sequence ? as_double(l.tensor) : 1);
  return 2 * as_double(o.micro_batches) * v * message /
         group_bandwidth(c, l.pipeline, l.tensor * l.context * l.data);
}

/// The weights one rank holds a replica of: the dense ones and the routed experts'.
struct replicated_weights {
  double dense = 0, experts = 0;
};
constexpr replicated_weights replicated_weights_of(const training_plan_value& p,
                                                   const model_work& f) {
  const layout& l = p.setup.layout;
  const double tp = as_double(l.tensor), pp = as_double(l.pipeline);
  return {(f.parameters - f.expert_parameters) / (tp * pp),
          f.expert_parameters / (tp * pp * as_double(l.expert))};
}

/// ZeRO-3 and FSDP: each micro-batch gathers the weights forward and backward and reduce-scatters
/// the gradients (ZeRO §7.2.2: 3Ψ) within the shard group; hybrid sharding then all-reduces the
/// shard across the group's replicas. Adds to `data_time` in that order.
constexpr void add_sharded_data_time(double& data_time, const training_plan_value& p,
                                     const cluster_figures& c, double weights, double grads,
                                     double group) {
  const layout& l = p.setup.layout;
  const double micro_batches = as_double(p.batch.micro_batches);
  const auto n = static_cast<std::int64_t>(group);
  const double s_ranks = as_double(l.shard_degree()) < group ? as_double(l.shard_degree()) : group;
  const auto k = static_cast<std::int64_t>(s_ranks);
  data_time += micro_batches * (2 * gather_bytes(weights, k) + gather_bytes(grads, k)) /
               group_bandwidth(c, k, l.tensor);
  if (group > s_ranks)
    data_time += micro_batches * all_reduce_bytes(grads / s_ranks, n / k) /
                 group_bandwidth(c, n / k, l.tensor * k);
}

/// Data parallelism's gathers and reductions of what a rank holds a replica of, beyond what
/// hides behind the compute (`compute`: the step's).
constexpr double data_parallel_time(const training_plan_value& p, const cluster_figures& c,
                                    const model_work& f, double compute) {
  const layout& l = p.setup.layout;
  const double micro_batches = as_double(p.batch.micro_batches);
  const replicated_weights w = replicated_weights_of(p, f);
  // FSDP gathers in MixedPrecision's param_dtype, the compute format (frameworks.hpp).
  const precision& mp = p.setup.precision;
  const double weight = element_bytes(gathers_in_compute_format(l) ? mp.compute : mp.weights);
  const double grad = element_bytes(mp.gradients);
  const double replicas = as_double(l.data) * as_double(l.context);  // gradients averaged over both
  const double backward = compute * 2 / 3;
  double data_time = 0, overlap = 0;
  for (const auto& [params, group] :
       {std::pair{w.dense, replicas}, std::pair{w.experts, replicas / as_double(l.expert)}}) {
    if (group <= 1 || params == 0) continue;
    const auto n = static_cast<std::int64_t>(group);
    const double weights = params * weight, grads = params * f.trainable_share * grad;
    const double bandwidth = group_bandwidth(c, n, l.tensor);
    switch (l.zero) {
      case sharding::none:  // DDP: one all-reduce per step, behind the last backward (no_sync)
        data_time += all_reduce_bytes(grads, n) / bandwidth;
        overlap = backward / micro_batches;
        break;
      case sharding::zero1:  // a reduce-scatter and an all-gather: the same 2Ψ (ZeRO §7.2.1)
        data_time += (gather_bytes(grads, n) + gather_bytes(weights, n)) / bandwidth;
        overlap = backward / micro_batches;
        break;
      case sharding::zero2:  // the reduce-scatter runs every micro-batch
        data_time +=
            (micro_batches * gather_bytes(grads, n) + gather_bytes(weights, n)) / bandwidth;
        overlap = backward;
        break;
      case sharding::zero3:  // prefetch runs it all beside compute
        add_sharded_data_time(data_time, p, c, weights, grads, group);
        overlap = compute;
        break;
    }
  }
  return data_time > overlap ? data_time - overlap : 0;
}

/// Gradients down and updated weights up, once per step, for this rank's shard of an offloaded
/// optimizer; offloaded weights are also fetched forward and backward.
constexpr double offload_time(const training_plan_value& p, const cluster_figures& c,
                              const model_work& f) {
  const layout& l = p.setup.layout;
  const replicated_weights w = replicated_weights_of(p, f);
  const double weight = element_bytes(p.setup.precision.weights);
  const double grad = element_bytes(p.setup.precision.gradients);
  const double shard = as_double(l.shard_degree());
  const double shard_params = (w.dense + w.experts) / shard * f.trainable_share;
  double time = shard_params * (grad + weight) / c.host;
  if (l.parameter_offload != offload_target::none)
    time += 2 * as_double(p.batch.micro_batches) * (w.dense + w.experts) / shard * weight / c.host;
  return time;
}

}  // namespace detail

/// The step-time estimate of plan `p` on cluster `c`, with its model's work `f` (work_of): its
/// micro-batch, micro-batches per step (per data-parallel replica), layout and recompute as given.
constexpr step_time estimate_step_time(const training_plan_value& p, const cluster_figures& c,
                                       const model_work& f) {
  const layout& l = p.setup.layout;
  step_time s{};
  detail::add_compute(s, p, c, f);
  if (l.tensor > 1) s.tensor = detail::tensor_parallel_time(p, c);
  if (l.context > 1) s.context = detail::context_parallel_time(p, c, f);
  if (l.expert > 1 && p.setup.model.is_moe()) s.expert = detail::expert_parallel_time(p, c);
  if (l.pipeline > 1) s.pipeline = detail::pipeline_parallel_time(p, c);
  s.data = detail::data_parallel_time(p, c, f, s.compute);
  if (l.optimizer_offload != offload_target::none) s.offload = detail::offload_time(p, c, f);
  return s;
}

/// The step-time estimate of plan `p` on `device` in cluster `net`.
constexpr step_time estimate_step_time(const training_plan_value& p, const gpu& device,
                                       const cluster& net = {}) {
  return estimate_step_time(p, figures_of(net, device), work_of(p.setup, p.batch.sequence));
}

/// Tokens per second of the whole job under the estimate.
constexpr double tokens_per_second(const training_plan_value& p, const step_time& s) {
  const layout& l = p.setup.layout;
  return static_cast<double>(l.data) * static_cast<double>(p.batch.micro_batches) *
         static_cast<double>(p.batch.micro_batch) * static_cast<double>(p.batch.sequence) /
         s.total();
}

}  // namespace vramfit
