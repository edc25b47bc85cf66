#!/usr/bin/env python3
"""Measures peak GPU memory of training and inference steps, for comparison with vramfit.

Builds Hugging Face models from config.json files (random weights, nothing downloaded), runs one
step per configuration of a grid (batch, sequence, precision, optimizer, recompute, LoRA when
peft is installed) and records torch.cuda.max_memory_allocated and max_memory_reserved after
torch.cuda.reset_peak_memory_stats, with vramfit's prediction for the same configuration when
the `vramfit` tool is given. Writes JSON lines to stdout.

Needs a CUDA GPU, torch and transformers. No GPU was lent to the sessions that wrote it, so its
results are not committed yet; run it on one:

    python3 tests/validation/gpu_measure.py --vramfit build/examples/cli/vramfit \\
        > tests/validation/gpu_measurements.jsonl
"""

import argparse
import itertools
import json
import subprocess
import sys

import torch
import transformers

CONFIGS = ["tests/data/hf/qwen2.5-0.5b.json", "tests/data/hf/gpt2.json"]
PRECISIONS = {"fp32": (torch.float32, None), "bf16": (torch.bfloat16, None), "amp-bf16": (torch.float32, torch.bfloat16)}


def step(config_path, precision, optimizer_name, batch, seq, recompute):
    config = transformers.AutoConfig.from_pretrained(config_path)
    dtype, autocast = PRECISIONS[precision]
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
    if recompute:
        model.gradient_checkpointing_enable()
    model.config.use_cache = False
    optimizer = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[optimizer_name](model.parameters(), lr=1e-5)
    ids = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    with torch.autocast("cuda", dtype=autocast, enabled=autocast is not None):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    result = {"allocated": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.max_memory_reserved()}
    del model, optimizer, loss
    torch.cuda.empty_cache()
    return result


def predict(vramfit, config_path, precision, optimizer_name, batch, seq, recompute):
    names = {"fp32": "fp32", "bf16": "bf16", "amp-bf16": "amp-bf16"}
    out = subprocess.run([vramfit, "train", "--model", config_path, "--precision", names[precision],
                          "--optimizer", optimizer_name, "--micro-batch", str(batch), "--seq-len", str(seq),
                          "--attention", "eager", "--recompute", "full" if recompute else "none",
                          "--format", "json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["memory"]["total"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vramfit", help="path to the vramfit tool, for predictions")
    args = parser.parse_args()
    grid = itertools.product(CONFIGS, PRECISIONS, ["adamw", "sgd"], [1, 4], [512, 2048], [False, True])
    for config_path, precision, optimizer_name, batch, seq, recompute in grid:
        row = {"config": config_path, "precision": precision, "optimizer": optimizer_name, "batch": batch,
               "seq": seq, "recompute": recompute, "torch": torch.__version__,
               "device": torch.cuda.get_device_name()}
        try:
            row.update(step(config_path, precision, optimizer_name, batch, seq, recompute))
        except torch.cuda.OutOfMemoryError:
            row["oom"] = True
            torch.cuda.empty_cache()
        if args.vramfit:
            row["vramfit_total"] = predict(args.vramfit, config_path, precision, optimizer_name, batch, seq, recompute)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    sys.exit(main())
