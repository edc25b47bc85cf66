// libFuzzer target: the library API on random model structs, not config text. The input bytes
// decide every field of a vramfit::model (biased towards the boundaries of int64 and towards
// ordinary sizes), then the options of every formula: a precision, an optimizer, a fine-tuning
// mode, a parallel layout, a batch shape, a request shape, a serving budget and a planner's
// search space. Every input must end in values or a vramfit::error (overflow_error included):
// a crash, a sanitizer report, an exception of another type, a hang (-timeout) or a broken
// invariant is a defect. See docs/robustness.md.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vramfit/vramfit.hpp>

namespace {
using namespace vramfit;
using i64 = std::int64_t;

constexpr i64 int64_max = std::numeric_limits<i64>::max();
constexpr i64 int64_min = std::numeric_limits<i64>::min();

/// VRAMFIT_FUZZ_PRINT=1 prints what an input decodes to (to read a crash: run the target on the
/// crashing file with it set).
bool verbose = false;
__attribute__((format(printf, 1, 2))) void note(const char* format, ...) {
  if (!verbose) return;
  std::va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
}
long long ll(i64 v) {
  return static_cast<long long>(v);
}

/// A broken invariant: report it the way a sanitizer would, and stop.
[[noreturn]] void defect(const char* what, const char* detail = "") {
  std::fprintf(stderr, "==vramfit_fuzz_model== INVARIANT BROKEN: %s %s\n", what, detail);
  std::abort();
}
void expect(bool holds, const char* what) {
  if (!holds) defect(what);
}

/// A count: mostly ordinary sizes, often the boundaries that break unchecked arithmetic.
i64 count(FuzzedDataProvider& in) {
  static constexpr i64 boundaries[] = {0,
                                       1,
                                       -1,
                                       2,
                                       i64{1} << 31,
                                       (i64{1} << 31) - 1,
                                       i64{1} << 32,
                                       i64{1} << 53,
                                       (i64{1} << 53) + 1,
                                       i64{1} << 62,
                                       int64_max,
                                       int64_max - 1,
                                       int64_min,
                                       int64_min + 1,
                                       10'000'000'000'000,  // 1e13
                                       1'000'000,
                                       i64{1} << 24,
                                       576460752303423489};  // 2^59 + 1
  static constexpr i64 ordinary[] = {2,     3,     4,     7,     8,     12,     16,     32,
                                     64,    96,    128,   160,   256,   512,    576,    1024,
                                     1536,  2048,  3072,  4096,  5120,  8192,   11008,  14336,
                                     16384, 18432, 32000, 32768, 50257, 128256, 151936, 256000};
  // Short inputs run out of bytes (the provider then gives zeros): 1 keeps the rest of the
  // configuration valid, so that the formulas after the model run on short inputs too.
  if (in.remaining_bytes() == 0) return 1;
  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 0:
    case 1:
      return boundaries[in.ConsumeIntegralInRange<std::size_t>(0, std::size(boundaries) - 1)];
    case 2:
    case 3:
    case 4:
      return ordinary[in.ConsumeIntegralInRange<std::size_t>(0, std::size(ordinary) - 1)];
    case 5:
    case 6:
      return in.ConsumeIntegralInRange<i64>(1, 64);
    case 7: {  // a power of two, or one off it
      const i64 p = i64{1} << in.ConsumeIntegralInRange<int>(0, 62);
      const int off = in.ConsumeIntegralInRange<int>(-1, 1);
      return off < 0 ? p - 1 : off > 0 && p < int64_max ? p + 1 : p;
    }
    default:
      return in.ConsumeIntegral<i64>();
  }
}

/// A small positive count most of the time (degrees, ranks), a boundary sometimes.
i64 degree(FuzzedDataProvider& in) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) return count(in);
  return i64{1} << in.ConsumeIntegralInRange<int>(0, 4);
}

template <class Enum>
Enum pick_enum(FuzzedDataProvider& in, int last) {
  return static_cast<Enum>(in.ConsumeIntegralInRange<int>(0, last));
}

template <class T, std::size_t N>
const T& pick(FuzzedDataProvider& in, const T (&items)[N]) {
  return items[in.ConsumeIntegralInRange<std::size_t>(0, N - 1)];
}

/// a x b, or `fallback` when that does not fit (the generator itself has no undefined behaviour).
i64 product_or(i64 a, i64 b, i64 fallback) {
  i64 r{};
  return __builtin_mul_overflow(a, b, &r) ? fallback : r;
}

element_format storage_format(FuzzedDataProvider& in) {
  static const element_format formats[] = {fp32::value,
                                           bf16::value,
                                           fp16::value,
                                           fp8_e4m3::value,
                                           fp8_e5m2::value,
                                           int8::value,
                                           int4::value,
                                           fp64::value,
                                           nf4::value,
                                           nf4_double_quant::value,
                                           mxfp4::value,
                                           nvfp4::value,
                                           uint8::value,
                                           group_quantized<4, 128>::value,
                                           group_quantized<8, 128, fp16, 0>::value};
  if (in.ConsumeIntegralInRange<int>(0, 5) == 0) {  // any group-quantized format the API builds
    return detail::group_quantized_format(in.ConsumeIntegral<int>(), in.ConsumeIntegral<int>(),
                                          pick(in, formats), in.ConsumeIntegralInRange<int>(0, 64));
  }
  return pick(in, formats);
}

// --- The model. ---

/// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, up to U+10FFFF).
bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80           ? 1
                          : (c >> 5) == 0x6  ? 2
                          : (c >> 4) == 0xE  ? 3
                          : (c >> 3) == 0x1E ? 4
                                             : 0;
    if (n == 0 || i + n > s.size()) return false;
    std::uint32_t code = n == 1 ? c : c & (0x7F >> n);
    for (std::size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) return false;
      code = (code << 6) | (d & 0x3F);
    }
    const std::uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < least[n] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

model random_model(FuzzedDataProvider& in) {
  model m{};
  // Any bytes but control characters (a name is one line of a report): multi-byte UTF-8 too,
  // which a truncation to the name's 40 bytes must not cut mid-character.
  std::string name = in.ConsumeRandomLengthString(60);
  for (char& c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = '_';
  detail::copy_name(m.name, name.c_str());
  if (valid_utf8(name) && !valid_utf8(m.name))
    defect("a valid UTF-8 model name was cut mid-character:", m.name);
  m.family = pick_enum<family>(in, 7);
  m.hidden = count(in);
  m.layers = count(in);
  m.heads = count(in);
  m.kv_heads = in.ConsumeBool() ? m.heads : count(in);
  m.head_dim = count(in);
  m.ffn = count(in);
  m.vocab = count(in);
  m.mlp = pick_enum<mlp_kind>(in, 2);
  m.norm = pick_enum<norm_kind>(in, 1);
  m.norms_per_layer = in.ConsumeBool() ? in.ConsumeIntegralInRange<i64>(1, 4) : count(in);
  m.bias = pick_enum<bias_kind>(in, 3);
  m.tied_embeddings = in.ConsumeBool();
  m.positions = pick_enum<position_kind>(in, 1);
  m.max_positions = count(in);
  m.parallel_block = in.ConsumeBool();
  m.sliding_window = in.ConsumeBool() ? 0 : count(in);
  m.sliding_window_period = in.ConsumeBool() ? in.ConsumeIntegralInRange<i64>(1, 2) : count(in);
  if (in.ConsumeBool()) {
    m.moe.routed_experts = count(in);
    m.moe.top_k = in.ConsumeBool() ? in.ConsumeIntegralInRange<i64>(1, 8) : count(in);
    m.moe.shared_experts = in.ConsumeBool() ? in.ConsumeIntegralInRange<i64>(0, 2) : count(in);
    m.moe.expert_ffn = count(in);
    m.moe.first_dense_layers = in.ConsumeBool() ? in.ConsumeIntegralInRange<i64>(0, 3) : count(in);
    m.moe.router_score_bias = in.ConsumeBool();
    m.moe.layout = pick_enum<moe_layout>(in, 2);
  }
  if (in.ConsumeBool()) {
    m.mla.q_lora_rank = in.ConsumeBool() ? 0 : count(in);
    m.mla.kv_lora_rank = count(in);
    m.mla.qk_nope_head_dim = count(in);
    m.mla.qk_rope_head_dim = count(in);
    m.mla.v_head_dim = count(in);
  }
  m.encoder.token_types = count(in);
  m.encoder.pooler = in.ConsumeBool();
  m.encoder.image_size = count(in);
  m.encoder.patch_size = count(in);
  m.encoder.channels = in.ConsumeBool() ? 3 : count(in);
  m.encoder.classes = count(in);
  m.encoder.classifier_dense = in.ConsumeBool();
  m.qk_norm = in.ConsumeBool();
  m.attention_sinks = in.ConsumeBool();
  m.dropout = in.ConsumeBool();
  m.checkpoint_rotary_buffers = in.ConsumeBool();

  // Often make the shape rules hold, so that the formulas run on large valid models rather than
  // stopping at validated(); the values stay whatever the input chose.
  if (in.ConsumeBool()) {
    if (m.heads > 0 && m.kv_heads > 0 && m.heads % m.kv_heads != 0) m.kv_heads = m.heads;
    const bool fused = m.family != family::llama && m.family != family::phi3;
    if (fused || in.ConsumeBool()) m.hidden = product_or(m.heads, m.head_dim, m.hidden);
    if (fused) {
      m.mlp = mlp_kind::gelu;
      m.norm = norm_kind::layernorm;
      m.moe = {};
      m.mla = {};
    }
    if (m.family != family::falcon) m.parallel_block = false;
    if (fused || m.family == family::phi3) m.qk_norm = m.attention_sinks = false;
    if (m.moe.shared_experts > 0 || m.mla.kv_lora_rank > 0) m.moe.layout = moe_layout::standard;
    if (m.family == family::vit && m.encoder.patch_size > 0) {
      m.encoder.image_size = product_or(m.encoder.patch_size, in.ConsumeIntegralInRange<i64>(1, 64),
                                        m.encoder.image_size);
      const i64 side = m.encoder.image_size / m.encoder.patch_size;
      m.max_positions = product_or(side, side, -2) + 1;
    }
    if (m.moe.routed_experts > 0 && m.moe.first_dense_layers > m.layers)
      m.moe.first_dense_layers = 0;
  }
  return m;
}

// --- The options of the formulas. ---

precision random_precision(FuzzedDataProvider& in) {
  static const precision precisions[] = {
      fp32_training::value,     amp<bf16>::value,   amp<fp16>::value,   pure<bf16>::value,
      pure<fp16>::value,        mixed<bf16>::value, mixed<fp16>::value, mixed<bf16, bf16>::value,
      mixed<fp16, fp16>::value, fp8_compute::value};
  precision p = pick(in, precisions);
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) p.fp8_weight_copies = count(in);
  return p;
}

optimizer random_optimizer(FuzzedDataProvider& in) {
  static constexpr optimizer_options momentum{.momentum = true};
  static constexpr optimizer_options centered{.momentum = true, .centered = true};
  static constexpr optimizer_options amsgrad{.amsgrad = true};
  static const optimizer optimizers[] = {
      sgd<>::value,         sgd<momentum>::value, adam<>::value,
      adam<amsgrad>::value, adamw<>::value,       adamw<amsgrad>::value,
      adagrad<>::value,     rmsprop<>::value,     rmsprop<centered>::value,
      adadelta<>::value,    adamax<>::value,      nadam<>::value,
      radam<>::value,       rprop<>::value,       lion<>::value,
      adafactor<>::value,   adamw_8bit<>::value,  muon<>::value};
  optimizer o = pick(in, optimizers);
  o.options.impl = pick_enum<optimizer_impl>(in, 4);
  o.options.capturable = in.ConsumeBool();
  o.options.paged = in.ConsumeBool();
  // One draw, so that the corpus reads as before: a step in backward, or gradients kept by
  // zero_grad(set_to_none=False), or neither.
  const int gradients = in.ConsumeIntegralInRange<int>(0, 3);
  o.options.in_backward = gradients == 0;
  o.options.set_to_none = gradients != 1;
  if (in.ConsumeBool()) o.options.states = storage_format(in);
  return o;
}

tensor_selector random_selector(FuzzedDataProvider& in) {
  tensor_selector s{};
  s.kinds = in.ConsumeBool() ? in.ConsumeIntegral<std::uint32_t>()
                             : std::uint32_t{1} << in.ConsumeIntegralInRange<int>(0, 7);
  if (in.ConsumeBool()) s = s.layers(count(in), count(in));
  if (in.ConsumeBool()) s = s.experts(count(in), count(in));
  return s;
}

finetuning random_finetuning(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return full_finetune::value;
    case 1: {
      finetuning f{"partial", finetune_kind::partial};
      const int selectors = in.ConsumeIntegralInRange<int>(1, 4);
      for (int i = 0; i < selectors; ++i) f.trainable.push_back(random_selector(in));
      return f;
    }
    default: {
      static const char* const modules[] = {"q_proj",
                                            "k_proj",
                                            "v_proj",
                                            "o_proj",
                                            "gate_proj",
                                            "up_proj",
                                            "down_proj",
                                            "c_attn",
                                            "c_proj",
                                            "c_fc",
                                            "query_key_value",
                                            "dense",
                                            "dense_h_to_4h",
                                            "dense_4h_to_h",
                                            "query",
                                            "key",
                                            "value",
                                            "w1",
                                            "w2",
                                            "w3",
                                            "qkv_proj",
                                            "gate_up_proj",
                                            "kv_a_proj_with_mqa",
                                            "kv_b_proj",
                                            "q_a_proj",
                                            "q_b_proj",
                                            "gate",
                                            "lm_head",
                                            "all-linear",
                                            "foo",
                                            ""};
      std::string targets;
      if (in.ConsumeIntegralInRange<int>(0, 5) == 0) {
        targets = in.ConsumeRandomLengthString(200);
      } else {
        const int n = in.ConsumeIntegralInRange<int>(1, 4);
        for (int i = 0; i < n; ++i) targets += (i > 0 ? "," : "") + std::string(pick(in, modules));
      }
      const i64 rank = in.ConsumeBool() ? in.ConsumeIntegralInRange<i64>(1, 256) : count(in);
      const bool qlora = in.ConsumeBool();
      return lora_finetuning(rank, targets.c_str(),
                             in.ConsumeBool() ? element_format{} : storage_format(in),
                             qlora ? storage_format(in) : element_format{},
                             qlora ? storage_format(in) : element_format{});
    }
  }
}

layout random_layout(FuzzedDataProvider& in, const model& m) {
  layout l{};
  l.data = degree(in);
  l.tensor = degree(in);
  l.sequence = in.ConsumeBool();
  l.pipeline = degree(in);
  l.context = in.ConsumeBool() ? 1 : degree(in);
  l.expert = in.ConsumeBool() ? 1 : degree(in);
  l.zero = pick_enum<sharding>(in, 3);
  l.implementation = pick_enum<shard_implementation>(in, 4);
  l.shard_group = in.ConsumeBool() ? 0 : degree(in);
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {  // explicit stages
    const int stages = in.ConsumeBool()
                           ? static_cast<int>(l.pipeline > 0 && l.pipeline <= 200 ? l.pipeline : 1)
                           : in.ConsumeIntegralInRange<int>(0, 200);
    i64 left = m.layers;
    for (int s = 0; s < stages; ++s) {
      // Either an even share of what is left (so the sum often matches) or any count.
      const i64 share = left > 0 && stages - s > 0 ? left / (stages - s) : 1;
      const i64 n = in.ConsumeBool() ? (s + 1 == stages ? left : share) : count(in);
      l.stage_layers.push_back(n);
      left -= share;
    }
  }
  l.optimizer_offload = pick_enum<offload_target>(in, 2);
  l.parameter_offload = pick_enum<offload_target>(in, 2);
  l.ddp_bucket_view = in.ConsumeBool();
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) l.ddp_bucket_bytes = count(in);
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) l.zero_reduce_bucket_elements = count(in);
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) l.zero3_prefetch_bucket_elements = count(in);
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) l.zero3_max_live_elements = count(in);
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) l.zero3_reuse_distance_elements = count(in);
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) l.zero3_persistence_threshold = count(in);
  l.fsdp_backward_prefetch = pick_enum<fsdp_backward_prefetch>(in, 2);
  l.fsdp_forward_prefetch = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  l.fsdp_limit_all_gathers = in.ConsumeIntegralInRange<int>(0, 3) != 0;
  const int version = in.ConsumeIntegralInRange<int>(0, 9);  // mostly 1 or 2; 0 and 3 are errors
  l.fsdp_version = version < 8 ? 1 + version % 2 : version == 8 ? 0 : 3;
  if (in.ConsumeBool()) l.reshard_after_forward = in.ConsumeIntegralInRange<std::int64_t>(-1, 16);
  return l;
}

activation_options random_batch(FuzzedDataProvider& in) {
  activation_options o{};
  o.micro_batch = in.ConsumeBool() ? in.ConsumeIntegralInRange<i64>(1, 64) : count(in);
  o.sequence = in.ConsumeBool() ? in.ConsumeIntegralInRange<i64>(1, 10'000'000) : count(in);
  o.micro_batches = in.ConsumeBool() ? in.ConsumeIntegralInRange<i64>(1, 64) : count(in);
  o.attention = pick_enum<attention_kind>(in, 1);
  o.attention_dropout = in.ConsumeBool();
  o.hidden_dropout = in.ConsumeBool();
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) o.dropout_mask_bits = count(in);
  o.recompute = pick_enum<recompute_kind>(in, 3);
  if (in.ConsumeBool()) o.recompute_layers = count(in);
  o.offload = in.ConsumeBool();
  o.loss = pick_enum<loss_kind>(in, 2);
  if (in.ConsumeBool()) o.loss_chunk_tokens = count(in);
  o.norm_statistics = in.ConsumeBool();
  if (in.ConsumeBool()) o.capacity_factor_percent = count(in);
  o.schedule = pick_enum<pipeline_schedule>(in, 2);
  if (in.ConsumeBool()) o.virtual_stages = degree(in);
  return o;
}

runtime_overheads random_overheads(FuzzedDataProvider& in) {
  runtime_overheads o{};
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    o.cuda_context = count(in);
    o.cublas_workspace = count(in);
    o.nccl_buffers = count(in);
    o.fragmentation_percent = count(in);
  }
  o.allocator.expandable_segments = in.ConsumeBool();
  return o;
}

request_shape random_requests(FuzzedDataProvider& in) {
  request_shape r{};
  r.batch = in.ConsumeBool() ? in.ConsumeIntegralInRange<i64>(1, 256) : count(in);
  r.beams = in.ConsumeBool() ? 1 : count(in);
  r.prompt = in.ConsumeBool() ? in.ConsumeIntegralInRange<i64>(0, 10'000'000) : count(in);
  r.generated = in.ConsumeBool() ? 0 : count(in);
  r.prefill_chunk = in.ConsumeBool() ? 0 : count(in);
  r.cuda_graphs = in.ConsumeBool() ? 0 : count(in);
  return r;
}

weight_layout random_weights(FuzzedDataProvider& in) {
  static const weight_layout layouts[] = {plain_weights<bf16>::value,
                                          plain_weights<fp32>::value,
                                          bnb_int8::value,
                                          bnb_4bit<>::value,
                                          gptq<>::value,
                                          gptq<4, 128, true>::value,
                                          awq<>::value,
                                          fp8_weights<>::value,
                                          fp8_weights<true>::value,
                                          mxfp4_experts::value,
                                          nvfp4_weights::value};
  return pick(in, layouts);
}

const gpu& random_gpu(FuzzedDataProvider& in) {
  return pick(in, gpu_presets).value;
}

// --- Invariants cheap enough to check on every input. ---

void check_ledger(const timed_ledger& timed) {
  const memory_ledger& l = timed.entries;
  const bytes top = peak(timed);
  bytes persistent{};
  expect(timed.at_peak.size() == l.size(), "an entry without its bytes at the peak");
  for (std::size_t i = 0; i < l.size(); ++i) {
    const memory_entry& e = l[i];
    expect(e.size >= bytes{}, "a ledger entry is negative");
    expect(e.tensors >= 0, "a ledger entry's tensor count is negative");
    expect(timed.at_peak[i] >= bytes{} && timed.at_peak[i] <= e.size,
           "an entry holds more at the peak than at its fullest, or less than nothing");
    if (e.space != memory_space::device) continue;
    expect(top >= e.size, "the peak is smaller than one of its device entries");
    if (e.lifetime == lifetime::persistent) persistent += e.size;
  }
  expect(top >= persistent, "the peak is smaller than the persistent entries");
  expect(top <= total(l), "the peak exceeds the sum of the device entries");
}

void check_fit(const fit_report& r) {
  for (const bytes b : {r.required, r.available, r.weights, r.gradients, r.optimizer_states,
                        r.master_weights, r.activations, r.kv_cache, r.buffers, r.overhead})
    expect(b >= bytes{}, "a fit report figure is negative");
}

// --- The formulas. Each group runs on its own: an error in one does not skip the others. ---

template <class Body>
void attempt(Body&& body) {
  try {
    body();
  } catch (const error& e) {
    note("-> %s\n", e.what());
    // The right answer to an impossible configuration: one line naming the rule, never an
    // internal limit of the library.
    const std::string message = e.what();
    if (message.find('\n') != std::string::npos) defect("an error message spans lines:", e.what());
    if (message.rfind("vramfit: internal", 0) == 0)
      defect("an internal limit reached the user:", e.what());
  }
}

void print(const model& m) {
  note(
      "model '%s': family %d hidden %lld layers %lld heads %lld kv_heads %lld head_dim %lld ffn "
      "%lld "
      "vocab %lld mlp %d norm %d norms_per_layer %lld bias %d tied %d positions %d max_positions "
      "%lld parallel_block %d sliding_window %lld period %lld dropout %d rotary_buffers %d\n",
      m.name, int(m.family), ll(m.hidden), ll(m.layers), ll(m.heads), ll(m.kv_heads),
      ll(m.head_dim), ll(m.ffn), ll(m.vocab), int(m.mlp), int(m.norm), ll(m.norms_per_layer),
      int(m.bias), int(m.tied_embeddings), int(m.positions), ll(m.max_positions),
      int(m.parallel_block), ll(m.sliding_window), ll(m.sliding_window_period), int(m.dropout),
      int(m.checkpoint_rotary_buffers));
  note(
      "  moe: routed %lld top_k %lld shared %lld expert_ffn %lld first_dense %lld score_bias %d "
      "layout %d\n",
      ll(m.moe.routed_experts), ll(m.moe.top_k), ll(m.moe.shared_experts), ll(m.moe.expert_ffn),
      ll(m.moe.first_dense_layers), int(m.moe.router_score_bias), int(m.moe.layout));
  note("  attention: qk_norm %d sinks %d classifier_dense %d\n", int(m.qk_norm),
       int(m.attention_sinks), int(m.encoder.classifier_dense));
  note("  mla: q_lora %lld kv_lora %lld qk_nope %lld qk_rope %lld v_head %lld\n",
       ll(m.mla.q_lora_rank), ll(m.mla.kv_lora_rank), ll(m.mla.qk_nope_head_dim),
       ll(m.mla.qk_rope_head_dim), ll(m.mla.v_head_dim));
  note("  encoder: token_types %lld pooler %d image %lld patch %lld channels %lld classes %lld\n",
       ll(m.encoder.token_types), int(m.encoder.pooler), ll(m.encoder.image_size),
       ll(m.encoder.patch_size), ll(m.encoder.channels), ll(m.encoder.classes));
}

void print(const training& t, const activation_options& o, const runtime_overheads& x) {
  const layout& l = t.layout;
  note(
      "training: precision %s (fp8 copies %lld), optimizer %s (impl %d capturable %d paged %d "
      "in_backward %d set_to_none %d states %s)\n",
      t.precision.name, ll(t.precision.fp8_weight_copies), t.optimizer.name,
      int(t.optimizer.options.impl), int(t.optimizer.options.capturable),
      int(t.optimizer.options.paged), int(t.optimizer.options.in_backward),
      int(t.optimizer.options.set_to_none), t.optimizer.options.states.name);
  note("  finetune %s kind %d: lora rank %lld targets '%s' adapters '%s' base '%s'/'%s'\n",
       t.finetune.name, int(t.finetune.kind), ll(t.finetune.lora.rank), t.finetune.lora.targets,
       t.finetune.lora.adapters.name, t.finetune.quantized_base.name,
       t.finetune.unquantized_base.name);
  for (const tensor_selector& s : t.finetune.trainable)
    note("  trainable: kinds 0x%x layers %lld+%lld experts %lld+%lld\n", s.kinds, ll(s.first_layer),
         ll(s.layer_count), ll(s.first_expert), ll(s.expert_count));
  note(
      "  layout: dp %lld tp %lld sp %d pp %lld cp %lld ep %lld zero %d impl %d shard_group %lld "
      "offload opt %d param %d bucket_view %d ddp_bucket %lld reduce_bucket %lld prefetch_bucket "
      "%lld max_live %lld reuse_distance %lld persistence %lld backward_prefetch %d "
      "forward_prefetch %d limit_all_gathers %d fsdp_version %lld reshard_after_forward %lld\n",
      ll(l.data), ll(l.tensor), int(l.sequence), ll(l.pipeline), ll(l.context), ll(l.expert),
      int(l.zero), int(l.implementation), ll(l.shard_group), int(l.optimizer_offload),
      int(l.parameter_offload), int(l.ddp_bucket_view), ll(l.ddp_bucket_bytes),
      ll(l.zero_reduce_bucket_elements), ll(l.zero3_prefetch_bucket_elements),
      ll(l.zero3_max_live_elements), ll(l.zero3_reuse_distance_elements),
      ll(l.zero3_persistence_threshold), int(l.fsdp_backward_prefetch),
      int(l.fsdp_forward_prefetch), int(l.fsdp_limit_all_gathers), ll(l.fsdp_version),
      ll(l.reshard_after_forward));
  if (!l.stage_layers.empty()) {
    note("  stage layers (%zu):", l.stage_layers.size());
    for (const i64 n : l.stage_layers) note(" %lld", ll(n));
    note("\n");
  }
  note(
      "  batch: micro_batch %lld sequence %lld micro_batches %lld attention %d dropout attn %d "
      "hidden %d mask_bits %lld recompute %d recompute_layers %lld offload %d loss %d chunk %lld "
      "norm_stats %d capacity %lld schedule %d virtual %lld\n",
      ll(o.micro_batch), ll(o.sequence), ll(o.micro_batches), int(o.attention),
      int(o.attention_dropout), int(o.hidden_dropout), ll(o.dropout_mask_bits), int(o.recompute),
      ll(o.recompute_layers), int(o.offload), int(o.loss), ll(o.loss_chunk_tokens),
      int(o.norm_statistics), ll(o.capacity_factor_percent), int(o.schedule), ll(o.virtual_stages));
  note("  overheads: context %lld cublas %lld nccl %lld fragmentation %lld expandable %d\n",
       ll(x.cuda_context), ll(x.cublas_workspace), ll(x.nccl_buffers), ll(x.fragmentation_percent),
       int(x.allocator.expandable_segments));
}

void run(FuzzedDataProvider& in) {
  const model m = random_model(in);
  print(m);
  validated(m);

  const tensor_ledger ledger = tensors(m);
  const i64 all = parameters(ledger);
  const i64 active = active_parameters(m, ledger);
  expect(all > 0, "a valid model has no parameters");
  expect(active > 0 && active <= all, "active parameters outside (0, parameters]");
  for (int k = 0; k < tensor_kind_count; ++k)
    expect(parameters(ledger, static_cast<tensor_kind>(k)) >= 0, "negative parameters of a kind");
  expect(parameter_tensors(ledger) >= 0 && checkpoint_elements(ledger) >= 0,
         "negative tensor or checkpoint counts");

  const gpu& g = random_gpu(in);

  // Training: model states, activations, the step, the fit, the planners.
  training t{m, random_precision(in), random_optimizer(in), full_finetune::value, {}};
  activation_options batch{};
  runtime_overheads extra{};
  attempt([&] { t.finetune = random_finetuning(in); });
  t.layout = random_layout(in, m);
  batch = random_batch(in);
  extra = random_overheads(in);
  print(t, batch, extra);
  note("gpu %s\n", g.name);
  const training_plan_value plan{t, batch, extra};
  attempt([&] {
    expect(trainable_parameters(t.finetune, ledger) >= 0, "negative trainable parameters");
    validated(t.layout, m);
    const stage_states most = most_loaded_stage(t);
    expect(most.stage >= 0 && most.stage < t.layout.pipeline, "most loaded stage out of range");
    check_ledger(by_lifetimes(most.ledger));
    const i64 stage = in.ConsumeIntegralInRange<i64>(0, t.layout.pipeline - 1);
    check_ledger(training_step(t, batch, stage));
    for (const bool moe : {false, true})
      expect(
          layer_activation_bytes(m, t.precision, batch, t.layout, moe, batch.recompute) >= bytes{},
          "negative activations of a layer");
    const timed_ledger whole = breakdown(plan, g);
    check_ledger(whole);
    const fit_report r = fit(plan, g);
    check_fit(r);
    expect(r.required == peak(whole), "the fit's requirement is not the breakdown's peak");
  });
  attempt([&] {
    const i64 limit = count(in);
    note("max_micro_batch limit %lld\n", ll(limit));
    const i64 b = max_micro_batch(plan, g, limit);
    expect(b >= 0, "negative max micro-batch");
  });
  attempt([&] {
    const i64 limit = count(in), step = count(in);
    note("max_sequence limit %lld step %lld\n", ll(limit), ll(step));
    const i64 s = max_sequence(plan, g, limit, step);
    expect(s >= 0, "negative max sequence");
  });
  attempt([&] {
    const i64 limit = count(in);
    note("min_data_parallel limit %lld\n", ll(limit));
    expect(min_data_parallel(plan, g, limit) >= 0, "negative min data parallel");
  });
  attempt([&] {
    search_space space{};
    // Small worlds and batches, one recompute policy (all four only on 2 GPUs): a search's cost
    // grows with the divisors (benchmarked, not fuzzed), and where nothing fits every candidate
    // takes a memory evaluation (1,300 for a MoE with many layers on 4 GPUs, past the 2 s
    // timeout under ASan).
    space.recompute = in.ConsumeIntegralInRange<int>(-1, 3);
    space.gpus = std::min<i64>(degree(in), space.recompute < 0 ? 2 : 4);
    space.global_batch = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<i64>(-2, 64);
    space.max_tensor = degree(in);
    space.max_pipeline = degree(in);
    space.try_offload = in.ConsumeBool();
    space.sharding = pick_enum<sharding_family>(in, 3);
    space.zero = in.ConsumeIntegralInRange<int>(-1, 3);
    space.top =
        static_cast<std::size_t>(in.ConsumeIntegralInRange<int>(0, 40));  // 0 and > 32: errors
    note(
        "search_layouts gpus %lld batch %lld max_tensor %lld max_pipeline %lld offload %d "
        "sharding %d zero %d recompute %d top %zu\n",
        ll(space.gpus), ll(space.global_batch), ll(space.max_tensor), ll(space.max_pipeline),
        int(space.try_offload), int(space.sharding), space.zero, space.recompute, space.top);
    const search_result r = search_layouts(plan, g, space);
    note("-> %zu ranked of %lld candidates, %lld memory evaluations\n", r.best.size(),
         ll(r.candidates()), ll(r.memory_evaluations));
    i64 counted = 0;
    for (const i64 c : r.counts) counted += c;
    expect(counted == r.candidates() && r.best.size() <= search_result::max_top,
           "the search's counts do not add up");
    for (std::size_t i = 0; i < r.best.size(); ++i) {
      const plan_candidate& c = r.best[i];
      expect(c.required <= g.capacity && c.layout.world() == space.gpus,
             "a ranked candidate does not fit or does not use every GPU");
      expect(i == 0 || !(c.time.total() < r.best[i - 1].time.total()),
             "the ranked candidates are out of order");
    }
  });

  // Inference: KV cache, weights, the serving budget, the solvers, the loading peak.
  const kv_cache_config kv{storage_format(in), in.ConsumeBool() ? 0 : count(in)};
  const request_shape requests = random_requests(in);
  layout served{};
  served.tensor = degree(in);
  served.pipeline = in.ConsumeBool() ? 1 : degree(in);
  const weight_layout w = random_weights(in);
  note(
      "inference: weights %s kv %s block %lld tp %lld pp %lld batch %lld beams %lld prompt %lld "
      "generated %lld prefill_chunk %lld cuda_graphs %lld\n",
      w.name, kv.format.name, ll(kv.block_tokens), ll(served.tensor), ll(served.pipeline),
      ll(requests.batch), ll(requests.beams), ll(requests.prompt), ll(requests.generated),
      ll(requests.prefill_chunk), ll(requests.cuda_graphs));
  attempt([&] {
    expect(kv_bytes_per_token(m, kv, served.tensor) >= bytes{}, "negative KV bytes per token");
    validated(served, m);
    const inference_plan_value p{m, w, kv, requests, served, extra};
    check_ledger(breakdown(p, g));
    check_fit(fit(p, g));
    expect(inference_required(m, served, w, kv, requests, g, extra) >= bytes{},
           "negative inference requirement");
  });
  attempt([&] {
    vllm_settings v = vllm_defaults(g, served.tensor);
    if (in.ConsumeBool()) v.utilization_percent = count(in);
    if (in.ConsumeBool()) v.max_num_batched_tokens = count(in);
    if (in.ConsumeBool()) v.max_num_seqs = count(in);
    if (in.ConsumeBool()) v.non_torch = bytes{count(in)};
    if (in.ConsumeBool()) v.cuda_graphs = bytes{count(in)};
    const i64 context = in.ConsumeBool() ? requests.prompt : count(in);
    note("serve context %lld utilization %lld tokens %lld seqs %lld non-torch %lld graphs %lld\n",
         ll(context), ll(v.utilization_percent), ll(v.max_num_batched_tokens), ll(v.max_num_seqs),
         ll(v.non_torch.count), ll(v.cuda_graphs.count));
    const serving_budget b = serve(m, served, w, kv, context, g, v);
    expect(b.kv_pool >= bytes{} && b.kv_tokens >= 0 && b.sequences >= 0,
           "a negative serving budget");
  });
  attempt([&] {
    const i64 limit = count(in);
    note("max_batch limit %lld\n", ll(limit));
    const i64 b = max_batch(m, served, w, kv, requests, g, limit, extra);
    expect(b >= 0 && (b == 0 || b <= limit), "max batch out of range");
  });
  attempt([&] {
    const i64 limit = count(in);
    note("max_context limit %lld\n", ll(limit));
    const i64 c = max_context(m, served, w, kv, requests, g, limit, extra);
    expect(c >= 0 && (c == 0 || c <= limit), "max context out of range");
  });
  attempt([&] {
    const i64 limit = count(in);
    note("min_tensor_parallel limit %lld\n", ll(limit));
    const i64 tp = min_tensor_parallel(m, w, kv, requests, g, limit, extra);
    expect(tp >= 0, "negative min tensor parallel");
  });
  attempt([&] {
    const auto how = pick_enum<load_kind>(in, 2);
    const element_format& checkpoint = in.ConsumeBool() ? bf16::value : fp32::value;
    note("load_peak %d checkpoint %s\n", int(how), checkpoint.name);
    const loading_peak l = load_peak(m, w, how, served, checkpoint);
    expect(l.device >= l.weights && l.weights > bytes{} && l.host >= bytes{},
           "a loading peak below the loaded weights");
  });
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* print = std::getenv("VRAMFIT_FUZZ_PRINT");
  verbose = print != nullptr && std::strcmp(print, "0") != 0;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  attempt([&] { run(in); });
  return 0;
}
