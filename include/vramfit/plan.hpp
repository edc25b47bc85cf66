// SPDX-License-Identifier: MIT
// Training plans: a model, a precision policy, an optimizer, a fine-tuning mode, a parallel
// layout, a batch shape and runtime overheads, composed as types; breakdown() is the per-rank
// ledger of the most loaded rank and peak() its peak.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "detail/tag.hpp"
#include "gpu.hpp"
#include "inference.hpp"
#include "overheads.hpp"
#include "reserved_memory.hpp"

namespace vramfit {

/// Everything that decides a training step's memory: structural, so it can be a template
/// argument.
struct training_plan_value {
  training setup{};
  activation_options batch{};
  runtime_overheads overheads{};
};

/// The step of the most loaded rank (the pipeline stage whose step peaks highest): its stage and
/// timeline, built once for the ledger and the allocator's replay.
constexpr stage_state<step_timeline> most_loaded_step(const training_plan_value& p) {
  const training& t = p.setup;
  const tensor_ledger model_tensors = tensors(t.model);
  return most_loaded_by(
      t.layout, t.model, edges_of(model_tensors, t.finetune),
      [&](std::int64_t s) { return step_timeline_of(t, p.batch, s, model_tensors); },
      [](const step_timeline& tl) { return tl.peak.alive; });
}

/// The ledger of the most loaded rank, without runtime overheads.
constexpr stage_state<timed_ledger> most_loaded_rank(const training_plan_value& p) {
  const stage_state<step_timeline> most = most_loaded_step(p);
  return {most.stage, ledger_of(most.state)};
}

namespace detail {
/// simulated_reserve() in the buffers of `scratch`, or (null) of its own, made only to replay.
constexpr std::optional<reserved_memory_estimate> simulated_reserve_in(
    const training_plan_value& p, const stage_state<step_timeline>& most, replay_scratch* scratch) {
  if (!replays_allocator(p.overheads)) return {};
  if (stage_of(p.setup, most.stage).layers > max_replayed_layers) return {};
  if (scratch == nullptr)
    return reserved_memory(p.setup, p.batch, most.state, p.overheads.allocator, most.stage);
  return reserved_memory(p.setup, p.batch, most.state, p.overheads.allocator, most.stage, {},
                         replay_mode::skip_repeats, *scratch);
}
}  // namespace detail

/// The caching allocator over the most loaded rank's steps when the plan simulates it
/// (reserve_model::simulated, no fixed share given, at most max_replayed_layers on the stage).
constexpr std::optional<reserved_memory_estimate> simulated_reserve(
    const training_plan_value& p, const stage_state<step_timeline>& most) {
  return detail::simulated_reserve_in(p, most, nullptr);
}

/// The same in the buffers of `scratch`, which the next replay reuses.
constexpr std::optional<reserved_memory_estimate> simulated_reserve(
    const training_plan_value& p, const stage_state<step_timeline>& most, replay_scratch& scratch) {
  return detail::simulated_reserve_in(p, most, &scratch);
}

namespace detail {
/// The memory TP's overlap keeps outside PyTorch's allocator, per rank (layout::tp_overlap):
/// Transformer Engine's userbuffers, one [b x s / cp, hidden] buffer per overlapped GEMM
/// (ring-exchange all-gathers: qkv and fc1 forward, proj and fc2 dgrad; pipelined
/// reduce-scatters: proj and fc2 forward; bulk: qkv and fc1 dgrad and wgrad; external: proj and
/// fc2 wgrad), the eight all-gathers' in FP8 when training in FP8 (fp8_buf); or torchtitan's
/// AsyncTP, whose symmetric-memory workspace holds two output chunks of the reduce-scatter.
constexpr bytes tp_overlap_buffers(const training_plan_value& p) {
  const layout& l = p.setup.layout;
  const precision& mp = p.setup.precision;
  const bool fp8 = mp.fp8_weight_copies > 0;
  const element_format& between_layers = fp8 ? mp.weights : mp.compute;  // 16-bit under FP8
  const std::int64_t tokens = checked_mul(p.batch.micro_batch, p.batch.sequence) / l.context;
  const std::int64_t hidden = p.setup.model.hidden;
  switch (l.tp_overlap) {
    case tp_comm_overlap::none:
      break;
    case tp_comm_overlap::userbuffers: {
      const bytes wide = storage_bytes(between_layers, tokens, hidden);
      return 4 * wide + 8 * (fp8 ? storage_bytes(fp8_e4m3::value, tokens, hidden) : wide);
    }
    case tp_comm_overlap::async_tp:
      return 2 * storage_bytes(between_layers, tokens / l.tensor, hidden);
  }
  return {};
}
}  // namespace detail

/// The ledger on `device` of `rank`, a rank of pipeline stage `stage`, with the runtime overheads,
/// the allocator's reserve from `allocator` when simulated.
constexpr timed_ledger with_overheads(const training_plan_value& p, const gpu& device,
                                      timed_ledger rank, std::int64_t stage,
                                      const std::optional<reserved_memory_estimate>& allocator) {
  std::optional<allocator_peaks> simulated;
  if (allocator) simulated = allocator_peaks{allocator->reserved, allocator->allocated};
  const layout& l = p.setup.layout;
  const bool interleaved = p.batch.schedule == pipeline_schedule::interleaved;
  append(rank, overheads(p.overheads, device, peak(rank), l, simulated,
                         pipeline_neighbours(l, stage, interleaved)));
  const bool userbuffers = l.tp_overlap == tp_comm_overlap::userbuffers;
  memory_ledger extra{};
  if (p.batch.code == model_code::megatron_te || userbuffers) {
    // Transformer Engine's GEMMs share one workspace from PyTorch's allocator, made at the first
    // and kept (functools.lru_cache), beside PyTorch's own cuBLAS workspace; initialize_ub
    // replaces it by one for each of its 3 streams (module/base.py, _NUM_MAX_UB_STREAMS).
    const bytes one = device.hopper_or_later() ? 32 * MiB + bytes{1024} : 4 * MiB;
    add_entry(extra, "Transformer Engine cuBLAS workspace", component::overhead,
              memory_space::device, userbuffers ? 3 * one : one, 1,
              userbuffers
                  ? "TransformerEngine module/base.py initialize_ub: the workspace "
                    "repeated for its 3 userbuffers streams (32 MiB + 1 KiB each from "
                    "Hopper on, 4 MiB before)"
                  : "TransformerEngine pytorch/cpp_extensions/gemm.py get_cublas_workspace, "
                    "get_cublas_workspace_size_bytes: 32 MiB + 1 KiB from Hopper on, 4 "
                    "MiB before");
  }
  if (l.tp_overlap != tp_comm_overlap::none)
    add_entry(extra, "TP overlap buffers", component::overhead, memory_space::device,
              detail::tp_overlap_buffers(p), 0,
              userbuffers ? "TransformerEngine initialize_ub: 12 userbuffers of [b x s / cp, "
                            "hidden] (Megatron-LM initialize.py _initialize_tp_communicators), the "
                            "8 all-gathers' in FP8 under FP8; registered outside PyTorch's "
                            "allocator (multicast)"
                          : "torch.distributed._symmetric_memory get_symm_mem_workspace: one per "
                            "TP group, as large as a fused matmul-reduce-scatter's 2 output chunks "
                            "of [b x s / (cp x tp), hidden]",
              lifetime::persistent, entry_role::outside_allocator);
  append(rank, extra);
  return rank;
}

/// One estimate of a training plan on `device`: the most loaded rank's stage and step timeline
/// (built once), the caching allocator replayed over it when the plan simulates it, and the
/// rank's ledger with the runtime overheads. A search passes the same `scratch` to each estimate:
/// the allocator's replays reuse its buffers.
struct training_estimate {
  std::int64_t stage = 0;
  step_timeline timeline{};
  std::optional<reserved_memory_estimate> allocator{};
  timed_ledger ledger{};
};

namespace detail {
constexpr training_estimate estimate_in(const training_plan_value& p, const gpu& device,
                                        replay_scratch* scratch) {
  stage_state<step_timeline> most = most_loaded_step(p);
  std::optional<reserved_memory_estimate> allocator = simulated_reserve_in(p, most, scratch);
  timed_ledger ledger = with_overheads(p, device, ledger_of(most.state), most.stage, allocator);
  return {most.stage, std::move(most.state), allocator, ledger};
}
}  // namespace detail

constexpr training_estimate estimate(const training_plan_value& p, const gpu& device) {
  return detail::estimate_in(p, device, nullptr);
}

constexpr training_estimate estimate(const training_plan_value& p, const gpu& device,
                                     replay_scratch& scratch) {
  return detail::estimate_in(p, device, &scratch);
}

/// The most loaded rank's ledger on `device`, runtime overheads included.
constexpr timed_ledger breakdown(const training_plan_value& p, const gpu& device) {
  return estimate(p, device).ledger;
}

constexpr timed_ledger breakdown(const training_plan_value& p, const gpu& device,
                                 replay_scratch& scratch) {
  return estimate(p, device, scratch).ledger;
}

/// A training plan as a type: `training_plan<models::llama_3_8b, mixed<bf16>, adamw<>,
/// full_finetune, parallel<fsdp<8>>, activation_options{.micro_batch = 2}>`.
template <Model M, Precision P, Optimizer O, Finetuning F = full_finetune, Layout L = single_gpu,
          activation_options Batch = activation_options{},
          runtime_overheads Overheads = runtime_overheads{}>
struct training_plan {
  static constexpr training_plan_value value{
      training{M::value, P::value, O::value, F::value, L::value}, Batch, Overheads};

  /// The most loaded rank's ledger without runtime overheads.
  static constexpr timed_ledger breakdown() { return most_loaded_rank(value).state; }
  /// The most loaded rank's ledger on `G`, runtime overheads included.
  template <Gpu G>
  static constexpr timed_ledger breakdown_on() {
    return vramfit::breakdown(value, G::value);
  }
  /// The peak of the most loaded rank's tensors, without runtime overheads (fit() and
  /// check_fits add them: fit_report::required).
  static constexpr bytes tensors_peak() { return vramfit::peak(breakdown()); }
};

template <class T>
concept TrainingPlan = detail::tag_of<T, training_plan_value>;

/// Everything that decides an inference GPU's memory.
struct inference_plan_value {
  vramfit::model model{};
  weight_layout weights = plain_weights<bf16>::value;
  kv_cache_config kv{};
  request_shape requests{};
  vramfit::layout layout{};
  runtime_overheads overheads{};
};

/// The most loaded GPU's ledger on `device` (the pipeline stage that needs the most), runtime
/// overheads included, seen at its peak by the entries' lifetimes.
constexpr timed_ledger breakdown(const inference_plan_value& p, const gpu& device) {
  return by_lifetimes(
      most_loaded_gpu(p.model, p.layout, p.weights, p.kv, p.requests, device, p.overheads).ledger);
}

/// An inference plan as a type: `inference_plan<models::llama_2_70b, gptq<>,
/// request_shape{.batch = 4, .prompt = 4096}>`.
template <Model M, WeightLayout W, request_shape Requests = request_shape{},
          kv_cache_config KV = kv_cache_config{}, Layout L = single_gpu,
          runtime_overheads Overheads = runtime_overheads{}>
struct inference_plan {
  static constexpr inference_plan_value value{M::value, W::value, KV,
                                              Requests, L::value, Overheads};
  template <Gpu G>
  static constexpr timed_ledger breakdown_on() {
    return vramfit::breakdown(value, G::value);
  }
};

template <class T>
concept InferencePlan = detail::tag_of<T, inference_plan_value>;

}  // namespace vramfit
