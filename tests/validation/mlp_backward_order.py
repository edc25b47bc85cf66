"""The order in which autograd runs a gated MLP's backward ops (CPU, any torch with
TorchDispatchMode): which saved tensor each op reads last, for the frees of
include/vramfit/activations.hpp mlp_block.

    /usr/bin/python3 tests/validation/mlp_backward_order.py

Hugging Face's LlamaMLP, torchtitan's and torchtune's FeedForward call the gate projection, the
activation, then the up projection; litgpt's LLaMAMLP both projections, then the activation. The
engine runs the ready node with the highest sequence number first (engine.cpp ReadyQueue), so
after the product's backward (two muls) the first runs up_proj's backward before the
activation's, litgpt the activation's first. Printed by torch 1.13.1 (Debian):

    hf/torchtitan/torchtune: mm mm mul mul mm mm silu_backward mm mm
    litgpt: mm mm mul mul silu_backward mm mm mm mm

(down_proj's two matmuls first, then the product's, then the projections' and the activation's.)
"""
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

SHOWN = {"mul", "mm", "silu_backward"}


class Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in SHOWN:
            self.names.append(name)
        return func(*args, **(kwargs or {}))


def main():
    torch.manual_seed(0)
    h, f, tokens = 8, 16, 4
    gate, up, down = (torch.nn.Linear(a, b, bias=False) for a, b in ((h, f), (h, f), (f, h)))
    x = torch.randn(tokens, h, requires_grad=True)

    def gate_first(x):  # modeling_llama.py LlamaMLP.forward
        return down(F.silu(gate(x)) * up(x))

    def projections_first(x):  # litgpt/model.py LLaMAMLP.forward
        x_fc_1, x_fc_2 = gate(x), up(x)
        return down(F.silu(x_fc_1) * x_fc_2)

    for name, mlp in (("hf/torchtitan/torchtune", gate_first), ("litgpt", projections_first)):
        loss = mlp(x).sum()
        with Ops() as ops:
            loss.backward()
        print(f"{name}: {' '.join(ops.names)}")


if __name__ == "__main__":
    main()
