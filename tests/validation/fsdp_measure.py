#!/usr/bin/env python3
"""Measures FSDP2 training steps (torch.distributed.fsdp.fully_shard) on one GPU, with traces.

A mesh of one rank still runs FSDP2's machinery: each layer's parameters are all-gathered (a
copy-in, then NCCL's all-gather on FSDP2's all-gather stream) before its forward and backward, and
its gradients reduce-scattered on the reduce-scatter stream. So the traces hold the side-stream
allocations that a caching-allocator model must place in per-stream pools, and the rows hold what
NCCL takes outside the caching allocator on one rank. It is the data for issue 21's side-stream
pools; the communication volumes of more ranks are not in it.

How to run (needs a CUDA GPU, torch and transformers):

    python3 tests/validation/fsdp_measure.py --out OUTDIR

It writes steps.jsonl (gpu_measure.py's row fields where they apply, plus fsdp {mp, reshard} and
nccl {used before init, after init, after the first collective}) and traces.jsonl (gpu_measure.py's
trace layout; step 1 from an emptied allocator and step 4, steady). Protocol per configuration:
the model is built on the GPU (gpu_measure.build_model), every decoder layer and then the root
are wrapped with fully_shard(mp_policy, reshard_after_forward), torch.optim.AdamW (foreach) is
built over the sharded parameters, and 4 steps run as in gpu_measure.train_step (no autocast: the
MixedPrecisionPolicy casts).
"""

import argparse
import gc
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_measure as gm  # noqa: E402

# (model, weights dtype, MixedPrecisionPolicy: None or (param_dtype, reduce_dtype), reshard_after_forward)
CONFIGS = [
    ("llama3-8b-2l", "bf16", None, True),                     # bf16 weights, no casts
    ("llama3-8b-2l", "fp32", ("bf16", "fp32"), True),         # torchtitan's default policy
    ("llama3-8b-4l", "fp32", ("bf16", "fp32"), True),
    ("llama3-8b-4l", "fp32", ("bf16", "fp32"), False),        # parameters kept gathered after forward
]


def config_id(model, weights, mp, reshard):
    policy = "mp-%s-%s" % mp if mp else "no-mp"
    return "%s/fsdp2/%s/%s/%s/adamw/b1s1024/sdpa" % (model, weights, policy, "reshard" if reshard else "keep")


def used():
    import torch
    free, total = torch.cuda.mem_get_info()
    return total - free


def run(model_name, weights, mp, reshard, out_files):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    cid = config_id(model_name, weights, mp, reshard)
    row = {"id": cid, "kind": "train-fsdp2", "model": model_name, "precision": weights, "optimizer": "adamw",
           "batch": 1, "seq": 1024, "accum": 1, "attn": "sdpa", "gc": "none", "lora": None, "alloc_conf": "default",
           "fsdp": {"mp": list(mp) if mp else None, "reshard_after_forward": reshard}}
    gc.collect()
    torch.cuda.empty_cache()
    torch.manual_seed(0)
    row["baseline_allocated"] = torch.cuda.memory_allocated()
    row["baseline_reserved"] = torch.cuda.memory_reserved()
    traces = []
    t0 = time.time()
    model = opt = None
    try:
        model, config, path = gm.build_model(model_name, dtypes[weights], "sdpa")
        row["config_file"] = path
        row["layers"] = config.num_hidden_layers
        model.config.use_cache = False
        model.train()
        policy = MixedPrecisionPolicy(param_dtype=dtypes[mp[0]], reduce_dtype=dtypes[mp[1]]) if mp else MixedPrecisionPolicy()
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=policy, reshard_after_forward=reshard)
        fully_shard(model, mp_policy=policy, reshard_after_forward=reshard)
        params = list(model.parameters())
        row["params"] = sum(p.numel() for p in params)
        row["param_bytes"] = sum(p.to_local().nbytes if hasattr(p, "to_local") else p.nbytes for p in params)
        opt, row["optimizer_kwargs"] = gm.make_optimizer("adamw", params)
        ids = torch.randint(0, config.vocab_size, (1, 1024), device="cuda")
        torch.cuda.synchronize()
        row["after_build_allocated"] = torch.cuda.memory_allocated()
        row["after_build_reserved"] = torch.cuda.memory_reserved()
        for step in (1, 2, 3, 4):
            traced = step in (1, 4)
            phases = gm.Phases(True, {} if traced else None)
            if step == 2:
                torch.cuda.reset_accumulated_memory_stats()
                row["allocated_before"] = torch.cuda.memory_allocated()
                row["reserved_before"] = torch.cuda.memory_reserved()
            with gm.TracedStep(traced) as recorder:
                loss = gm.train_step(model, opt, None, [ids], None, phases)
            if traced:
                trace = recorder.trace(cid, step, phases.sentinels)
                trace["streams"] = sorted({e[3] for e in trace["events"]})
                traces.append(trace)
            stats = gm.whole_step_stats(phases.list)
            if step == 2:
                row["phases"] = phases.list
                row.update(stats)
                row["peak_phase"] = max(phases.list, key=lambda p: p["peak_allocated"])["name"]
                row["loss"] = float(loss)
                row["device_used"] = used()
                row["non_torch"] = row["device_used"] - torch.cuda.memory_reserved()
                s = torch.cuda.memory_stats()
                row["stats"] = {"num_alloc_retries": s.get("num_alloc_retries", 0),
                                "segments": s.get("segment.all.current", 0),
                                "segments_large": s.get("segment.large_pool.current", 0),
                                "segments_small": s.get("segment.small_pool.current", 0)}
            else:
                row["step%d" % step] = stats
        row["optimizer_state_bytes_cuda"] = sum(
            (v.to_local() if hasattr(v, "to_local") else v).nbytes
            for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor) and v.is_cuda)
        row["trace_streams"] = sorted({s for t in traces for s in t["streams"]})
    except Exception as e:  # a configuration that fails must not stop the others
        row["error"] = "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:300])
    del model, opt
    gc.collect()
    torch.cuda.empty_cache()
    row["wall_s"] = round(time.time() - t0, 3)
    gm.write_row(out_files["steps"], row)
    for t in traces:
        gm.write_row(out_files["traces"], t)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import torch
    import torch.distributed as dist
    import transformers
    transformers.logging.set_verbosity_error()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(0)
    torch.empty(1, device="cuda")
    nccl = {"used_before_init": used()}
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    nccl["used_after_init"] = used()
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    nccl["used_after_first_collective"] = used()
    nccl["reserved_after_first_collective"] = torch.cuda.memory_reserved()
    del x
    files = gm.LazyFiles(args.out, {"steps": "steps.jsonl", "traces": "traces.jsonl"})
    for model_name, weights, mp, reshard in CONFIGS:
        r = run(model_name, weights, mp, reshard, files)
        print("%-60s peak %8.1f MiB reserved %8.1f MiB non-torch %6.1f MiB streams %s %s" % (
            r["id"], r.get("peak_allocated", 0) / 2**20, r.get("peak_reserved", 0) / 2**20,
            r.get("non_torch", 0) / 2**20, r.get("trace_streams"), r.get("error", "")), flush=True)
    files.close()
    with open(os.path.join(args.out, "nccl.json"), "w") as f:
        json.dump(nccl, f, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
