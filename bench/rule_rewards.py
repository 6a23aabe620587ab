#!/usr/bin/env python3
"""verl's rule rewards: verl 0.9.1's Python functions vs Arbiter's native ports, one run.

On one generated corpus (tests/backends/make_rule_reward_corpus.py: gsm8k, math, math_dapo
and search_r1_qa_em outputs, verl's data_source names):

- verl: `default_compute_score`'s dispatch by data_source, called the way verl's naive reward
  manager calls it, one item at a time in one process; items/s and per-call p50/p99.
- Arbiter, batches: `POST /v1/score` with --batch-size items per request over
  --batch-connections keep-alive connections (arbiter-loadgen).
- Arbiter, single items: one item per request over --single-connections connections.

Every Arbiter score is first checked against verl's (the run stops on a mismatch). Prints a
markdown table with the ratios to verl and writes OUT/rule_rewards.json.

    pip install verl==0.9.1 --no-deps     # the oracle (its modules are loaded by path)
    python3 bench/rule_rewards.py         # after building build/arbiter and arbiter-loadgen
"""
import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import score_bench  # noqa: E402  start_arbiter, run_loadgen, summarize, post_json

spec = importlib.util.spec_from_file_location(
    "make_rule_reward_corpus", REPO / "tests" / "backends" / "make_rule_reward_corpus.py")
corpus = importlib.util.module_from_spec(spec)
spec.loader.exec_module(corpus)


def verl_dispatch(functions):
    """default_compute_score's branches for the four functions (verl's __init__ imports ray,
    so it cannot be imported without verl's dependencies)."""
    by_source = {}
    for fn, names in corpus.DATA_SOURCES.items():
        for name in names:
            by_source[name] = functions[fn]

    def compute_score(data_source, solution_str, ground_truth, options):
        res = by_source[data_source](solution_str, ground_truth, **options)
        return res if isinstance(res, dict) else float(res)
    return compute_score


def item_of(case):
    item = {"solution_str": case["solution_str"], "ground_truth": case["ground_truth"]}
    if case["options"]:
        item.update(reward=case["fn"], extra_info=case["options"])
    else:
        item["data_source"] = case["data_source"]
    return item


def time_verl(cases, compute_score):
    lat = []
    start = time.perf_counter()
    for c in cases:
        t = time.perf_counter()
        with corpus.contextlib.redirect_stdout(corpus.io.StringIO()):
            compute_score(c["data_source"], c["solution_str"], c["ground_truth"], c["options"])
        lat.append((time.perf_counter() - t) * 1000.0)
    elapsed = time.perf_counter() - start
    lat.sort()
    return {"items_per_s": len(cases) / elapsed, "p50_ms": lat[len(lat) // 2],
            "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))], "items": len(cases)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arbiter", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--loadgen", type=Path, default=REPO / "build" / "arbiter-loadgen")
    p.add_argument("--verl-dir", help="verl's package folder (default: the installed one)")
    p.add_argument("--per-function", type=int, default=2500, help="corpus cases per function")
    p.add_argument("--seed", type=int, default=20261124)
    p.add_argument("--reasoning-chars", type=int, default=2000,
                   help="reasoning text before each output, on average (0: the bare outputs)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batch-connections", type=int, default=4)
    p.add_argument("--single-connections", type=int, default=32)
    p.add_argument("--duration-s", type=float, default=10.0)
    p.add_argument("--workers", type=int, default=0,
                   help="server cpu.workers (0: the server's default)")
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--loadgen-threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    functions = corpus.load_functions(corpus.verl_dir(args.verl_dir))
    cases = list(corpus.generate(functions, args.seed, args.per_function, args.reasoning_chars))
    mean_chars = statistics.mean(len(c["solution_str"]) for c in cases)
    score_bench.log(f"corpus: {len(cases)} cases ({args.per_function} per function), "
                    f"solution_str {mean_chars:.0f} characters on average")

    verl = time_verl(cases, verl_dispatch(functions))
    score_bench.log(f"verl: {verl['items_per_s']:.0f} items/s")

    extra = []
    if args.workers:
        config = args.out / "rule_rewards.toml"
        config.write_text(f"[cpu]\nworkers = {args.workers}\n")
        extra = ["--config", str(config)]
    srv = score_bench.start_arbiter(args.arbiter, extra, args.out, 30.0)
    rows = {"verl (Python, one at a time)": verl}
    try:
        # Correctness first: every score equal to verl's.
        for start in range(0, len(cases), 1000):
            chunk = cases[start:start + 1000]
            reply = score_bench.post_json(srv.url, {"items": [item_of(c) for c in chunk]}, 120)
            for c, r in zip(chunk, reply["results"]):
                got = {"score": r["score"], **(r.get("extra") or {})}
                if got != c["expected"]:
                    sys.exit(f"MISMATCH: {json.dumps(c, ensure_ascii=False)} got {got}")
        score_bench.log(f"all {len(cases)} Arbiter scores equal verl's")
        with tempfile.TemporaryDirectory() as tmp:
            batch_file = Path(tmp) / "batch.jsonl"
            single_file = Path(tmp) / "single.jsonl"
            with batch_file.open("w", encoding="utf-8") as f:
                for start in range(0, len(cases) - args.batch_size + 1, args.batch_size):
                    chunk = cases[start:start + args.batch_size]
                    f.write(json.dumps({"items": [item_of(c) for c in chunk]},
                                       ensure_ascii=False) + "\n")
            with single_file.open("w", encoding="utf-8") as f:
                for c in cases:
                    f.write(json.dumps({"items": [item_of(c)]}, ensure_ascii=False) + "\n")
            runs = [
                (f"Arbiter /v1/score, {args.batch_size}-item batches, "
                 f"{args.batch_connections} connections", batch_file, args.batch_size,
                 args.batch_connections),
                (f"Arbiter /v1/score, 1 item per request, {args.single_connections} connections",
                 single_file, 1, args.single_connections),
            ]
            for label, body_file, items, conns in runs:
                score_bench.log(f"running: {label}")
                r = score_bench.run_loadgen(args.loadgen, srv.url, body_file, items, conns, args)
                rows[label] = score_bench.summarize([r])
    finally:
        srv.stop()

    print(f"\nverl 0.9.1 rule rewards vs Arbiter, {len(cases)} cases of "
          f"{mean_chars:.0f} characters on average, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print("| path | items/s | p50 ms | p99 ms | × verl | errors |")
    print("|---|---|---|---|---|---|")
    for label, r in rows.items():
        errors = r.get("errors", 0) + sum(n for code, n in r.get("status", {}).items()
                                          if code != "200")
        print(f"| {label} | {r['items_per_s']:.0f} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | "
              f"{r['items_per_s'] / verl['items_per_s']:.1f} | {errors} |")
    print("\n(verl's latencies are per call; Arbiter's per HTTP request.)")
    (args.out / "rule_rewards.json").write_text(json.dumps(
        {"rows": rows, "cases": len(cases), "args": {k: str(v) for k, v in vars(args).items()}},
        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
