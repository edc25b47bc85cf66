#!/usr/bin/env python3
"""Compares vramfit's predictions with the GPU measurements in tests/validation/gpu/.

Plain Python (json + subprocess; no torch). For every training row of steps.jsonl that the vramfit
CLI can express it runs `vramfit train ... --format json` with the very same config.json, and for
every row of inference.jsonl `vramfit infer ... --format json`, then prints Markdown tables:

  1. training, whole step: measured peak allocated / peak reserved / memory outside the allocator
     against vramfit's total and its allocator-side part;
  2. training, components: weights, gradients, optimizer states and what the forward leaves
     allocated, measured against vramfit's entries, and the phase of the peak;
  3. inference (prefill): peak, KV cache, weights;
  4. reproducibility: the rows of steps_repeat.jsonl against the same configurations in steps.jsonl.

Definitions (bytes; MiB = 2^20 B in the tables):
  vramfit alloc = vramfit's total minus its 'CUDA context', 'NCCL buffers' and reserve
    ('allocator fragmentation reserve' or 'caching allocator: reserved beyond allocated') entries:
    the part that PyTorch's memory_allocated counts (the cuBLAS
    workspace stays in: PyTorch takes it from the caching allocator).
  err alloc = (vramfit alloc - measured peak_allocated) / measured peak_allocated.
  measured device = peak_reserved + non_torch (the memory outside the allocator: CUDA context,
    loaded kernels, cuBLAS handles, measured at the end of the step with cudaMemGetInfo).
  err device = (vramfit total - measured device) / measured device.
  fwd held = memory allocated at the end of the forward (loss computed) minus allocated_before;
    vramfit's counterpart is the sum of its 'saved activations', 'embedding inputs and rotary
    tables', 'final norm, logits and loss' and (amp) 'autocast / fp8 weight copies' entries: the
    16-bit weight copies that autocast makes are saved by autograd, so they are held then too.
  slack = peak_reserved - peak_allocated (reserved but not allocated at the peaks; the two peaks
    may fall at different moments), against vramfit's reserve entry.

Usage:
    python3 tests/validation/gpu_compare.py [build/examples/cli/vramfit] [--data tests/validation/gpu]
    # the H200 campaign's whole models:
    python3 tests/validation/gpu_compare.py --data tests/validation/gpu/h200 \
        --steps full_size_steps.jsonl --inference full_size_inference.jsonl
    # FSDP2 on one rank (fsdp_measure.py): peak allocated and reserved only
    python3 tests/validation/gpu_compare.py --data tests/validation/gpu/h200 --fsdp2 fsdp2_steps.jsonl

FSDP2 rows (kind train-fsdp2) become `--fsdp full --fsdp-version 2 --dp 1`: bf16 weights without a
MixedPrecisionPolicy are --precision bf16; fp32 weights under MixedPrecisionPolicy(bf16, fp32) are
--precision bf16-fp32-master (fp32 sharded parameters and gradients, bf16 compute);
reshard_after_forward=False is --reshard-after-forward false.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MIB = float(1 << 20)

PRECISION = {"fp32": "fp32", "bf16": "bf16", "amp-bf16": "amp-bf16", "amp-fp16": "amp-fp16"}
OPTIMIZER = {"adamw": ["adamw"], "adamw-fused": ["adamw-fused"], "sgd": ["sgd"], "sgd-momentum": ["sgd-momentum"],
             "adafactor": ["adafactor"], "adamw-forloop": ["adamw", "--optimizer-impl", "for-loop"]}
ATTENTION = {"eager": "eager", "sdpa": "flash"}
RECOMPUTE = {"none": "none", "nonreentrant": "full", "reentrant": "full"}
RESERVE = ("allocator fragmentation reserve", "caching allocator: reserved beyond allocated")
NOT_ALLOCATOR = ("CUDA context", "NCCL buffers") + RESERVE
FWD_ENTRIES = ("saved activations (layers x micro-batches)", "embedding inputs and rotary tables",
               "final norm, logits and loss", "autocast / fp8 weight copies")
FRAG = RESERVE


def train_args(r):
    """vramfit train arguments for a steps.jsonl row, or (None, reason)."""
    if r["optimizer"] not in OPTIMIZER:
        return None, "an optimizer the CLI does not name"
    if r["lora"] and r["precision"].startswith("amp"):
        return None, "bf16 base under autocast with fp32 adapters: the CLI's amp-* keeps fp32 weights"
    args = ["train", "--model", os.path.join(ROOT, r["config_file"]), "--precision", PRECISION[r["precision"]],
            "--optimizer", *OPTIMIZER[r["optimizer"]], "--micro-batch", str(r["batch"]), "--seq-len", str(r["seq"]),
            "--grad-accum", str(r["accum"]), "--attention", ATTENTION[r["attn"]], "--recompute", RECOMPUTE[r["gc"]],
            "--gpu", "h100", "--format", "json"]
    if r["gc"] == "nonreentrant":
        args.append("--non-reentrant")
    if r["lora"]:
        t = r["lora"]["targets"]
        args += ["--lora-rank", str(r["lora"]["r"]), "--lora-targets", t if isinstance(t, str) else ",".join(t)]
    if r["alloc_conf"].startswith("expandable_segments"):
        args.append("--expandable-segments")
    if r.get("fsdp") is not None:
        mp = r["fsdp"]["mp"]
        if mp not in (None, ["bf16", "fp32"]) or (mp is None) != (r["precision"] == "bf16"):
            return None, "an FSDP2 MixedPrecisionPolicy the CLI does not name"
        args[args.index("--precision") + 1] = "bf16" if mp is None else "bf16-fp32-master"
        args += ["--fsdp", "full", "--fsdp-version", "2", "--dp", "1"]
        if not r["fsdp"]["reshard_after_forward"]:
            args += ["--reshard-after-forward", "false"]
    return args, None


def run_vramfit(vramfit, args):
    out = subprocess.run([vramfit] + args, capture_output=True, text=True)
    if out.returncode != 0:
        return None, (out.stderr.strip() or "exit %d" % out.returncode).splitlines()[0]
    return json.loads(out.stdout), None


def entry_sum(pred, names):
    return sum(e["bytes"] for e in pred["entries"]
               if (e["name"] in names or (e["name"].startswith("NCCL") and "NCCL buffers" in names))
               and e["space"] == "device")


def mib(x):
    return "%.0f" % (x / MIB) if x is not None else "-"


def pct(pred, meas):
    return "%+.1f%%" % (100.0 * (pred - meas) / meas) if meas else "-"


def load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def short_phase(name):
    return {"optimizer": "optimizer", "zero_grad": "zero_grad"}.get(name, name)


def correlation(a, b):
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return cov / (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5


def reserved_table(vramfit, steps):
    """Measured peak reserved against vramfit's memory.reserved with --reserve simulated (the
    default) and --reserve share, each plus its cuBLAS workspace (PyTorch takes that from the
    allocator)."""
    rows = []
    for r in steps:
        args, _ = train_args(r) if not r.get("error") else (None, None)
        if not args:
            continue
        share, _ = run_vramfit(vramfit, args + ["--reserve", "share"])
        sim, _ = run_vramfit(vramfit, args)
        if share is None or sim is None:
            continue
        cublas = entry_sum(share, ("cuBLAS workspace",))
        # The reserve beyond the allocated peak, measured and predicted by each.
        slack = (r["peak_reserved"] - r["peak_allocated"],
                 share["memory"]["reserved"] - share["memory"]["allocated"],
                 sim["memory"]["reserved"] - sim["memory"]["allocated"])
        rows.append((r["id"], r["peak_reserved"], share["memory"]["reserved"] + cublas,
                     sim["memory"]["reserved"] + cublas, slack))
    if not rows:
        return
    print("\n### Training: peak reserved, the fixed share and the simulated allocator (MiB)\n")
    measured = [x[4][0] for x in rows]
    for k, name in ((2, "share"), (3, "simulated")):
        e = sorted(abs(x[k] - x[1]) / x[1] for x in rows)
        predicted = [x[4][k - 1] for x in rows]
        misses = sorted(abs(p - m) for p, m in zip(predicted, measured))
        print("--reserve %s: |err| median %.1f%%, mean %.1f%%, max %.1f%% over %d rows; the reserve beyond "
              "the allocated peak: correlation %.2f, median |err| %s MiB." % (
                  name, 100 * e[len(e) // 2], 100 * sum(e) / len(e), 100 * e[-1], len(e),
                  correlation(predicted, measured), mib(misses[len(misses) // 2])))
    print("\n| configuration | peak reserved | share | err | simulated | err |\n|---|---:|---:|---:|---:|---:|")
    for x in rows:
        print("| %s | %s | %s | %s | %s | %s |" % (x[0], mib(x[1]), mib(x[2]), pct(x[2], x[1]), mib(x[3]),
                                                  pct(x[3], x[1])))


def fsdp2_table(vramfit, steps):
    """FSDP2 rows: measured peak allocated and reserved against vramfit's memory.allocated and
    memory.reserved (simulated), each plus its cuBLAS workspace."""
    print("### FSDP2 on one rank: peak allocated and reserved (MiB)\n")
    print("| configuration | allocated | vramfit | err | reserved | vramfit | err | reserved - allocated | vramfit |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in steps:
        args, reason = train_args(r) if not r.get("error") else (None, r.get("error"))
        pred = None
        if args:
            pred, reason = run_vramfit(vramfit, args)
        if pred is None:
            print("| %s | %s | n/a | | %s | n/a | | | %s |" % (r["id"], mib(r["peak_allocated"]),
                                                             mib(r["peak_reserved"]), reason))
            continue
        cublas = entry_sum(pred, ("cuBLAS workspace",))
        alloc, res = pred["memory"]["allocated"] + cublas, pred["memory"]["reserved"] + cublas
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["id"], mib(r["peak_allocated"]), mib(alloc), pct(alloc, r["peak_allocated"]), mib(r["peak_reserved"]),
            mib(res), pct(res, r["peak_reserved"]), mib(r["peak_reserved"] - r["peak_allocated"]), mib(res - alloc)))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("vramfit", nargs="?", default=os.path.join(ROOT, "build/examples/cli/vramfit"))
    ap.add_argument("--data", default=os.path.join(ROOT, "tests/validation/gpu"))
    ap.add_argument("--steps", default="steps.jsonl", help="training rows, in --data")
    ap.add_argument("--inference", default="inference.jsonl", help="prefill rows, in --data")
    ap.add_argument("--fsdp2", help="FSDP2 rows (fsdp_measure.py's steps.jsonl), in --data: only their table")
    a = ap.parse_args()
    if not os.access(a.vramfit, os.X_OK):
        sys.exit("vramfit not found at %s (build it: cmake --build build --target vramfit)" % a.vramfit)
    if a.fsdp2:
        return fsdp2_table(a.vramfit, load(os.path.join(a.data, a.fsdp2)))
    steps = load(os.path.join(a.data, a.steps))
    infer = load(os.path.join(a.data, a.inference))
    repeats = load(os.path.join(a.data, "steps_repeat.jsonl"))

    t1 = ["| configuration | peak allocated | peak reserved | non-torch | vramfit total | vramfit alloc | err alloc | err device | peak at (measured / vramfit) |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    t2 = ["| configuration | weights+buffers | vramfit | gradients | vramfit | optimizer states | vramfit | fwd held | vramfit | fwd err | slack | vramfit frag |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    errs = []
    na = []
    for r in steps:
        if r.get("error"):
            t1.append("| %s | n/a | | | | | | | measurement failed: %s |" % (r["id"], r["error"]))
            continue
        args, reason = train_args(r)
        pred = None
        if args:
            pred, reason = run_vramfit(a.vramfit, args)
        if pred is None:
            na.append((r["id"], reason))
            t1.append("| %s | %s | %s | %s | n/a | n/a | | | %s; vramfit: %s |" % (
                r["id"], mib(r["peak_allocated"]), mib(r["peak_reserved"]), mib(r["non_torch"]), r["peak_phase"], reason))
            continue
        total = pred["memory"]["total"]
        alloc = total - entry_sum(pred, NOT_ALLOCATOR)
        device = r["peak_reserved"] + r["non_torch"]
        errs.append((abs(alloc - r["peak_allocated"]) / r["peak_allocated"], r["id"], alloc, r["peak_allocated"]))
        t1.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s |" % (
            r["id"], mib(r["peak_allocated"]), mib(r["peak_reserved"]), mib(r["non_torch"]), mib(total), mib(alloc),
            pct(alloc, r["peak_allocated"]), pct(total, device), r["peak_phase"], pred.get("peak_moment", "?")))
        mem = pred["memory"]
        fwd_phase = next(p for p in r["phases"] if p["name"].startswith("forward"))
        fwd_held = fwd_phase["end_allocated"] - r["allocated_before"]
        fwd_pred = entry_sum(pred, FWD_ENTRIES)
        weights_pred = mem["weights"] - entry_sum(pred, ("autocast / fp8 weight copies",))
        t2.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["id"], mib(r["param_bytes"] + r["buffer_bytes"]), mib(weights_pred), mib(r["grad_bytes"]),
            mib(mem["gradients"]), mib(r["optimizer_state_bytes_cuda"]), mib(mem["optimizer_states"] + mem["master_weights"]),
            mib(fwd_held), mib(fwd_pred), pct(fwd_pred, fwd_held), mib(r["peak_reserved"] - r["peak_allocated"]),
            mib(entry_sum(pred, FRAG))))

    print("### Training: whole step (MiB)\n")
    print("\n".join(t1))
    if errs:
        e = sorted(x[0] for x in errs)
        print("\n%d configurations compared, %d n/a. |err alloc|: median %.1f%%, mean %.1f%%, max %.1f%% (%s)." % (
            len(errs), len(na), 100 * e[len(e) // 2], 100 * sum(e) / len(e), 100 * e[-1], max(errs)[1]))
    print("\n### Training: components (MiB)\n")
    print("vramfit's weights column leaves out its autocast weight copies (counted in fwd held); its optimizer "
          "column is optimizer_states + master_weights.\n")
    print("\n".join(t2))

    t3 = ["| configuration | weights | vramfit | KV cache | vramfit | peak allocated | vramfit alloc | err alloc |",
          "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in infer:
        if r.get("error"):
            t3.append("| %s | n/a | | | | | | %s |" % (r["id"], r["error"]))
            continue
        args = ["infer", "--model", os.path.join(ROOT, r["config_file"]), "--weights", "bf16", "--kv-dtype", "bf16",
                "--batch", str(r["batch"]), "--context", str(r["seq"]), "--gpu", "h100", "--format", "json",
                "--logits", "last" if r["logits_to_keep"] else "all"]
        pred, reason = run_vramfit(a.vramfit, args)
        if pred is None:
            t3.append("| %s | %s | n/a | %s | n/a | %s | n/a | %s |" % (
                r["id"], mib(r["weights_allocated"]), mib(r["kv_cache_bytes"]), mib(r["peak_allocated"]), reason))
            continue
        alloc = pred["memory"]["total"] - entry_sum(pred, NOT_ALLOCATOR)
        t3.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["id"], mib(r["weights_allocated"]), mib(pred["memory"]["weights"]), mib(r["kv_cache_bytes"]),
            mib(pred["memory"]["kv_cache"]), mib(r["peak_allocated"]), mib(alloc), pct(alloc, r["peak_allocated"])))
    print("\n### Inference: one prefill call (MiB)\n")
    print("keep1: logits_to_keep=1 (what generate() asks for); keep0: logits of every position "
          "(vramfit --logits all). "
          "Measured weights = memory_allocated before the call (includes the ~33 MiB cuBLAS workspaces).\n")
    print("\n".join(t3))

    reserved_table(a.vramfit, steps)

    if repeats:
        by_id = {r["id"]: r for r in steps}
        t4 = ["| configuration | run | peak allocated | Δ vs steps.jsonl | peak reserved | Δ vs steps.jsonl |",
              "|---|---|---:|---:|---:|---:|"]
        for r in repeats:
            m = by_id.get(r["id"])
            if not m or r.get("error"):
                continue
            t4.append("| %s | %s | %s | %+d B | %s | %+.0f MiB |" % (
                r["id"], r.get("run", "?"), mib(r["peak_allocated"]), r["peak_allocated"] - m["peak_allocated"],
                mib(r["peak_reserved"]), (r["peak_reserved"] - m["peak_reserved"]) / MIB))
        print("\n### Reproducibility: repeated measurements (MiB)\n")
        print("\n".join(t4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
