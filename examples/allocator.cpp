// Prints the computed blocks of docs/allocator.md: segment maps of small request sequences, and
// the segments at the peak of a real training step under three allocator settings.
#include <iostream>
#include <string>
#include <vramfit/vramfit.hpp>

#include "report.hpp"

using namespace vramfit;

namespace {
constexpr std::int64_t MiB_ = 1 << 20;

/// A segment map as text: [6 MiB | free 14 MiB].
std::string map_of(const caching_allocator& a) {
  std::string out;
  for (std::size_t s = 0; s < a.segment_count(); ++s) {
    if (a.segment_map(s).empty()) continue;
    out += out.empty() ? "`[" : " `[";
    bool first = true;
    for (std::int64_t b : a.segment_map(s)) {
      out += first ? "" : " | ";
      out += (b < 0 ? "free " : "") + to_string(bytes{b < 0 ? -b : b});
      first = false;
    }
    out += "]`";
  }
  return out;
}

/// A bar of `width` characters: allocated (#) against reserved (.).
std::string bar(bytes allocated, bytes reserved, bytes scale, int width = 48) {
  const auto cells = [&](bytes b) {
    return static_cast<int>(static_cast<double>(b.count) / static_cast<double>(scale.count) *
                            width);
  };
  return std::string(static_cast<std::size_t>(cells(allocated)), '#') +
         std::string(static_cast<std::size_t>(cells(reserved) - cells(allocated)), '.');
}
}  // namespace

// [start:allocator]
// Llama-3-8B, FSDP over 8 GPUs, micro-batch 2 x 4096, AdamW: the steps' reserved memory.
constexpr training llama_fsdp{models::llama_3_8b::value, mixed<bf16>::value, adamw<>::value,
                              full_finetune::value, parallel<fsdp<8>>::value};
constexpr activation_options batch{.micro_batch = 2, .sequence = 4096};

// The allocator runs at compile time too, within the compilers' default limits for tiny models
// only (an 8B model's replay needs a raised -fconstexpr-ops-limit / -fconstexpr-steps).
constexpr model tiny{.name = "tiny",
                     .hidden = 8,
                     .layers = 1,
                     .heads = 2,
                     .kv_heads = 1,
                     .head_dim = 128,
                     .ffn = 16,
                     .vocab = 16};
constexpr reserved_memory_estimate tiny_steps = reserved_memory(
    training{tiny, mixed<bf16>::value, adamw<>::value}, {.micro_batch = 1, .sequence = 8});
static_assert(tiny_steps.reserved >= tiny_steps.allocated);
// [end:allocator]

int main() {
  const report::page_blocks page(std::cout, "allocator.cpp");
  report::table maps({"requests", "segments", "reserved", "allocated"});
  auto show = [&](const char* what, caching_allocator& a) {
    maps.add({what, map_of(a), to_string(a.stats().reserved), to_string(a.stats().allocated)});
  };
  {
    caching_allocator a;
    a.allocate(bytes{6 * MiB_});
    a.allocate(bytes{13 * MiB_ + MiB_ / 2});
    show("6 MiB, then 13.5 MiB", a);
  }
  {
    caching_allocator a;
    a.allocate(bytes{6 * MiB_});
    a.allocate(bytes{30 * MiB_});
    show("6 MiB, then 30 MiB", a);
    caching_allocator x(parse_alloc_conf("expandable_segments:True"));
    x.allocate(bytes{6 * MiB_});
    x.allocate(bytes{30 * MiB_});
    show("the same, `expandable_segments:True`", x);
  }
  {
    caching_allocator a(parse_alloc_conf("max_split_size_mb:32"));
    a.release(a.allocate(bytes{40 * MiB_}));
    a.allocate(bytes{8 * MiB_});
    show("`max_split_size_mb:32`: 40 MiB freed, then 8 MiB", a);
  }
  page.print("segment-maps", maps);

  report::table steps({"PYTORCH_CUDA_ALLOC_CONF", "first step reserved", "reserved", "allocated",
                       "largest free block at the peak", "reserved stops growing after step"});
  std::string pictures;
  for (const char* conf : {"", "expandable_segments:True", "max_split_size_mb:512"}) {
    const reserved_memory_estimate r = reserved_memory(llama_fsdp, batch, parse_alloc_conf(conf));
    steps.add({*conf ? std::string("`") + conf + "`" : "(default)",
               to_string(r.first_step_reserved), to_string(r.reserved), to_string(r.allocated),
               to_string(r.largest_free_at_peak), std::to_string(r.stable_step)});
    if (*conf) continue;
    const bytes scale = r.large_at_peak.reserved;
    pictures +=
        "large pool  " + bar(r.large_at_peak.allocated, r.large_at_peak.reserved, scale) + "  " +
        to_string(r.large_at_peak.allocated) + " of " + to_string(r.large_at_peak.reserved) +
        " in " + std::to_string(r.large_at_peak.segments) + " segments\nsmall pool  " +
        bar(r.small_at_peak.allocated, r.small_at_peak.reserved, scale) + "  " +
        to_string(r.small_at_peak.allocated) + " of " + to_string(r.small_at_peak.reserved) +
        " in " + std::to_string(r.small_at_peak.segments) + " segments\n";
  }
  page.print("pools-at-peak", "```\n" + pictures + "```\n");
  page.print("steps", steps);
}
