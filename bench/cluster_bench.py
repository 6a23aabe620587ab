#!/usr/bin/env python3
"""Cluster benchmark: a CPU reward (lexical) served by worker node processes against the same
number of CPU workers inside one server process.

For each N in --nodes (default 1 2 4), in turn:

- single: `arbiter serve` with `[cpu] workers = N`;
- cluster: `arbiter serve --cluster-port P` with `[cpu] enabled = false` (the coordinator only
  routes) and N `arbiter worker --join` processes of one CPU worker each, all on loopback;
- cluster+tls (with --tls): the same with mutual TLS (certificates from
  deploy/certs/make-certs.sh).

Each setup is driven by arbiter-loadgen twice: 256-item batches on 4 connections
(throughput, items/s) and single-item requests on one connection (latency: what the remote hop
adds, p50/p99). The setups of one N run back to back (with --repeats R, R interleaved rounds
and medians), so compare the ratio column, not absolute numbers across machines. Every run's scores are checked against difflib first.

Prints a markdown table and writes OUT/cluster_bench.json.

    python3 bench/cluster_bench.py                      # after building build/arbiter
    python3 bench/cluster_bench.py --nodes 1 2 --duration-s 4
    python3 bench/cluster_bench.py --tls                # and with mutual TLS
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import platform
import random
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    print(msg, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def texts(rng: random.Random, n: int, size: int) -> List[str]:
    words = ("the answer is so then x y z we get total sum of both sides value "
             "step one two three four").split()
    out = []
    for _ in range(n):
        t = []
        while sum(len(w) + 1 for w in t) < size:
            t.append(rng.choice(words))
        out.append(" ".join(t))
    return out


def bodies(path: Path, items: int, count: int, size: int, seed: int) -> List[Dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        sols, refs = texts(rng, items, size), texts(rng, items, size)
        out.append({"items": [{"data_source": "bench", "reward": "lexical", "solution_str": s,
                               "ground_truth": r} for s, r in zip(sols, refs)]})
    path.write_text("\n".join(json.dumps(b) for b in out) + "\n")
    return out


def post(url: str, body: Dict) -> Dict:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def tls_toml(pki: Path, member: str, kind: str) -> str:
    if kind != "cluster+tls":
        return ""
    return (f'[cluster]\ncertificate = "{pki / (member + ".pem")}"\n'
            f'key = "{pki / (member + ".key")}"\nca = "{pki / "ca.pem"}"\n')


class Setup:
    """A server (and its nodes) for one row; stop() ends them all."""

    def __init__(self, binary: Path, kind: str, n: int, workdir: Path, pki: Path = None):
        self.procs: List[subprocess.Popen] = []
        env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
        env["ARBITER_DEFAULT_EMBEDDER_DIR"] = ""
        cfg = workdir / f"{kind}-{n}.toml"
        args = [str(binary), "serve", "--port", "0", "--config", str(cfg)]
        if kind == "single":
            cfg.write_text(f"[cpu]\nworkers = {n}\n")
        else:
            port = free_port()
            cfg.write_text("[cpu]\nenabled = false\n" + tls_toml(pki, "coordinator", kind))
            args += ["--cluster-port", str(port)]
        server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, env=env)
        self.procs.append(server)
        line = server.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"server did not start: {line!r}")
        self.url = line.split("listening on ", 1)[1]
        if kind != "single":
            for i in range(n):
                node_cfg = workdir / f"{kind}-{n}-node.toml"
                node_cfg.write_text(tls_toml(pki, "node", kind))
                log_path = workdir / f"{kind}-{n}-node-{i}.log"
                with open(log_path, "w") as log_file:
                    node = subprocess.Popen(
                        [str(binary), "worker", "--join", f"127.0.0.1:{port}", "--name",
                         f"n{i}", "--cpu-workers", "1", "--config", str(node_cfg)],
                        stderr=log_file, text=True, env=env)
                self.procs.append(node)
                deadline = time.time() + 15
                while "joined" not in log_path.read_text():
                    if time.time() > deadline or node.poll() is not None:
                        self.stop()
                        raise RuntimeError(f"node n{i} did not join: {log_path.read_text()}")
                    time.sleep(0.05)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def check_scores(url: str, body: Dict) -> None:
    got = post(url + "/v1/score", body)["results"]
    for item, r in zip(body["items"], got):
        want = difflib.SequenceMatcher(None, item["solution_str"].lower(),
                                       item["ground_truth"].lower()).ratio()
        if r["status"] != "ok" or abs(r["score"] - want) > 1e-9:
            raise RuntimeError(f"wrong answer from {url}: {r} (difflib {want})")


def loadgen(args, url: str, body_file: Path, items: int, conns: int) -> Dict:
    cmd = [str(args.loadgen), "--url", url + "/v1/score", "--body-file", str(body_file),
           "--body-lines", "--items-per-request", str(items), "--connections", str(conns),
           "--duration-s", str(args.duration_s), "--warmup-s", str(args.warmup_s)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=args.duration_s + args.warmup_s + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"loadgen failed: {shlex.join(cmd)}\n{proc.stderr}")
    result = json.loads([line for line in proc.stdout.splitlines() if line.strip()][-1])
    if result["errors"] or any(n for code, n in result["status"].items() if code != "200"):
        raise RuntimeError(f"loadgen saw errors: {result}")
    result["command"] = shlex.join(cmd)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arbiter", type=Path,
                   default=Path(os.environ.get("ARBITER_BIN", REPO / "build" / "arbiter")))
    p.add_argument("--loadgen", type=Path, default=REPO / "build" / "arbiter-loadgen")
    p.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--duration-s", type=float, default=6.0)
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--batch-items", type=int, default=256)
    p.add_argument("--text-chars", type=int, default=200)
    p.add_argument("--tls", action="store_true", help="add rows with mutual TLS")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs per row, interleaved; the table shows medians")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    for path in (args.arbiter, args.loadgen):
        if not path.exists():
            log(f"error: {path} not found; build it first (cmake --build build)")
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    batch_file, single_file = work / "batch.jsonl", work / "single.jsonl"
    batch_bodies = bodies(batch_file, args.batch_items, 16, args.text_chars, 1)
    bodies(single_file, 1, 64, args.text_chars, 2)
    log(f"# cluster_bench: {platform.node()}, {os.cpu_count()} cores, lexical "
        f"{args.text_chars}-char texts, {args.duration_s}s per run")
    pki = work / "pki"
    kinds = ["single", "cluster"]
    if args.tls:
        subprocess.run(["bash", str(REPO / "deploy" / "certs" / "make-certs.sh"), str(pki),
                        "coordinator", "node"], check=True, capture_output=True)
        kinds.append("cluster+tls")
    runs: Dict[tuple, List[Dict]] = {}
    for rep in range(args.repeats):
        for n in args.nodes:
            for kind in kinds:
                log(f"  [{rep + 1}/{args.repeats}] {kind}, {n} worker{'s' if n > 1 else ''} ...")
                setup = Setup(args.arbiter, kind, n, work, pki)
                try:
                    check_scores(setup.url, batch_bodies[0])
                    batch = loadgen(args, setup.url, batch_file, args.batch_items, 4)
                    single = loadgen(args, setup.url, single_file, 1, 1)
                finally:
                    setup.stop()
                runs.setdefault((kind, n), []).append({"batch": batch, "single": single})

    def median(kind: str, n: int, scenario: str, key: str) -> float:
        return statistics.median(r[scenario][key] for r in runs[(kind, n)])

    log("")
    log(f"Medians of {args.repeats} interleaved run(s) per row.")
    log("")
    log("| setup | CPU workers | batch items/s | × single process | single-item p50 ms "
        "| p99 ms | p50 added by the hop ms |")
    log("|---|---|---|---|---|---|---|")
    rows = []
    for n in args.nodes:
        for kind in kinds:
            items = median(kind, n, "batch", "items_per_s")
            p50 = median(kind, n, "single", "p50_ms")
            p99 = median(kind, n, "single", "p99_ms")
            ratio = items / median("single", n, "batch", "items_per_s")
            hop = p50 - median("single", n, "single", "p50_ms")
            name = ("one process" if kind == "single"
                    else f"coordinator + {n} node process{'es' if n > 1 else ''}"
                    + (", TLS" if kind == "cluster+tls" else ""))
            log(f"| {name} | {n} | {items:.0f} | {ratio:.2f} | {p50:.2f} | {p99:.2f} "
                f"| {hop:+.2f} |")
            rows.append({"setup": kind, "workers": n, "items_per_s": items, "ratio": ratio,
                         "p50_ms": p50, "p99_ms": p99, "runs": runs[(kind, n)]})
    (args.out / "cluster_bench.json").write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))
    log(f"\nwrote {args.out / 'cluster_bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
