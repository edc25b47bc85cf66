"""When FSDP1's root flat parameter gets its gradient (python3-torch on CPU; no FSDP needed).

FSDP1 (use_orig_params=False) runs the module on views of one flat parameter:
torch/distributed/fsdp/_flat_param.py _use_unsharded_views splits it (torch.split) and views each
piece in its parameter's shape. Autograd's split backward waits for the gradients of all its
outputs, so a head used early in backward keeps its gradient in that node's input buffer until
the embedding's backward, at the end, and only then is the whole flat gradient made (a cat).
This script builds that graph (embedding, a layer, a norm, an untied head) and prints the
backward's allocations in order: the head's gradient (V x H) comes first, the flat gradient last.
Used by include/vramfit/fsdp.hpp (fsdp_gathered_of: the head's gradients before the root's).
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode

V, H, T = 50, 16, 8  # vocabulary, hidden size, tokens


class Allocations(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        op = func.__name__.split(".")[0]
        outs = out if isinstance(out, (tuple, list)) else [out]
        if op in ("mm", "cat", "embedding_dense_backward"):
            self.shapes += [(op, tuple(o.shape)) for o in outs if isinstance(o, torch.Tensor)]
        return out


flat = torch.randn(V * H + H + V * H, requires_grad=True)
emb, norm, head = (piece.view(shape) for piece, shape in
                   zip(torch.split(flat, [V * H, H, V * H]), [(V, H), (H,), (V, H)]))
layer = torch.randn(H, H, requires_grad=True)
ids = torch.randint(0, V, (T,))
x = torch.tanh(torch.nn.functional.embedding(ids, emb) @ layer) * norm
loss = torch.nn.functional.cross_entropy(x @ head.t(), ids)
log = Allocations()
with log:
    loss.backward()
for op, shape in log.shapes:
    print(op, shape)
order = [shape for _, shape in log.shapes]
head_grad, flat_grad = order.index((V, H)), order.index((flat.numel(),))
embedding_grad = [op for op, _ in log.shapes].index("embedding_dense_backward")
assert head_grad < embedding_grad < flat_grad, "the head's gradient is not held to the end"
print("head's gradient first, the embedding's next, the flat gradient last: as fsdp.hpp assumes")
