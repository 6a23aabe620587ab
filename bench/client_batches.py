#!/usr/bin/env python3
"""The Python client's long lists: `client.score(items)` with more items than `batch_size`
goes in several requests. Sent one after another (as the client did before), a list of 1024
judge items in requests of 256 waits four judge latencies; up to SUBREQUESTS_IN_FLIGHT at
once, about one.

One arbiter-fake-provider answers chat calls after a fixed latency; one `arbiter serve` has it
as its judge source (concurrency open, no pacing). For each number of requests in flight (1 =
one after another), the same client scores fresh judge items (distinct texts, so nothing comes
from the cache), a few rounds each, side by side in one invocation; the table gives the
seconds per call and the ratio against 1.

    python3 bench/client_batches.py             # needs build/arbiter, build/arbiter-fake-provider
    python3 bench/client_batches.py --items 2048 --batch-size 128 --in-flight 1 2 4 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "clients" / "python"))

from arbiter_testing import Provider, source_toml, start_server  # noqa: E402

import arbiter_client.client as client_module  # noqa: E402
from arbiter_client import ArbiterClient  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--latency-ms", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()

    provider = Provider("--latency-median-ms", str(args.latency_ms), "--latency-p99-ms",
                        str(args.latency_ms))
    config = (source_toml("judge", provider.url, max_concurrency=4 * args.items,
                          initial_concurrency=4 * args.items, max_batch_items=1)
              + '\n[rewards.j]\nkind = "judge"\nsources = ["judge"]\n'
              + f'\n[[scheduler.priorities]]\nname = "normal"\ncapacity = {8 * args.items}\n')
    server = start_server(Path(tempfile.mkdtemp()), config)
    rows = []
    try:
        for in_flight in args.in_flight:
            client_module.SUBREQUESTS_IN_FLIGHT = in_flight
            client = ArbiterClient(server.url, batch_size=args.batch_size, on_failure="none")
            took = []
            for rnd in range(args.rounds):
                items = [{"reward": "j", "solution_str": f"{in_flight}/{rnd}/{k}",
                          "ground_truth": "g"} for k in range(args.items)]
                start = time.monotonic()
                results = client.score(items)
                took.append(time.monotonic() - start)
                failed = sum(r.failed for r in results)
                if failed:
                    raise SystemExit(f"{failed} items failed with {in_flight} in flight")
            client.close()
            rows.append((in_flight, statistics.median(took), min(took)))
    finally:
        server.kill()
        provider.kill()
    base = rows[0][1]
    print(f"{args.items} judge items, batch_size {args.batch_size}, judge latency "
          f"{args.latency_ms} ms, {args.rounds} rounds each\n")
    print("| requests in flight | median s | best s | vs first |\n|---|---|---|---|")
    for in_flight, median, best in rows:
        print(f"| {in_flight} | {median:.2f} | {best:.2f} | {base / median:.2f}× |")


if __name__ == "__main__":
    main()
