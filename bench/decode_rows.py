#!/usr/bin/env python3
"""Sampled rows that end at different points: two Arbiter binaries side by side in one run
(`--baseline`, e.g. one built before the local generator dropped ended rows from its decoding
batch), on the same chat calls, with the same seeds.

A random-weight Qwen3 of a few tens of millions of parameters (hidden 768, 6 layers; the
tokenizers fixture's byte-level BPE, made once with transformers under --tmp) answers K chat
calls, --at-once at a time (the generator decodes the calls it holds in one batch), each n
samples at temperature 1 with a seed and a stop string. The
stop string is a letter that some of the vocabulary's tokens hold, so a sample ends at the
first such token: at a different point in each row, as ΔIG's samples end at their "\\n". The
table gives seconds, calls/s, the completion tokens the calls reported and how many of the
samples' texts are the same on both binaries (a batch of other rows rounds a row's logits
differently, which can flip a sampled token now and then; with --at-once 1 they are all the
same).

    python3 bench/decode_rows.py --baseline /tmp/old/arbiter
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "bench"))

import arbiter_testing  # noqa: E402
from ig_bench import make_lm  # noqa: E402

# A random-weight Qwen3 of 37 M parameters: hidden 768, 6 layers, 1,024 positions, the
# tokenizers fixture's 705 tokens.
SHAPE = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=6,
             num_attention_heads=12, num_key_value_heads=4, head_dim=64,
             max_position_embeddings=1024)


def run(binary: Path, lm: Path, args: argparse.Namespace, tag: str) -> dict:
    arbiter_testing.ARBITER_BIN = str(binary)
    config = (f'[[models]]\nname = "lm"\nkind = "generator"\npath = "{lm}"\n'
              f'[routing]\ncache_capacity = 0\n')
    tmp = Path(args.tmp) / tag
    tmp.mkdir(parents=True, exist_ok=True)
    server = arbiter_testing.start_server(tmp, config)
    texts, lengths, tokens = [], [], 0
    try:
        # One call first, so that neither side's table holds its start-up.
        server.request("POST", "/v1/chat/completions", {
            "model": "lm", "messages": [{"role": "user", "content": "warm up"}],
            "max_tokens": 4, "temperature": 0})
        def one(k: int) -> dict:
            status, _, reply = server.request("POST", "/v1/chat/completions", {
                "model": "lm", "n": args.n, "temperature": 1.0, "seed": 100 + k,
                "max_tokens": args.max_tokens, "stop": [args.stop],
                "messages": [{"role": "user", "content": f"Tell me about question {k}."}],
                "deadline_ms": 600000})
            assert status == 200, reply
            return reply

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.at_once) as pool:
            replies = list(pool.map(one, range(args.calls)))
        seconds = time.perf_counter() - start
        for reply in replies:
            texts += [c["message"]["content"] for c in reply["choices"]]
            tokens += reply["usage"]["completion_tokens"]
    finally:
        server.stop()
    lengths = [len(t) for t in texts]
    return {"seconds": seconds, "texts": texts, "completion_tokens": tokens,
            "median_chars": statistics.median(lengths)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", type=Path, required=True)
    p.add_argument("--arbiter", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--calls", type=int, default=8)
    p.add_argument("--n", type=int, default=16, help="samples per call")
    p.add_argument("--at-once", type=int, default=8,
                   help="calls in flight (the generator decodes those it holds together)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--stop", default="k", help="the stop string")
    p.add_argument("--tmp", default="/tmp/arbiter_decode_rows")
    args = p.parse_args()
    lm = make_lm(Path(args.tmp) / "qwen3_768", **SHAPE)
    rows = {name: run(binary, lm, args, name)
            for name, binary in (("baseline", args.baseline), ("arbiter", args.arbiter))}
    b, a = rows["baseline"], rows["arbiter"]
    same = sum(x == y for x, y in zip(b["texts"], a["texts"]))
    print(f"{args.calls} chat calls, {args.at_once} at a time, n = {args.n}, temperature 1, seeded, "
          f"max_tokens {args.max_tokens}, stop {args.stop!r}; {same} of {len(a['texts'])} "
          f"texts the same on both\n")
    print("| binary | seconds | calls/s | completion tokens | median text (chars) |")
    print("|---|---:|---:|---:|---:|")
    for name in ("baseline", "arbiter"):
        r = rows[name]
        print(f"| {name} | {r['seconds']:.2f} | {args.calls / r['seconds']:.2f} | "
              f"{r['completion_tokens']:,} | {r['median_chars']:.0f} |")
    print(f"\narbiter ÷ baseline calls/s: {b['seconds'] / a['seconds']:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
