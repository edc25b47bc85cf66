#!/usr/bin/env python3
"""Seed 004's FSDP rows on 4 GPUs: the caching allocator's pool per stream under FSDP1.

Raschka's 08_fsdp-with-01-2.py and 09_fsdp-cpu-offload-with-01-2.py (rasbt/pytorch-memory-optim
at 9c10216) measured 6.59 and 6.03 GB of max_memory_reserved(); vramfit, which replays one
stream, gives 3.99 and 2.56 GB. docs/cli.md ("Seed 004's FSDP rows") accounts for the gap with
FSDP1's side streams (unshard, post-backward, pre-unshard), each a pool of its own, and with the
all-gathers the CPU issues ahead of the GPU when limit_all_gathers is False (FSDP's default in
the torch 2.1 nightly of the article; True since pytorch/pytorch#104900). This script measures
that account: the article's setup without Lightning or the data set (the memory does not depend
on the images), and the reserved bytes of every stream's segments at the end.

Setup, as Lightning's FSDPStrategy ran it (docs/cli.md lists the sources): torchvision
vit_l_16 with a 10-class head, fp32, FULL_SHARD with transformer_auto_wrap_policy over
EncoderBlock, use_orig_params=True, device_id the local GPU, each EncoderBlock wrapped in
checkpoint_wrapper(NO_REENTRANT) inside its unit, torch.optim.Adam(lr=5e-5) built before the
wrap, 64 images of 224 x 224 per GPU, loss cross-entropy; with --offload, CPUOffload(
offload_params=True).

How to run (4 GPUs, torch and torchvision; no network: random weights and images):

    torchrun --nproc_per_node 4 tests/validation/seed004_fsdp1_pools.py --steps 6
    torchrun --nproc_per_node 4 tests/validation/seed004_fsdp1_pools.py --steps 6 --offload
    torchrun --nproc_per_node 4 tests/validation/seed004_fsdp1_pools.py --steps 6 --limit-all-gathers

Rank 0 prints one JSON line: the setting, max_memory_reserved and max_memory_allocated, and per
stream the reserved bytes and the segment sizes (memory_snapshot), so that the unshard pool's
count of 50 MiB segments (the outstanding all-gathers of docs/cli.md's table) can be read off.
"""

import argparse
import functools
import json
import os
from collections import defaultdict

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    apply_activation_checkpointing,
    checkpoint_wrapper,
)
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
from torchvision.models import vit_l_16
from torchvision.models.vision_transformer import EncoderBlock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--offload", action="store_true", help="CPUOffload(offload_params=True)")
    parser.add_argument("--limit-all-gathers", action="store_true",
                        help="FSDP's rate limiter (off in the article's torch)")
    args = parser.parse_args()

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(device)
    torch.manual_seed(123)

    model = vit_l_16(weights=None)
    model.heads.head = torch.nn.Linear(in_features=1024, out_features=10)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-5)  # before the wrap, as Fabric
    model = FullyShardedDataParallel(
        model,
        auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                           transformer_layer_cls={EncoderBlock}),
        cpu_offload=CPUOffload(offload_params=args.offload),
        device_id=device,
        use_orig_params=True,
        limit_all_gathers=args.limit_all_gathers,
    )
    apply_activation_checkpointing(
        model,
        checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper,
                                                checkpoint_impl=CheckpointImpl.NO_REENTRANT),
        check_fn=lambda m: isinstance(m, EncoderBlock),
    )
    torch.cuda.reset_peak_memory_stats()

    images = torch.randn(args.batch, 3, 224, 224, device="cuda")
    labels = torch.randint(0, 10, (args.batch,), device="cuda")
    for _ in range(args.steps):
        model.train()
        logits = model(images)
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # One host synchronisation per step, standing in for the article's metric update.
        torch.argmax(logits.detach(), 1).sum().item()
    torch.cuda.synchronize()

    streams = defaultdict(lambda: {"reserved": 0, "segments": []})
    for segment in torch.cuda.memory_snapshot():
        s = streams[str(segment["stream"])]
        s["reserved"] += segment["total_size"]
        s["segments"].append(segment["total_size"])
    for s in streams.values():
        s["segments"].sort(reverse=True)
    row = {
        "setting": {"offload": args.offload, "limit_all_gathers": args.limit_all_gathers,
                    "batch": args.batch, "steps": args.steps, "world": dist.get_world_size(),
                    "torch": torch.__version__, "gpu": torch.cuda.get_device_name()},
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "streams": streams,
    }
    if rank == 0:
        print(json.dumps(row))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
