#!/usr/bin/python3
"""The bytes alive during Hugging Face's eager attention in a prefill (no autograd), operator by
operator, traced on the CPU with a TorchDispatchMode: what `vramfit infer --attention eager`
counts (include/vramfit/inference.hpp eager_attention_bytes, tests/unit/inference_test.cpp).

The operators are those of transformers 5.x models/llama/modeling_llama.py eager_attention_forward
(read in modeling_qwen3.py, its copy, and modeling_llama.py), called in its order on operands of
its shapes: repeat_kv of K and V, matmul(query, key_states.transpose(2, 3)) * scaling, + the
4D causal mask, nn.functional.softmax(..., dtype=torch.float32).to(query.dtype), dropout in eval,
matmul with V, transpose(1, 2).contiguous(). ATen's softmax(input, dim, dtype) converts the input
to fp32 before _softmax unless it is CUDA fp16 (aten/src/ATen/native/SoftMax.cpp: the
half_to_float kernel is taken only for `input_.is_cuda() && input_.scalar_type() ==
ScalarType::Half`), so bf16 and fp32 take the same path here as on a GPU; fp16 is not traced.

Run: /usr/bin/python3 tests/validation/eager_prefill_trace.py > tests/validation/eager_prefill_trace.txt
(Debian's python3-torch 1.13; the softmax code above is the same in torch 2.11.)
"""
import math
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map


class Live:
    """Bytes of the storages alive, each counted once however many tensors view it."""

    def __init__(self):
        self.storages = {}  # data_ptr -> [bytes, tensors alive, label]
        self.now = 0
        self.peak = 0
        self.at_peak = []

    def track(self, t, label):
        key = t.storage().data_ptr()
        if key not in self.storages:
            self.storages[key] = [t.storage().nbytes(), 0, label]
            self.now += self.storages[key][0]
            if self.now > self.peak:
                self.peak = self.now
                self.at_peak = sorted((s[2], s[0]) for s in self.storages.values())
        self.storages[key][1] += 1
        weakref.finalize(t, self.release, key)

    def release(self, key):
        entry = self.storages[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.now -= entry[0]
            del self.storages[key]


class Trace(TorchDispatchMode):
    def __init__(self, live):
        super().__init__()
        self.live = live

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket.__name__)

        def track(t):
            if isinstance(t, torch.Tensor):
                self.live.track(t, f"{name} {list(t.shape)} {str(t.dtype)[6:]}")
            return t

        tree_map(track, out)
        return out


def repeat_kv(hidden_states, n_rep):
    batch, kv_heads, length, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    expanded = hidden_states[:, :, None, :, :].expand(batch, kv_heads, n_rep, length, head_dim)
    return expanded.reshape(batch, kv_heads * n_rep, length, head_dim)


def trace(dtype, batch=2, heads=8, kv_heads=2, tokens=64, head_dim=16):
    live = Live()
    query = torch.randn(batch, heads, tokens, head_dim).to(dtype)
    key = torch.randn(batch, kv_heads, tokens, head_dim).to(dtype)
    value = torch.randn(batch, kv_heads, tokens, head_dim).to(dtype)
    causal = torch.full((tokens, tokens), torch.finfo(dtype).min).triu(1)
    mask = causal[None, None].expand(batch, 1, tokens, tokens).contiguous().to(dtype)
    for t, label in ((query, "query"), (key, "key (the cache's)"), (value, "value (the cache's)"),
                     (mask, "4D causal mask")):
        live.track(t, f"{label} {list(t.shape)} {str(t.dtype)[6:]}")
    before = live.now
    with torch.no_grad(), Trace(live):
        key_states = repeat_kv(key, heads // kv_heads)
        value_states = repeat_kv(value, heads // kv_heads)
        attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * head_dim**-0.5
        attn_weights = attn_weights + mask[:, :, :, : key_states.shape[-2]]
        attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1,
                                                   dtype=torch.float32).to(query.dtype)
        attn_weights = torch.nn.functional.dropout(attn_weights, p=0.0, training=False)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
    del attn_output, attn_weights, key_states, value_states
    scores = batch * heads * tokens * tokens
    width = torch.tensor([], dtype=dtype).element_size()
    print(f"== {str(dtype)[6:]}: batch {batch}, {heads} heads ({kv_heads} KV heads), "
          f"{tokens} tokens, head_dim {head_dim}; scores {scores} elements")
    print(f"alive before the call (query, the cache's K and V, the mask): {before} B")
    print(f"peak during the call: {live.peak} B, {live.peak - before} B above")
    print("alive at the peak:")
    for label, size in live.at_peak:
        print(f"  {size:>8} B  {label}")
    repeated = 2 * batch * heads * tokens * head_dim * width if kv_heads < heads else 0
    per_score = (live.peak - before - repeated) / scores
    print(f"above the inputs, less the repeated K and V ({repeated} B): "
          f"{per_score:g} B per score element")
    return live.peak - before - repeated, scores


if __name__ == "__main__":
    torch.manual_seed(0)
    for dtype in (torch.bfloat16, torch.float32):
        trace(dtype)
        print()
