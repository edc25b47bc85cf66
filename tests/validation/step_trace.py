#!/usr/bin/env python3
"""Traces every device storage allocated and freed during two whole training steps of small
Hugging Face-faithful Llama and GPT-2 models (tests/validation/step_models.py), as the CUDA
caching allocator would see them: each storage rounded up to 512 bytes.

How: a TorchDispatchMode sees every ATen operator's outputs (forward, the autograd engine's
backward kernels and AccumulateGrad's steal/add_, the optimizer, zero_grad); a new storage is an
allocation, keyed by its StorageImpl and watched through a storage weak reference, whose expiry
(checked before every operator and at every phase change) is the free. Parameters, buffers and
optimizer states that exist before a step are its "alive at start". Layer boundaries come from the
decoder layers' calls in forward and from gradient hooks on the layer outputs in backward.

Step 1 creates the optimizer states; step 2 is the steady state whose events are committed. On
the CPU (Debian's PyTorch 1.13) the CUDA kernels' allocations are emulated where they differ
(docs/step-trace.md lists each); with --native on a CUDA machine the real torch 2.x functions run
and the tracer also compares itself with torch.cuda.memory_allocated() after every operator.

Usage (docs/step-trace.md):
  /usr/bin/python3 tests/validation/step_trace.py                 # all cases -> step_traces.json
  /usr/bin/python3 tests/validation/step_trace.py --cases lora    # only these cases, the others kept
  python3 tests/validation/step_trace.py --native --out cuda.json         # on a GPU, torch >= 2.5
  python3 tests/validation/step_trace.py --native --hf --out hf.json      # transformers' own models
  /usr/bin/python3 tests/validation/step_trace.py --merge-cuda cuda.json --merge-hf hf.json
  /usr/bin/python3 tests/validation/step_trace.py --compare a.json b.json # event by event
"""

import argparse
import contextlib
import gc
import json
import os
import sys
import time

try:
    import torch
except ImportError:  # pragma: no cover
    sys.exit("step_trace.py needs PyTorch: apt-get install python3-torch, then run it with /usr/bin/python3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_models as sm  # noqa: E402

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402

# torch 1.13 names of operators whose torch 2.11 name differs (same allocations)
OP_ALIASES = {"norm": "linalg_vector_norm"}

# cumsum's scan buffer measured on an H100 (torch 2.11) for an int64 [batch, seq] input
CUMSUM_WORKSPACE = {(2, 64): 1024, (1, 128): 2560}

def norm_workspace(args):
    """The reduction's staging buffer and semaphores, measured on an H100 (torch 2.11) for the
    16-bit tensors of the committed Adafactor cases: a whole-tensor norm of 131072 elements or more
    takes 1024 B, a norm over dim -2 of 1024 rows or more 1049088 B; smaller ones none."""
    x = args[0]
    dims = args[2] if len(args) > 2 and args[2] is not None else list(range(x.dim()))
    dims = sorted(d % x.dim() for d in dims)
    if dims == list(range(x.dim())):  # torch 1.13 gives p.norm(2) every dimension
        return 1024 if x.numel() >= 131072 else 0
    if dims == [x.dim() - 2] and x.shape[-2] >= 1024:
        return 1049088
    return 0


BLOCK = 512  # CUDACachingAllocator: kMinBlockSize, every request rounded up to a multiple of 512 B


def block_bytes(n):
    return 0 if n == 0 else (n + BLOCK - 1) // BLOCK * BLOCK


def untyped(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()._storage


def flatten(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            flatten(y, out)
    return out


class Rec:
    __slots__ = ("sid", "key", "ref", "ptr", "nbytes", "bytes", "op", "module", "phase", "mb", "region",
                 "step", "kind", "recompute", "alloc_ev", "free_ev", "emulated")


class Tracer(TorchDispatchMode):
    def __init__(self, device_type, cuda_check=False):
        super().__init__()
        self.device_type = device_type
        self.cuda_check = cuda_check
        self.live = {}
        self.recs = []
        self.events = []  # (sid, sign, bytes, phase, mb, region, op, module, alive_after, step, extra)
        self.alive = 0
        self.step = 0
        self.phase, self.mb, self.region = "setup", 0, "model"
        self.modules = []
        self.untracked_depth = 0
        self.labels = []
        self.recompute_depth = 0
        self.param_keys = set()
        self.cuda_offset = 0
        self.cuda_diffs = []
        self.workspaces = []

    # ---- storages ------------------------------------------------------------------------
    def _new_rec(self, st, nbytes, accounted, op, kind):
        r = Rec()
        r.sid = len(self.recs)
        r.key = st._cdata
        r.ref = StorageWeakRef(st)
        r.ptr = st.data_ptr()
        r.nbytes = nbytes
        r.bytes = accounted
        r.op = op
        r.module = self.modules[-1] if self.modules else ""
        r.phase, r.mb, r.region, r.step = self.phase, self.mb, self.region, self.step
        r.kind = kind
        r.recompute = self.recompute_depth > 0
        r.alloc_ev = r.free_ev = None
        r.emulated = accounted != block_bytes(nbytes)
        self.recs.append(r)
        self.live[r.key] = r
        return r

    def register(self, t, kind):
        """A storage that exists before the traced steps (parameters, buffers)."""
        if t is None or t.device.type != self.device_type:
            return
        st = untyped(t)
        if st._cdata in self.live or st.nbytes() == 0:
            return
        r = self._new_rec(st, st.nbytes(), block_bytes(st.nbytes()), kind, kind)
        r.phase = "setup"
        self.alive += r.bytes
        if kind == "param":
            self.param_keys.add(r.key)

    def workspace(self, op, nbytes):
        """A buffer a CUDA kernel takes from the caching allocator and returns before it ends."""
        if nbytes <= 0 or self.untracked_depth:
            return
        self.poll()
        r = Rec()
        r.sid, r.key, r.ref, r.ptr, r.nbytes, r.bytes = len(self.recs), None, None, 0, nbytes, block_bytes(nbytes)
        r.op, r.module = op, self.modules[-1] if self.modules else ""
        r.phase, r.mb, r.region, r.step = self.phase, self.mb, self.region, self.step
        r.kind, r.recompute, r.emulated = "workspace", self.recompute_depth > 0, True
        self.recs.append(r)
        r.alloc_ev = self._event(r, +1)
        r.free_ev = self._event(r, -1)

    def _event(self, r, sign, extra=None):
        self.alive += sign * r.bytes
        ev = (r.sid, sign, r.bytes, self.phase, self.mb, self.region, r.op, r.module, self.alive, self.step, extra)
        self.events.append(ev)
        return len(self.events) - 1

    def _free(self, r):
        del self.live[r.key]
        r.free_ev = self._event(r, -1)

    def poll(self):
        for r in [r for r in self.live.values() if r.ref.expired()]:
            self._free(r)

    def track(self, t, op, func=None, idx=0, args=()):
        if t.device.type != self.device_type:
            return
        st = untyped(t)
        nbytes = st.nbytes()
        if nbytes == 0:
            return
        key = st._cdata
        r = self.live.get(key)
        if r is not None:
            if r.ref.expired() or r.ptr != st.data_ptr() or r.nbytes != nbytes:
                self._free(r)  # a freed StorageImpl's address reused, or a resize
            else:
                return  # a view, an in-place result or an alias
        accounted = block_bytes(nbytes)
        kind = "input" if self.region == "inputs" else "act"
        if func is not None:
            name = func.overloadpacket.__name__
            if (sm.emulating() and name == "native_layer_norm" and idx in (1, 2)
                    and t.dtype in (torch.bfloat16, torch.float16)):
                accounted = block_bytes(t.numel() * 4)  # E2: CUDA keeps fp32 mean and rstd
            if name == "_to_copy" and args and isinstance(args[0], torch.Tensor) \
                    and args[0].device.type == self.device_type and untyped(args[0])._cdata in self.param_keys:
                kind = "cast"
        r = self._new_rec(st, nbytes, accounted, op, kind)
        r.alloc_ev = self._event(r, +1)

    # ---- dispatch ---------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.untracked_depth:
            return func(*args, **kwargs)
        self.poll()
        if self.cuda_check:
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            n_before = len(self.events)
        out = func(*args, **kwargs)
        if isinstance(out, (int, float)) and func.overloadpacket.__name__ == "detach":
            # torch 1.13: detaching a saved wrapped number (a Python scalar operand kept by mul for
            # backward) under saved_tensors_hooks comes back from the boxed call as a Python number
            with self.untracked():
                return torch.tensor(out, dtype=args[0].dtype)
        name = func.overloadpacket.__name__
        op = self.labels[-1] if self.labels else OP_ALIASES.get(name, name) if sm.emulating() else name
        for i, t in enumerate(flatten(out, [])):
            self.track(t, op, func, i, args)
        if sm.emulating() and name == "_softmax_backward_data":
            # E11: CUDA's softmax backward takes a buffer of grad_output's size (seen on an H100)
            self.workspace("_softmax_backward_data workspace", args[0].numel() * args[0].element_size())
        if sm.emulating() and name in ("norm", "linalg_vector_norm"):
            self.workspace("linalg_vector_norm workspace", norm_workspace(args))
        if sm.emulating() and name == "cumsum":
            # E11: the scan's buffer, measured on an H100 for the mask's [batch, seq] cumsum
            self.workspace("cumsum workspace", CUMSUM_WORKSPACE.get(tuple(args[0].shape), 0))
        if self.cuda_check:
            peak = torch.cuda.max_memory_allocated()
            new = sum(e[2] for e in self.events[n_before:] if e[1] > 0)
            ws = peak - before - new
            if ws > 0:
                self.workspaces.append((len(self.events) - 1, self.step, self.phase, str(self.region),
                                        func.overloadpacket.__name__, ws))
                self.workspace(func.overloadpacket.__name__ + " workspace", ws)  # a measured event
            diff = torch.cuda.memory_allocated() - self.cuda_offset - self.alive
            if diff != 0:
                self.cuda_diffs.append((len(self.events) - 1, self.step, self.phase, str(self.region),
                                        func.overloadpacket.__name__, diff))
                self.cuda_offset += diff  # report each untracked allocation once
        return out

    # ---- contexts used by step_models -------------------------------------------------------
    @contextlib.contextmanager
    def untracked(self):
        self.untracked_depth += 1
        try:
            yield
        finally:
            self.untracked_depth -= 1

    @contextlib.contextmanager
    def label(self, name):
        self.labels.append(name)
        try:
            yield
        finally:
            self.labels.pop()

    @contextlib.contextmanager
    def recompute(self):
        self.recompute_depth += 1
        try:
            yield
        finally:
            self.recompute_depth -= 1

    def set_phase(self, phase, mb=None, region=None):
        self.poll()  # frees before the change belong to the phase that ends
        self.phase = phase
        if mb is not None:
            self.mb = mb
        if region is not None:
            self.region = region

    def set_region(self, region):
        self.poll()
        self.region = region


# ------------------------------------------------------------------------------------------------
# Hooks: module names, regions in forward, gradient hooks for regions in backward
# ------------------------------------------------------------------------------------------------
def install_hooks(tracer, model):
    layers = list(model.decoder_layers())
    layer_ids = {id(m): i for i, m in enumerate(layers)}
    prefix = {}
    for i, layer in enumerate(layers):
        for name, m in layer.named_modules():
            prefix[id(m)] = name
    if hasattr(model, "head_regions"):  # an encoder's classification head (BERT's pooler, ...)
        named_regions = {id(m): r for m, r in model.head_regions().items()}
    else:
        final_norm = model.final_norm()
        named_regions = {id(final_norm): "norm", id(model.lm_head): "head"}
    handles = []

    def pre(m, inp):
        name = prefix.get(id(m))
        if name is None:
            name = type(m).__name__
        tracer.modules.append(name)
        if id(m) in named_regions and tracer.phase == "forward":
            tracer.set_region(named_regions[id(m)])

    def post(m, inp, out):
        tracer.modules.pop()
        if id(m) in named_regions and tracer.phase == "forward" and torch.is_grad_enabled():
            region = named_regions[id(m)]
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(lambda g, r=region: tracer.set_region(r))

    for m in model.modules():
        if m is model:
            continue
        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post))

    def layer_input(m, x):
        i = layer_ids[id(m)]
        if tracer.phase == "forward":
            tracer.set_region(i)
            if i == 0 and torch.is_grad_enabled() and x.requires_grad:
                x.register_hook(lambda g: tracer.set_region("embedding"))

    def layer_output(m, out):
        i = layer_ids[id(m)]
        if tracer.phase == "forward":
            tracer.set_region("model")
            if torch.is_grad_enabled() and out.requires_grad:
                out.register_hook(lambda g, i=i: tracer.set_region(i))

    if getattr(model, "is_hf", False):  # transformers' own layers: module hooks instead
        for layer in layers:
            handles.append(layer.register_forward_pre_hook(
                lambda m, a, kw: layer_input(m, a[0] if a else kw["hidden_states"]), with_kwargs=True))
            handles.append(layer.register_forward_hook(lambda m, a, out: layer_output(m, out)))
    sm.HOOKS.layer_input = layer_input
    sm.HOOKS.layer_output = layer_output
    sm.HOOKS.untracked = tracer.untracked
    sm.HOOKS.label = tracer.label
    sm.HOOKS.recompute = tracer.recompute
    sm.HOOKS.workspace = tracer.workspace

    loss_fn = model.loss_function

    def traced_loss(*args, **kwargs):
        tracer.set_phase("loss", region="loss")
        return loss_fn(*args, **kwargs)

    model.loss_function = traced_loss
    return handles


# ------------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------------
LLAMA = dict(family="llama", hidden=128, intermediate=352, heads=4, kv_heads=2, head_dim=32, layers=3, vocab=1024)
PHI3 = dict(LLAMA, family="phi3")
# Gemma 2: tied, head_dim apart from hidden / heads, soft-capping as google/gemma-2-* (50, 30)
GEMMA2 = dict(family="gemma2", hidden=128, intermediate=352, heads=4, kv_heads=2, head_dim=48, layers=3, vocab=1024,
              tied=True, attn_softcap=50.0, final_softcap=30.0)
# Gemma 3: Gemma 2's shapes without soft-capping (Gemma3TextConfig's default), q_norm and k_norm
GEMMA3 = dict(GEMMA2, family="gemma3", attn_softcap=0.0, final_softcap=0.0)
# Mixtral (transformers 5): Llama's attention and norms, a sparse MoE block of 4 experts with top-2
# routing; MixtralConfig's intermediate_size is the experts' width
MIXTRAL = dict(LLAMA, family="mixtral", intermediate=256, moe_experts=4, moe_top_k=2, moe_intermediate=256)
# Qwen3-MoE (transformers 5): Qwen3's attention (q_norm, k_norm), Mixtral's packed experts and shapes,
# Qwen3MoeTopKRouter with norm_topk_prob (Qwen3-30B-A3B's config)
QWEN3MOE = dict(MIXTRAL, family="qwen3_moe", qk_norm=True)
# gpt-oss (transformers 5): biased attention with per-head sinks, eager only; one sliding and one full
# layer (the window longer than the sequence: only the masks differ); GptOssTopKRouter over
# GptOssExperts (transposed packed weights with biases, grouped_mm); the experts' width equals hidden
GPTOSS = dict(family="gpt_oss", hidden=128, intermediate=128, heads=4, kv_heads=2, head_dim=32, layers=2, vocab=1024,
              moe_experts=4, moe_top_k=2, moe_intermediate=128, attention_bias=True, sliding_window=128)
# DeepSeek-V3 (transformers 5): MLA (q_lora_rank, kv_lora_rank, nope 32 + rope 16 for Q and K,
# V 32), one dense layer (first_k_dense_replace), then DeepseekV3MoE: 8 routed experts of width 64
# in 2 groups (topk_group 1), top-2, one shared expert; head_dim is qk_rope_head_dim
DEEPSEEK3 = dict(family="deepseek_v3", hidden=128, intermediate=352, heads=4, kv_heads=4, head_dim=16, layers=3,
                 vocab=1024, q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=32, v_head_dim=32,
                 first_k_dense_replace=1, moe_experts=8, moe_top_k=2, moe_intermediate=64, moe_shared_experts=1,
                 n_group=2, topk_group=1)
# DeepSeek-V2 (transformers 5): DeepSeek-V3's MLA shapes (q_lora_rank, kv_lora_rank, nope 32 + rope
# 16, V 32) with the complex rotary, one dense layer (first_k_dense_replace), then DeepseekV2Moe: 8
# routed experts of width 64 in 4 groups (topk_group 2, group_limited_greedy: DeepSeek-V2's
# topk_method), top-2, two shared experts (DeepSeek-V2's n_shared_experts), softmax routing without
# renormalization, routed_scaling_factor 16 (DeepSeek-V2's config.json)
DEEPSEEK2 = dict(DEEPSEEK3, family="deepseek_v2", moe_shared_experts=2, n_group=4, topk_group=2,
                 routed_scaling_factor=16.0, topk_method="group_limited_greedy")
# Qwen2 / Qwen2.5 (modeling_qwen2.py): Llama's block with biases on q_proj, k_proj and v_proj;
# use_sliding_window false (Qwen2.5's configs): every layer full_attention
QWEN2 = dict(LLAMA, family="qwen2")
# Mistral (modeling_mistral.py, Mistral-7B-v0.1's config): Llama's block, sliding_window 4096 on every
# layer (create_sliding_window_causal_mask)
MISTRAL = dict(LLAMA, family="mistral", sliding_window=4096)
# Falcon (modeling_falcon.py, Falcon-7B's config): parallel attention and MLP behind one LayerNorm,
# multi-query (one K/V head) from a fused query_key_value, rotary, GELU MLP of 4 x hidden, no biases, tied
FALCON = dict(family="falcon", hidden=128, intermediate=512, heads=4, kv_heads=1, head_dim=32, layers=3, vocab=1024,
              tied=True)
# Falcon-40B/180B (new_decoder_architecture): grouped K/V heads (num_kv_heads) in the fused
# query_key_value, two LayerNorms over the same input (ln_attn, ln_mlp), parallel attention and MLP
FALCON40 = dict(family="falcon", hidden=128, intermediate=512, heads=8, kv_heads=2, head_dim=16, layers=3, vocab=1024,
                tied=True, new_decoder_architecture=True)
# BERT (modeling_bert.py) as BertForSequenceClassification: post-LN, three biased projections,
# GELU MLP of 4 x hidden, token types, pooler and a 2-label classifier; dropout 0.1 (BertConfig's
# hidden_dropout_prob and attention_probs_dropout_prob), untied (no MLM head)
BERT = dict(family="bert", hidden=128, intermediate=512, heads=4, kv_heads=4, head_dim=32, layers=3, vocab=1024,
            dropout=0.1, ln_eps=1e-12)
# DistilBERT (modeling_distilbert.py) as DistilBertForSequenceClassification: BERT's block without
# token types, pooler or the dropout after the attention's out_lin; pre_classifier, ReLU, dropout
DISTILBERT = dict(BERT, family="distilbert")
# ViT (torchvision's VisionTransformer): 64 x 64 images in 8 x 8 patches (64 patches and the class
# token), pre-LN, MultiheadAttention's packed in_proj, GELU MLP of 4 x hidden, 10 classes; dropout
# 0 (torchvision's default)
VIT = dict(family="vit", hidden=128, intermediate=512, heads=4, kv_heads=4, head_dim=32, layers=3, vocab=0,
           image_size=64, patch_size=8, num_labels=10)
ENCODERS = ("bert", "distilbert", "vit")
GPT2 = dict(family="gpt2", hidden=128, intermediate=512, heads=4, kv_heads=4, head_dim=32, layers=3, vocab=1024,
            tied=True, dropout=0.1)


def case(name, model, precision, optimizer, impl, batch=2, seq=64, ckpt="none", accum=1, lora=None,
         keep_grads=False, qlora=False, **over):
    m = dict(model)
    m.update(over)
    return dict(name=name, model=m, precision=precision, optimizer=optimizer, impl=impl, batch=batch, seq=seq,
                checkpointing=ckpt, accumulation=accum, lora=lora, keep_grads=keep_grads, qlora=qlora)


LORA = dict(r=8, alpha=16, targets=["q_proj", "v_proj"], adapter_dtype="float32")
LORA_ALL = dict(LORA, targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])

CASES = [
    case("llama-gqa-fp32-adamw-foreach", LLAMA, "fp32", "adamw", "foreach"),
    case("llama-gqa-bf16-adamw-foreach", LLAMA, "bf16", "adamw", "foreach"),
    case("llama-gqa-amp-adamw-foreach", LLAMA, "amp_bf16", "adamw", "foreach"),
    case("llama-gqa-amp-adamw-forloop", LLAMA, "amp_bf16", "adamw", "for-loop"),
    case("llama-gqa-amp-adamw-fused", LLAMA, "amp_bf16", "adamw", "fused"),
    case("llama-gqa-bf16-sdpa-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", attn="sdpa"),
    case("llama-gqa-amp-sdpa-adamw-fused", LLAMA, "amp_bf16", "adamw", "fused", attn="sdpa"),
    case("llama-mqa-b1-bf16-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", batch=1, seq=128, kv_heads=1),
    case("llama-tied-amp-sgd-foreach", LLAMA, "amp_bf16", "sgd", "foreach", tied=True),
    case("llama-gqa-bf16-sgd-forloop", LLAMA, "bf16", "sgd", "for-loop"),
    case("llama-gqa-bf16-adafactor-foreach", LLAMA, "bf16", "adafactor", "foreach"),
    case("llama-gqa-amp-ckpt-nonreentrant-adamw-foreach", LLAMA, "amp_bf16", "adamw", "foreach", ckpt="non_reentrant"),
    case("llama-gqa-amp-ckpt-reentrant-adamw-foreach", LLAMA, "amp_bf16", "adamw", "foreach", ckpt="reentrant"),
    case("llama-gqa-bf16-accum2-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", accum=2),
    case("llama-gqa-bf16-lora-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", lora=LORA),
    case("llama-gqa-amp-lora-ckpt-nonreentrant-adamw-foreach", LLAMA, "amp_bf16", "adamw", "foreach",
         ckpt="non_reentrant", lora=LORA),
    # LoRA on every linear of the layers (peft's target_modules "all-linear" for Llama), without
    # and with checkpointing
    case("llama-gqa-bf16-lora-all-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", lora=LORA_ALL),
    case("llama-gqa-amp-lora-all-ckpt-nonreentrant-adamw-foreach", LLAMA, "amp_bf16", "adamw", "foreach",
         ckpt="non_reentrant", lora=LORA_ALL),
    case("llama-gqa-bf16-lora-all-v256-s128-sgd-foreach", LLAMA, "bf16", "sgd", "foreach", seq=128, vocab=256,
         lora=LORA_ALL),
    case("gpt2-dropout-fp32-adamw-foreach", GPT2, "fp32", "adamw", "foreach"),
    case("gpt2-dropout-amp-adamw-foreach", GPT2, "amp_bf16", "adamw", "foreach"),
    case("gpt2-dropout-bf16-adafactor-forloop", GPT2, "bf16", "adafactor", "for-loop"),
    case("gpt2-b1-bf16-sgd-foreach", GPT2, "bf16", "sgd", "foreach", batch=1, seq=128, dropout=0.0),
    case("gpt2-dropout-amp-ckpt-reentrant-adamw-forloop", GPT2, "amp_bf16", "adamw", "for-loop", ckpt="reentrant"),
    case("gpt2-dropout-bf16-accum2-adamw-fused", GPT2, "bf16", "adamw", "fused", accum=2),
    # a small vocabulary and long sequences: the activations, not the logits, decide the peak
    case("llama-gqa-bf16-v256-s128-sgd-foreach", LLAMA, "bf16", "sgd", "foreach", seq=128, vocab=256),
    case("gpt2-dropout-amp-v256-s128-adamw-forloop", GPT2, "amp_bf16", "adamw", "for-loop", seq=128, vocab=256),
    # Gemma 2 as transformers recommends training it (eager), with SDPA (which drops the attention
    # soft-capping), under AMP, and with a small vocabulary where the layers decide the peak
    case("gemma2-bf16-adamw-foreach", GEMMA2, "bf16", "adamw", "foreach"),
    case("gemma2-bf16-sdpa-adamw-foreach", GEMMA2, "bf16", "adamw", "foreach", attn="sdpa"),
    case("gemma2-amp-adamw-fused", GEMMA2, "amp_bf16", "adamw", "fused"),
    case("gemma2-bf16-v256-s128-sgd-foreach", GEMMA2, "bf16", "sgd", "foreach", seq=128, vocab=256),
    # Gemma 3 eager in bf16, and with SDPA under AMP
    case("gemma3-bf16-adamw-foreach", GEMMA3, "bf16", "adamw", "foreach"),
    case("gemma3-amp-sdpa-adamw-fused", GEMMA3, "amp_bf16", "adamw", "fused", attn="sdpa"),
    # LoRA on another family's module names: peft's default for GPT-2 (c_attn), and c_fc
    case("gpt2-dropout-bf16-lora-adamw-foreach", GPT2, "bf16", "adamw", "foreach",
         lora=dict(LORA, targets=["c_attn", "c_fc"])),
    # QLoRA: every layer linear in NF4 (double quantization), LoRA on all of them, as QLoRA trains;
    # one sequence of 64 tokens, fewer than the hidden size: a dequantized weight outweighs a
    # row-sized gradient, as at 8B and 2,048 tokens
    case("llama-gqa-bf16-qlora-all-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", lora=LORA_ALL, qlora=True),
    case("llama-gqa-bf16-qlora-all-b1-v256-sgd-foreach", LLAMA, "bf16", "sgd", "foreach", batch=1, vocab=256,
         lora=LORA_ALL, qlora=True),
    case("llama-gqa-bf16-qlora-all-ckpt-nonreentrant-adamw-foreach", LLAMA, "bf16", "adamw", "foreach",
         ckpt="non_reentrant", lora=LORA_ALL, qlora=True),
    # Qwen3: Llama with per-head q_norm and k_norm (modeling_qwen3.py), eager and SDPA
    case("qwen3-bf16-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", qk_norm=True),
    case("qwen3-amp-sdpa-adamw-fused", LLAMA, "amp_bf16", "adamw", "fused", attn="sdpa", qk_norm=True),
    # Phi-3: fused qkv_proj and gate_up_proj, V a view of qkv_proj's output, a rotary ending in cat
    case("phi3-bf16-sdpa-adamw-foreach", PHI3, "bf16", "adamw", "foreach", attn="sdpa"),
    case("phi3-bf16-adamw-foreach", PHI3, "bf16", "adamw", "foreach"),
    # Other frameworks' own Llama 3 blocks (vramfit's --model-code), SDPA in bf16 with the
    # rotary tables sized to the sequence; Hugging Face's embedding, head and loss around them
    case("torchtune-bf16-sdpa-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", attn="sdpa", code="torchtune",
         max_positions=64),
    case("torchtune-bf16-sdpa-v256-s128-sgd-foreach", LLAMA, "bf16", "sgd", "foreach", attn="sdpa",
         code="torchtune", seq=128, vocab=256, max_positions=128),
    case("litgpt-bf16-sdpa-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", attn="sdpa", code="litgpt",
         max_positions=64),
    case("litgpt-bf16-sdpa-v256-s128-sgd-foreach", LLAMA, "bf16", "sgd", "foreach", attn="sdpa", code="litgpt",
         seq=128, vocab=256, max_positions=128),
    case("torchtitan2024-bf16-sdpa-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", attn="sdpa",
         code="torchtitan-2024", max_positions=64),
    case("torchtitan2024-bf16-sdpa-v256-s128-sgd-foreach", LLAMA, "bf16", "sgd", "foreach", attn="sdpa",
         code="torchtitan-2024", seq=128, vocab=256, max_positions=128),
    # Megatron-Core's Transformer Engine layers (TE's fused norm-and-linear, fused RoPE, cuDNN fused
    # attention, the compiled SwiGLU) with Megatron's own embedding layout, output layer and
    # vocab-parallel cross-entropy (not Hugging Face's loss)
    # torchtitan's current code (b5bcd76): Llama 3 (fused QKV, ComplexRoPE rows gathered per layer, nn.RMSNorm's
    # fused kernel, flex attention with grouped K/V), Qwen3 (qk_norm, CosSinRoPE) and Qwen3-MoE (models/common/moe.py)
    case("torchtitan-bf16-flex-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", attn="flex", code="torchtitan",
         max_positions=64),
    case("torchtitan-bf16-flex-v256-s128-sgd-foreach", LLAMA, "bf16", "sgd", "foreach", attn="flex",
         code="torchtitan", seq=128, vocab=256, max_positions=128),
    case("torchtitan-qwen3-bf16-flex-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", attn="flex",
         code="torchtitan", qk_norm=True, max_positions=64),
    case("torchtitan-qwen3moe-bf16-flex-adamw-foreach", QWEN3MOE, "bf16", "adamw", "foreach", attn="flex",
         code="torchtitan", max_positions=64),
    case("torchtitan-qwen3moe-bf16-flex-v256-s128-sgd-foreach", QWEN3MOE, "bf16", "sgd", "foreach", attn="flex",
         code="torchtitan", seq=128, vocab=256, max_positions=128),
    # torchtitan's DeepSeek-V3 (models/deepseek_v3 at b5bcd76): MLA with flex attention, a dense first
    # layer, then MoE with the sigmoid group-limited router and one shared expert
    case("torchtitan-deepseek3-bf16-flex-adamw-foreach", DEEPSEEK3, "bf16", "adamw", "foreach", attn="flex",
         code="torchtitan", max_positions=64),
    case("torchtitan-deepseek3-bf16-flex-v256-s128-sgd-foreach", DEEPSEEK3, "bf16", "sgd", "foreach", attn="flex",
         code="torchtitan", seq=128, vocab=256, max_positions=128),
    # its DeepSeek-V2 shapes (the _236b flavor): the softmax router without route_norm, route_scale 16,
    # group-limited, two shared experts
    case("torchtitan-deepseek2-bf16-flex-adamw-foreach", DEEPSEEK2, "bf16", "adamw", "foreach", attn="flex",
         code="torchtitan", max_positions=64),
    case("torchtitan-deepseek2-bf16-flex-v256-s128-sgd-foreach", DEEPSEEK2, "bf16", "sgd", "foreach", attn="flex",
         code="torchtitan", seq=128, vocab=256, max_positions=128),
    case("megatron-te-bf16-sdpa-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", attn="sdpa",
         code="megatron-te", max_positions=64),
    case("megatron-te-bf16-sdpa-v256-s128-sgd-foreach", LLAMA, "bf16", "sgd", "foreach", attn="sdpa",
         code="megatron-te", seq=128, vocab=256, max_positions=128),
    # Megatron-Core's MoE layer (E21) as its Mixtral recipe trains it: TopKRouter with the aux loss,
    # the alltoall dispatcher at EP 1 (torch permute), TEGroupedMLP (TE GroupedLinear, weighted
    # SwiGLU); and Qwen3-MoE's (--qk-layernorm, aux loss 1e-3)
    case("megatron-te-mixtral-bf16-sdpa-adamw-foreach", MIXTRAL, "bf16", "adamw", "foreach", attn="sdpa",
         code="megatron-te", max_positions=64),
    case("megatron-te-mixtral-bf16-sdpa-v256-s128-sgd-foreach", MIXTRAL, "bf16", "sgd", "foreach", attn="sdpa",
         code="megatron-te", seq=128, vocab=256, max_positions=128),
    case("megatron-te-qwen3moe-bf16-sdpa-adamw-foreach", QWEN3MOE, "bf16", "adamw", "foreach", attn="sdpa",
         code="megatron-te", max_positions=64),
    # Mixtral with transformers 5's packed experts: grouped_mm (the default) with eager attention and
    # with SDPA, under AMP (the experts in fp32: _grouped_mm is not autocast-enabled), with a small
    # vocabulary where the layers decide the peak, and the experts' own loop ("eager")
    case("mixtral-bf16-adamw-foreach", MIXTRAL, "bf16", "adamw", "foreach"),
    case("mixtral-bf16-sdpa-adamw-foreach", MIXTRAL, "bf16", "adamw", "foreach", attn="sdpa"),
    case("mixtral-amp-sdpa-adamw-fused", MIXTRAL, "amp_bf16", "adamw", "fused", attn="sdpa"),
    case("mixtral-bf16-v256-s128-sgd-foreach", MIXTRAL, "bf16", "sgd", "foreach", seq=128, vocab=256),
    case("mixtral-eager-experts-bf16-sdpa-sgd-foreach", MIXTRAL, "bf16", "sgd", "foreach", attn="sdpa",
         experts_impl="eager"),
    # Qwen3-MoE: the grouped_mm experts behind Qwen3MoeTopKRouter, with SDPA in bf16 and under AMP,
    # and eager attention with a small vocabulary where the layers decide the peak
    case("qwen3moe-bf16-sdpa-adamw-foreach", QWEN3MOE, "bf16", "adamw", "foreach", attn="sdpa"),
    case("qwen3moe-amp-sdpa-adamw-fused", QWEN3MOE, "amp_bf16", "adamw", "fused", attn="sdpa"),
    case("qwen3moe-bf16-v256-s128-sgd-foreach", QWEN3MOE, "bf16", "sgd", "foreach", seq=128, vocab=256),
    # gpt-oss: eager attention with sinks (it trains with eager), grouped_mm experts with biases, in
    # bf16, under AMP, and with a small vocabulary where the layers decide the peak
    case("gptoss-bf16-adamw-foreach", GPTOSS, "bf16", "adamw", "foreach"),
    case("gptoss-amp-adamw-fused", GPTOSS, "amp_bf16", "adamw", "fused"),
    case("gptoss-bf16-v256-s128-sgd-foreach", GPTOSS, "bf16", "sgd", "foreach", seq=128, vocab=256,
         sliding_window=256),
    # DeepSeek-V3: MLA with eager attention (SDPA's CUDA kernel for qk_head_dim != v_head_dim is not
    # emulated), a dense layer and two MoE layers with a shared expert and group-limited sigmoid
    # routing, in bf16, under AMP, and with a small vocabulary where the layers decide the peak
    case("deepseek3-bf16-adamw-foreach", DEEPSEEK3, "bf16", "adamw", "foreach"),
    case("deepseek3-amp-adamw-fused", DEEPSEEK3, "amp_bf16", "adamw", "fused"),
    case("deepseek3-bf16-v256-s128-sgd-foreach", DEEPSEEK3, "bf16", "sgd", "foreach", seq=128, vocab=256),
    # DeepSeek-V2: MLA (complex rotary) with eager attention, a dense layer and two DeepseekV2Moe layers
    # (softmax routing, group_limited_greedy; greedy, V2-Lite's, in the v256-s128 case, where the layers
    # decide the peak), two shared experts
    case("deepseek2-bf16-adamw-foreach", DEEPSEEK2, "bf16", "adamw", "foreach"),
    case("deepseek2-bf16-v256-s128-sgd-foreach", DEEPSEEK2, "bf16", "sgd", "foreach", seq=128, vocab=256,
         topk_method="greedy"),
    # Qwen2 / Qwen2.5: Llama with q/k/v biases, SDPA in bf16 and eager under AMP
    case("qwen2-bf16-sdpa-adamw-foreach", QWEN2, "bf16", "adamw", "foreach", attn="sdpa"),
    case("qwen2-amp-adamw-fused", QWEN2, "amp_bf16", "adamw", "fused"),
    # Mistral: every layer windowed (4096, longer than the sequence: the eager mask is built from the
    # sliding-window function, SDPA gets none)
    case("mistral-bf16-adamw-foreach", MISTRAL, "bf16", "adamw", "foreach"),
    case("mistral-bf16-sdpa-adamw-foreach", MISTRAL, "bf16", "adamw", "foreach", attn="sdpa"),
    # Falcon-7B's block: eager in bf16 and under AMP, SDPA under AMP (the math kernel: one K/V
    # head without enable_gqa), and a small vocabulary where the layers decide the peak
    case("falcon-bf16-adamw-foreach", FALCON, "bf16", "adamw", "foreach"),
    case("falcon-amp-adamw-foreach", FALCON, "amp_bf16", "adamw", "foreach"),
    case("falcon-amp-sdpa-adamw-fused", FALCON, "amp_bf16", "adamw", "fused", attn="sdpa"),
    case("falcon-bf16-v256-s128-sgd-foreach", FALCON, "bf16", "sgd", "foreach", seq=128, vocab=256),
    # Falcon-40B's block (new_decoder_architecture): eager in bf16 and under AMP, SDPA under AMP
    # (every head in K and V after _split_heads: cuDNN), and a small vocabulary
    case("falcon40-bf16-adamw-foreach", FALCON40, "bf16", "adamw", "foreach"),
    case("falcon40-amp-adamw-foreach", FALCON40, "amp_bf16", "adamw", "foreach"),
    case("falcon40-amp-sdpa-adamw-fused", FALCON40, "amp_bf16", "adamw", "fused", attn="sdpa"),
    case("falcon40-bf16-v256-s128-sgd-foreach", FALCON40, "bf16", "sgd", "foreach", seq=128, vocab=256),
    # BERT as a sequence classifier: eager with dropout in bf16 and under AMP, SDPA (cuDNN, no
    # dropout: the emulation has none) under AMP, and a longer sequence with a small vocabulary
    case("bert-dropout-bf16-adamw-foreach", BERT, "bf16", "adamw", "foreach"),
    case("bert-dropout-amp-adamw-fused", BERT, "amp_bf16", "adamw", "fused"),
    case("bert-amp-sdpa-adamw-fused", BERT, "amp_bf16", "adamw", "fused", attn="sdpa", dropout=0.0),
    case("bert-dropout-bf16-v256-s128-sgd-foreach", BERT, "bf16", "sgd", "foreach", seq=128, vocab=256),
    # DistilBERT as a sequence classifier: eager in bf16, SDPA under AMP, a longer sequence
    case("distilbert-dropout-bf16-adamw-foreach", DISTILBERT, "bf16", "adamw", "foreach"),
    case("distilbert-amp-sdpa-adamw-fused", DISTILBERT, "amp_bf16", "adamw", "fused", attn="sdpa", dropout=0.0),
    case("distilbert-dropout-amp-v256-s128-sgd-foreach", DISTILBERT, "amp_bf16", "sgd", "foreach", seq=128,
         vocab=256),
    # ViT: SDPA (MultiheadAttention's training path) in bf16 and under AMP, and 96 x 96 images
    # (145 tokens); seq is the patches and the class token
    case("vit-bf16-adamw-foreach", VIT, "bf16", "adamw", "foreach", seq=65),
    case("vit-amp-adamw-fused", VIT, "amp_bf16", "adamw", "fused", seq=65),
    case("vit-i96-bf16-sgd-foreach", VIT, "bf16", "sgd", "foreach", seq=145, image_size=96),
    # zero_grad(set_to_none=False), torch < 2.0's default: the gradients stay between steps and
    # each backward adds its new ones into them. BERT as Hugging Face's Trainer of then ran it
    # (fp32, for-loop AdamW), Llama over two micro-batches, and a tied head under AMP
    case("bert-dropout-fp32-keepgrads-adamw-forloop", BERT, "fp32", "adamw", "for-loop", keep_grads=True),
    case("llama-gqa-bf16-accum2-keepgrads-adamw-foreach", LLAMA, "bf16", "adamw", "foreach", accum=2,
         keep_grads=True),
    case("llama-tied-amp-keepgrads-sgd-foreach", LLAMA, "amp_bf16", "sgd", "foreach", tied=True,
         keep_grads=True),
]


KINDS = {
    "param": "a parameter (alive before the step)",
    "buffer": "a module buffer (alive before the step)",
    "input": "input ids or labels moved to the device at the start of a micro-batch",
    "state": "an optimizer state created in the step and alive at its end (step 1 only)",
    "grad": "a gradient that becomes a parameter's .grad (AccumulateGrad steals it)",
    "cast": "an autocast copy of a parameter (cached until the autocast region exits, or per use)",
    "transient": "freed in the same phase and micro-batch",
    "saved": "allocated in forward or loss and freed in a later phase (saved for backward, or the logits "
             "and labels kept until the loss)",
    "kept": "allocated in backward or later and freed in a later phase or step",
    "recompute": "allocated by a checkpoint recomputation in backward",
    "recompute-kept": "allocated by a checkpoint recomputation and alive at the end of the step",
    "workspace": "a buffer a CUDA kernel takes and returns inside one operator (emulated or measured)",
}

EMULATIONS = {
    "E1": "dropout: native_dropout with a bool mask (CPU composite keeps a mask in the input dtype)",
    "E2": "native_layer_norm on 16-bit input: fp32 mean and rstd (CPU keeps 16-bit statistics)",
    "E3": "mean(dim) saves only sizes, as torch 2.x (torch 1.13 also saved its input)",
    "E4": "softmax(fp16, dtype=fp32) half_to_float on CUDA; bf16 converts as on the CPU (no change)",
    "E5": "CUDA autocast op lists, weight-cast cache and right-to-left argument casts",
    "E6": "scaled_dot_product_attention: cuDNN attention outputs, saved tensors and workspaces",
    "E7": "torch 2.11 optimizers (AdamW, SGD, Adafactor; foreach and for-loop); step counters on the host",
    "E8": "fused AdamW: in-place update, fp32 step counters on the device",
    "E9": "torch 2.11 checkpointing (reentrant and non-reentrant with early stop); RNG states on the host",
    "E10": "full slices (x[:, :, None], x[:, 0:, :], x[:, 0]) are no-ops as in torch 2.x",
    "E11": "kernel workspaces measured on CUDA: _softmax_backward_data (grad_output's size), cumsum, norm",
    "E12": "repeat_interleave with an int count: torch 2.x's expand + clone (torch 1.13 index_selects)",
    "E13": "torch._grouped_mm (MoE experts): one output allocation, saves its inputs and offs; backward the "
           "parameter-shaped weight gradient, then the input-sized one; CUTLASS workspaces not emulated",
    "E14": "histc of an int32 tensor (CUDA: int32 counts; torch 1.13's CPU needs float), one_hot without the "
           "CPU's min/max checks",
    "E15": "F.scaled_dot_product_attention with one K/V head and no enable_gqa (Falcon): CUDA runs "
           "_scaled_dot_product_attention_math, upcast to fp32, _safe_softmax",
    "E16": "bitsandbytes' NF4 matmul (MatMul4Bit) on the path of training's sizes: the weight dequantized to the "
           "compute format in forward (gemm_4bit's dequant-and-linear fallback) and again in backward",
    "E17": "Transformer Engine and Megatron kernels (megatron-te): rmsnorm_fwd/bwd, general_gemm, fused RoPE, "
           "cuDNN fused attention (O, rng_state, fp32 stats; dQ, dK, dV), the torch.compile'd SwiGLU; "
           "their workspaces and TE's persistent cuBLAS workspace not emulated",
    "E18": "torchtitan's compiled FlexAttention (torch 1.13 has none): the BlockMask's eight int32 tensors and the "
           "packed-document mask_mod buffers; forward out (query's layout), fp32 logsumexp and max_scores [B, H, L] "
           "(max_scores freed after the kernel), saving q, k, v (kv heads), out, lse; backward fp32 delta [B, H, L], "
           "dq, dv, dk (delta freed after the kernel); compiled create_block_mask intermediates not emulated",
    "E19": "nn.RMSNorm on CUDA with torch >= 2.9: _fused_rms_norm (output, fp32 rstd [..., 1]; saves input, weight, "
           "rstd) and _fused_rms_norm_backward (dX, then dgamma)",
    "E20": "torchtitan's deterministic_scatter_add custom op: the out-of-place scatter_add result, saving the index; "
           "backward gather of grad_output [N, D]; the accumulating index_put_'s sort buffers not emulated",
    "E21": "Megatron-Core's MoE layer with TE (megatron-te on MoE configs): router_gating_linear (te_general_gemm), "
           "top-k softmax routing with the aux loss, the alltoall dispatcher's torch permute / sort_chunks / "
           "unpermute at EP 1, TE GroupedLinear (split views saved, one [S, out] output; dgrad, one packed "
           "[E, out, in] wgrad), the compiled weighted SwiGLU; device-to-host counts untracked",
}


def describe(c):
    m = c["model"]
    cfg = sm.Config(**m)
    d = {
        "family": m["family"], "hidden": cfg.hidden, "intermediate": cfg.intermediate, "heads": cfg.heads,
        "kv_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "layers": cfg.layers, "vocab": cfg.vocab,
        "tied": cfg.tied, "attention": cfg.attn, "dropout": cfg.dropout,
        "norm": {"llama": "rmsnorm", "phi3": "rmsnorm", "gemma2": "rmsnorm_plus_one", "gemma3": "rmsnorm_plus_one",
                 "mixtral": "rmsnorm", "qwen3_moe": "rmsnorm", "qwen2": "rmsnorm",
                 "mistral": "rmsnorm"}.get(m["family"], "layernorm"),
        "mlp": {"llama": "swiglu", "phi3": "swiglu", "gemma2": "geglu_tanh",
                "gemma3": "geglu_tanh", "mixtral": "swiglu", "qwen3_moe": "swiglu", "qwen2": "swiglu",
                "mistral": "swiglu"}.get(m["family"], "gelu_new"),
        "moe": {"experts": cfg.moe_experts, "top_k": cfg.moe_top_k, "intermediate": cfg.moe_intermediate,
                "implementation": cfg.experts_impl,
                "router": "qwen3_moe" if m["family"] == "qwen3_moe" else "mixtral"} if cfg.moe_experts else None,
        "attn_softcap": cfg.attn_softcap, "final_softcap": cfg.final_softcap,
        "qk_norm": cfg.qk_norm or m["family"] == "gemma3",
        "max_positions": cfg.max_positions if m["family"] in ("gpt2",) + ENCODERS else None,
        "dtype": "float32" if c["precision"] in ("fp32", "amp_bf16") else "bfloat16",
        "precision": c["precision"], "optimizer": c["optimizer"], "optimizer_impl": c["impl"],
        "optimizer_options": {"adamw": {"weight_decay": 0.01, "amsgrad": False},
                              "sgd": {"momentum": 0.9, "weight_decay": 0.0},
                              "adafactor": {"weight_decay": 0.0}}[c["optimizer"]],
        "param_groups": 1, "zero_grad": "zero" if c["keep_grads"] else "set_to_none",
        "batch": c["batch"], "seq": c["seq"], "checkpointing": c["checkpointing"],
        "accumulation": c["accumulation"], "lora": c["lora"], "use_cache": False,
        "code": cfg.code,
    }
    if c.get("qlora"):  # the layers' linears in NF4 with double quantization (bitsandbytes, E16)
        d["qlora"] = True
    if cfg.code == "megatron-te" and cfg.moe_experts:  # E21: Megatron-Core's MoELayer
        d["moe"].update(implementation="te_grouped_linear", router="megatron_topk", dispatcher="alltoall",
                        permute_fusion=False, score_function="softmax", pre_softmax=False,
                        aux_loss_coeff=sm.MEGATRON_MOE_AUX_LOSS_COEFF[m["family"]])
    if m["family"] == "gpt_oss":  # what only gpt-oss has (other families' descriptions unchanged)
        d["norm"], d["mlp"] = "rmsnorm", "gpt_oss_glu"  # (up + 1) * gate * sigmoid(1.702 gate), clamped at 7
        d["moe"].update(router="gpt_oss", bias=True, transposed=True)
        d["attention_bias"] = cfg.attention_bias  # q, k, v and o
        d["attention_sinks"] = True
        d["sliding_window"] = cfg.sliding_window
        d["layer_types"] = [sm.gptoss_layer_type(i) for i in range(cfg.layers)]
        d["rope"] = "default"  # gpt-oss's YaRN: the same [1, s, head_dim / 2] tables
    if m["family"] == "falcon":  # parallel attention + MLP behind one LayerNorm, multi-query, rotary
        d["mlp"] = "gelu"
        d["parallel_block"] = True
        d["norms_per_layer"] = 1
        d["multi_query"] = True
        if cfg.new_decoder_architecture:  # ln_attn and ln_mlp, grouped K/V heads
            d["norms_per_layer"] = 2
            d["multi_query"] = False
            d["new_decoder_architecture"] = True
    if m["family"] in ENCODERS:  # classifiers: post-LN (BERT, DistilBERT) or pre-LN (ViT), F.gelu
        d["mlp"] = "gelu"
        d["num_labels"] = cfg.num_labels
        d["post_ln"] = m["family"] != "vit"
    if m["family"] == "vit":
        d["image_size"], d["patch_size"], d["channels"] = cfg.image_size, cfg.patch_size, cfg.channels
        d["max_positions"] = (cfg.image_size // cfg.patch_size) ** 2 + 1
        d["attention"] = "sdpa"  # MultiheadAttention's training path
    if m["family"] == "bert":
        d["token_types"] = cfg.type_vocab_size
        d["pooler"] = True
        d["token_type_ids_input"] = True
    if m["family"] == "qwen2":  # modeling_qwen2.py: biases on q_proj, k_proj, v_proj (not o_proj)
        d["qkv_bias"] = True
    if m["family"] == "mistral":  # create_sliding_window_causal_mask: the window on every layer
        d["sliding_window"] = cfg.sliding_window
    if m["family"] == "deepseek_v2":  # MLA (complex rotary), DeepseekV2Moe's softmax routing, shared experts
        d["norm"], d["mlp"] = "rmsnorm", "swiglu"
        d["moe"].update(router="deepseek_v2", shared_experts=cfg.moe_shared_experts,
                        first_dense_layers=cfg.first_k_dense_replace, n_group=cfg.n_group,
                        topk_group=cfg.topk_group, topk_method=cfg.topk_method,
                        routed_scaling_factor=cfg.routed_scaling_factor)
        d["mla"] = {"q_lora_rank": cfg.q_lora_rank, "kv_lora_rank": cfg.kv_lora_rank,
                    "qk_nope_head_dim": cfg.qk_nope_head_dim, "qk_rope_head_dim": cfg.head_dim,
                    "v_head_dim": cfg.v_head_dim}
        d["rope"] = "complex"  # DeepseekV2RotaryEmbedding's freqs_cis, apply_rotary_emb
    if m["family"] == "deepseek_v3":
        d["norm"], d["mlp"] = "rmsnorm", "swiglu"
        d["moe"].update(router="deepseek_v3", shared_experts=cfg.moe_shared_experts,
                        first_dense_layers=cfg.first_k_dense_replace, n_group=cfg.n_group,
                        topk_group=cfg.topk_group, routed_scaling_factor=cfg.routed_scaling_factor)
        d["mla"] = {"q_lora_rank": cfg.q_lora_rank, "kv_lora_rank": cfg.kv_lora_rank,
                    "qk_nope_head_dim": cfg.qk_nope_head_dim, "qk_rope_head_dim": cfg.head_dim,
                    "v_head_dim": cfg.v_head_dim}
        d["rope_interleave"] = cfg.rope_interleave
    return d


# ------------------------------------------------------------------------------------------------
# transformers + peft themselves (--hf, on a machine that has them): checks step_models' fidelity
# ------------------------------------------------------------------------------------------------
class HFAdapter(torch.nn.Module):
    is_hf = True

    def __init__(self, hf, family):
        super().__init__()
        self.hf = hf
        self.family = family
        self._base = hf.get_base_model() if hasattr(hf, "get_base_model") else hf

    def decoder_layers(self):
        return self._base.transformer.h if self.family == "gpt2" else self._base.model.layers

    def final_norm(self):
        return self._base.transformer.ln_f if self.family == "gpt2" else self._base.model.norm

    @property
    def lm_head(self):
        return self._base.lm_head

    @property
    def loss_function(self):
        return self._base.loss_function

    @loss_function.setter
    def loss_function(self, fn):
        self._base.loss_function = fn

    def forward(self, input_ids, labels=None):
        out = self.hf(input_ids=input_ids, labels=labels, use_cache=False)
        return out.loss, out.logits


def build_hf(c):
    import transformers
    m = c["model"]
    cfg = sm.Config(**m)
    decoder = dict(  # the decoder-only configs' shared fields
        vocab_size=cfg.vocab, hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim, rms_norm_eps=cfg.rms_eps, use_cache=False, max_position_embeddings=cfg.max_positions)
    if m["family"] == "mixtral":  # transformers 5: packed experts, config._experts_implementation
        conf = transformers.MixtralConfig(
            num_local_experts=cfg.moe_experts, num_experts_per_tok=cfg.moe_top_k, router_jitter_noise=0.0,
            output_router_logits=False, sliding_window=None, tie_word_embeddings=cfg.tied,
            **dict(decoder, intermediate_size=cfg.moe_intermediate))
        conf._experts_implementation = cfg.experts_impl
        cls = transformers.MixtralForCausalLM
    elif m["family"] == "qwen3_moe":  # transformers 5: Qwen3MoeExperts (Mixtral's code), Qwen3MoeTopKRouter
        conf = transformers.Qwen3MoeConfig(
            num_experts=cfg.moe_experts, num_experts_per_tok=cfg.moe_top_k, moe_intermediate_size=cfg.moe_intermediate,
            norm_topk_prob=cfg.moe_norm_topk_prob, decoder_sparse_step=1, mlp_only_layers=[],
            output_router_logits=False, use_sliding_window=False, tie_word_embeddings=cfg.tied, **decoder)
        conf._experts_implementation = cfg.experts_impl
        cls = transformers.Qwen3MoeForCausalLM
    elif m["family"] == "gpt_oss":  # transformers 5: GptOssExperts (transposed, biased), GptOssTopKRouter, sinks
        conf = transformers.GptOssConfig(
            num_local_experts=cfg.moe_experts, num_experts_per_tok=cfg.moe_top_k, attention_bias=cfg.attention_bias,
            sliding_window=cfg.sliding_window, output_router_logits=False, tie_word_embeddings=cfg.tied,
            **dict(decoder, intermediate_size=cfg.moe_intermediate))
        conf._experts_implementation = cfg.experts_impl
        cls = transformers.GptOssForCausalLM
    elif m["family"] == "llama":
        qwen3 = cfg.qk_norm
        conf = (transformers.Qwen3Config if qwen3 else transformers.LlamaConfig)(
            tie_word_embeddings=cfg.tied, **decoder)
        cls = transformers.Qwen3ForCausalLM if qwen3 else transformers.LlamaForCausalLM
    elif m["family"] == "gemma3":
        conf = transformers.Gemma3TextConfig(
            query_pre_attn_scalar=cfg.head_dim, sliding_window=cfg.sliding_window,
            sliding_window_pattern=cfg.sliding_window_pattern, tie_word_embeddings=cfg.tied, **decoder)
        cls = transformers.Gemma3ForCausalLM
    elif m["family"] == "gemma2":
        conf = transformers.Gemma2Config(
            query_pre_attn_scalar=cfg.head_dim, attn_logit_softcapping=cfg.attn_softcap or None,
            final_logit_softcapping=cfg.final_softcap or None, sliding_window=cfg.sliding_window, **decoder)
        cls = transformers.Gemma2ForCausalLM
    else:
        conf = transformers.GPT2Config(
            vocab_size=cfg.vocab, n_positions=cfg.max_positions, n_embd=cfg.hidden, n_layer=cfg.layers,
            n_head=cfg.heads, n_inner=cfg.intermediate, resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout,
            attn_pdrop=cfg.dropout, layer_norm_epsilon=cfg.ln_eps, use_cache=False, tie_word_embeddings=True)
        cls = transformers.GPT2LMHeadModel
    conf._attn_implementation = cfg.attn
    hf = cls(conf)
    if c["precision"] == "bf16":
        hf = hf.to(torch.bfloat16)
    if c["checkpointing"] != "none":
        hf.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": c["checkpointing"] == "reentrant"})
    if c["lora"]:
        import peft
        lc = peft.LoraConfig(r=c["lora"]["r"], lora_alpha=c["lora"]["alpha"], lora_dropout=0.0,
                             target_modules=c["lora"]["targets"])
        hf = peft.get_peft_model(hf, lc)
    assert hf.config._attn_implementation == cfg.attn, hf.config._attn_implementation
    if cfg.moe_experts:
        assert hf.config._experts_implementation == cfg.experts_impl, hf.config._experts_implementation
    return HFAdapter(hf, m["family"])


# ------------------------------------------------------------------------------------------------
# Running one case
# ------------------------------------------------------------------------------------------------
def run_case(c, device, cuda_check=False, hf=False):
    torch.manual_seed(0)
    cfg = sm.Config(**c["model"])
    if hf:
        model = build_hf(c)
    else:
        model = sm.build_model(cfg)
        if c["precision"] == "bf16":
            model = model.to(torch.bfloat16)
            if hasattr(model, "restore_buffers"):
                model.restore_buffers()
        if c["lora"]:
            apply = sm.apply_qlora if c.get("qlora") else sm.apply_lora
            apply(model, c["lora"]["targets"], c["lora"]["r"], c["lora"]["alpha"], torch.float32)
        if c["checkpointing"] != "none":
            sm.gradient_checkpointing_enable(model, use_reentrant=c["checkpointing"] == "reentrant")
    model.train()
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = sm.build_optimizer(c["optimizer"], c["impl"], params)
    amp = c["precision"] == "amp_bf16"
    g = torch.Generator().manual_seed(1)
    if cfg.family == "vit":  # images in the model's dtype (fp32 under AMP) instead of ids
        assert c["seq"] == (cfg.image_size // cfg.patch_size) ** 2 + 1
        image_dtype = torch.bfloat16 if c["precision"] == "bf16" else torch.float32
        host_ids = [[torch.randn((c["batch"], cfg.channels, cfg.image_size, cfg.image_size), generator=g)
                     .to(image_dtype) for _ in range(c["accumulation"])] for _ in range(2)]
    else:
        host_ids = [[torch.randint(cfg.vocab, (c["batch"], c["seq"]), generator=g)
                     for _ in range(c["accumulation"])] for _ in range(2)]
    # torchtitan's collator: per-document positions (each row a document), concatenated [b * s]
    host_positions = torch.arange(c["seq"]).repeat(c["batch"])
    encoder = cfg.family in ENCODERS
    if encoder:  # a sequence classifier's labels [b]; BERT's tokenizer also returns token_type_ids
        host_labels = [[torch.randint(cfg.num_labels, (c["batch"],), generator=g)
                        for _ in range(c["accumulation"])] for _ in range(2)]
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    tracer = Tracer(torch.device(device).type, cuda_check=cuda_check)
    seen = set()
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            tracer.register(p, "param")
    for b in model.buffers():
        tracer.register(b, "buffer")
    if cuda_check:
        tracer.cuda_offset = torch.cuda.memory_allocated() - tracer.alive
    handles = install_hooks(tracer, model)
    steps = {}
    gc.collect()
    gc.disable()
    try:
        with tracer:
            for step in (1, 2):
                tracer.step = step
                tracer.poll()
                start_ev = len(tracer.events)
                start_alive = tracer.alive
                start_live = {r.sid for r in tracer.live.values()}
                for mb in range(c["accumulation"]):
                    tracer.set_phase("forward", mb, region="inputs")
                    input_ids = host_ids[step - 1][mb].to(device, copy=True)  # the batch moved to the device
                    extra = {}
                    if cfg.family == "bert":  # the tokenizer's token_type_ids, moved after input_ids
                        extra["token_type_ids"] = torch.zeros_like(host_ids[step - 1][mb]).to(device, copy=True)
                    if getattr(model, "takes_positions", False):  # torchtitan: input_dict["positions"], moved
                        extra["positions"] = host_positions.to(device, copy=True)  # after input_dict["input"]
                    labels = (host_labels if encoder else host_ids)[step - 1][mb].to(device, copy=True)
                    tracer.set_region("embedding")
                    held = None
                    if getattr(model, "takes_positions", False):  # post_dataloading_process: the flex BlockMask
                        extra["attention_masks"] = model.attention_masks(extra["positions"])
                        held = dict(extra)  # extra_kwargs lives to the end of forward_backward_step
                    with sm.autocast(enabled=amp, dtype=torch.bfloat16):
                        loss, logits = model(input_ids, labels=labels, **extra)
                        del logits  # Trainer.compute_loss returns the loss only
                    if c["accumulation"] > 1:
                        loss = loss / c["accumulation"]
                    del input_ids, labels, extra  # Trainer.training_step: del inputs
                    tracer.set_phase("backward", region="loss")
                    loss.backward()
                    del loss
                    tracer.set_phase("backward", region="end")
                    del held
                grads_keys = {untyped(p.grad)._cdata for p in params if p.grad is not None}
                tracer.set_phase("optimizer", 0, region="optimizer")
                for r in tracer.live.values():
                    if r.key in grads_keys and r.kind == "act":
                        r.kind = "grad"
                opt.step()
                tracer.set_phase("zero_grad", 0, region="zero_grad")
                opt.zero_grad(set_to_none=not c["keep_grads"])  # False: torch < 2.0's default
                tracer.set_phase("end", 0, region="end")
                tracer.poll()
                steps[step] = dict(start_ev=start_ev, end_ev=len(tracer.events), start_alive=start_alive,
                                   start_live=start_live)
                for r in tracer.live.values():
                    if r.step == step and r.phase == "optimizer" and r.kind == "act":
                        r.kind = "state"
    finally:
        gc.enable()
        for h in handles:
            h.remove()
    tracer.model_info = dict(
        param_bytes=sum(r.bytes for r in tracer.recs if r.kind == "param"),
        trainable_param_bytes=sum(block_bytes(untyped(p).nbytes()) for p in params),
        buffer_bytes=sum(r.bytes for r in tracer.recs if r.kind == "buffer"),
        state_bytes=sum(r.bytes for r in tracer.recs if r.kind == "state"),
        param_tensors=sum(1 for r in tracer.recs if r.kind == "param"),
        trainable_tensors=len(params),
        state_tensors=sum(1 for r in tracer.recs if r.kind == "state"))
    return tracer, steps


# ------------------------------------------------------------------------------------------------
# Summaries
# ------------------------------------------------------------------------------------------------
PHASES = ("forward", "loss", "backward", "optimizer", "zero_grad")


def region_kind(region):
    return "layer" if isinstance(region, int) else region


def lifetime_kind(tracer, r):
    """What an allocation is, from its lifetime."""
    if r.kind != "act":
        return r.kind
    if r.recompute:
        return "recompute" if r.free_ev is not None else "recompute-kept"
    if r.free_ev is None:
        return "kept"
    fe = tracer.events[r.free_ev]
    if fe[9] != r.step:
        return "kept"
    if fe[3] == r.phase and fe[4] == r.mb:
        return "transient"
    return "saved" if r.phase in ("forward", "loss") else "kept"


def free_origin(r, cur_region):
    """Where a freed storage was allocated: phase[#micro-batch]@region, the region relative to the
    current decoder layer (L, L+1, ...) when both are layers."""
    if r.kind in ("param", "buffer"):
        return r.kind
    if isinstance(r.region, int) and isinstance(cur_region, int):
        d = r.region - cur_region
        reg = "L" if d == 0 else f"L{d:+d}"
    else:
        reg = str(r.region)
    return f"{r.phase}{'' if r.mb == 0 else '#' + str(r.mb)}@{reg}"


def alive_breakdown(tracer, sids):
    groups = {}
    for sid in sids:
        r = tracer.recs[sid]
        k = lifetime_kind(tracer, r)
        if k in ("param", "buffer", "state", "grad", "input"):
            key = k
        else:
            key = f"{r.phase}{'' if r.mb == 0 else '#' + str(r.mb)}:{region_kind(r.region)}:{k}"
        g = groups.setdefault(key, [0, 0])
        g[0] += r.bytes
        g[1] += 1
    return [{"what": k, "bytes": v[0], "tensors": v[1]} for k, v in sorted(groups.items(), key=lambda kv: -kv[1][0])]


def summarize(tracer, steps, step, with_events):
    s = steps[step]
    tracer.cur_step = step
    evs = tracer.events[s["start_ev"]:s["end_ev"]]
    start_alive = s["start_alive"]
    peak_i, peak = None, start_alive
    phase_peaks = {}
    for i, e in enumerate(evs):
        if e[8] > peak:
            peak, peak_i = e[8], i
        key = (e[3], e[4])
        if key not in phase_peaks or e[8] > phase_peaks[key][0]:
            phase_peaks[key] = (e[8], i)
    # replay to the peak for what is alive there
    alive = set(s["start_live"])
    for e in evs[: (peak_i + 1 if peak_i is not None else 0)]:
        if e[1] > 0:
            alive.add(e[0])
        else:
            alive.discard(e[0])

    def ev_info(i):
        e = evs[i]
        r = tracer.recs[e[0]]
        return {"index": i, "phase": e[3], "micro_batch": e[4], "region": region_kind(e[5]),
                "layer": e[5] if isinstance(e[5], int) else -1, "op": e[6], "module": e[7],
                "sign": e[1], "bytes": e[2], "alive_after": e[8], "kind": lifetime_kind(tracer, r)}

    phase_start = {}
    prev_alive = start_alive
    for e in evs:
        phase_start.setdefault((e[3], e[4]), prev_alive)
        prev_alive = e[8]

    out = {
        "alive_at_start": start_alive,
        "alive_at_start_breakdown": alive_breakdown(tracer, s["start_live"]),
        "alive_at_end": evs[-1][8] if evs else start_alive,
        "peak": peak,
        "peak_event": ev_info(peak_i) if peak_i is not None else None,
        "alive_at_peak": alive_breakdown(tracer, alive),
        "phase_peaks": [dict(phase=k[0], micro_batch=k[1], alive_at_phase_start=phase_start[k], peak=v[0],
                             event=ev_info(v[1]))
                        for k, v in sorted(phase_peaks.items(), key=lambda kv: kv[1][1])],
        "events_total": len(evs),
        "allocated_bytes_total": sum(e[2] for e in evs if e[1] > 0),
    }
    # Saved for backward: forward/loss allocations of micro-batch 0 alive when its backward begins
    bstart = next((i for i, e in enumerate(evs) if e[3] == "backward" and e[4] == 0), None)
    if bstart is not None:
        alive_b = set(s["start_live"])
        for e in evs[:bstart]:
            if e[1] > 0:
                alive_b.add(e[0])
            else:
                alive_b.discard(e[0])
        per_region = {}
        for sid in alive_b:
            r = tracer.recs[sid]
            if r.step == step and r.phase in ("forward", "loss") and r.mb == 0:
                key = str(r.region)
                per_region[key] = per_region.get(key, 0) + r.bytes
        out["alive_at_backward_start"] = evs[bstart - 1][8] if bstart > 0 else start_alive
        out["saved_at_backward_start_by_region"] = per_region
    totals = {}
    for e in evs:
        t = totals.setdefault((e[3], e[4]), {"phase": e[3], "micro_batch": e[4], "allocated": {}, "freed": {}})
        r = tracer.recs[e[0]]
        if e[1] > 0:
            key = lifetime_kind(tracer, r)
            if key not in ("transient", "workspace"):
                key += "->" + until(tracer, r)
            d = t["allocated"]
        else:
            key = lifetime_kind(tracer, r)
            if r.kind not in ("param", "buffer"):
                key = (r.phase if r.step == step else "previous step") + ":" + key
            d = t["freed"]
        acc = d.setdefault(key, [0, 0])
        acc[0] += e[2]
        acc[1] += 1
    out["phase_totals"] = list(totals.values())
    if with_events:
        out["timeline"] = compress(tracer, evs, start_alive)
    return out


def until(tracer, r):
    """Where an allocation is freed: phase[#micro-batch], "end" (alive when the step ends)."""
    if r.free_ev is None:
        return "end"
    fe = tracer.events[r.free_ev]
    if fe[9] != r.step:
        return "end"
    return fe[3] + ("" if fe[4] == 0 else "#" + str(fe[4]))


def event_row(tracer, e):
    r = tracer.recs[e[0]]
    if e[1] > 0:
        return ["+", e[2], e[6], e[7], lifetime_kind(tracer, r), until(tracer, r)]
    return ["-", e[2], e[6], e[7], lifetime_kind(tracer, r), free_origin(r, e[5])]


def compress(tracer, evs, start_alive):
    """Per (micro-batch, phase): segments of consecutive events of one region; consecutive decoder
    layers with identical event rows are merged into one segment listing the layers."""
    phases = []
    alive = start_alive
    i = 0
    while i < len(evs):
        ph, mb = evs[i][3], evs[i][4]
        segs = []
        while i < len(evs) and evs[i][3] == ph and evs[i][4] == mb:
            reg = evs[i][5]
            rows = []
            before = alive
            while i < len(evs) and evs[i][3] == ph and evs[i][4] == mb and evs[i][5] == reg:
                rows.append(event_row(tracer, evs[i]))
                alive = evs[i][8]
                i += 1
            seg = {"region": region_kind(reg), "alive_before": [before], "alive_after": [alive], "events": rows}
            if isinstance(reg, int):
                seg["layers"] = [reg]
                prev = segs[-1] if segs else None
                if prev is not None and prev.get("layers") is not None and prev["events"] == rows:
                    prev["layers"].append(reg)
                    prev["alive_before"].append(before)
                    prev["alive_after"].append(alive)
                    continue
            segs.append(seg)
        phases.append({"phase": ph, "micro_batch": mb, "segments": segs})
    return phases


def run_all(cases, device, cuda_check, hf=False):
    results = []
    for c in cases:
        t0 = time.time()
        try:
            tracer, steps = run_case(c, device, cuda_check, hf)
        except Exception:  # a native or --hf run goes on with the other cases
            if device == "cpu" and not hf:
                raise
            import traceback
            traceback.print_exc()
            continue
        res = {"name": c["name"], "case": describe(c), "model_bytes": tracer.model_info,
               "step1": summarize(tracer, steps, 1, with_events=False),
               "step2": summarize(tracer, steps, 2, with_events=True),
               "emulated_allocations": sum(1 for r in tracer.recs if r.emulated and r.step == 2)}
        if cuda_check:
            res["cuda_check"] = {
                "untracked_allocations": [dict(event=e[0], step=e[1], phase=e[2], region=e[3], op=e[4], bytes=e[5])
                                          for e in tracer.cuda_diffs],
                "op_workspaces": [dict(event=e[0], step=e[1], phase=e[2], region=e[3], op=e[4], bytes=e[5])
                                  for e in tracer.workspaces if e[1] == 2],
                "max_memory_allocated_step2": None,
            }
        s2 = res["step2"]
        if s2["alive_at_end"] != s2["alive_at_start"]:
            print(f"warning: {c['name']}: step 2 ends with {s2['alive_at_end']} B alive, began with "
                  f"{s2['alive_at_start']} B", file=sys.stderr)
        pe = s2["peak_event"]
        print(f"{c['name']:52s} peak {s2['peak']:>9d} at {pe['phase']}/{pe['region']}/{pe['op']}"
              f" start {s2['alive_at_start']:>8d} events {s2['events_total']:5d} ({time.time() - t0:.1f}s)",
              file=sys.stderr)
        results.append(res)
    return results


def differing_events(sa, sb):
    """Events of step 2 that differ between two runs of a case: (sign, bytes, op) sequences."""
    import difflib
    ka = [(e[0], e[1], e[3][0], e[3][1], e[3][2]) for e in expand(sa["timeline"])]
    kb = [(e[0], e[1], e[3][0], e[3][1], e[3][2]) for e in expand(sb["timeline"])]
    ops = difflib.SequenceMatcher(a=ka, b=kb, autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


def _region_fields(d):
    """{"region": 2} or {"region": "2"} (a layer) as {"region": "layer", "layer": 2}."""
    reg = d.get("region")
    if isinstance(reg, str) and reg.isdigit():
        reg = int(reg)
    d = {k: v for k, v in d.items() if k != "event"}  # the CUDA run's own event numbering
    d["region"] = region_kind(reg)
    d["layer"] = reg if isinstance(reg, int) else -1
    return d


def merge_cuda(data, cuda, hf=None):
    """Embeds a --native CUDA run (and a --native --hf run of transformers' own models) per case."""
    by_name = {r["name"]: r for r in cuda["cases"]}
    hf_by_name = {r["name"]: r for r in hf["cases"]} if hf else {}
    for r in data["cases"]:
        cr = by_name.get(r["name"])
        if cr is None:
            continue
        s2 = cr["step2"]
        ref = {
            "torch": cuda["torch"], "device": cuda["device"],
            "peak": s2["peak"], "peak_event": dict(_region_fields(s2["peak_event"]), index=s2["peak_event"]["index"]),
            "alive_at_start": s2["alive_at_start"],
            "phase_peaks": [dict(phase=p["phase"], micro_batch=p["micro_batch"], peak=p["peak"])
                            for p in s2["phase_peaks"]],
            "events": s2["events_total"],
            "events_differing_from_emulation": differing_events(r["step2"], s2),
            "first_step_untracked_allocations": [_region_fields(u) for u in cr["cuda_check"]["untracked_allocations"]
                                                 if u["step"] == 1],
            "step2_untracked_allocations": [_region_fields(u) for u in cr["cuda_check"]["untracked_allocations"]
                                            if u["step"] == 2],
            "op_workspaces": [_region_fields(w) for w in cr["cuda_check"]["op_workspaces"]],
        }
        h = hf_by_name.get(r["name"])
        if h is not None:
            ref["transformers"] = {"mode": hf["mode"], "peak": h["step2"]["peak"],
                                   "alive_at_start": h["step2"]["alive_at_start"],
                                   "events_differing_from_native": differing_events(s2, h["step2"])}
        r["cuda_reference"] = ref


def expand(timeline):
    """The compressed timeline back to one row per event: (phase, micro-batch, region, row)."""
    out = []
    for ph in timeline:
        for seg in ph["segments"]:
            for layer in seg.get("layers") or [None]:
                for row in seg["events"]:
                    out.append((ph["phase"], ph["micro_batch"], layer if layer is not None else seg["region"], row))
    return out


def compare(path_a, path_b, show=12):
    import difflib
    with open(path_a) as f:
        a = {c["name"]: c for c in json.load(f)["cases"]}
    with open(path_b) as f:
        b = {c["name"]: c for c in json.load(f)["cases"]}
    for name in a:
        if name not in b:
            continue
        sa, sb = a[name]["step2"], b[name]["step2"]
        pa, pb = sa["peak_event"], sb["peak_event"]
        rel = (sb["peak"] - sa["peak"]) / sa["peak"]
        print(f"{name}: peak {sa['peak']} vs {sb['peak']} ({rel:+.2%}); "
              f"{pa['phase']}/{pa['region']}/{pa['op']} vs {pb['phase']}/{pb['region']}/{pb['op']}; "
              f"start {sa['alive_at_start']} vs {sb['alive_at_start']}")
        ea, eb = expand(sa["timeline"]), expand(sb["timeline"])
        key = lambda e: (e[0], e[1], e[3][0], e[3][1], e[3][2])  # noqa: E731
        ka, kb = [key(e) for e in ea], [key(e) for e in eb]
        sm_ = difflib.SequenceMatcher(a=ka, b=kb, autojunk=False)
        n = 0
        for tag, i1, i2, j1, j2 in sm_.get_opcodes():
            if tag == "equal":
                continue
            n += 1
            if n <= show:
                print(f"   {tag}: A[{i1}:{i2}] {[ka[i][2:] for i in range(i1, min(i2, i1 + 6))]} @ "
                      f"{ea[i1][0] if i1 < len(ea) else ''}/{ea[i1][2] if i1 < len(ea) else ''} | "
                      f"B[{j1}:{j2}] {[kb[j][2:] for j in range(j1, min(j2, j1 + 6))]}")
        print(f"   {n} differing runs, {len(ka)} vs {len(kb)} events")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="", help="only cases whose name contains this")
    ap.add_argument("--native", action="store_true", help="real torch functions (CUDA, torch >= 2.5)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "step_traces.json"))
    ap.add_argument("--merge-cuda", default="", help="embed the peaks of a --native CUDA run into --out")
    ap.add_argument("--merge-hf", default="", help="with --merge-cuda: a --native --hf run to embed as well")
    ap.add_argument("--hf", action="store_true", help="with --native: transformers' and peft's own models")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two output files event by event")
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    if args.merge_cuda:
        with open(args.out) as f:
            data = json.load(f)
        with open(args.merge_cuda) as f:
            cuda = json.load(f)
        hf = None
        if args.merge_hf:
            with open(args.merge_hf) as f:
                hf = json.load(f)
        merge_cuda(data, cuda, hf)
        write(data, args.out)
        return
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    device = "cpu"
    if args.native:
        sm.set_mode("native")
        device = "cuda" if torch.cuda.is_available() else "cpu"
    cases = [c for c in CASES if args.cases in c["name"]]
    results = run_all(cases, device, cuda_check=args.native and device == "cuda", hf=args.hf)
    data = {
        "format": 1,
        "generator": "tests/validation/step_trace.py",
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "mode": ("native-hf" if args.hf else "native") if args.native else "cpu-emulating-cuda",
        "allocator_block_bytes": BLOCK,
        "event_row": {"alloc": ["+", "bytes", "op", "module", "kind", "freed in"],
                      "free": ["-", "bytes", "op of the allocation", "module", "kind", "allocated in"]},
        "kinds": KINDS,
        "emulations": EMULATIONS if not args.native else {},
        "cases": results,
    }
    if not args.native and os.path.exists(args.out):
        # keep the CUDA references a --merge-cuda put there (rerun it after changing an emulation),
        # and with --cases the other cases
        try:
            with open(args.out) as f:
                previous = json.load(f).get("cases", [])
        except (OSError, ValueError):
            previous = []
        old = {r["name"]: r for r in previous}
        for r in data["cases"]:
            if old.get(r["name"], {}).get("cuda_reference"):
                r["cuda_reference"] = old[r["name"]]["cuda_reference"]
        if args.cases:
            fresh = {r["name"]: r for r in data["cases"]}
            order = [c["name"] for c in CASES]
            merged = {**old, **fresh}
            data["cases"] = [merged[n] for n in order if n in merged]
    write(data, args.out)


def write(data, path):
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
