#!/usr/bin/env python3
"""The replay log's cost: the same load with `[replay] path` off and on, side by side, one run.

The log costs most where items are cheapest: one record per item, and nothing else slow to hide
it behind. So the load here is CPU rewards (lexical, a rule reward, exact_match), each answered
in microseconds:
- batches of --batch-size items over --batch-connections connections;
- one item per request over --single-connections connections (arbiter-loadgen).

Each shape runs --repeats times with the log off and on, alternating, each on a fresh server.
Reported: items/s and p50/p99 per request (medians over the repeats), the on/off ratio, and the
log's bytes per item with its written and dropped records (from /metrics). Prints a markdown
table and writes OUT/replay_overhead.json. About a minute and a half with the defaults.

    python3 bench/replay_overhead.py    # after building build/arbiter and arbiter-loadgen
"""
import argparse
import json
import random
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import score_bench  # noqa: E402  start_arbiter, run_loadgen, summarize, log, machine_info

WORDS = ("the cat sat on a mat while reasoning about numbers so the answer is clearly "
         "forty two because six times seven").split()


def items(n, seed):
    """CPU items of three kinds, a few hundred characters each (a short rollout's answer)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 80)))
        answer = rng.randint(1, 99)
        kind = i % 3
        if kind == 0:
            out.append({"reward": "lexical", "solution_str": text,
                        "ground_truth": [" ".join(rng.choice(WORDS) for _ in range(40))]})
        elif kind == 1:
            out.append({"data_source": "openai/gsm8k", "solution_str": f"{text} #### {answer}",
                        "ground_truth": str(rng.choice([answer, answer + 1]))})
        else:
            out.append({"reward": "exact_match", "solution_str": str(answer),
                        "ground_truth": [str(answer), "other"]})
    return out


def write_bodies(path, cases, per_request):
    with path.open("w") as f:
        for start in range(0, len(cases) - per_request + 1, per_request):
            f.write(json.dumps({"items": cases[start:start + per_request]}) + "\n")


def metric(url, name):
    """The sum of a metric's samples whose line starts with `name` (0 when absent)."""
    base = url.rsplit("/v1/score", 1)[0]
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arbiter", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--loadgen", type=Path, default=REPO / "build" / "arbiter-loadgen")
    p.add_argument("--cases", type=int, default=6000)
    p.add_argument("--seed", type=int, default=20261125)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batch-connections", type=int, default=4)
    p.add_argument("--single-connections", type=int, default=32)
    p.add_argument("--duration-s", type=float, default=8.0, help="measured seconds per run")
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--loadgen-threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for binary in (args.arbiter, args.loadgen):
        if not binary.is_file():
            sys.exit(f"{binary} not found: build the project first (cmake --build build)")
    machine = score_bench.machine_info()
    cases = items(args.cases, args.seed)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shapes = [(f"{args.batch_size}-item batches, {args.batch_connections} connections",
                   tmp / "batch.jsonl", args.batch_size, args.batch_connections),
                  (f"1 item per request, {args.single_connections} connections",
                   tmp / "single.jsonl", 1, args.single_connections)]
        for _, path, per, _ in shapes:
            write_bodies(path, cases, per)
        for label, path, per, conns in shapes:
            runs = {"off": [], "on": []}
            logged = {"bytes": 0.0, "written": 0.0, "dropped": 0.0, "items": 0}
            for repeat in range(args.repeats):
                for mode in ("off", "on"):
                    log_path = tmp / f"replay-{repeat}.jsonl"
                    config = tmp / f"{mode}.toml"
                    config.write_text(f'[replay]\npath = "{log_path}"\n' if mode == "on" else "")
                    srv = score_bench.start_arbiter(args.arbiter, ["--config", str(config)],
                                                    args.out, 30.0)
                    try:
                        score_bench.log(f"{label}: replay {mode} (repeat {repeat + 1})")
                        r = score_bench.run_loadgen(args.loadgen, srv.url, path, per, conns,
                                                    args)
                        runs[mode].append(r)
                        if mode == "on":
                            time.sleep(1.0)  # let the writer catch up before reading
                            logged["bytes"] += metric(srv.url, "arbiter_replay_bytes_total")
                            logged["written"] += metric(
                                srv.url, 'arbiter_replay_records_total{result="written"}')
                            logged["dropped"] += metric(
                                srv.url, 'arbiter_replay_records_total{result="dropped"}')
                            logged["items"] += metric(srv.url, "arbiter_items_total")
                    finally:
                        srv.stop()
            off = score_bench.summarize(runs["off"])
            on = score_bench.summarize(runs["on"])
            rows[label] = {"off": off, "on": on, "log": logged,
                           "ratio": on["items_per_s"] / off["items_per_s"]}

    print(f"\nReplay log off vs on, CPU rewards (lexical, gsm8k, exact_match), "
          f"{machine['cpu_model']}, {machine['nproc']} cores, load {machine['loadavg_1m']}, "
          f"{time.strftime('%Y-%m-%d')}, median of {args.repeats}\n")
    print("| shape | items/s off | items/s on | on/off | p99 ms off | p99 ms on | "
          "log bytes/item | records dropped |")
    print("|---|---|---|---|---|---|---|---|")
    for label, r in rows.items():
        lg = r["log"]
        per_item = lg["bytes"] / lg["written"] if lg["written"] else float("nan")
        print(f"| {label} | {r['off']['items_per_s']:,.0f} | {r['on']['items_per_s']:,.0f} | "
              f"{r['ratio']:.2f} | {r['off']['p99_ms']:.2f} | {r['on']['p99_ms']:.2f} | "
              f"{per_item:,.0f} | {lg['dropped']:.0f} of {lg['written'] + lg['dropped']:.0f} |")
    (args.out / "replay_overhead.json").write_text(json.dumps(
        {"rows": rows, "machine": machine, "args": {k: str(v) for k, v in vars(args).items()}},
        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
