#!/usr/bin/env python3
"""Records what autograd saves in each decoder layer of real Hugging Face models on a CUDA GPU.

saved_tensors.py measures hand-written blocks on the CPU; this one runs transformers' own modules
with the GPU's kernels, for the cases where the kernel that runs decides what is saved: SDPA with
an attention mask (a sliding window the sequence reaches makes Hugging Face pass one, so the
memory-efficient kernel runs, K and V are repeated, and the mask is converted to an additive bias
that the kernel keeps), and projections whose outputs stay alive through views (Phi-3's fused
qkv_proj and gate_up_proj).

Protocol: the model is built from its config.json with num_hidden_layers overridden, on the GPU
with random weights; one forward (labels given, as in training) runs under
torch.autograd.graph.saved_tensors_hooks; each saved storage counts once, for the decoder layer
whose forward first saved it (forward pre-hooks set the layer; None outside the layers), leaving
out parameters and buffers. Per layer it writes the storages (bytes, dtype, shape of the first
tensor saved from it, the name of its producer's grad_fn) and the attention kernel that ran (the
ScaledDotProduct*Backward node reached from the layer's output).

Usage (needs a CUDA GPU, torch and transformers):
    python3 tests/validation/saved_tensors_hf.py > OUT.json
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_measure as gm  # noqa: E402

# (model, layers, batch, seq, dtype)
CASES = [
    ("phi-3-mini", 3, 1, 4096, "bf16"),    # window 2047 < 4096: a mask
    ("phi-3-mini", 3, 1, 1024, "bf16"),    # no mask
    ("mistral-7b", 3, 1, 4096, "bf16"),    # window 4096 = kv length: a mask
    ("mistral-7b", 3, 2, 4096, "bf16"),
    ("mistral-7b", 3, 1, 2048, "bf16"),    # no mask
    ("mistral-7b", 3, 1, 4096, "fp32"),
    ("llama3-8b", 3, 1, 4096, "bf16"),     # no window: the control
]


def kernel_names(t, depth=12):
    names, stack, seen = set(), [(t.grad_fn, 0)], set()
    while stack:
        fn, d = stack.pop()
        if fn is None or id(fn) in seen or d > depth:
            continue
        seen.add(id(fn))
        if "ScaledDotProduct" in type(fn).__name__ or "Bmm" in type(fn).__name__:
            names.add(type(fn).__name__)
        stack.extend((nxt, d + 1) for nxt, _ in fn.next_functions)
    return sorted(names)


def run(model_name, layers, batch, seq, dtype_name):
    import torch
    import transformers
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    config, path = gm.load_config(model_name)
    config.num_hidden_layers = layers
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    model.config.use_cache = False
    model.train()
    excluded = {p.untyped_storage().data_ptr() for p in model.parameters()}
    excluded |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    current = {"layer": None}
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        ptr = s.data_ptr()
        if ptr not in excluded and ptr not in seen:
            seen[ptr] = {"layer": current["layer"], "bytes": s.nbytes(), "dtype": str(t.dtype).replace("torch.", ""),
                         "shape": list(t.shape), "producer": type(t.grad_fn).__name__ if t.grad_fn else None}
        return t

    kernels = {}
    handles = []
    def enter(i):
        def hook(module, args):
            current["layer"] = i
        return hook

    def leave(i):
        def hook(module, args, out):  # returns None: the output stays as it is
            kernels[i] = kernel_names(out[0] if isinstance(out, tuple) else out)
            current["layer"] = None
        return hook

    for i, layer in enumerate(model.model.layers):
        handles.append(layer.register_forward_pre_hook(enter(i)))
        handles.append(layer.register_forward_hook(leave(i)))
    ids = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(input_ids=ids, labels=ids).loss
    torch.cuda.synchronize()
    for h in handles:
        h.remove()
    per_layer = [[] for _ in range(layers)]
    outside = []
    for v in seen.values():
        (per_layer[v["layer"]] if v["layer"] is not None else outside).append(v)
    del loss, model
    torch.cuda.empty_cache()
    return {"model": model_name, "config_file": path, "layers": layers, "batch": batch, "seq": seq, "dtype": dtype_name,
            "sliding_window": getattr(config, "sliding_window", None),
            "kernels": [kernels.get(i) for i in range(layers)],
            "per_layer_bytes": [sum(x["bytes"] for x in L) for L in per_layer],
            "per_layer": per_layer, "outside_layers": outside}


def main():
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    out = {"torch": torch.__version__, "transformers": transformers.__version__,
           "device": torch.cuda.get_device_name(0), "cases": []}
    for case in CASES:
        try:
            r = run(*case)
        except Exception as e:
            r = {"case": list(case), "error": "%s: %s" % (type(e).__name__, str(e)[:300])}
        out["cases"].append(r)
        print(case, r.get("per_layer_bytes"), r.get("kernels"), r.get("error", ""), file=sys.stderr, flush=True)
    json.dump(out, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
