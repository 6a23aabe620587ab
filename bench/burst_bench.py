#!/usr/bin/env python3
"""The "single-sample burst" benchmark: trainers (verl, OpenRLHF >= 0.9.1, slime) send one
sample per request, all at once. How does the ingress's micro-batching change the calls an
embedding endpoint sees, the makespan and the per-request latency?

One arbiter-fake-provider serves /v1/embeddings with a fixed latency and a requests-per-minute
limit. For each `batch_wait_ms` (0 = no window: every item goes out as soon as the source has
a free slot), a fresh `arbiter serve` with that provider as its only `embed` source takes N
concurrent single-sample slime `/remote_rm` requests for the `embedding` reward (a candidate
and one reference: two texts per item). Everything runs side by side in one invocation, on
fresh processes, and the table gives each run's figures and ratios against `batch_wait_ms = 0`.

    python3 bench/burst_bench.py                 # needs build/arbiter, build/arbiter-fake-provider
    python3 bench/burst_bench.py --requests 2000 --concurrency 128 --waits 0 2 5 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))

from arbiter_testing import Provider, source_toml, start_server  # noqa: E402


def run(args, wait_ms, tmp):
    provider = Provider("--latency-median-ms", str(args.latency_ms), "--latency-p99-ms",
                        str(args.latency_ms * 2), "--rpm", str(args.rpm), "--burst-seconds", "1")
    config = ('[protocols]\nreward = "embedding"\n'
              + source_toml("emb", provider.url, caps=("embed",), batch_wait_ms=wait_ms,
                            requests_per_minute=args.rpm, burst_ms=1000,
                            max_concurrency=args.source_concurrency)
              + "[routing]\ncache_capacity = 0\ncoalesce = false\n")
    server = start_server(tmp, config)
    try:
        def one(i):
            conn = server.connection(timeout=120)
            t0 = time.perf_counter()
            status, _, body = server.request(
                "POST", "/remote_rm",
                {"prompt": "q", "response": f"candidate answer {i} with words",
                 "label": f"reference answer {i % 97}"}, conn=conn)
            conn.close()
            return status, body, time.perf_counter() - t0

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
            answers = list(pool.map(one, range(args.requests)))
        makespan = time.perf_counter() - start
        stats = provider.stats()
    finally:
        server.stop()
        provider.kill()
    latencies = sorted(t for _, _, t in answers)
    calls = sum(v for v in stats["requests"].get("/v1/embeddings", {}).values())
    return {
        "batch_wait_ms": wait_ms,
        "ok": sum(1 for s, b, _ in answers if s == 200 and isinstance(b, float)),
        "provider_calls": calls,
        "rate_limited": stats["rate_limited_total"],
        "makespan_s": makespan,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=64, help="client threads")
    p.add_argument("--latency-ms", type=int, default=40, help="provider median latency")
    p.add_argument("--rpm", type=int, default=6000, help="provider requests per minute")
    p.add_argument("--source-concurrency", type=int, default=16)
    p.add_argument("--waits", type=int, nargs="+", default=[0, 5, 20])
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run(args, w, tmp) for w in args.waits]
    base = rows[0]
    print(f"{args.requests} single-sample /remote_rm requests (embedding reward), "
          f"{args.concurrency} concurrent; provider {args.latency_ms} ms median, "
          f"{args.rpm} RPM; source concurrency {args.source_concurrency}\n")
    print("| batch_wait_ms | ok | provider calls | items/call | 429s | makespan s | "
          "× makespan | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch_wait_ms']} | {r['ok']} | {r['provider_calls']} | "
              f"{args.requests / max(r['provider_calls'], 1):.1f} | {r['rate_limited']} | "
              f"{r['makespan_s']:.2f} | {r['makespan_s'] / base['makespan_s']:.2f} | "
              f"{r['p50_ms']:.0f} | {r['p99_ms']:.0f} |")
    (args.out / "burst_bench.json").write_text(json.dumps({"args": vars(args) | {"out": str(args.out)},
                                                           "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
