// SPDX-License-Identifier: MIT
// `vramfit min-gpus`: the fewest GPUs a training configuration fits on, growing its
// data-parallel degree (which shards only under ZeRO or FSDP) over its TP x PP x CP.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <vramfit/vramfit.hpp>

#include "sizes.hpp"
#include "train_command.hpp"

namespace vramfit::cli {

/// The largest data-parallel degree tried: 2^20 replicas.
inline constexpr std::int64_t max_data_parallel_searched = std::int64_t{1} << 20;

inline int run_min_gpus(std::ostream& out, const train_options& given, const size_style& size) {
  if (given.sweep || given.timeline)
    detail::raise("min-gpus answers one number: leave out --sweep and --timeline");
  const named_model named = load_model(given.model);
  const model& m = named.value;
  train_options o = for_model(given, named);
  // Hybrid FSDP's shard group must divide the degree the plan is built at: build it there;
  // min_data_parallel passes over the degrees below the group.
  if (o.fsdp_group > 0) o.dp = o.fsdp_group;
  const gpu g = gpu_named(o.gpu);
  const training_plan_value plan = build_plan(o, m);
  const std::int64_t data = min_data_parallel(plan, g, max_data_parallel_searched);
  const layout& l = plan.setup.layout;
  const std::int64_t per_replica = l.tensor * l.pipeline * l.context;
  training_plan_value found = plan;
  if (data > 0) found.setup.layout.data = data;
  const estimate e = estimate_of(o, found, g);
  if (o.format == output_format::json) {
    nlohmann::json j = to_json(e);
    j["min_gpus"] = data > 0 ? data * per_replica : 0;
    j["data_parallel"] = data;
    out << j.dump(2) << "\n";
    return o.check && data == 0 ? 1 : 0;
  }
  if (o.format == output_format::svg) {  // the estimate at the degree found (else at --dp 1)
    print_svg(out, e, size);
    return o.check && data == 0 ? 1 : 0;
  }
  if (data == 0) {
    out << "Not one data-parallel degree up to " << report::grouped(max_data_parallel_searched)
        << " fits " << g.name << " (" << size(g.capacity) << ")"
        << (l.zero == sharding::none ? ": without ZeRO or FSDP, more replicas do not "
                                       "shard anything (try --zero or --fsdp)"
                                     : "")
        << ".\n";
    return o.check ? 1 : 0;
  }
  out << "Fewest GPUs: " << report::grouped(data * per_replica) << " (data parallel " << data;
  if (per_replica > 1) out << " x TP x PP x CP " << per_replica;
  out << ", powers of two tried)\n\n";
  if (o.format == output_format::markdown)
    print_markdown(out, e, size);
  else
    print_table(out, e, size);
  return 0;
}

}  // namespace vramfit::cli
