#!/usr/bin/env python3
"""Measures what PyTorch autograd saves for backward in GPT-2-style and Llama-style blocks.

Each block is written here the way Hugging Face's eager implementations compute it (GPT-2 with
a fused QKV projection, LayerNorm, softmax in the activation dtype, dropout, a tanh GELU; Llama
with HF's RMSNorm, rotary embeddings, repeat_kv, an fp32 softmax and SwiGLU), so that the
measurement tests vramfit's per-operator ledger rather than a framework's version drift.

torch.autograd.graph.saved_tensors_hooks records every tensor saved during a layer's forward;
tensors are deduplicated by storage across the whole model, and parameters and module buffers
are left out. A storage counts for the layer in whose forward it was first saved, so tensors
shared by all layers (the rotary tables) land in layer 0; the middle layer is the per-layer
figure. Runs on the CPU: PyTorch's CPU dropout keeps its mask in the input's dtype, where CUDA
keeps one byte per element (vramfit models CUDA by default; the comparison sets the mask width).

Usage: /usr/bin/python3 tests/validation/saved_tensors.py > tests/validation/saved_tensors.json
(Debian's python3-torch; no GPU and no network needed.)
"""

import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def storage_key(t):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr(), s.nbytes() if hasattr(s, "nbytes") else s.size() * t.element_size()


class Recorder:
    """Attributes each saved storage to the layer being run when it is first saved."""

    def __init__(self, excluded):
        self.excluded = excluded  # storages of parameters and buffers
        self.seen = {}
        self.layer = None

    def pack(self, t):
        ptr, nbytes = storage_key(t)
        if ptr not in self.excluded and ptr not in self.seen:
            self.seen[ptr] = (self.layer, nbytes)
        return t

    def per_layer(self, layers):
        out = [0] * layers
        for layer, nbytes in self.seen.values():
            if layer is not None:
                out[layer] += nbytes
        return out


class GPT2Block(nn.Module):
    def __init__(self, h, a, f, dropout):
        super().__init__()
        self.h, self.a = h, a
        self.ln_1 = nn.LayerNorm(h)
        self.c_attn = nn.Linear(h, 3 * h)
        self.c_proj = nn.Linear(h, h)
        self.ln_2 = nn.LayerNorm(h)
        self.c_fc = nn.Linear(h, f)
        self.mlp_proj = nn.Linear(f, h)
        self.p = 0.1 if dropout else 0.0

    def forward(self, x, mask):
        b, s, h = x.shape
        d = h // self.a
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.a, d).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        scores = torch.where(mask, scores, torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype))
        probs = F.softmax(scores, dim=-1)
        if self.p > 0:
            probs = F.dropout(probs, self.p, training=True)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h)
        out = self.c_proj(ctx)
        if self.p > 0:
            out = F.dropout(out, self.p, training=True)
        x = x + out
        y = self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        if self.p > 0:
            y = F.dropout(y, self.p, training=True)
        return x + y


class RMSNorm(nn.Module):
    def __init__(self, h, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    b, kv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)


class LlamaBlock(nn.Module):
    def __init__(self, h, heads, kv, d, f):
        super().__init__()
        self.heads, self.kv, self.d = heads, kv, d
        self.input_layernorm = RMSNorm(h)
        self.q_proj = nn.Linear(h, heads * d, bias=False)
        self.k_proj = nn.Linear(h, kv * d, bias=False)
        self.v_proj = nn.Linear(h, kv * d, bias=False)
        self.o_proj = nn.Linear(heads * d, h, bias=False)
        self.post_attention_layernorm = RMSNorm(h)
        self.gate_proj = nn.Linear(h, f, bias=False)
        self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)

    def forward(self, x, mask, cos, sin):
        b, s, _ = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.k_proj(y).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v_proj(y).view(b, s, self.kv, self.d).transpose(1, 2)
        c, sn = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * c + rotate_half(q) * sn
        k = k * c + rotate_half(k) * sn
        k = repeat_kv(k, self.heads // self.kv)
        v = repeat_kv(v, self.heads // self.kv)
        scores = torch.matmul(q, k.transpose(2, 3)) * (self.d ** -0.5) + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        probs = F.dropout(probs, p=0.0, training=True)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, -1)
        x = x + self.o_proj(ctx)
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


def measure(family, cfg, dtype, layers=3):
    torch.manual_seed(0)
    h, s, b = cfg["hidden"], cfg["seq"], cfg["batch"]
    if family == "gpt2":
        blocks = nn.ModuleList(GPT2Block(h, cfg["heads"], cfg["ffn"], cfg["dropout"]) for _ in range(layers))
    else:
        blocks = nn.ModuleList(
            LlamaBlock(h, cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["ffn"]) for _ in range(layers))
    blocks = blocks.to(dtype)
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool)).view(1, 1, s, s)
    excluded = {storage_key(p)[0] for p in blocks.parameters()} | {storage_key(causal)[0]}
    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    extra = {}
    if family == "llama":
        d = cfg["head_dim"]
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        freqs = torch.outer(torch.arange(s, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        extra["cos"] = emb.cos()[None].expand(b, s, d).to(dtype).contiguous()
        extra["sin"] = emb.sin()[None].expand(b, s, d).to(dtype).contiguous()
        mask = torch.zeros(1, 1, s, s, dtype=dtype).masked_fill(~causal, torch.finfo(dtype).min)
        excluded.add(storage_key(mask)[0])
    recorder = Recorder(excluded)
    with torch.autograd.graph.saved_tensors_hooks(recorder.pack, lambda t: t):
        out = x
        for i, block in enumerate(blocks):
            recorder.layer = i
            out = block(out, causal) if family == "gpt2" else block(out, mask, extra["cos"], extra["sin"])
        recorder.layer = None
        out.float().sum().backward()
    per_layer = recorder.per_layer(layers)
    return {"family": family, **cfg, "dtype": str(dtype).replace("torch.", ""),
            "layers": layers, "per_layer_bytes": per_layer, "middle_layer_bytes": per_layer[layers // 2]}


GPT2_GRID = [
    {"hidden": 64, "heads": 4, "ffn": 256, "seq": 32, "batch": 2, "dropout": True},
    {"hidden": 64, "heads": 4, "ffn": 256, "seq": 32, "batch": 2, "dropout": False},
    {"hidden": 128, "heads": 8, "ffn": 512, "seq": 64, "batch": 1, "dropout": True},
    {"hidden": 96, "heads": 6, "ffn": 384, "seq": 48, "batch": 3, "dropout": False},
]
LLAMA_GRID = [
    {"hidden": 64, "heads": 8, "kv_heads": 2, "head_dim": 8, "ffn": 176, "seq": 32, "batch": 2},
    {"hidden": 128, "heads": 8, "kv_heads": 8, "head_dim": 16, "ffn": 352, "seq": 64, "batch": 1},
    {"hidden": 96, "heads": 6, "kv_heads": 3, "head_dim": 16, "ffn": 256, "seq": 48, "batch": 2},
    {"hidden": 64, "heads": 4, "kv_heads": 1, "head_dim": 32, "ffn": 192, "seq": 40, "batch": 3},
]


def main():
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        rows += [measure("gpt2", cfg, dtype) for cfg in GPT2_GRID]
        rows += [measure("llama", cfg, dtype) for cfg in LLAMA_GRID]
    json.dump({"torch": torch.__version__, "device": "cpu", "measurements": rows}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
