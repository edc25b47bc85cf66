// SPDX-License-Identifier: MIT
// An estimate of a training step's time, to rank layouts that fit: the model's FLOPs at a stated
// efficiency, the pipeline bubble, and the communication each parallel dimension adds over the
// links it crosses. Memory is exact; this is not: it is an analytic model with stated assumptions
// (docs/planner.md), used only to order candidates.
#pragma once

#include <cstdint>

#include "kernel_time.hpp"
#include "local_shapes.hpp"
#include "plan.hpp"

namespace vramfit {

/// What the estimate assumes about the machines beyond the GPU preset. The two efficiencies are
/// the estimate's only fitted constants: tests/validation/planner_calibration.cpp fits them on half
/// of 59 published runs (docs/planner-calibration.md).
struct cluster {
  std::int64_t gpus_per_node = 8;  ///< a DGX/HGX node
  double intra_node_gb_per_s = 0;  ///< per GPU and direction; 0: the GPU preset's link
  /// Per NIC and direction between nodes: one 400 Gb/s InfiniBand NIC per GPU (DGX H100).
  double inter_node_gb_per_s = 50;
  double host_gb_per_s = 25;   ///< GPU to host for offload (PCIe, per direction, achieved)
  double peak_tflops = 0;      ///< dense 16-bit datasheet peak, for MFU; 0: the GPU preset's
  double matmul_tflops = 0;    ///< the fastest 16-bit matmul measured; 0: the GPU preset's
  double memory_gb_per_s = 0;  ///< memory bandwidth; 0: the GPU preset's
  /// Fraction of the measured matmul ceiling and memory bandwidth a training step's kernels keep
  /// up (clocks under sustained load, launch gaps, unfused kernels).
  double compute_efficiency = 0.76;
  /// Fraction of the link bandwidth NCCL's collectives reach (its bus bandwidth over the link's).
  double network_efficiency = 1.00;
};

/// The figures the estimate used, and whether some were assumed for want of a preset's.
struct cluster_figures {
  kernel_rates kernels{};
  double peak = 0;   ///< datasheet FLOP/s, for MFU
  double intra = 0;  ///< bytes per second a collective reaches within a node, per GPU
  double inter = 0;  ///< ... through one NIC
  double host = 0;
  double efficiency = 1;  ///< the compute efficiency applied to the kernels' rates
  gpu_generation generation = gpu_generation::hopper;
  std::int64_t gpus_per_node = 8;
  bool assumed_peak = false;    ///< the GPU has no known peak: an H100 SXM's was taken
  bool assumed_link = false;    ///< the GPU has no known link: an H100 SXM's NVLink was taken
  bool assumed_matmul = false;  ///< no measured ceiling: the peak at the H100's 80.3 %
  bool assumed_memory = false;  ///< no known bandwidth: the H100 SXM's 3.35 TB/s
};

namespace detail::rules {
[[noreturn]] inline void cluster_figure_must_be_positive(const char* what, double value) {
  raise(std::string(what) + " must be positive, got " + std::to_string(value));
}
[[noreturn]] inline void efficiency_must_be_at_most_one(const char* what, double value) {
  raise(std::string(what) + " must be at most 1, got " + std::to_string(value));
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
  auto fraction = [&](const char* what, double v) {
    positive(what, v);
    if (v > 1) detail::rules::efficiency_must_be_at_most_one(what, v);
  };
  // 0 takes the GPU preset's figure; negative or NaN is an error.
  auto zero_or_positive = [](const char* what, double v) {
    if (!(v >= 0)) detail::rules::gpu_figure_must_be_zero_or_positive(what, v);
  };
  positive("the inter-node bandwidth", c.inter_node_gb_per_s);
  positive("the host link bandwidth", c.host_gb_per_s);
  fraction("the compute efficiency", c.compute_efficiency);
  fraction("the network efficiency", c.network_efficiency);
  if (c.gpus_per_node <= 0)
    detail::rules::cluster_figure_must_be_positive("GPUs per node",
                                                   static_cast<double>(c.gpus_per_node));
  zero_or_positive("the peak TFLOP/s", c.peak_tflops);
  zero_or_positive("the matmul TFLOP/s", c.matmul_tflops);
  zero_or_positive("the memory bandwidth", c.memory_gb_per_s);
  zero_or_positive("the intra-node bandwidth", c.intra_node_gb_per_s);
  // gpus::h100_80gb's figures, for a GPU that lacks one.
  constexpr double h100_tflops = 989, h100_nvlink = 450, h100_memory = 3350;
  constexpr double h100_matmul_share = 794.5 / 989;  // its measured ceiling over its peak
  const auto given = [](double option, double preset) { return option > 0 ? option : preset; };
  cluster_figures f{};
  double tflops = given(c.peak_tflops, static_cast<double>(device.dense_tflops));
  f.assumed_peak = tflops == 0;
  if (f.assumed_peak) tflops = h100_tflops;
  double matmul = given(c.matmul_tflops, static_cast<double>(device.matmul_gflops) / 1e3);
  f.assumed_matmul = matmul == 0;
  if (f.assumed_matmul) matmul = tflops * h100_matmul_share;
  double memory = given(c.memory_gb_per_s, static_cast<double>(device.memory_gb_per_s));
  f.assumed_memory = memory == 0;
  if (f.assumed_memory) memory = h100_memory;
  double link = given(c.intra_node_gb_per_s, static_cast<double>(device.link_gb_per_s));
  f.assumed_link = link == 0;
  if (f.assumed_link) link = h100_nvlink;
  f.kernels = {matmul * 1e12 * c.compute_efficiency, memory * 1e9 * c.compute_efficiency,
               static_cast<double>(device.multiprocessors)};
  f.peak = tflops * 1e12;
  f.intra = link * 1e9 * c.network_efficiency;
  f.inter = c.inter_node_gb_per_s * 1e9 * c.network_efficiency;
  f.host = c.host_gb_per_s * 1e9;
  f.gpus_per_node = c.gpus_per_node;
  f.efficiency = c.compute_efficiency;
  f.generation = device.generation;
  return f;
}

/// The model's figures, once per search: its FLOPs per token, for MFU (2 per weight multiplied, a
/// tied embedding as the head, + 4·layers·heads·head_dim·sequence, ignoring causality: PaLM
/// appendix B, torchtitan get_num_flop_per_token; backward 2 + trainable_share times the weights'
/// forward), and its matmul weights, whose shapes the kernel times follow.
struct model_work {
  double layers = 0;     ///< the layers' weights, all layers
  double head = 0;       ///< the output projection
  double attention = 0;  ///< the attention core, all layers
  /// The share of the layers' matmul FLOPs that op-level SAC does not cache: what it repeats
  double op_sac_recomputed = 0;
  double trainable_share = 1;
  double parameters = 0;         ///< all of them, for what data parallelism moves
  double expert_parameters = 0;  ///< the routed experts' share of them
  tensor_ledger matmuls{};       ///< the weights tokens are multiplied by (a tied head included)
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
  double all = 0, repeated = 0;
  for (const std::int64_t layer : {std::int64_t{0}, m.layers - 1}) {
    const std::int64_t count = layer == 0 ? dense : m.layers - dense;
    if (count == 0) continue;
    constexpr bool flash = true;  // any kernel: only the cached weights are read
    const op_sac_layer c = op_sac_cache(m, layout{}, layer, 1, 16, flash);
    all += d(c.all_weights) * d(count);
    repeated += d(c.all_weights - c.cached_weights) * d(count);
  }
  f.op_sac_recomputed = all > 0 ? repeated / all : 0;
  for (const tensor_group& g : ledger) {
    const bool multiplied = g.rank == 2 && g.role == tensor_role::parameter &&
                            g.kind != tensor_kind::embedding && g.kind != tensor_kind::norm &&
                            g.kind != tensor_kind::adapter;
    if (multiplied) f.matmuls.push_back(g);
  }
  if (m.tied_embeddings) {  // the head reads the token embedding's [vocab, hidden]
    tensor_group g{};
    g.shape[0] = m.vocab;
    g.shape[1] = m.hidden;
    g.rank = 2;
    g.kind = tensor_kind::head;
    g.split = tp_split::vocab;
    f.matmuls.push_back(g);
  }
  return f;
}

/// Seconds of one optimizer step on the most loaded rank, by cause.
struct step_time {
  double compute = 0;    ///< the slowest stage's forward and backward kernels, every micro-batch
  double recompute = 0;  ///< forward kernels repeated by activation recompute
  double bubble = 0;     ///< pipeline fill and drain: (p-1)/v micro-batch slots of that stage
  double optimizer = 0;  ///< the optimizer step over the rank's shard (memory-bound)
  double tensor = 0;     ///< TP all-reduces (or SP all-gathers and reduce-scatters)
  double context = 0;    ///< CP ring exchanges of K and V not hidden behind attention
  double expert = 0;     ///< EP all-to-all dispatch and combine
  double pipeline = 0;   ///< PP sends of activations and their gradients
  double data = 0;       ///< DP/ZeRO/FSDP gathers and reductions not hidden behind compute
  double offload = 0;    ///< host transfers of offloaded states (the CPU's own step not counted)

  [[nodiscard]] constexpr double total() const {
    return compute + recompute + bubble + optimizer + tensor + context + expert + pipeline + data +
           offload;
  }
};

namespace detail {

/// Bytes per element of a format, for communication volumes.
constexpr double element_bytes(const element_format& f) {
  const ratio r = bits_per_element(f);
  return static_cast<double>(r.num) / static_cast<double>(r.den) / 8;
}

constexpr double as_double(std::int64_t v) {
  return static_cast<double>(v);
}

/// Bus bandwidth of a group of `size` ranks `stride` apart: the node's link when the node holds
/// whole groups; else each node's members of the group drive a NIC each, as NCCL spreads its
/// rings and trees over every NIC of the node (one channel per NIC: NCCL's graph search,
/// src/graph/search.cc), up to the node's link (ranks ordered TP, CP, DP, PP from the innermost,
/// as Megatron-LM's "tp-cp-ep-dp-pp" and torchtitan's device mesh order them).
constexpr double group_bandwidth(const cluster_figures& c, std::int64_t size, std::int64_t stride) {
  const std::int64_t span = size * stride;  // below max_world_size
  const std::int64_t n = c.gpus_per_node;
  if (n % span == 0) return c.intra;
  const std::int64_t per_node = stride < n && n % stride == 0 ? n / stride : 1;
  const double across = static_cast<double>(per_node) * c.inter;
  return across < c.intra ? across : c.intra;
}

/// Bytes one rank sends in a ring all-reduce of `message` bytes over `n` ranks: 2(n-1)/n of it
/// (Patarasuk and Yuan 2009; NCCL's ring); an all-gather or a reduce-scatter sends half that.
constexpr double all_reduce_bytes(double message, std::int64_t n) {
  return 2 * message * static_cast<double>(n - 1) / static_cast<double>(n);
}
constexpr double gather_bytes(double message, std::int64_t n) {
  return all_reduce_bytes(message, n) / 2;
}

/// What a collective's latency counts (NCCL's tuning model, src/graph/tuning.cc).
enum class collective : unsigned char { all_reduce, gather, send };

/// Seconds of latency of one collective over `size` ranks `stride` apart, as NCCL's tuning model
/// puts it for the Simple protocol: 8.4 µs to launch, then per ring step 3.4 µs within a node and
/// 14 µs between nodes; an all-reduce takes the lower of the ring (2(n-1) steps) and the tree
/// (2((n/nodes - 1) intra-node hops + log2(nodes) inter-node ones)); an all-gather or a
/// reduce-scatter is a ring of n-1 steps; a send (ring attention, pipeline, all-to-all) one step.
constexpr double collective_latency(const cluster_figures& c, collective kind, std::int64_t size,
                                    std::int64_t stride) {
  constexpr double launch = 8.4e-6, nvlink_hop = 3.4e-6, tree_nvlink_hop = 4.0e-6,
                   network_hop = 14.0e-6;
  if (size <= 1) return 0;
  const std::int64_t n = c.gpus_per_node;
  const std::int64_t per_node = n % (size * stride) == 0        ? size
                                : stride < n && n % stride == 0 ? n / stride
                                                                : 1;
  const double nodes = as_double((size + per_node - 1) / per_node);
  const double steps = as_double(size - 1), across = nodes - 1;
  const double ring = (steps - across) * nvlink_hop + across * network_hop;
  if (kind == collective::send) return launch + (nodes > 1 ? network_hop : nvlink_hop);
  if (kind == collective::gather) return launch + ring;
  double levels = 0;  // log2 of the nodes, rounded up
  for (double width = 1; width < nodes; width *= 2) ++levels;
  const double tree = 2 * (as_double(per_node - 1) * tree_nvlink_hop + levels * network_hop);
  return launch + (2 * ring < tree ? 2 * ring : tree);
}

/// Bytes of an activation element between kernels: the compute format's, but 16-bit under FP8,
/// whose matmuls cast their inputs themselves.
constexpr double activation_bytes(const precision& p) {
  return element_bytes(p.fp8_weight_copies > 0 ? p.weights : p.compute);
}

/// Kernel seconds of one micro-batch on one rank, for layers or the head.
struct kernel_seconds {
  double forward = 0, backward = 0;
};

/// The kernels of one micro-batch on one rank of plan `p`: its matmuls at their TP-local shapes,
/// FlashAttention, and the memory-bound passes, per layer of each weight group.
class micro_batch_kernels {
 public:
  constexpr micro_batch_kernels(const training_plan_value& p, const cluster_figures& c,
                                const model_work& w, bool ideal)
      : p_(p), w_(w), r_(c.kernels), ideal_(ideal) {
    const model& m = p.setup.model;
    const layout& l = p.setup.layout;
    const activation_options& o = p.batch;
    tokens_ = as_double(o.micro_batch) * as_double(o.sequence) / as_double(l.context);
    e_ = element_bytes(p.setup.precision.compute);
    // FP8 matmuls run at the H100's measured FP8 over BF16 ceiling (ml-engineering MAMF v2:
    // 1,402.6 and 794.5 TFLOP/s); 32-bit ones without tensor cores at 1/16 (A100: 19.5 of 312).
    fp8_ = p.setup.precision.fp8_weight_copies > 0;
    if (fp8_) r_.matmul *= 1402.6 / 794.5;
    if (e_ >= 4) r_.matmul /= 16;
    attention_ = attention_of(p, c);
    for (const tensor_group& g : w.matmuls) matmuls_.push_back(matmul(g));
    // Elementwise passes read and write each tensor once forward and twice backward: two norms
    // and two residual adds over the hidden states (under SP a 1/t share of the tokens), and
    // rotary embeddings and the activation function over the projections' outputs (top_k
    // copies of a routed expert's); an MoE layer also permutes top_k copies of each token's
    // hidden state to its experts and back (Megatron-Core's token dispatcher).
    if (ideal) return;  // no memory-bound time in the bound
    const double replicated = l.sequence ? 1 / as_double(l.tensor) : 1;
    const double hidden = as_double(m.hidden), top_k = as_double(m.moe.top_k);
    for (const bool moe : {false, true}) {
      const std::int64_t layer = moe ? m.layers - 1 : 0;
      if (moe && !m.is_moe_layer(layer)) continue;
      double projected = moe ? 4 * top_k * hidden : 0;
      for (const tensor_group& g : w.matmuls)
        if (g.in_layer(layer) && g.kind != tensor_kind::router)
          projected += out_features(g) * (g.kind == tensor_kind::expert ? top_k : 1);
      const double forward =
          tokens_ * activation_bytes(p.setup.precision) * (10 * hidden * replicated + projected);
      elementwise_[moe] = {memory(forward), memory(2 * forward)};
    }
    if (!m.is_moe_layer(m.layers - 1)) elementwise_[1] = elementwise_[0];
  }

  /// Layers [first, first + count): their matmuls, attention and elementwise passes.
  [[nodiscard]] constexpr kernel_seconds layers(std::int64_t first, std::int64_t count) const {
    const model& m = p_.setup.model;
    const double n = as_double(count);
    const double dense =
        as_double(overlap(0, m.is_moe() ? m.moe.first_dense_layers : m.layers, first, count));
    kernel_seconds s{n * attention_.forward + dense * elementwise_[0].forward +
                         (n - dense) * elementwise_[1].forward,
                     n * attention_.backward + dense * elementwise_[0].backward +
                         (n - dense) * elementwise_[1].backward};
    for (std::size_t i = 0; i < w_.matmuls.size(); ++i) {
      const tensor_group& g = w_.matmuls[i];
      const double here = as_double(overlap(g.first_layer, g.layer_count, first, count));
      s.forward += here * matmuls_[i].forward;
      s.backward += here * matmuls_[i].backward;
    }
    return s;
  }

  /// The head and the loss over its logits (fp32, read and written three times).
  [[nodiscard]] constexpr kernel_seconds head() const {
    kernel_seconds s{};
    for (std::size_t i = 0; i < w_.matmuls.size(); ++i) {
      const tensor_group& g = w_.matmuls[i];
      if (g.layer_count > 0 || g.kind != tensor_kind::head) continue;
      const kernel_seconds k = matmuls_[i];
      const double logits = memory(3 * 4 * tokens_ * out_features(g));
      s.forward += k.forward + logits;
      s.backward += k.backward + logits;
    }
    return s;
  }

  [[nodiscard]] constexpr kernel_seconds attention() const { return attention_; }
  [[nodiscard]] constexpr bool ideal() const { return ideal_; }

  /// Layer `layer`'s matmuls beside each collective of TP with SP, in forward's order: the
  /// attention's input linears after its all-gather, its output linear before its
  /// reduce-scatter, then the MLP's (dense MLPs and shared experts: routed experts run grouped
  /// matmuls behind the token dispatcher, which userbuffers do not overlap).
  struct tp_neighbours {
    kernel_seconds around[4]{};
  };
  [[nodiscard]] constexpr tp_neighbours tp_neighbours_of(std::int64_t layer) const {
    tp_neighbours n{};
    for (std::size_t i = 0; i < w_.matmuls.size(); ++i) {
      const tensor_group& g = w_.matmuls[i];
      const bool attention = g.kind == tensor_kind::attention;
      if (!g.in_layer(layer) || g.split == tp_split::replicated ||
          (!attention && g.kind != tensor_kind::mlp))
        continue;
      kernel_seconds& k = n.around[(attention ? 0 : 2) + (g.split == tp_split::input ? 1 : 0)];
      k.forward += matmuls_[i].forward;
      k.backward += matmuls_[i].backward;
    }
    return n;
  }

 private:
  /// Output features of a weight on this rank, and its input features.
  [[nodiscard]] constexpr double out_features(const tensor_group& g) const {
    const local_shape s = tp_local_shape(g, p_.setup.model, p_.setup.layout.tensor);
    return as_double(g.input_major ? s.last : s.second);
  }
  [[nodiscard]] constexpr double in_features(const tensor_group& g) const {
    const local_shape s = tp_local_shape(g, p_.setup.model, p_.setup.layout.tensor);
    return as_double(g.input_major ? s.second : s.last);
  }

  /// One layer's matmul by weight group `g`: forward y = x·Wᵀ, backward its input gradient and,
  /// for the trainable share, its weight gradient (the same FLOPs each). Routed experts run as
  /// one grouped matmul over the rank's experts, each fed top_k·ep/experts of the tokens that
  /// every rank of the expert group sends (an even router).
  [[nodiscard]] constexpr kernel_seconds matmul(const tensor_group& g) const {
    const model& m = p_.setup.model;
    double rows = tokens_, count = 1;
    if (g.kind == tensor_kind::expert) {
      const double ep = as_double(p_.setup.layout.expert);
      count = as_double(g.experts) / ep;
      rows = tokens_ * as_double(m.moe.top_k) * ep / as_double(g.experts);
    }
    const double out = out_features(g), in = in_features(g);
    const double forward = matmul_seconds(r_, rows, out, in, e_, count, ideal_);
    const double input_grad = matmul_seconds(r_, rows, in, out, e_, count, ideal_);
    const double weight_grad = matmul_seconds(r_, in, out, rows, e_, count, ideal_);
    // Dynamic FP8 casts outside Transformer Engine (torchao's Float8Linear): each operand's amax
    // read, then read again and written in 8 bits (2 + 2 + 1 bytes a 16-bit element), per
    // matmul; Transformer Engine fuses them into the norms and activations before.
    double casts = 0;
    if (fp8_ && p_.batch.code != model_code::megatron_te)
      casts = memory(5 * count * ((rows + out) * in + (rows + in) * out + (in + out) * rows));
    return {forward + casts / 3, input_grad + w_.trainable_share * weight_grad + casts * 2 / 3};
  }

  [[nodiscard]] constexpr double memory(double bytes) const {
    return ideal_ ? 0 : memory_seconds(r_, bytes);
  }

  /// The attention core of one layer: fused (FlashAttention-2, or cuDNN's under Transformer
  /// Engine) or eager, the rank's query heads over its share of the sequence against the whole
  /// sequence (ring attention passes the rest), causal unless an encoder.
  [[nodiscard]] constexpr kernel_seconds attention_of(const training_plan_value& p,
                                                      const cluster_figures& c) const {
    const model& m = p.setup.model;
    const layout& l = p.setup.layout;
    const activation_options& o = p.batch;
    const attention_shape a{as_double(o.micro_batch), as_double(o.sequence) / as_double(l.context),
                            as_double(o.sequence),    as_double(m.heads) / as_double(l.tensor),
                            as_double(m.head_dim),    !m.is_encoder()};
    if (o.attention == attention_kind::eager) {
      const attention_seconds t =
          eager_attention_time(r_, a, activation_bytes(p.setup.precision), ideal_);
      return {t.forward, t.backward};
    }
    // Shares of the 16-bit peak: FlashAttention-2 reaches 50-73 % on an A100 (Dao 2023,
    // abstract; forward at the top, backward at the bottom) but 35 % on an H100, where
    // FlashAttention-3 and cuDNN's fused kernel reach 75 % forward (Shah et al. 2024, abstract;
    // backward taken at FlashAttention-2's 50/73 of it). Never above the matmul ceiling.
    const bool hopper = c.generation == gpu_generation::hopper;
    const bool fused = hopper && o.code == model_code::megatron_te;
    const double forward = hopper ? (fused ? 0.75 : 0.35) : 0.73;
    const double backward = hopper ? (fused ? 0.75 * 50 / 73 : 0.35) : 0.50;
    const double ceiling = r_.matmul / (fp8_ ? 1402.6 / 794.5 : 1);  // attention stays 16-bit
    const auto rate = [&](double share) {
      const double r = c.peak * share * c.efficiency;
      return r < ceiling ? r : ceiling;
    };
    const attention_seconds t = fused_attention_time(r_, a, rate(forward), rate(backward), ideal_);
    // Ring attention runs one kernel per step and corrects the running output with each step's
    // (Transformer Engine's AttnFuncWithCPAndKVP2P: out_per_step read, the fp32 output read and
    // written, 12 bytes a query element per step; backward accumulates dq and dk, dv in fp32).
    const double steps = as_double(l.context - 1);
    const double corrected = a.batch * a.queries * a.heads * a.head_dim * steps * 12;
    return {t.forward + memory(corrected), t.backward + memory(2 * corrected)};
  }

  const training_plan_value& p_;
  const model_work& w_;
  kernel_rates r_;
  bool ideal_;
  bool fp8_ = false;
  double tokens_ = 0, e_ = 0;
  kernel_seconds attention_{};
  static_vector<kernel_seconds, tensor_ledger::capacity> matmuls_{};  ///< one layer's, by group
  kernel_seconds elementwise_[2] = {};  ///< a dense layer's, an MoE layer's
};

/// One micro-batch of stage `stage` on one rank: forward and backward, and what recompute
/// repeats: the forward of the first checkpointed layers (full; Megatron-LM
/// --recompute-num-layers), the attention core (selective; Korthikanti et al. 2022 §5), or the
/// uncached matmuls and eager attention (op-level SAC; torchtitan's _save_list).
struct stage_seconds {
  double work = 0, recompute = 0;
};
constexpr stage_seconds stage_time(const training_plan_value& p, const model_work& w,
                                   const micro_batch_kernels& k, std::int64_t stage) {
  const model& m = p.setup.model;
  const layout& l = p.setup.layout;
  const activation_options& o = p.batch;
  const std::int64_t first = l.first_layer_of_stage(m.layers, stage);
  const std::int64_t count = l.layers_of_stage(m.layers, stage);
  const kernel_seconds all = k.layers(first, count);
  stage_seconds s{all.forward + all.backward, 0};
  if (stage == l.pipeline - 1) {
    const kernel_seconds h = k.head();
    s.work += h.forward + h.backward;
  }
  if (o.recompute == recompute_kind::full)
    s.recompute = k.layers(first, checkpointed_layers(o, count)).forward;
  else if (o.recompute == recompute_kind::selective)
    s.recompute = as_double(count) * k.attention().forward;
  else if (o.recompute == recompute_kind::op_sac)  // eager attention has no SDPA to cache
    s.recompute =
        (all.forward - as_double(count) * k.attention().forward) * w.op_sac_recomputed +
        (o.attention == attention_kind::eager ? as_double(count) * k.attention().forward : 0);
  return s;
}

/// The compute of one step and the pipeline's bubble. The pipeline runs at the pace of its
/// slowest stage, of the first (most layers when they do not divide), the second (standing for
/// the middle ones, e.g. past DeepSeek's dense layers) and the last (the head).
constexpr void add_compute(step_time& s, const training_plan_value& p, const model_work& w,
                           const micro_batch_kernels& k) {
  const layout& l = p.setup.layout;
  const activation_options& o = p.batch;
  stage_seconds slowest{};
  for (const std::int64_t stage : {std::int64_t{0}, std::int64_t{1}, l.pipeline - 1}) {
    if (stage >= l.pipeline) continue;
    const stage_seconds t = stage_time(p, w, k, stage);
    if (t.work + t.recompute > slowest.work + slowest.recompute) slowest = t;
  }
  const double v = o.schedule == pipeline_schedule::interleaved ? as_double(o.virtual_stages) : 1;
  const double m = as_double(o.micro_batches);
  s.compute = m * slowest.work;
  s.recompute = m * slowest.recompute;
  // Narayanan et al. 2021 §2.2: 1F1B (and GPipe) take p-1 extra micro-batch slots to fill and
  // drain; the interleaved schedule (p-1)/v.
  s.bubble = (as_double(l.pipeline) - 1) / v * (slowest.work + slowest.recompute);
}

/// One micro-batch's hidden states on a rank: b x s/cp x h.
constexpr double hidden_state_bytes(const training_plan_value& p) {
  const activation_options& o = p.batch;
  return as_double(o.micro_batch) * as_double(o.sequence) / as_double(p.setup.layout.context) *
         as_double(p.setup.model.hidden) * activation_bytes(p.setup.precision);
}

/// The layers of the largest pipeline stage.
constexpr double layers_on_largest_stage(const training_plan_value& p) {
  const std::int64_t layers = p.setup.model.layers, stages = p.setup.layout.pipeline;
  return as_double((layers + stages - 1) / stages);
}

/// Megatron-LM: two all-reduces of the hidden states per layer forward, two backward (Narayanan
/// 2021 §3; Shoeybi 2019 fig. 4); sequence parallel: an all-gather and reduce-scatter each
/// (Korthikanti 2022 §4.2.2). Full recompute repeats forward's; op SAC the all-gathers/all-reduces.
/// Exposed, unless the framework overlaps them (layout::tp_overlap).
constexpr double tensor_parallel_time(const training_plan_value& p, const cluster_figures& c,
                                      const micro_batch_kernels& k) {
  const model& m = p.setup.model;
  const layout& l = p.setup.layout;
  const activation_options& o = p.batch;
  const double forward_passes = o.recompute == recompute_kind::full     ? 2
                                : o.recompute != recompute_kind::op_sac ? 1
                                : l.sequence                            ? 1.5
                                                                        : 2;
  const double all_reduces = 2 * forward_passes + 2;
  const double bandwidth = group_bandwidth(c, l.tensor, 1);
  const double per_layer_and_micro_batch = [&] {
    // Under SP each all-reduce is an all-gather and a reduce-scatter: two launches.
    const double latency = l.sequence ? 2 * collective_latency(c, collective::gather, l.tensor, 1)
                                      : collective_latency(c, collective::all_reduce, l.tensor, 1);
    if (l.tp_overlap == tp_comm_overlap::none)
      return all_reduces *
             (all_reduce_bytes(hidden_state_bytes(p), l.tensor) / bandwidth + latency);
    if (k.ideal()) return 0.0;  // the search's bound: the matmuls may hide all of it
    // Overlapped (layout::tp_overlap, with SP): each collective moves its message in t-1 steps
    // beside the matmul on the chunk at hand (Wang et al. 2023, "Overlap communication with
    // dependent computation via decomposition"; torch's _pipelined_all_gather_and_consume and
    // TE's ring-exchange userbuffers): of a collective of C seconds beside a matmul of G, only
    // C - G(t-1)/t shows. Backward pairs each with its linear's gradients.
    const double t = as_double(l.tensor);
    const double one = gather_bytes(hidden_state_bytes(p), l.tensor) / bandwidth +
                       collective_latency(c, collective::gather, l.tensor, 1);
    const auto shown = [&](double matmul) {
      const double rest = one - matmul * (t - 1) / t;
      return rest > 0 ? rest : 0;
    };
    const auto exposed = [&](std::int64_t layer) {
      double forward = 0, backward = 0;
      for (const kernel_seconds& g : k.tp_neighbours_of(layer).around) {
        forward += shown(g.forward);
        backward += shown(g.backward);
      }
      return forward_passes * forward + backward;
    };
    if (!m.is_moe()) return exposed(0);
    const double dense = as_double(m.moe.first_dense_layers) / as_double(m.layers);
    return dense * exposed(0) + (1 - dense) * exposed(m.layers - 1);
  }();
  return as_double(o.micro_batches) * layers_on_largest_stage(p) * per_layer_and_micro_batch;
}

/// Ring attention (Liu et al. 2023; Megatron-LM context parallel, torchtitan): each rank passes
/// its K and V shards cp-1 times forward; backward passes K, V and their gradients; the exchange
/// overlaps the attention blocks, so only what exceeds them is exposed.
constexpr double context_parallel_time(const training_plan_value& p, const cluster_figures& c,
                                       const micro_batch_kernels& k) {
  const model& m = p.setup.model;
  const layout& l = p.setup.layout;
  const activation_options& o = p.batch;
  const double tp = as_double(l.tensor), cp = as_double(l.context);
  const double micro_batches = as_double(o.micro_batches);
  const double kv_width =
      as_double(m.kv_heads * m.head_dim) / (m.kv_heads >= l.tensor ? tp : as_double(m.kv_heads));
  const double kv = 2 * as_double(o.micro_batch) * as_double(o.sequence) / cp * kv_width *
                    activation_bytes(p.setup.precision);
  const double sends = 3 * (cp - 1) * micro_batches * layers_on_largest_stage(p);
  const double ring = sends * (kv / group_bandwidth(c, l.context, l.tensor) +
                               collective_latency(c, collective::send, l.context, l.tensor));
  const kernel_seconds a = k.attention();
  const double attention = micro_batches * layers_on_largest_stage(p) * (a.forward + a.backward);
  const double exposed = ring - attention;
  return exposed > 0 ? exposed : 0;
}

/// Dispatch and combine all-to-alls forward and backward (GShard, Lepikhin et al. 2020): top_k
/// copies of each token's hidden state, (ep-1)/ep of which leave the rank: those for the node's
/// other members over NVLink, the rest through the rank's own NIC at the same time.
constexpr double expert_parallel_time(const training_plan_value& p, const cluster_figures& c) {
  const model& m = p.setup.model;
  const layout& l = p.setup.layout;
  const double ep = as_double(l.expert);
  const std::int64_t node = c.gpus_per_node;
  const std::int64_t fit = node % l.tensor == 0 ? node / l.tensor : 1;  // EP ranks per node
  const double in_node = as_double(fit < l.expert && l.expert % fit == 0 ? fit : l.expert);
  const double moe_layers = as_double(m.layers - m.moe.first_dense_layers) / as_double(l.pipeline);
  const double copies = 4 * hidden_state_bytes(p) * as_double(m.moe.top_k) / ep;
  const double intra = copies * (in_node - 1) / c.intra, inter = copies * (ep - in_node) / c.inter;
  const double latency = 4 * collective_latency(c, collective::send, l.expert, l.tensor);
  return as_double(p.batch.micro_batches) * moe_layers *
         ((intra > inter ? intra : inter) + latency);
}

/// The optimizer step over the weights a rank updates, memory-bound: each read and written once,
/// its moments too, the gradient read and a master's weights written back (torch.optim's fused
/// AdamW, DeepSpeed's and apex's FusedAdam: one pass over flat buffers).
constexpr double optimizer_time(const training_plan_value& p, const cluster_figures& c,
                                const model_work& w) {
  const layout& l = p.setup.layout;
  const precision& mp = p.setup.precision;
  const optimizer& opt = p.setup.optimizer;
  if (l.optimizer_offload != offload_target::none) return 0;  // the CPU steps
  const double updated = element_bytes(mp.updated());
  const double state =
      opt.options.states.payload_bits > 0 ? element_bytes(opt.options.states) : updated;
  const double per_parameter = 2 * updated + 2 * as_double(opt.moments) * state +
                               element_bytes(mp.gradients) +
                               (mp.has_master() ? element_bytes(mp.weights) : 0);
  const double dense =
      (w.parameters - w.expert_parameters) / as_double(l.tensor) / as_double(l.pipeline);
  const double experts =
      w.expert_parameters / as_double(l.tensor) / as_double(l.pipeline) / as_double(l.expert);
  const double shard = l.zero == sharding::none ? 1 : as_double(l.shard_degree());
  return (dense + experts) / shard * w.trainable_share * per_parameter / c.kernels.memory;
}

/// One send of the stage's output forward and of its gradient backward per micro-batch and model
/// chunk (split over TP under sequence parallelism).
constexpr double pipeline_parallel_time(const training_plan_value& p, const cluster_figures& c) {
  const layout& l = p.setup.layout;
  const activation_options& o = p.batch;
  const double v = o.schedule == pipeline_schedule::interleaved ? as_double(o.virtual_stages) : 1;
  const double message = hidden_state_bytes(p) / (l.sequence ? as_double(l.tensor) : 1);
  const std::int64_t stride = l.tensor * l.context * l.data;
  return 2 * as_double(o.micro_batches) * v *
         (message / group_bandwidth(c, l.pipeline, stride) +
          collective_latency(c, collective::send, l.pipeline, stride));
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
  // One gather forward, one backward and one reduce-scatter per layer (a unit each) and
  // micro-batch.
  const double collectives = 3 * layers_on_largest_stage(p) * micro_batches;
  data_time += micro_batches * (2 * gather_bytes(weights, k) + gather_bytes(grads, k)) /
                   group_bandwidth(c, k, l.tensor) +
               collectives * collective_latency(c, collective::gather, k, l.tensor);
  if (group > s_ranks)
    data_time +=
        micro_batches *
        (all_reduce_bytes(grads / s_ranks, n / k) / group_bandwidth(c, n / k, l.tensor * k) +
         layers_on_largest_stage(p) *
             collective_latency(c, collective::all_reduce, n / k, l.tensor * k));
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
    const auto latency = [&](collective kind) { return collective_latency(c, kind, n, l.tensor); };
    switch (l.zero) {
      case sharding::none:  // DDP: one all-reduce per step, behind the last backward (no_sync)
        data_time += all_reduce_bytes(grads, n) / bandwidth + latency(collective::all_reduce);
        overlap = backward / micro_batches;
        break;
      case sharding::zero1:  // a reduce-scatter and an all-gather: the same 2Ψ (ZeRO §7.2.1)
        data_time += (gather_bytes(grads, n) + gather_bytes(weights, n)) / bandwidth +
                     2 * latency(collective::gather);
        // Megatron-LM's distributed optimizer also gathers the updated weights behind the next
        // step's first forward (--overlap-param-gather, distributed/param_and_grad_buffer.py);
        // DeepSpeed gathers them after the step, exposed (stage_1_and_2.py step()).
        overlap = (l.implementation == shard_implementation::megatron ? compute : backward) /
                  micro_batches;
        break;
      case sharding::zero2:  // the reduce-scatter runs every micro-batch
        data_time +=
            (micro_batches * gather_bytes(grads, n) + gather_bytes(weights, n)) / bandwidth +
            (micro_batches + 1) * latency(collective::gather);
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
/// `ideal`: every kernel at the full matmul rate, no memory-bound time, a lower bound of each
/// compute term at any micro-batch (the search's bound).
constexpr step_time estimate_step_time(const training_plan_value& p, const cluster_figures& c,
                                       const model_work& f, bool ideal = false) {
  const layout& l = p.setup.layout;
  step_time s{};
  const detail::micro_batch_kernels kernels(p, c, f, ideal);
  detail::add_compute(s, p, f, kernels);
  s.optimizer = detail::optimizer_time(p, c, f);
  if (l.tensor > 1) s.tensor = detail::tensor_parallel_time(p, c, kernels);
  if (l.context > 1) s.context = detail::context_parallel_time(p, c, kernels);
  if (l.expert > 1 && p.setup.model.is_moe()) s.expert = detail::expert_parallel_time(p, c);
  if (l.pipeline > 1) s.pipeline = detail::pipeline_parallel_time(p, c);
  s.data = detail::data_parallel_time(p, c, f, s.compute + s.recompute);
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
