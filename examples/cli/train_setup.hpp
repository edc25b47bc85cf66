// SPDX-License-Identifier: MIT
// From `vramfit train`'s options to the library's training plan: every option checked, every name
// looked up in choices.hpp.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

#include "choices.hpp"
#include "train_options.hpp"

namespace vramfit::cli {

/// "kinds[:first-last layers[:first-last experts]]", e.g. "expert:0-5:0-1" or "router".
inline tensor_selector parse_selector(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
  if (parts.empty() || parts.size() > 3)
    detail::raise("--trainable '" + text + "': use kinds[:layers[:experts]]");
  tensor_selector s{};
  std::stringstream listed(parts[0]);
  for (std::string kind; std::getline(listed, kind, ',');) {
    try {
      s.kinds |= 1u << static_cast<int>(cli::choose(cli::kinds, kind, "tensor kind"));
    } catch (const vramfit::error& e) {
      detail::raise("--trainable '" + text + "': " + message_of(e));
    }
  }
  auto range = [&text](const std::string& r, std::int64_t& first, std::int64_t& count) {
    if (r == "*") return;
    const auto dash = r.find('-');
    try {
      const std::int64_t a = std::stoll(r.substr(0, dash));
      const std::int64_t b = dash == std::string::npos ? a : std::stoll(r.substr(dash + 1));
      if (a < 0 || b < a || b >= bounds::layers) throw std::invalid_argument(r);
      first = a;
      count = b - a + 1;
    } catch (const std::logic_error&) {
      detail::raise("--trainable '" + text + "': '" + r + "' is not a range such as 0-5 (below " +
                    std::to_string(bounds::layers) + ")");
    }
  };
  if (parts.size() > 1) range(parts[1], s.first_layer, s.layer_count);
  if (parts.size() > 2) range(parts[2], s.first_expert, s.expert_count);
  return s;
}

/// --reshard-after-forward as layout::reshard_after_forward: true 0, false 1, or a rank count.
inline std::int64_t reshard_ranks(const std::string& text) {
  if (text.empty() || cli::same_name(text, "true")) return 0;
  if (cli::same_name(text, "false")) return 1;
  std::int64_t ranks = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ranks);
  if (ec != std::errc{} || end != text.data() + text.size() || ranks < 2)
    detail::raise(
        "--reshard-after-forward must be true, false or a rank count of 2 or more, got '" +
        cli::shown_value(text) + "'");
  return ranks;
}

/// The sharding --zero (with --zero-impl) or --fsdp (with --fsdp-group) name, checked: a ZeRO
/// stage and its implementation, or an FSDP strategy as the stage it shards like (SHARD_GRAD_OP
/// 2, FULL_SHARD and HYBRID_SHARD 3, NO_SHARD 0).
struct sharding_given {
  std::optional<sharding> stage;  ///< unset: neither option given
  shard_implementation implementation = shard_implementation::deepspeed;
  std::int64_t shard_group = 0;  ///< HYBRID_SHARD's ranks per shard group
};

inline sharding_given sharding_of(const train_options& o) {
  sharding_given g;
  if (o.zero) {
    if (*o.zero < 0 || *o.zero > 3)
      detail::raise("--zero must be 0, 1, 2 or 3, got " + std::to_string(*o.zero));
    g.stage = static_cast<sharding>(*o.zero);
    g.implementation = o.zero_impl;
  }
  if (o.fsdp) {
    if (o.zero) detail::raise("--zero and --fsdp are two ways to shard: choose one");
    const fsdp_strategy s = *o.fsdp;
    g.implementation = shard_implementation::fsdp;
    g.stage = zero_stage_of(s);
    if (s == fsdp_strategy::hybrid_shard) {
      if (o.fsdp_group <= 0)
        detail::raise("--fsdp hybrid needs --fsdp-group (ranks per shard group)");
      g.shard_group = o.fsdp_group;
    }
  }
  if (o.fsdp_group != 0 && g.shard_group == 0)
    detail::raise("--fsdp-group applies to --fsdp hybrid only");
  return g;
}

/// `o` with what depends on the model filled in: the sequence length.
inline train_options for_model(train_options o, const model& m) {
  if (o.seq_len == 0) o.seq_len = default_sequence(m);
  return o;
}
/// ... and the checkpoint's quantization, from its config.json.
inline train_options for_model(const train_options& o, const named_model& m) {
  train_options filled = for_model(o, m.value);
  if (m.config) filled.checkpoint = hf_weight_layout(*m.config);
  return filled;
}

/// A count such as "2e8" or "494032768" given to `option`: whole and positive, at most 10^15.
inline std::int64_t whole_count(const std::string& text, const char* option, const char* what,
                                const char* example, int least = 1) {
  std::size_t used = 0;
  long double n = 0;
  try {
    n = std::stold(text, &used);
  } catch (const std::logic_error&) {
  }
  if (used != text.size() || !(n >= least && n <= 1e15L) || n != std::floor(n))
    detail::raise(std::string(option) + " takes a whole number of " + what + " from " +
                  std::to_string(least) + " to 1e15, such as " + example + "; got " +
                  cli::shown_value(text));
  return static_cast<std::int64_t>(n);
}

/// Whether the caching allocator is simulated: by default, unless a fixed share is given.
inline bool simulates(const train_options& o) {
  return o.reserve ? *o.reserve == reserve_model::simulated : o.fragmentation_percent < 0;
}

/// What training a quantized checkpoint (its config.json's quantization_config) can be:
/// transformers trains adapters over GPTQ, AWQ and bitsandbytes weights, not the weights
/// (their HfQuantizers are trainable with peft only), does not train FP8 ones
/// (FineGrainedFP8HfQuantizer), and dequantizes MXFP4 experts to train them (gpt-oss's
/// Mxfp4Config(dequantize=True) recipe), which is what vramfit then counts.
inline void trains_checkpoint(const train_options& o, const model& m) {
  const weight_layout& w = *o.checkpoint;
  if (w.experts_only) return;
  const std::string what = std::string(m.name) + " is a quantized checkpoint (" + w.name + ")";
  if (std::string_view(w.name).starts_with("fp8"))
    detail::raise(what + ": transformers does not train FP8 weights; dequantize it to bf16");
  if (o.qlora)
    detail::raise(what + ": --qlora quantizes a 16-bit one as it loads; use --lora-rank");
  if (o.lora_rank <= 0)
    detail::raise(what + ": its weights are not trained; train adapters over it with --lora-rank");
}

/// The optimizer --optimizer names, with --optimizer-impl, --amsgrad, --centered, --momentum,
/// --optimizer-in-backward and --keep-grads.
inline optimizer optimizer_of(const train_options& o) {
  optimizer opt = o.optimizer;
  if (o.momentum && !(*o.momentum >= 0 && *o.momentum < 1e9))  // NaN and infinity fail too
    detail::raise("--momentum must be a non-negative factor such as 0.9");
  // The library's rules name no option (optimizer.hpp): checked here first, named as given.
  if (o.optimizer_impl && !vramfit::offers(opt.kind, *o.optimizer_impl))
    detail::raise("--optimizer-impl " + std::string(name_of(optimizer_impls, *o.optimizer_impl)) +
                  ": " + opt.name + " comes one way only, or has no such implementation");
  for (const auto& [given, option] :
       {std::pair{o.amsgrad, "amsgrad"}, std::pair{o.momentum.has_value(), "momentum"},
        std::pair{o.centered, "centered"}})
    if (given && !detail::has_option(opt.kind, option))
      detail::raise(std::string("--") + option + ": " + opt.name + " has no " + option +
                    " (amsgrad: adam, adamw; momentum: sgd, rmsprop; centered: rmsprop)");
  if (o.optimizer_impl) opt = with_implementation(opt, *o.optimizer_impl);
  if (o.amsgrad || o.centered || o.momentum) {
    const optimizer_options& had = opt.options;
    opt =
        with_state_options(opt, o.amsgrad || had.amsgrad,
                           o.momentum ? *o.momentum > 0 : had.momentum, o.centered || had.centered);
  }
  opt.options.in_backward = o.optimizer_in_backward;
  opt.options.set_to_none = !o.keep_grads;
  return opt;
}

/// --lora-targets as the library keeps them: refused past its buffer (it would drop the tail)
/// and with an empty module name.
inline const std::string& checked_lora_targets(const std::string& targets) {
  constexpr std::size_t capacity = sizeof(lora_config::targets) - 1;
  if (targets.size() > capacity)
    detail::raise("--lora-targets is " + std::to_string(targets.size()) +
                  " characters long; at most " + std::to_string(capacity) +
                  " are kept (use all-linear for every linear layer)");
  if (targets.empty() || targets.front() == ',' || targets.back() == ',' ||
      targets.find(",,") != std::string::npos)
    detail::raise("--lora-targets '" + targets + "' has an empty module name");
  return targets;
}

/// What is trained: LoRA or QLoRA adapters, a partial selection, or everything.
inline finetuning finetuning_of(const train_options& o, const model& m, const precision& p) {
  if (o.lora_rank < 0)
    detail::raise("--lora-rank must be positive (0: no LoRA), got " + std::to_string(o.lora_rank));
  if (o.checkpoint) trains_checkpoint(o, m);
  if (o.expert_linears && !((o.qlora || o.lora_rank > 0) && m.is_moe()))
    detail::raise(
        "--expert-linears applies with --lora-rank or --qlora to a mixture-of-experts "
        "model");
  if (o.qlora || o.lora_rank > 0) {
    const std::int64_t rank = o.lora_rank > 0 ? o.lora_rank : 16;
    const bool packed_moe = m.is_moe() && !o.expert_linears;  // transformers 5's take no adapter
    // Unless given: QLoRA's all linear layers (Dettmers et al.), else peft's per-model default.
    const char* unless_given = o.qlora ? "all-linear" : peft_default_lora_targets(m.hf_model_type);
    if (!o.lora_targets && unless_given == nullptr)
      detail::raise("--lora-rank needs --lora-targets for model '" + std::string(m.name) +
                    "': peft has no default target_modules for model_type '" +
                    (m.hf_model_type[0] != '\0' ? m.hf_model_type : "(none)") + "'; " +
                    detail::rules::lora_target_choices(tensors(m), packed_moe));
    const std::string targets = o.lora_targets ? *o.lora_targets : std::string(unless_given);
    // peft's get_peft_model(autocast_adapter_dtype=True) casts 16-bit adapters to fp32
    // (tuners_utils.py BaseTuner._cast_adapter_dtype); measured on an H100 with peft 0.21.
    const element_format adapters = o.lora_dtype                   ? *o.lora_dtype
                                    : p.weights.payload_bits <= 16 ? fp32::value
                                                                   : element_format{};
    // The frozen base: QLoRA quantizes a 16-bit checkpoint to NF4 as it loads; a quantized
    // checkpoint stays as stored (gpt-oss's MXFP4 experts are dequantized: trains_checkpoint).
    weight_layout base{};
    if (o.qlora) base = bnb_4bit<>::value;
    base.exceptions.keeps_moe_parameters = o.qlora && m.is_moe() && !o.expert_linears;
    if (o.checkpoint && !o.checkpoint->experts_only) base = *o.checkpoint;
    finetuning f = lora_finetuning(rank, checked_lora_targets(targets).c_str(), adapters,
                                   base.linear, base.other, base.exceptions);
    f.lora.packed_moe = packed_moe;
    return f;
  }
  if (o.lora_targets || o.lora_dtype)
    detail::raise(std::string(o.lora_targets ? "--lora-targets" : "--lora-dtype") +
                  " applies with --lora-rank or --qlora only");
  if (o.trainable.empty()) return full_finetune::value;
  if (o.trainable.size() > 4) detail::raise("at most 4 --trainable selections");
  finetuning f{"partial", finetune_kind::partial};
  for (const std::string& s : o.trainable) f.trainable.push_back(parse_selector(s));
  return f;
}

/// The parallel layout the degrees, --pp-stages, the sharding and --offload give, checked.
inline layout layout_of(const train_options& o, const model& m) {
  layout l{.data = o.dp,
           .tensor = o.tp,
           .sequence = o.sp,
           .pipeline = o.pp,
           .context = o.cp,
           .expert = o.ep,
           .tp_overlap = o.tp_overlap};
  if (o.pp_stages.size() > max_listed_stages)
    detail::raise("--pp-stages lists at most " + std::to_string(max_listed_stages) +
                  " stages, got " + std::to_string(o.pp_stages.size()) +
                  "; leave it out for even stages");
  std::int64_t listed = 0;
  for (std::int64_t layers : o.pp_stages) {
    if (layers < 1 || layers > m.layers - listed)
      detail::raise("--pp-stages: stage " + std::to_string(l.stage_layers.size()) + " has " +
                    std::to_string(layers) + " layers; each has 1 or more, and all " +
                    std::to_string(m.layers) + " (" + m.name + "'s)");
    listed += layers;
    l.stage_layers.push_back(layers);
  }
  if (!o.pp_stages.empty() && listed != m.layers)
    detail::raise("--pp-stages: the stages' layers sum to " + std::to_string(listed) +
                  ", the model has " + std::to_string(m.layers));
  const sharding_given sharded = sharding_of(o);
  if (sharded.stage) {
    l.zero = *sharded.stage;
    l.implementation = sharded.implementation;
    l.shard_group = sharded.shard_group;
  }
  // "auto": what the Hugging Face Trainer writes for it, from the model's hidden size
  // (transformers integrations/deepspeed.py trainer_config_finalize: H*H and int(0.9*H*H)).
  const std::int64_t squared = detail::checked_mul(m.hidden, m.hidden);
  if (o.reduce_bucket)
    l.zero_reduce_bucket_elements =
        *o.reduce_bucket == "auto"
            ? squared
            : whole_count(*o.reduce_bucket, "--reduce-bucket", "gradient elements", "2e8");
  if (o.prefetch_bucket)
    l.zero3_prefetch_bucket_elements =
        *o.prefetch_bucket == "auto"
            ? squared / 10 * 9 + squared % 10 * 9 / 10
            : whole_count(*o.prefetch_bucket, "--prefetch-bucket", "parameter elements", "1e8", 0);
  if (o.sub_group)
    l.zero3_sub_group_elements = whole_count(*o.sub_group, "--sub-group", "elements", "1e8");
  // 0 is DeepSpeed's too (zero/config.py ge=0): no prefetch, no reuse, nothing persistent.
  if (o.max_live)
    l.zero3_max_live_elements =
        whole_count(*o.max_live, "--max-live-parameters", "parameter elements", "1e8", 0);
  if (o.reuse_distance)
    l.zero3_reuse_distance_elements =
        whole_count(*o.reuse_distance, "--max-reuse-distance", "parameter elements", "1e8", 0);
  // "auto": the Trainer's 10 x hidden size (integrations/deepspeed.py trainer_config_finalize).
  if (o.persistence)
    l.zero3_persistence_threshold = *o.persistence == "auto"
                                        ? detail::checked_mul(10, m.hidden)
                                        : whole_count(*o.persistence, "--persistence-threshold",
                                                      "parameter elements", "1e6", 0);
  l.zero_overlap_comm = o.overlap_comm;
  l.fsdp_version = o.fsdp_version;
  l.reshard_after_forward = reshard_ranks(o.reshard_after_forward);
  l.fsdp_backward_prefetch = o.backward_prefetch;
  l.fsdp_forward_prefetch = o.forward_prefetch;
  l.fsdp_limit_all_gathers = o.limit_all_gathers;
  if (o.offload != offload_mode::none) l.optimizer_offload = o.offload_to;
  if (o.offload == offload_mode::all) l.parameter_offload = o.offload_to;
  validated(l, m);
  return l;
}

/// The model code: the user's, or --framework's where it is modelled for `m`
/// (detail::modelled_models), else Hugging Face's (describe() says so).
inline model_code model_code_for(const train_options& o, const model& m) {
  const bool lora = o.lora_rank > 0 || o.qlora;
  const char* off =
      detail::unlike_modelled(o.model_code, m, lora ? finetune_kind::lora : finetune_kind::full);
  if (!off || o.model_code == model_code::hf) return o.model_code;
  if (o.model_code_given)
    detail::raise("--model-code " + std::string(name_of(model_codes, o.model_code)) +
                  " is modelled for " + detail::modelled_models(o.model_code) + ": " + m.name +
                  " " + off);
  return model_code::hf;
}

/// The batch shape, attention, dropout, recompute, loss and schedule, checked against `l`.
inline activation_options activation_options_of(const train_options& o, const model& m,
                                                const layout& l) {
  const bool dropout = o.dropout ? *o.dropout > 0 : m.dropout;
  if (o.dropout && !(*o.dropout >= 0 && *o.dropout < 1))  // NaN fails both comparisons
    detail::raise("--dropout must be a probability in [0, 1), got " + std::to_string(*o.dropout));
  if (o.recompute_layers < -1)
    detail::raise("--recompute-layers must be a layer count or -1 (all), got " +
                  std::to_string(o.recompute_layers));
  if (o.recompute_layers != -1 && o.recompute != recompute_kind::full)
    detail::raise("--recompute-layers applies to --recompute full only");
  if (o.experts && !m.is_moe())
    detail::raise(std::string("--experts-implementation applies to a mixture-of-experts model; ") +
                  m.name + " has no experts");
  if (o.non_reentrant && o.recompute != recompute_kind::full && o.framework.empty())
    detail::raise(
        "--non-reentrant applies to --recompute full only (op-sac is always "
        "non-reentrant)");
  activation_options a{.micro_batch = o.micro_batch,
                       .sequence = o.seq_len,
                       .micro_batches = o.grad_accum,
                       .attention = o.attention,
                       .attention_dropout = dropout,
                       .hidden_dropout = dropout,
                       .recompute = o.recompute,
                       .recompute_layers = o.recompute_layers,
                       .recompute_every = o.recompute_every,
                       .reentrant_checkpoint = !o.non_reentrant,
                       .offload = o.activation_offload,
                       .loss = o.loss,
                       .schedule = o.schedule,
                       .virtual_stages = o.virtual_stages,
                       .runtime = o.pp_runtime,
                       .code = model_code_for(o, m)};
  if (o.experts) a.experts = *o.experts;
  detail::check(a, l);
  return a;
}

/// --alloc-conf read once, refusing a key given twice (PyTorch would keep the later one) and a
/// contradiction of --expandable-segments.
inline alloc_conf checked_alloc_conf(const train_options& o) {
  alloc_conf conf{};
  try {
    conf = parse_alloc_conf(o.alloc_conf);
  } catch (const vramfit::error& e) {
    detail::raise("--alloc-conf: " + message_of(e));
  }
  std::vector<std::string> keys;
  int depth = 0;
  std::string key;
  bool in_key = true;
  for (const char c : o.alloc_conf + ",") {  // items split at commas outside brackets
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    if (c == ',' && depth == 0) {
      if (std::find(keys.begin(), keys.end(), key) != keys.end())
        detail::raise("--alloc-conf sets '" + key + "' twice");
      keys.push_back(key);
      key.clear();
      in_key = true;
    } else if (c == ':') {
      in_key = false;
    } else if (in_key && c != ' ') {
      key += c;
    }
  }
  if (o.expandable_segments && !conf.expandable_segments &&
      std::find(keys.begin(), keys.end(), "expandable_segments") != keys.end())
    detail::raise(
        "--expandable-segments contradicts --alloc-conf expandable_segments:False: give one");
  return conf;
}

/// The reserve: the simulated caching allocator with --alloc-conf, or a fixed share.
inline runtime_overheads overheads_of(const train_options& o) {
  if (o.reserve == reserve_model::simulated && o.fragmentation_percent >= 0)
    detail::raise("--fragmentation-percent is the share of --reserve share, not of simulated");
  runtime_overheads overheads{
      .nccl = {.gpus_per_node = o.gpus_per_node, .channels = o.nccl_channels, .version = o.nccl},
      .fragmentation_percent = o.fragmentation_percent,
      .reserve = simulates(o) ? reserve_model::simulated : reserve_model::share,
      .allocator = checked_alloc_conf(o),
      .metric = o.metric};
  if (o.expandable_segments) overheads.allocator.expandable_segments = true;
  return overheads;
}

inline training_plan_value build_plan(const train_options& o, const model& m) {
  training t{m, o.precision, optimizer_of(o)};
  if (o.grad_dtype) t.precision = with_gradients(t.precision, *o.grad_dtype);
  t.finetune = finetuning_of(o, m, t.precision);
  t.layout = layout_of(o, m);
  if (const char* other = o.keep_grads ? detail::gradients_kept_conflict(t) : nullptr)
    detail::raise("--keep-grads" + detail::rules::gradients_kept_limit(other));
  return {t, activation_options_of(o, m, t.layout), overheads_of(o)};
}

}  // namespace vramfit::cli
