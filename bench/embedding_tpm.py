#!/usr/bin/env python3
"""GRPO-shaped `embedding` reward items on a remote OpenAI-compatible `/v1/embeddings`
endpoint that is paced by tokens per minute (`tokens_per_minute` configured as the provider's
limit, the fake provider enforcing the same `--tpm`, counted in words). Two Arbiter binaries
side by side in one run (`--arbiter` and `--baseline`, e.g. one built before embedding calls'
usage was shared out over their items), each on a fresh provider and server, result cache
off, `--concurrency` requests of one group (G items) in flight. Token pacing charges each
item its estimate scaled by the ratio it learned from the answers' `usage`; an estimate never
corrected leaves the provider's limit unused. Prints items/s, the provider's tokens per
minute used, its 429s and the ratio; the scores of both binaries must agree.

    python3 bench/embedding_tpm.py --baseline /tmp/old/arbiter
"""
from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))

import arbiter_testing  # noqa: E402
from embedding_groups import make_items  # noqa: E402  (the same GRPO-shaped items)


def make_groups(prompts, group, words):
    items = make_items(prompts, group, words)
    return [items[p * group:(p + 1) * group] for p in range(prompts)]


def run(binary, groups, args, tmp):
    provider = arbiter_testing.Provider("--tpm", str(args.tpm), "--burst-seconds", "1",
                                        "--latency-median-ms", str(args.latency_ms))
    arbiter_testing.ARBITER_BIN = str(binary)
    config = ("[routing]\ncache_capacity = 0\ncoalesce = false\n\n"
              + arbiter_testing.source_toml("emb", provider.url, "openai", ["embed"],
                                            tokens_per_minute=args.tpm, burst_ms=1000))
    server = arbiter_testing.start_server(tmp, config)
    scores = [None] * len(groups)
    lock = threading.Lock()
    next_group = [0]

    def worker():
        conn = server.connection(timeout=600)
        while True:
            with lock:
                g = next_group[0]
                next_group[0] += 1
            if g >= len(groups):
                return
            status, _, body = server.request("POST", "/v1/score",
                                             {"items": groups[g], "deadline_ms": 600000},
                                             conn=conn)
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {body}")
            scores[g] = [r["score"] if r["status"] == "ok" else None for r in body["results"]]

    try:
        start = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - start
        stats = provider.stats()
        _, _, info = server.request("GET", "/info")
        source = next(s for s in info["sources"] if s["name"] == "emb")
    finally:
        server.stop()
        provider.stop()
    items = sum(len(g) for g in groups)
    failed = sum(s is None for g in scores for s in g)
    return {"items_s": items / seconds, "seconds": seconds, "failed": failed,
            "tpm_used": stats["prompt_tokens_total"] / seconds * 60,
            "limited": stats["rate_limited_total"], "scores": scores,
            "ratio": source.get("embedding_token_ratio", source.get("prompt_token_ratio"))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arbiter", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--baseline", type=Path, required=True)
    p.add_argument("--prompts", type=int, default=48)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--words", type=int, default=12, help="words per rollout and reference")
    p.add_argument("--tpm", type=int, default=60000, help="the provider's tokens per minute")
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--concurrency", type=int, default=8)
    args = p.parse_args()
    groups = make_groups(args.prompts, args.group, args.words)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, binary in (("baseline", args.baseline), ("arbiter", args.arbiter)):
            rows[name] = run(binary, groups, args, tmp)
    if rows["baseline"]["scores"] != rows["arbiter"]["scores"]:
        print("the two binaries' scores differ", file=sys.stderr)
        return 1
    n = args.prompts * args.group
    print(f"\n{args.prompts} prompts × {args.group} rollouts = {n} `embedding` items, "
          f"~{args.words} words a text, one request per group, {args.concurrency} in flight; "
          f"provider and source at {args.tpm:,} tokens/min (1 s burst), "
          f"{args.latency_ms:g} ms latency\n")
    print("| binary | items/s | seconds | provider tokens/min used | 429s | failed | "
          "learned ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in ("baseline", "arbiter"):
        r = rows[name]
        print(f"| {name} | {r['items_s']:.1f} | {r['seconds']:.1f} | {r['tpm_used']:,.0f} | "
              f"{r['limited']} | {r['failed']} | {r['ratio']:.3f} |")
    print(f"\narbiter ÷ baseline items/s: "
          f"{rows['arbiter']['items_s'] / rows['baseline']['items_s']:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
