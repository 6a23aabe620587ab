#!/usr/bin/env python3
"""verl's rule rewards: verl 0.9.1's Python functions vs Arbiter's native ports, one run.

On one generated corpus (tests/backends/make_rule_reward_corpus.py: gsm8k, math, math_dapo
and search_r1_qa_em outputs, verl's data_source names, each after --reasoning-chars of
reasoning text):

- verl: `default_compute_score`'s dispatch by data_source (its if/elif chain, replicated:
  verl's __init__ imports ray), called the way verl's naive reward manager calls it, one item
  at a time in one process, for at least --verl-s seconds; items/s and per-call p50/p99.
- Arbiter, batches: `POST /v1/score` with --batch-size items per request over
  --batch-connections keep-alive connections (arbiter-loadgen).
- Arbiter, single items: one item per request over --single-connections connections.

Items with verl's default options carry only data_source (Arbiter's default data_source map
picks the reward); the others name the reward and carry the options in extra_info. With
--row-extra-info every item's extra_info also carries the dataset row that verl's data
preprocessing puts there and the verl client forwards (split, index, the question and the
reference solution, about 700 characters); verl's functions ignore it. Every
Arbiter score is first checked against verl's: the run stops on any difference. Prints a
markdown table with the ratios to verl and writes OUT/rule_rewards.json. About a minute.

    pip install verl==0.9.1 --no-deps     # the oracle (its modules are loaded by path)
    python3 bench/rule_rewards.py         # after building build/arbiter and arbiter-loadgen
"""
import argparse
import importlib.util
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import score_bench  # noqa: E402  start_arbiter, run_loadgen, summarize, post_json, log

_spec = importlib.util.spec_from_file_location(
    "make_rule_reward_corpus", REPO / "tests" / "backends" / "make_rule_reward_corpus.py")
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)


def verl_default_compute_score(functions):
    """verl 0.9.1's default_compute_score for the data sources of the four ported functions,
    branch for branch (the same comparisons in the same order, the same result conversion)."""
    gsm8k, math_reward = functions["gsm8k"], functions["math"]
    math_dapo, search_r1 = functions["math_dapo"], functions["search_r1_qa_em"]

    def default_compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if data_source == "openai/gsm8k":
            res = gsm8k(solution_str, ground_truth)
        elif data_source in ["lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval",
                             "HuggingFaceH4/MATH-500"]:
            res = math_reward(solution_str, ground_truth)
        elif data_source in ["math_dapo", "math", "math_dapo_reasoning"] \
                or data_source.startswith("aime"):
            res = math_dapo(solution_str, ground_truth)
        elif data_source in ["searchR1_nq", "searchR1_triviaqa", "searchR1_popqa",
                             "searchR1_hotpotqa", "searchR1_2wikimultihopqa",
                             "searchR1_musique", "searchR1_bamboogle"]:
            res = search_r1(solution_str, ground_truth)
        else:
            raise NotImplementedError(f"Reward function is not implemented for {data_source=}")
        if isinstance(res, dict):
            return res
        elif isinstance(res, int | float | bool):
            return float(res)
        else:
            return float(res[0])
    return default_compute_score


def time_verl(cases, functions, min_seconds):
    """Passes over `cases` until `min_seconds` have gone by, each call timed: a case with
    options calls its function with them (a custom_reward_function with reward_kwargs), the
    others go through default_compute_score."""
    dispatch = verl_default_compute_score(functions)
    clock = time.perf_counter
    lat = []
    calls = 0
    # The functions print (search_r1 at random, math_reward its exceptions): to /dev/null,
    # once for the whole run, as a trainer's stdout would take them.
    with open(os.devnull, "w") as sink, corpus.contextlib.redirect_stdout(sink):
        start = clock()
        while True:
            for c in cases:
                options = c["options"]
                t = clock()
                if options:
                    functions[c["fn"]](c["solution_str"], c["ground_truth"], **options)
                else:
                    dispatch(c["data_source"], c["solution_str"], c["ground_truth"])
                lat.append(clock() - t)
            calls += len(cases)
            elapsed = clock() - start
            if elapsed >= min_seconds:
                break
    lat.sort()
    ms = lambda q: lat[min(len(lat) - 1, int(len(lat) * q))] * 1000.0  # noqa: E731
    return {"items_per_s": calls / elapsed, "p50_ms": ms(0.5), "p99_ms": ms(0.99),
            "items": calls, "passes": calls // len(cases), "seconds": elapsed}


def check_equal(url, cases, batch=1000):
    """Every case through /v1/score; exits naming the differences when any score is not
    verl's."""
    mismatches = []
    for start in range(0, len(cases), batch):
        chunk = cases[start:start + batch]
        results, why = corpus.post(url, [item_of(c) for c in chunk], 120.0)
        if results is None:
            sys.exit(f"ABORT: /v1/score refused the correctness batch at case {start}: {why}")
        for c, r in zip(chunk, results):
            got = corpus.got_of(c["fn"], r)
            if got != c["expected"]:
                mismatches.append((c, got))
    if mismatches:
        for c, got in mismatches[:10]:
            print(f"MISMATCH {json.dumps(c, ensure_ascii=False)}\n  got {got}", file=sys.stderr)
        sys.exit(f"ABORT: {len(mismatches)} of {len(cases)} Arbiter scores differ from verl's; "
                 "no timing is meaningful until they are equal")
    score_bench.log(f"all {len(cases)} Arbiter scores equal verl's")


def add_rows(cases, seed):
    """Gives each case the extra_info row verl's gsm8k preprocessing writes (split, index,
    question, answer), its texts cut from other cases' outputs; the case's options stay."""
    rng = random.Random(seed)
    texts = [c["solution_str"] for c in cases]
    for index, c in enumerate(cases):
        question, answer = rng.choice(texts)[:300], rng.choice(texts)[:400]
        c["row"] = {"split": "train", "index": index, "question": question, "answer": answer}


def item_of(case):
    """corpus.item_of, with the case's dataset row (add_rows) in extra_info."""
    item = corpus.item_of(case)
    if "row" in case:
        item["extra_info"] = {**case["row"], **item.get("extra_info", {})}
    return item


def write_bodies(cases, path, items_per_request):
    """The load generator's request bodies, one per line, `items_per_request` cases each."""
    with path.open("w", encoding="utf-8") as f:
        for start in range(0, len(cases) - items_per_request + 1, items_per_request):
            chunk = cases[start:start + items_per_request]
            f.write(json.dumps({"items": [item_of(c) for c in chunk]},
                               ensure_ascii=False) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arbiter", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--loadgen", type=Path, default=REPO / "build" / "arbiter-loadgen")
    p.add_argument("--verl-dir", help="verl's package folder (default: the installed one; "
                                      "pip install verl==0.9.1 --no-deps)")
    p.add_argument("--per-function", type=int, default=2500, help="corpus cases per function")
    p.add_argument("--seed", type=int, default=20261124)
    p.add_argument("--reasoning-chars", type=int, default=2000,
                   help="reasoning text before each output, on average (0: the bare outputs)")
    p.add_argument("--row-extra-info", action="store_true",
                   help="extra_info carries verl's dataset row too (as the verl client sends it)")
    p.add_argument("--verl-s", type=float, default=5.0,
                   help="least seconds of verl calls (whole passes over the corpus)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batch-connections", type=int, default=4)
    p.add_argument("--single-connections", type=int, default=32)
    p.add_argument("--duration-s", type=float, default=10.0, help="measured seconds per run")
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--workers", type=int, default=0,
                   help="server cpu.workers (0: the server's default)")
    p.add_argument("--loadgen-threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for binary in (args.arbiter, args.loadgen):
        if not binary.is_file():
            sys.exit(f"{binary} not found: build the project first (cmake --build build)")

    machine = score_bench.machine_info()
    functions = corpus.load_functions(corpus.verl_dir(args.verl_dir))
    cases = list(corpus.generate(functions, args.seed, args.per_function, args.reasoning_chars))
    if args.row_extra_info:
        add_rows(cases, args.seed)
    mean_chars = statistics.mean(len(c["solution_str"]) for c in cases)
    score_bench.log(f"corpus: {len(cases)} cases ({args.per_function} per function), "
                    f"solution_str {mean_chars:.0f} characters on average, "
                    f"{sum(not c['options'] for c in cases)} with verl's default options")

    verl = time_verl(cases, functions, args.verl_s)
    score_bench.log(f"verl: {verl['items_per_s']:.0f} items/s over {verl['passes']} passes")

    extra = []
    if args.workers:
        config = args.out / "rule_rewards.toml"
        config.write_text(f"[cpu]\nworkers = {args.workers}\n")
        extra = ["--config", str(config)]
    srv = score_bench.start_arbiter(args.arbiter, extra, args.out, 30.0)
    rows = {"verl (Python, one at a time)": verl}
    try:
        check_equal(srv.url, cases)
        with tempfile.TemporaryDirectory() as tmp:
            batch_file = Path(tmp) / "batch.jsonl"
            single_file = Path(tmp) / "single.jsonl"
            write_bodies(cases, batch_file, args.batch_size)
            write_bodies(cases, single_file, 1)
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
          f"{mean_chars:.0f} characters on average"
          f"{', with verl dataset rows in extra_info' if args.row_extra_info else ''}, "
          f"{machine['cpu_model']}, "
          f"{machine['nproc']} cores, load {machine['loadavg_1m']}, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print("| path | items/s | p50 ms | p99 ms | × verl | errors |")
    print("|---|---|---|---|---|---|")
    for label, r in rows.items():
        errors = r.get("errors", 0) + sum(n for code, n in r.get("status", {}).items()
                                          if code != "200")
        print(f"| {label} | {r['items_per_s']:,.0f} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | "
              f"{r['items_per_s'] / verl['items_per_s']:.1f} | {errors} |")
    print("\n(verl's latencies are per function call; Arbiter's per HTTP request.)")
    (args.out / "rule_rewards.json").write_text(json.dumps(
        {"rows": rows, "cases": len(cases), "mean_chars": mean_chars, "machine": machine,
         "args": {k: str(v) for k, v in vars(args).items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
