#!/usr/bin/env python3
"""Measures the real CUDA memory of Hugging Face training steps (and a little inference) on one GPU.

The data it writes (tests/validation/gpu/) is the ground truth that vramfit's whole-step memory
timeline and its model of PyTorch's CUDA caching allocator are checked against. Models are built
with transformers.AutoModelForCausalLM.from_config on the GPU, with random weights (nothing is
downloaded), from the config.json files in tests/data/hf/ or the derived ones in
tests/validation/gpu/configs/ (Llama-3-8B cut to 2, 4 and 8 layers; GPT-2 without dropout), so that
vramfit can read the very same files.

How to run (needs a CUDA GPU, torch, transformers, and peft for the LoRA cases):

    python3 tests/validation/gpu_measure.py --out OUTDIR            # the grid and inference (~2.5 min on an H100)
    python3 tests/validation/gpu_measure.py --out OUTDIR --smoke    # 3 configurations and 1 trace
    python3 tests/validation/gpu_measure.py --list                  # print the grid; needs no torch
    options: --only REGEX (ids to run), --skip-done FILE.jsonl (ids already measured),
             --deadline SECONDS (stop starting new configurations after this), --no-traces,
             --no-inference, --no-train

    python3 tests/validation/gpu_measure.py --out OUTDIR --extra-traces --tag repeat-inprocess
    python3 tests/validation/gpu_measure.py --out OUTDIR --fresh-check   # FRESH_CHECK, a process each
    python3 tests/validation/gpu_measure.py --write-configs tests/validation/gpu/configs   # no torch

It writes, in OUTDIR: env.json, steps.jsonl (training rows), inference.jsonl and traces.jsonl (one
compact allocator event trace per line). Rows are appended and flushed one by one, so a run cut
off keeps what it measured. The committed data in tests/validation/gpu/ came from
`--out A --deadline 500` (steps.jsonl, inference.jsonl, env.json, 7 traces), then
`--out B --only '^llama3-8b-8l/' --no-inference` (4 more rows of steps.jsonl),
`--out B --extra-traces --tag repeat-inprocess` and `--out C --fresh-check` (steps_repeat.jsonl,
10 more traces); traces.jsonl was split into traces/<id with / replaced by _>.json.

Training protocol (one process; every configuration starts from an emptied allocator):
  gc.collect(); torch.cuda.empty_cache(); torch.manual_seed(0); build the model (use_cache=False,
  model.train()); wrap with peft LoRA when asked; build the optimizer over the trainable
  parameters; then 3 optimizer steps on the same random batch (labels = input_ids, so the loss is
  Hugging Face's: logits.float() then cross-entropy). Step 1 is the warm-up that creates the
  optimizer states; step 2 is the measured one; step 3 checks that step 2 was steady. Traced
  configurations run a 4th step under torch.cuda.memory._record_memory_history (so the trace
  costs nothing to the measured numbers). One step is:
      for each micro-batch i:  with autocast(amp only): loss = model(input_ids, labels=input_ids).loss / accum
                               [phase forward.i ends]   (scaler.scale(loss) for amp-fp16).backward()   [phase backward.i ends]
      optimizer.step()  (scaler.step + scaler.update for amp-fp16)                      [phase optimizer ends]
      optimizer.zero_grad(set_to_none=True)                                             [phase zero_grad ends]
  (with one micro-batch the phases are named forward, backward, optimizer, zero_grad).
  The ModelOutput is dropped at once (the usual `loss = model(...).loss`), so the logits survive
  only as far as autograd keeps them.

Fields of a steps.jsonl row (all sizes in bytes, all from torch.cuda.memory_stats of the
caching allocator unless said otherwise; "allocated" = bytes of live tensor blocks, rounded up by
the allocator to 512 B; "reserved" = bytes of segments cudaMalloc'ed by the allocator;
"requested" = the unrounded sizes the callers asked for):
  id, kind="train", model (short name), config_file (repo-relative path vramfit can read),
  layers, precision ("fp32": fp32 weights, no autocast | "bf16": bf16 weights, grads and optimizer
    states, no autocast | "amp-bf16": fp32 weights + torch.autocast(bfloat16) around the forward
    and the loss | "amp-fp16": fp32 weights + autocast(float16) + torch.amp.GradScaler(init_scale
    2**10)), weights_dtype, autocast_dtype,
  optimizer ("adamw": torch.optim.AdamW defaults, i.e. foreach on CUDA | "adamw-fused": fused=True
    | "adamw-forloop": foreach=False | "sgd": SGD no momentum | "sgd-momentum": SGD momentum 0.9
    | "adafactor": torch.optim.Adafactor defaults), optimizer_kwargs,
  batch (sequences per micro-batch), seq (tokens per sequence), accum (micro-batches per step),
  attn (attn_implementation: "eager" or "sdpa"), gc ("none" | "nonreentrant" | "reentrant":
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": ...})),
  lora (null or {r, alpha, dropout, targets}; peft LoraConfig, base weights frozen),
  alloc_conf ("default" or "expandable_segments:True" set through
    torch.cuda.memory._set_allocator_settings for this configuration only), dropout (the config's
    dropout probabilities), trace (true when a trace of step 4 is in traces.jsonl),
  params, trainable_params, param_bytes (sum of parameter nbytes), trainable_param_bytes,
  buffer_bytes (model buffers), grad_bytes (sum of .grad nbytes at the end of the last backward of
    step 2), optimizer_state_bytes_cuda / optimizer_state_bytes_cpu (tensors in optimizer.state
    after step 2), optimizer_state_tensors, lora_param_dtype,
  baseline_allocated / baseline_reserved: at the start of the configuration, before the model is
    built (what other configurations left: the cuBLAS workspaces, which PyTorch takes from the
    caching allocator and keeps, one per cuBLAS handle, i.e. per thread: the forward's and the
    autograd engine's, about 2 x 32 MiB),
  after_build_allocated: after the model and optimizer are built (weights + buffers + baseline),
  step1: {peak_allocated, peak_reserved, peak_requested, end_allocated, end_reserved} of the
    warm-up step (peaks reset at its start),
  allocated_before / reserved_before: memory_allocated / memory_reserved at the start of step 2
    (= weights + buffers + optimizer states + baseline + anything persistent),
  phases: list, in order, of {name, peak_allocated, peak_reserved, peak_requested, peak_active,
    peak_inactive_split, end_allocated, end_reserved, end_requested}; torch.cuda.reset_peak_memory_stats
    is called at the start of step 2 and at every phase boundary, so a phase's peaks are the
    highest values reached while it ran (they include what was already allocated at its start),
  peak_allocated / peak_reserved / peak_requested: the highest of the phases' peaks = the step's
    max_memory_allocated / max_memory_reserved / requested_bytes peak with a reset at its start,
  peak_phase: the phase holding peak_allocated,
  step3: like step1, for step 3; step3_minus_step2_peak; steady: they differ by at most 1 MiB,
  stats (memory_stats at the end of step 2, accumulated counters reset at its start):
    num_alloc_retries, num_ooms, num_device_alloc / num_device_free (cudaMalloc/cudaFree calls in
    the step), num_allocations (allocation.all.allocated in the step), segments
    (segment.all.current), segments_large / segments_small, inactive_split_bytes (current),
    active_bytes (current), requested_bytes (current),
  device_used: total - free from torch.cuda.mem_get_info at the end of step 2 (every byte on the
    GPU, this process being alone on it), non_torch: device_used - memory_reserved (the CUDA
    context, the kernels loaded so far, cuBLAS handles: memory outside the caching allocator),
  time_s: seconds of the 3 steps, wall_s: of the whole configuration, loss (step 2), error / oom
    (when the configuration failed: the row then holds what was reached), run (only with --tag:
    "repeat-inprocess" or "fresh-process" in steps_repeat.jsonl).

Fields of an inference.jsonl row (model.eval(), torch.inference_mode(), one prefill call
model(input_ids, use_cache=True, logits_to_keep=K)): id, kind="inference", model, config_file,
layers, precision "bf16", attn, batch, seq, logits_to_keep (0 = logits of every position),
weights_allocated (memory_allocated before the call), peak_allocated / peak_reserved /
peak_requested (peaks over the call, reset before it), after_allocated (the output still held:
logits + cache), after_cache_allocated (logits dropped, cache held), kv_cache_bytes (nbytes of the
tensors in the returned DynamicCache), kv_cache_tensors, logits_bytes, logits_dtype.

traces.jsonl: one object per traced configuration (step 4 of a training configuration):
  id (the steps.jsonl id), device, phase_sentinels {name: size}: at each phase boundary a
    torch.empty(1 MiB + 512*k bytes, uint8) is allocated and freed at once, k = 1.., so the
    phases can be located in the events (its alloc/free appear with that exact size; it can cost
    one 20 MiB segment in the traced step); fields, the layout of an event:
    [action, addr, size, stream, label] with action one of alloc, free_requested, free_completed,
    segment_alloc, segment_free, segment_map, segment_unmap, oom, snapshot; size is the size the
    caller asked for (unrounded; the block the allocator hands out is rounded up to 512 B or
    more) for alloc/free_*, the segment's size for segment_*; label an index into labels (-1: no
    Python frame, e.g. allocations made by the autograd engine's thread during backward): the 3
    innermost Python frames as 'dir/file.py:line:function' ('validation/gpu_measure.py:function'
    for this script's own frames), innermost first, joined by ' < ', leaving out
    torch.nn.Module's call wrappers. A phase sentinel's alloc marks the END of the phase it is
    named after ('start': the step begins); allocations between the 'start' and 'forward'
    sentinels belong to the forward;
  events, labels, segments_before / segments_after (torch.cuda.memory._snapshot()'s segment map at
    the start and the end of the traced step) as [address, total_size, stream, pool ('large' or
    'small'), allocated_size, requested_size, blocks], blocks as [address, size, requested_size,
    state] with state a (active_allocated), p (active_pending_free) or i (inactive), truncated:
    true if the ring buffer (max_entries 1,000,000) overflowed.

env.json: versions (python, torch, CUDA, cuDNN, transformers, peft, accelerate), GPU name,
capability, multiprocessor count, driver, total memory, allocator settings, the TF32 flags, and
context: the device memory in use (NVML, and torch.cuda.mem_get_info once CUDA is up) before
CUDA is initialised, after torch initialises it (torch.empty(1) on cuda), after the first fp32
and bf16 cuBLAS matmuls, with memory_allocated/memory_reserved at each point (the cuBLAS
workspace is taken from the caching allocator, so it shows in memory_allocated).
"""

import argparse
import gc
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GPU_DIR = "tests/validation/gpu"

# Model name -> (config file relative to the repository, overrides applied to derive it or None)
MODELS = {
    "gpt2": ("tests/data/hf/gpt2.json", None),
    "gpt2-nodrop": (GPU_DIR + "/configs/gpt2-nodropout.json",
                    ("tests/data/hf/gpt2.json", {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0})),
    "qwen2.5-0.5b": ("tests/data/hf/qwen2.5-0.5b.json", None),
    "llama3-8b-2l": (GPU_DIR + "/configs/llama-3-8b-2l.json", ("tests/data/hf/llama-3-8b.json", {"num_hidden_layers": 2})),
    "llama3-8b-4l": (GPU_DIR + "/configs/llama-3-8b-4l.json", ("tests/data/hf/llama-3-8b.json", {"num_hidden_layers": 4})),
    "llama3-8b-8l": (GPU_DIR + "/configs/llama-3-8b-8l.json", ("tests/data/hf/llama-3-8b.json", {"num_hidden_layers": 8})),
    # Whole models, for the full-size campaign (an H200's 141 GB).
    "llama3-8b": ("tests/data/hf/llama-3-8b.json", None),
    "qwen2.5-7b": ("tests/data/hf/qwen2.5-7b.json", None),
    "mistral-7b": ("tests/data/hf/mistral-7b.json", None),
    "qwen3-8b": ("tests/data/hf/qwen3-8b.json", None),
    "phi-3-mini": ("tests/data/hf/phi-3-mini.json", None),
}

LORA_QV = {"r": 8, "alpha": 16, "dropout": 0.0, "targets": ["q_proj", "v_proj"]}
LORA_ALL = {"r": 8, "alpha": 16, "dropout": 0.0, "targets": "all-linear"}


def derived_configs():
    """name -> config dict of the derived config files (written to tests/validation/gpu/configs)."""
    out = {}
    for name, (path, derive) in MODELS.items():
        if derive is None:
            continue
        src, overrides = derive
        with open(os.path.join(ROOT, src)) as f:
            d = json.load(f)
        d.update(overrides)
        out[os.path.basename(path)] = d
    return out


def config_id(c):
    parts = [c["model"], c["precision"], c["optimizer"], "b%ds%d" % (c["batch"], c["seq"]), c["attn"]]
    if c["gc"] != "none":
        parts.append("gc-" + c["gc"])
    if c["accum"] != 1:
        parts.append("acc%d" % c["accum"])
    if c["lora"]:
        t = c["lora"]["targets"]
        parts.append("lora%d-%s" % (c["lora"]["r"], t if isinstance(t, str) else "+".join(t)))
    if c["alloc_conf"] != "default":
        parts.append("expseg")
    return "/".join(parts)


def grid():
    """The training configurations: per model a base, one factor varied at a time, a few combinations."""
    configs = []
    seen = set()

    def add(base, trace=False, **kw):
        c = dict(base)
        c.update(kw)
        c["id"] = config_id(c)
        c["trace"] = trace
        if c["id"] in seen:
            for old in configs:  # a trace request on an existing configuration
                if old["id"] == c["id"]:
                    old["trace"] = old["trace"] or trace
            return
        seen.add(c["id"])
        configs.append(c)

    common = dict(optimizer="adamw", accum=1, gc="none", lora=None, alloc_conf="default")
    opts = ["adamw-fused", "adamw-forloop", "sgd", "sgd-momentum", "adafactor"]

    # Traced cases first: the most valuable if the run is cut off.
    g1 = dict(common, model="gpt2", precision="fp32", batch=1, seq=512, attn="eager")
    add(g1, trace=True)
    l1 = dict(common, model="llama3-8b-2l", precision="bf16", batch=1, seq=1024, attn="sdpa")
    add(l1, trace=True)
    add(l1, trace=True, precision="amp-bf16")
    add(l1, trace=True, gc="nonreentrant")
    add(l1, trace=True, optimizer="sgd-momentum")
    add(l1, trace=True, optimizer="adamw-fused")
    add(l1, trace=True, lora=LORA_QV)

    # Llama-3-8B, 2 layers (real layer shapes): base bf16 AdamW b1 s1024 sdpa.
    for p in ["fp32", "amp-bf16", "amp-fp16"]:
        add(l1, precision=p)
    for o in opts:
        add(l1, optimizer=o)
    add(l1, attn="eager")
    for b in [2, 4]:
        add(l1, batch=b)
    for s in [512, 2048, 4096, 8192]:
        add(l1, seq=s)
    add(l1, gc="reentrant")
    add(l1, accum=2)
    add(l1, lora=LORA_ALL)
    add(l1, lora=LORA_QV, precision="amp-bf16")  # bf16 base + autocast, as HF Trainer bf16=True does
    add(l1, lora=LORA_QV, gc="nonreentrant")
    add(l1, lora=LORA_QV, gc="reentrant")
    add(l1, lora=LORA_ALL, batch=4, seq=2048)
    add(l1, lora=LORA_ALL, batch=4, seq=2048, gc="nonreentrant")
    add(l1, precision="amp-bf16", gc="nonreentrant")
    add(l1, precision="fp32", gc="nonreentrant")
    add(l1, batch=4, seq=4096, gc="nonreentrant")
    add(l1, attn="eager", seq=2048)
    add(l1, precision="fp32", attn="eager")
    add(l1, precision="amp-bf16", optimizer="adamw-fused")
    add(l1, precision="fp32", optimizer="sgd")
    add(l1, accum=2, gc="nonreentrant")
    add(l1, alloc_conf="expandable_segments:True")
    add(l1, alloc_conf="expandable_segments:True", batch=4, seq=2048)
    add(l1, batch=4, seq=2048)
    for s in [2048, 4096]:
        add(l1, precision="amp-bf16", seq=s)
    add(l1, precision="fp32", seq=2048)
    add(l1, batch=2, seq=2048)
    add(l1, batch=8)
    for s in [2048, 8192]:
        add(l1, gc="nonreentrant", seq=s)
    add(l1, attn="eager", seq=4096)

    # Llama-3-8B, 4 layers: layer scaling.
    l4 = dict(l1, model="llama3-8b-4l")
    add(l4)
    add(l4, precision="fp32")
    add(l4, precision="amp-bf16")
    add(l4, gc="nonreentrant")
    add(l4, seq=4096)
    add(l4, lora=LORA_QV)
    add(l4, batch=4, seq=2048)
    l8 = dict(l1, model="llama3-8b-8l")
    add(l8)
    add(l8, precision="amp-bf16")
    add(l8, gc="nonreentrant")
    add(l8, seq=4096)

    # GPT-2 (124M, tied embeddings, dropout 0.1): base fp32 AdamW b4 s1024 sdpa.
    g = dict(common, model="gpt2", precision="fp32", batch=4, seq=1024, attn="sdpa")
    add(g)
    for p in ["bf16", "amp-bf16", "amp-fp16"]:
        add(g, precision=p)
    for o in opts:
        add(g, optimizer=o)
    add(g, attn="eager")
    for b in [1, 2, 8]:
        add(g, batch=b)
    for s in [256, 512]:
        add(g, seq=s)
    add(g, gc="nonreentrant")
    add(g, gc="reentrant")
    add(g, accum=2)
    add(g, precision="amp-bf16", attn="eager")
    add(g, precision="amp-bf16", gc="nonreentrant")
    add(g, precision="bf16", gc="nonreentrant")
    add(g, attn="eager", gc="nonreentrant")
    add(g, attn="eager", batch=8)
    add(g, alloc_conf="expandable_segments:True")
    for b in [1, 8]:
        add(g, precision="bf16", batch=b)
    add(g, precision="amp-bf16", batch=8)
    for s in [256, 512]:
        add(g, attn="eager", seq=s)
    add(g, precision="amp-bf16", gc="reentrant")
    gn = dict(g, model="gpt2-nodrop")
    add(gn)
    add(gn, attn="eager")
    add(gn, precision="amp-bf16")
    add(gn, batch=8, attn="eager", precision="amp-bf16")

    # Qwen2.5-0.5B (tied embeddings, vocab 151936, GQA 14/2): base amp-bf16 AdamW b2 s1024 sdpa.
    q = dict(common, model="qwen2.5-0.5b", precision="amp-bf16", batch=2, seq=1024, attn="sdpa")
    add(q)
    for p in ["fp32", "bf16", "amp-fp16"]:
        add(q, precision=p)
    for o in opts:
        add(q, optimizer=o)
    add(q, attn="eager")
    for b in [1, 4, 8]:
        add(q, batch=b)
    for s in [512, 2048, 4096]:
        add(q, seq=s)
    add(q, gc="nonreentrant")
    add(q, gc="reentrant")
    add(q, accum=2)
    add(q, precision="bf16", gc="nonreentrant")
    add(q, precision="bf16", attn="eager")
    add(q, precision="fp32", gc="nonreentrant")
    add(q, batch=4, seq=2048, gc="nonreentrant")
    add(q, batch=8, seq=2048, gc="nonreentrant", precision="bf16")
    add(q, lora=LORA_QV, precision="bf16")
    add(q, lora=LORA_ALL, precision="bf16")
    add(q, alloc_conf="expandable_segments:True")
    for b in [1, 4]:
        add(q, precision="bf16", batch=b)
    add(q, precision="bf16", seq=4096)
    add(q, precision="fp32", batch=4)
    add(q, alloc_conf="expandable_segments:True", batch=4, seq=2048)
    return configs


# Second campaign: more traces of configurations measured above (re-measured, tagged
# "repeat-inprocess"), and a few configurations re-measured each in a fresh process ("fresh-process")
# to check that running them one after another in one process does not change the numbers.
EXTRA_TRACES = [
    "gpt2/fp32/adamw/b4s1024/sdpa", "gpt2/amp-fp16/adamw/b4s1024/sdpa",
    "qwen2.5-0.5b/amp-bf16/adamw/b2s1024/sdpa", "qwen2.5-0.5b/amp-bf16/adamw/b2s1024/sdpa/gc-nonreentrant",
    "llama3-8b-2l/fp32/adamw/b1s1024/sdpa", "llama3-8b-2l/bf16/adamw/b1s1024/eager",
    "llama3-8b-2l/bf16/adamw/b1s1024/sdpa/acc2", "llama3-8b-2l/bf16/adafactor/b1s1024/sdpa",
    "llama3-8b-2l/bf16/adamw/b1s1024/sdpa/gc-reentrant", "llama3-8b-2l/bf16/adamw/b1s1024/sdpa/lora8-all-linear",
]
# Third campaign (an H200): step 1 traced, from an emptied allocator, so the trace holds every
# segment the step creates: the configurations whose simulated peak reserved was furthest off, and
# two controls (tagged "first-step-trace").
FIRST_STEP_TRACES = [
    "llama3-8b-2l/bf16/adamw/b1s1024/sdpa", "llama3-8b-2l/bf16/adamw/b8s1024/sdpa",
    "llama3-8b-2l/bf16/adamw/b1s8192/sdpa", "qwen2.5-0.5b/bf16/adamw/b2s4096/sdpa",
    "llama3-8b-2l/bf16/adamw/b4s2048/sdpa", "llama3-8b-2l/bf16/adamw/b4s2048/sdpa/expseg",
    "llama3-8b-2l/bf16/sgd-momentum/b1s1024/sdpa", "llama3-8b-2l/bf16/adamw-forloop/b1s1024/sdpa",
    "llama3-8b-2l/bf16/adamw/b4s2048/sdpa/gc-nonreentrant/lora8-all-linear", "gpt2/fp32/adamw/b1s512/eager",
    "llama3-8b-2l/bf16/adamw/b1s4096/eager", "qwen2.5-0.5b/fp32/adamw/b4s1024/sdpa",
    "qwen2.5-0.5b/amp-bf16/adamw/b4s2048/sdpa/expseg", "gpt2/fp32/adamw/b4s1024/sdpa/gc-nonreentrant",
]

# Fifth campaign (an H200): steps 1 to 3 traced as one from an emptied allocator, so a replay
# sees how the first optimizer step's new states reshape the segments the second step reuses.
THREE_STEP_TRACES = [
    "llama3-8b-2l/bf16/adamw/b1s1024/sdpa", "llama3-8b-2l/bf16/adamw/b8s1024/sdpa",
    "llama3-8b-2l/bf16/adamw/b1s8192/sdpa", "qwen2.5-0.5b/bf16/adamw/b2s4096/sdpa",
    "llama3-8b-2l/bf16/adamw/b1s4096/eager", "qwen2.5-0.5b/fp32/adamw/b4s1024/sdpa",
    "llama3-8b/bf16/adamw-fused/b2s4096/sdpa/gc-nonreentrant",
]


def full_size():
    """Fourth campaign (an H200): whole 4-8B models, as people fine-tune them on one big GPU."""
    common = dict(optimizer="adamw", accum=1, gc="none", lora=None, alloc_conf="default", precision="bf16",
                  attn="sdpa", trace=False)
    cases = [
        dict(common, model="llama3-8b", batch=1, seq=2048, trace=True, trace_step=1),
        dict(common, model="llama3-8b", batch=1, seq=4096, gc="nonreentrant", trace=True, trace_step=1),
        dict(common, model="llama3-8b", batch=2, seq=4096, gc="nonreentrant", optimizer="adamw-fused"),
        dict(common, model="llama3-8b", batch=4, seq=4096, gc="nonreentrant", lora=LORA_ALL),
        dict(common, model="qwen2.5-7b", batch=1, seq=4096, gc="nonreentrant"),
        dict(common, model="mistral-7b", batch=1, seq=4096, optimizer="sgd-momentum"),
        dict(common, model="qwen3-8b", batch=1, seq=2048, gc="nonreentrant"),
        dict(common, model="phi-3-mini", batch=1, seq=4096),
        # second call on the same machine
        dict(common, model="phi-3-mini", batch=2, seq=2048, gc="nonreentrant", precision="amp-bf16"),
        dict(common, model="llama3-8b", batch=1, seq=2048, alloc_conf="expandable_segments:True"),
        dict(common, model="qwen2.5-7b", batch=2, seq=2048, gc="nonreentrant", accum=4),
        dict(common, model="llama3-8b", batch=8, seq=2048, gc="nonreentrant", lora=LORA_QV, precision="amp-bf16"),
        dict(common, model="mistral-7b", batch=1, seq=8192, gc="nonreentrant", optimizer="adamw-fused"),
        # third call: the sliding-window rows without a mask (sequence under the window)
        dict(common, model="mistral-7b", batch=1, seq=2048, optimizer="sgd-momentum"),
        dict(common, model="phi-3-mini", batch=2, seq=1024),
    ]
    for c in cases:
        c["id"] = config_id(c)
    return cases


def full_size_inference():
    out = []
    for model in ["llama3-8b", "qwen2.5-7b", "mistral-7b", "phi-3-mini"]:
        # Mistral's 4,096-token and Phi-3's 2,047-token windows: a mask at these lengths; 2,048
        # tokens is under Mistral's window (no mask), the control.
        shapes = [(1, 8192), (8, 4096)] + ([(4, 2048)] if model != "llama3-8b" and model != "qwen2.5-7b" else [])
        for batch, seq in shapes:
            for keep in [1, 0]:
                out.append(dict(model=model, precision="bf16", attn="sdpa", batch=batch, seq=seq, logits_to_keep=keep,
                                id="%s/infer/bf16/b%ds%d/sdpa/keep%d" % (model, batch, seq, keep)))
    return out


FRESH_CHECK = [
    "gpt2/fp32/adamw/b4s1024/sdpa", "gpt2/amp-bf16/adamw/b8s1024/sdpa", "qwen2.5-0.5b/amp-bf16/adamw/b2s1024/sdpa",
    "qwen2.5-0.5b/amp-bf16/adamw/b4s2048/sdpa/gc-nonreentrant", "llama3-8b-2l/bf16/adamw/b1s1024/sdpa",
    "llama3-8b-2l/bf16/adamw/b4s2048/sdpa",
]


def inference_grid():
    out = []
    for model in ["llama3-8b-2l", "qwen2.5-0.5b"]:
        for batch in [1, 8]:
            for seq in [512, 4096]:
                for keep in [1, 0]:
                    c = dict(model=model, precision="bf16", attn="sdpa", batch=batch, seq=seq, logits_to_keep=keep)
                    c["id"] = "%s/infer/bf16/b%ds%d/%s/keep%d" % (model, batch, seq, c["attn"], keep)
                    out.append(c)
    return out


# ----------------------------------------------------------------------------------------------
# Everything below needs torch.

def load_config(model_name):
    import transformers
    path, _ = MODELS[model_name]
    with open(os.path.join(ROOT, path)) as f:
        d = json.load(f)
    model_type = d.pop("model_type")
    for k in ("architectures", "torch_dtype", "dtype"):
        d.pop(k, None)
    return transformers.AutoConfig.for_model(model_type, **d), path


def build_model(model_name, dtype, attn):
    import torch
    import transformers
    config, path = load_config(model_name)
    with torch.device("cuda"):
        try:
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
        except TypeError:
            model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=dtype, attn_implementation=attn)
    got = next(model.parameters()).dtype
    if got != dtype:
        raise RuntimeError("model built in %s, not %s" % (got, dtype))
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != attn:
        raise RuntimeError("attn_implementation is %s, not %s" % (impl, attn))
    return model, config, path


def dropout_of(config):
    return {k: v for k, v in sorted(config.to_dict().items()) if "drop" in k and isinstance(v, (int, float))}


def make_optimizer(name, params):
    import torch
    kw = {
        "adamw": ("AdamW", {"lr": 1e-5}),
        "adamw-fused": ("AdamW", {"lr": 1e-5, "fused": True}),
        "adamw-forloop": ("AdamW", {"lr": 1e-5, "foreach": False}),
        "sgd": ("SGD", {"lr": 1e-5}),
        "sgd-momentum": ("SGD", {"lr": 1e-5, "momentum": 0.9}),
        "adafactor": ("Adafactor", {"lr": 1e-3}),
    }[name]
    cls = getattr(torch.optim, kw[0])
    return cls(params, **kw[1]), {"class": "torch.optim." + kw[0], **kw[1]}


def phase_stats():
    import torch
    s = torch.cuda.memory_stats()
    return {
        "peak_allocated": s.get("allocated_bytes.all.peak", 0),
        "peak_reserved": s.get("reserved_bytes.all.peak", 0),
        "peak_requested": s.get("requested_bytes.all.peak", 0),
        "peak_active": s.get("active_bytes.all.peak", 0),
        "peak_inactive_split": s.get("inactive_split_bytes.all.peak", 0),
        "end_allocated": s.get("allocated_bytes.all.current", 0),
        "end_reserved": s.get("reserved_bytes.all.current", 0),
        "end_requested": s.get("requested_bytes.all.current", 0),
    }


class Phases:
    """Records per-phase peaks (reset at each boundary); optionally drops sentinel allocations."""

    def __init__(self, record, sentinels=None):
        self.record = record
        self.sentinels = sentinels  # dict name -> size when tracing
        self.list = []

    def start(self):
        import torch
        if self.record:
            torch.cuda.reset_peak_memory_stats()
        self._sentinel("start")

    def mark(self, name):
        if self.record:
            import torch
            st = phase_stats()
            st["name"] = name
            self.list.append(st)
            torch.cuda.reset_peak_memory_stats()
        self._sentinel(name)

    def _sentinel(self, name):
        if self.sentinels is None:
            return
        import torch
        size = (1 << 20) + 512 * (len(self.sentinels) + 1)
        self.sentinels[name] = size
        t = torch.empty(size, dtype=torch.uint8, device="cuda")
        del t


def train_step(model, opt, scaler, batches, autocast_dtype, phases):
    import torch
    phases.start()
    n = len(batches)
    last_loss = None
    for i, ids in enumerate(batches):
        suffix = "" if n == 1 else ".%d" % i
        with torch.autocast("cuda", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            loss = model(input_ids=ids, labels=ids).loss / n
        phases.mark("forward" + suffix)
        last_loss = loss.detach()
        if scaler is not None:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        del loss
        phases.mark("backward" + suffix)
    if scaler is not None:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    phases.mark("optimizer")
    opt.zero_grad(set_to_none=True)
    phases.mark("zero_grad")
    return last_loss


def whole_step_stats(phases_list):
    keys = ["peak_allocated", "peak_reserved", "peak_requested"]
    out = {k: max(p[k] for p in phases_list) for k in keys}
    last = phases_list[-1]
    out["end_allocated"] = last["end_allocated"]
    out["end_reserved"] = last["end_reserved"]
    return out


def tensor_bytes(obj, depth=0, seen=None):
    """(bytes, count) of the distinct CUDA tensors reachable from obj through attributes/containers."""
    import torch
    if seen is None:
        seen = set()
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda and obj.data_ptr() not in seen:
            seen.add(obj.data_ptr())
            return obj.untyped_storage().nbytes(), 1
        return 0, 0
    if depth > 4:
        return 0, 0
    items = []
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    elif hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
    total = count = 0
    for it in items:
        b, c = tensor_bytes(it, depth + 1, seen)
        total += b
        count += c
    return total, count


def frame_label(frames, cache):
    key = tuple((f.get("filename", ""), f.get("line", 0), f.get("name", "")) for f in frames[:12])
    if key in cache:
        return cache[key]
    parts = []
    for filename, line, name in key:
        if filename.endswith("torch/nn/modules/module.py") and name in ("_call_impl", "_wrapped_call_impl"):
            continue
        if "contextlib" in filename or filename.startswith("<"):
            continue
        bits = filename.replace("\\", "/").split("/")
        short = "/".join(bits[-2:]) if len(bits) >= 2 else filename
        if filename.endswith("gpu_measure.py"):  # this script: no line number, so labels survive its edits
            parts.append("%s:%s" % (short, name))
        else:
            parts.append("%s:%d:%s" % (short, line, name))
        if len(parts) == 3:
            break
    label = " < ".join(parts)
    cache[key] = label
    return label


def compact_segments(snap):
    codes = {"active_allocated": "a", "active_pending_free": "p", "inactive": "i"}
    out = []
    for seg in snap.get("segments", []):
        blocks = [[b.get("address", 0), b.get("size", 0), b.get("requested_size", 0), codes.get(b.get("state"), b.get("state"))]
                  for b in seg.get("blocks", [])]
        out.append([seg.get("address", 0), seg.get("total_size", 0), seg.get("stream", 0), seg.get("segment_type", ""),
                    seg.get("allocated_size", 0), seg.get("requested_size", 0), blocks])
    out.sort(key=lambda s: s[0])
    return out


def compact_trace(snap, device):
    traces = snap.get("device_traces", [])
    events_in = traces[device] if device < len(traces) else []
    labels = {}
    cache = {}
    events = []
    for e in events_in:
        frames = e.get("frames") or []
        lab = frame_label(frames, cache) if frames else ""
        idx = -1
        if lab:
            idx = labels.setdefault(lab, len(labels))
        events.append([e.get("action"), e.get("addr", 0), e.get("size", 0), e.get("stream", 0), idx])
    label_list = [None] * len(labels)
    for k, v in labels.items():
        label_list[v] = k
    return events, label_list


class TracedStep:
    """Records the allocator's history over one step (when enabled), with its segment map before and after."""

    def __init__(self, enabled):
        self.enabled = enabled

    def __enter__(self):
        import torch
        if self.enabled:
            self.before = torch.cuda.memory._snapshot()  # no history yet: the segments only
            torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                     max_entries=1_000_000)
        return self

    def __exit__(self, *exc):
        import torch
        torch.cuda.synchronize()
        if self.enabled:
            try:
                self.after = torch.cuda.memory._snapshot()
            finally:
                torch.cuda.memory._record_memory_history(enabled=None)
        return False

    def trace(self, config_id, step, sentinels):
        import torch
        dev = torch.cuda.current_device()
        events, labels = compact_trace(self.after, dev)
        out = {"id": config_id, "step": step, "device": dev, "phase_sentinels": sentinels,
               "fields": ["action", "addr", "size", "stream", "label"], "truncated": len(events) >= 1_000_000,
               "segments_before": compact_segments(self.before), "segments_after": compact_segments(self.after),
               "labels": labels, "events": events}
        self.before = self.after = None
        return out


def _train_body(c, args, row, dtype, autocast_dtype):
    """Builds, runs and measures one configuration; its locals (model, optimizer, ...) die on return."""
    import torch
    model = opt = scaler = None
    trace = None
    model, config, path = build_model(c["model"], dtype, c["attn"])
    row["config_file"] = path
    row["layers"] = config.num_hidden_layers
    row["dropout"] = dropout_of(config)
    model.config.use_cache = False
    model.train()
    if c["gc"] != "none":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": c["gc"] == "reentrant"})
    if c["lora"]:
        import peft
        lc = c["lora"]
        if c["gc"] == "reentrant":
            model.enable_input_require_grads()
        model = peft.get_peft_model(model, peft.LoraConfig(r=lc["r"], lora_alpha=lc["alpha"], lora_dropout=lc["dropout"],
                                                          target_modules=lc["targets"], task_type="CAUSAL_LM"))
        model.train()
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    row["params"] = sum(p.numel() for p in params)
    row["trainable_params"] = sum(p.numel() for p in trainable)
    row["param_bytes"] = sum(p.nbytes for p in params)
    row["trainable_param_bytes"] = sum(p.nbytes for p in trainable)
    row["buffer_bytes"] = sum(b.nbytes for b in model.buffers())
    if c["lora"]:
        row["lora_param_dtype"] = sorted({str(p.dtype).replace("torch.", "") for p in trainable})
    opt, row["optimizer_kwargs"] = make_optimizer(c["optimizer"], trainable)
    if c["precision"] == "amp-fp16":
        scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 10)
    vocab = config.vocab_size
    batches = [torch.randint(0, vocab, (c["batch"], c["seq"]), device="cuda") for _ in range(c["accum"])]
    torch.cuda.synchronize()
    row["after_build_allocated"] = torch.cuda.memory_allocated()
    row["after_build_reserved"] = torch.cuda.memory_reserved()

    # Steps 1 to 3 traced as one, from an emptied allocator, when asked (trace_step "1-3").
    span = TracedStep(c["trace"] and c.get("trace_step") == "1-3" and not args.no_traces)
    with span:
        # Step 1: warm-up (traced from here, where the allocator creates its segments, when asked).
        t0 = time.time()
        trace_first = c["trace"] and c.get("trace_step") == 1 and not args.no_traces
        p1 = Phases(True, {} if trace_first else None)
        with TracedStep(trace_first) as recorder:
            train_step(model, opt, scaler, batches, autocast_dtype, p1)
        if trace_first:
            trace = recorder.trace(c["id"], 1, p1.sentinels)
            row["trace_events"] = len(trace["events"])
        row["step1"] = whole_step_stats(p1.list)
        row["scale_after_step1"] = scaler.get_scale() if scaler else None

        # Step 2: measured.
        torch.cuda.reset_accumulated_memory_stats()
        row["allocated_before"] = torch.cuda.memory_allocated()
        row["reserved_before"] = torch.cuda.memory_reserved()
        p2 = Phases(True)
        # grads are measured at the end of the last backward: hook the phase mark
        grad_bytes = {}
        orig_mark = p2.mark

        def mark(name, _orig=orig_mark):
            if name.startswith("backward"):
                grad_bytes["v"] = sum(p.grad.nbytes for p in trainable if p.grad is not None)
            _orig(name)
        p2.mark = mark
        loss = train_step(model, opt, scaler, batches, autocast_dtype, p2)
        torch.cuda.synchronize()
        s = torch.cuda.memory_stats()
        free, total = torch.cuda.mem_get_info()
        row["loss"] = float(loss)
        row["phases"] = p2.list
        row.update(whole_step_stats(p2.list))
        del row["end_allocated"], row["end_reserved"]
        row["peak_phase"] = max(p2.list, key=lambda p: p["peak_allocated"])["name"]
        row["grad_bytes"] = grad_bytes.get("v")
        row["stats"] = {
            "num_alloc_retries": s.get("num_alloc_retries", 0), "num_ooms": s.get("num_ooms", 0),
            "num_device_alloc": s.get("num_device_alloc", 0), "num_device_free": s.get("num_device_free", 0),
            "num_allocations": s.get("allocation.all.allocated", 0),
            "segments": s.get("segment.all.current", 0), "segments_large": s.get("segment.large_pool.current", 0),
            "segments_small": s.get("segment.small_pool.current", 0),
            "inactive_split_bytes": s.get("inactive_split_bytes.all.current", 0),
            "active_bytes": s.get("active_bytes.all.current", 0),
            "requested_bytes": s.get("requested_bytes.all.current", 0),
        }
        row["device_used"] = total - free
        row["non_torch"] = (total - free) - torch.cuda.memory_reserved()
        cuda_state = cpu_state = nstate = 0
        for st in opt.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor):
                    nstate += 1
                    if v.is_cuda:
                        cuda_state += v.nbytes
                    else:
                        cpu_state += v.nbytes
        row["optimizer_state_bytes_cuda"] = cuda_state
        row["optimizer_state_bytes_cpu"] = cpu_state
        row["optimizer_state_tensors"] = nstate
        row["scale_after_step2"] = scaler.get_scale() if scaler else None

        # Step 3: steady-state check.
        p3 = Phases(True)
        train_step(model, opt, scaler, batches, autocast_dtype, p3)
        torch.cuda.synchronize()
        row["step3"] = whole_step_stats(p3.list)
        row["step3_minus_step2_peak"] = row["step3"]["peak_allocated"] - row["peak_allocated"]
        row["steady"] = abs(row["step3_minus_step2_peak"]) <= 1 << 20
        row["time_s"] = round(time.time() - t0, 3)

    if span.enabled:
        trace = span.trace(c["id"], "1-3", {})
        row["trace_events"] = len(trace["events"])
    # Step 4: traced (a steady step: the segments exist already).
    if c["trace"] and c.get("trace_step", 4) == 4 and not args.no_traces:
        p4 = Phases(False, {})
        with TracedStep(True) as recorder:
            train_step(model, opt, scaler, batches, autocast_dtype, p4)
        trace = recorder.trace(c["id"], 4, p4.sentinels)
        row["trace_events"] = len(trace["events"])
    return trace


def run_train(c, args, out_files):
    import torch
    row = {k: c[k] for k in ("id", "model", "precision", "optimizer", "batch", "seq", "accum", "attn", "gc", "lora", "alloc_conf", "trace")}
    if c["trace"]:
        row["trace_step"] = c.get("trace_step", 4)
    row["kind"] = "train"
    dtypes = {"fp32": (torch.float32, None), "bf16": (torch.bfloat16, None),
              "amp-bf16": (torch.float32, torch.bfloat16), "amp-fp16": (torch.float32, torch.float16)}
    dtype, autocast_dtype = dtypes[c["precision"]]
    if c["lora"] and c["precision"] in ("amp-bf16", "amp-fp16"):
        dtype = autocast_dtype  # LoRA: frozen base in the autocast dtype, as HF Trainer users load it
    row["weights_dtype"] = str(dtype).replace("torch.", "")
    row["autocast_dtype"] = str(autocast_dtype).replace("torch.", "") if autocast_dtype else None
    gc.collect()
    torch.cuda.empty_cache()
    if c["alloc_conf"] != "default":
        torch.cuda.memory._set_allocator_settings(c["alloc_conf"])
    torch.manual_seed(0)
    row["baseline_allocated"] = torch.cuda.memory_allocated()
    row["baseline_reserved"] = torch.cuda.memory_reserved()
    t0 = time.time()
    err = None
    trace = None
    try:
        trace = _train_body(c, args, row, dtype, autocast_dtype)
    except torch.cuda.OutOfMemoryError as e:
        err = "OOM: " + str(e).split("\n")[0][:300]
        row["oom"] = True
    except Exception as e:  # a configuration that fails must not stop the campaign
        err = "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:300])
    if err:
        row["error"] = err
        try:
            row["at_error"] = phase_stats()
        except Exception:
            pass
    gc.collect()
    torch.cuda.empty_cache()
    if c["alloc_conf"] != "default":
        torch.cuda.memory._set_allocator_settings("expandable_segments:False")
        torch.cuda.empty_cache()
    row["wall_s"] = round(time.time() - t0, 3)
    if args.tag:
        row["run"] = args.tag
    write_row(out_files["steps"], row)
    if trace is not None:
        write_row(out_files["traces"], trace)
    return row


def run_inference(c, out_files):
    import torch
    row = dict(c)
    row["kind"] = "inference"
    gc.collect()
    torch.cuda.empty_cache()
    torch.manual_seed(0)
    model = ids = out = cache = None
    err = None
    t0 = time.time()
    try:
        model, config, path = build_model(c["model"], torch.bfloat16, c["attn"])
        row["config_file"] = path
        row["layers"] = config.num_hidden_layers
        model.eval()
        ids = torch.randint(0, config.vocab_size, (c["batch"], c["seq"]), device="cuda")
        torch.cuda.synchronize()
        row["weights_allocated"] = torch.cuda.memory_allocated()
        row["reserved_before"] = torch.cuda.memory_reserved()
        torch.cuda.reset_peak_memory_stats()
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=True, logits_to_keep=c["logits_to_keep"])
        torch.cuda.synchronize()
        st = phase_stats()
        row["peak_allocated"] = st["peak_allocated"]
        row["peak_reserved"] = st["peak_reserved"]
        row["peak_requested"] = st["peak_requested"]
        row["after_allocated"] = st["end_allocated"]
        row["logits_bytes"] = out.logits.nbytes
        row["logits_shape"] = list(out.logits.shape)
        row["logits_dtype"] = str(out.logits.dtype).replace("torch.", "")
        cache = out.past_key_values
        row["cache_class"] = type(cache).__name__
        out = None
        row["after_cache_allocated"] = torch.cuda.memory_allocated()
        row["kv_cache_bytes"], row["kv_cache_tensors"] = tensor_bytes(cache)
    except torch.cuda.OutOfMemoryError as e:
        err = "OOM: " + str(e).split("\n")[0][:300]
        row["oom"] = True
    except Exception as e:
        err = "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:300])
    if err:
        row["error"] = err
    del model, ids, out, cache
    gc.collect()
    torch.cuda.empty_cache()
    row["time_s"] = round(time.time() - t0, 3)
    write_row(out_files["inference"], row)
    return row


class LazyFiles:
    """Output files opened (for appending) on their first row, so unused kinds leave no file."""

    def __init__(self, out, names):
        self.out, self.names, self.open = out, names, {}

    def __getitem__(self, key):
        if key not in self.open:
            self.open[key] = open(os.path.join(self.out, self.names[key]), "a")
        return self.open[key]

    def close(self):
        for f in self.open.values():
            f.close()


def write_row(f, row):
    f.write(json.dumps(row, separators=(",", ":")) + "\n")
    f.flush()


def measure_env(out_dir):
    """CUDA context cost and versions. Must run before anything initialises CUDA."""
    env = {"context": []}
    nvml = None
    try:
        import pynvml
        pynvml.nvmlInit()
        nvml = pynvml.nvmlDeviceGetHandleByIndex(0)
        env["driver"] = pynvml.nvmlSystemGetDriverVersion()
        if isinstance(env["driver"], bytes):
            env["driver"] = env["driver"].decode()
    except Exception as e:
        env["nvml_error"] = str(e)

    def nvml_used():
        if nvml is None:
            return None
        import pynvml
        m = pynvml.nvmlDeviceGetMemoryInfo(nvml)
        return {"total": m.total, "used": m.used, "free": m.free}

    import torch
    env["context"].append({"point": "before CUDA init (NVML only)", "nvml": nvml_used()})
    x = torch.empty(1, device="cuda")
    torch.cuda.synchronize()

    def point(name):
        free, total = torch.cuda.mem_get_info()
        env["context"].append({"point": name, "nvml": nvml_used(), "mem_get_info_used": total - free,
                               "memory_allocated": torch.cuda.memory_allocated(),
                               "memory_reserved": torch.cuda.memory_reserved()})
    point("after torch.empty(1, device='cuda')")
    a = torch.randn(256, 256, device="cuda")
    (a @ a).sum().item()
    point("after first fp32 matmul (cuBLAS)")
    b = a.bfloat16()
    (b @ b).sum().item()
    point("after first bf16 matmul")
    lin = torch.nn.functional.linear(b, b, b[0])
    lin.sum().item()
    point("after first bf16 linear with bias (cuBLASLt)")
    del a, b, lin, x
    torch.cuda.empty_cache()
    point("after empty_cache")
    props = torch.cuda.get_device_properties(0)
    env["gpu"] = {"name": props.name, "capability": "%d.%d" % (props.major, props.minor),
                  "multiprocessors": props.multi_processor_count, "total_memory": props.total_memory}
    versions = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version()}
    for mod in ("transformers", "peft", "accelerate", "numpy"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception as e:
            versions[mod] = "unavailable: %s" % e
    env["versions"] = versions
    env["settings"] = {
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING"),
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "allocator_backend": torch.cuda.get_allocator_backend(),
        "adafactor_available": hasattr(torch.optim, "Adafactor"),
    }
    with open(os.path.join(out_dir, "env.json"), "w") as f:
        json.dump(env, f, indent=1)
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output folder")
    ap.add_argument("--list", action="store_true", help="print the grid and exit (no torch needed)")
    ap.add_argument("--smoke", action="store_true", help="3 configurations, 1 trace, 2 inference cases")
    ap.add_argument("--only", help="regex on ids")
    ap.add_argument("--skip-done", help="steps.jsonl/inference.jsonl whose ids are skipped", action="append", default=[])
    ap.add_argument("--deadline", type=float, default=0, help="seconds after which no new configuration starts")
    ap.add_argument("--no-traces", action="store_true")
    ap.add_argument("--no-inference", action="store_true")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--tag", help="value of a 'run' field added to every row (e.g. repeat-inprocess)")
    ap.add_argument("--extra-traces", action="store_true", help="re-measure and trace the EXTRA_TRACES configurations")
    ap.add_argument("--first-step-traces", action="store_true",
                    help="re-measure the FIRST_STEP_TRACES configurations, tracing step 1")
    ap.add_argument("--three-step-traces", action="store_true",
                    help="re-measure the THREE_STEP_TRACES configurations, tracing steps 1 to 3 as one")
    ap.add_argument("--full-size", action="store_true", help="measure the full_size() configurations")
    ap.add_argument("--fresh-check", action="store_true", help="measure each FRESH_CHECK configuration in its own process")
    ap.add_argument("--write-configs", metavar="DIR", help="write the derived config files to DIR and exit (no torch)")
    args = ap.parse_args()

    train = grid()
    infer = inference_grid()
    if args.smoke:
        keep = {"gpt2/fp32/adamw/b1s512/eager", "llama3-8b-2l/bf16/adamw/b1s1024/sdpa/lora8-q_proj+v_proj",
                "qwen2.5-0.5b/amp-fp16/adamw/b2s1024/sdpa"}
        train = [c for c in train if c["id"] in keep]
        infer = infer[:2]
    if args.only:
        rx = re.compile(args.only)
        train = [c for c in train if rx.search(c["id"])]
        infer = [c for c in infer if rx.search(c["id"])]
    done = set()
    for p in args.skip_done:
        if os.path.exists(p):
            with open(p) as f:
                done |= {json.loads(l)["id"] for l in f if l.strip()}
    train = [c for c in train if c["id"] not in done]
    infer = [c for c in infer if c["id"] not in done]
    if args.no_train:
        train = []
    if args.no_inference:
        infer = []
    if args.write_configs:
        os.makedirs(args.write_configs, exist_ok=True)
        for name, d in derived_configs().items():
            with open(os.path.join(args.write_configs, name), "w") as f:
                f.write(json.dumps(d, indent=2) + "\n")
        return 0
    if args.extra_traces:
        train = [dict(c, trace=True) for c in train if c["id"] in EXTRA_TRACES]
        infer = []
    if args.first_step_traces:
        train = [dict(c, trace=True, trace_step=1) for c in train if c["id"] in FIRST_STEP_TRACES]
        infer = []
    if args.three_step_traces:
        train = [dict(c, trace=True, trace_step="1-3") for c in grid() + full_size() if c["id"] in THREE_STEP_TRACES]
        infer = []
    if args.full_size:
        rx = re.compile(args.only or "")
        train = [c for c in full_size() if rx.search(c["id"]) and c["id"] not in done]
        infer = [c for c in full_size_inference() if rx.search(c["id"]) and c["id"] not in done and not args.no_inference]
    if args.fresh_check:
        if not args.out:
            ap.error("--out is required")
        for cid in FRESH_CHECK:
            subprocess.run([sys.executable, os.path.abspath(__file__), "--out", args.out, "--only", "^" + re.escape(cid) + "$",
                            "--no-inference", "--no-traces", "--tag", "fresh-process"], check=False)
        return 0
    if args.list:
        for c in train:
            print(c["id"] + ("  [trace]" if c["trace"] else ""))
        for c in infer:
            print(c["id"])
        print("%d training, %d inference" % (len(train), len(infer)), file=sys.stderr)
        return 0
    if not args.out:
        ap.error("--out is required")
    os.makedirs(args.out, exist_ok=True)
    start = time.time()
    env = measure_env(args.out)
    print("env:", json.dumps(env["versions"]), env["gpu"]["name"], flush=True)
    import transformers
    transformers.logging.set_verbosity_error()
    files = LazyFiles(args.out, {"steps": "steps.jsonl", "traces": "traces.jsonl", "inference": "inference.jsonl"})
    skipped = []
    for i, c in enumerate(train):
        if args.deadline and time.time() - start > args.deadline:
            skipped.append(c["id"])
            continue
        r = run_train(c, args, files)
        print("[%3d/%d %6.1fs] %-70s peak %8.1f MiB reserved %8.1f MiB %s%s" % (
            i + 1, len(train), time.time() - start, c["id"], r.get("peak_allocated", 0) / 2**20,
            r.get("peak_reserved", 0) / 2**20, "steady " if r.get("steady") else "", r.get("error", "")), flush=True)
    for i, c in enumerate(infer):
        if args.deadline and time.time() - start > args.deadline:
            skipped.append(c["id"])
            continue
        r = run_inference(c, files)
        print("[inf %2d/%d %6.1fs] %-60s peak %8.1f MiB kv %8.1f MiB %s" % (
            i + 1, len(infer), time.time() - start, c["id"], r.get("peak_allocated", 0) / 2**20,
            r.get("kv_cache_bytes", 0) / 2**20, r.get("error", "")), flush=True)
    files.close()
    print("done in %.1fs; skipped %d (deadline): %s" % (time.time() - start, len(skipped), " ".join(skipped)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
