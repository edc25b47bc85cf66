"""Hugging Face-faithful small Llama and GPT-2 models, LoRA, optimizers and checkpointing for
tests/validation/step_trace.py, written in plain PyTorch so that they run on Debian's CPU PyTorch
1.13 (no transformers, peft or torch >= 2 needed) and allocate what the CUDA code does.

Sources followed (line for line where memory is concerned):
  transformers 5.17  models/llama/modeling_llama.py, models/gpt2/modeling_gpt2.py,
                     models/mixtral/modeling_mixtral.py and integrations/moe.py (5.x's packed
                     experts: grouped_mm_experts_forward and the eager loop),
                     models/qwen3_moe/modeling_qwen3_moe.py (Qwen3MoeTopKRouter,
                     Qwen3MoeSparseMoeBlock; Qwen3MoeExperts is Mixtral's code),
                     masking_utils.py (create_causal_mask, sdpa_mask, eager_mask,
                     find_packed_sequence_indices), integrations/sdpa_attention.py,
                     loss/loss_utils.py (ForCausalLMLoss), pytorch_utils.py (Conv1D),
                     activations.py (NewGELUActivation), modeling_layers.py
                     (GradientCheckpointingLayer), modeling_utils.py
                     (gradient_checkpointing_enable, enable_input_require_grads)
  peft 0.21          tuners/lora/layer.py (Linear.forward), tuners/tuners_utils.py
                     (_cast_input_dtype)
  torch 2.11         optim/adam.py (_single_tensor_adam, _multi_tensor_adam, _fused_adam, _init_group),
                     native/cuda/GroupedBlas.cpp, native/GroupedMMUtils.h and the _grouped_mm
                     entry of tools/autograd/derivatives.yaml (E13),
                     optim/sgd.py, optim/_adafactor.py, optim/optimizer.py (zero_grad),
                     utils/checkpoint.py (CheckpointFunction, _checkpoint_without_reentrant_generator),
                     aten/src/ATen/autocast_mode.cpp (the CUDA autocast op lists)

Two modes, chosen by set_mode():
  "emulate" (CPU, the committed data): every place where PyTorch 1.13's CPU kernels or Python code
      allocate differently from torch 2.11 on CUDA goes through a wrapper below that allocates what
      CUDA does (see docs/step-trace.md, "CUDA emulations", E1..E14).
  "native" (any device, torch >= 2.5): the wrappers call the real torch functions (F.dropout,
      F.scaled_dot_product_attention, torch.optim, torch.utils.checkpoint, torch.autocast, and for
      Mixtral torch._grouped_mm, which needs a torch that has it); used on a GPU to check the
      emulation against the real CUDA allocator.
"""

import contextlib
import math
import weakref
from collections import defaultdict
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from torch.overrides import TorchFunctionMode
except ImportError:  # pragma: no cover
    TorchFunctionMode = object

MODE = "emulate"


def set_mode(mode):
    global MODE
    assert mode in ("emulate", "native")
    MODE = mode


def emulating():
    return MODE == "emulate"


# --------------------------------------------------------------------------------------------
# Hooks the tracer installs: untracked() hides allocations that live on the host under CUDA or
# that are the CPU's arithmetic for an emulated kernel; the others mark regions.
# --------------------------------------------------------------------------------------------
class _Hooks:
    untracked = staticmethod(contextlib.nullcontext)  # replaced by the tracer
    recompute = staticmethod(contextlib.nullcontext)  # a checkpoint recompute is running
    label = staticmethod(lambda name: contextlib.nullcontext())  # name an emulated kernel's allocations
    layer_output = staticmethod(lambda module, out: None)  # a decoder layer returned (outer call)
    layer_input = staticmethod(lambda module, inp: None)
    workspace = staticmethod(lambda name, nbytes: None)  # a kernel's own transient buffer


HOOKS = _Hooks()


def kernel_output(label, shape, dtype, values):
    """An emulated CUDA kernel's output: one allocation under `label`, filled untracked with
    values() (computed on the CPU, invisible to the trace)."""
    with HOOKS.label(label):
        out = torch.empty(shape, dtype=dtype)
    with HOOKS.untracked():
        out.copy_(values())
    return out


# --------------------------------------------------------------------------------------------
# E5: CUDA autocast, emulated at the Python-function level (torch 1.13's CPU autocast has other
# op lists). aten/src/ATen/autocast_mode.cpp: lower_precision_fp ops cast floating CUDA inputs to
# the autocast dtype, caching the casts of leaf fp32 tensors that require grad (weights) until
# the outermost autocast exits; fp32 ops cast to float32 (never cached); fp32_set_opt_dtype ops
# run in float32 unless a dtype is given; promote ops cast to the widest input type.
# --------------------------------------------------------------------------------------------
_LOWER = {"linear", "matmul", "__matmul__", "addmm", "mm", "bmm", "baddbmm", "addbmm", "einsum",
          "scaled_dot_product_attention", "conv2d"}
_FP32 = {"pow", "__pow__", "__rpow__", "rsqrt", "exp", "log", "log2", "log10", "log1p", "expm1",
         "reciprocal", "acos", "asin", "cosh", "sinh", "tan", "erfinv", "softplus", "layer_norm",
         "group_norm", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "kl_div",
         "binary_cross_entropy_with_logits", "logsumexp", "cdist", "dist", "renorm"}
_FP32_OPT_DTYPE = {"softmax", "log_softmax", "sum", "prod", "cumsum", "cumprod"}
_PROMOTE = {"cat", "stack", "addcdiv", "addcmul", "atan2", "cross", "dot", "index_put",
            "scatter_add", "tensordot", "bilinear"}


class _AutocastState:
    def __init__(self):
        self.enabled = False
        self.dtype = torch.bfloat16
        self.depth = 0
        self.cache = {}


AUTOCAST = _AutocastState()


class EmulatedCudaAutocast(TorchFunctionMode):
    """The casts CUDA autocast inserts, applied to the torch functions the models call."""

    def _cast(self, x, dtype, cache_ok):
        if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64
                and x.dtype != dtype):
            return x
        if cache_ok and x.dtype == torch.float32 and x.requires_grad and x.is_leaf and not x._is_view():
            key = id(x)
            hit = AUTOCAST.cache.get(key)
            if hit is not None and hit[0]() is x:
                return hit[1]
            y = x.to(dtype)
            AUTOCAST.cache[key] = (weakref.ref(x), y)
            return y
        return x.to(dtype)

    def _map(self, args, kwargs, fn):
        """Casts the arguments last to first: autocast's WrapFunction_::call expands
        cached_cast(args)... into the call's arguments, which GCC evaluates right to left (the
        weight and bias of a linear are cast before its input). No recursive closure here: a
        reference cycle would keep the tensors alive until the garbage collector runs."""
        kw = {k: _map_one(v, fn) for k, v in reversed(list(kwargs.items()))}
        pos = [_map_one(a, fn) for a in reversed(args)]
        return tuple(reversed(pos)), dict(reversed(list(kw.items())))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if not AUTOCAST.enabled or not any(_is_cuda_like(a) for a in _flat(args, kwargs)):
            return func(*args, **kwargs)
        if name in _LOWER:
            args, kwargs = self._map(args, kwargs, lambda a: self._cast(a, AUTOCAST.dtype, True))
        elif name in _FP32:
            args, kwargs = self._map(args, kwargs, lambda a: self._cast(a, torch.float32, False))
        elif name in _FP32_OPT_DTYPE:
            if kwargs.get("dtype") is None and not (len(args) > 2 and args[2] is not None):
                first = args[0] if args else None
                if isinstance(first, torch.Tensor) and first.is_floating_point() and first.dtype != torch.float32:
                    kwargs = dict(kwargs, dtype=torch.float32)
        elif name in _PROMOTE:
            ts = [a for a in _flat(args, kwargs) if isinstance(a, torch.Tensor) and a.is_floating_point()]
            if ts:
                widest = max(ts, key=lambda t: torch.finfo(t.dtype).bits).dtype
                args, kwargs = self._map(args, kwargs, lambda a: self._cast(a, widest, False))
        return func(*args, **kwargs)


def _map_one(a, fn):
    if isinstance(a, (list, tuple)):
        return type(a)(_map_one(b, fn) for b in a)
    return fn(a)


def _flat_into(a, out):
    if isinstance(a, (list, tuple)):
        for b in a:
            _flat_into(b, out)
    else:
        out.append(a)
    return out


def _flat(args, kwargs):
    return _flat_into(list(kwargs.values()), _flat_into(args, []))


def _is_cuda_like(a):
    return isinstance(a, torch.Tensor)  # every tensor of the emulation is a CUDA tensor


_EMU_MODE = None


@contextlib.contextmanager
def autocast(enabled=True, dtype=torch.bfloat16):
    """torch.autocast("cuda", dtype) in native mode; the emulation on the CPU."""
    if MODE == "native":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        with torch.autocast(dev, dtype=dtype, enabled=enabled):
            yield
        return
    global _EMU_MODE
    prev = (AUTOCAST.enabled, AUTOCAST.dtype)
    AUTOCAST.enabled, AUTOCAST.dtype = enabled, dtype
    AUTOCAST.depth += 1
    pushed = False
    if _EMU_MODE is None:
        _EMU_MODE = EmulatedCudaAutocast()
        _EMU_MODE.__enter__()
        pushed = True
    try:
        yield
    finally:
        if pushed:
            _EMU_MODE.__exit__(None, None, None)
            _EMU_MODE = None
        AUTOCAST.depth -= 1
        AUTOCAST.enabled, AUTOCAST.dtype = prev
        if AUTOCAST.depth == 0:
            AUTOCAST.cache.clear()  # autocast's clear_cache() when the outermost region exits


def autocast_state():
    if MODE == "native":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        return (torch.is_autocast_enabled(dev) if hasattr(torch, "is_autocast_enabled") else False,
                torch.get_autocast_dtype(dev))
    return (AUTOCAST.enabled, AUTOCAST.dtype)


# --------------------------------------------------------------------------------------------
# Kernels whose CPU implementation in torch 1.13 allocates differently from CUDA in torch 2.11
# --------------------------------------------------------------------------------------------
def dropout(x, p, training):
    """F.dropout. E1: CUDA runs native_dropout (a bool mask and the output; the backward
    allocates one gradient); the CPU's composite keeps a mask in the input's dtype."""
    if MODE == "native" or not training or p == 0.0 or x.numel() == 0:
        return F.dropout(x, p, training)  # p == 0 returns the input itself on both
    with HOOKS.label("native_dropout"):
        return torch.native_dropout(x, p, True)[0]


class _MeanLastDim(torch.autograd.Function):
    """E3: torch 2.x mean.dim saves only its input's sizes (derivatives.yaml, mean_backward:
    sum_backward(grad, sizes).div_(numel)); torch 1.13's formula also saved the input."""

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.mean(-1, keepdim=True)

    @staticmethod
    def backward(ctx, g):
        return g.expand(ctx.shape) / ctx.shape[-1]


def mean_last_keepdim(x):
    if MODE == "native":
        return x.mean(-1, keepdim=True)
    return _MeanLastDim.apply(x)


class _SoftmaxHalfToFloat(torch.autograd.Function):
    """E4: softmax(x, dim, dtype=float32) with an fp16 x. CUDA (aten/src/ATen/native/SoftMax.cpp,
    softmax): _softmax(x, dim, half_to_float=True) writes fp32 from the fp16 input and its backward
    writes the fp16 gradient directly; the CPU converts the input first. Only for Half: a bf16
    input is converted with _to_copy on CUDA too (checked on an H100), as on the CPU."""

    @staticmethod
    def forward(ctx, x, dim):
        out = torch.empty(x.shape, dtype=torch.float32)
        with HOOKS.untracked():
            tmp = torch.softmax(x.float(), dim)
        out.copy_(tmp)
        ctx.save_for_backward(out)
        ctx.dim, ctx.in_dtype = dim, x.dtype
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        gi = torch.empty(out.shape, dtype=ctx.in_dtype)
        with HOOKS.untracked():
            tmp = torch._softmax_backward_data(g, out, ctx.dim, torch.float32)
        gi.copy_(tmp)
        return gi, None


def softmax(x, dim, dtype=None):
    """nn.functional.softmax, with the CUDA half_to_float path emulated."""
    if MODE == "native":
        return F.softmax(x, dim=dim, dtype=dtype)
    if dtype is None and AUTOCAST.enabled and x.dtype != torch.float32:
        dtype = torch.float32  # autocast's fp32_set_opt_dtype policy
    if dtype == torch.float32 and x.dtype == torch.float16:
        with HOOKS.label("_softmax(half_to_float)"):
            return _SoftmaxHalfToFloat.apply(x, dim)
    return F.softmax(x, dim=dim, dtype=dtype)


def _round_up(x, m):
    return (x + m - 1) // m * m


# cuDNN attention's own buffers measured inside the kernels (torch 2.11, cuDNN 9, H100), by
# (batch, heads, kv heads, sequence, head dim): forward and backward bytes. Other shapes: none.
CUDNN_WORKSPACE = {(2, 4, 2, 64, 32): (512, 133632)}


class _CudnnAttention(torch.autograd.Function):
    """E6: F.scaled_dot_product_attention on an H100 with 16-bit inputs and no mask runs cuDNN
    attention in torch 2.11 (aten _scaled_dot_product_cudnn_attention; enable_gqa keeps K and V
    un-repeated). Forward allocates the output, an fp32 softmax statistic [b, h, s, 1] and the
    philox seed and offset (one int64 each, on the device), and saves q, k, v, out, the
    statistic, seed and offset. Backward allocates dq, dk, dv (K/V-sized, not expanded). Each
    kernel also takes a workspace from the caching allocator (CUDNN_WORKSPACE). The CPU computes
    the values with the math path, untracked."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale):
        b, h, s, d = q.shape
        kvh = k.shape[1]
        # alloc_with_matching_layout (aten cudnn/MHA.cpp): Q's layout, [b, s, h, d] from Llama's
        # transposed projections, heads-first after Phi-3's rotary torch.cat
        out = torch.empty_like(q)
        stats = torch.empty((b, h, s, 1), dtype=torch.float32)
        seed = torch.empty((), dtype=torch.int64)
        offset = torch.empty((), dtype=torch.int64)
        ws = CUDNN_WORKSPACE.get((b, h, kvh, s, d), (0, 0))
        HOOKS.workspace("_scaled_dot_product_cudnn_attention workspace", ws[0])
        with HOOKS.untracked():
            kk = k.repeat_interleave(h // kvh, dim=1) if kvh != h else k
            vv = v.repeat_interleave(h // kvh, dim=1) if kvh != h else v
            scores = torch.matmul(q.float(), kk.float().transpose(-1, -2)) * scale
            if is_causal:
                mask = torch.ones(s, s, dtype=torch.bool).tril()
                scores = scores.masked_fill(~mask, float("-inf"))
            lse_v = torch.logsumexp(scores, dim=-1, keepdim=True)
            o = torch.matmul(torch.softmax(scores, -1), vv.float())
            out.copy_(o)
            stats.copy_(lse_v)
        ctx.save_for_backward(q, k, v, out, stats, seed, offset)
        ctx.is_causal, ctx.scale, ctx.ws = is_causal, scale, ws
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, out, stats, seed, offset = ctx.saved_tensors
        b, h, s, d = q.shape
        kvh = k.shape[1]
        with HOOKS.label("_scaled_dot_product_cudnn_attention_backward"):
            dq = torch.empty((b, s, h, d), dtype=q.dtype).transpose(1, 2)
            dk = torch.empty((b, s, kvh, d), dtype=k.dtype).transpose(1, 2)
            dv = torch.empty((b, s, kvh, d), dtype=v.dtype).transpose(1, 2)
        HOOKS.workspace("_scaled_dot_product_cudnn_attention_backward workspace", ctx.ws[1])
        with HOOKS.untracked():
            qq = q.detach().float().requires_grad_()
            kk = k.detach().float().requires_grad_()
            vv = v.detach().float().requires_grad_()
            with torch.enable_grad():
                ke = kk.repeat_interleave(h // kvh, dim=1) if kvh != h else kk
                ve = vv.repeat_interleave(h // kvh, dim=1) if kvh != h else vv
                sc = torch.matmul(qq, ke.transpose(-1, -2)) * ctx.scale
                if ctx.is_causal:
                    mask = torch.ones(s, s, dtype=torch.bool).tril()
                    sc = sc.masked_fill(~mask, float("-inf"))
                o = torch.matmul(torch.softmax(sc, -1), ve)
                gq, gk, gv = torch.autograd.grad(o, (qq, kk, vv), g.float())
            dq.copy_(gq)
            dk.copy_(gk)
            dv.copy_(gv)
        return dq, dk, dv, None, None


def scaled_dot_product_attention(q, k, v, is_causal, scale, enable_gqa=False):
    if MODE == "native":
        kw = {"enable_gqa": True} if enable_gqa else {}
        return F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, scale=scale,
                                              is_causal=is_causal, **kw)
    if AUTOCAST.enabled:  # a lower-precision autocast op: inputs cast last to first (v, k, q)
        v, k, q = (x.to(AUTOCAST.dtype) if x.dtype != AUTOCAST.dtype else x for x in (v, k, q))
    assert q.dtype in (torch.bfloat16, torch.float16), "the cuDNN emulation needs 16-bit inputs"
    with HOOKS.label("_scaled_dot_product_cudnn_attention"):
        return _CudnnAttention.apply(q, k, v, is_causal, scale)


# --------------------------------------------------------------------------------------------
# E13: torch._grouped_mm (torch 2.11 on CUDA; torch 1.13 has none). transformers 5's default
# experts implementation ("grouped_mm", integrations/moe.py) runs it on the whole packed expert
# parameters. aten/src/ATen/native/cuda/GroupedBlas.cpp _grouped_mm_cuda: the output comes from
# create_grouped_gemm_output_tensor (native/GroupedMMUtils.h), in mat_a's dtype
# (_resolve_grouped_mm_out_dtype), then bf16 runs CUTLASS's grouped GEMM on sm90/sm100 and other
# dtypes _grouped_mm_fallback's loop of at::mm_out into slices of that output. The autograd
# formulas are derivatives.yaml's _grouped_mm entry (self: _grouped_mm_mat1_backward, mat2:
# _grouped_mm_mat2_backward, torch/csrc/autograd/FunctionsManual.cpp), saving self, mat2 and offs.
# Not autocast-enabled on CUDA (not in autocast_mode.h's lists), so the emulated autocast is off
# inside. The CUTLASS kernel's own workspace is not known and not emulated.
# --------------------------------------------------------------------------------------------
_ELEMENT_SIZE = {torch.float64: 8, torch.float32: 4, torch.bfloat16: 2, torch.float16: 2}  # float64: checks only


@contextlib.contextmanager
def _autocast_emulation_off():
    prev = AUTOCAST.enabled
    AUTOCAST.enabled = False
    try:
        yield
    finally:
        AUTOCAST.enabled = prev


def _grouped_mm_output(mat_a, mat_b, offs, out_dtype):
    """create_grouped_gemm_output_tensor (CUDA): [M, N] for 2d x 3d, [G, M, N] for 2d x 2d, with
    the last dimension's stride padded to 16 bytes for TMA (empty_strided)."""
    a_is_2d, b_is_2d = mat_a.dim() == 2, mat_b.dim() == 2
    if a_is_2d:
        out_size = [offs.size(0), mat_a.size(0), mat_b.size(1)] if b_is_2d else [mat_a.size(0), mat_b.size(-1)]
    else:
        out_size = [mat_a.size(1), mat_b.size(1)] if b_is_2d else [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    alignment = 16 // _ELEMENT_SIZE[out_dtype]
    size_padded = (out_size[-1] + alignment - 1) // alignment * alignment
    out_stride = [size_padded, 1] if a_is_2d != b_is_2d else [out_size[1] * size_padded, size_padded, 1]
    return torch.empty_strided(out_size, out_stride, dtype=out_dtype, device=mat_a.device)


def _grouped_mm_emulated(mat_a, mat_b, offs):
    """One _grouped_mm call as the tracer sees it on CUDA: its output only (labelled _grouped_mm);
    the products are the CPU's, untracked, written into slices of that output."""
    with HOOKS.label("_grouped_mm"):
        out = _grouped_mm_output(mat_a, mat_b, offs, mat_a.dtype)  # out_dtype = mat_a's
    with HOOKS.untracked(), _autocast_emulation_off(), torch.no_grad():
        ends = [int(v) for v in offs.tolist()] if offs is not None else []
        start = 0
        if mat_a.dim() == 2 and mat_b.dim() == 3:  # 2d x 3d: rows of mat_a per group
            for g, end in enumerate(ends):
                torch.mm(mat_a[start:end], mat_b[g], out=out[start:end])
                start = end
        elif mat_a.dim() == 2 and mat_b.dim() == 2:  # 2d x 2d: the contraction dimension per group
            for g, end in enumerate(ends):
                if end > start:
                    torch.mm(mat_a[:, start:end], mat_b[start:end], out=out[g])
                else:  # a group without rows: zeros (CUTLASS's and the fallback's empty product)
                    out[g].zero_()
                start = end
        elif mat_a.dim() == 3 and mat_b.dim() == 2:  # 3d x 2d
            for g, end in enumerate(ends):
                torch.mm(mat_a[g], mat_b[:, start:end], out=out[:, start:end])
                start = end
        else:  # 3d x 3d: a batched matmul
            torch.bmm(mat_a, mat_b, out=out)
    return out


def _grouped_mm_mat1_backward(grad, mat2, mat1_sizes, mat1_strides, offs):
    """FunctionsManual.cpp _grouped_mm_mat1_backward (alpha 1): a column-major mat1 gets a
    column-major gradient."""
    d = len(mat1_sizes)
    if mat1_strides[d - 2] == 1 and mat1_strides[d - 1] == mat1_sizes[d - 2]:
        return _grouped_mm_emulated(mat2, grad.transpose(-2, -1), offs).transpose(-2, -1)
    return _grouped_mm_emulated(grad, mat2.transpose(-2, -1), offs)


def _grouped_mm_mat2_backward(grad, mat1, mat2_sizes, mat2_strides, offs):
    """FunctionsManual.cpp _grouped_mm_mat2_backward (alpha 1). transformers passes
    weight.transpose(-2, -1), a column-major mat2: the gradient is one [E, N, K] allocation (the
    parameter's shape, contiguous; zero for an expert without rows), returned transposed, so that
    TransposeBackward hands AccumulateGrad a parameter-shaped contiguous tensor to steal."""
    d = len(mat2_sizes)
    if mat2_strides[d - 2] == 1 and mat2_strides[d - 1] == mat2_sizes[d - 2]:
        return _grouped_mm_emulated(grad.transpose(-2, -1), mat1, offs).transpose(-2, -1)
    return _grouped_mm_emulated(mat1.transpose(-2, -1), grad, offs)


class _GroupedMM(torch.autograd.Function):
    """E13: torch._grouped_mm(mat_a, mat_b, offs) on CUDA. Forward allocates the output only and
    saves mat_a, mat_b (a view of the parameter) and offs; backward computes mat2's gradient, then
    mat1's, one allocation each: the generated GroupedMmBackward0 emits the formulas in the sorted
    order of their names (tools/autograd/load_derivatives.py, sorted(defn.keys())), as mm's."""

    @staticmethod
    def forward(ctx, mat_a, mat_b, offs):
        out = _grouped_mm_emulated(mat_a, mat_b, offs)
        ctx.save_for_backward(mat_a, mat_b, offs)
        return out

    @staticmethod
    def backward(ctx, grad):
        mat_a, mat_b, offs = ctx.saved_tensors
        grad_a = grad_b = None
        if ctx.needs_input_grad[1]:  # "mat2" sorts before "self"
            grad_b = _grouped_mm_mat2_backward(grad, mat_a, mat_b.shape, mat_b.stride(), offs)
        if ctx.needs_input_grad[0]:
            grad_a = _grouped_mm_mat1_backward(grad, mat_b, mat_a.shape, mat_a.stride(), offs)
        return grad_a, grad_b, None


def grouped_mm_op(mat_a, mat_b, offs):
    """torch.nn.functional.grouped_mm / torch._grouped_mm in native mode; E13 when emulating."""
    if MODE == "native":
        if hasattr(F, "grouped_mm"):
            return F.grouped_mm(mat_a, mat_b, offs=offs)
        return torch._grouped_mm(mat_a, mat_b, offs=offs)
    with _autocast_emulation_off():
        return _GroupedMM.apply(mat_a, mat_b, offs)


# --------------------------------------------------------------------------------------------
# E14: the routing index ops whose torch 1.13 CPU kernels allocate otherwise than CUDA's
# --------------------------------------------------------------------------------------------
def histc(input, bins, min, max):
    """torch.histc. E14: on CUDA an int32 input is counted by _histc_cuda_template
    (aten/src/ATen/native/cuda/SummaryOps.cu) into at::zeros({nbins}) in the input's dtype; torch
    1.13's CPU histc takes floating inputs only. The counting itself is the CPU's, untracked."""
    if MODE == "native" or input.is_floating_point():
        return torch.histc(input, bins=bins, min=min, max=max)
    with HOOKS.label("histc"):
        out = torch.zeros(bins, dtype=input.dtype, device=input.device)
    with HOOKS.untracked():
        out.copy_(torch.histc(input.float(), bins=bins, min=min, max=max).to(input.dtype))
    return out


def one_hot(tensor, num_classes):
    """F.one_hot. E14: aten/src/ATen/native/Onehot.cpp checks the class values with aminmax (torch
    1.13: min() and max(), two 0-dim device tensors) only on the CPU; on CUDA it is zeros plus
    scatter_ (it relies on scatter's device asserts)."""
    if MODE == "native":
        return F.one_hot(tensor, num_classes=num_classes)
    ret = torch.zeros((*tensor.shape, num_classes), dtype=tensor.dtype, device=tensor.device)
    ret.scatter_(-1, tensor.unsqueeze(-1), 1)
    return ret


# --------------------------------------------------------------------------------------------
# Model configuration
# --------------------------------------------------------------------------------------------
@dataclass
class Config:
    family: str  # "llama", "qwen2", "mistral", "gpt2", "gemma2", "gemma3", "phi3", "mixtral", "qwen3_moe",
    #              "gpt_oss", "deepseek_v3", "deepseek_v2", "falcon", "bert", "distilbert" or "vit"
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    layers: int
    vocab: int
    head_dim: int = 0
    tied: bool = False
    attn: str = "eager"  # "eager" or "sdpa"
    dropout: float = 0.0  # GPT-2: attn_pdrop = resid_pdrop = embd_pdrop
    max_positions: int = 512
    rms_eps: float = 1e-6
    ln_eps: float = 1e-5
    qk_norm: bool = False  # Qwen3: q_norm and k_norm over each head
    attn_softcap: float = 0.0  # Gemma 2: attn_logit_softcapping (0: none)
    final_softcap: float = 0.0  # Gemma 2: final_logit_softcapping (0: none)
    sliding_window: int = 4096  # Gemma 2: every other layer from layer 0; Mistral (Mistral-7B-v0.1's): every layer
    sliding_window_pattern: int = 6  # Gemma 3: layer i global when (i + 1) % it == 0
    code: str = "hf"  # whose Llama code: "hf", "torchtune", "litgpt", "torchtitan-2024", "megatron-te" or
    #                   "torchtitan" (torchtitan's current Llama 3, Qwen3 (dense or MoE) and DeepSeek-V3)
    moe_experts: int = 0  # Mixtral: num_local_experts, Qwen3-MoE: num_experts (0: a dense MLP)
    moe_top_k: int = 2  # num_experts_per_tok
    moe_intermediate: int = 0  # the experts' FFN width (0: intermediate; MixtralConfig's intermediate_size,
    #                            Qwen3MoeConfig's moe_intermediate_size)
    moe_norm_topk_prob: bool = True  # Qwen3-MoE: norm_topk_prob (Qwen3-30B-A3B: true); Mixtral always renormalizes
    experts_impl: str = "grouped_mm"  # config._experts_implementation: "grouped_mm" (the default) or "eager"
    attention_bias: bool = False  # gpt-oss: config.attention_bias (true) on q, k, v and o
    # DeepSeek-V2 (DeepseekV2Config.topk_method): "group_limited_greedy" (DeepSeek-V2, V2-Chat) or
    # "greedy" (V2-Lite)
    topk_method: str = "group_limited_greedy"
    # DeepSeek-V3 (DeepseekV3Config): MLA's low-rank projections and head widths (head_dim is
    # qk_rope_head_dim, the rotary's width), the dense layers before the first MoE layer, shared
    # experts and the group-limited sigmoid routing
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    first_k_dense_replace: int = 0
    moe_shared_experts: int = 0  # n_shared_experts
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 2.5  # DeepSeek-V3's config.json
    rope_interleave: bool = True  # DeepseekV3Config's default
    # Falcon-40B/180B (FalconConfig.new_decoder_architecture): kv_heads grouped K/V heads in
    # query_key_value, ln_attn and ln_mlp (num_ln_in_parallel_attn 2) over the same input
    new_decoder_architecture: bool = False
    # Encoders (BERT, DistilBERT, ViT) as sequence (image) classifiers
    num_labels: int = 2  # the classifier's outputs (PretrainedConfig's default)
    type_vocab_size: int = 2  # BertConfig: token types
    image_size: int = 0  # ViT: square images of channels x image_size x image_size, patch_size patches
    patch_size: int = 0
    channels: int = 3

    def __post_init__(self):
        if not self.head_dim:
            self.head_dim = self.hidden // self.heads
        if self.moe_experts and not self.moe_intermediate:
            self.moe_intermediate = self.intermediate


# --------------------------------------------------------------------------------------------
# Llama (transformers/models/llama/modeling_llama.py)
# --------------------------------------------------------------------------------------------
class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):  # LlamaRMSNorm.forward
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = mean_last_keepdim(hidden_states.pow(2))  # .mean(-1, keepdim=True), E3
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        dim = cfg.head_dim
        base = 10000.0
        # compute_default_rope_parameters
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.attention_scaling = 1.0
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("original_inv_freq", inv_freq.clone(), persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):  # LlamaRotaryEmbedding.forward: cos/sin with batch dim 1
        inv_freq_expanded = self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1).to(
            dtype=torch.float, device=x.device)
        position_ids_expanded = position_ids[:, None, :].float()
        with autocast(enabled=False):  # maybe_autocast(device_type, enabled=False)
            freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos() * self.attention_scaling
            sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)
        self.act_fn = nn.SiLU()  # ACT2FN["silu"] = SiLUActivation: nn.functional.silu

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


# --------------------------------------------------------------------------------------------
# Mixtral (transformers 5: models/mixtral/modeling_mixtral.py, integrations/moe.py): Llama's
# attention and norms, with MixtralSparseMoeBlock as the decoder layer's `mlp` (docs/sources.md,
# "transformers 5 MoE experts")
# --------------------------------------------------------------------------------------------
def _device_type(t):
    """hidden_states.device.type as transformers reads it: "cuda" for the emulated CUDA run."""
    return "cuda" if MODE == "emulate" else t.device.type


def _grouped_mm(input, weight, offs):  # integrations/moe.py
    # torch.nn.functional.grouped_mm / torch._grouped_mm are not autocast-enabled
    return grouped_mm_op(input.to(weight.dtype), weight, offs)


def _grouped_linear(input, weight, offs, bias=None, is_transposed=False):  # integrations/moe.py
    if is_transposed:
        out = _grouped_mm(input, weight, offs=offs)
    else:
        out = _grouped_mm(input, weight.transpose(-2, -1), offs=offs)
    if bias is not None:
        out = out + bias
    return out


def grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """integrations/moe.py grouped_mm_experts_forward (without expert parallelism), line for line.
    inv_perm is built with empty_like and a scatter (inv_perm[perm] = arange), the newest form;
    some 5.x versions have inv_perm = torch.argsort(perm) (one more sort, the same int64 [S])."""
    device = hidden_states.device
    num_top_k = top_k_index.size(-1)
    num_tokens = hidden_states.size(0)
    hidden_dim = hidden_states.size(-1)
    token_idx = torch.arange(num_tokens, device=device).unsqueeze(1).expand(-1, num_top_k).reshape(-1)
    sample_weights = top_k_weights.reshape(-1)
    expert_ids = top_k_index.reshape(-1)
    selected_hidden_states = hidden_states[token_idx]
    perm = torch.argsort(expert_ids)
    inv_perm = torch.empty_like(perm)
    inv_perm[perm] = torch.arange(perm.size(0), device=device)
    expert_ids_g = expert_ids[perm]
    sample_weights_g = sample_weights[perm]
    selected_hidden_states_g = selected_hidden_states[perm]
    selected_gate_up = self.gate_up_proj
    selected_down = self.down_proj
    # has_bias (gpt-oss): each sorted row's expert bias gathered from the [E, n] parameter
    has_bias, is_transposed = getattr(self, "has_bias", False), getattr(self, "is_transposed", False)
    selected_gate_up_bias = self.gate_up_proj_bias[expert_ids_g] if has_bias else None
    selected_down_bias = self.down_proj_bias[expert_ids_g] if has_bias else None
    histc_input = expert_ids_g.float() if _device_type(hidden_states) == "cpu" else expert_ids_g.int()
    tokens_per_expert = histc(histc_input, bins=self.num_experts, min=0, max=self.num_experts - 1)
    offsets = torch.cumsum(tokens_per_expert, dim=0, dtype=torch.int32)
    gate_up_out = _grouped_linear(selected_hidden_states_g, selected_gate_up, offs=offsets,
                                  bias=selected_gate_up_bias, is_transposed=is_transposed)
    gated_out = self._apply_gate(gate_up_out)
    out_per_sample_g = _grouped_linear(gated_out, selected_down, offs=offsets, bias=selected_down_bias,
                                       is_transposed=is_transposed)
    out_per_sample_g = out_per_sample_g * sample_weights_g.unsqueeze(-1)
    out_per_sample = out_per_sample_g[inv_perm]
    final_hidden_states = out_per_sample.view(num_tokens, num_top_k, hidden_dim).sum(dim=1)
    return final_hidden_states.to(hidden_states.dtype)


class MixtralExperts(nn.Module):
    """MixtralExperts, decorated @use_experts_implementation: forward runs
    ALL_EXPERTS_FUNCTIONS[config._experts_implementation] ("grouped_mm", the default that
    PreTrainedModel.get_correct_experts_implementation picks) or the class's own loop ("eager")."""

    def __init__(self, cfg):
        super().__init__()
        self.impl = cfg.experts_impl
        self.num_experts = cfg.moe_experts
        self.hidden_dim = cfg.hidden
        self.intermediate_dim = cfg.moe_intermediate
        self.gate_up_proj = nn.Parameter(torch.empty(self.num_experts, 2 * self.intermediate_dim, self.hidden_dim))
        self.down_proj = nn.Parameter(torch.empty(self.num_experts, self.hidden_dim, self.intermediate_dim))
        self.act_fn = nn.SiLU()  # ACT2FN["silu"]
        nn.init.normal_(self.gate_up_proj, std=0.02)  # MixtralPreTrainedModel._init_weights, initializer_range
        nn.init.normal_(self.down_proj, std=0.02)

    def _apply_gate(self, gate_up_out):  # integrations/moe.py _default_apply_gate
        gate, up = gate_up_out.chunk(2, dim=-1)
        return self.act_fn(gate) * up

    def forward(self, hidden_states, top_k_index, top_k_weights):
        if self.impl == "grouped_mm":
            return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
        assert self.impl == "eager", self.impl
        return self.eager_forward(hidden_states, top_k_index, top_k_weights)

    def eager_forward(self, hidden_states, top_k_index, top_k_weights):  # MixtralExperts.forward
        final_hidden_states = torch.zeros_like(hidden_states)
        with torch.no_grad():
            expert_mask = one_hot(top_k_index, num_classes=self.num_experts)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            if expert_idx == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            gate, up = nn.functional.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current_hidden_states = self.act_fn(gate) * up
            current_hidden_states = nn.functional.linear(current_hidden_states, self.down_proj[expert_idx])
            current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
        return final_hidden_states


class MixtralTopKRouter(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.top_k = cfg.moe_top_k
        self.num_experts = cfg.moe_experts
        self.hidden_dim = cfg.hidden
        self.weight = nn.Parameter(torch.empty(self.num_experts, self.hidden_dim))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, hidden_states):  # MixtralTopKRouter.forward
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        router_logits = F.linear(hidden_states, self.weight)
        router_probs = softmax(router_logits.float(), dim=-1)
        router_top_value, router_indices = torch.topk(router_probs, self.top_k, dim=-1)
        router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
        router_scores = router_top_value
        return router_logits, router_scores, router_indices


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.top_k = cfg.moe_top_k
        self.jitter_noise = 0.0  # router_jitter_noise's default
        self.gate = MixtralTopKRouter(cfg)
        self.experts = MixtralExperts(cfg)

    def forward(self, hidden_states):  # MixtralSparseMoeBlock.forward
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        if self.training and self.jitter_noise > 0:
            hidden_states *= torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        _, top_k_weights, top_k_index = self.gate(hidden_states)
        hidden_states = self.experts(hidden_states, top_k_index, top_k_weights)
        hidden_states = hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return hidden_states


# --------------------------------------------------------------------------------------------
# Qwen3-MoE (transformers 5: models/qwen3_moe/modeling_qwen3_moe.py): Qwen3's attention (q_norm
# and k_norm over each head, LlamaAttention with cfg.qk_norm) and norms, every layer's `mlp` a
# Qwen3MoeSparseMoeBlock (decoder_sparse_step 1, no mlp_only_layers). Qwen3MoeExperts
# (Qwen2MoeExperts(MixtralExperts) with num_experts and moe_intermediate_size) is Mixtral's
# packed-experts code, grouped_mm by default; the router is Qwen3MoeTopKRouter
# (Qwen2MoeTopKRouter's code). No jitter, no auxiliary loss (output_router_logits off), no
# sliding window (use_sliding_window false: create_causal_mask).
# --------------------------------------------------------------------------------------------
class Qwen3MoeTopKRouter(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.top_k = cfg.moe_top_k  # num_experts_per_tok
        self.num_experts = cfg.moe_experts
        self.norm_topk_prob = cfg.moe_norm_topk_prob
        self.hidden_dim = cfg.hidden
        self.weight = nn.Parameter(torch.zeros(self.num_experts, self.hidden_dim))
        # Not left at zeros: all-zero logits give every token the same uniform probabilities and
        # topk's ties the same experts. A small normal (std 0.02, initializer_range, as the experts
        # and Mixtral's router) spreads the tokens, as Qwen3MoePreTrainedModel._init_weights does in
        # the copies read (init.normal_(module.weight, std=initializer_range); not a tagged release).
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, hidden_states):  # Qwen3MoeTopKRouter.forward
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        router_logits = F.linear(hidden_states, self.weight)  # (seq_len, num_experts)
        # softmax(dtype=float): a bf16 input is converted with _to_copy then softmaxed (E4: as on
        # the CPU); under autocast an explicit dtype is kept (fp32_set_opt_dtype)
        router_logits = softmax(router_logits, dtype=torch.float, dim=-1)
        router_top_value, router_indices = torch.topk(router_logits, self.top_k, dim=-1)  # (seq_len, top_k)
        if self.norm_topk_prob:
            router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
        # router_logits is the fp32 softmax output here (rebound above), so this cast is to fp32, a
        # no-op: the routing weights stay fp32, as Mixtral's. (Copies of the code that keep the
        # softmax in a separate router_probs would cast them to the logits' dtype instead.)
        router_top_value = router_top_value.to(router_logits.dtype)
        router_scores = router_top_value
        return router_logits, router_scores, router_indices


class Qwen3MoeSparseMoeBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.experts = MixtralExperts(cfg)  # Qwen3MoeExperts: MixtralExperts' code; registered first
        self.gate = Qwen3MoeTopKRouter(cfg)

    def forward(self, hidden_states):  # Qwen3MoeSparseMoeBlock.forward
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states_reshaped = hidden_states.view(-1, hidden_dim)
        _, routing_weights, selected_experts = self.gate(hidden_states_reshaped)
        final_hidden_states = self.experts(hidden_states_reshaped, selected_experts, routing_weights)
        return final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)


def sparse_moe_block(cfg):
    """The decoder layer's `mlp` for a sparse MoE family."""
    return Qwen3MoeSparseMoeBlock(cfg) if cfg.family == "qwen3_moe" else MixtralSparseMoeBlock(cfg)


def index_none_dim2(x):
    """x[:, :, None, :, :]. E10: torch 2.x skips the full slices (an unsqueeze view whose backward
    is a view); torch 1.13 records four slices whose backwards each allocate a zeroed gradient."""
    if MODE == "native":
        return x[:, :, None, :, :]
    return x.unsqueeze(2)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = index_none_dim2(hidden_states).expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def llama_eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = dropout_fn(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


def dropout_fn(x, p, training):
    return dropout(x, p, training)


def sdpa_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                           is_causal=None):
    """integrations/sdpa_attention.py: GQA goes to SDPA (enable_gqa) when there is no mask."""
    enable_gqa = False
    if getattr(module, "num_key_value_groups", 1) > 1:
        if not (attention_mask is None and key.shape[-1] == value.shape[-1] <= 256):
            key = repeat_kv(key, module.num_key_value_groups)
            value = repeat_kv(value, module.num_key_value_groups)
        else:
            enable_gqa = True
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = query.shape[2] > 1 and attention_mask is None and is_causal
    assert dropout == 0.0
    attn_output = scaled_dot_product_attention(query, key, value, is_causal, scaling, enable_gqa)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, None


class LlamaAttention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.cfg = cfg
        self.head_dim = cfg.head_dim
        self.num_key_value_groups = cfg.heads // cfg.kv_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = 0.0
        self.is_causal = True
        # modeling_qwen2.py Qwen2Attention: bias=True on q_proj, k_proj and v_proj, not o_proj
        qkv_bias = cfg.family == "qwen2"
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(cfg.heads * self.head_dim, cfg.hidden, bias=False)
        if cfg.qk_norm:  # modeling_qwen3.py Qwen3Attention: RMSNorm over head_dim
            self.q_norm = LlamaRMSNorm(self.head_dim, eps=cfg.rms_eps)
            self.k_norm = LlamaRMSNorm(self.head_dim, eps=cfg.rms_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        if self.cfg.qk_norm:  # Qwen3Attention.forward: the norms before the transpose
            query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
            key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
        else:
            query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attention_interface = sdpa_attention_forward if self.cfg.attn == "sdpa" else llama_eager_attention_forward
        attn_output, attn_weights = attention_interface(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class GradientCheckpointingLayer(nn.Module):
    """modeling_layers.GradientCheckpointingLayer: the layer call goes through
    self._gradient_checkpointing_func(partial(super().__call__, **kwargs), *args) when enabled."""

    gradient_checkpointing = False
    _gradient_checkpointing_func = None

    def __call__(self, *args, **kwargs):
        HOOKS.layer_input(self, args[0])
        if self.gradient_checkpointing and self.training:
            out = self._gradient_checkpointing_func(partial(super().__call__, **kwargs), *args)
        else:
            out = super().__call__(*args, **kwargs)
        HOOKS.layer_output(self, out[0] if isinstance(out, tuple) else out)  # Falcon's layer returns a tuple
        return out


class LlamaDecoderLayer(GradientCheckpointingLayer):
    attention_type = "full_attention"

    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.self_attn = LlamaAttention(cfg, layer_idx)
        self.mlp = sparse_moe_block(cfg) if cfg.moe_experts else LlamaMLP(cfg)  # Mixtral, Qwen3-MoE: the MoE block
        self.input_layernorm = LlamaRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden, eps=cfg.rms_eps)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, position_embeddings=position_embeddings,
                                          attention_mask=attention_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = residual + hidden_states
        return hidden_states


def find_packed_sequence_indices(position_ids):  # masking_utils.find_packed_sequence_indices
    first_dummy_value = position_ids[:, :1] - 1
    position_diff = torch.diff(position_ids, prepend=first_dummy_value, dim=-1)
    packed_sequence_mask = (position_diff != 1).cumsum(-1)
    if bool((packed_sequence_mask[:, -1] == 0).all()):
        return None
    return packed_sequence_mask


def unpacked_mask_shape(inputs_embeds, position_ids):
    """masking_utils._preprocess_mask_arguments without padding or cache: find_packed_sequence_indices
    over the positions (none packed here); the batch, query and key lengths."""
    batch_size, q_length = inputs_embeds.shape[0], inputs_embeds.shape[1]
    pos = position_ids
    if batch_size != pos.shape[0]:
        pos = pos.expand(batch_size, -1)
    packed = find_packed_sequence_indices(pos)
    assert packed is None
    del pos
    return batch_size, q_length, q_length


def create_causal_mask(cfg, inputs_embeds, position_ids):
    """masking_utils.create_causal_mask without padding or cache: sdpa returns None
    (is_causal), eager builds sdpa_mask's bool [b,1,s,s] (an expanded [1,1,s,s]) and
    eager_mask's torch.where into the embeddings' dtype."""
    batch_size, q_length, kv_length = unpacked_mask_shape(inputs_embeds, position_ids)
    if cfg.attn == "sdpa":
        return None  # _ignore_causal_mask_sdpa: q_length == kv_length and no padding
    dtype, device = inputs_embeds.dtype, inputs_embeds.device
    batch_arange = torch.arange(batch_size, device=device)
    head_arange = torch.arange(1, device=device)
    q_arange = torch.arange(q_length, device=device) + 0
    kv_arange = torch.arange(kv_length, device=device) + 0
    # causal_mask_function(b, h, q, kv) = kv_idx <= q_idx over _non_vmap_expansion_sdpa's broadcast
    mask = kv_arange[None, None, None, :] <= q_arange[None, None, :, None]
    mask = mask.expand(batch_size, -1, q_length, kv_length)
    del batch_arange, head_arange, q_arange, kv_arange
    min_dtype = torch.finfo(dtype).min
    return torch.where(mask, torch.tensor(0.0, device=device, dtype=dtype), min_dtype)


def sliding_window_causal_mask_function(sliding_window):
    """masking_utils.sliding_window_causal_mask_function: and_masks(sliding_window_overlay(w),
    causal_mask_function), index-based (use_vmap False), evaluated once on the broadcast aranges."""

    def and_mask(batch_idx, head_idx, q_idx, kv_idx):  # and_masks.and_mask
        result = q_idx.new_ones((), dtype=torch.bool)
        result = result & (kv_idx > q_idx - sliding_window)  # sliding_window_overlay; .to(result.device): no-op
        result = result & (kv_idx <= q_idx)  # causal_mask_function
        return result

    return and_mask


def create_sliding_window_causal_mask(cfg, inputs_embeds, position_ids):
    """masking_utils.create_sliding_window_causal_mask without padding or cache (transformers 5):
    _preprocess_mask_arguments' find_packed_sequence_indices, then the mask interface with
    local_size = sliding_window. sdpa_mask returns None while kv_length < the window
    (_ignore_causal_mask_sdpa); eager_mask (allow_is_causal_skip False) always builds the mask:
    sdpa_mask's bool [b, 1, s, s] (an expanded [1, 1, s, s]) from the and_masks function, then
    torch.where into the embeddings' dtype."""
    batch_size, q_length, kv_length = unpacked_mask_shape(inputs_embeds, position_ids)
    sliding_window = cfg.sliding_window
    if cfg.attn == "sdpa":
        # _ignore_causal_mask_sdpa: no padding, q_length == kv_length, kv_length < local_attention_size
        assert kv_length < sliding_window, \
            "SDPA with a window the sequence reaches gets a boolean mask: the masked CUDA kernel is not emulated"
        return None
    mask_function = sliding_window_causal_mask_function(sliding_window)
    dtype, device = inputs_embeds.dtype, inputs_embeds.device
    batch_arange = torch.arange(batch_size, device=device)
    head_arange = torch.arange(1, device=device)
    q_arange = torch.arange(q_length, device=device) + 0
    kv_arange = torch.arange(kv_length, device=device) + 0
    # _non_vmap_expansion_sdpa's broadcast views (E10: the full slices are views in torch 2.x)
    mask = mask_function(batch_arange[:, None, None, None], head_arange[None, :, None, None],
                         q_arange[None, None, :, None], kv_arange[None, None, None, :])
    mask = mask.expand(batch_size, -1, q_length, kv_length)
    del batch_arange, head_arange, q_arange, kv_arange
    min_dtype = torch.finfo(dtype).min
    return torch.where(mask, torch.tensor(0.0, device=device, dtype=dtype), min_dtype)


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg, i) for i in range(cfg.layers)])
        self.norm = LlamaRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.rotary_emb = LlamaRotaryEmbedding(cfg)

    def causal_masks(self, inputs_embeds, position_ids):  # by the layers' attention_type
        if self.cfg.family == "mistral":
            # MistralModel.forward: mask_function = create_causal_mask if self.config.sliding_window
            # is None else create_sliding_window_causal_mask (every layer gets it)
            return {"full_attention": create_sliding_window_causal_mask(self.cfg, inputs_embeds, position_ids)}
        return {"full_attention": create_causal_mask(self.cfg, inputs_embeds, position_ids)}

    def scaled(self, inputs_embeds):
        return inputs_embeds

    def forward(self, input_ids):
        inputs_embeds = self.embed_tokens(input_ids)
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + 0
        position_ids = position_ids.unsqueeze(0)
        causal_masks = self.causal_masks(inputs_embeds, position_ids)
        hidden_states = self.scaled(inputs_embeds)
        position_embeddings = self.rotary_emb(hidden_states, position_ids=position_ids)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, attention_mask=causal_masks[decoder_layer.attention_type],
                                          position_embeddings=position_embeddings, position_ids=position_ids)
        hidden_states = self.norm(hidden_states)
        return hidden_states


def full_slice(hidden_states):
    """hidden_states[:, slice(-logits_to_keep, None), :] with logits_to_keep = 0. E10: torch 2.x's
    indexing returns the tensor itself for slices covering a whole dimension (applySlice); torch
    1.13 records a slice for each index, and each SliceBackward allocates a zeroed gradient."""
    if MODE == "native":
        return hidden_states[:, slice(0, None), :]
    return hidden_states


def first_token(hidden_states):
    """hidden_states[:, 0] (the encoders' heads). E10: torch 2.x's indexing skips the full slice
    (applySlice returns the tensor itself) and selects; torch 1.13 records a slice too, whose
    SliceBackward allocates a second zero-filled gradient the size of the hidden states."""
    if MODE == "native":
        return hidden_states[:, 0]
    return hidden_states.select(1, 0)


def ForCausalLMLoss(logits, labels, vocab_size, ignore_index=-100):
    """loss/loss_utils.py: upcast, shift the labels (pad + slice + contiguous), cross-entropy."""
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous()
    logits = logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1)
    # fixed_cross_entropy, reduction "mean" without num_items_in_batch
    return F.cross_entropy(logits, shift_labels, ignore_index=ignore_index, reduction="mean")


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tied:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.loss_function = ForCausalLMLoss

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def final_norm(self):
        return self.model.norm

    def decoder_layers(self):
        return self.model.layers

    def forward(self, input_ids, labels=None):
        hidden_states = self.model(input_ids)
        logits = self.lm_head(full_slice(hidden_states))  # hidden_states[:, slice(-0, None), :]
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.cfg.vocab)
        return loss, logits


# --------------------------------------------------------------------------------------------
# gpt-oss (transformers 5: models/gpt_oss/modeling_gpt_oss.py, generated from modular_gpt_oss.py;
# integrations/moe.py): Qwen2's attention with biases on all four projections and a learned
# per-head `sinks` logit, eager only (_supports_sdpa = False); GptOssRMSNorm (the weight's
# multiply in fp32, then the cast); a half-width rotary table applied by chunk and cat; layers
# alternating sliding_attention (even) and full_attention (odd); GptOssMLP = GptOssTopKRouter
# (linear with bias, topk of the logits, softmax of the top-k values in their own dtype) and
# GptOssExperts, decorated @use_experts_implementation(is_transposed=True, has_bias=True): packed
# [E, h, 2f] and [E, f, h] weights used untransposed by grouped_mm, per-row gathered biases, and
# the clamped, interleaved GLU of _apply_gate (alpha 1.702, limit 7.0).
# --------------------------------------------------------------------------------------------
class GptOssRMSNorm(LlamaRMSNorm):
    def forward(self, hidden_states):  # GptOssRMSNorm.forward
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = mean_last_keepdim(hidden_states.pow(2))  # .mean(-1, keepdim=True), E3
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight * hidden_states).to(input_dtype)  # "main diff with Llama"


class GptOssRotaryEmbedding(LlamaRotaryEmbedding):
    """GptOssRotaryEmbedding.forward: emb = freqs (no cat), so cos and sin are [1, s, d / 2].
    gpt-oss configures YaRN (rope_type "yarn", factor 32): that changes inv_freq's values and
    attention_scaling, not a shape, so the default table stands for it here (attention_scaling 1)."""

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        position_ids_expanded = position_ids[:, None, :].float()
        with autocast(enabled=False):  # maybe_autocast(device_type, enabled=False): force float32
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = freqs
            cos = emb.cos() * self.attention_scaling
            sin = emb.sin() * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)


def gptoss_apply_rotary_emb(x, cos, sin):  # modeling_gpt_oss._apply_rotary_emb
    first_half, second_half = torch.chunk(x, 2, dim=-1)
    first_ = first_half * cos - second_half * sin
    second_ = second_half * cos + first_half * sin
    return torch.cat((first_, second_), dim=-1)


def gptoss_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = gptoss_apply_rotary_emb(q, cos, sin)
    k_embed = gptoss_apply_rotary_emb(k, cos, sin)
    return q_embed, k_embed


def gptoss_eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0):
    """modeling_gpt_oss.eager_attention_forward: the sink logit of each head concatenated to the
    scores as one more column, the row max subtracted, softmax in the logits' own dtype (bf16 in a
    bf16 model), the sink column dropped by a slice (a view: matmul reads probs' storage)."""
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    sinks = module.sinks.reshape(1, -1, 1, 1).expand(query.shape[0], -1, query.shape[-2], -1)
    combined_logits = torch.cat([attn_weights, sinks], dim=-1)
    combined_logits = combined_logits - combined_logits.max(dim=-1, keepdim=True).values
    probs = softmax(combined_logits, dim=-1, dtype=combined_logits.dtype)
    scores = probs[..., :-1]  # we drop the sink here
    attn_weights = dropout_fn(scores, p=dropout, training=module.training).to(value_states.dtype)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class GptOssAttention(nn.Module):
    """GptOssAttention(Qwen2Attention): q/k/v/o with bias=config.attention_bias (true), sinks
    [heads]; sliding_window for a sliding_attention layer (only the mask uses it in eager)."""

    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.cfg = cfg
        self.layer_idx = layer_idx
        self.head_dim = cfg.head_dim
        self.num_key_value_groups = cfg.heads // cfg.kv_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = 0.0
        self.is_causal = True
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(cfg.heads * self.head_dim, cfg.hidden, bias=bias)
        self.sliding_window = cfg.sliding_window if gptoss_layer_type(layer_idx) == "sliding_attention" else None
        self.sinks = nn.Parameter(torch.empty(cfg.heads))
        nn.init.normal_(self.sinks, std=0.02)  # GptOssPreTrainedModel._init_weights

    def forward(self, hidden_states, position_embeddings, attention_mask):  # GptOssAttention.forward
        assert self.cfg.attn == "eager", "gpt-oss: eager attention only (sinks; _supports_sdpa False)"
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = gptoss_apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attn_output, attn_weights = gptoss_eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


def gptoss_layer_type(layer_idx):
    """GptOssConfig's default layer_types: "sliding_attention" if bool((i + 1) % 2) else "full_attention"."""
    return "sliding_attention" if bool((layer_idx + 1) % 2) else "full_attention"


class GptOssExperts(nn.Module):
    """GptOssExperts with @use_experts_implementation(is_transposed=True, has_bias=True):
    gate_up_proj [E, h, 2f], gate_up_proj_bias [E, 2f], down_proj [E, f, h], down_proj_bias [E, h];
    "grouped_mm" (the default) runs integrations/moe.py's grouped_mm_experts_forward, "eager" the
    class's own loop."""

    def __init__(self, cfg):
        super().__init__()
        self.impl = cfg.experts_impl
        self.has_bias = True
        self.is_transposed = True
        self.intermediate_size = cfg.moe_intermediate
        self.num_experts = cfg.moe_experts
        self.hidden_size = cfg.hidden
        self.gate_up_proj = nn.Parameter(torch.empty(self.num_experts, self.hidden_size, 2 * self.intermediate_size))
        self.gate_up_proj_bias = nn.Parameter(torch.empty(self.num_experts, 2 * self.intermediate_size))
        self.down_proj = nn.Parameter(torch.empty((self.num_experts, self.intermediate_size, self.hidden_size)))
        self.down_proj_bias = nn.Parameter(torch.empty(self.num_experts, self.hidden_size))
        self.alpha = 1.702
        self.limit = 7.0
        nn.init.normal_(self.gate_up_proj, std=0.02)  # GptOssPreTrainedModel._init_weights
        nn.init.zeros_(self.gate_up_proj_bias)
        nn.init.normal_(self.down_proj, std=0.02)
        nn.init.zeros_(self.down_proj_bias)

    def _apply_gate(self, gate_up):  # GptOssExperts._apply_gate
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        gate = gate.clamp(min=None, max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        glu = gate * torch.sigmoid(gate * self.alpha)
        gated_output = (up + 1) * glu
        return gated_output

    def forward(self, hidden_states, router_indices=None, routing_weights=None):
        if self.impl == "grouped_mm":
            return grouped_mm_experts_forward(self, hidden_states, router_indices, routing_weights)
        assert self.impl == "eager", self.impl
        return self.eager_forward(hidden_states, router_indices, routing_weights)

    def eager_forward(self, hidden_states, router_indices, routing_weights):  # GptOssExperts.forward
        next_states = torch.zeros_like(hidden_states, dtype=hidden_states.dtype, device=hidden_states.device)
        with torch.no_grad():
            expert_mask = one_hot(router_indices, num_classes=self.num_experts)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            if expert_idx == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            gate_up = current_state @ self.gate_up_proj[expert_idx] + self.gate_up_proj_bias[expert_idx]
            gated_output = self._apply_gate(gate_up)
            out = gated_output @ self.down_proj[expert_idx] + self.down_proj_bias[expert_idx]
            weighted_output = out * routing_weights[token_idx, top_k_pos, None]
            next_states.index_add_(0, token_idx, weighted_output.to(hidden_states.dtype))
        return next_states


class GptOssTopKRouter(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.top_k = cfg.moe_top_k  # num_experts_per_tok
        self.num_experts = cfg.moe_experts  # num_local_experts
        self.hidden_dim = cfg.hidden
        self.weight = nn.Parameter(torch.zeros(self.num_experts, self.hidden_dim))
        self.bias = nn.Parameter(torch.zeros(self.num_experts))
        nn.init.normal_(self.weight, std=0.02)  # GptOssPreTrainedModel._init_weights (normal, both)
        nn.init.normal_(self.bias, std=0.02)

    def forward(self, hidden_states):  # GptOssTopKRouter.forward
        router_logits = F.linear(hidden_states, self.weight, self.bias)  # (num_tokens, num_experts)
        router_top_value, router_indices = torch.topk(router_logits, self.top_k, dim=-1)  # (num_tokens, top_k)
        # softmax over the k values in their own dtype (bf16 in a bf16 model and under autocast,
        # where the explicit dtype is kept): the routing weights are the logits' dtype
        router_scores = softmax(router_top_value, dim=1, dtype=router_top_value.dtype)
        return router_logits, router_scores, router_indices


class GptOssMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.router = GptOssTopKRouter(cfg)  # registered before the experts
        self.experts = GptOssExperts(cfg)

    def forward(self, hidden_states):  # GptOssMLP.forward
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.reshape(-1, hidden_dim)
        _, router_scores, router_indices = self.router(hidden_states)
        hidden_states = self.experts(hidden_states, router_indices, router_scores)
        hidden_states = hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return hidden_states, router_scores


class GptOssDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.hidden_size = cfg.hidden
        self.self_attn = GptOssAttention(cfg, layer_idx)
        self.mlp = GptOssMLP(cfg)
        self.input_layernorm = GptOssRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.post_attention_layernorm = GptOssRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.attention_type = gptoss_layer_type(layer_idx)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, position_embeddings=position_embeddings,
                                          attention_mask=attention_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states, _ = self.mlp(hidden_states)  # diff with llama: router scores
        hidden_states = residual + hidden_states
        return hidden_states


class GptOssModel(LlamaModel):
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList([GptOssDecoderLayer(cfg, i) for i in range(cfg.layers)])
        self.norm = GptOssRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.rotary_emb = GptOssRotaryEmbedding(cfg)

    def causal_masks(self, inputs_embeds, position_ids):
        # causal_mask_mapping: create_causal_mask, then create_sliding_window_causal_mask; below
        # the window the sliding mask is the causal one, built again (as for Gemma 2)
        masks = super().causal_masks(inputs_embeds, position_ids)
        assert inputs_embeds.shape[1] <= self.cfg.sliding_window
        masks["sliding_attention"] = create_causal_mask(self.cfg, inputs_embeds, position_ids)
        return masks


class GptOssForCausalLM(LlamaForCausalLM):  # MixtralForCausalLM: output_router_logits off, no aux loss
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        self.model = GptOssModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tied:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.loss_function = ForCausalLMLoss


# --------------------------------------------------------------------------------------------
# GPT-2 (transformers/models/gpt2/modeling_gpt2.py)
# --------------------------------------------------------------------------------------------
class Conv1D(nn.Module):  # pytorch_utils.Conv1D
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):  # activations.NewGELUActivation ("gelu_new")
    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class Dropout(nn.Module):  # nn.Dropout through the dropout() wrapper (E1)
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return dropout(x, self.p, self.training)


def gpt2_eager_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0):
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = softmax(attn_weights, dim=-1)
    attn_weights = attn_weights.type(value.dtype)
    attn_weights = dropout_fn(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2)
    return attn_output, attn_weights


class GPT2Attention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.cfg = cfg
        self.embed_dim = cfg.hidden
        self.num_heads = cfg.heads
        self.head_dim = cfg.hidden // cfg.heads
        self.split_size = cfg.hidden
        self.scaling = self.head_dim ** -0.5  # scale_attn_weights
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = Dropout(cfg.dropout)
        self.resid_dropout = Dropout(cfg.dropout)
        self.is_causal = True

    def forward(self, hidden_states, attention_mask=None):
        query_states, key_states, value_states = self.c_attn(hidden_states).split(self.split_size, dim=2)
        shape_kv = (*key_states.shape[:-1], -1, self.head_dim)
        key_states = key_states.view(shape_kv).transpose(1, 2)
        value_states = value_states.view(shape_kv).transpose(1, 2)
        shape_q = (*query_states.shape[:-1], -1, self.head_dim)
        query_states = query_states.view(shape_q).transpose(1, 2)
        if self.cfg.attn == "sdpa":
            attn_output, attn_weights = sdpa_attention_forward(
                self, query_states, key_states, value_states, attention_mask,
                dropout=self.attn_dropout.p if self.training else 0.0, scaling=self.scaling)
        else:
            attn_output, attn_weights = gpt2_eager_attention_forward(
                self, query_states, key_states, value_states, attention_mask,
                dropout=self.attn_dropout.p if self.training else 0.0, scaling=self.scaling)
        attn_output = attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()
        attn_output = self.c_proj(attn_output)
        attn_output = self.resid_dropout(attn_output)
        return attn_output, attn_weights  # the weights (the dropout output) live until here


class GPT2MLP(nn.Module):
    def __init__(self, intermediate_size, cfg):
        super().__init__()
        self.c_fc = Conv1D(intermediate_size, cfg.hidden)
        self.c_proj = Conv1D(cfg.hidden, intermediate_size)
        self.act = NewGELUActivation()
        self.dropout = Dropout(cfg.dropout)

    def forward(self, hidden_states):
        hidden_states = self.c_fc(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.c_proj(hidden_states)
        return self.dropout(hidden_states)


class GPT2Block(GradientCheckpointingLayer):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.ln_1 = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        self.attn = GPT2Attention(cfg, layer_idx)
        self.ln_2 = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        self.mlp = GPT2MLP(cfg.intermediate, cfg)

    def forward(self, hidden_states, past_key_values=None, attention_mask=None, encoder_hidden_states=None,
                position_ids=None):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output, _ = self.attn(hidden_states, attention_mask=attention_mask)
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = self.ln_2(hidden_states)
        feed_forward_hidden_states = self.mlp(hidden_states)
        return residual + feed_forward_hidden_states


class GPT2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.hidden)
        self.wpe = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.drop = Dropout(cfg.dropout)
        self.h = nn.ModuleList([GPT2Block(cfg, i) for i in range(cfg.layers)])
        self.ln_f = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)

    def forward(self, input_ids):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        inputs_embeds = self.wte(input_ids)
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + 0
        position_ids = position_ids.unsqueeze(0)
        position_embeds = self.wpe(position_ids)
        hidden_states = inputs_embeds + position_embeds
        causal_mask = create_causal_mask(self.cfg, inputs_embeds, position_ids)
        hidden_states = self.drop(hidden_states)
        output_shape = (-1,) + input_shape[1:] + (hidden_states.size(-1),)
        for block in self.h:
            # past_key_values (None while training with checkpointing or without a cache),
            # causal_mask and encoder_hidden_states are positional (modeling_gpt2.GPT2Model.forward)
            hidden_states = block(hidden_states, None, causal_mask, None, position_ids=position_ids)
        hidden_states = self.ln_f(hidden_states)
        return hidden_states.view(output_shape)


class GPT2LMHeadModel(nn.Module):
    body = GPT2Model  # the transformer under the head, and its word embedding's attribute
    embeddings = "wte"

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = self.body(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tied:
            self.lm_head.weight = self.get_input_embeddings().weight
        self.loss_function = ForCausalLMLoss

    def get_input_embeddings(self):
        return getattr(self.transformer, self.embeddings)

    def final_norm(self):
        return self.transformer.ln_f

    def decoder_layers(self):
        return self.transformer.h

    def forward(self, input_ids, labels=None):
        hidden_states = self.transformer(input_ids)
        logits = self.lm_head(full_slice(hidden_states))  # hidden_states[:, slice(-0, None), :]
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.cfg.vocab)
        return loss, logits


# --------------------------------------------------------------------------------------------
# Gemma 2 (transformers/models/gemma2/modeling_gemma2.py): Llama's attention and GeGLU MLP with
# four (1 + weight) RMSNorms in fp32 per layer, tanh soft-capping of the attention and final
# logits, a scaled embedding and alternating sliding-window masks
# --------------------------------------------------------------------------------------------
class Gemma2RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(mean_last_keepdim(x.pow(2)) + self.eps)  # .mean(-1, keepdim=True), E3

    def forward(self, x):  # Gemma2RMSNorm.forward: the weight's multiply in fp32, then the cast
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class GeluTanh(nn.Module):  # activations.GELUTanh ("gelu_pytorch_tanh")
    def forward(self, x):
        return F.gelu(x, approximate="tanh")


def gemma2_eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0,
                                   softcap=None):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if softcap is not None:
        attn_weights = attn_weights / softcap
        attn_weights = torch.tanh(attn_weights)
        attn_weights = attn_weights * softcap
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = dropout_fn(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class Gemma2Attention(LlamaAttention):
    def __init__(self, cfg, layer_idx):
        super().__init__(cfg, layer_idx)
        self.scaling = cfg.head_dim ** -0.5  # query_pre_attn_scalar ** -0.5, query_pre_attn_scalar = head_dim
        self.softcap = cfg.attn_softcap or None

    def q_normed(self, query_states):  # Gemma 2 has no q_norm, k_norm
        return query_states

    def k_normed(self, key_states):
        return key_states

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        query_states = self.q_normed(query_states)  # rebound one at a time, as Gemma 3 does
        key_states = self.k_normed(key_states)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        if self.cfg.attn == "sdpa":  # sdpa_attention_forward takes softcap in **kwargs and ignores it
            attn_output, _ = sdpa_attention_forward(self, query_states, key_states, value_states,
                                                    attention_mask, scaling=self.scaling)
        else:
            attn_output, _ = gemma2_eager_attention_forward(
                self, query_states, key_states, value_states, attention_mask, scaling=self.scaling,
                softcap=self.softcap)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), None


class Gemma2DecoderLayer(GradientCheckpointingLayer):
    attention_class = Gemma2Attention

    @staticmethod
    def sliding(cfg, layer_idx):  # Gemma2DecoderLayer: the even layers
        return layer_idx % 2 == 0

    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.attention_type = "sliding_attention" if self.sliding(cfg, layer_idx) else "full_attention"
        self.self_attn = self.attention_class(cfg, layer_idx)
        self.mlp = LlamaMLP(cfg)
        self.mlp.act_fn = GeluTanh()  # Gemma2MLP: ACT2FN[config.hidden_activation]
        self.input_layernorm = Gemma2RMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.post_attention_layernorm = Gemma2RMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.pre_feedforward_layernorm = Gemma2RMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.post_feedforward_layernorm = Gemma2RMSNorm(cfg.hidden, eps=cfg.rms_eps)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, position_embeddings=position_embeddings,
                                          attention_mask=attention_mask)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        return residual + hidden_states


class Gemma2Model(LlamaModel):
    layer_class = Gemma2DecoderLayer

    def __init__(self, cfg):
        super().__init__(cfg)
        self.layers = nn.ModuleList([self.layer_class(cfg, i) for i in range(cfg.layers)])
        self.norm = Gemma2RMSNorm(cfg.hidden, eps=cfg.rms_eps)

    def causal_masks(self, inputs_embeds, position_ids):
        # causal_mask_mapping: create_causal_mask and create_sliding_window_causal_mask; below the
        # window the sliding mask is the causal one, built again
        masks = super().causal_masks(inputs_embeds, position_ids)
        assert inputs_embeds.shape[1] <= self.cfg.sliding_window
        masks["sliding_attention"] = create_causal_mask(self.cfg, inputs_embeds, position_ids)
        return masks

    def scaled(self, inputs_embeds):
        # normalizer = torch.tensor(hidden_size**0.5, dtype=hidden_states.dtype): a 0-dim CPU
        # tensor on a CUDA step, no device memory; here a Python scalar, which saves nothing either
        return inputs_embeds * float(torch.tensor(self.cfg.hidden ** 0.5, dtype=inputs_embeds.dtype))


class Gemma2ForCausalLM(LlamaForCausalLM):
    model_class = Gemma2Model

    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        self.model = self.model_class(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tied:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.loss_function = ForCausalLMLoss

    def forward(self, input_ids, labels=None):
        hidden_states = self.model(input_ids)
        logits = self.lm_head(full_slice(hidden_states))
        if self.cfg.final_softcap:
            logits = logits / self.cfg.final_softcap
            logits = torch.tanh(logits)
            logits = logits * self.cfg.final_softcap
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.cfg.vocab)
        return loss, logits


# --------------------------------------------------------------------------------------------
# Phi-3 (transformers/models/phi3/modeling_phi3.py): Llama with one qkv_proj and one
# gate_up_proj, a rotary that ends in torch.cat
# --------------------------------------------------------------------------------------------
def phi3_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]
    # partial_rotary_factor 1: q[..., :rotary_dim] is q itself (E10), q[..., rotary_dim:] empty
    q_rot, q_pass = (q, q[..., rotary_dim:]) if rotary_dim == q.shape[-1] else (q[..., :rotary_dim], q[..., rotary_dim:])
    k_rot, k_pass = (k, k[..., rotary_dim:]) if rotary_dim == k.shape[-1] else (k[..., :rotary_dim], k[..., rotary_dim:])
    q_embed = torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass], dim=-1)
    k_embed = torch.cat([(k_rot * cos) + (rotate_half(k_rot) * sin), k_pass], dim=-1)
    return q_embed, k_embed


class Phi3Attention(LlamaAttention):
    def __init__(self, cfg, layer_idx):
        super().__init__(cfg, layer_idx)
        del self.q_proj, self.k_proj, self.v_proj
        self.qkv_proj = nn.Linear(cfg.hidden, (cfg.heads + 2 * cfg.kv_heads) * self.head_dim, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask):  # Phi3Attention.forward
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        qkv = self.qkv_proj(hidden_states)
        query_pos = self.cfg.heads * self.head_dim
        kv_size = self.cfg.kv_heads * self.head_dim
        query_states = qkv[..., :query_pos].view(hidden_shape).transpose(1, 2)
        key_states = qkv[..., query_pos: query_pos + kv_size].view(hidden_shape).transpose(1, 2)
        value_states = qkv[..., query_pos + kv_size:].view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = phi3_apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attention_interface = sdpa_attention_forward if self.cfg.attn == "sdpa" else llama_eager_attention_forward
        attn_output, _ = attention_interface(self, query_states, key_states, value_states, attention_mask,
                                             scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), None


class Phi3MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden, 2 * cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)
        self.activation_fn = nn.SiLU()

    def forward(self, hidden_states):  # Phi3MLP.forward
        up_states = self.gate_up_proj(hidden_states)
        gate, up_states = up_states.chunk(2, dim=-1)
        up_states = up_states * self.activation_fn(gate)
        return self.down_proj(up_states)


class Phi3DecoderLayer(LlamaDecoderLayer):  # resid_attn_dropout, resid_mlp_dropout: p = 0
    def __init__(self, cfg, layer_idx):
        super().__init__(cfg, layer_idx)
        self.self_attn = Phi3Attention(cfg, layer_idx)
        self.mlp = Phi3MLP(cfg)


class Phi3Model(LlamaModel):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.layers = nn.ModuleList([Phi3DecoderLayer(cfg, i) for i in range(cfg.layers)])


class Phi3ForCausalLM(LlamaForCausalLM):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.model = Phi3Model(cfg)
        if cfg.tied:
            self.lm_head.weight = self.model.embed_tokens.weight


# --------------------------------------------------------------------------------------------
# Gemma 3 (transformers/models/gemma3/modeling_gemma3.py): Gemma 2's block, norms and masks, with
# q_norm and k_norm (Gemma3RMSNorm, Gemma2RMSNorm's formula, over head_dim after the heads'
# transpose), no soft-capping unless configured, the scale of the embedding a device buffer, and
# a window on layer i unless (i + 1) % sliding_window_pattern == 0
# --------------------------------------------------------------------------------------------
class Gemma3Attention(Gemma2Attention):
    def __init__(self, cfg, layer_idx):
        super().__init__(cfg, layer_idx)
        self.q_norm = Gemma2RMSNorm(cfg.head_dim, eps=cfg.rms_eps)
        self.k_norm = Gemma2RMSNorm(cfg.head_dim, eps=cfg.rms_eps)

    def q_normed(self, query_states):  # Gemma3Attention.forward: after the heads' transpose
        return self.q_norm(query_states)

    def k_normed(self, key_states):
        return self.k_norm(key_states)


class Gemma3DecoderLayer(Gemma2DecoderLayer):
    attention_class = Gemma3Attention

    @staticmethod
    def sliding(cfg, layer_idx):
        return (layer_idx + 1) % cfg.sliding_window_pattern != 0


class Gemma3Model(Gemma2Model):
    layer_class = Gemma3DecoderLayer

    def __init__(self, cfg):
        super().__init__(cfg)
        # Gemma3TextScaledWordEmbedding: register_buffer("embed_scale", torch.tensor(hidden ** 0.5),
        # persistent=False), on the device with the model
        self.register_buffer("embed_scale", torch.tensor(cfg.hidden ** 0.5), persistent=False)

    def scaled(self, inputs_embeds):  # Gemma3TextScaledWordEmbedding.forward
        return inputs_embeds * self.embed_scale.to(inputs_embeds.dtype)


class Gemma3ForCausalLM(Gemma2ForCausalLM):
    model_class = Gemma3Model


# --------------------------------------------------------------------------------------------
# Other frameworks' own Llama 3 blocks (vramfit's --model-code), op for op after their sources.
# The model-level parts (embedding, final norm's place, lm_head, Hugging Face's ForCausalLMLoss)
# are kept as LlamaForCausalLM has them, so that a case isolates the block; each framework's
# final norm is its own RMSNorm, as vramfit models it (the code's norm). Rotary tables are the
# frameworks' buffers, sliced (no per-step allocation); a table is sized to the case's sequence.
# --------------------------------------------------------------------------------------------
def repeat_interleave(x, n_rep, dim):
    """x.repeat_interleave(n_rep, dim) with an int count. E12: torch 2.x (aten/native/Repeat.cpp,
    repeat_interleave_symint with SymInt repeats) runs unsqueeze(dim + 1).expand(...)
    .clone(contiguous).flatten(dim, dim + 1); torch 1.13 builds an int64 repeats tensor and runs
    index_select, which saves an index."""
    if MODE == "native":
        return x.repeat_interleave(n_rep, dim=dim)
    x = x.unsqueeze(dim + 1)
    shape = list(x.shape)
    shape[dim + 1] = n_rep
    return x.expand(shape).clone(memory_format=torch.contiguous_format).flatten(dim, dim + 1)


class FrameworkLayer(GradientCheckpointingLayer):
    pass


class FrameworkModel(nn.Module):
    """tok_embeddings, the layers, the framework's final norm; forward passes each framework's
    rotary arguments (framework_rotary)."""

    def __init__(self, cfg, layer_class, norm_class):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList([layer_class(cfg, i) for i in range(cfg.layers)])
        self.norm = norm_class(cfg.hidden, eps=cfg.rms_eps)

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        args = self.rotary_args(h)
        for layer in self.layers:
            h = layer(h, *args)
        return self.norm(h)


class FrameworkForCausalLM(LlamaForCausalLM):
    model_class = None

    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        self.model = self.model_class(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.loss_function = ForCausalLMLoss

    def forward(self, input_ids, labels=None):
        hidden_states = self.model(input_ids)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.cfg.vocab)
        return loss, logits

    def restore_buffers(self):
        """After model.to(bf16): the frameworks build their rotary tables in fp32 or complex64
        after (or regardless of) the weights' dtype."""


# torchtune (bd2a0fc): models/llama3/_component_builders.py llama3(), modules/rms_norm.py,
# modules/position_embeddings.py, modules/attention.py, modules/feed_forward.py,
# modules/transformer.py TransformerSelfAttentionLayer
class TorchtuneRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.normalized_shape = (dim,)
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):  # RMSNorm.forward
        x_fp32 = x.float()
        x_normed = (x_fp32 * torch.rsqrt(mean_last_keepdim(x_fp32.pow(2)) + self.eps)).type_as(x)
        return x_normed * self.scale


class TorchtuneRoPE(nn.Module):  # RotaryPositionalEmbeddings, one shared by every layer
    def __init__(self, dim, max_seq_len=4096, base=10_000):
        super().__init__()
        self.dim, self.base, self.max_seq_len = dim, base, max_seq_len
        self.rope_init()

    def rope_init(self):
        theta = 1.0 / (self.base ** (torch.arange(0, self.dim, 2)[: (self.dim // 2)].float() / self.dim))
        self.register_buffer("theta", theta, persistent=False)
        self.build_rope_cache(self.max_seq_len)

    def build_rope_cache(self, max_seq_len):
        seq_idx = torch.arange(max_seq_len, dtype=self.theta.dtype, device=self.theta.device)
        idx_theta = torch.einsum("i, j -> ij", seq_idx, self.theta).float()
        cache = torch.stack([torch.cos(idx_theta), torch.sin(idx_theta)], dim=-1)
        self.register_buffer("cache", cache, persistent=False)

    def forward(self, x, input_pos=None):
        seq_len = x.size(1)
        rope_cache = self.cache[:seq_len]
        xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
        rope_cache = rope_cache.view(-1, xshaped.size(1), 1, xshaped.size(3), 2)
        x_out = torch.stack([
            xshaped[..., 0] * rope_cache[..., 0] - xshaped[..., 1] * rope_cache[..., 1],
            xshaped[..., 1] * rope_cache[..., 0] + xshaped[..., 0] * rope_cache[..., 1],
        ], -1)
        x_out = x_out.flatten(3)
        return x_out.type_as(x)


class TorchtuneAttention(nn.Module):  # MultiHeadAttention, self-attention without KV cache
    def __init__(self, cfg, pos_embeddings):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.output_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.pos_embeddings = pos_embeddings  # one module shared by every layer
        self.is_causal = True

    def forward(self, x, y, mask=None, input_pos=None):
        b, s_x, _ = x.shape
        s_y = y.shape[1]
        q = self.q_proj(x)
        q_per_kv = self.num_heads // self.num_kv_heads
        q = q.view(b, s_x, self.num_kv_heads * q_per_kv, self.head_dim)
        q = self.pos_embeddings(q, input_pos=input_pos)
        q = q.transpose(1, 2)
        k = self.k_proj(y)
        v = self.v_proj(y)
        k = k.view(b, s_y, -1, self.head_dim)
        v = v.view(b, s_y, -1, self.head_dim)
        k = self.pos_embeddings(k, input_pos=input_pos)
        k = k.transpose(1, 2)
        v = v.transpose(1, 2)
        if self.num_heads != self.num_kv_heads:
            expand_shape = (b, self.num_kv_heads, q_per_kv, -1, self.head_dim)
            k = k.unsqueeze(2).expand(expand_shape).flatten(1, 2)
            v = v.unsqueeze(2).expand(expand_shape).flatten(1, 2)
        # attention_utils.py _sdpa_call: no mask, is_causal, the default scale
        output = scaled_dot_product_attention(q, k, v, mask is None and self.is_causal, self.head_dim ** -0.5)
        output = output.transpose(1, 2).contiguous().view(b, s_x, -1)
        return self.output_proj(output)


class TorchtuneFeedForward(nn.Module):  # FeedForward (llama3_mlp: w1 gate, w2 down, w3 up)
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.w2 = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)
        self.w3 = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.activation = nn.SiLU()

    def forward(self, x):
        h = self.activation(self.w1(x))
        h = h * self.w3(x)
        return self.w2(h)


class TorchtuneLayer(FrameworkLayer):  # TransformerSelfAttentionLayer (sa_scale, mlp_scale: Identity)
    def __init__(self, cfg, layer_idx, rope=None):
        super().__init__()
        self.attn = TorchtuneAttention(cfg, rope)
        self.mlp = TorchtuneFeedForward(cfg)
        self.sa_norm = TorchtuneRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.mlp_norm = TorchtuneRMSNorm(cfg.hidden, eps=cfg.rms_eps)

    def forward(self, x, mask=None, input_pos=None):
        h = self.sa_norm(x)
        attn_out = self.attn(h, h, mask=mask, input_pos=input_pos)
        h = attn_out + x
        mlp_out = self.mlp(self.mlp_norm(h))
        out = h + mlp_out
        return out


class TorchtuneModel(FrameworkModel):  # TransformerDecoder without chunked output
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        # the table sized to the case's sequence (max_seq_len): see FrameworkModel
        rope = TorchtuneRoPE(cfg.head_dim, max_seq_len=cfg.max_positions)
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList([TorchtuneLayer(cfg, i, rope) for i in range(cfg.layers)])
        self.norm = TorchtuneRMSNorm(cfg.hidden, eps=cfg.rms_eps)

    def rotary_args(self, h):
        return ()


class TorchtuneForCausalLM(FrameworkForCausalLM):
    model_class = TorchtuneModel

    def restore_buffers(self):  # the cache is fp32 (explicit .float()) under bf16 default dtype
        r = self.model.layers[0].attn.pos_embeddings
        r.theta = r.theta.float()
        r.build_rope_cache(r.max_seq_len)


# litgpt (2685705): litgpt/model.py GPT.forward, Block.forward, CausalSelfAttention.forward,
# apply_rope, RMSNorm, LLaMAMLP; config.py Llama 3 (RMSNorm, LLaMAMLP, no bias, rotary 1.0)
class LitgptRMSNorm(nn.Module):
    def __init__(self, size, dim=-1, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.dim = dim

    def forward(self, x):  # RMSNorm.forward (add_unit_offset False)
        dtype = x.dtype
        x = x.float()
        norm_x = mean_last_keepdim(x * x)  # torch.mean(x * x, dim=-1, keepdim=True), E3
        x_normed = x * torch.rsqrt(norm_x + self.eps)
        weight = self.weight
        return (x_normed * weight.float()).to(dtype=dtype)


def head_slice(x, n):
    """x[..., :n]. E10: with n the whole last dimension torch 2.x returns x itself."""
    if emulating() and n == x.shape[-1]:
        return x
    return x[..., :n]


def litgpt_apply_rope(x, cos, sin):
    head_size_half = x.size(-1) // 2
    x1 = x[..., :head_size_half]
    x2 = x[..., head_size_half:]
    rotated = torch.cat((-x2, x1), dim=-1)
    dims_diff = x.dim() - cos.dim()
    if dims_diff > 0:
        new_shape = cos.shape[0:1] + (1,) * dims_diff + cos.shape[1:]
        cos = cos.view(*new_shape)
        sin = sin.view(*new_shape)
    roped = (x * cos) + (rotated * sin)
    return roped.to(dtype=x.dtype)


class LitgptAttention(nn.Module):  # CausalSelfAttention
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.hidden, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim, bias=False)
        self.proj = nn.Linear(cfg.head_dim * cfg.heads, cfg.hidden, bias=False)

    def forward(self, x, cos, sin):
        head_size, n_head, n_query_groups = self.cfg.head_dim, self.cfg.heads, self.cfg.kv_heads
        rope_n_elem = head_size  # rotary_percentage 1.0
        B, T, C = x.size()
        qkv = self.qkv(x)
        query_size = n_head * head_size
        key_size = value_size = n_query_groups * head_size
        q, k, v = qkv.split((query_size, key_size, value_size), dim=-1)
        q = q.view(B, T, n_head, head_size)
        k = k.view(B, T, n_query_groups, head_size)
        v = v.view(B, T, n_query_groups, head_size)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2)
        v = v.transpose(1, 2)
        # q[..., :rope_n_elem] covers the head: E10, torch 2.x returns q itself (the empty
        # q[..., rope_n_elem:] below is a real slice in both, whose backward zero-fills q's size)
        q_roped = litgpt_apply_rope(head_slice(q, rope_n_elem), cos, sin)
        k_roped = litgpt_apply_rope(head_slice(k, rope_n_elem), cos, sin)
        q = torch.cat((q_roped, q[..., rope_n_elem:]), dim=-1)
        k = torch.cat((k_roped, k[..., rope_n_elem:]), dim=-1)
        if n_query_groups != n_head:
            q_per_kv = n_head // n_query_groups
            k = repeat_interleave(k, q_per_kv, dim=1)
            v = repeat_interleave(v, q_per_kv, dim=1)
        y = self.scaled_dot_product_attention(q, k, v)
        y = y.reshape(B, T, head_size * n_head)
        return self.proj(y)

    def scaled_dot_product_attention(self, q, k, v, mask=None):
        scale = 1.0 / math.sqrt(self.cfg.head_dim)
        y = scaled_dot_product_attention(q, k, v, mask is None, scale)
        return y.transpose(1, 2)


class LitgptMLP(nn.Module):  # LLaMAMLP
    def __init__(self, cfg):
        super().__init__()
        self.fc_1 = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.fc_2 = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x):
        x_fc_1 = self.fc_1(x)
        x_fc_2 = self.fc_2(x)
        x = F.silu(x_fc_1) * x_fc_2
        return self.proj(x)


class LitgptBlock(FrameworkLayer):  # Block, parallel_residual False, no post norms (Identity)
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.norm_1 = LitgptRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.attn = LitgptAttention(cfg)
        self.norm_2 = LitgptRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.mlp = LitgptMLP(cfg)

    def forward(self, x, cos, sin):
        x_normed = self.norm_1(x)
        attention_output = self.attn(x_normed, cos, sin)
        x = attention_output + x
        x_normed = self.norm_2(x)
        return self.mlp(x_normed) + x


class LitgptModel(FrameworkModel):
    def __init__(self, cfg):
        super().__init__(cfg, LitgptBlock, LitgptRMSNorm)
        self.build_cos_sin()

    def build_cos_sin(self):  # build_rope_cache: fp32 [max_seq_length, n_elem], non-persistent
        n_elem, base = self.cfg.head_dim, 10000
        theta = 1.0 / (base ** (torch.arange(0, n_elem, 2).float() / n_elem))
        seq_idx = torch.arange(self.cfg.max_positions).float()
        idx_theta = torch.outer(seq_idx, theta).repeat(1, 2)
        self.register_buffer("cos", torch.cos(idx_theta), persistent=False)
        self.register_buffer("sin", torch.sin(idx_theta), persistent=False)

    def rotary_args(self, h):  # GPT.forward without input_pos
        T = h.size(1)
        if emulating():  # E10: self.cos[:T] with T the whole table is the tensor itself in 2.x
            return self.cos.unsqueeze(0), self.sin.unsqueeze(0)
        return self.cos[:T].unsqueeze(0), self.sin[:T].unsqueeze(0)


class LitgptForCausalLM(FrameworkForCausalLM):
    model_class = LitgptModel

    def restore_buffers(self):
        # finetune/full.py sets model.max_seq_length after fabric.setup: the max_seq_length setter
        # rebuilds cos and sin with rope_cache(), in fp32
        self.model.build_cos_sin()


# torchtitan of its December 2024 benchmarks (9dec370): torchtitan/models/llama/model.py
# (precompute_freqs_cis, apply_rotary_emb, repeat_kv, Attention, FeedForward, TransformerBlock,
# Transformer), torchtitan/models/norms.py RMSNorm (norm_type "rmsnorm")
class TitanRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(mean_last_keepdim(x.pow(2)) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def titan_apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    seqlen = xq_.shape[1]  # reshape_for_broadcast
    if not (emulating() and freqs_cis.shape[0] == seqlen):  # E10: a full slice is the tensor in 2.x
        freqs_cis = freqs_cis[0:seqlen]
    shape = [d if i == 1 or i == xq_.ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
    freqs_cis = freqs_cis.view(*shape)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def titan_repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return torch.unsqueeze(x, dim=3).expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(
        bs, slen, n_kv_heads * n_rep, head_dim)


class TitanAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.heads, cfg.kv_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.head_dim = cfg.hidden // cfg.heads
        self.wq = nn.Linear(cfg.hidden, cfg.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.hidden, cfg.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.hidden, cfg.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.heads * self.head_dim, cfg.hidden, bias=False)

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bs, seqlen, -1, self.head_dim)
        xk = xk.view(bs, seqlen, -1, self.head_dim)
        xv = xv.view(bs, seqlen, -1, self.head_dim)
        xq, xk = titan_apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        keys = titan_repeat_kv(xk, self.n_rep)
        values = titan_repeat_kv(xv, self.n_rep)
        xq = xq.transpose(1, 2)
        xk = keys.transpose(1, 2)
        xv = values.transpose(1, 2)
        output = scaled_dot_product_attention(xq, xk, xv, True, self.head_dim ** -0.5)
        output = output.transpose(1, 2).contiguous()
        output = output.view(bs, seqlen, -1)
        return self.wo(output)


class TitanFeedForward(nn.Module):
    def __init__(self, cfg):  # hidden_dim as the config gives it (multiple_of rounding done)
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.w2 = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)
        self.w3 = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TitanBlock(FrameworkLayer):  # TransformerBlock
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.attention = TitanAttention(cfg)
        self.feed_forward = TitanFeedForward(cfg)
        self.attention_norm = TitanRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.ffn_norm = TitanRMSNorm(cfg.hidden, eps=cfg.rms_eps)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class TitanModel(FrameworkModel):
    def __init__(self, cfg):
        super().__init__(cfg, TitanBlock, TitanRMSNorm)
        self.register_buffer("freqs_cis", self.precompute_freqs_cis(), persistent=True)

    def precompute_freqs_cis(self, theta=10000.0):  # precompute_freqs_cis(dim, max_seq_len)
        dim, end = self.cfg.hidden // self.cfg.heads, self.cfg.max_positions
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = torch.arange(end, device=freqs.device)
        freqs = torch.outer(t, freqs).float()
        return torch.polar(torch.ones_like(freqs), freqs)  # complex64

    def rotary_args(self, h):
        return (self.freqs_cis,)


class TitanForCausalLM(FrameworkForCausalLM):
    model_class = TitanModel

    def restore_buffers(self):  # Module.to(bf16) would cast the complex64 table too
        self.model.freqs_cis = self.model.precompute_freqs_cis()


# Megatron-Core with Transformer Engine (Megatron-LM d98e8a6, TransformerEngine d0067d0): the
# layers of megatron/core/models/gpt/gpt_layer_specs.py get_gpt_layer_with_transformer_engine_spec
# for a Llama 3 (RMSNorm, SwiGLU through the fused bias_swiglu, GQA, rotary with apply_rope_fusion,
# no bias, untied output layer), bf16 parameters, TP 1, no sequence parallelism, dropout 0. The
# activations are [s, b, h] (sequence first). Each TE/Megatron autograd Function below allocates,
# in order, what its kernels allocate and saves what it saves; the values are computed untracked.
# Not emulated: TE's normalization and cuDNN kernels' workspaces (allocateSpace, sizes not known)
# and TE's persistent cuBLAS workspace (cpp_extensions/gemm.py get_cublas_workspace: one
# torch.empty of 32 MiB + 1 KiB on sm90, 4 MiB before, made at the first GEMM and kept), which
# TE_CUBLAS_WORKSPACE switches on; vramfit counts it with the runtime overheads (plan.hpp
# with_overheads), not in the step's timeline these cases check.
TE_CUBLAS_WORKSPACE = 0  # bytes of TE's cuBLAS workspace to allocate at the first GEMM (0: none)
_TE_WORKSPACE = []


def _te_gemm_workspace():
    """cpp_extensions/gemm.py general_gemm -> get_cublas_workspace (functools.lru_cache):
    torch.empty(get_cublas_workspace_size_bytes(), dtype=uint8) once, kept for the process."""
    if TE_CUBLAS_WORKSPACE and not _TE_WORKSPACE:
        with HOOKS.label("te_cublas_workspace"):
            _TE_WORKSPACE.append(torch.empty(TE_CUBLAS_WORKSPACE, dtype=torch.uint8))


def _te_rmsnorm_fwd(x2d, gamma, eps):
    """csrc/extensions/normalization.cpp rmsnorm_fwd: rsigma = at::empty({rows}, kFloat) first,
    then the output (NoneQuantizer create_tensor, the input's dtype); the kernel's workspace
    (allocateSpace) is not emulated."""
    with HOOKS.label("rmsnorm_fwd"):
        rsigma = torch.empty((x2d.shape[0],), dtype=torch.float32)
        out = torch.empty(x2d.shape, dtype=x2d.dtype)
    with HOOKS.untracked():
        xf = x2d.detach().float()
        rs = torch.rsqrt(xf.pow(2).mean(-1) + eps)
        rsigma.copy_(rs)
        out.copy_((xf * rs[:, None]).to(x2d.dtype) * gamma.detach())
    return out, rsigma


def _te_rmsnorm_bwd(dz, x2d, rsigma, gamma):
    """normalization.cpp rmsnorm_bwd: dx = at::empty_like(x), dgamma = at::empty_like(gamma)."""
    with HOOKS.label("rmsnorm_bwd"):
        dx = torch.empty_like(x2d)
        dgamma = torch.empty_like(gamma)
    with HOOKS.untracked():
        xf = x2d.detach().float().requires_grad_()
        gf = gamma.detach().float().requires_grad_()
        with torch.enable_grad():
            y = (xf * rsigma[:, None]) * gf
            gx, gg = torch.autograd.grad(y, (xf, gf), dz.float())
        dx.copy_(gx)
        dgamma.copy_(gg)
    return dx, dgamma


def _te_gemm(a2d, w, label):
    """general_gemm(weight, input): the output [rows, out] in the activation dtype."""
    _te_gemm_workspace()
    return kernel_output(label, (a2d.shape[0], w.shape[0]), a2d.dtype,
                         lambda: a2d.detach().float() @ w.detach().float().t())


def _te_dgrad_wgrad(grad2d, inp2d, w):
    """The backward GEMMs of _Linear / _LayerNormLinear: dgrad (general_gemm(weight, grad_output,
    layout "NN")) then wgrad (general_gemm(input, grad_output, layout "NT"), fuse_wgrad_accumulation
    off: plain parameters, torch's optimizer)."""
    _te_gemm_workspace()
    dgrad = kernel_output("dgrad_gemm", (grad2d.shape[0], w.shape[1]), grad2d.dtype,
                          lambda: grad2d.float() @ w.detach().float())
    wgrad = kernel_output("wgrad_gemm", w.shape, w.dtype, lambda: grad2d.float().t() @ inp2d.detach().float())
    return dgrad, wgrad


class _TELayerNormLinear(torch.autograd.Function):
    """TE pytorch/module/layernorm_linear.py _LayerNormLinear (normalization "RMSNorm", no bias,
    return_layernorm_output False). forward: inputmat = inp.view(-1, in); apply_normalization ->
    tex.rmsnorm_fwd (rsigma fp32 [rows], ln_out [rows, in]); general_gemm -> out [rows, out];
    ctx.save_for_backward(prepare_for_saving(inputmat, weightmat, weight, bias, ln_weight, ln_out,
    mu, rsigma)). backward: grad_output_preprocess (reshape + contiguous: no copy), the dgrad GEMM,
    the wgrad GEMM, clear_tensor_data(ln_out), tex.rmsnorm_bwd(dgrad, inputmat, rsigma, ln_weight)
    (dx, dgamma), clear_tensor_data(mu, rsigma)."""

    @staticmethod
    def forward(ctx, inp, ln_weight, weight, eps):
        inputmat = inp.view(-1, inp.shape[-1])
        ln_out, rsigma = _te_rmsnorm_fwd(inputmat, ln_weight, eps)
        out = _te_gemm(ln_out, weight, "general_gemm")
        ctx.save_for_backward(inputmat, weight, ln_weight, ln_out, rsigma)
        ctx.inp_shape = inp.shape
        return out.view(*inp.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad):
        inputmat, weight, ln_weight, ln_out, rsigma = ctx.saved_tensors
        grad2d = grad.reshape(-1, grad.shape[-1]).contiguous()
        dgrad, wgrad = _te_dgrad_wgrad(grad2d, ln_out, weight)
        ln_out.data = torch.empty(0, dtype=ln_out.dtype)  # clear_tensor_data(ln_out)
        dx, dgamma = _te_rmsnorm_bwd(dgrad, inputmat, rsigma, ln_weight)
        del dgrad
        rsigma.data = torch.empty(0, dtype=rsigma.dtype)  # clear_tensor_data(rsigma)
        return dx.view(ctx.inp_shape), dgamma, wgrad, None


class _TELinear(torch.autograd.Function):
    """TE pytorch/module/linear.py _Linear (TERowParallelLinear at TP 1, no bias): inputmat =
    inp.view(-1, in), saved as it is (no cast: owns_input False); general_gemm -> out [rows, out].
    backward: dgrad GEMM, then wgrad GEMM."""

    @staticmethod
    def forward(ctx, inp, weight):
        inputmat = inp.view(-1, inp.shape[-1])
        out = _te_gemm(inputmat, weight, "general_gemm")
        ctx.save_for_backward(inputmat, weight)
        ctx.inp_shape = inp.shape
        return out.view(*inp.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad):
        inputmat, weight = ctx.saved_tensors
        grad2d = grad.reshape(-1, grad.shape[-1]).contiguous()
        dgrad, wgrad = _te_dgrad_wgrad(grad2d, inputmat, weight)
        return dgrad.view(ctx.inp_shape), wgrad


class MegatronTELayerNormColumnParallelLinear(nn.Module):  # extensions/transformer_engine.py
    def __init__(self, in_features, out_features, eps):
        super().__init__()
        self.layer_norm_weight = nn.Parameter(torch.ones(in_features))
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        nn.init.normal_(self.weight, std=0.02)
        self.eps = eps

    def forward(self, x):  # returns (out, bias): bias None (add_bias_linear False)
        return _TELayerNormLinear.apply(x, self.layer_norm_weight, self.weight, self.eps), None


class MegatronTERowParallelLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        return _TELinear.apply(x, self.weight), None


class _TEFusedRoPE(torch.autograd.Function):
    """TE pytorch/attention/rope.py FusedRoPEFunc (tensor_format "sbhd", freqs already fp32):
    tex.fused_rope_forward -> output = at::empty(input.sizes()) (csrc/extensions/apply_rope.cpp,
    contiguous, from a strided input too); ctx.save_for_backward(freqs, cu_seqlens,
    start_positions): only the shared table. backward: fused_rope_backward -> at::empty."""

    @staticmethod
    def forward(ctx, t, freqs):
        out = kernel_output("fused_rope_forward", t.shape, t.dtype,
                            lambda: _rope_math(t.detach().float(), freqs).to(t.dtype))
        ctx.save_for_backward(freqs)
        return out

    @staticmethod
    def backward(ctx, g):
        (freqs,) = ctx.saved_tensors
        gi = kernel_output("fused_rope_backward", g.shape, g.dtype,
                           lambda: _rope_math(g.float(), freqs, inverse=True).to(g.dtype))
        return gi, None


def _rope_math(t, freqs, inverse=False):  # rope_utils _apply_rotary_pos_emb_bshd, non-interleaved
    cos, sin = freqs.cos(), freqs.sin()
    if inverse:
        sin = -sin
    d = t.shape[-1]
    rot = torch.cat((-t[..., d // 2:], t[..., : d // 2]), dim=-1)
    return t * cos + rot * sin


class _TEFusedAttn(torch.autograd.Function):
    """TE dot_product_attention/backends.py FusedAttnFunc (cuDNN F16_arbitrary_seqlen, qkv_layout
    sbhd_sbhd_sbhd, causal, no dropout). csrc/extensions/attention.cpp fused_attn_fwd: O
    (create_tensor, [s, b, h, d]), rng_state = torch::empty({2}, int64), the workspace (not
    emulated), then the softmax statistics S [b, h, s, 1] fp32 (allocateSpace); saved: q, k, v,
    out, S and rng_state (prepare_for_saving(*fp8_tensors, *f16_tensors, cu_seqlens..., *aux)).
    backward: d_out.contiguous(); fused_attn_bwd: NVTE_HD_HD_HD -> dQ, dK, dV torch::empty of
    q's, k's and v's shapes (K and V with the grouped heads)."""

    @staticmethod
    def forward(ctx, q, k, v, scale):
        s, b, h, d = q.shape
        with HOOKS.label("fused_attn_fwd"):
            out = torch.empty((s, b, h, d), dtype=q.dtype)
            rng_state = torch.empty((2,), dtype=torch.int64)
            stats = torch.empty((b, h, s, 1), dtype=torch.float32)
        with HOOKS.untracked():
            o, lse = _attn_math(q, k, v, scale)
            out.copy_(o)
            stats.copy_(lse)
        ctx.save_for_backward(q, k, v, out, stats, rng_state)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, out, stats, rng_state = ctx.saved_tensors
        g = g.contiguous()
        with HOOKS.label("fused_attn_bwd"):
            dq = torch.empty(q.shape, dtype=q.dtype)
            dk = torch.empty(k.shape, dtype=k.dtype)
            dv = torch.empty(v.shape, dtype=v.dtype)
        with HOOKS.untracked():
            qq, kk, vv = (x.detach().float().requires_grad_() for x in (q, k, v))
            with torch.enable_grad():
                o, _ = _attn_math(qq, kk, vv, ctx.scale)
                gq, gk, gv = torch.autograd.grad(o, (qq, kk, vv), g.float())
            dq.copy_(gq)
            dk.copy_(gk)
            dv.copy_(gv)
        return dq, dk, dv, None


def _attn_math(q, k, v, scale):  # [s, b, heads, d] in, causal, GQA by repeating K and V
    qh, kh, vh = (x.float().permute(1, 2, 0, 3) for x in (q, k, v))
    rep = qh.shape[1] // kh.shape[1]
    kh = kh.repeat_interleave(rep, dim=1)
    vh = vh.repeat_interleave(rep, dim=1)
    sc = qh @ kh.transpose(-1, -2) * scale
    n = sc.shape[-1]
    sc = sc.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(sc, -1, keepdim=True)
    o = torch.softmax(sc, -1) @ vh
    return o.permute(2, 0, 1, 3), lse


class MegatronTEDotProductAttention(nn.Module):  # extensions/transformer_engine.py
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, q, k, v):
        # dot_product_attention/utils.py get_qkv_layout: q and k (fused RoPE outputs) are
        # contiguous, v a strided view of linear_qkv's output, so the strides differ: layout
        # "not_supported" -> [x.contiguous() for x in [q, k, v]] copies v only
        q, k, v = [x.contiguous() for x in (q, k, v)]
        out = _TEFusedAttn.apply(q, k, v, self.scale)
        return out.view(*out.shape[:-2], -1)  # FusedAttention.forward: [s, b, h * d]


class MegatronSelfAttention(nn.Module):  # transformer/attention.py SelfAttention
    def __init__(self, cfg):
        super().__init__()
        self.np, self.ng, self.hn = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.linear_qkv = MegatronTELayerNormColumnParallelLinear(
            cfg.hidden, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim, cfg.rms_eps)
        self.core_attention = MegatronTEDotProductAttention(cfg.head_dim)
        self.linear_proj = MegatronTERowParallelLinear(cfg.heads * cfg.head_dim, cfg.hidden)
        self.qk_layernorm = cfg.qk_norm
        if self.qk_layernorm:  # --qk-layernorm (Qwen3): SelfAttention.__init__ builds q_layernorm and
            # k_layernorm after linear_qkv: TENorm over hidden_size_per_attention_head (TESpecProvider
            # layer_norm(for_qk=True), TE >= 1.9: te.pytorch.RMSNorm)
            self.q_layernorm = MegatronTENorm(cfg.head_dim, eps=cfg.rms_eps)
            self.k_layernorm = MegatronTENorm(cfg.head_dim, eps=cfg.rms_eps)

    def forward(self, hidden_states, rotary_pos_emb):
        # get_query_key_value_tensors (SplitAlongDim is None: TE has no
        # transformer_engine.pytorch.attention._SplitAlongDim, so torch.split)
        mixed_qkv, _ = self.linear_qkv(hidden_states)
        r = self.np // self.ng
        mixed_qkv = mixed_qkv.view(*mixed_qkv.shape[:-1], self.ng, (r + 2) * self.hn)
        query, key, value = torch.split(mixed_qkv, [r * self.hn, self.hn, self.hn], dim=3)
        query = query.reshape(query.size(0), query.size(1), -1, self.hn)  # a copy when ng > 1
        del mixed_qkv
        if self.qk_layernorm:  # q_layernorm, then k_layernorm (_TERMSNormOp: input_.contiguous(),
            # so K, a strided view of linear_qkv's output, is copied and that copy is saved)
            query = self.q_layernorm(query)
            key = self.k_layernorm(key)
        # apply_rotary_pos_emb with apply_rope_fusion: TE FusedRoPEFunc on query, then key
        query = _TEFusedRoPE.apply(query, rotary_pos_emb)
        key = _TEFusedRoPE.apply(key, rotary_pos_emb)
        core_attn_out = self.core_attention(query, key, value)
        del query, key, value
        return self.linear_proj(core_attn_out)


class _SwiGLUFunction(torch.autograd.Function):
    """megatron/core/fusions/fused_bias_swiglu.py SwiGLUFunction (bias None: bias_swiglu_impl on
    input.view(-1, 2f)): ctx.save_for_backward(input); swiglu(input) is @jit_fuser = torch.compile
    (megatron/core/jit.py, torch >= 2.2): one fused kernel, one [rows, f] output. backward:
    swiglu_back (compiled: the torch.cat written by one kernel, one [rows, 2f] output)."""

    @staticmethod
    def forward(ctx, y):
        f = y.shape[-1] // 2
        def values():
            y1, y2 = torch.chunk(y.detach(), 2, -1)
            return F.silu(y1) * y2
        out = kernel_output("swiglu (torch.compile)", (y.shape[0], f), y.dtype, values)
        ctx.save_for_backward(y)
        return out

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        with HOOKS.label("swiglu_back (torch.compile)"):
            gi = torch.empty(y.shape, dtype=y.dtype)
        with HOOKS.untracked():
            y1, y2 = torch.chunk(y.float(), 2, -1)
            gf = g.float()
            sg = torch.sigmoid(y1)
            gi.copy_(torch.cat((gf * sg * (1 + y1 * (1 - sg)) * y2, gf * F.silu(y1)), -1))
        return gi


class MegatronMLP(nn.Module):  # transformer/mlp.py MLP, gated_linear_unit, bias_activation_fusion
    def __init__(self, cfg):
        super().__init__()
        self.linear_fc1 = MegatronTELayerNormColumnParallelLinear(cfg.hidden, 2 * cfg.intermediate, cfg.rms_eps)
        self.linear_fc2 = MegatronTERowParallelLinear(cfg.intermediate, cfg.hidden)

    def forward(self, hidden_states):
        intermediate_parallel, _ = self.linear_fc1(hidden_states)
        shape = intermediate_parallel.shape  # bias_swiglu_impl
        intermediate_parallel = _SwiGLUFunction.apply(intermediate_parallel.view(-1, shape[-1]))
        intermediate_parallel = intermediate_parallel.view(shape[0], shape[1], -1)
        return self.linear_fc2(intermediate_parallel)


def megatron_bias_dropout_add(x_with_bias, residual, prob, training):
    """fusions/fused_bias_dropout.py _bias_dropout_add_func, bias None: dropout (p 0: the input
    itself) then residual + out; compiled (jit_fuser) it is one add's output."""
    x, bias = x_with_bias
    assert bias is None
    return residual + dropout(x, prob, training)


class MegatronTELayer(FrameworkLayer):  # transformer/transformer_layer.py TransformerLayer
    def __init__(self, cfg, layer_idx, moe_state=None):
        super().__init__()
        self.self_attention = MegatronSelfAttention(cfg)  # input_layernorm: IdentityOp (fused)
        self.moe = cfg.moe_experts > 0
        if self.moe:  # E21. gpt_layer_specs.py: pre_mlp_layernorm = TENorm(has_residual=True) when
            # num_experts (fused_residual_rmsnorm off: te.pytorch.RMSNorm), mlp = MoELayer
            self.pre_mlp_layernorm = MegatronTENorm(cfg.hidden, eps=cfg.rms_eps)
            self.mlp = MegatronMoELayer(cfg, layer_idx + 1, moe_state)  # layer_number is 1-based
        else:
            self.mlp = MegatronMLP(cfg)  # pre_mlp_layernorm: IdentityOp (fused into linear_fc1)
        self.hidden_dropout = cfg.dropout

    def forward(self, hidden_states, rotary_pos_emb):
        residual = hidden_states
        attention_output_with_bias = self.self_attention(hidden_states, rotary_pos_emb)
        hidden_states = megatron_bias_dropout_add(attention_output_with_bias, residual, self.hidden_dropout,
                                                  self.training)
        residual = hidden_states
        if self.moe:  # _forward_mlp: _pre_mlp_layernorm_and_residual, then _run_mlp
            pre_mlp_layernorm_output = self.pre_mlp_layernorm(hidden_states)
            mlp_output_with_bias = self.mlp(pre_mlp_layernorm_output)
        else:
            mlp_output_with_bias = self.mlp(hidden_states)
        hidden_states = megatron_bias_dropout_add(mlp_output_with_bias, residual, self.hidden_dropout,
                                                  self.training)
        return hidden_states  # make_viewless_tensor: not a view, returned as is


class _TERMSNormOp(torch.autograd.Function):
    """TE pytorch/ops/basic/rmsnorm.py RMSNorm (te.pytorch.RMSNorm, Megatron's TENorm as the final
    layernorm): x = input_.contiguous().view(-1, h); rmsnorm_fwd (rsigma, y);
    ctx.save_for_backward(x, rstdevs). op_backward: dy = grad_output.contiguous(); rmsnorm_bwd
    (dx, dw); clear_tensor_data(x), clear_tensor_data(rstdevs)."""

    @staticmethod
    def forward(ctx, inp, weight, eps):
        x = inp.contiguous().view(-1, inp.shape[-1])
        y, rsigma = _te_rmsnorm_fwd(x, weight, eps)
        ctx.save_for_backward(x, rsigma, weight)
        ctx.inp_shape = inp.shape
        return y.view(inp.shape)

    @staticmethod
    def backward(ctx, g):
        x, rsigma, weight = ctx.saved_tensors
        dy = g.contiguous().view(x.shape)
        dx, dw = _te_rmsnorm_bwd(dy, x, rsigma, weight)
        x.data = torch.empty(0, dtype=x.dtype)  # clear_tensor_data(x)
        rsigma.data = torch.empty(0, dtype=rsigma.dtype)  # clear_tensor_data(rstdevs)
        return dx.view(ctx.inp_shape), dw, None


class MegatronTENorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        return _TERMSNormOp.apply(x, self.weight, self.eps)


class _LinearWithGradAccumulationAndAsyncCommunication(torch.autograd.Function):
    """megatron/core/tensor_parallel/layers.py (ColumnParallelLinear, the output layer, TP 1,
    gradient_accumulation_fusion off): forward saves input and weight, output =
    torch.matmul(total_input, weight.t()); backward: grad_input = grad_output.matmul(weight), then
    grad_weight = grad_output.t().matmul(total_input) on the 2-D views."""

    @staticmethod
    def forward(ctx, inp, weight):
        ctx.save_for_backward(inp, weight)
        return torch.matmul(inp, weight.t())

    @staticmethod
    def backward(ctx, grad_output):
        inp, weight = ctx.saved_tensors
        grad_input = grad_output.matmul(weight)
        g2 = grad_output.view(-1, grad_output.shape[-1])
        grad_weight = g2.t().matmul(inp.view(-1, inp.shape[-1]))
        return grad_input, grad_weight


class MegatronOutputLayer(nn.Module):  # ColumnParallelLinear(bias False, gather_output False)
    def __init__(self, hidden, vocab):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, hidden))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        return _LinearWithGradAccumulationAndAsyncCommunication.apply(x, self.weight)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """megatron/core/tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy (TP 1, no label
    smoothing; cross_entropy_loss_fusion off, the default): the fp32 copy of the logits, the max,
    the in-place subtraction, exp and division; saves exp_logits (the softmax, fp32), target_mask
    and masked_target_1d. The backward writes the gradient into the saved softmax in place."""

    @staticmethod
    def forward(ctx, vocab_parallel_logits, target):
        vocab_parallel_logits = vocab_parallel_logits.float()  # calculate_logits_max
        logits_max = torch.max(vocab_parallel_logits, dim=-1)[0]
        vocab_start_index, vocab_end_index = 0, vocab_parallel_logits.size(-1)
        vocab_parallel_logits -= logits_max.unsqueeze(dim=-1)  # calculate_predicted_logits
        del logits_max
        target_mask = (target < vocab_start_index) | (target >= vocab_end_index)
        masked_target = target.clone() - vocab_start_index
        masked_target[target_mask] = 0
        partition_vocab_size = vocab_parallel_logits.size()[-1]
        logits_2d = vocab_parallel_logits.view(-1, partition_vocab_size)
        masked_target_1d = masked_target.view(-1)
        arange_1d = torch.arange(start=0, end=logits_2d.size()[0])
        predicted_logits_1d = logits_2d[arange_1d, masked_target_1d]
        predicted_logits_1d = predicted_logits_1d.clone().contiguous()
        predicted_logits = predicted_logits_1d.view_as(target)
        predicted_logits[target_mask] = 0.0
        del arange_1d, logits_2d
        exp_logits = vocab_parallel_logits
        torch.exp(vocab_parallel_logits, out=exp_logits)
        sum_exp_logits = exp_logits.sum(dim=-1)
        loss = torch.log(sum_exp_logits) - predicted_logits  # calculate_cross_entropy_loss
        exp_logits.div_(sum_exp_logits.unsqueeze(dim=-1))
        ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target_mask, masked_target_1d = ctx.saved_tensors
        grad_input = softmax  # prepare_gradient_calculation_operands
        partition_vocab_size = softmax.size()[-1]
        grad_2d = grad_input.view(-1, partition_vocab_size)
        arange_1d = torch.arange(start=0, end=grad_2d.size()[0])
        softmax_update = 1.0 - target_mask.view(-1).float()
        grad_2d[arange_1d, masked_target_1d] -= softmax_update  # calculate_gradients
        grad_input.mul_(grad_output.unsqueeze(dim=-1))
        return grad_input, None


def megatron_language_model_loss(logits, labels, vocab_size):
    """models/common/language_module/language_module.py compute_language_model_loss (labels
    [b, s] -> [s, b] contiguous, vocab_parallel_cross_entropy, the loss back to [b, s]
    contiguous), then pretrain_gpt.py loss_func's masked sum over the tokens (loss_mask ones
    [b, s] fp32, made here on the device)."""
    labels = labels.transpose(0, 1).contiguous()
    loss = _VocabParallelCrossEntropy.apply(logits, labels)
    del labels
    loss = loss.transpose(0, 1).contiguous()
    loss_mask = torch.ones(loss.shape, dtype=torch.float32)
    losses = loss.view(-1).float()
    return torch.sum(losses * loss_mask.view(-1)) / loss_mask.sum()


# --------------------------------------------------------------------------------------------
# E21: Megatron-Core's MoE layer with Transformer Engine (Megatron-LM d98e8a6, TransformerEngine
# d0067d0), as Megatron's Mixtral recipe trains it (examples/mixtral/train_mixtral_8x7b_distributed.sh:
# --moe-grouped-gemm, --moe-token-dispatcher-type alltoall, --moe-router-load-balancing-type
# aux_loss, --moe-aux-loss-coeff 1e-2, --swiglu (bias_activation_fusion from bias_swiglu_fusion),
# --disable-bias-linear, --bf16) at EP 1, TP 1, no sequence parallelism. Everything else is
# TransformerConfig's default: moe_router_dtype None (bf16 logits), moe_router_score_function
# "softmax" after top-k (moe_router_pre_softmax False), no z-loss, no input jitter, no capacity
# factor (dropless), moe_permute_fusion False (the torch permute/unpermute), moe_router_fusion
# False, moe_use_grouped_tensor False (GroupedLinear's split-quantize path), no shared experts,
# no delay_wgrad_compute; gradient_accumulation_fusion off as for the dense layers (plain
# parameters, torch's optimizer). Qwen3-MoE's recipe (examples/rl/model_configs/qwen3_30b_a3b_moe.sh)
# is the same with --moe-aux-loss-coeff 1e-3 and --qk-layernorm. Files:
# megatron/core/transformer/moe/{moe_layer.py,router.py,moe_utils.py,token_dispatcher.py,
# experts.py,moe_logging.py}, core/fusions/fused_bias_swiglu.py, core/tensor_parallel/mappings.py,
# core/pipeline_parallel/schedules.py; TE pytorch/module/grouped_linear.py _GroupedLinear,
# pytorch/module/_split_quantization.py _split_quantize, pytorch/cpp_extensions/gemm.py.
# --------------------------------------------------------------------------------------------
MEGATRON_MOE_AUX_LOSS_COEFF = {"mixtral": 1e-2, "qwen3_moe": 1e-3}  # the recipes' --moe-aux-loss-coeff


class MegatronMoEState:
    """Process-wide MoE state: moe_logging.py get_moe_metrics_tracker() (record: one fp32
    [num_layers] zeros per metric name at its first record, kept; clear() zeroes it in place) and
    moe_utils.py MoEAuxLossAutoScaler.main_loss_backward_scale (set by set_loss_scale: the first
    tensor is kept, later ones are copy_-ed into it)."""

    def __init__(self):
        self.metrics = {}
        self.main_loss_backward_scale = None

    def record(self, name, value, layer_number, num_layers):  # MoEMetricsTracker.record
        if name not in self.metrics:
            self.metrics[name] = torch.zeros(num_layers)  # torch.zeros(num_layers, device=value.device)
        self.metrics[name][layer_number - 1] += value.detach()

    def set_loss_scale(self, scale):  # MoEAuxLossAutoScaler.set_loss_scale
        if self.main_loss_backward_scale is None:
            self.main_loss_backward_scale = scale
        else:
            self.main_loss_backward_scale.copy_(scale)


def megatron_moe_language_model_loss(state, logits, labels, vocab_size):
    """megatron_language_model_loss, then schedules.py forward_step_calc_loss's MoE step:
    _get_moe_loss_scale -> _compute_loss_scale (grad_scale_func None with torch's optimizer:
    torch.ones(1)); MoEAuxLossAutoScaler.set_loss_scale(loss_scale * cp_size / num_microbatches)
    (CP 1, one micro-batch: two more [1] fp32 tensors; the first one is kept by the state)."""
    loss = megatron_language_model_loss(logits, labels, vocab_size)
    loss_scale = torch.ones(1)
    state.set_loss_scale(loss_scale * 1 / 1)
    return loss


class _RouterGatingLinear(torch.autograd.Function):
    """moe_utils.py RouterGatingLinearFunction (te_general_gemm available, router_dtype the input's:
    bf16): ctx.save_for_backward(inp, weight, bias) (the router's [s, b, h] input, the weight);
    te_general_gemm(weight, inp.view(-1, h), router_dtype, layout "TN") -> logits [T, E];
    output.view(s, b, E). backward: grad_input = te_general_gemm(weight, grad_output, layout "NN"),
    grad_weight = te_general_gemm(inp, grad_output, layout "NT"), then the .to(input_dtype) and
    .to(weight_dtype) casts (no-ops in bf16)."""

    @staticmethod
    def forward(ctx, inp, weight):
        ctx.save_for_backward(inp, weight)
        inp_2d = inp.view(-1, inp.shape[-1])
        out = _te_gemm(inp_2d, weight, "general_gemm")
        return out.view(*inp.shape[:-1], -1)

    @staticmethod
    def backward(ctx, grad_output):
        inp, weight = ctx.saved_tensors
        inp_2d = inp.view(-1, inp.shape[-1])
        g2d = grad_output.view(-1, grad_output.shape[-1])
        _te_gemm_workspace()
        grad_input = kernel_output("general_gemm", (g2d.shape[0], weight.shape[1]), inp.dtype,
                                   lambda: g2d.float() @ weight.detach().float())
        grad_weight = kernel_output("general_gemm", weight.shape, weight.dtype,
                                    lambda: g2d.float().t() @ inp_2d.detach().float())
        return grad_input.view(inp.shape), grad_weight


class _MoEAuxLossAutoScaler(torch.autograd.Function):
    """moe_utils.py MoEAuxLossAutoScaler: forward saves aux_loss (0-dim fp32) and returns the
    probs as they are; backward: torch.ones_like(aux_loss) * main_loss_backward_scale ([1]: a
    0-dim ones, a [1] product, which the engine sums to the aux loss's 0-dim shape)."""

    @staticmethod
    def forward(ctx, output, aux_loss, state):
        ctx.save_for_backward(aux_loss)
        ctx.state = state
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (aux_loss,) = ctx.saved_tensors
        scale = ctx.state.main_loss_backward_scale
        if scale is None:  # never here: the loss function has set it
            scale = ctx.state.main_loss_backward_scale = torch.tensor(1.0)
        scaled_aux_loss_grad = torch.ones_like(aux_loss) * scale
        return grad_output, scaled_aux_loss_grad, None


class MegatronTopKRouter(nn.Module):
    """router.py TopKRouter (Router: weight [E, h], created fp32, init_method, then
    .to(params_dtype): bf16; add_bias_linear off: no bias). forward: apply_input_jitter (None),
    gating (router_gating_linear), routing."""

    def __init__(self, cfg, layer_number, state):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cfg.moe_experts, cfg.hidden))
        nn.init.normal_(self.weight, std=0.02)  # init_method_normal(init_method_std 0.02)
        self.num_experts, self.topk = cfg.moe_experts, cfg.moe_top_k
        self.aux_loss_coeff = MEGATRON_MOE_AUX_LOSS_COEFF[cfg.family]
        self.layer_number, self.num_layers = layer_number, cfg.layers
        self.state = state

    def forward(self, input):
        logits = _RouterGatingLinear.apply(input, self.weight)
        probs, routing_map = self.routing(logits)
        return probs, routing_map

    def routing(self, logits):
        logits = logits.view(-1, self.num_experts)
        # apply_z_loss: moe_z_loss_coeff None, logits as they are
        probs, routing_map = self.topk_routing_with_score_function(logits)
        if self.training and torch.is_grad_enabled() and self.aux_loss_coeff > 0:
            routing_map_for_aux_loss, scores_for_aux_loss = self.compute_routing_scores_for_aux_loss(logits)
            probs = self._apply_aux_loss(probs, scores_for_aux_loss, routing_map_for_aux_loss)
            # _apply_seq_aux_loss, _apply_global_aux_loss: coefficient 0, probs as they are
        # _apply_expert_bias: moe_router_enable_expert_bias off
        return probs, routing_map

    def topk_routing_with_score_function(self, logits):
        """moe_utils.py topk_routing_with_score_function (softmax, not pre-softmax, no groups,
        no scaling factor, not fused, deterministic algorithms off): torch.topk(logits, k, dim=1,
        sorted=True) (bf16 values, int64 indices; TopkBackward keeps the indices), torch.softmax
        of the bf16 top-k values with dtype float32 (_to_copy, then _softmax, which keeps its fp32
        output), probs.type_as(logits) (bf16 [T, k]), routing_probs = zeros_like(logits).scatter(1,
        top_indices, probs) (bf16 [T, E]; ScatterBackward keeps the indices), routing_map =
        zeros_like(logits).int().scatter(1, top_indices, 1).bool() (bool [T, E])."""
        scores, top_indices = torch.topk(logits, k=self.topk, dim=1, sorted=True)
        probs = softmax(scores, -1, dtype=torch.float32)
        probs = probs.type_as(logits)
        routing_probs = torch.zeros_like(logits).scatter(1, top_indices, probs)
        routing_map = torch.zeros_like(logits).int().scatter(1, top_indices, 1).bool()
        return routing_probs, routing_map

    def compute_routing_scores_for_aux_loss(self, logits):
        """moe_utils.py compute_routing_scores_for_aux_loss (softmax, not fused, no padding mask):
        scores = torch.softmax(logits, dim=-1, dtype=float32) (fp32 [T, E], kept by _softmax);
        torch.topk(scores, k, dim=1) (values dropped); the routing map as above."""
        scores = softmax(logits, -1, dtype=torch.float32)
        _, top_indices = torch.topk(scores, k=self.topk, dim=1)
        routing_map = torch.zeros_like(logits).int().scatter(1, top_indices, 1).bool()
        return routing_map, scores

    def _apply_aux_loss(self, probs, scores_for_aux_loss, routing_map):
        """router.py _apply_aux_loss: get_tokens_per_expert_and_token_count (routing_map.sum(dim=0),
        int64 [E]; reduce_from_tensor_model_parallel_region over a group of 1 returns it as it is;
        num tokens T), switch_load_balancing_loss_func (not fused): probs.sum(dim=0) (fp32 [E]),
        torch.sum(aggregated * tokens_per_expert) (the product keeps tokens_per_expert) * coeff
        factor; attach_and_log_load_balancing_loss: the tracker records aux_loss / coeff (a 0-dim
        transient), MoEAuxLossAutoScaler.apply(probs, aux_loss) (calculate_per_token_loss off)."""
        global_tokens_per_expert = routing_map.sum(dim=0)
        num_tokens = routing_map.shape[0]
        aggregated_probs_per_expert = scores_for_aux_loss.sum(dim=0)
        aux_loss = torch.sum(aggregated_probs_per_expert * global_tokens_per_expert) * (
            self.num_experts * self.aux_loss_coeff / (self.topk * num_tokens * num_tokens))
        self.state.record("load_balancing_loss", aux_loss / self.aux_loss_coeff, self.layer_number,
                          self.num_layers)
        return _MoEAuxLossAutoScaler.apply(probs, aux_loss, self.state)


def _device_to_host(t):
    """token_dispatcher.py _maybe_dtoh_and_synchronize -> maybe_move_tensor_to_cpu:
    tensor.to("cpu", non_blocking=True) on the side stream, a host copy (untracked here: the CPU's
    .to("cpu") would return the tensor itself)."""
    with HOOKS.untracked():
        return t.detach().clone()


def megatron_sort_chunks_by_idxs(input, split_sizes, sorted_idxs, probs=None):
    """moe_utils.py sort_chunks_by_idxs (not fused): torch.split by the host split sizes, then
    torch.cat of the chunks in sorted_idxs's order: a full copy even when the order is the
    identity (EP 1, TP 1); the same for the probs."""
    input = torch.split(input, split_sizes, dim=0)
    output = torch.cat([input[i] for i in sorted_idxs], dim=0)
    if probs is not None:
        probs = torch.split(probs, split_sizes, dim=0)
        permuted_probs = torch.cat([probs[i] for i in sorted_idxs], dim=0)
    else:
        permuted_probs = None
    return output, permuted_probs


class MegatronAlltoAllTokenDispatcher:
    """token_dispatcher.py MoEAlltoAllTokenDispatcher at EP 1, TP 1 (a plain object, no module),
    moe_permute_fusion off: permute_idx_device "cpu", sort_input_by_local_experts and
    restore_output_by_local_experts host aranges (the identity at EP 1); cuda_dtoh_point
    "before_permutation_1". It keeps self.probs, self.routing_map and
    self.reversed_local_input_permutation_mapping until the layer's next forward."""

    def __init__(self, cfg):
        self.num_experts = self.num_local_experts = cfg.moe_experts
        self.topk = cfg.moe_top_k
        idx = list(range(self.num_experts))  # input_chunk_idxs.reshape(-1, E).T.ravel() at EP 1, TP 1
        self.sort_input_by_local_experts = idx
        self.restore_output_by_local_experts = idx

    def preprocess(self, routing_map):
        """MoEAlltoAllTokenDispatcher.preprocess (dropless, EP 1, TP 1): routing_map.sum(dim=0)
        .long() (int64 [E]); num_out_tokens = T * topk; the counts reshaped and viewed
        [1, E] as num_global_tokens_per_local_expert."""
        num_local_tokens_per_expert = routing_map.sum(dim=0).long()
        self.num_out_tokens = routing_map.size(0) * self.topk
        num_global_tokens_per_local_expert = num_local_tokens_per_expert.reshape(self.num_experts)
        num_tokens_per_local_expert = num_local_tokens_per_expert
        if self.num_local_experts > 1:
            self.num_global_tokens_per_local_expert = num_global_tokens_per_local_expert.view(
                -1, self.num_local_experts)
        return num_tokens_per_local_expert

    def dispatch_preprocess(self, hidden_states, routing_map, probs):
        self.hidden_shape = hidden_states.shape
        self.probs = probs
        self.routing_map = routing_map
        hidden_states = hidden_states.view(-1, self.hidden_shape[-1])
        self.tokens_per_expert = self.preprocess(self.routing_map)
        # _maybe_dtoh_and_synchronize("before_permutation_1"): the counts to the host; the
        # device [E] counts are freed here
        self.tokens_per_expert = _device_to_host(self.tokens_per_expert)
        self.num_global_tokens_per_local_expert = _device_to_host(self.num_global_tokens_per_local_expert)
        self.hidden_shape_before_permute = hidden_states.shape
        (permutated_local_input_tokens, permuted_probs, self.reversed_local_input_permutation_mapping) = \
            megatron_permute(hidden_states, self.routing_map, probs, self.num_out_tokens)
        return permutated_local_input_tokens, permuted_probs

    def token_dispatch(self, permutated_local_input_tokens, permuted_probs):
        """all_to_all over the EP group of 1: mappings.py _AllToAll.forward returns its input
        (autograd makes a view; backward the same): no allocation, nothing saved."""
        return permutated_local_input_tokens, permuted_probs

    def dispatch_postprocess(self, global_input_tokens, global_probs):
        """TP 1: no all-gather; num_local_experts > 1 and not drop_and_pad: sort_chunks_by_idxs
        of the tokens and the probs (two copies)."""
        if self.num_local_experts > 1:
            with HOOKS.untracked():  # host tensors
                split_sizes = self.num_global_tokens_per_local_expert.ravel().tolist()
            global_input_tokens, global_probs = megatron_sort_chunks_by_idxs(
                global_input_tokens, split_sizes, self.sort_input_by_local_experts, probs=global_probs)
        tokens_per_expert = self.tokens_per_expert
        self.tokens_per_expert = None
        return global_input_tokens, tokens_per_expert, global_probs

    def combine_preprocess(self, hidden_states):
        """Unpermutation 2: sort_chunks_by_idxs back (a copy of the experts' output); TP 1."""
        if self.num_local_experts > 1:
            with HOOKS.untracked():  # host tensors
                split_sizes = self.num_global_tokens_per_local_expert.T.ravel().tolist()
            hidden_states, _ = megatron_sort_chunks_by_idxs(hidden_states, split_sizes,
                                                            self.restore_output_by_local_experts)
        return hidden_states

    def token_combine(self, hidden_states):  # all_to_all over a group of 1: the input itself
        return hidden_states

    def combine_postprocess(self, permutated_local_input_tokens):
        """Unpermutation 1: unpermute (probs None: the weighting happened in the experts), then
        output.view(hidden_shape); no shared experts."""
        output = megatron_unpermute(permutated_local_input_tokens, self.reversed_local_input_permutation_mapping,
                                    restore_shape=self.hidden_shape_before_permute)
        output = output.view(self.hidden_shape)
        return output


def megatron_permute(tokens, routing_map, probs, num_out_tokens):
    """moe_utils.py permute (not fused, not drop_and_pad): routing_map.bool().T.contiguous()
    (bool [E, T]); routing_map.reshape(-1).argsort(descending=True, stable=True) (torch 2.x:
    sort's values and int64 indices [E * T], the values freed at once; a slice of the first
    num_out_tokens); sorted_indices = flat_sorted % num_tokens (int64 [S]); permuted_probs =
    probs.T.contiguous().reshape(-1)[flat_sorted] (the bf16 [E, T] copy is a transient; index
    keeps flat_sorted, a view of the whole [E * T] indices); tokens.index_select(0,
    sorted_indices) ([S, h]; IndexSelectBackward keeps sorted_indices)."""
    num_tokens, hidden = tokens.shape
    routing_map = routing_map.bool().T.contiguous()
    if MODE == "native":
        flat_sorted = routing_map.reshape(-1).argsort(descending=True, stable=True)
    else:  # argsort.stable: std::get<1>(at::sort(self, stable, dim, descending)), as argsort_stable
        values, flat_sorted = torch.sort(routing_map.reshape(-1), stable=True, descending=True)
        del values
    flat_sorted = flat_sorted[:num_out_tokens]
    sorted_indices = flat_sorted % num_tokens
    permuted_probs = probs.T.contiguous().reshape(-1)[flat_sorted]
    permuted_input = tokens.index_select(0, sorted_indices)
    return permuted_input, permuted_probs, sorted_indices


def megatron_unpermute(permuted_tokens, sorted_indices, restore_shape):
    """moe_utils.py unpermute (not fused, probs None, deterministic algorithms off):
    torch.zeros(restore_shape) ([T, h]), scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1,
    hidden), permuted_tokens) (ScatterAddBackward keeps the index, a view of sorted_indices),
    .to(input_dtype) (the same dtype: the tensor itself)."""
    _, hidden = restore_shape
    input_dtype = permuted_tokens.dtype
    output_tokens = torch.zeros(restore_shape, dtype=permuted_tokens.dtype, device=permuted_tokens.device)
    output_tokens.scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, hidden), permuted_tokens)
    out = output_tokens.to(dtype=input_dtype)
    del output_tokens, permuted_tokens, sorted_indices
    return out


class _TEGroupedLinear(torch.autograd.Function):
    """TE pytorch/module/grouped_linear.py _GroupedLinear (bf16, no quantizers, no bias,
    use_grouped_tensor False, fuse_wgrad_accumulation off, save_original_input False, no delayed
    wgrad). forward: m_splits.tolist() (host); _split_quantize with no quantized output is
    torch.split of the [S, in] input: views, no copy; cast_if_needed on the bf16 weights (the
    weights themselves); _validate_or_alloc_output -> torch.empty([S, out]); general_grouped_gemm
    (single_output: each GEMM writes its rows); ctx.save_for_backward(*inputmats (the split views),
    *weights_fp8 (the parameters), *saved_weights (None), *biases (None)). backward:
    grad_output.contiguous().view(-1, out) split into views; dgrad = torch.empty([S, in]) and the
    "NN" grouped GEMM; wgrad_packed = torch.empty(E, out, in) with one view per expert returned
    as that weight's gradient (AccumulateGrad keeps the views, so the [E, out, in] block lives as
    the experts' .grad); the "NT" grouped GEMM; clear_tensor_data(*inputmats) frees the saved
    input. The grouped GEMM's cuBLAS workspaces (get_cublas_workspace, persistent) are not
    emulated, as for the dense GEMMs (E17)."""

    @staticmethod
    def forward(ctx, inp, m_splits, *weights):
        in_features = weights[0].shape[-1]
        inp_view = inp.reshape(-1, in_features)
        inputmats = torch.split(inp_view, m_splits)
        _te_gemm_workspace()

        def values():
            return torch.cat([x.detach().float() @ w.detach().float().t() for x, w in zip(inputmats, weights)])

        out = kernel_output("general_grouped_gemm", (sum(m_splits), weights[0].shape[0]), inp.dtype, values)
        ctx.save_for_backward(*inputmats, *weights)
        ctx.m_splits, ctx.num_gemms, ctx.inp_shape = m_splits, len(weights), inp.shape
        return out.view(-1, *inp.shape[1:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad_output):
        saved = ctx.saved_tensors
        n = ctx.num_gemms
        inputmats, weights = saved[:n], saved[n:]
        grad_output_view = grad_output.contiguous().view(-1, grad_output.shape[-1])
        grad_outputs = torch.split(grad_output_view, ctx.m_splits)
        _te_gemm_workspace()
        dgrad = kernel_output("general_grouped_gemm", (sum(ctx.m_splits), weights[0].shape[1]), grad_output.dtype,
                              lambda: torch.cat([g.float() @ w.detach().float() for g, w in zip(grad_outputs, weights)]))
        with HOOKS.label("wgrad_packed"):
            wgrad_packed = torch.empty(n, *weights[0].shape, dtype=weights[0].dtype)
        with HOOKS.untracked():
            for i in range(n):
                wgrad_packed[i].copy_(grad_outputs[i].float().t() @ inputmats[i].detach().float())
        wgrad_list = [wgrad_packed[i] for i in range(n)]
        del wgrad_packed
        for t in inputmats:  # clear_tensor_data(*inputmats)
            t.data = torch.empty(0, dtype=t.dtype)
        return (dgrad.view(ctx.inp_shape), None, *wgrad_list)


class MegatronTEGroupedLinear(nn.Module):
    """extensions/transformer_engine.py TEGroupedLinear (TEColumnParallelGroupedLinear /
    TERowParallelGroupedLinear at TP 1, is_expert): TE GroupedLinear's per-GEMM parameters
    weight0 ... weight{E-1}, each [out, in]; forward(x, m_splits) -> (out, None)."""

    def __init__(self, num_gemms, in_features, out_features):
        super().__init__()
        self.num_gemms = num_gemms
        for i in range(num_gemms):
            w = nn.Parameter(torch.empty(out_features, in_features))
            nn.init.normal_(w, std=0.02)
            self.register_parameter(f"weight{i}", w)

    def forward(self, x, m_splits):
        weights = [getattr(self, f"weight{i}") for i in range(self.num_gemms)]
        return _TEGroupedLinear.apply(x, list(m_splits), *weights), None


class _WeightedSwiGLUFunction(torch.autograd.Function):
    """fusions/fused_bias_swiglu.py WeightedSwiGLUFunction (weighted_bias_swiglu_impl, bias None,
    fp8_input_store off, no clamp): ctx.save_for_backward(input, weights) (the fc1 output
    [S, 2F] and the probs' [S, 1] view); weighted_swiglu (jit_fuser = torch.compile) is one kernel,
    one bf16 [S, F] output. backward: weighted_swiglu_back (compiled): the input gradient [S, 2F]
    (its torch.cat written in place), then the weights' gradient [S, 1] (a reduction), both in
    the input's / weights' dtype. The order of the two outputs is inductor's; taken as the
    source's."""

    @staticmethod
    def forward(ctx, y, weights):
        f = y.shape[-1] // 2

        def values():
            y1, y2 = torch.chunk(y.detach().float(), 2, -1)
            return F.silu(y1) * y2 * weights.detach().float()

        out = kernel_output("weighted_swiglu (torch.compile)", (y.shape[0], f), y.dtype, values)
        ctx.save_for_backward(y, weights)
        return out

    @staticmethod
    def backward(ctx, g):
        y, weights = ctx.saved_tensors
        with HOOKS.label("weighted_swiglu_back (torch.compile)"):
            input_grad = torch.empty(y.shape, dtype=y.dtype)
            weights_grad = torch.empty(weights.shape, dtype=weights.dtype)
        with HOOKS.untracked():
            y1, y2 = torch.chunk(y.float(), 2, -1)
            w = weights.float()
            gw = g.float() * w
            sg = torch.sigmoid(y1)
            input_grad.copy_(torch.cat((gw * sg * (1 + y1 * (1 - sg)) * y2, gw * F.silu(y1)), -1))
            weights_grad.copy_((F.silu(y1) * y2 * g.float()).sum(-1, keepdim=True))
        return input_grad, weights_grad


class MegatronTEGroupedMLP(nn.Module):
    """experts.py TEGroupedMLP (not the op-fuser path; no quantization padding; bias_activation_fusion
    with silu and gated_linear_unit: weighted_bias_swiglu_impl): permuted_probs.unsqueeze(-1),
    tokens_per_expert.tolist() (host), linear_fc1, the weighted SwiGLU, linear_fc2, _apply_bias
    (no bias: the output itself)."""

    def __init__(self, cfg):
        super().__init__()
        e = cfg.moe_experts
        self.linear_fc1 = MegatronTEGroupedLinear(e, cfg.hidden, 2 * cfg.moe_intermediate)
        self.linear_fc2 = MegatronTEGroupedLinear(e, cfg.moe_intermediate, cfg.hidden)

    def forward(self, permuted_local_hidden_states, tokens_per_expert, permuted_probs):
        permuted_probs = permuted_probs.unsqueeze(-1)
        with HOOKS.untracked():  # a host tensor
            tokens_per_expert = tokens_per_expert.tolist()
        fc1_output, bias_parallel = self.linear_fc1(permuted_local_hidden_states, tokens_per_expert)
        ori_shape = fc1_output.shape  # weighted_bias_swiglu_impl: input.view(-1, 2F)
        intermediate_parallel = _WeightedSwiGLUFunction.apply(fc1_output.view(-1, ori_shape[-1]), permuted_probs)
        output, output_bias = self.linear_fc2(intermediate_parallel, tokens_per_expert)
        return output, None


class MegatronMoELayer(nn.Module):
    """moe_layer.py MoELayer.forward (custom_forward without recompute): route, preprocess
    (dispatch_preprocess), dispatch (token_dispatch), routed_experts_compute (dispatch_postprocess,
    experts, combine_preprocess), combine (token_combine), postprocess (combine_postprocess; no
    shared experts). custom_forward's own names keep the permuted tokens [S, h] and probs [S]
    (`hidden_states`, `probs`) until it returns. Submodules in MoELayer.__init__'s order: router,
    (token_dispatcher), experts."""

    def __init__(self, cfg, layer_number, state):
        super().__init__()
        self.router = MegatronTopKRouter(cfg, layer_number, state)
        self.token_dispatcher = MegatronAlltoAllTokenDispatcher(cfg)
        self.experts = MegatronTEGroupedMLP(cfg)

    def routed_experts_compute(self, hidden_states, probs):
        dispatched_input, tokens_per_expert, permuted_probs = self.token_dispatcher.dispatch_postprocess(
            hidden_states, probs)
        expert_output, mlp_bias = self.experts(dispatched_input, tokens_per_expert, permuted_probs)
        output = self.token_dispatcher.combine_preprocess(expert_output)
        return output, mlp_bias

    def forward(self, hidden_states):
        probs, routing_map = self.router(hidden_states)  # route
        hidden_states, probs = self.token_dispatcher.dispatch_preprocess(hidden_states, routing_map, probs)
        dispatched_input, probs = self.token_dispatcher.token_dispatch(hidden_states, probs)  # dispatch
        output, mlp_bias = self.routed_experts_compute(dispatched_input, probs)
        output = self.token_dispatcher.token_combine(output)  # combine
        output = self.token_dispatcher.combine_postprocess(output)  # postprocess
        return output, mlp_bias


class MegatronTEModel(nn.Module):  # models/gpt/gpt_model.py GPTModel + transformer_block.py
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)  # VocabParallelEmbedding, TP 1
        # E21: the process-wide MoE state (the metrics tracker, MoEAuxLossAutoScaler's scale), one per
        # model here so that every traced case starts as a fresh training process
        self.moe_state = MegatronMoEState() if cfg.moe_experts else None
        self.layers = nn.ModuleList([MegatronTELayer(cfg, i, self.moe_state) for i in range(cfg.layers)])
        self.norm = MegatronTENorm(cfg.hidden, eps=cfg.rms_eps)  # final_layernorm: TENorm
        # rotary_pos_embedding.py RotaryEmbedding: inv_freq a plain attribute (no buffer)
        d = cfg.head_dim
        self.inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        self._rope_cache = {}

    def rotary_pos_emb(self, max_seq_len):
        """RotaryEmbedding.forward, @lru_cache(maxsize=32): computed once (step 1), the fp32
        [s, 1, 1, d] table kept by the cache; get_emb: arange, outer, cat, emb[:, None, None, :]."""
        hit = self._rope_cache.get(max_seq_len)
        if hit is not None:
            return hit
        seq = torch.arange(max_seq_len, dtype=self.inv_freq.dtype) + 0
        freqs = torch.outer(seq, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        emb = emb[:, None, None, :]
        self._rope_cache[max_seq_len] = emb
        return emb

    def forward(self, input_ids):
        # LanguageModelEmbedding.forward: word_embeddings, transpose(0, 1).contiguous(),
        # embedding_dropout (p 0: the input itself)
        h = self.embed_tokens(input_ids)
        h = h.transpose(0, 1).contiguous()
        h = dropout(h, self.cfg.dropout, self.training)
        rotary_pos_emb = self.rotary_pos_emb(h.shape[0])
        for layer in self.layers:
            h = layer(h, rotary_pos_emb)
        return self.norm(h)


class MegatronTEForCausalLM(FrameworkForCausalLM):
    """GPTModel: output_layer (untied) on the [s, b, h] final norm output, logits [s, b, V], then
    compute_language_model_loss with Megatron's vocab-parallel cross-entropy (not Hugging Face's
    loss, unlike the other model codes here)."""
    model_class = MegatronTEModel

    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        self.model = self.model_class(cfg)
        self.lm_head = MegatronOutputLayer(cfg.hidden, cfg.vocab)
        self.loss_function = megatron_language_model_loss
        if cfg.moe_experts:  # E21: forward_step_calc_loss then sets MoEAuxLossAutoScaler's scale
            self.loss_function = partial(megatron_moe_language_model_loss, self.model.moe_state)


# --------------------------------------------------------------------------------------------
# torchtitan's current model code (pytorch/torchtitan b5bcd76): torchtitan/models/common/
# (decoder.py Decoder, attention.py GQAttention / FusedQKVLinear / FlexAttention, rope.py
# ComplexRoPE / CosSinRoPE, feed_forward.py FeedForward, nn_modules.py RMSNorm (nn.RMSNorm),
# moe.py MoE / TokenChoiceTopKRouter / RoutedExperts / GroupedExperts, token_dispatcher.py
# LocalTokenDispatcher, ops/scatter_add.py deterministic_scatter_add), models/llama3
# (_build_llama3_layers: fuse_qkv True, ComplexRoPE, Llama3TransformerBlock) and models/qwen3
# (_build_qwen3_layers / _build_qwen3_moe_layers: fused QKV, qk_norm RMSNorm over head_dim,
# CosSinRoPE, Qwen3TransformerBlock; softmax router with route_norm). Activations are packed
# tokens [T, ...] (T = batch x sequence, the collator's 1-D batch with per-document positions);
# the attention backend is get_attention_config("flex") (config_utils.py), the LM default, with
# the block-causal packed-document mask the trainer builds from `positions`
# (Trainer.post_dataloading_process -> Decoder.get_attention_masks). Around the blocks: Hugging
# Face's embedding, head and loss (FrameworkForCausalLM), as for the other model codes.
# --------------------------------------------------------------------------------------------
class _FusedRMSNorm(torch.autograd.Function):
    """E19: F.rms_norm on CUDA with torch >= 2.9 runs aten::_fused_rms_norm (#153666): one kernel
    allocating the output (input dtype) and the fp32 rstd [..., 1] (layer_norm.cpp
    _fused_rms_norm_cuda: Y = empty_like(X), rstd = empty({M}, acc type)); derivatives.yaml
    `_fused_rms_norm: input, weight: _fused_rms_norm_backward(grad, input, normalized_shape,
    result1, weight, grad_input_mask)` saves the input, the weight and rstd (result1). The
    backward allocates dX (input's shape and dtype), then dgamma (the weight's). torch 1.13 has
    neither F.rms_norm nor the kernel; the values are the CPU's, untracked. The CUDA kernel's
    partial dgamma reduction buffer, if any, is not emulated."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        with HOOKS.label("_fused_rms_norm"):
            y = torch.empty_like(x)
            rstd = torch.empty((*x.shape[:-1], 1), dtype=torch.float32)
        with HOOKS.untracked():
            xf = x.float()
            r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            rstd.copy_(r)
            y.copy_((xf * r).to(x.dtype) * weight)  # values only
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, g):
        x, weight, rstd = ctx.saved_tensors
        with HOOKS.label("_fused_rms_norm_backward"):
            dx = torch.empty_like(x)
            dw = torch.empty_like(weight)
        with HOOKS.untracked():
            xx = x.detach().float().requires_grad_()
            ww = weight.detach().float().requires_grad_()
            with torch.enable_grad():
                y = xx * torch.rsqrt(xx.pow(2).mean(-1, keepdim=True) + ctx.eps) * ww
                gx, gw = torch.autograd.grad(y, (xx, ww), g.float())
            dx.copy_(gx)
            dw.copy_(gw)
        return dx, dw, None


class TitanNowRMSNorm(nn.Module):
    """torchtitan models/common/nn_modules.py RMSNorm(nn.RMSNorm): F.rms_norm(x,
    normalized_shape, weight, eps) -> _fused_rms_norm on CUDA (E19). Config eps: 1e-5 (Llama 3's
    RMSNorm.Config default), _EPS 1e-6 (Qwen3)."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.normalized_shape = (dim,)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        if MODE == "native":
            return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)
        return _FusedRMSNorm.apply(x, self.weight, self.eps)


# Block masks (E18): flex attention's BlockMask for the packed documents
def titan_packed_document_mask_buffers(positions):
    """attention.py get_efficient_causal_mask_mod_for_packed_document(positions), op for op: the
    closure keeps `offsets` and `document_id` (the mask_mod's captured buffers, which flex
    attention saves for its backward); document_starts, token_idx and the where/full_like
    temporaries are freed when it returns."""
    seq_len = positions.shape[0]
    document_starts = positions == 0
    document_id = torch.cumsum(document_starts.int(), dim=0).to(torch.int32) - 1
    token_idx = torch.arange(seq_len, device=positions.device, dtype=torch.int32)
    offsets = torch.full((_round_up(seq_len + 1, 128),), seq_len, device=positions.device, dtype=torch.int32)
    offsets.scatter_(
        0,
        torch.where(document_starts, document_id, torch.full_like(document_id, seq_len)).to(torch.int64),
        torch.where(document_starts, token_idx, torch.full_like(token_idx, seq_len)),
    )
    return offsets, document_id


class TitanBlockMask:
    """E18: the BlockMask of decoder.py _create_flex_attention_mask (create_attention_mask: the
    torch.compile'd create_block_mask(and_masks(causal, packed_document), B=1, H=None, T, T,
    BLOCK_SIZE=128 (_DEFAULT_SPARSE_BLOCK_SIZE), separate_full_blocks=True)). Its tensors, as
    nn/attention/flex_attention.py BlockMask.from_kv_blocks holds them: kv_num_blocks [1, 1, nq],
    kv_indices [1, 1, nq, nkv], full_kv_num_blocks, full_kv_indices, and their transposes
    q_num_blocks [1, 1, nkv], q_indices [1, 1, nkv, nq], full_q_num_blocks, full_q_indices, all
    int32 (compute_q_blocks: the backward needs them). The compiled kernel's intermediates are not
    emulated (inductor fuses the mask evaluation into the block reduction; sizes unknown)."""

    def __init__(self, positions, block_size=128):
        self.offsets, self.document_id = titan_packed_document_mask_buffers(positions)
        t = positions.shape[0]
        n = (t + block_size - 1) // block_size
        shapes = [(1, 1, n), (1, 1, n, n), (1, 1, n), (1, 1, n, n)] * 2
        self.tensors = []
        with HOOKS.label("create_block_mask"):
            for s in shapes:
                self.tensors.append(torch.zeros(s, dtype=torch.int32, device=positions.device))
        with HOOKS.untracked():  # the causal document mask the kernels apply
            doc = self.document_id.long()
            idx = torch.arange(t)
            self.dense = (doc[:, None] == doc[None, :]) & (idx[None, :] <= idx[:, None])

    def buffers(self):
        return (*self.tensors, self.offsets, self.document_id)


class _FlexAttention(torch.autograd.Function):
    """E18: torchtitan's FlexAttention (attention.py: FlexAttention._compiled_flex_attn =
    torch.compile(flex_attention), return_aux lse False) on CUDA. torch 1.13 has no flex
    attention. Forward: the inductor lowering (torch/_inductor/kernel/flex/flex_attention.py
    `flex_attention`) allocates logsumexp and max_scores, fp32 [B, Hq, L] each (empty_strided, "the
    logsumexp is always stored in fp32"), and the template's output [B, Hq, L, Dv] in the query's
    dtype and stride order (infer_dense_strides(out_size, q_strides)); max_scores is not used by
    the backward and not returned, so it is freed when the kernel is done. Saved
    (_higher_order_ops/flex_attention.py FlexAttentionAutogradOp.forward,
    save_values_for_backward(query, key, value, out, logsumexp, max_scores, *block_mask[:-1],
    *score_mod_other_buffers, *mask_mod_other_buffers); under torch.compile the partitioner keeps
    what flex_attention_backward reads: q, k, v (K and V with their kv heads: enable_gqa, no
    repeat), out, logsumexp, the block-mask tensors and the mask_mod's captured buffers).
    Backward (the `flex_attention_backward` lowering): delta = sum(out * grad_out, -1) in fp32
    [B, Hq, L] (the product fused into the reduction; with no lse gradient there is no
    grad_lse_exp2 buffer), then grad_query [B, Hq, L, D] (query's dtype and stride order),
    broadcasted_grad_value [B, Hkv, S, Dv] (value's), and the template's output grad_key
    [B, Hkv, S, D] (layout_broadcasted_k, key's); delta is freed after the kernel. The values are
    the CPU's math, untracked. Triton's own scratch is not emulated (none is taken through the
    caching allocator for these templates)."""

    @staticmethod
    def forward(ctx, q, k, v, scale, mask, *mask_buffers):
        _, h, t, d = q.shape
        kvh = k.shape[1]
        with HOOKS.label("flex_attention"):
            lse = torch.empty((1, h, t), dtype=torch.float32)
            max_scores = torch.empty((1, h, t), dtype=torch.float32)
            # q's stride order ([T, N, H] underneath), V's width (MLA's V is narrower than Q)
            dv = v.shape[-1]
            out = torch.empty_like(q) if dv == d else q.new_empty((t, h, dv)).transpose(0, 1).unsqueeze(0)
        with HOOKS.untracked():
            kk = k.repeat_interleave(h // kvh, dim=1).float()
            vv = v.repeat_interleave(h // kvh, dim=1).float()
            sc = torch.matmul(q.float(), kk.transpose(-1, -2)) * scale
            sc = sc.masked_fill(~mask.dense, float("-inf"))
            lse.copy_(torch.logsumexp(sc, dim=-1) / math.log(2))
            out.copy_(torch.matmul(torch.softmax(sc, -1), vv))
        del max_scores  # dead after the kernel
        ctx.save_for_backward(q, k, v, out, lse, *mask_buffers)
        ctx.scale, ctx.mask = scale, mask
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, out, lse = ctx.saved_tensors[:5]
        _, h, t, d = q.shape
        kvh = k.shape[1]
        with HOOKS.label("flex_attention_backward"):
            delta = torch.empty((1, h, t), dtype=torch.float32)
            dq = torch.empty_like(q)
            dv = torch.empty_like(v)
            dk = torch.empty_like(k)
        with HOOKS.untracked():
            qq = q.detach().float().requires_grad_()
            kk = k.detach().float().requires_grad_()
            vv = v.detach().float().requires_grad_()
            with torch.enable_grad():
                sc = torch.matmul(qq, kk.repeat_interleave(h // kvh, dim=1).transpose(-1, -2)) * ctx.scale
                sc = sc.masked_fill(~ctx.mask.dense, float("-inf"))
                o = torch.matmul(torch.softmax(sc, -1), vv.repeat_interleave(h // kvh, dim=1))
                gq, gk, gv = torch.autograd.grad(o, (qq, kk, vv), g.float())
            dq.copy_(gq)
            dk.copy_(gk)
            dv.copy_(gv)
        del delta
        return (dq, dk, dv, None, None) + (None,) * (len(ctx.saved_tensors) - 5)


def titan_flex_attention(q_TNH, k_TNH, v_TNH, mask, scale):
    """attention.py FlexAttention.forward: [T, N, H] -> [1, N, T, H] views, the compiled kernel
    (E18), and back to [T, N, H] (views)."""
    q_BNTH = q_TNH.transpose(0, 1).unsqueeze(0)
    k_BNTH = k_TNH.transpose(0, 1).unsqueeze(0)
    v_BNTH = v_TNH.transpose(0, 1).unsqueeze(0)
    if scale is None:
        scale = q_TNH.shape[-1] ** -0.5
    out_BNTH = _FlexAttention.apply(q_BNTH, k_BNTH, v_BNTH, scale, mask, *mask.buffers())
    return out_BNTH.squeeze(0).transpose(0, 1)


def titan_maybe_check_max_pos(positions, max_valid_pos):
    """rope.py _maybe_check_max_pos: torch._assert_async(torch.all(positions <= max_valid_pos)):
    a bool [T] and a 0-dim bool on the device, both transient (_assert_async allocates nothing)."""
    ok = torch.all(positions <= max_valid_pos)
    del ok


class TitanComplexRoPE(nn.Module):
    """rope.py ComplexRoPE: cache complex64 [max_context_length, dim / 2] (a buffer; the trainer
    sets max_context_length to the training sequence length, Decoder.Config.update_from_config);
    per call _reshape_cache gathers cache[positions] (aten index, complex64 [T, dim / 2], saved by
    both complex products), then apply_rotary_emb: query.float(), view_as_complex, * rope_cache,
    view_as_real, flatten(-2), type_as(query); the same for key."""

    def __init__(self, dim, max_context_length, theta=10000.0):
        super().__init__()
        self.dim, self.max_context_length, self.theta = dim, max_context_length, theta
        self.register_buffer("cache", self._precompute_cache(), persistent=False)

    def _precompute_cache(self):
        dim, end = self.dim, self.max_context_length
        freqs = 1.0 / (self.theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = torch.arange(end, device=freqs.device)
        freqs = torch.outer(t, freqs).float()
        return torch.polar(torch.ones_like(freqs), freqs)  # complex64

    def _reshape_cache(self, query, positions):
        titan_maybe_check_max_pos(positions, self.cache.shape[0] - 1)
        num_tokens = query.shape[0]
        rope_cache = self.cache[positions]  # _reshape_for_broadcast
        return rope_cache.view(num_tokens, 1, self.cache.shape[-1])

    @staticmethod
    def apply_rotary_emb(query, key, rope_cache):
        xq_ = torch.view_as_complex(query.float().reshape(*query.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(key.float().reshape(*key.shape[:-1], -1, 2))
        xq_out = torch.view_as_real(xq_ * rope_cache).flatten(-2)
        xk_out = torch.view_as_real(xk_ * rope_cache).flatten(-2)
        return xq_out.type_as(query), xk_out.type_as(key)

    def forward(self, query, key, positions):
        return self.apply_rotary_emb(query, key, self._reshape_cache(query, positions))


class TitanCosSinRoPE(TitanComplexRoPE):
    """rope.py CosSinRoPE: cache fp32 [max_context_length, 2 * dim] (cat of cos and sin of
    cat([freqs, freqs])); cache[positions] gathers fp32 [T, 2 * dim] rows (saved through the cos
    and sin views by the products); the rotation in fp32 with rotate-half (slices, neg, cat), then
    type_as."""

    def _precompute_cache(self):
        dim = self.dim
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = torch.arange(self.max_context_length, dtype=inv_freq.dtype, device=inv_freq.device)
        freqs = torch.outer(t, inv_freq).float()
        theta = torch.cat([freqs, freqs], dim=-1)
        return torch.cat([theta.cos(), theta.sin()], dim=-1)

    @staticmethod
    def _rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    @staticmethod
    def apply_rotary_emb(query, key, rope_cache):
        head_dim = query.shape[-1]
        cos = rope_cache[..., :head_dim]
        sin = rope_cache[..., head_dim:]
        query_f = query.float()
        key_f = key.float()
        xq_out = (query_f * cos) + (TitanCosSinRoPE._rotate_half(query_f) * sin)
        xk_out = (key_f * cos) + (TitanCosSinRoPE._rotate_half(key_f) * sin)
        return xq_out.type_as(query), xk_out.type_as(key)


class TitanFusedQKVLinear(nn.Module):
    """attention.py FusedQKVLinear: one wqkv linear [T, n_kv * (n_heads / n_kv + 2) * head_dim],
    viewed [T, n_kv, r, head_dim], split [hpk, 1, 1] on dim -2 (views), then
    xq.reshape(T, -1, hd).contiguous() (reshape of the strided split copies: clone), and
    xk/xv.reshape(...) (views) .contiguous() (copies). The wqkv output is freed after the split;
    in backward SplitWithSizesBackward cats the three gradients into one wqkv-sized gradient."""

    def __init__(self, dim, n_heads, n_kv_heads, head_dim):
        super().__init__()
        self.head_dim = head_dim
        self.heads_per_kv = n_heads // n_kv_heads
        self.r_dim = self.heads_per_kv + 2
        self.wqkv = nn.Linear(dim, n_kv_heads * self.r_dim * head_dim, bias=False)

    def forward(self, x):
        num_tokens = x.shape[0]
        qkv = self.wqkv(x)
        qkv = qkv.view(num_tokens, -1, self.r_dim, self.head_dim)
        hpk, hd = self.heads_per_kv, self.head_dim
        xq, xk, xv = torch.split(qkv, [hpk, 1, 1], dim=-2)
        return (xq.reshape(num_tokens, -1, hd).contiguous(),
                xk.reshape(num_tokens, -1, hd).contiguous(),
                xv.reshape(num_tokens, -1, hd).contiguous())


class TitanGQAttention(nn.Module):
    """attention.py GQAttention.forward: qkv_linear, optional q_norm/k_norm (Qwen3, before RoPE),
    rope, inner_attention (flex, enable_gqa), .contiguous() (a no-op: flex's output takes the
    query's [T, N, H] stride order), view(T, -1), wo. Registration order: rope (buffer),
    qkv_linear, wo, inner_attention, q_norm, k_norm."""

    def __init__(self, cfg, rope_class):
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.heads, cfg.kv_heads
        self.head_dim = cfg.head_dim
        qwen3 = cfg.qk_norm
        self.rope = rope_class(self.head_dim, cfg.max_positions,
                               theta=1000000.0 if qwen3 else 10000.0)
        self.qkv_linear = TitanFusedQKVLinear(cfg.hidden, cfg.heads, cfg.kv_heads, self.head_dim)
        self.wo = nn.Linear(cfg.heads * self.head_dim, cfg.hidden, bias=False)
        self.q_norm = self.k_norm = None
        if qwen3:  # qk_norm=_qwen3_norm(head_dim)
            self.q_norm = TitanNowRMSNorm(self.head_dim, eps=cfg.rms_eps)
            self.k_norm = TitanNowRMSNorm(self.head_dim, eps=cfg.rms_eps)
        # Qwen3 passes head_dim explicitly: scaling head_dim ** -0.5; Llama 3: None (flex's default)
        self.scaling = self.head_dim ** -0.5 if qwen3 else None

    def forward(self, x_TD, attention_masks, positions):
        xq_TNH, xk_TNH, xv_TNH = self.qkv_linear(x_TD)
        if self.q_norm is not None or self.k_norm is not None:
            xq_TNH = self.q_norm(xq_TNH)
            xk_TNH = self.k_norm(xk_TNH)
        xq_TNH, xk_TNH = self.rope(xq_TNH, xk_TNH, positions)
        out_TNH = titan_flex_attention(xq_TNH, xk_TNH, xv_TNH, attention_masks, self.scaling).contiguous()
        out_TD = out_TNH.view(out_TNH.shape[0], -1)
        return self.wo(out_TD)


class TitanNowFeedForward(nn.Module):
    """feed_forward.py FeedForward: w2(F.silu(w1(x)) * w3(x))."""

    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TitanGroupedExperts(nn.Module):
    """moe.py GroupedExperts: w1_EFD [E, F, D], w2_EDF [E, D, F], w3_EFD [E, F, D];
    offsets_E = cumsum(num_tokens_per_expert_E, dtype=int32); h = silu(_grouped_mm(x.bfloat16(),
    w1.bfloat16().transpose(-2, -1), offs)); h = h * _grouped_mm(x.bfloat16(), w3..., offs);
    _grouped_mm(h, w2..., offs).type_as(x). torch._grouped_mm is E13 (the .bfloat16() casts are
    no-ops for bf16 inputs and parameters)."""

    def __init__(self, dim, hidden_dim, num_experts):
        super().__init__()
        self.num_experts = num_experts
        self.w1_EFD = nn.Parameter(torch.empty(num_experts, hidden_dim, dim))
        self.w2_EDF = nn.Parameter(torch.empty(num_experts, dim, hidden_dim))
        self.w3_EFD = nn.Parameter(torch.empty(num_experts, hidden_dim, dim))
        for w in (self.w1_EFD, self.w2_EDF, self.w3_EFD):  # qwen3 _EXPERTS_INIT: normal(std 0.02)
            nn.init.normal_(w, std=0.02)

    def forward(self, x_RD, num_tokens_per_expert_E):
        offsets_E = torch.cumsum(num_tokens_per_expert_E, dim=0, dtype=torch.int32)
        h_RF = F.silu(grouped_mm_op(x_RD.bfloat16(), self.w1_EFD.bfloat16().transpose(-2, -1), offsets_E))
        h_RF = h_RF * grouped_mm_op(x_RD.bfloat16(), self.w3_EFD.bfloat16().transpose(-2, -1), offsets_E)
        return grouped_mm_op(h_RF, self.w2_EDF.bfloat16().transpose(-2, -1), offsets_E).type_as(x_RD)


class _DeterministicScatterAdd(torch.autograd.Function):
    """E20: ops/scatter_add.py deterministic_scatter_add (a torch.library custom op):
    out.scatter_add(dim=0, index, src) under use_deterministic_algorithms(True). On CUDA the
    out-of-place scatter_add allocates its result (out's shape and dtype) and copies `out` into
    it; deterministic mode routes it through _scatter_via_index_put (TensorAdvancedIndexing.cpp),
    where an index expanded with zero strides (torchtitan's reshape(-1, 1).expand(-1, dim))
    takes the broadcast_index path: index.select views and one accumulating index_put_, whose
    sort-based kernel's own buffers (linear, sorted and original index arrays, cub's storage) are
    not emulated, as for the other accumulating index_put_ calls here. register_autograd's
    _setup_context saves the index; _backward returns grad_output for `out` and
    torch.gather(grad_output, 0, index) for src (one [N, D] allocation)."""

    @staticmethod
    def forward(ctx, out, index, src):
        with HOOKS.label("deterministic_scatter_add"):
            result = torch.empty_like(out)
        with HOOKS.untracked():
            result.copy_(out.scatter_add(0, index, src))
        ctx.save_for_backward(index)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        (index,) = ctx.saved_tensors
        grad_src = torch.gather(grad_output, dim=0, index=index)
        return grad_output, None, grad_src


def deterministic_scatter_add(out, index, src):
    if MODE == "native":
        return out.scatter_add(0, index, src)
    return _DeterministicScatterAdd.apply(out, index, src)


def argsort_stable(x):
    """torch.argsort(x, stable=True): in torch 2.x argsort.stable is CompositeImplicitAutograd,
    std::get<1>(at::sort(self, stable, dim, descending)) (native/Sorting.cpp): sort allocates the
    values and the int64 indices, and the values are freed at once. torch 1.13's CPU kernel hides
    the values inside one operator. cub's sort storage on CUDA is not emulated."""
    if MODE == "native":
        return torch.argsort(x, stable=True)
    values, indices = torch.sort(x, stable=True)
    del values
    return indices


class TitanLocalTokenDispatcher:
    """token_dispatcher.py LocalTokenDispatcher (EP 1): dispatch = _local_reorder (stable argsort
    of the flat expert ids, the scores gathered in that order, the indices // top_k, the token
    rows gathered); combine = zeros_like(x), (out.to(float32) * scores[:, None]).to(dtype),
    deterministic_scatter_add (E20)."""

    def __init__(self, num_experts, top_k):
        self.num_experts, self.top_k = num_experts, top_k

    def _local_reorder(self, x_TD, topk_scores_TK, topk_expert_ids_TK):
        token_indices_experts_sorted_N = argsort_stable(topk_expert_ids_TK.view(-1))
        topk_scores_experts_sorted_N = topk_scores_TK.view(-1)[token_indices_experts_sorted_N]
        token_indices_experts_sorted_N = token_indices_experts_sorted_N // self.top_k
        routed_input_ND = x_TD[token_indices_experts_sorted_N]
        return routed_input_ND, token_indices_experts_sorted_N, topk_scores_experts_sorted_N

    def dispatch(self, x_TD, topk_scores_TK, topk_expert_ids_TK, num_local_tokens_per_expert_E):
        routed_input_RD, token_indices, topk_scores_sorted = self._local_reorder(
            x_TD, topk_scores_TK, topk_expert_ids_TK)
        metadata = (token_indices, topk_scores_sorted)  # LocalDispatchMetadata
        return routed_input_RD, num_local_tokens_per_expert_E, metadata

    def combine(self, routed_output_RD, metadata, x_TD):
        token_indices, topk_scores_sorted = metadata
        out_TD = torch.zeros_like(x_TD)
        routed_output_RD = (routed_output_RD.to(torch.float32)
                            * topk_scores_sorted.reshape(-1, 1)).to(routed_output_RD.dtype)
        dim = x_TD.shape[-1]
        out_TD = deterministic_scatter_add(out_TD, token_indices.reshape(-1, 1).expand(-1, dim), routed_output_RD)
        return out_TD


class TitanRoutedExperts(nn.Module):
    """moe.py RoutedExperts.forward: dispatch, inner_experts, combine (routed_output_RD, the
    experts' output, stays referenced by this frame until it returns)."""

    def __init__(self, cfg):
        super().__init__()
        self.inner_experts = TitanGroupedExperts(cfg.hidden, cfg.moe_intermediate, cfg.moe_experts)
        self.token_dispatcher = TitanLocalTokenDispatcher(cfg.moe_experts, cfg.moe_top_k)

    def forward(self, x_TD, topk_scores_TK, topk_expert_ids_TK, num_local_tokens_per_expert_E):
        routed_input_RD, num_e, metadata = self.token_dispatcher.dispatch(
            x_TD, topk_scores_TK, topk_expert_ids_TK, num_local_tokens_per_expert_E)
        routed_output_RD = self.inner_experts(routed_input_RD, num_e)
        out_TD = self.token_dispatcher.combine(routed_output_RD, metadata, x_TD)
        return out_TD


class TitanTokenChoiceTopKRouter(nn.Module):
    """moe.py TokenChoiceTopKRouter.forward with Qwen3-MoE's settings (score_func "softmax",
    route_norm True, route_scale 1.0, no expert groups), DeepSeek-V2's (_236b: "softmax", route_norm
    False, route_scale 16, 8 groups of which 3 kept; _16b: no groups) or DeepSeek-V3's (_671b: "sigmoid",
    route_norm True, route_scale 2.5, num_expert_groups 8 of which num_limited_groups 4 kept by
    _get_node_limited_routing_scores: unflatten, topk(2) per group, sum, topk of the groups,
    ones_like(bool).scatter_, masked_fill(-inf), flatten; all of it dropped once the expert ids
    are chosen, as only topk's indices leave it): the gate under
    torch.autocast(dtype=float32) (CUDA autocast, E5 with an fp32 target: linear's inputs cast to
    fp32, the bf16 weight cast not cached (the cache is for fp32 leaves cast down); the linear
    keeps the fp32 input copy [T, D] and the fp32 weight copy [E, D]), softmax (fp32 [T, E],
    saved), + expert_bias_E (fp32 [T, E], a local to the return), topk (values a local to the
    return; the int64 ids kept), scores_TE.gather (fp32 [T, K]), the sum + 1e-20 divisor [T, 1],
    the division and the * route_scale product (fp32 [T, K])."""

    def __init__(self, cfg):
        super().__init__()
        self.gate = nn.Linear(cfg.hidden, cfg.moe_experts, bias=False)
        nn.init.normal_(self.gate.weight, std=0.02)  # _LINEAR_INIT
        self.num_experts = cfg.moe_experts
        self.top_k = cfg.moe_top_k
        deepseek = cfg.family in ("deepseek_v3", "deepseek_v2")
        v2 = cfg.family == "deepseek_v2"  # the _16b and _236b flavors: softmax, route_norm False
        self.score_func = "sigmoid" if deepseek and not v2 else "softmax"
        grouped = cfg.n_group > 1 and (not v2 or cfg.topk_method == "group_limited_greedy")
        self.num_expert_groups = cfg.n_group if deepseek and grouped else None
        self.num_limited_groups = cfg.topk_group
        self.route_norm = not v2
        self.route_scale = cfg.routed_scaling_factor if deepseek else 1.0

    def _get_node_limited_routing_scores(self, scores_for_choice_TE):
        experts_per_group = self.num_experts // self.num_expert_groups
        scores_grouped = scores_for_choice_TE.unflatten(-1, (self.num_expert_groups, experts_per_group))
        top2_scores_in_group, _ = scores_grouped.topk(2, dim=-1)
        group_scores = top2_scores_in_group.sum(dim=-1)
        _, group_idx = torch.topk(group_scores, k=self.num_limited_groups, dim=-1, sorted=False)
        group_mask = torch.ones_like(group_scores, dtype=torch.bool)
        group_mask.scatter_(-1, group_idx, False)
        return scores_grouped.masked_fill(group_mask.unsqueeze(-1), float("-inf")).flatten(-2)

    def forward(self, x_TD, expert_bias_E=None):
        with autocast(enabled=True, dtype=torch.float32):  # torch.autocast(device_type, dtype=float32)
            scores_TE = self.gate(x_TD)
        scores_TE = torch.sigmoid(scores_TE) if self.score_func == "sigmoid" else softmax(scores_TE, dim=-1)
        scores_for_choice_TE = scores_TE if expert_bias_E is None else scores_TE + expert_bias_E
        if self.num_expert_groups is not None:
            scores_for_choice_TE = self._get_node_limited_routing_scores(scores_for_choice_TE)
        _, topk_expert_ids_TK = torch.topk(scores_for_choice_TE, k=self.top_k, dim=-1, sorted=False)
        topk_scores_TK = scores_TE.gather(dim=-1, index=topk_expert_ids_TK)
        if self.route_norm:
            denominator = topk_scores_TK.sum(dim=-1, keepdim=True) + 1e-20
            topk_scores_TK = topk_scores_TK / denominator
        topk_scores_TK = topk_scores_TK * self.route_scale
        return topk_scores_TK, topk_expert_ids_TK, scores_TE


class TitanMoE(nn.Module):
    """moe.py MoE.forward: router(x, expert_bias_E); routing_map = zeros_like(scores, bool)
    .scatter_(-1, ids, True) (a local to the return); num_local_tokens_per_expert_E =
    routing_map.sum(0) (int64 [E]); tokens_per_expert_E.add_() under no_grad; routed_experts;
    then DeepSeek-V3's shared experts, one FeedForward of moe_hidden_dim x num_shared_experts
    (make_ffn_config), added to the routed output (none in Qwen3). Buffers expert_bias_E
    (load_balance_coeff 1e-3) and tokens_per_expert_E, fp32 [E]."""

    def __init__(self, cfg):
        super().__init__()
        self.routed_experts = TitanRoutedExperts(cfg)
        self.router = TitanTokenChoiceTopKRouter(cfg)
        self.shared_experts = None
        if cfg.moe_shared_experts:
            self.shared_experts = TitanNowFeedForward(cfg.hidden, cfg.moe_intermediate * cfg.moe_shared_experts)
        self.register_buffer("expert_bias_E", torch.zeros(cfg.moe_experts, dtype=torch.float32), persistent=True)
        self.register_buffer("tokens_per_expert_E", torch.zeros(cfg.moe_experts, dtype=torch.float32),
                             persistent=False)

    def forward(self, x_TD):
        topk_scores_TK, topk_expert_ids_TK, scores_TE = self.router(x_TD, self.expert_bias_E)
        routing_map_TE = torch.zeros_like(scores_TE, dtype=torch.bool).scatter_(-1, topk_expert_ids_TK, True)
        num_local_tokens_per_expert_E = routing_map_TE.sum(dim=0)
        if self.training:
            with torch.no_grad():
                self.tokens_per_expert_E.add_(num_local_tokens_per_expert_E)
        out_TD = self.routed_experts(x_TD, topk_scores_TK, topk_expert_ids_TK, num_local_tokens_per_expert_E)
        shared_out_TD = self.shared_experts(x_TD) if self.shared_experts is not None else None
        if shared_out_TD is not None:
            out_TD = out_TD + shared_out_TD
        return out_TD


class TitanMLAttention(nn.Module):
    """models/deepseek_v3/model.py Attention.forward (MLA): q = wq_b(q_norm(wq_a(x))) (wq(x)
    without q_lora_rank), viewed [T, N, qk] and split into q_nope and q_pe (views); kv =
    wkv_a(x), split into kv and k_pe (views); rope(q_pe, k_pe.unsqueeze(1), positions)
    (ComplexRoPE over qk_rope_head_dim, yarn scaling only changes the table's values); q =
    cat([q_nope, q_pe]); kv = wkv_b(kv_norm(kv)), viewed [T, N, nope + v] and split into k_nope
    and v (views); k = cat([k_nope, k_pe.expand(-1, N, -1)]); inner_attention (flex) with
    softmax_scale; .contiguous() (a no-op), view(T, -1), wo. Registration: wq_a, q_norm, wq_b (or
    wq), wkv_a, kv_norm, wkv_b, wo, inner_attention, rope."""

    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.heads
        self.q_lora_rank, self.kv_lora_rank = cfg.q_lora_rank, cfg.kv_lora_rank
        self.qk_nope_head_dim, self.qk_rope_head_dim = cfg.qk_nope_head_dim, cfg.head_dim
        self.qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        self.v_head_dim = cfg.v_head_dim
        if self.q_lora_rank == 0:
            self.wq = nn.Linear(cfg.hidden, cfg.heads * self.qk_head_dim, bias=False)
        else:
            self.wq_a = nn.Linear(cfg.hidden, self.q_lora_rank, bias=False)
            self.q_norm = TitanNowRMSNorm(self.q_lora_rank, eps=1e-5)
            self.wq_b = nn.Linear(self.q_lora_rank, cfg.heads * self.qk_head_dim, bias=False)
        self.wkv_a = nn.Linear(cfg.hidden, self.kv_lora_rank + self.qk_rope_head_dim, bias=False)
        self.kv_norm = TitanNowRMSNorm(self.kv_lora_rank, eps=1e-5)
        self.wkv_b = nn.Linear(self.kv_lora_rank, cfg.heads * (self.qk_nope_head_dim + self.v_head_dim), bias=False)
        self.wo = nn.Linear(cfg.heads * self.v_head_dim, cfg.hidden, bias=False)
        self.softmax_scale = self.qk_head_dim ** -0.5
        self.rope = TitanComplexRoPE(self.qk_rope_head_dim, cfg.max_positions)

    def forward(self, x, attention_masks, positions):
        num_tokens = x.shape[0]
        q = self.wq(x) if self.q_lora_rank == 0 else self.wq_b(self.q_norm(self.wq_a(x)))
        q = q.view(num_tokens, -1, self.qk_head_dim)
        q_nope, q_pe = torch.split(q, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        kv = self.wkv_a(x)
        kv, k_pe = torch.split(kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        q_pe, k_pe = self.rope(q_pe, k_pe.unsqueeze(1), positions)
        q = torch.cat([q_nope, q_pe], dim=-1)
        kv = self.wkv_b(self.kv_norm(kv))
        kv = kv.view(num_tokens, -1, self.qk_nope_head_dim + self.v_head_dim)
        k_nope, v = torch.split(kv, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(-1, k_nope.size(1), -1)], dim=-1)
        output = titan_flex_attention(q, k, v, attention_masks, self.softmax_scale).contiguous()
        return self.wo(output.view(num_tokens, -1))


class TitanNowBlock(FrameworkLayer):
    """models/llama3/model.py Llama3TransformerBlock (h = x + attention(attention_norm(x)); out =
    h + feed_forward(ffn_norm(h))) and models/qwen3/model.py Qwen3TransformerBlock (the same,
    with moe(ffn_norm(x)) in the MoE flavors). Registration: attention, feed_forward / moe,
    attention_norm, ffn_norm."""

    def __init__(self, cfg, layer_idx):
        super().__init__()
        qwen3 = cfg.qk_norm
        eps = cfg.rms_eps if qwen3 else 1e-5  # Qwen3's _EPS 1e-6; Llama 3's RMSNorm.Config default
        if cfg.family in ("deepseek_v3", "deepseek_v2"):  # models/deepseek_v3 DeepSeekV3TransformerBlock
            self.attention = TitanMLAttention(cfg)
        else:
            self.attention = TitanGQAttention(cfg, TitanCosSinRoPE if qwen3 else TitanComplexRoPE)
        # build_mla_moe_layers: layers below n_dense_layers get a dense FeedForward
        self.moe_enabled = cfg.moe_experts > 0 and layer_idx >= cfg.first_k_dense_replace
        if self.moe_enabled:
            self.moe = TitanMoE(cfg)
        else:
            self.feed_forward = TitanNowFeedForward(cfg.hidden, cfg.intermediate)
        self.attention_norm = TitanNowRMSNorm(cfg.hidden, eps=eps)
        self.ffn_norm = TitanNowRMSNorm(cfg.hidden, eps=eps)

    def forward(self, x, attention_masks, positions):
        h = x + self.attention(self.attention_norm(x), attention_masks, positions)
        if self.moe_enabled:
            return h + self.moe(self.ffn_norm(h))
        return h + self.feed_forward(self.ffn_norm(h))


class TitanNowModel(FrameworkModel):
    """decoder.py Decoder.forward over packed tokens: the embedding's [B, S, D] output is the
    packed [T, D] (a view), each layer gets (h, attention_masks, positions)."""

    def __init__(self, cfg):
        eps = cfg.rms_eps if cfg.qk_norm else 1e-5
        super().__init__(cfg, TitanNowBlock, partial(TitanNowRMSNorm, eps=eps))

    def forward(self, input_ids, positions=None, attention_masks=None):
        h = self.embed_tokens(input_ids)
        h = h.view(-1, h.shape[-1])  # the trainer's 1-D token batch: [T, D]
        for layer in self.layers:
            h = layer(h, attention_masks, positions)
        return self.norm(h)


class TitanNowForCausalLM(FrameworkForCausalLM):
    """torchtitan's current Llama 3 / Qwen3 blocks inside Hugging Face's embedding, head and
    loss. The trainer's inputs: `positions` (collators.py TextCollator: per-document aranges,
    int64 [T]) moved to the device with the input dict, and the flex BlockMask built from them
    (Trainer.post_dataloading_process), both held to the end of the micro-batch's backward."""
    model_class = TitanNowModel
    takes_positions = True

    def attention_masks(self, positions):
        return TitanBlockMask(positions)

    def forward(self, input_ids, labels=None, positions=None, attention_masks=None):
        hidden_states = self.model(input_ids, positions=positions, attention_masks=attention_masks)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits.view(*input_ids.shape, -1), labels=labels,
                                      vocab_size=self.cfg.vocab)
        return loss, logits

    def restore_buffers(self):  # Module.to(bf16) casts the buffers; torchtitan builds them fp32/complex64
        for layer in self.model.layers:
            rope = layer.attention.rope
            rope.cache = rope._precompute_cache()
            if layer.moe_enabled:
                e = self.cfg.moe_experts
                layer.moe.expert_bias_E = torch.zeros(e, dtype=torch.float32)
                layer.moe.tokens_per_expert_E = torch.zeros(e, dtype=torch.float32)


MODEL_CODES = {"torchtune": TorchtuneForCausalLM, "litgpt": LitgptForCausalLM,
               "torchtitan-2024": TitanForCausalLM, "megatron-te": MegatronTEForCausalLM,
               "torchtitan": TitanNowForCausalLM}


# --------------------------------------------------------------------------------------------
# DeepSeek-V3 (transformers 5: models/deepseek_v3/modeling_deepseek_v3.py, generated from
# modular_deepseek_v3.py; integrations/moe.py): Llama's RMSNorm, rotary (over qk_rope_head_dim),
# eager attention and SwiGLU MLP; DeepseekV3Attention (MLA: q_a_proj, q_a_layernorm, q_b_proj;
# kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj; the rope part of K shared by the heads;
# rope_interleave's view/transpose/reshape before the rotary; Q and K concatenated from their
# nope and rope parts); layers [first_k_dense_replace, layers) with DeepseekV3MoE: the fp32
# DeepseekV3TopkRouter, route_tokens_to_experts (sigmoid, e_score_correction_bias, group-limited
# top-k, gather, in-place renormalization, routed_scaling_factor), DeepseekV3NaiveMoe (Mixtral's
# packed experts, @use_experts_implementation: grouped_mm by default) and the shared experts (a
# DeepseekV3MLP of moe_intermediate_size * n_shared_experts on the block's input).
# --------------------------------------------------------------------------------------------
class DeepseekV3MLP(LlamaMLP):
    def __init__(self, cfg, intermediate_size=None):
        nn.Module.__init__(self)
        f = cfg.intermediate if intermediate_size is None else intermediate_size
        self.gate_proj = nn.Linear(cfg.hidden, f, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, f, bias=False)
        self.down_proj = nn.Linear(f, cfg.hidden, bias=False)
        self.act_fn = nn.SiLU()


class DeepseekV3TopkRouter(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.hidden = cfg.hidden
        self.weight = nn.Parameter(torch.empty(cfg.moe_experts, cfg.hidden))
        nn.init.normal_(self.weight, std=0.02)  # DeepseekV3PreTrainedModel._init_weights
        self.register_buffer("e_score_correction_bias", torch.zeros(cfg.moe_experts))

    def forward(self, hidden_states):  # DeepseekV3TopkRouter.forward
        hidden_states = hidden_states.view(-1, self.hidden)
        return F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))


class DeepseekV3MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.experts = MixtralExperts(cfg)  # DeepseekV3NaiveMoe: MixtralExperts' code
        self.gate = DeepseekV3TopkRouter(cfg)
        self.shared_experts = DeepseekV3MLP(cfg, cfg.moe_intermediate * cfg.moe_shared_experts)
        self.n_routed_experts = cfg.moe_experts
        self.n_group = cfg.n_group
        self.topk_group = cfg.topk_group
        self.norm_topk_prob = cfg.moe_norm_topk_prob
        self.routed_scaling_factor = cfg.routed_scaling_factor
        self.top_k = cfg.moe_top_k

    def route_tokens_to_experts(self, router_logits):  # DeepseekV3MoE.route_tokens_to_experts
        router_logits = router_logits.sigmoid()
        router_logits_for_choice = router_logits + self.gate.e_score_correction_bias
        group_scores = (
            router_logits_for_choice.view(-1, self.n_group, self.n_routed_experts // self.n_group)
            .topk(2, dim=-1)[0]
            .sum(dim=-1)
        )
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = (
            group_mask.unsqueeze(-1)
            .expand(-1, self.n_group, self.n_routed_experts // self.n_group)
            .reshape(-1, self.n_routed_experts)
        )
        scores_for_choice = router_logits_for_choice.masked_fill(~score_mask.bool(), float("-inf"))
        topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]
        topk_weights = router_logits.gather(1, topk_indices)
        if self.norm_topk_prob:
            denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
            topk_weights /= denominator
        topk_weights = topk_weights * self.routed_scaling_factor
        return topk_indices, topk_weights

    def forward(self, hidden_states):  # DeepseekV3MoE.forward
        residuals = hidden_states
        orig_shape = hidden_states.shape
        router_logits = self.gate(hidden_states)
        topk_indices, topk_weights = self.route_tokens_to_experts(router_logits)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        hidden_states = self.experts(hidden_states, topk_indices, topk_weights).view(*orig_shape)
        hidden_states = hidden_states + self.shared_experts(residuals)
        return hidden_states


def apply_rotary_pos_emb_interleave(q, k, cos, sin, unsqueeze_dim=1):  # modeling_deepseek_v3.py
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    b, h, s, d = q.shape
    q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    b, h, s, d = k.shape
    k = k.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class DeepseekV3Attention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.cfg = cfg
        self.num_key_value_groups = 1  # num_attention_heads // num_key_value_heads (equal)
        self.attention_dropout = 0.0
        self.is_causal = True
        self.q_lora_rank = cfg.q_lora_rank
        self.qk_rope_head_dim = cfg.head_dim
        self.kv_lora_rank = cfg.kv_lora_rank
        self.v_head_dim = cfg.v_head_dim
        self.qk_nope_head_dim = cfg.qk_nope_head_dim
        self.qk_head_dim = cfg.qk_nope_head_dim + cfg.head_dim
        self.num_heads = cfg.heads
        if self.q_lora_rank == 0:  # q_lora_rank None
            self.q_proj = nn.Linear(cfg.hidden, self.num_heads * self.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(cfg.hidden, cfg.q_lora_rank, bias=False)
            self.q_a_layernorm = LlamaRMSNorm(cfg.q_lora_rank)
            self.q_b_proj = nn.Linear(cfg.q_lora_rank, self.num_heads * self.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(cfg.hidden, self.kv_lora_rank + self.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = LlamaRMSNorm(self.kv_lora_rank)
        self.kv_b_proj = nn.Linear(self.kv_lora_rank, self.num_heads * (self.qk_nope_head_dim + self.v_head_dim),
                                   bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.v_head_dim, cfg.hidden, bias=False)
        self.scaling = self.qk_head_dim ** (-0.5)  # no rope_scaling

    def rotate(self, q_rot, k_rot, position_embeddings):
        cos, sin = position_embeddings
        if self.cfg.rope_interleave:
            return apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin)
        return apply_rotary_pos_emb(q_rot, k_rot, cos, sin)

    def forward(self, hidden_states, position_embeddings, attention_mask):  # DeepseekV3Attention.forward
        batch_size, seq_length = hidden_states.shape[:-1]
        query_shape = (batch_size, seq_length, -1, self.qk_head_dim)
        key_shape = (batch_size, seq_length, -1, self.qk_nope_head_dim + self.v_head_dim)
        if self.q_lora_rank == 0:
            q_states = self.q_proj(hidden_states)
        else:
            q_states = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))
        q_states = q_states.view(query_shape).transpose(1, 2)
        q_pass, q_rot = torch.split(q_states, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        compressed_kv = self.kv_a_proj_with_mqa(hidden_states)
        k_pass, k_rot = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        k_pass = self.kv_b_proj(self.kv_a_layernorm(k_pass)).view(key_shape).transpose(1, 2)
        k_pass, value_states = torch.split(k_pass, [self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k_rot = k_rot.view(batch_size, 1, seq_length, self.qk_rope_head_dim)
        q_rot, k_rot = self.rotate(q_rot, k_rot, position_embeddings)
        k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
        query_states = torch.cat((q_pass, q_rot), dim=-1)
        key_states = torch.cat((k_pass, k_rot), dim=-1)
        assert self.cfg.attn == "eager", "SDPA with qk_head_dim != v_head_dim: the CUDA kernel is not emulated"
        attn_output, attn_weights = llama_eager_attention_forward(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling)
        attn_output = attn_output.reshape(batch_size, seq_length, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class DeepseekV3DecoderLayer(LlamaDecoderLayer):
    def __init__(self, cfg, layer_idx):
        GradientCheckpointingLayer.__init__(self)
        self.layer_idx = layer_idx
        self.self_attn = DeepseekV3Attention(cfg, layer_idx)
        self.mlp = DeepseekV3MoE(cfg) if layer_idx >= cfg.first_k_dense_replace else DeepseekV3MLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden, eps=cfg.rms_eps)


class DeepseekV3Model(LlamaModel):
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList([DeepseekV3DecoderLayer(cfg, i) for i in range(cfg.layers)])
        self.norm = LlamaRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.rotary_emb = LlamaRotaryEmbedding(cfg)  # DeepseekV3RotaryEmbedding: head_dim = qk_rope_head_dim


class DeepseekV3ForCausalLM(LlamaForCausalLM):
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        self.model = DeepseekV3Model(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.loss_function = ForCausalLMLoss


# --------------------------------------------------------------------------------------------
# DeepSeek-V2 (transformers 5: models/deepseek_v2/modeling_deepseek_v2.py, generated from
# modular_deepseek_v2.py, read at the 5.x modular): DeepSeek-V3's MLA without rope_interleave,
# with the complex rotary of apply_rotary_emb (DeepseekV2RotaryEmbedding returns complex64
# freqs_cis [1, s, rope / 2] from torch.polar; Q's and K's rope parts go through fp32 copies,
# view_as_complex, a complex product, view_as_real and type_as); layers
# [first_k_dense_replace, layers) with DeepseekV2Moe: the router is the block's own code (an
# nn.Linear `gate` whose weight alone is used: F.linear of fp32 copies of the input and the
# weight, then route_tokens_to_experts: softmax(dtype=float32), topk_method "greedy" or
# "group_limited_greedy" (group max, topk_group groups, masked_fill(0.0), topk), no
# renormalization, * routed_scaling_factor); DeepseekV2Experts (Qwen2MoeExperts, MixtralExperts'
# packed code, @use_experts_implementation: grouped_mm by default) registered before the gate; the
# shared experts (DeepseekV2MLP of moe_intermediate_size * n_shared_experts) on the block's input.
# --------------------------------------------------------------------------------------------
class DeepseekV2Moe(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.experts = MixtralExperts(cfg)  # DeepseekV2Experts(Qwen2MoeExperts): MixtralExperts' code
        self.gate = nn.Linear(cfg.hidden, cfg.moe_experts, bias=False)
        nn.init.normal_(self.gate.weight, std=0.02)  # PreTrainedModel._init_weights: nn.Linear, initializer_range
        self.shared_experts = DeepseekV3MLP(cfg, cfg.moe_intermediate * cfg.moe_shared_experts)  # DeepseekV2MLP
        self.routed_scaling_factor = cfg.routed_scaling_factor
        self.topk_method = cfg.topk_method
        self.num_group = cfg.n_group
        self.top_k = cfg.moe_top_k
        self.topk_group = cfg.topk_group
        self.num_experts = cfg.moe_experts  # read by route_tokens_to_experts as self.num_experts

    def route_tokens_to_experts(self, router_logits):  # DeepseekV2Moe.route_tokens_to_experts
        batch_size, seq_len, hidden_dim = router_logits.shape
        router_logits = router_logits.view(-1, hidden_dim)
        router_logits = softmax(router_logits, dim=-1, dtype=torch.float32)  # .softmax(dim=-1, dtype=float32)
        if self.topk_method == "greedy":
            topk_weight, topk_idx = torch.topk(router_logits, k=self.top_k, dim=-1, sorted=False)
        elif self.topk_method == "group_limited_greedy":
            group_scores = router_logits.view(batch_size * seq_len, self.num_group, -1).max(dim=-1).values
            group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores)
            group_mask.scatter_(1, group_idx, 1)
            score_mask = (
                group_mask.unsqueeze(-1)
                .expand(batch_size * seq_len, self.num_group, self.num_experts // self.num_group)
                .reshape(batch_size * seq_len, -1)
            )
            tmp_scores = router_logits.masked_fill(~score_mask.bool(), 0.0)
            topk_weight, topk_idx = torch.topk(tmp_scores, k=self.top_k, dim=-1, sorted=False)
        else:
            raise ValueError(self.topk_method)
        topk_weight = topk_weight * self.routed_scaling_factor
        return topk_idx, topk_weight

    def forward(self, hidden_states):  # DeepseekV2Moe.forward
        residuals = hidden_states
        orig_shape = hidden_states.shape
        router_logits = F.linear(hidden_states.type(torch.float32), self.gate.weight.type(torch.float32))
        topk_indices, topk_weights = self.route_tokens_to_experts(router_logits)
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        hidden_states = self.experts(hidden_states, topk_indices, topk_weights).view(*orig_shape)
        hidden_states = hidden_states + self.shared_experts(residuals)
        return hidden_states


class DeepseekV2RotaryEmbedding(LlamaRotaryEmbedding):
    @torch.no_grad()
    def forward(self, x, position_ids):  # DeepseekV2RotaryEmbedding.forward: complex64 [1, s, rope / 2]
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        with autocast(enabled=False):  # maybe_autocast(device_type, enabled=False): force float32
            freqs = (inv_freq_expanded.to(x.device) @ position_ids_expanded).transpose(1, 2)
            freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # Convert to complex representation
            freqs_cis = freqs_cis * self.attention_scaling
        return freqs_cis


def deepseek_v2_apply_rotary_emb(xq, xk, freqs_cis):  # modeling_deepseek_v2.apply_rotary_emb
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    # Broadcast to [1, 1, seq_len, dim // 2]
    freqs_cis = freqs_cis.unsqueeze(1).to(xq_.device)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3).type_as(xq)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3).type_as(xk)
    return xq_out, xk_out


class DeepseekV2Attention(DeepseekV3Attention):
    """DeepseekV2Attention: DeepseekV3Attention's projections (q_a_proj, q_a_layernorm, q_b_proj;
    kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj; o_proj; attention_bias false) and forward, with
    apply_rotary_emb on the complex freqs_cis in place of the cos/sin rotary (rotate)."""

    def rotate(self, q_pe, k_pe, position_embeddings):  # DeepseekV2Attention.forward's rotary
        return deepseek_v2_apply_rotary_emb(q_pe, k_pe, position_embeddings.to(q_pe.device))


class DeepseekV2DecoderLayer(LlamaDecoderLayer):
    def __init__(self, cfg, layer_idx):
        GradientCheckpointingLayer.__init__(self)
        self.layer_idx = layer_idx
        self.self_attn = DeepseekV2Attention(cfg, layer_idx)
        self.mlp = DeepseekV2Moe(cfg) if layer_idx >= cfg.first_k_dense_replace else DeepseekV3MLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden, eps=cfg.rms_eps)


class DeepseekV2Model(LlamaModel):  # DeepseekV2Model(LlamaModel): create_causal_mask, one rotary call
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList([DeepseekV2DecoderLayer(cfg, i) for i in range(cfg.layers)])
        self.norm = LlamaRMSNorm(cfg.hidden, eps=cfg.rms_eps)
        self.rotary_emb = DeepseekV2RotaryEmbedding(cfg)  # head_dim = qk_rope_head_dim


class DeepseekV2ForCausalLM(LlamaForCausalLM):
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        self.model = DeepseekV2Model(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.loss_function = ForCausalLMLoss


# --------------------------------------------------------------------------------------------
# Falcon (transformers/models/falcon/modeling_falcon.py, read at commit 00dcc6d; Falcon-7B's
# config): FalconLinear (`input @ self.weight.T`, no bias), one LayerNorm per layer read by the
# attention and the MLP (parallel_attn), multi_query (one K/V head) from one fused
# `query_key_value`, Llama's rotary (alibi off), eager and SDPA in FalconAttention itself, MLP
# dense_h_to_4h -> GELU -> dense_4h_to_h, `mlp_output += attention_output` then dropout_add with
# the residual, tied word embeddings, final ln_f. _update_causal_mask /
# _prepare_4d_causal_attention_mask_with_cache_position build an [s, s] mask for eager; SDPA gets
# None (_ignore_causal_mask_sdpa) and is_causal. With one K/V head and no enable_gqa no fused SDPA
# kernel takes the call (sdp_utils.cpp check_batch_size_and_num_heads_dense), so CUDA runs the
# math path (E15). Falcon-40B/180B's new_decoder_architecture: query_key_value of (heads + 2 *
# num_kv_heads) * head_dim, ln_attn and ln_mlp over the same input (num_ln_in_parallel_attn 2),
# and _split_heads broadcasting K and V to every head (index copies, broadcast_to, flatten copies),
# so SDPA gets equal head counts and runs cuDNN (E6).
# --------------------------------------------------------------------------------------------
class FalconLinear(nn.Linear):
    def forward(self, input):  # FalconLinear.forward
        hidden_states = input @ self.weight.T
        if self.bias is None:
            return hidden_states
        return hidden_states + self.bias


class _SafeSoftmax(torch.autograd.Function):
    """aten _safe_softmax (native/SoftMax.cpp): softmax, then where(all(self == -inf) over dim,
    0, out); derivatives.yaml: _softmax_backward_data(grad, result, dim, self.scalar_type()),
    saving the result."""

    @staticmethod
    def forward(ctx, x, dim):
        out = torch.softmax(x, dim)
        neg_inf = torch.scalar_tensor(-float("inf"), dtype=out.dtype)
        masked = x.eq(neg_inf)
        masked_rows = masked.all(dim, keepdim=True)
        zero = torch.scalar_tensor(0.0, dtype=out.dtype)
        result = torch.where(masked_rows, zero, out)
        ctx.save_for_backward(result)
        ctx.dim = dim
        return result

    @staticmethod
    def backward(ctx, g):
        (result,) = ctx.saved_tensors
        return torch._softmax_backward_data(g, result, ctx.dim, result.dtype), None


def sdpa_math(query_, key, value, is_causal):
    """E15: F.scaled_dot_product_attention(q, k, v, is_causal=True) with fewer K/V heads than Q
    heads and no enable_gqa: torch 2.11 on CUDA runs _scaled_dot_product_attention_math
    (transformers/attention.cpp), a composite: 16-bit inputs upcast to fp32
    (allowFP16BF16ReductionMathSDP off), q and k each scaled by sqrt(scale), the bool causal mask
    (ones(L, S).tril()) made additive (convert_boolean_attn_mask: where(mask, 0, -inf)),
    matmul broadcasting the one K/V head, add_, _safe_softmax, matmul with V, and the output and
    the probabilities cast back (the probabilities' cast is dropped by the caller)."""
    if MODE == "native":
        return F.scaled_dot_product_attention(query_, key, value, attn_mask=None, dropout_p=0.0, is_causal=is_causal)
    if AUTOCAST.enabled:  # a lower-precision autocast op: inputs cast last to first (v, k, q)
        value, key, query_ = (x.to(AUTOCAST.dtype) if x.dtype != AUTOCAST.dtype else x for x in (value, key, query_))
    with _autocast_emulation_off():  # the op runs below autocast (ExcludeDispatchKeyGuard): fp32 inside
        return _sdpa_math(query_, key, value, is_causal)


def _sdpa_math(query_, key, value, is_causal):  # attention.cpp _scaled_dot_product_attention_math
    origin_dtype = query_.dtype
    reduced = (torch.float16, torch.bfloat16)
    query_acc = query_.to(torch.float32) if query_.dtype in reduced else query_
    key_acc = key.to(torch.float32) if key.dtype in reduced else key
    value_acc = value.to(torch.float32) if value.dtype in reduced else value
    scaling_factor = math.sqrt(1.0 / math.sqrt(query_acc.shape[-1]))  # calculate_scale(...).sqrt()
    query = query_acc * scaling_factor
    attn_mask = None
    if is_causal:
        L, S = query.shape[-2], key_acc.shape[-2]
        attn_mask = torch.ones((L, S), dtype=torch.bool).tril()
        neg_inf = torch.scalar_tensor(-float("inf"), dtype=query.dtype)
        with HOOKS.untracked():  # where(Tensor, Scalar, Tensor) wraps the 0.0 into a host tensor on CUDA
            zero = torch.scalar_tensor(0.0, dtype=query.dtype)
        attn_mask = torch.where(attn_mask, zero, neg_inf)  # convert_boolean_attn_mask
    attn = torch.matmul(query, key_acc.transpose(-2, -1) * scaling_factor)
    if attn_mask is not None:
        attn.add_(attn_mask)
    with HOOKS.label("_safe_softmax"):
        attn = _SafeSoftmax.apply(attn, -1)
    # make_tuple(matmul(attn, value).to(origin_dtype), attn.to(origin_dtype)): GCC evaluates the
    # arguments right to left; scaled_dot_product_attention keeps only the first
    probs = attn.to(origin_dtype)
    out = torch.matmul(attn, value_acc).to(origin_dtype)
    del probs
    return out


class FalconAttention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.cfg = cfg
        self.hidden_size = cfg.hidden
        self.num_heads = cfg.heads
        self.head_dim = self.hidden_size // self.num_heads
        self.is_causal = True
        self._use_sdpa = cfg.attn == "sdpa"
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.new_decoder_architecture = cfg.new_decoder_architecture
        if self.new_decoder_architecture:  # grouped K/V heads
            qkv_out_dim = (cfg.kv_heads * 2 + cfg.heads) * self.head_dim
        else:
            assert cfg.kv_heads == 1, "Falcon-7B: multi_query"
            qkv_out_dim = self.hidden_size + 2 * self.head_dim  # multi_query
        self.query_key_value = FalconLinear(self.hidden_size, qkv_out_dim, bias=False)
        self.dense = FalconLinear(self.hidden_size, self.hidden_size, bias=False)
        self.num_kv_heads = cfg.kv_heads if self.new_decoder_architecture else 1

    def _split_heads(self, fused_qkv):  # FalconAttention._split_heads
        if self.new_decoder_architecture:
            batch, seq_len, _ = fused_qkv.shape
            qkv = fused_qkv.view(batch, seq_len, -1, self.num_heads // self.num_kv_heads + 2, self.head_dim)
            query = qkv[:, :, :, :-2]
            key = qkv[:, :, :, [-2]]  # index.Tensor: a copy [b, s, g, 1, d]
            value = qkv[:, :, :, [-1]]
            key = torch.broadcast_to(key, query.shape)
            value = torch.broadcast_to(value, query.shape)
            # flatten of views that cannot merge (g and q): reshape copies, [b, s, heads, d] each
            query, key, value = [x.flatten(2, 3) for x in (query, key, value)]
            return query, key, value
        # the multi_query branch
        batch_size, seq_length, three_times_hidden_size = fused_qkv.shape
        fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads + 2, self.head_dim)
        return fused_qkv[..., :-2, :], fused_qkv[..., [-2], :], fused_qkv[..., [-1], :]

    def _merge_heads(self, x):  # BloomAttention._merge_heads
        batch_size_and_num_heads, seq_length, _ = x.shape
        batch_size = batch_size_and_num_heads // self.num_heads
        x = x.view(batch_size, self.num_heads, seq_length, self.head_dim)
        x = x.permute(0, 2, 1, 3)
        return x.reshape(batch_size, seq_length, self.num_heads * self.head_dim)

    def forward(self, hidden_states, alibi, attention_mask, position_embeddings=None):
        fused_qkv = self.query_key_value(hidden_states)
        num_kv_heads = self.num_heads if self.new_decoder_architecture else self.num_kv_heads
        (query_layer, key_layer, value_layer) = self._split_heads(fused_qkv)
        batch_size, query_length, _, _ = query_layer.shape
        query_layer = query_layer.transpose(1, 2).reshape(batch_size, self.num_heads, query_length, self.head_dim)
        key_layer = key_layer.transpose(1, 2).reshape(batch_size, num_kv_heads, query_length, self.head_dim)
        value_layer = value_layer.transpose(1, 2).reshape(batch_size, num_kv_heads, query_length, self.head_dim)
        cos, sin = position_embeddings  # alibi is None
        query_layer, key_layer = apply_rotary_pos_emb(query_layer, key_layer, cos, sin)
        if attention_mask is not None:
            attention_mask = attention_mask[:, :, :, : key_layer.shape[-2]]
        if self._use_sdpa:
            is_causal = True if self.is_causal and attention_mask is None and query_length > 1 else False
            assert attention_mask is None
            if self.new_decoder_architecture:  # every head in K and V: the fused kernels take it (E6)
                attn_output = scaled_dot_product_attention(query_layer, key_layer, value_layer, is_causal,
                                                           1.0 / math.sqrt(self.head_dim))
            else:
                attn_output = sdpa_math(query_layer, key_layer, value_layer, is_causal)
        else:
            attention_scores = query_layer @ key_layer.transpose(-1, -2)
            attention_scores /= math.sqrt(self.head_dim)
            attention_scores = softmax(attention_scores + attention_mask, dim=-1, dtype=hidden_states.dtype)
            attn_output = attention_scores @ value_layer
        attn_output = attn_output.view(batch_size, self.num_heads, query_length, self.head_dim)
        attn_output = attn_output.permute(0, 2, 1, 3)
        attn_output = attn_output.reshape(batch_size, query_length, self.num_heads * self.head_dim)
        attn_output = self.dense(attn_output)
        return attn_output, None


class FalconGELU(nn.Module):  # get_activation("gelu"): activations.GELUActivation, nn.functional.gelu
    def forward(self, x):
        return F.gelu(x)


class FalconMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense_h_to_4h = FalconLinear(cfg.hidden, cfg.intermediate, bias=False)
        self.act = FalconGELU()
        self.dense_4h_to_h = FalconLinear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x):  # FalconMLP.forward
        x = self.act(self.dense_h_to_4h(x))
        x = self.dense_4h_to_h(x)
        return x


def dropout_add(x, residual, prob, training):  # modeling_bloom.dropout_add
    out = dropout(x, prob, training)
    out = residual + out
    return out


class FalconDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.self_attention = FalconAttention(cfg, layer_idx)
        self.mlp = FalconMLP(cfg)
        self.hidden_dropout = cfg.dropout
        self.new_decoder_architecture = cfg.new_decoder_architecture
        if self.new_decoder_architecture:  # num_ln_in_parallel_attn 2: ln_attn and ln_mlp
            self.ln_attn = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
            self.ln_mlp = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        else:
            self.input_layernorm = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)  # parallel_attn, one norm

    def forward(self, hidden_states, alibi=None, attention_mask=None, position_ids=None, position_embeddings=None):
        residual = hidden_states
        if self.new_decoder_architecture:
            attention_layernorm_out = self.ln_attn(hidden_states)
            mlp_layernorm_out = self.ln_mlp(hidden_states)
        else:
            attention_layernorm_out = self.input_layernorm(hidden_states)
        attn_outputs = self.self_attention(attention_layernorm_out, alibi=alibi, attention_mask=attention_mask,
                                           position_embeddings=position_embeddings)
        attention_output = attn_outputs[0]
        if not self.new_decoder_architecture:
            mlp_layernorm_out = attention_layernorm_out  # parallel_attn
        mlp_output = self.mlp(mlp_layernorm_out)
        mlp_output += attention_output
        output = dropout_add(mlp_output, residual, self.hidden_dropout, training=self.training)
        return (output,)  # use_cache False: (output,) + outputs[1:]


class FalconModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.hidden)
        self.h = nn.ModuleList([FalconDecoderLayer(cfg, i) for i in range(cfg.layers)])
        self.ln_f = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        self.rotary_emb = LlamaRotaryEmbedding(cfg)  # FalconRotaryEmbedding: Llama's, copied

    def causal_mask(self, input_tensor, cache_position):  # FalconModel._update_causal_mask
        if self.cfg.attn == "sdpa":
            return None  # AttentionMaskConverter._ignore_causal_mask_sdpa: no mask, no cache
        dtype = input_tensor.dtype
        min_dtype = torch.finfo(dtype).min
        batch_size, sequence_length, _ = input_tensor.shape
        target_length = sequence_length
        # _prepare_4d_causal_attention_mask_with_cache_position, attention_mask None
        causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype)
        if sequence_length != 1:
            causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask *= torch.arange(target_length) > cache_position.reshape(-1, 1)
        causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
        return causal_mask

    def forward(self, input_ids):  # FalconModel.forward
        inputs_embeds = self.word_embeddings(input_ids)
        batch_size, seq_length, _ = inputs_embeds.shape
        cache_position = torch.arange(0, seq_length, device=inputs_embeds.device)
        position_ids = cache_position.unsqueeze(0)
        causal_mask = self.causal_mask(inputs_embeds, cache_position)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for block in self.h:
            outputs = block(hidden_states, attention_mask=causal_mask, position_ids=position_ids, alibi=None,
                            position_embeddings=position_embeddings)
            hidden_states = outputs[0]
        hidden_states = self.ln_f(hidden_states)
        return hidden_states


class FalconForCausalLM(GPT2LMHeadModel):
    """modeling_falcon.py FalconForCausalLM: GPT-2's head over FalconModel."""
    body = FalconModel
    embeddings = "word_embeddings"


# --------------------------------------------------------------------------------------------
# BERT (transformers/models/bert/modeling_bert.py, transformers 5) as BertForSequenceClassification:
# BertEmbeddings (word + token type + absolute position embeddings, LayerNorm, dropout; the
# position ids a slice of the position_ids buffer), post-LN BertLayer = BertAttention
# (BertSelfAttention: query, key and value nn.Linear with biases, eager_attention_forward or
# sdpa_attention_forward, not causal; BertSelfOutput: dense, dropout, LayerNorm(x + input)),
# BertIntermediate (dense, GELUActivation: F.gelu) and BertOutput (dense, dropout,
# LayerNorm(x + input)); BertPooler (dense over hidden_states[:, 0], tanh); the classifier
# (dropout, nn.Linear(hidden, num_labels)) and loss_utils.ForSequenceClassificationLoss
# (single_label_classification: cross_entropy of the [b, num_labels] logits). The mask is
# masking_utils.create_bidirectional_mask: None for SDPA without padding
# (_ignore_bidirectional_mask_sdpa), eager_mask's [b, 1, s, s] torch.where for eager.
# --------------------------------------------------------------------------------------------
def create_bidirectional_mask(cfg, inputs_embeds):
    """masking_utils.create_bidirectional_mask without padding: sdpa returns None, eager builds
    sdpa_mask's bool [b,1,s,s] (bidirectional_mask_function over _non_vmap_expansion_sdpa's
    broadcast, expanded) and eager_mask's torch.where into the embeddings' dtype."""
    if cfg.attn == "sdpa":
        return None
    batch_size, q_length = inputs_embeds.shape[0], inputs_embeds.shape[1]
    kv_length = q_length
    dtype, device = inputs_embeds.dtype, inputs_embeds.device
    q_arange = torch.arange(q_length, device=device) + 0
    kv_arange = torch.arange(kv_length, device=device) + 0
    mask = (q_arange[None, None, :, None] >= 0) & (kv_arange[None, None, None, :] >= 0)
    mask = mask.expand(batch_size, -1, q_length, kv_length)
    del q_arange, kv_arange
    min_dtype = torch.finfo(dtype).min
    return torch.where(mask, torch.tensor(0.0, device=device, dtype=dtype), min_dtype)


class GELUActivation(nn.Module):  # activations.GELUActivation ("gelu"): nn.functional.gelu
    def forward(self, input):
        return F.gelu(input)


class BertEmbeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.hidden)
        self.position_embeddings = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden)
        self.LayerNorm = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        self.dropout = Dropout(cfg.dropout)
        self.register_buffer("position_ids", torch.arange(cfg.max_positions).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros((1, cfg.max_positions), dtype=torch.long),
                             persistent=False)

    def forward(self, input_ids, token_type_ids=None):  # BertEmbeddings.forward
        input_shape = input_ids.size()
        seq_length = input_shape[1]
        position_ids = self.position_ids[:, 0:seq_length]
        if token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :seq_length].expand(input_shape[0], seq_length)
        inputs_embeds = self.word_embeddings(input_ids)
        token_type_embeddings = self.token_type_embeddings(token_type_ids)
        embeddings = inputs_embeds + token_type_embeddings
        position_embeddings = self.position_embeddings(position_ids)
        embeddings += position_embeddings  # position_embedding_type "absolute"
        embeddings = self.LayerNorm(embeddings)
        embeddings = self.dropout(embeddings)
        return embeddings


def bert_eager_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0):
    """modeling_bert.eager_attention_forward: softmax without a dtype, dropout, no .to()."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
        attn_weights = attn_weights + attention_mask
    attn_weights = softmax(attn_weights, dim=-1)
    attn_weights = dropout_fn(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


class BertSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.num_attention_heads = cfg.heads
        self.attention_head_size = cfg.hidden // cfg.heads
        self.all_head_size = cfg.heads * self.attention_head_size
        self.scaling = self.attention_head_size ** -0.5
        self.query = nn.Linear(cfg.hidden, self.all_head_size)
        self.key = nn.Linear(cfg.hidden, self.all_head_size)
        self.value = nn.Linear(cfg.hidden, self.all_head_size)
        self.dropout = Dropout(cfg.dropout)  # attention_probs_dropout_prob
        self.is_causal = False

    def forward(self, hidden_states, attention_mask=None):  # BertSelfAttention.forward
        return self.attend(hidden_states, attention_mask, self.query, self.key, self.value)

    def attend(self, hidden_states, attention_mask, query, key, value, out=None):
        # DistilBERT's MultiHeadSelfAttention applies `out` in the same function, while q, k and v
        # are still held
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.attention_head_size)
        query_layer = query(hidden_states).view(*hidden_shape).transpose(1, 2)
        key_layer = key(hidden_states).view(*hidden_shape).transpose(1, 2)
        value_layer = value(hidden_states).view(*hidden_shape).transpose(1, 2)
        p = self.dropout.p if self.training else 0.0
        if self.cfg.attn == "sdpa":
            attn_output, attn_weights = sdpa_attention_forward(self, query_layer, key_layer, value_layer,
                                                               attention_mask, dropout=p, scaling=self.scaling)
        else:
            attn_output, attn_weights = bert_eager_attention_forward(self, query_layer, key_layer, value_layer,
                                                                     attention_mask, dropout=p, scaling=self.scaling)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        if out is not None:
            attn_output = out(attn_output)
        return attn_output, attn_weights


class BertSelfOutput(nn.Module):  # and BertOutput, the same over intermediate_size inputs
    def __init__(self, cfg, in_features):
        super().__init__()
        self.dense = nn.Linear(in_features, cfg.hidden)
        self.LayerNorm = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        self.dropout = Dropout(cfg.dropout)  # hidden_dropout_prob

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states


class BertAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self = BertSelfAttention(cfg)
        self.output = BertSelfOutput(cfg, cfg.hidden)

    def forward(self, hidden_states, attention_mask=None):
        attention_output, attn_weights = self.self(hidden_states, attention_mask=attention_mask)
        attention_output = self.output(attention_output, hidden_states)
        return attention_output, attn_weights


class BertIntermediate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden, cfg.intermediate)
        self.intermediate_act_fn = GELUActivation()

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertLayer(GradientCheckpointingLayer):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = BertIntermediate(cfg)
        self.output = BertSelfOutput(cfg, cfg.intermediate)  # BertOutput

    def forward(self, hidden_states, attention_mask=None):  # BertLayer.forward, chunk_size_feed_forward 0
        attention_output, _ = self.attention(hidden_states, attention_mask=attention_mask)
        intermediate_output = self.intermediate(attention_output)  # feed_forward_chunk
        layer_output = self.output(intermediate_output, attention_output)
        return layer_output


class BertPooler(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden, cfg.hidden)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        first_token_tensor = first_token(hidden_states)  # hidden_states[:, 0]
        pooled_output = self.dense(first_token_tensor)
        return self.activation(pooled_output)


class BertModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.layer = nn.ModuleList([BertLayer(cfg, i) for i in range(cfg.layers)])  # BertEncoder.layer
        self.pooler = BertPooler(cfg)

    def forward(self, input_ids, token_type_ids=None):  # BertModel.forward
        embedding_output = self.embeddings(input_ids, token_type_ids=token_type_ids)
        attention_mask = create_bidirectional_mask(self.cfg, embedding_output)
        hidden_states = embedding_output
        for layer_module in self.layer:  # BertEncoder.forward
            hidden_states = layer_module(hidden_states, attention_mask)
        sequence_output = hidden_states
        pooled_output = self.pooler(sequence_output)
        return sequence_output, pooled_output


def ForSequenceClassificationLoss(labels, pooled_logits, config):
    """loss/loss_utils.py, problem_type single_label_classification: fixed_cross_entropy of the
    [b, num_labels] logits, reduction "mean" without num_items_in_batch."""
    labels = labels.to(pooled_logits.device)
    return F.cross_entropy(pooled_logits.view(-1, config.num_labels), labels.view(-1), ignore_index=-100,
                           reduction="mean")


class BertForSequenceClassification(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.bert = BertModel(cfg)
        self.dropout = Dropout(cfg.dropout)  # classifier_dropout None: hidden_dropout_prob
        self.classifier = nn.Linear(cfg.hidden, cfg.num_labels)
        self.loss_function = ForSequenceClassificationLoss

    def get_input_embeddings(self):
        return self.bert.embeddings.word_embeddings

    def head_regions(self):  # no final norm (post-LN) and no lm_head
        return {self.bert.pooler: "pooler", self.classifier: "head"}

    def decoder_layers(self):
        return self.bert.layer

    def forward(self, input_ids, token_type_ids=None, labels=None):
        _, pooled_output = self.bert(input_ids, token_type_ids=token_type_ids)
        pooled_output = self.dropout(pooled_output)
        logits = self.classifier(pooled_output)
        loss = None
        if labels is not None:
            loss = self.loss_function(labels, logits, self.cfg)
        return loss, logits


# --------------------------------------------------------------------------------------------
# DistilBERT (transformers/models/distilbert/modeling_distilbert.py, transformers 5, where the
# attention went to the attention interface as BERT's did) as DistilBertForSequenceClassification:
# Embeddings (word + position embeddings, LayerNorm, dropout; no token types), post-LN
# TransformerBlock = DistilBertSelfAttention (q_lin, k_lin, v_lin, BERT's eager_attention_forward
# or sdpa_attention_forward, out_lin inside the attention, no dropout after it), sa_layer_norm of
# the sum with the input, FFN (lin1, GELU, lin2, dropout) and output_layer_norm; the head is
# pre_classifier over hidden_state[:, 0], ReLU, dropout (seq_classif_dropout) and classifier, with
# ForSequenceClassificationLoss. The mask is create_bidirectional_mask's, as BERT's.
# --------------------------------------------------------------------------------------------
class DistilBertEmbeddings(nn.Module):  # Embeddings
    def __init__(self, cfg):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.hidden)
        self.position_embeddings = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.LayerNorm = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.dropout = Dropout(cfg.dropout)
        self.register_buffer("position_ids", torch.arange(cfg.max_positions).expand((1, -1)), persistent=False)

    def forward(self, input_ids):  # Embeddings.forward
        input_embeds = self.word_embeddings(input_ids)
        seq_length = input_embeds.size(1)
        position_ids = self.position_ids[:, :seq_length]
        position_embeddings = self.position_embeddings(position_ids)
        embeddings = input_embeds + position_embeddings
        embeddings = self.LayerNorm(embeddings)
        embeddings = self.dropout(embeddings)
        return embeddings


class DistilBertSelfAttention(BertSelfAttention):  # query/key/value named q_lin/k_lin/v_lin, out_lin inside
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        self.n_heads = cfg.heads
        self.attention_head_size = cfg.hidden // cfg.heads
        self.scaling = self.attention_head_size ** -0.5
        self.dropout = Dropout(cfg.dropout)  # attention_dropout
        self.is_causal = False
        self.q_lin = nn.Linear(cfg.hidden, cfg.hidden)
        self.k_lin = nn.Linear(cfg.hidden, cfg.hidden)
        self.v_lin = nn.Linear(cfg.hidden, cfg.hidden)
        self.out_lin = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, hidden_states, attention_mask=None):  # MultiHeadSelfAttention.forward
        return self.attend(hidden_states, attention_mask, self.q_lin, self.k_lin, self.v_lin, out=self.out_lin)


class DistilBertFFN(nn.Module):  # FFN, chunk_size_feed_forward 0
    def __init__(self, cfg):
        super().__init__()
        self.dropout = Dropout(cfg.dropout)
        self.lin1 = nn.Linear(cfg.hidden, cfg.intermediate)
        self.lin2 = nn.Linear(cfg.intermediate, cfg.hidden)
        self.activation = GELUActivation()  # get_activation(config.activation), "gelu"

    def forward(self, input):  # FFN.ff_chunk
        x = self.lin1(input)
        x = self.activation(x)
        x = self.lin2(x)
        x = self.dropout(x)
        return x


class DistilBertTransformerBlock(GradientCheckpointingLayer):  # TransformerBlock
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.attention = DistilBertSelfAttention(cfg)
        self.sa_layer_norm = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.ffn = DistilBertFFN(cfg)
        self.output_layer_norm = nn.LayerNorm(cfg.hidden, eps=1e-12)

    def forward(self, hidden_states, attention_mask=None):  # TransformerBlock.forward
        attention_output, _ = self.attention(hidden_states, attention_mask=attention_mask)
        attention_output = self.sa_layer_norm(attention_output + hidden_states)
        ffn_output = self.ffn(attention_output)
        ffn_output = self.output_layer_norm(ffn_output + attention_output)
        return ffn_output


class DistilBertModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embeddings = DistilBertEmbeddings(cfg)
        self.layer = nn.ModuleList([DistilBertTransformerBlock(cfg, i) for i in range(cfg.layers)])  # Transformer

    def forward(self, input_ids):  # DistilBertModel.forward, then Transformer.forward
        embeddings = self.embeddings(input_ids)
        attention_mask = create_bidirectional_mask(self.cfg, embeddings)
        hidden_state = embeddings
        for layer_module in self.layer:
            hidden_state = layer_module(hidden_state, attention_mask)
        return hidden_state


class DistilBertForSequenceClassification(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.distilbert = DistilBertModel(cfg)
        self.pre_classifier = nn.Linear(cfg.hidden, cfg.hidden)
        self.classifier = nn.Linear(cfg.hidden, cfg.num_labels)
        self.dropout = Dropout(0.2 if cfg.dropout else 0.0)  # seq_classif_dropout
        self.loss_function = ForSequenceClassificationLoss

    def get_input_embeddings(self):
        return self.distilbert.embeddings.word_embeddings

    def head_regions(self):
        return {self.pre_classifier: "pooler", self.classifier: "head"}

    def decoder_layers(self):
        return self.distilbert.layer

    def forward(self, input_ids, labels=None):  # DistilBertForSequenceClassification.forward
        hidden_state = self.distilbert(input_ids)  # distilbert_output[0]
        pooled_output = first_token(hidden_state)  # hidden_state[:, 0]
        pooled_output = self.pre_classifier(pooled_output)
        pooled_output = nn.ReLU()(pooled_output)
        pooled_output = self.dropout(pooled_output)
        logits = self.classifier(pooled_output)
        loss = None
        if labels is not None:
            loss = self.loss_function(labels, logits, self.cfg)
        return loss, logits


# --------------------------------------------------------------------------------------------
# ViT (torchvision/models/vision_transformer.py, torchvision 0.26; torch/nn/modules/activation.py
# MultiheadAttention and torch/nn/functional.py multi_head_attention_forward, torch 2.11):
# VisionTransformer._process_input (conv_proj with stride patch_size, reshape, permute), the class
# token (expand and torch.cat), Encoder (+ pos_embedding, dropout, the EncoderBlocks, ln), pre-LN
# EncoderBlock (ln_1, MultiheadAttention(batch_first=True) with need_weights=False, dropout,
# residual, ln_2, MLPBlock = torchvision.ops.MLP: Linear, GELU, Dropout, Linear, Dropout; the
# LayerNorms with eps 1e-6), heads.head over x[:, 0], and references/classification/train.py's
# nn.CrossEntropyLoss. Training takes MultiheadAttention's slow path (why_not_fast_path:
# "training is enabled"): the packed in_proj through _in_projection_packed, then
# scaled_dot_product_attention (E6: cuDNN for 16-bit inputs; no fp32 case here), out_proj.
# --------------------------------------------------------------------------------------------
def _in_projection_packed(q, w, b):  # nn/functional.py _in_projection_packed, self-attention (q is k is v)
    E = q.size(-1)
    proj = F.linear(q, w, b)
    # reshape to 3, E and not E, 3 is deliberate for better memory coalescing and keeping same order as chunk()
    proj = proj.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
    return proj[0], proj[1], proj[2]


def multi_head_attention_forward(query, num_heads, in_proj_weight, in_proj_bias, dropout_p, out_proj_weight,
                                 out_proj_bias, training):
    """nn/functional.py multi_head_attention_forward for self-attention without masks, bias_k,
    bias_v or add_zero_attn, need_weights=False: the SDPA branch."""
    tgt_len, bsz, embed_dim = query.shape
    head_dim = embed_dim // num_heads
    q, k, v = _in_projection_packed(query, in_proj_weight, in_proj_bias)
    q = q.view(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    k = k.view(k.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    v = v.view(v.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    src_len = k.size(1)
    if not training:
        dropout_p = 0.0
    assert dropout_p == 0.0, "the cuDNN emulation has no dropout"
    q = q.view(bsz, num_heads, tgt_len, head_dim)
    k = k.view(bsz, num_heads, src_len, head_dim)
    v = v.view(bsz, num_heads, src_len, head_dim)
    attn_output = scaled_dot_product_attention(q, k, v, False, head_dim ** -0.5)
    attn_output = attn_output.permute(2, 0, 1, 3).contiguous().view(bsz * tgt_len, embed_dim)
    attn_output = F.linear(attn_output, out_proj_weight, out_proj_bias)
    attn_output = attn_output.view(tgt_len, bsz, attn_output.size(1))
    return attn_output, None


class MultiheadAttention(nn.Module):  # nn.MultiheadAttention, _qkv_same_embed_dim, bias, batch_first
    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.in_proj_weight = nn.Parameter(torch.empty((3 * embed_dim, embed_dim)))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed_dim))
        self.out_proj = nn.Linear(embed_dim, embed_dim)  # NonDynamicallyQuantizableLinear
        nn.init.xavier_uniform_(self.in_proj_weight)  # _reset_parameters

    def forward(self, query, key, value, need_weights=True):
        assert query is key is value and not need_weights
        query = key = value = query.transpose(1, 0)  # batch_first: the "is" property kept
        attn_output, attn_output_weights = multi_head_attention_forward(
            query, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.dropout, self.out_proj.weight,
            self.out_proj.bias, training=self.training)
        return attn_output.transpose(1, 0), attn_output_weights


class MLPBlock(nn.Sequential):  # torchvision.ops.MLP(in_dim, [mlp_dim, in_dim], activation_layer=nn.GELU)
    def __init__(self, in_dim, mlp_dim, dropout):
        super().__init__(nn.Linear(in_dim, mlp_dim), nn.GELU(), Dropout(dropout), nn.Linear(mlp_dim, in_dim),
                         Dropout(dropout))


class ViTEncoderBlock(GradientCheckpointingLayer):  # EncoderBlock
    def __init__(self, cfg, layer_idx):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden, eps=1e-6)
        self.self_attention = MultiheadAttention(cfg.hidden, cfg.heads, dropout=0.0)  # attention_dropout
        self.dropout = Dropout(cfg.dropout)
        self.ln_2 = nn.LayerNorm(cfg.hidden, eps=1e-6)
        self.mlp = MLPBlock(cfg.hidden, cfg.intermediate, cfg.dropout)

    def forward(self, input):  # EncoderBlock.forward
        x = self.ln_1(input)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x)
        x = x + input
        y = self.ln_2(x)
        y = self.mlp(y)
        return x + y


class ViTEncoder(nn.Module):  # Encoder
    def __init__(self, cfg):
        super().__init__()
        seq_length = (cfg.image_size // cfg.patch_size) ** 2 + 1
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, cfg.hidden).normal_(std=0.02))
        self.dropout = Dropout(cfg.dropout)
        self.layers = nn.ModuleList([ViTEncoderBlock(cfg, i) for i in range(cfg.layers)])  # nn.Sequential
        self.ln = nn.LayerNorm(cfg.hidden, eps=1e-6)

    def forward(self, input):  # Encoder.forward: self.ln(self.layers(self.dropout(input)))
        input = input + self.pos_embedding
        x = self.dropout(input)
        for module in self.layers:  # nn.Sequential.forward
            x = module(x)
        return self.ln(x)


def image_classification_loss(labels, logits, config):  # references/classification/train.py criterion
    return F.cross_entropy(logits, labels)  # nn.CrossEntropyLoss(label_smoothing=0.0)


class VisionTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.patch_size = cfg.patch_size
        self.hidden_dim = cfg.hidden
        self.conv_proj = nn.Conv2d(cfg.channels, cfg.hidden, kernel_size=cfg.patch_size, stride=cfg.patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, cfg.hidden))
        self.encoder = ViTEncoder(cfg)
        self.heads = nn.ModuleDict({"head": nn.Linear(cfg.hidden, cfg.num_labels)})  # nn.Sequential(OrderedDict)
        self.loss_function = image_classification_loss

    def get_input_embeddings(self):
        return self.conv_proj

    def head_regions(self):
        return {self.encoder.ln: "norm", self.heads["head"]: "head"}

    def decoder_layers(self):
        return self.encoder.layers

    def _process_input(self, x):  # VisionTransformer._process_input
        n, c, h, w = x.shape
        p = self.patch_size
        n_h, n_w = h // p, w // p
        x = self.conv_proj(x)
        x = x.reshape(n, self.hidden_dim, n_h * n_w)
        x = x.permute(0, 2, 1)
        return x

    def forward(self, images, labels=None):  # VisionTransformer.forward, then the criterion
        x = self._process_input(images)
        n = x.shape[0]
        batch_class_token = self.class_token.expand(n, -1, -1)
        x = torch.cat([batch_class_token, x], dim=1)
        x = self.encoder(x)
        x = first_token(x)  # x[:, 0]
        logits = self.heads["head"](x)
        loss = None
        if labels is not None:
            loss = self.loss_function(labels, logits, self.cfg)
        return loss, logits


def build_model(cfg):
    if cfg.code == "torchtitan":  # torchtitan's current Llama 3, Qwen3 (dense or MoE) and DeepSeek-V2/V3
        assert cfg.family in ("llama", "deepseek_v3", "deepseek_v2") or (cfg.family == "qwen3_moe" and cfg.qk_norm), cfg.family
        return MODEL_CODES[cfg.code](cfg)
    if cfg.code == "megatron-te" and cfg.moe_experts:  # E21: Megatron-Core's MoE layer in every layer
        assert cfg.family == "mixtral" or (cfg.family == "qwen3_moe" and cfg.qk_norm), cfg.family
        return MODEL_CODES[cfg.code](cfg)
    if cfg.code != "hf":
        assert cfg.family == "llama", "the model codes are modelled for a dense Llama 3"
        return MODEL_CODES[cfg.code](cfg)
    assert (cfg.family in ("mixtral", "qwen3_moe", "gpt_oss", "deepseek_v3", "deepseek_v2")) == \
        (cfg.moe_experts > 0), "a sparse MoE block is Mixtral's, Qwen3-MoE's, gpt-oss's or DeepSeek-V3's or V2's"
    assert cfg.family != "qwen3_moe" or cfg.qk_norm, "Qwen3-MoE's attention has q_norm and k_norm"
    return {"llama": LlamaForCausalLM, "qwen2": LlamaForCausalLM, "mistral": LlamaForCausalLM,
            "deepseek_v2": DeepseekV2ForCausalLM, "gpt2": GPT2LMHeadModel, "gemma2": Gemma2ForCausalLM,
            "gemma3": Gemma3ForCausalLM, "phi3": Phi3ForCausalLM, "mixtral": LlamaForCausalLM,
            "qwen3_moe": LlamaForCausalLM, "gpt_oss": GptOssForCausalLM,
            "deepseek_v3": DeepseekV3ForCausalLM, "falcon": FalconForCausalLM,
            "bert": BertForSequenceClassification,
            "distilbert": DistilBertForSequenceClassification, "vit": VisionTransformer}[cfg.family](cfg)


# --------------------------------------------------------------------------------------------
# LoRA (peft/tuners/lora/layer.py, Linear.forward), adapters in fp32 as peft's
# autocast_adapter_dtype=True leaves them for a 16-bit base model
# --------------------------------------------------------------------------------------------
class LoraLinear(nn.Module):
    def __init__(self, base_layer, r, alpha, adapter_dtype=torch.float32):
        super().__init__()
        self.base_layer = base_layer
        # peft's Linear over GPT-2's Conv1D (fan_in_fan_out): weight [in, out]
        conv1d = isinstance(base_layer, Conv1D)
        in_features = base_layer.weight.shape[0] if conv1d else base_layer.in_features
        out_features = base_layer.nf if conv1d else base_layer.out_features
        self.lora_A = nn.ModuleDict({"default": nn.Linear(in_features, r, bias=False).to(adapter_dtype)})
        self.lora_B = nn.ModuleDict({"default": nn.Linear(r, out_features, bias=False).to(adapter_dtype)})
        nn.init.zeros_(self.lora_B["default"].weight)
        self.lora_dropout = nn.ModuleDict({"default": nn.Identity()})  # lora_dropout = 0.0
        self.scaling = {"default": alpha / r}
        self.active_adapters = ["default"]

    def _cast_input_dtype(self, x, dtype):  # tuners_utils.BaseTunerLayer._cast_input_dtype
        if x is None or x.dtype == dtype:
            return x
        return x.to(dtype=dtype)

    def forward(self, x):
        result = self.base_layer(x)
        torch_result_dtype = result.dtype
        for active_adapter in self.active_adapters:
            lora_A = self.lora_A[active_adapter]
            lora_B = self.lora_B[active_adapter]
            dropout_m = self.lora_dropout[active_adapter]
            scaling = self.scaling[active_adapter]
            x = self._cast_input_dtype(x, lora_A.weight.dtype)
            result = result + lora_B(lora_A(dropout_m(x))) * scaling
        result = result.to(torch_result_dtype)
        return result


# --------------------------------------------------------------------------------------------
# QLoRA (E16): bitsandbytes' Linear4bit, NF4 with double quantization (bitsandbytes 0.50.1
# nn/modules.py Params4bit, functional.py quantize_4bit), under peft's lora.bnb.Linear4bit (peft
# 0.21, tuners/lora/bnb.py). What is kept on the device per weight: the packed payload (a frozen
# uint8 [(n + 1) // 2, 1] Params4bit) and its QuantState: the 8-bit absmax of each 64 values, the
# NF4 code (get_4bit_type: 16 fp32 values, one tensor per weight), the absmax's mean (offset, a
# 0-dim fp32 tensor), state2's fp32 absmax of each 256 absmax values and state2's code, a copy of
# quantize_blockwise's "dynamic" map (256 fp32 values: code.to(A.device, copy=True), since 0.46).
# The values: a host copy of the bf16 weight stands in for the dequantized NF4 (untracked).
# --------------------------------------------------------------------------------------------
NF4_BLOCK, NESTED_BLOCK = 64, 256


def _dequantize_blockwise(layer):
    """functional.dequantize_blockwise(quant_state.absmax, quant_state.state2): an fp32 absmax
    of each 64 values (torch.empty_like(A, dtype=float32), then the kernel)."""
    with HOOKS.label("dequantize_blockwise"):
        return torch.empty(layer.absmax.shape, dtype=torch.float32, device=layer.absmax.device)


def _dequantized_weight(layer, dtype):
    """The dequantize_4bit kernel's output [out, in] in the compute format."""
    return kernel_output("dequantize_4bit", layer.shape, dtype, lambda: layer.reference)


class _MatMul4Bit(torch.autograd.Function):
    """autograd/_functions.py MatMul4Bit at the sizes training runs: gemm_4bit takes
    _dequant_linear_fallback (backends/cuda/ops.py) above 1,536 rows, and above 512 for a weight
    of 4M values or more (_gemm_4bit_use_custom_cuda); bitsandbytes 0.49 and earlier always
    dequantized (F.dequantize_4bit, then F.linear). Saved: the packed weight only
    (ctx.tensors = (None, B)); backward dequantizes it again for the input's gradient."""

    @staticmethod
    def forward(ctx, A, B, layer):
        absmax_dq = _dequantize_blockwise(layer)  # _dequant_linear_fallback: absmax_dq
        absmax = absmax_dq + layer.offset  # absmax = absmax_dq + absmax_offset (a new tensor)
        w = _dequantized_weight(layer, A.dtype)  # B_dq = torch.empty(shapeB, dtype=A.dtype)
        out = torch.nn.functional.linear(A, w)
        del absmax_dq, absmax, w
        ctx.layer = layer
        ctx.save_for_backward(B)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (_B,) = ctx.saved_tensors
        layer = ctx.layer
        grad_A = None
        if ctx.needs_input_grad[0]:
            # grad_A = torch.matmul(grad_output, F.dequantize_4bit(B, ctx.state).to(grad_output.dtype)):
            # dequantize_4bit makes the fp32 absmax (then absmax += offset, in place) and its
            # output, and returns; the absmax goes before the matmul.
            absmax = _dequantize_blockwise(layer)
            absmax.add_(layer.offset)
            w = _dequantized_weight(layer, grad_output.dtype)
            del absmax
            grad_A = torch.matmul(grad_output, w)
            del w
        return grad_A, None, None


class Linear4bit(nn.Module):
    """nn/modules.py Linear4bit (no bias: Llama's), compute_dtype bf16: x.to(compute_dtype) and
    the output's .to(inp_dtype) are no-ops for a bf16 model."""

    def __init__(self, linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.shape = tuple(linear.weight.shape)
        n = linear.weight.numel()
        blocks = -(-n // NF4_BLOCK)
        device = linear.weight.device
        self.weight = nn.Parameter(torch.zeros(((n + 1) // 2, 1), dtype=torch.uint8, device=device),
                                   requires_grad=False)
        self.register_buffer("absmax", torch.zeros(blocks, dtype=torch.uint8, device=device), persistent=False)
        self.register_buffer("code", torch.zeros(16, dtype=torch.float32, device=device), persistent=False)
        self.register_buffer("offset", torch.zeros((), dtype=torch.float32, device=device), persistent=False)
        self.register_buffer("state2_absmax", torch.ones(-(-blocks // NESTED_BLOCK), dtype=torch.float32,
                                                         device=device), persistent=False)
        self.register_buffer("state2_code", torch.zeros(256, dtype=torch.float32, device=device), persistent=False)
        self.reference = linear.weight.detach().to(torch.bfloat16)  # host stand-in, untracked

    def forward(self, x):
        return _MatMul4Bit.apply(x, self.weight, self)


class LoraLinear4bit(LoraLinear):
    """peft tuners/lora/bnb.py Linear4bit.forward: the base output cloned ("defensively"), the
    adapters' output cast to the result's format before the add (no autocast)."""

    def forward(self, x):
        result = self.base_layer(x)
        result = result.clone()
        for active_adapter in self.active_adapters:
            lora_A = self.lora_A[active_adapter]
            lora_B = self.lora_B[active_adapter]
            expected_dtype = result.dtype
            x = self._cast_input_dtype(x, lora_A.weight.dtype)
            output = lora_B(lora_A(self.lora_dropout[active_adapter](x))) * self.scaling[active_adapter]
            output = output.to(expected_dtype)
            result = result + output
        return result


def apply_qlora(model, targets, r, alpha, adapter_dtype=torch.float32):
    """transformers' bitsandbytes quantizer replaces every nn.Linear but the head (lm_head, by
    get_keys_to_not_convert) with Linear4bit; peft wraps the targets."""
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.decoder_layers():
        for name, mod in list(layer.named_modules()):
            for child_name, child in list(mod.named_children()):
                if isinstance(child, nn.Linear):
                    base = Linear4bit(child)
                    setattr(mod, child_name, LoraLinear4bit(base, r, alpha, adapter_dtype)
                            if child_name in targets else base)


def apply_lora(model, targets, r, alpha, adapter_dtype=torch.float32):
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.decoder_layers():
        for name, mod in list(layer.named_modules()):
            for child_name, child in list(mod.named_children()):
                if child_name in targets and isinstance(child, (nn.Linear, Conv1D)):
                    setattr(mod, child_name, LoraLinear(child, r, alpha, adapter_dtype))


# --------------------------------------------------------------------------------------------
# Gradient checkpointing (torch/utils/checkpoint.py, torch 2.11), E9: torch 1.13's non-reentrant
# checkpoint recomputes the whole layer (no early stop) and keeps what it recomputed differently;
# the autocast state of the emulation is captured and restored the way the real code captures
# torch.amp's. RNG states are host tensors (untracked).
# --------------------------------------------------------------------------------------------
def _detach_variable(inputs):
    out = []
    for inp in inputs:
        if not isinstance(inp, torch.Tensor):
            out.append(inp)
            continue
        x = inp.detach()
        x.requires_grad = inp.requires_grad
        out.append(x)
    return tuple(out)


class CheckpointFunction(torch.autograd.Function):
    """use_reentrant=True."""

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        ctx.run_function = run_function
        ctx.preserve_rng_state = preserve_rng_state
        ctx.autocast = autocast_state()
        if preserve_rng_state:
            with HOOKS.untracked():
                ctx.fwd_cpu_state = torch.get_rng_state()  # a host tensor (CUDA's RNG state too)
        ctx.inputs = []
        ctx.tensor_indices = []
        tensor_inputs = []
        for i, arg in enumerate(args):
            if torch.is_tensor(arg):
                tensor_inputs.append(arg)
                ctx.tensor_indices.append(i)
                ctx.inputs.append(None)
            else:
                ctx.inputs.append(arg)
        ctx.save_for_backward(*tensor_inputs)
        with torch.no_grad():
            outputs = run_function(*args)
        return outputs

    @staticmethod
    def backward(ctx, *args):
        inputs = list(ctx.inputs)
        tensor_indices = ctx.tensor_indices
        tensors = ctx.saved_tensors
        for i, idx in enumerate(tensor_indices):
            inputs[idx] = tensors[i]
        with HOOKS.untracked():
            saved_rng = torch.get_rng_state()
            if ctx.preserve_rng_state:
                torch.set_rng_state(ctx.fwd_cpu_state)
        try:
            detached_inputs = _detach_variable(tuple(inputs))
            with torch.enable_grad(), autocast(*ctx.autocast), HOOKS.recompute():
                outputs = ctx.run_function(*detached_inputs)
        finally:
            with HOOKS.untracked():
                torch.set_rng_state(saved_rng)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        outputs_with_grad = []
        args_with_grad = []
        for i in range(len(outputs)):
            if torch.is_tensor(outputs[i]) and outputs[i].requires_grad:
                outputs_with_grad.append(outputs[i])
                args_with_grad.append(args[i])
        torch.autograd.backward(outputs_with_grad, args_with_grad)
        grads = tuple(inp.grad if isinstance(inp, torch.Tensor) else None for inp in detached_inputs)
        return (None, None) + grads


class _Handle:
    pass


class _Holder:
    def __init__(self):
        self.handles = {}


class _NoopSaveInputs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, *inputs):  # forward + setup_context of torch 2.11, in torch 1.13's style
        tensor_indices, tensors = zip(*[(i, o) for i, o in enumerate(inputs) if isinstance(o, torch.Tensor)])
        idx2saved_idx = {b: a for a, b in enumerate(tensor_indices)}
        args = [None if isinstance(o, torch.Tensor) else o for o in inputs]

        def get_args(saved_tensors):
            ret = [saved_tensors[idx2saved_idx[i]] if i in tensor_indices else o for i, o in enumerate(args)]
            return ret[1:]

        ctx.get_args = get_args
        ctx.save_for_backward(*tensors)
        return torch.empty((0,))

    @staticmethod
    def backward(ctx, *grads):
        raise AssertionError("Did not expect to backward on this graph")


class _StopRecomputationError(Exception):
    pass


class _CheckpointFrame:
    def __init__(self, recompute_fn):
        self.recompute_fn = recompute_fn
        self.input_saver = None
        self.weak_holders = []
        self.recomputed = weakref.WeakKeyDictionary()
        self.recomp_counter = 0
        self.is_recomputed = False
        self.early_stop = True


def _wrapped_number(x):
    """A Python scalar operand (a 0-dim float64 or int64 CPU tensor here: no model tensor is one);
    torch >= 2.0's SavedVariable saves it without the saved-tensor hooks (saved_variable.cpp)."""
    return x.dim() == 0 and x.device.type == "cpu" and x.dtype in (torch.float64, torch.int64) \
        and not x.requires_grad


def _checkpoint_without_reentrant(fn, *args, **kwargs):
    """use_reentrant=False: _checkpoint_without_reentrant_generator with early_stop=True, one
    graph task (gid) per backward."""
    ac = autocast_state()
    with HOOKS.untracked():
        fwd_cpu_state = torch.get_rng_state()

    def recompute_fn(*inputs):
        kwargs_, *args_ = inputs
        with HOOKS.untracked():
            saved = torch.get_rng_state()
            torch.set_rng_state(fwd_cpu_state)
        try:
            with autocast(*ac):
                fn(*args_, **kwargs_)
        finally:
            with HOOKS.untracked():
                torch.set_rng_state(saved)

    frame = _CheckpointFrame(recompute_fn)
    dummy = torch.empty((0,), requires_grad=True)
    frame.input_saver = _NoopSaveInputs.apply(dummy, kwargs, *args)

    def pack_hook(x):
        if _wrapped_number(x):  # torch 2.11 SavedVariable: no saved-tensor hooks for wrapped numbers
            return x
        holder = _Holder()
        frame.weak_holders.append(weakref.ref(holder))
        return holder

    def unpack_hook(holder):
        if not isinstance(holder, _Holder):
            return holder
        if not frame.is_recomputed:
            ctx = frame.input_saver.grad_fn
            rargs = ctx.get_args(ctx.saved_tensors)

            def rpack(x):
                if _wrapped_number(x):
                    return x
                x = x.detach() if x.requires_grad else x
                recomp_idx = frame.recomp_counter
                frame.recomp_counter += 1
                h = frame.weak_holders[recomp_idx]()
                if h is not None:
                    h.handles[0] = _Handle()
                    frame.recomputed[h.handles[0]] = x
                if frame.early_stop and frame.recomp_counter == len(frame.weak_holders):
                    raise _StopRecomputationError
                return x

            try:
                with torch.autograd.graph.saved_tensors_hooks(rpack, lambda x: x), torch.enable_grad(), \
                        HOOKS.recompute():
                    frame.recompute_fn(*rargs)
            except _StopRecomputationError:
                pass
            except RuntimeError as e:  # torch 1.13 turns a hook's exception into a RuntimeError
                if "_StopRecomputationError" not in str(e):
                    raise
            frame.is_recomputed = True
        ret = frame.recomputed[holder.handles[0]]
        holder.handles[0] = None
        return ret

    with torch.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook):
        ret = fn(*args, **kwargs)
    return ret


def checkpoint(function, *args, use_reentrant, **kwargs):
    if MODE == "native":
        import torch.utils.checkpoint as tuc
        return tuc.checkpoint(function, *args, use_reentrant=use_reentrant, **kwargs)
    if use_reentrant:
        return CheckpointFunction.apply(function, True, *args)
    return _checkpoint_without_reentrant(function, *args, **kwargs)


def gradient_checkpointing_enable(model, use_reentrant):
    """modeling_utils.gradient_checkpointing_enable: every decoder layer checkpointed, and
    enable_input_require_grads (a forward hook making the embedding output require grad)."""
    func = partial(checkpoint, use_reentrant=use_reentrant)
    for layer in model.decoder_layers():
        layer.gradient_checkpointing = True
        layer._gradient_checkpointing_func = func

    def make_inputs_require_grads(module, input, output):
        output.requires_grad_(True)

    model.get_input_embeddings().register_forward_hook(make_inputs_require_grads)


# --------------------------------------------------------------------------------------------
# Optimizers (torch 2.11 torch/optim), E7 and E8 (fused). torch 1.13's own foreach AdamW allocates
# differently (and lacks _foreach_lerp_, Adafactor and fused AdamW on the CPU), so the torch 2.11
# code is ported. Step counters are host tensors unless fused (never counted as device memory).
# --------------------------------------------------------------------------------------------
def _foreach_lerp_(selfs, others, weights):
    """torch._foreach_lerp_ (not in torch 1.13): in place, allocates nothing on CUDA."""
    if not isinstance(weights, (list, tuple)):
        weights = [weights] * len(selfs)
    for s, o, w in zip(selfs, others, weights):
        s.lerp_(o, w)


def _foreach_inplace(name, selfs, *rest):
    """In-place foreach ops torch 1.13 lacks (clamp_min_, rsqrt_, lerp_): allocate nothing."""
    fn = getattr(torch, name, None)
    if fn is not None:
        return fn(selfs, *rest)
    base = name[len("_foreach_"):]
    for i, s in enumerate(selfs):
        args = [r[i] if isinstance(r, (list, tuple)) else r for r in rest]
        getattr(s, base)(*args)


class Optimizer:
    """The parts of torch.optim.Optimizer the step uses: param groups, state, zero_grad."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = defaultdict(dict)
        self.param_groups = [dict(defaults, params=list(params))]

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad.detach_()
                        p.grad.zero_()

    def state_tensors(self):
        for st in self.state.values():
            for k, v in st.items():
                if isinstance(v, torch.Tensor):
                    yield k, v


def _step_tensor(fused):
    if fused:  # torch.zeros((), dtype=_get_scalar_dtype(is_fused=True), device=p.device)
        return torch.zeros((), dtype=torch.float32)
    with HOOKS.untracked():  # torch.tensor(0.0, dtype=_get_scalar_dtype()): a CPU tensor
        return torch.tensor(0.0, dtype=torch.float32)


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, impl="foreach"):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      foreach=impl == "foreach", fused=impl == "fused"))
        self.impl = impl

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
            for p in group["params"]:  # Adam._init_group
                if p.grad is None:
                    continue
                params.append(p)
                grads.append(p.grad)
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = _step_tensor(self.impl == "fused")
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                steps.append(state["step"])
            beta1, beta2 = group["betas"]
            kw = dict(lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"], wd=group["weight_decay"])
            {"foreach": _multi_tensor_adamw, "for-loop": _single_tensor_adamw,
             "fused": _fused_adamw}[self.impl](params, grads, exp_avgs, exp_avg_sqs, steps, **kw)


def _single_tensor_adamw(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr, beta1, beta2, eps, wd):
    for i, param in enumerate(params):  # adam.py _single_tensor_adam, decoupled_weight_decay
        grad, exp_avg, exp_avg_sq, step_t = grads[i], exp_avgs[i], exp_avg_sqs[i], state_steps[i]
        with HOOKS.untracked():
            step_t += 1
        if wd != 0:
            param.mul_(1 - lr * wd)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = step_t.item()
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2 ** 0.5
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        param.addcdiv_(exp_avg, denom, value=-step_size)


def _multi_tensor_adamw(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr, beta1, beta2, eps, wd):
    if len(params) == 0:
        return
    # Optimizer._group_tensors_by_device_and_dtype
    groups = defaultdict(lambda: [[], [], [], [], []])
    for t in zip(params, grads, exp_avgs, exp_avg_sqs, state_steps):
        g = groups[(t[0].device, t[0].dtype)]
        for lst, x in zip(g, t):
            lst.append(x)
    for device_params, device_grads, device_exp_avgs, device_exp_avg_sqs, device_state_steps in groups.values():
        with HOOKS.untracked():  # steps on the CPU: torch._foreach_add_(steps, torch.tensor(1.0), alpha=1.0)
            for s in device_state_steps:
                s.add_(1)
        if wd != 0:
            torch._foreach_mul_(device_params, 1 - lr * wd)
        _foreach_lerp_(device_exp_avgs, device_grads, 1 - beta1)
        torch._foreach_mul_(device_exp_avg_sqs, beta2)
        torch._foreach_addcmul_(device_exp_avg_sqs, device_grads, device_grads, 1 - beta2)
        del device_grads
        bias_correction1 = [1 - beta1 ** s.item() for s in device_state_steps]
        bias_correction2 = [1 - beta2 ** s.item() for s in device_state_steps]
        step_size = [(lr / bc) * -1 for bc in bias_correction1]
        bias_correction2_sqrt = [bc ** 0.5 for bc in bias_correction2]
        exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)
        torch._foreach_div_(exp_avg_sq_sqrt, bias_correction2_sqrt)
        torch._foreach_add_(exp_avg_sq_sqrt, eps)
        torch._foreach_addcdiv_(device_params, device_exp_avgs, exp_avg_sq_sqrt, step_size)


def _fused_adamw(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr, beta1, beta2, eps, wd):
    """E8: adam.py _fused_adam: torch._foreach_add_(device_state_steps, 1) on the device steps,
    then torch._fused_adamw_ updates in place (multi_tensor_apply, no allocation). The CPU
    computes the same update untracked."""
    torch._foreach_add_(state_steps, 1)
    with HOOKS.untracked():
        _multi_tensor_adamw_values(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr, beta1, beta2, eps, wd)


def _multi_tensor_adamw_values(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr, beta1, beta2, eps, wd):
    for p, g, m, v, s in zip(params, grads, exp_avgs, exp_avg_sqs, state_steps):
        step = s.item()
        p.mul_(1 - lr * wd)
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (v.sqrt() / (1 - beta2 ** step) ** 0.5).add_(eps)
        p.addcdiv_(m, denom, value=-lr / (1 - beta1 ** step))


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.9, weight_decay=0.0, impl="foreach"):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      foreach=impl == "foreach"))
        self.impl = impl

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            params, grads, bufs = [], [], []
            for p in group["params"]:  # SGD._init_group
                if p.grad is not None:
                    params.append(p)
                    grads.append(p.grad)
                    bufs.append(self.state[p].get("momentum_buffer"))
            lr, momentum, wd = group["lr"], group["momentum"], group["weight_decay"]
            if self.impl == "foreach":
                _multi_tensor_sgd(params, grads, bufs, lr, momentum, wd)
            else:
                _single_tensor_sgd(params, grads, bufs, lr, momentum, wd)
            if momentum != 0:
                for p, b in zip(params, bufs):
                    self.state[p]["momentum_buffer"] = b


def _single_tensor_sgd(params, grads, momentum_buffer_list, lr, momentum, wd, dampening=0.0):
    for i, param in enumerate(params):  # sgd.py _single_tensor_sgd
        grad = grads[i]
        if wd != 0:
            grad = grad.add(param, alpha=wd)
        if momentum != 0:
            buf = momentum_buffer_list[i]
            if buf is None:
                buf = grad.detach().clone()
                momentum_buffer_list[i] = buf
            else:
                buf.mul_(momentum).add_(grad, alpha=1 - dampening)
            grad = buf
        param.add_(grad, alpha=-lr)


def _multi_tensor_sgd(params, grads, momentum_buffer_list, lr, momentum, wd, dampening=0.0):
    if len(params) == 0:
        return
    device_params, device_grads, device_bufs = params, grads, momentum_buffer_list  # one device and dtype
    if wd != 0:
        device_grads = torch._foreach_add(device_grads, device_params, alpha=wd)
    if momentum != 0:
        if all(b is not None for b in device_bufs):
            bufs = list(device_bufs)
            torch._foreach_mul_(bufs, momentum)
            torch._foreach_add_(bufs, device_grads, alpha=1 - dampening)
        else:
            bufs = []
            for i in range(len(device_bufs)):
                if device_bufs[i] is None:
                    buf = device_bufs[i] = device_grads[i].detach().clone()
                else:
                    buf = device_bufs[i]
                    buf.mul_(momentum).add_(device_grads[i], alpha=1 - dampening)
                bufs.append(buf)
        device_grads = bufs
    torch._foreach_add_(device_params, device_grads, alpha=-lr)


class Adafactor(Optimizer):
    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, impl="foreach"):
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay,
                                      foreach=impl == "foreach"))
        self.impl = impl

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            params, grads, row_vars, col_vars, variances, steps = [], [], [], [], [], []
            for p in group["params"]:  # Adafactor._init_group
                if p.grad is None:
                    continue
                params.append(p)
                grads.append(p.grad)
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = _step_tensor(False)
                    if p.grad.dim() > 1:
                        row_shape = list(p.grad.shape)
                        row_shape[-1] = 1
                        state["row_var"] = p.grad.new_zeros(row_shape)
                        col_shape = list(p.grad.shape)
                        col_shape[-2] = 1
                        state["col_var"] = p.grad.new_zeros(col_shape)
                    else:
                        state["variance"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                row_vars.append(state.get("row_var"))
                col_vars.append(state.get("col_var"))
                variances.append(state.get("variance"))
                steps.append(state["step"])
            eps1, eps2 = group["eps"]
            fn = _multi_tensor_adafactor if self.impl == "foreach" else _single_tensor_adafactor
            fn(params, grads, row_vars, col_vars, variances, steps, d=group["d"], lr=group["lr"],
               beta2_decay=group["beta2_decay"], weight_decay=group["weight_decay"], eps1=eps1, eps2=eps2)


def _single_tensor_adafactor(params, grads, row_vars, col_vars, variances, state_steps, d, lr, beta2_decay,
                             weight_decay, eps1, eps2):
    for i, param in enumerate(params):  # _adafactor.py _single_tensor_adafactor
        grad = grads[i]
        step_t, row_var, col_var, variance = state_steps[i], row_vars[i], col_vars[i], variances[i]
        if eps1 is None:
            eps1 = torch.finfo(param.dtype).eps
        with HOOKS.untracked():
            step_t += 1
        step_float = step_t.item()
        one_minus_beta2_t = step_float ** beta2_decay
        rho_t = min(lr, 1 / (step_float ** 0.5))
        alpha = max(eps2, param.norm(2).item() / (param.numel() ** 0.5)) * rho_t
        if weight_decay != 0:
            param.mul_(1 - lr * weight_decay)
        if grad.dim() > 1:
            row_mean = torch.norm(grad, dim=-1, keepdim=True).square_().div_(grad.size(-1))
            row_var.lerp_(row_mean, one_minus_beta2_t)
            col_mean = torch.norm(grad, dim=-2, keepdim=True).square_().div_(grad.size(-2))
            col_var.lerp_(col_mean, one_minus_beta2_t)
            var_estimate = row_var @ col_var
            var_estimate.div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1))
        else:
            grad_squared = grad * grad
            variance.lerp_(grad_squared, one_minus_beta2_t)
            var_estimate = variance.clone()
        update = var_estimate.clamp_(min=eps1 * eps1).rsqrt_()
        update.mul_(grad)
        denom = max(1.0, update.norm(2).item() / ((update.numel() ** 0.5) * d))
        param.add_(update, alpha=-alpha / denom)


def _multi_tensor_adafactor(params, grads, row_vars, col_vars, variances, state_steps, d, lr, beta2_decay,
                            weight_decay, eps1, eps2):
    if len(params) == 0:
        return
    # _group_tensors_by_device_dtype_and_is_multidim: matrices first, in parameter order
    groups = {}
    for t in zip(params, grads, row_vars, col_vars, variances, state_steps):
        key = t[1].dim() > 1
        g = groups.setdefault(key, [[] for _ in range(6)])
        for lst, x in zip(g, t):
            lst.append(x)
    for is_multidim, (device_params, device_grads, device_row_vars, device_col_vars, device_variances,
                      device_state_steps) in groups.items():
        if eps1 is None:
            eps1 = torch.finfo(device_params[0].dtype).eps
        with HOOKS.untracked():
            for s in device_state_steps:
                s.add_(1.0)
        one_minus_beta2_ts = [s.item() ** beta2_decay for s in device_state_steps]
        rho_ts = [min(lr, 1 / (s.item() ** 0.5)) for s in device_state_steps]
        alphas = [max(eps2, p.norm(2).item() / (p.numel() ** 0.5)) * r for p, r in zip(device_params, rho_ts)]
        if weight_decay != 0:
            torch._foreach_mul_(device_params, 1 - lr * weight_decay)
        if is_multidim:
            row_means = [torch.norm(grad, dim=-1, keepdim=True) for grad in device_grads]
            torch._foreach_mul_(row_means, row_means)
            torch._foreach_div_(row_means, [grad.size(-1) for grad in device_grads])
            _foreach_lerp_(device_row_vars, row_means, one_minus_beta2_ts)
            del row_means
            col_means = [torch.norm(grad, dim=-2, keepdim=True) for grad in device_grads]
            torch._foreach_mul_(col_means, col_means)
            torch._foreach_div_(col_means, [grad.size(-2) for grad in device_grads])
            _foreach_lerp_(device_col_vars, col_means, one_minus_beta2_ts)
            del col_means
            var_estimates = [row_var @ col_var for row_var, col_var in zip(device_row_vars, device_col_vars)]
            row_var_means = [row_var.mean(dim=-2, keepdim=True) for row_var in device_row_vars]
            _foreach_inplace("_foreach_clamp_min_", row_var_means, eps1)
            torch._foreach_div_(var_estimates, row_var_means)
            del row_var_means
        else:
            grads_squared = torch._foreach_mul(device_grads, device_grads)
            _foreach_lerp_(device_variances, grads_squared, one_minus_beta2_ts)
            del grads_squared
            var_estimates = [v.clone() for v in device_variances]
        _foreach_inplace("_foreach_clamp_min_", var_estimates, eps1 * eps1)
        _foreach_inplace("_foreach_rsqrt_", var_estimates)
        torch._foreach_mul_(var_estimates, device_grads)
        updates = var_estimates
        alphas = [-a / (max(1.0, update.norm(2).item() / ((update.numel() ** 0.5) * d)))
                  for a, update in zip(alphas, updates)]
        torch._foreach_mul_(updates, alphas)
        torch._foreach_add_(device_params, updates)


def build_optimizer(kind, impl, params):
    if MODE == "native":
        if kind == "adamw":
            kw = {"foreach": impl == "foreach"} if impl != "fused" else {"fused": True}
            return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **kw)
        if kind == "sgd":
            return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=impl == "foreach")
        if kind == "adafactor":
            return torch.optim.Adafactor(params, lr=1e-2, foreach=impl == "foreach")
    if kind == "adamw":
        return AdamW(params, lr=1e-3, weight_decay=0.01, impl=impl)
    if kind == "sgd":
        return SGD(params, lr=1e-3, momentum=0.9, impl=impl)
    if kind == "adafactor":
        return Adafactor(params, lr=1e-2, impl=impl)
    raise ValueError(kind)
