#!/usr/bin/env python3
"""Re-encodes one measured allocator trace as torch.cuda.memory._snapshot()'s JSON layout.

The source is a real measurement: tests/validation/gpu/traces/llama3-8b-2l_bf16_adamw_b1s1024_sdpa.json,
step 4 of a Hugging Face Llama-3-8B cut to 2 layers (bf16 weights, torch.optim.AdamW foreach,
micro-batch 1 x 1,024 tokens, SDPA) traced on an H100 by tests/validation/gpu_measure.py under
torch.cuda.memory._record_memory_history. That file keeps the trace in a compact form (its
docstring): events [action, addr, size, stream, label], labels (the 3 innermost Python frames as
'dir/file.py:line:function', innermost first), segments_before / segments_after (the
_snapshot() segment map at the start and the end of the step). This script changes the layout
only, no number:

  segments      <- segments_after (the snapshot is taken at the end of the step): each
                   [address, total_size, stream, pool, allocated_size, requested_size, blocks]
                   becomes {device, address, total_size, stream, segment_type, allocated_size,
                   active_size, requested_size, blocks}; active_size is the sum of the sizes of its
                   blocks in state active_allocated or active_pending_free (torch's definition);
                   each block [address, size, requested_size, state] becomes {address, size,
                   requested_size, state, frames: []} (the compact trace kept no block frames),
                   state a/p/i -> active_allocated/active_pending_free/inactive.
  device_traces <- [events of device 0], each {action, addr, size, stream, frames}; a label
                   becomes frames [{filename, line, name}] innermost first; label -1 (no Python
                   frame: the autograd engine's thread) becomes []; the measuring script's own
                   frames were kept without a line number: line 0.

Key names follow torch/cuda/memory.py _snapshot()'s docstring (Snapshot, Segment, Block, Frame,
TraceEntry). Usage (no torch needed):

    python3 tests/data/compare/make_snapshot.py > tests/data/compare/llama3-8b-2l_snapshot.json

It also prints to stderr the peaks a replay of the events gives (check_peaks), which
tests/cli/compare_test.cpp and docs/compare.md quote.
"""

import json
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
SOURCE = "tests/validation/gpu/traces/llama3-8b-2l_bf16_adamw_b1s1024_sdpa.json"
STATES = {"a": "active_allocated", "p": "active_pending_free", "i": "inactive"}


def frames_of(label):
    frames = []
    for frame in label.split(" < "):
        parts = frame.split(":")
        if len(parts) == 3:
            frames.append({"filename": parts[0], "line": int(parts[1]), "name": parts[2]})
        else:  # 'validation/gpu_measure.py:function': the measuring script's own, no line kept
            frames.append({"filename": parts[0], "line": 0, "name": parts[1]})
    return frames


def segment(s, device):
    address, total, stream, pool, allocated, requested, blocks = s
    out = [{"address": b[0], "size": b[1], "requested_size": b[2], "state": STATES[b[3]],
            "frames": []} for b in blocks]
    active = sum(b["size"] for b in out if b["state"] != "inactive")
    return {"device": device, "address": address, "total_size": total, "stream": stream,
            "segment_type": pool, "allocated_size": allocated, "active_size": active,
            "requested_size": requested, "blocks": out}


def block(size):
    """CUDACachingAllocator round_size: at least 512 B, a multiple of 512 B."""
    return max(512, (size + 511) // 512 * 512)


def check_peaks(trace, events):
    """Peaks of the live requested bytes and of their 512 B blocks over the events, from the
    state at the start (segments_before's active blocks); and that state plus the events gives
    segments_after's."""
    live = {b[0]: b[2] for s in trace["segments_before"] for b in s[6] if b[3] == "a"}
    total, blocks = sum(live.values()), sum(block(n) for n in live.values())
    start, peak, start_blocks, peak_blocks = total, total, blocks, blocks
    for action, addr, size, _, _ in events:
        if action == "alloc":
            assert addr not in live
            live[addr] = size
            total += size
            blocks += block(size)
            peak, peak_blocks = max(peak, total), max(peak_blocks, blocks)
        elif action == "free_requested":
            assert live.pop(addr) == size
            total -= size
            blocks -= block(size)
    end = {b[0]: b[2] for s in trace["segments_after"] for b in s[6] if b[3] == "a"}
    assert live == end, "segments_before + events != segments_after"
    return start, peak, start_blocks, peak_blocks


def main():
    with open(os.path.join(ROOT, SOURCE)) as f:
        trace = json.load(f)
    assert not trace["truncated"] and trace["fields"] == ["action", "addr", "size", "stream", "label"]
    device = trace["device"]
    labels = trace["labels"]
    events = [{"action": a, "addr": addr, "size": size, "stream": stream,
               "frames": frames_of(labels[label]) if label >= 0 else []}
              for a, addr, size, stream, label in trace["events"]]
    snapshot = {"segments": [segment(s, device) for s in trace["segments_after"]],
                "device_traces": [events] if device == 0 else [[]] * device + [events]}
    start, peak, start_blocks, peak_blocks = check_peaks(trace, trace["events"])
    print("live requested bytes: at the start %d, peak %d; in 512 B blocks: at the start %d, "
          "peak %d; reserved (no segment event in the trace): %d"
          % (start, peak, start_blocks, peak_blocks, sum(s[1] for s in trace["segments_after"])),
          file=sys.stderr)
    # One segment and one trace entry a line: readable diffs, a small file.
    out = sys.stdout
    out.write('{"segments": [\n')
    out.write(",\n".join(json.dumps(s, separators=(",", ":")) for s in snapshot["segments"]))
    out.write('\n],\n"device_traces": [\n')
    for i, d in enumerate(snapshot["device_traces"]):
        out.write("[\n" + ",\n".join(json.dumps(e, separators=(",", ":")) for e in d) + "\n]")
        out.write(",\n" if i + 1 < len(snapshot["device_traces"]) else "\n")
    out.write("]}\n")


if __name__ == "__main__":
    main()
