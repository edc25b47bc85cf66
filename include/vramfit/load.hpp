// SPDX-License-Identifier: MIT
// The peak while a model is put on the GPU, before its first step: how the framework creates the
// parameters (on the meta device and materialized tensor by tensor, built in fp32 on the GPU and
// cast, or built on the host) and whether bitsandbytes quantizes 16-bit checkpoint weights as
// they arrive (seed article 004).
#pragma once

#include "inference.hpp"

namespace vramfit {

/// How a model gets onto the GPU.
enum class load_kind : unsigned char {
  /// Created on the device in its final format: the meta device, then each tensor materialized
  /// (transformers from_pretrained, modeling_utils.py _load_state_dict_into_meta_model, which
  /// casts on the host; torchtitan's meta init and to_empty; Fabric init_module).
  direct,
  /// Built in fp32 on the device (`with torch.device("cuda"): from_config(...)`), then cast with
  /// `.to(dtype)`: nn.Module._apply replaces one tensor at a time.
  fp32_on_device_then_cast,
  fp32_on_host,  ///< built in fp32 on the host, cast and moved tensor by tensor
};

/// The most loading holds on the device (the loaded weights and what is beside them) and on the
/// host.
struct loading_peak {
  bytes device{};
  bytes host{};
  bytes weights{};                    ///< the loaded model on the device
  const char* transient = "nothing";  ///< what the device holds besides `weights` at its peak
};

namespace detail::rules {
[[noreturn]] inline void building_in_fp32_loads_unquantized_weights() {
  raise(
      "a model built in fp32 and cast has no quantized weights: load quantized weights "
      "directly (through the meta device)");
}
}  // namespace detail::rules

/// The peak of loading `m` in `w` on the most loaded GPU of layout `l` (its first or last
/// pipeline stage, which hold the embeddings and the head), from a checkpoint in `checkpoint`.
constexpr loading_peak load_peak(const model& m, const weight_layout& w, load_kind how,
                                 const layout& l = {},
                                 const element_format& checkpoint = bf16::value) {
  validated(l, m);  // before its pipeline degree picks the stages
  if (how != load_kind::direct && w.linear != w.other)
    detail::rules::building_in_fp32_loads_unquantized_weights();
  loading_peak most{};
  for (const std::int64_t stage : {std::int64_t{0}, l.pipeline - 1}) {
    loading_peak p{};
    p.weights = p.device = weight_bytes(m, l, w, stage);
    const bytes wide = weight_bytes(m, l, plain_weights<fp32>::value, stage);
    // The largest tensor a transient holds: one cast from fp32, or a bitsandbytes weight in the
    // checkpoint's format before it is quantized.
    const bool cast = how == load_kind::fp32_on_device_then_cast;
    bytes largest{};
    for_each_held_group(m, l, stage,
                        [&](const tensor_group& g, const detail::local_shape& s, std::int64_t n,
                            const detail::held_span& at) {
                          if (g.role != tensor_role::parameter) return;
                          if (!cast && linear_copies(w, g, at, n) == 0) return;
                          const bytes b = detail::stored(cast ? w.other : checkpoint, s);
                          if (b > largest) largest = b;
                        });
    if (cast) {
      // The most is at the first cast: the whole fp32 model beside that tensor's copy, bounded
      // here by the largest tensor (the first in decoders, whose token embedding leads).
      p.device = wide + (w.other != fp32::value ? largest : bytes{});
      p.transient = "the fp32 model being cast, less what is cast, and its largest tensor's copy";
    } else if (how == load_kind::fp32_on_host) {
      p.host = wide;
    } else if (w.quantized_at_load) {
      p.device += largest;
      p.transient = "a linear weight in the checkpoint's format while bitsandbytes quantizes it";
    }
    if (p.device > most.device || (p.device == most.device && p.host > most.host)) most = p;
  }
  return most;
}

}  // namespace vramfit
