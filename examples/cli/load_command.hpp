// SPDX-License-Identifier: MIT
// `vramfit load`: the peak while a model is loaded or initialized.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vramfit/vramfit.hpp>

#include "inputs.hpp"
#include "render.hpp"
#include "sizes.hpp"

namespace vramfit::cli {

/// Everything `vramfit load` reads.
struct load_options {
  std::string model = "llama-3-8b";
  std::optional<weight_layout> weights;  ///< unset: the config's quantization_config, or bf16
  load_kind init = load_kind::direct;
  std::optional<element_format> checkpoint;  ///< unset: bf16
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::string gpu = "h100";
  output_format format = output_format::table;
  bool check = false;
};

inline void add_load_options(CLI::App& c, load_options& o) {
  c.add_option("--model,-m", o.model,
               "A preset, a config.json path or its text, or a Hugging Face id in the local cache")
      ->capture_default_str();
  add_choice(c, "--weights", o.weights, weight_layouts, "weight format",
             "The loaded format, as infer's --weights", torch_dtypes);
  add_choice(c, "--init", o.init, load_kinds, "initialization", choice_list(load_kinds))
      ->capture_default_str();
  add_choice(c, "--checkpoint-dtype", o.checkpoint, checkpoint_formats, "checkpoint format",
             "The checkpoint's format, which bitsandbytes quantizes from as it loads (meta "
             "init): " +
                 choice_list(checkpoint_formats) + " (default: bf16)",
             torch_dtypes);
  c.add_option("--tp", o.tp, "Tensor-parallel degree")->check(positive)->capture_default_str();
  c.add_option("--pp", o.pp, "Pipeline-parallel degree")->check(positive)->capture_default_str();
  c.add_option("--gpu,-g", o.gpu, "A GPU preset or a capacity such as 96GiB")
      ->capture_default_str();
  add_choice(c, "--format,-f", o.format, list_formats, "--format", "table or json")
      ->type_name(choice_type(list_formats))
      ->capture_default_str();
  c.add_flag("--check", o.check, "Exit with status 1 when it does not fit");
}

inline int run_load(std::ostream& out, const load_options& o, const size_style& size) {
  const named_model named = load_model(o.model);
  const model& m = named.value;
  const gpu g = gpu_named(o.gpu);
  const weight_layout w = weights_for(o.weights, named);
  const load_kind how = o.init;
  const element_format checkpoint = o.checkpoint.value_or(bf16::value);
  // Only bitsandbytes, quantizing as from_pretrained loads, reads the checkpoint's format.
  if (o.checkpoint && !(w.quantized_at_load && how == load_kind::direct))
    detail::raise(
        "--checkpoint-dtype applies to weights bitsandbytes quantizes as they load (nf4, int8) "
        "with --init meta only");
  const layout l = validated(layout{.tensor = o.tp, .pipeline = o.pp}, m);
  const loading_peak p = load_peak(m, w, how, l, checkpoint);
  // Loading runs no matmul and no collective: the CUDA context is the one overhead.
  const memory_ledger context = overheads(
      {.cublas_workspace = 0, .nccl_buffers = 0, .fragmentation_percent = 0}, g, p.device, 1);
  const bytes required = p.device + total(context);
  const bool fits = required <= g.capacity;
  std::ostringstream title;
  title << "Loading " << m.name << " | weights " << w.name << " | " << name_of(load_kinds, how)
        << " init | " << l.world() << (l.world() == 1 ? " GPU" : " GPUs");
  const std::string verdict = fit_verdict(required, g.capacity, size);
  if (o.format == output_format::json) {
    const nlohmann::json j{{"configuration", title.str()},
                           {"weights", p.weights.count},
                           {"transient", (p.device - p.weights).count},
                           {"transient_what", p.transient},
                           {"peak_allocated", p.device.count},
                           {"host", p.host.count},
                           {"overhead", total(context).count},
                           {"total", required.count},
                           {"device", device_json(g)},
                           {"fits", fits}};
    out << j.dump(2) << "\n";
  } else {
    report::table t({"what", "bytes"});
    t.add({"loaded weights", size(p.weights)});
    t.add({std::string("beside them: ") + p.transient, size(p.device - p.weights)});
    t.add({"peak allocated", size(p.device)});
    t.add({"CUDA context", size(total(context))});
    t.add({"total", size(required)});
    if (p.host > bytes{}) t.add({"host memory", size(p.host)});
    out << title.str() << "\n\n"
        << t << "\n  " << g.name << ": " << size(g.capacity) << " -> " << verdict << "\n";
  }
  return o.check && !fits ? 1 : 0;
}

}  // namespace vramfit::cli
