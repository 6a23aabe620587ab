#!/usr/bin/env python3
"""Does Arbiter give memory back after a burst? Runs the server under each allocator variant,
side by side in one run, and prints a table of resident memory (RSS):

  warm     after a warm-up of small requests
  peak     the highest RSS seen during the bursts
  idle     RSS after the bursts, once the server has sat idle for --idle-s seconds
  kept     (idle - warm) / (peak - warm): how much of the burst's growth stayed

Variants: `as built` (the build as it is: jemalloc, purged once the server goes idle after
work, server.return_memory; see docs/architecture.md), `untrimmed` (server.return_memory =
false: the allocator's own decay alone), and with --glibc-bin, a build configured with
-DARBITER_JEMALLOC=OFF (glibc's malloc, trimmed the same way).

Each burst: --big large /v1/score requests (--items lexical items of ~--chars characters each,
four at a time) and --small single-item requests from 32 threads, as careless clients send them.

  python3 bench/memory_bench.py --bin build/arbiter [--glibc-bin build-glibc/arbiter] [--rounds 3]
                                [--plot bench/results/memory.png]
"""
import argparse
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
import http.client

def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def start(binary, env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    env["ARBITER_DEFAULT_EMBEDDER_DIR"] = ""
    env.update(env_extra)
    proc = subprocess.Popen([binary, "serve", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, text=True)
    line = proc.stdout.readline()
    port = int(line.strip().rsplit(":", 1)[1])
    return proc, port


def post(port, body, conn=None):
    own = conn is None
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", "/v1/score", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        if own:
            c.close()


def text(rng, chars):
    words = []
    n = 0
    while n < chars:
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        words.append(w)
        n += len(w) + 1
    return " ".join(words)


def big_body(rng, items, chars):
    return json.dumps({"items": [{"reward": "lexical", "solution_str": text(rng, chars),
                                  "ground_truth": text(rng, chars)} for _ in range(items)]})


def small_body(rng):
    return json.dumps({"items": [{"reward": "lexical", "solution_str": text(rng, 80),
                                  "ground_truth": text(rng, 80)}]})


def run_variant(name, binary, env, args, bodies, small):
    proc, port = start(binary, env)
    peak = 0.0
    samples = []
    t0 = time.monotonic()
    stop = threading.Event()

    def sampler():
        nonlocal peak
        while not stop.is_set():
            m = rss_mb(proc.pid)
            peak = max(peak, m)
            samples.append((time.monotonic() - t0, m))
            time.sleep(0.1)

    try:
        for b in small[:200]:
            post(port, b)
        time.sleep(1.0)
        warm = rss_mb(proc.pid)
        threading.Thread(target=sampler, daemon=True).start()
        idle_after = []
        for _ in range(args.rounds):
            with ThreadPoolExecutor(4) as pool:
                statuses = list(pool.map(lambda b: post(port, b), bodies))
            assert all(s == 200 for s in statuses), statuses

            def singles(chunk):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                try:
                    return [post(port, b, c) for b in chunk]
                finally:
                    c.close()
            chunks = [small[i::32] for i in range(32)]
            with ThreadPoolExecutor(32) as pool:
                for got in pool.map(singles, chunks):
                    assert all(s == 200 for s in got)
            time.sleep(args.idle_s)
            idle_after.append(rss_mb(proc.pid))
        stop.set()
        return {"variant": name, "warm": warm, "peak": peak, "idle": idle_after,
                "samples": samples}
    finally:
        stop.set()
        proc.terminate()
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/arbiter")
    ap.add_argument("--glibc-bin",
                    help="a build with -DARBITER_JEMALLOC=OFF, run as a third variant")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--big", type=int, default=24, help="large requests per burst")
    ap.add_argument("--items", type=int, default=8192)
    ap.add_argument("--chars", type=int, default=120)
    ap.add_argument("--small", type=int, default=3000, help="single-item requests per burst")
    ap.add_argument("--idle-s", type=float, default=8.0)
    ap.add_argument("--plot", help="write RSS over time to this PNG (needs matplotlib)")
    args = ap.parse_args()

    rng = random.Random(1)
    print(f"building {args.big} bodies of {args.items} items ...", file=sys.stderr)
    bodies = [big_body(rng, args.items, args.chars) for _ in range(args.big)]
    small = [small_body(rng) for _ in range(args.small)]
    print(f"big body: {len(bodies[0]) / 1e6:.1f} MB", file=sys.stderr)

    variants = [("as built", args.bin, {}),
                ("untrimmed", args.bin, {"ARBITER_SERVER_RETURN_MEMORY": "0"})]
    if args.glibc_bin:
        variants.append(("glibc build", args.glibc_bin, {}))
    results = []
    for name, binary, env in variants:
        print(f"== {name}", file=sys.stderr)
        results.append(run_variant(name, binary, env, args, bodies, small))

    idle_cols = " | ".join(f"idle {i + 1}" for i in range(args.rounds))
    print(f"\n| variant | warm MB | peak MB | {idle_cols} | kept |")
    print("|---|---|---|" + "---|" * args.rounds + "---|")
    for r in results:
        grown = r["peak"] - r["warm"]
        kept = (r["idle"][-1] - r["warm"]) / grown if grown > 0 else 0.0
        idles = " | ".join(f"{m:.0f}" for m in r["idle"])
        print(f"| {r['variant']} | {r['warm']:.0f} | {r['peak']:.0f} | {idles} | {kept:.0%} |")

    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4))
        for r in results:
            ax.plot([t for t, _ in r["samples"]], [m for _, m in r["samples"]], label=r["variant"])
        ax.set_xlabel("seconds")
        ax.set_ylabel("RSS (MB)")
        ax.set_title("Arbiter RSS through bursts and idle periods")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
