// SPDX-License-Identifier: MIT
// The questions training.hpp and timeline.hpp ask of the framework a layout names
// (layout::implementation), each answered from that framework's header: fsdp.hpp,
// deepspeed_zero.hpp, megatron.hpp, ddp.hpp. Plain PyTorch and the ZeRO paper's accounting are the
// defaults.
#pragma once

#include "ddp.hpp"
#include "deepspeed_zero.hpp"
#include "fsdp.hpp"
#include "megatron.hpp"

namespace vramfit::detail {

/// Whether the optimizer keeps flat buffers (DeepSpeed's and Megatron's FusedAdam): no step
/// tensor per parameter, no torch.optim temporaries, no per-parameter gradient hooks.
constexpr bool flat_optimizer(const layout& l) {
  using enum shard_implementation;
  return l.implementation == deepspeed || l.implementation == megatron;
}

/// Whether the gradients are a flat buffer kept for the run (Megatron; DeepSpeed without ZeRO or
/// with ZeRO-3), not autograd's, made in backward and freed by zero_grad.
constexpr bool flat_gradient_buffer(const layout& l) {
  using enum shard_implementation;
  return l.implementation == megatron ||
         (l.implementation == deepspeed && (l.zero == sharding::none || l.zero == sharding::zero3));
}

/// Whether every model-state tensor is an allocation of its own, which the caching allocator
/// rounds up to 512 bytes: unsharded plain PyTorch (sharded states are counted as shards).
constexpr bool rounds_each_state_tensor(const layout& l) {
  using enum shard_implementation;
  return l.zero == sharding::none && (l.implementation == unnamed || l.implementation == paper);
}

/// Whether sharded weights are gathered in the compute format (FSDP's MixedPrecision
/// param_dtype), so that autocast finds nothing to cast.
constexpr bool gathers_in_compute_format(const layout& l) {
  using enum shard_implementation;
  return l.implementation == fsdp;
}

/// The units gathered one by one, where the layout gathers units (layout::gathers_units).
constexpr gathered_units gathered_units_of(const training& t, const tensor_ledger& tensors,
                                           const stage_range& range,
                                           std::int64_t experts_per_rank) {
  if (!t.layout.gathers_units()) return {};
  return fsdp_gathered_of(t, tensors, range, experts_per_rank);
}

/// The gradients: a framework's own buffers, or autograd's (their partition where sharded), then
/// the fp32 copies its optimizer steps on.
constexpr void add_framework_gradients(memory_ledger& ledger, const stage_model_states& s) {
  using enum shard_implementation;
  switch (s.l().implementation) {
    case deepspeed:
      if (!add_deepspeed_gradient_buffers(ledger, s))
        add_autograd_gradients(ledger, s, s.shard_grads, zero_paper_gradients);
      if (s.p().has_master()) add_deepspeed_fp32_gradients(ledger, s);
      return;
    case megatron:
      add_megatron_gradients(ledger, s);
      return;
    default:
      add_autograd_gradients(ledger, s, s.shard_grads, zero_paper_gradients);
  }
}

/// The buffers gradients are reduced through: DDP's bucket copies, DeepSpeed's reduce bucket.
constexpr void add_reduce_buffers(memory_ledger& ledger, const stage_model_states& s) {
  using enum shard_implementation;
  if (s.l().implementation != megatron) add_ddp_buckets(ledger, s);
  if (s.l().implementation == deepspeed) add_deepspeed_reduce_bucket(ledger, s);
}

/// The parameters sharded weights are gathered into: FSDP's units or whole model, DeepSpeed
/// ZeRO-3's coordinator's, or the estimator's largest layer.
constexpr void add_gathered_parameters(memory_ledger& ledger, const stage_model_states& s) {
  using enum shard_implementation;
  if (!s.shard_weights) return;
  if (s.l().implementation == fsdp) return add_fsdp_gathered_parameters(ledger, s);
  if (s.l().implementation == deepspeed) return add_deepspeed_zero3_gathering(ledger, s);
  add_zero3_gathered_parameters(ledger, s);
}

/// Whether backward's sharded gradients come from the reduce-scatter stream's pool.
constexpr bool gradients_on_side_stream(const layout& l, bool sharded_grads) {
  using enum shard_implementation;
  return l.implementation == fsdp && fsdp_gradients_on_side_stream(l, sharded_grads);
}

/// Of the gathered parameters' `buffer` bytes, what the all-gather stream allocates.
constexpr bytes gathered_on_side_stream(const layout& l, const gathered_units& g, bytes buffer) {
  using enum shard_implementation;
  if (l.implementation == deepspeed) return deepspeed_gathered_on_side_stream(l, buffer);
  return l.implementation == fsdp ? fsdp_gathered_on_side_stream(l, g, buffer) : bytes{};
}

/// What record_stream frees keep reserved on a stage of `layers` layer units (FSDP1's).
constexpr deferred_frees deferred_frees_of(const layout& l, const gathered_units& g,
                                           std::int64_t layers) {
  return fsdp1_deferred_frees(l, g, layers);
}

/// The head's backward where units are gathered: its gradients wait for the root's reduction.
template <class Add>
constexpr void defer_head_gradients(const gathered_units& g, const root_gradient_entries& at,
                                    Add&& add) {
  fsdp_head_gradients(g, at, add);
}

/// The root unit's post-backward, where units are gathered: its gradients reduced.
template <class Add>
constexpr void root_post_backward(const gathered_units& g, const root_gradient_entries& at,
                                  bytes sharded, bool first_pass, Add&& add) {
  fsdp_root_post_backward(g, at, sharded, first_pass, add);
}

/// The root unit's post-backward of a micro-batch before the last, where the reduction waits.
template <class Add>
constexpr void root_accumulate(const gathered_units& g, const root_gradient_entries& at,
                               Add&& add) {
  fsdp_root_accumulate(g, at, add);
}

/// What is reduced away from the `gradients` before the optimizer step (DeepSpeed ZeRO-1).
template <class Add>
constexpr bytes reduced_before_step(const layout& l, int gradient_entry, bytes gradients,
                                    Add&& add) {
  using enum shard_implementation;
  if (l.implementation != deepspeed) return {};
  return deepspeed_zero1_reduce(l, gradient_entry, gradients, add);
}

}  // namespace vramfit::detail
