// SPDX-License-Identifier: MIT
// DeepSpeed ZeRO (stage_1_and_2.py, stage3.py): its gradient buffers, fp32 gradient copies,
// reduce bucket and gathered parameters (docs/sources.md#deepspeed-zero). frameworks.hpp asks it;
// deepspeed_estimate.hpp is DeepSpeed's own estimator, a different thing.
#pragma once

#include "model_state_parts.hpp"

namespace vramfit::detail {

/// DeepSpeed's gradients where they are not autograd's: ZeRO-3's flat partition buffer, or the
/// staging buffers of ZeRO-1/2 offloading the optimizer. False when neither applies
/// (docs/sources.md#deepspeed-zero: "gradients").
constexpr bool add_deepspeed_gradient_buffers(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  const precision& p = s.p();
  if (l.zero == sharding::zero3) {
    // One flat buffer for the run, in the gradient-accumulation dtype (the policy's gradient
    // format here), each bucket reduce-scattered into it.
    add_entry(ledger, "gradient partitions (flat buffer)", component::gradients,
              s.shard_grads ? s.optimizer_space : memory_space::device,
              divide_up(s.acc.gradients, s.n), 1,
              "DeepSpeed stage3.py _setup_for_real_optimizer: grad_partitions_flat_buffer");
    return true;
  }
  if (!s.shard_optimizer || l.optimizer_offload == offload_target::none) return false;
  // Offloading the optimizer, gradients go to the host through a staging buffer of the largest
  // parameter, and the step's 16-bit result comes back through a pinned copy of the partition.
  if (l.zero == sharding::zero1)
    add_entry(ledger, "gradients", component::gradients, memory_space::device, s.acc.gradients,
              s.acc.trained_tensors, "DeepSpeed ZeRO-1: autograd gradients until the boundary");
  add_entry(ledger, "gradient staging buffer (largest parameter)", component::buffers,
            memory_space::device, elements_in(p.gradients, s.acc.largest_tensor_elements), 1,
            "DeepSpeed stage_1_and_2.py temp_grad_buffer_for_gpu_offload");
  add_entry(ledger, "16-bit parameter partition (pinned copy)", component::weights,
            s.optimizer_space, divide_up(storage_bytes(p.weights, s.acc.trained_elements), s.n), 1,
            "DeepSpeed stage_1_and_2.py param_buffer_of_bit16_for_cpu_offload_groups");
  return true;
}

/// The fp32 gradients DeepSpeed's step makes of one group's (ZeRO-3: one sub-group's) partition,
/// flattened then cast, until that group's step ends; offloaded, a pinned host buffer for the run
/// (docs/sources.md#deepspeed-zero: "step").
constexpr void add_deepspeed_fp32_gradients(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  const precision& p = s.p();
  const std::int64_t trained = s.acc.trained_elements;
  const std::int64_t partition = s.shard_optimizer ? ceil_div(trained, s.n) : trained;
  const std::int64_t sub_group = l.zero3_sub_group_elements;
  const std::int64_t group =
      l.zero == sharding::zero3 && sub_group > 0 && sub_group < partition ? sub_group : partition;
  const bool cast = p.gradients.payload_bits < 32;
  const bool offloaded = l.optimizer_offload != offload_target::none;
  const bytes fp32_grads{checked_mul(offloaded ? partition : group, 4)};
  const bytes flat = elements_in(p.gradients, group);
  add_entry(
      ledger,
      offloaded ? "fp32 gradient partition" : "gradients flattened and cast to fp32 (one group)",
      component::gradients, s.optimizer_space,
      offloaded ? fp32_grads : (cast ? fp32_grads + flat : flat), 1,
      "DeepSpeed stage_1_and_2.py step / stage3.py _prepare_fp32_grad_for_sub_group",
      offloaded ? lifetime::persistent : lifetime::optimizer_step);
}

/// The reduce buffer of reduce_bucket_size elements in the gradients' format whatever the
/// model's size (a second one with overlap_comm; ZeRO-3 keeps one for the run), and the copy each
/// reduction makes of at most a bucket of gradients (docs/sources.md#deepspeed-zero: "buckets").
constexpr void add_deepspeed_reduce_bucket(memory_ledger& ledger, const stage_model_states& s) {
  const layout& l = s.l();
  if (!s.shard_optimizer) return;
  const std::int64_t trained = s.acc.trained_elements;
  const std::int64_t filled =
      trained < l.zero_reduce_bucket_elements ? trained : l.zero_reduce_bucket_elements;
  const bytes buffer = elements_in(s.p().gradients, l.zero_reduce_bucket_elements);
  const bytes copy = elements_in(s.p().gradients, filled);
  const bool kept = l.zero == sharding::zero3;
  add_entry(ledger, "ZeRO reduce bucket", component::buffers, memory_space::device,
            kept ? buffer : buffer * (l.zero_overlap_comm ? 2 : 1) + copy, 1,
            "DeepSpeed contiguous_gradients: reduce_bucket_size elements (default 5e8)",
            kept ? lifetime::persistent : lifetime::backward_pass);
  if (kept)
    add_entry(ledger, "ZeRO-3 reduce-scatter copy of the bucket", component::buffers,
              memory_space::device, copy, 0,
              "DeepSpeed coalesced_collectives.py reduce_scatter_coalesced: torch.cat",
              lifetime::backward_pass);
}

/// ZeRO-3's gathered parameters (the DeepSpeed estimator's 4 x largest layer), and DeepSpeed's
/// prefetch bucket when `prefetch_bucket`.
constexpr void add_zero3_gathered_parameters(memory_ledger& ledger, const stage_model_states& s,
                                             bool prefetch_bucket) {
  const precision& p = s.p();
  if (prefetch_bucket) {
    add_entry(ledger, "ZeRO-3 prefetch bucket", component::buffers, memory_space::device,
              storage_bytes(p.weights, 1) * s.l().zero3_prefetch_bucket_elements, 0,
              "DeepSpeed stage3_prefetch_bucket_size (default 5e7 elements)",
              lifetime::forward_backward);
  }
  add_entry(
      ledger, "gathered largest layer (weights + gradients)", component::buffers,
      memory_space::device,
      (storage_bytes(p.weights, 1) + storage_bytes(p.gradients, 1)) * s.acc.largest_tensor_elements,
      0, "DeepSpeed stage3.py estimator: 4 x largest layer parameters", lifetime::forward_backward);
}

/// ZeRO-1 reduces the accumulated `gradients` into this rank's partition at the boundary and drops
/// the others before its step (docs/sources.md#deepspeed-zero: "step"): the bytes dropped.
template <class Add>
constexpr bytes deepspeed_zero1_reduce(const layout& l, int gradient_entry, bytes gradients,
                                       Add&& add) {
  if (l.zero != sharding::zero1) return {};
  const bytes dropped = gradients - divide_up(gradients, l.shard_degree());
  add("gradients reduced into the ZeRO-1 partition", gradient_entry, -dropped);
  return dropped;
}

}  // namespace vramfit::detail
