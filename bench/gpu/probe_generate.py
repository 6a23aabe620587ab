#!/usr/bin/env python3
"""Per-call times of Arbiter's generator for calls whose shapes it has seen before and calls
whose shapes are new: the same short chat repeated, distinct short chats, prefill-only calls,
distinct long chats, with Arbiter's attention choice or, with --cudnn-attention, PyTorch's,
and with each decoding step replayed from a CUDA graph or, with --no-cuda-graphs, its kernels
launched one by one.
On a GPU the two kinds differ when a kernel library builds something per
shape (cuDNN attention does: docs in backends/models/loading.hpp); on a CPU they should not.

The model is bench/generate_bench.py's Qwen3-0.6B-shaped random-weight generator in bf16,
greedy. Each line: the call, its wall time, its prompt and completion tokens, ms per
completion token. bench/gpu/run.sh's `probe` step runs it both ways; here:

    python3 bench/gpu/probe_generate.py --device cpu --layers 1
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "bench"))

import generate_bench  # noqa: E402
from arbiter_testing import start_server  # noqa: E402
from gpu_bench import Client  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--cudnn-attention", action="store_true",
                   help="serve with ARBITER_CUDNN_ATTENTION=1 (PyTorch's own attention choice)")
    p.add_argument("--no-cuda-graphs", action="store_true",
                   help="serve with cuda_graphs = false (each step's kernels launched one by one)")
    p.add_argument("--tmp", type=Path, default=Path("/tmp/arbiter_probe_generate"))
    args = p.parse_args()
    import torch
    args.tmp.mkdir(parents=True, exist_ok=True)
    folder = generate_bench.make_model(args.tmp / "qwen", args.layers, torch.bfloat16,
                                       silence_ends=True)
    server = start_server(args.tmp, f'[[models]]\nname = "qwen"\nkind = "generator"\n'
                                    f'path = "{folder}"\ndevice = "{args.device}"\n'
                                    f'dtype = "bf16"\n'
                                    + ("cuda_graphs = false\n" if args.no_cuda_graphs else ""),
                          env={"ARBITER_CUDNN_ATTENTION": "1"} if args.cudnn_attention else {})
    client = Client(server)
    words = generate_bench.WORDS

    def text(first, n):
        return " ".join(words[(first + k) % len(words)] for k in range(n))

    calls = ([("first call", text(0, 40), 32)] + [("same short chat", text(0, 40), 32)] * 3
             + [(f"distinct short chat {i}", text(i, 40 + i), 32) for i in range(1, 4)]
             + [(f"distinct prefill only {i}", text(i, 50 + i), 1) for i in range(1, 4)]
             + [("same prefill only", text(0, 40), 1)] * 2
             + [(f"distinct long chat {i}", text(i, 900 + i), 32) for i in range(1, 3)]
             + [(f"distinct chat, same length {i}", text(i, 40), 32) for i in range(5, 8)]
             + [("same chat, 128 new tokens", text(0, 40), 128)] * 2)
    try:
        print(f"{'call':32s} {'ms':>8s} {'prompt':>7s} {'new':>5s} {'ms/new token':>13s}")
        for label, content, new in calls:
            start = time.perf_counter()
            reply = client.post("/v1/chat/completions", {
                "model": "qwen", "messages": [{"role": "user", "content": content}],
                "max_tokens": new, "temperature": 0.0})
            ms = (time.perf_counter() - start) * 1000
            usage = reply["usage"]
            made = max(usage["completion_tokens"], 1)
            print(f"{label:32s} {ms:8.1f} {usage['prompt_tokens']:7d} "
                  f"{usage['completion_tokens']:5d} {ms / made:13.1f}", flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
