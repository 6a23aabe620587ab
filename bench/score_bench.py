#!/usr/bin/env python3
"""Side-by-side benchmark: Arbiter's `POST /v1/score` vs a FastAPI + uvicorn twin.

Starts `arbiter serve --port 0` and bench/fastapi_server.py, generates deterministic request
bodies (lexical reward, answer-like texts of 20-300 characters), checks that both servers
return difflib's scores, then drives each server in turn with arbiter-loadgen (closed loop,
keep-alive) for two scenarios: single-item requests and 256-item batches. The servers are
never loaded at the same time; with --repeats the runs interleave (A, B, A, B, ...).

Prints a markdown table (items/s, latency p50/p90/p99, 429s, errors and the Arbiter/FastAPI
ratio), writes OUT/score_bench.json and OUT/score_bench.png (the plot needs matplotlib), and
stops both servers (SIGTERM, then wait) however the run ends.

    python3 bench/score_bench.py                        # after building build/arbiter
    python3 bench/score_bench.py --only fastapi --duration-s 5
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import platform
import queue
import random
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
SERVERS = ("arbiter", "fastapi")
LABEL = {"arbiter": "Arbiter", "fastapi": "FastAPI"}
SCENARIOS = ("single", "batch")


def log(msg: str) -> None:
    print(msg, flush=True)


# --------------------------------------------------------------------------------------------
# Request bodies


_OPENERS = [
    "Let's solve this step by step.", "First, note that", "We are given that", "To find the answer,",
    "Step 1:", "Consider the equation", "Recall that", "Starting from the definition,",
    "By the problem statement,", "Let x be the unknown.", "Using the formula for the area,",
]
_MIDDLES = [
    "{a} + {b} = {s}", "{a} * {b} = {p}", "so x = {a}", "the total is {s}", "which gives {p} / {b} = {a}",
    "subtracting {b} from both sides we get {a}", "the perimeter is 2 * ({a} + {b}) = {q}",
    "there are {a} apples and {b} oranges", "the ratio is {a}:{b}", "dividing by {b} leaves {a}",
    "since {a} is prime, it has no other divisors", "the sum of the first {a} integers is {t}",
    "π r² with r = {a} gives about {pi}", "{a} × {b} = {p}", "x ≤ {s} holds for every case",
    "the speed is {a} km/h over {b} hours, i.e. {p} km", "we check that {s} - {b} = {a}",
]
_CLOSERS = [
    "Therefore, the answer is \\boxed{{{a}}}.", "The answer is {s}.", "So the final answer is {p}.",
    "Hence x = {a}.", "Thus the result is {q}.", "Final answer: {t}",
]
_FILLER = ("so then thus because we note that it follows hence clearly the value of "
           "each term and both sides again").split()


def _numbers(rng: random.Random) -> Dict[str, Any]:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    return {"a": a, "b": b, "s": a + b, "p": a * b, "q": 2 * (a + b), "t": a * (a + 1) // 2,
            "pi": round(3.14159 * a * a, 2)}


def _clip(text: str, lo: int, hi: int, rng: random.Random) -> str:
    """Cuts text to at most hi characters at a word boundary; pads to at least lo."""
    while len(text) < lo:
        text += " " + rng.choice(_FILLER)
    if len(text) > hi:
        cut = text.rfind(" ", lo, hi)
        text = text[:cut if cut >= lo else hi]
    return text


def answer_text(rng: random.Random, lo: int = 20, hi: int = 300) -> str:
    """An answer-like text (reasoning steps, then a final answer) of lo..hi characters."""
    target = rng.randint(lo, hi)
    n = _numbers(rng)
    parts = [rng.choice(_OPENERS)]
    while sum(len(p) + 1 for p in parts) < target - 30:
        if rng.random() < 0.3:
            n = _numbers(rng)
        parts.append(rng.choice(_MIDDLES).format(**n) + rng.choice([",", ".", ";", ""]))
    parts.append(rng.choice(_CLOSERS).format(**n))
    text = " ".join(parts)
    if len(text) > target:  # keep the final answer: drop from the middle
        text = text[: max(lo, target - 40)].rsplit(" ", 1)[0] + " " + parts[-1]
    return _clip(text, lo, hi, rng)


def mutate(text: str, rng: random.Random, lo: int = 20, hi: int = 300) -> str:
    """A reference-like variant of text: some words replaced, dropped or inserted."""
    words = text.split()
    out: List[str] = []
    for w in words:
        r = rng.random()
        if r < 0.08:
            continue
        if r < 0.18:
            out.append(rng.choice(_FILLER))
        elif r < 0.24:
            out.extend([w, rng.choice(_FILLER)])
        else:
            out.append(w)
    return _clip(" ".join(out) or text, lo, hi, rng)


def make_item(rng: random.Random) -> Dict[str, Any]:
    solution = answer_text(rng)
    r = rng.random()
    if r < 0.60:
        gt: Any = mutate(solution, rng)
    elif r < 0.85:
        gt = answer_text(rng)
    else:
        gt = [mutate(solution, rng) if rng.random() < 0.5 else answer_text(rng)
              for _ in range(rng.randint(2, 3))]
    return {"reward": "lexical", "solution_str": solution, "ground_truth": gt}


def make_bodies(seed: int, n_single: int, n_batch: int, batch_size: int) -> Dict[str, List[Dict]]:
    rng = random.Random(seed)
    single = [{"items": [make_item(rng)]} for _ in range(n_single)]
    batch = [{"items": [make_item(rng) for _ in range(batch_size)]} for _ in range(n_batch)]
    return {"single": single, "batch": batch}


def write_body_lines(path: Path, bodies: List[Dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for b in bodies:
            f.write(json.dumps(b, ensure_ascii=False, separators=(",", ":")) + "\n")


def reference_scores(body: Dict) -> List[float]:
    out = []
    for it in body["items"]:
        gts = it["ground_truth"] if isinstance(it["ground_truth"], list) else [it["ground_truth"]]
        out.append(max(difflib.SequenceMatcher(None, it["solution_str"], g).ratio() for g in gts))
    return out


# --------------------------------------------------------------------------------------------
# Servers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post_json(url: str, body: Dict, timeout: float = 30.0) -> Dict:
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode("utf-8"))


class Server:
    """A server process we started: its log file, its URL, and a clean shutdown."""

    def __init__(self, name: str, cmd: List[str], log_path: Path):
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        self.url: Optional[str] = None
        self._log = open(log_path, "wb")
        self.proc: Optional[subprocess.Popen] = None

    def log_tail(self, n: int = 20) -> str:
        try:
            self._log.flush()
            lines = self.log_path.read_text(errors="replace").splitlines()
            return "\n".join("    " + line for line in lines[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            log(f"stopping {LABEL[self.name]} (pid {self.proc.pid}) with SIGTERM")
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log(f"  {LABEL[self.name]} still running after {timeout:.0f}s; sending SIGKILL")
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            rc = self.proc.returncode
            how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"status {rc}"
            log(f"{LABEL[self.name]} exited ({how})")
            self.proc = None
        if not self._log.closed:
            self._log.close()


def start_arbiter(binary: Path, extra: List[str], out: Path, timeout: float) -> Server:
    cmd = [str(binary), "serve", "--port", "0", *extra]
    srv = Server("arbiter", cmd, out / "arbiter.log")
    log(f"starting Arbiter: {shlex.join(cmd)}")
    srv.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=srv._log, start_new_session=True)
    lines: "queue.Queue[Optional[bytes]]" = queue.Queue()

    def pump() -> None:  # first line to us, the rest to the log, so the pipe never fills
        assert srv.proc is not None and srv.proc.stdout is not None
        first = True
        for line in srv.proc.stdout:
            if first:
                lines.put(line)
                first = False
            else:
                srv._log.write(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        first_line = lines.get(timeout=timeout)
    except queue.Empty:
        raise RuntimeError(f"Arbiter printed nothing on stdout within {timeout:.0f}s (it must "
                           "print and flush `listening on http://HOST:PORT` first)\n"
                           + srv.log_tail()) from None
    if first_line is None:
        raise RuntimeError(f"Arbiter exited (status {srv.proc.wait()}) before listening\n"
                           + srv.log_tail())
    text = first_line.decode(errors="replace").strip()
    m = re.search(r"listening on http://(\[[^\]]+\]|[^\s:/]+):(\d+)", text)
    if not m:
        raise RuntimeError(f"unexpected first line from Arbiter: {text!r}")
    host = m.group(1)
    if host in ("0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    srv.url = f"http://{host}:{m.group(2)}/v1/score"
    log(f"  {text}")
    return srv


def start_fastapi(python: str, port: int, out: Path, timeout: float) -> Server:
    port = port or free_port()
    cmd = [python, str(REPO / "bench" / "fastapi_server.py"), "--port", str(port)]
    srv = Server("fastapi", cmd, out / "fastapi.log")
    log(f"starting FastAPI: {shlex.join(cmd)}")
    srv.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=srv._log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    health = f"http://127.0.0.1:{port}/healthz"
    while True:
        if srv.proc.poll() is not None:
            raise RuntimeError(f"FastAPI server exited with status {srv.proc.returncode}\n"
                               + srv.log_tail())
        try:
            with urllib.request.urlopen(health, timeout=2) as resp:
                if resp.status == 200:
                    break
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"FastAPI server did not answer {health} within {timeout:.0f}s\n"
                               + srv.log_tail())
        time.sleep(0.2)
    srv.url = f"http://127.0.0.1:{port}/v1/score"
    log(f"  FastAPI answering on {srv.url}")
    return srv


def check_server(srv: Server, body: Dict, expected: List[float], timeout: float) -> Dict:
    """POSTs one body (retrying until the server answers) and compares with difflib."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            resp = post_json(srv.url or "", body)
            break
        except (urllib.error.URLError, OSError, ValueError) as e:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{LABEL[srv.name]} did not answer POST {srv.url}: {e}") from None
            time.sleep(0.2)
    scores = resp.get("scores")
    results = resp.get("results") or []
    if not isinstance(scores, list) or len(scores) != len(expected):
        raise RuntimeError(f"{LABEL[srv.name]} returned {len(scores or [])} scores for "
                           f"{len(expected)} items: {str(resp)[:300]}")
    diffs = [abs(s - e) if isinstance(s, (int, float)) else float("inf")
             for s, e in zip(scores, expected)]
    return {
        "items": len(expected),
        "max_abs_diff_vs_difflib": max(diffs),
        "mismatches_over_1e-9": sum(d > 1e-9 for d in diffs),
        "not_ok": sum(1 for r in results if r.get("status") != "ok"),
        "cached": sum(1 for r in results if r.get("cached") is True),
    }


# --------------------------------------------------------------------------------------------
# Load runs and reporting


def run_loadgen(loadgen: Path, url: str, body_file: Path, items: int, conns: int,
                args: argparse.Namespace) -> Dict:
    cmd = [str(loadgen), "--url", url, "--body-file", str(body_file), "--body-lines",
           "--items-per-request", str(items), "--connections", str(conns),
           "--duration-s", str(args.duration_s), "--warmup-s", str(args.warmup_s),
           "--threads", str(args.loadgen_threads)]
    limit = args.duration_s + args.warmup_s + 60
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=limit,
                          text=True)
    if proc.stderr.strip():
        for line in proc.stderr.strip().splitlines()[:5]:
            log(f"    loadgen: {line}")
    if proc.returncode != 0:
        raise RuntimeError(f"loadgen failed (status {proc.returncode}): {shlex.join(cmd)}")
    last = [line for line in proc.stdout.splitlines() if line.strip()][-1]
    result = json.loads(last)
    result["command"] = shlex.join(cmd)
    return result


def summarize(runs: List[Dict]) -> Dict:
    """Median of the rates and percentiles over repeats; sums of the counts."""
    med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
    status: Dict[str, int] = {}
    for r in runs:
        for code, n in r["status"].items():
            status[code] = status.get(code, 0) + n
    return {
        "repeats": len(runs),
        "items_per_s": med("items_per_s"), "req_per_s": med("req_per_s"),
        "p50_ms": med("p50_ms"), "p90_ms": med("p90_ms"), "p99_ms": med("p99_ms"),
        "max_ms": max(r["max_ms"] for r in runs),
        "items_per_s_all": [r["items_per_s"] for r in runs],
        "requests": sum(r["requests"] for r in runs), "items": sum(r["items"] for r in runs),
        "status": status, "429": status.get("429", 0), "errors": sum(r["errors"] for r in runs),
    }


def ratio(a: float, b: float) -> Optional[float]:
    return a / b if b else None


def fmt_num(v: Optional[float], digits: int = 1) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.{digits}f}"


def fmt_ratio(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def markdown_table(summary: Dict, conns: Dict[str, int], servers: List[str]) -> str:
    head = ("| scenario | server | conns | items/s | req/s | p50 ms | p90 ms | p99 ms "
            "| 429 | errors |")
    rows = [head, "|" + "---|" * 10]
    for sc, per in summary.items():
        for name in servers:
            s = per.get(name)
            if s is None:
                continue
            rows.append(f"| {sc} | {LABEL[name]} | {conns[sc]} | {fmt_num(s['items_per_s'], 0)} "
                        f"| {fmt_num(s['req_per_s'], 0)} | {fmt_num(s['p50_ms'], 2)} "
                        f"| {fmt_num(s['p90_ms'], 2)} | {fmt_num(s['p99_ms'], 2)} "
                        f"| {s['429']} | {s['errors']} |")
        r = per.get("ratio")
        if r:
            rows.append(f"| {sc} | **Arbiter/FastAPI** | | **{fmt_ratio(r['items_per_s'])}** "
                        f"| {fmt_ratio(r['req_per_s'])} | {fmt_ratio(r['p50_ms'])} "
                        f"| {fmt_ratio(r['p90_ms'])} | {fmt_ratio(r['p99_ms'])} | | |")
    return "\n".join(rows)


def plot(summary: Dict, servers: List[str], conns: Dict[str, int], path: Path,
         title: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("note: matplotlib is not installed; skipping the plot "
            "(pip install -r bench/requirements.txt)")
        return False
    colors = {"arbiter": "#1f77b4", "fastapi": "#ff7f0e"}
    scs = list(summary)
    fig, axes = plt.subplots(2, len(scs), figsize=(5.5 * len(scs), 8), squeeze=False)
    for col, sc in enumerate(scs):
        per = summary[sc]
        names = [n for n in servers if n in per]
        ax = axes[0][col]
        vals = [per[n]["items_per_s"] for n in names]
        bars = ax.bar([LABEL[n] for n in names], vals, color=[colors[n] for n in names])
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:,.0f}", (b.get_x() + b.get_width() / 2, v), ha="center",
                        va="bottom", fontsize=9)
        sub = f"{sc}: {conns[sc]} connections"
        if per.get("ratio") and per["ratio"]["items_per_s"] is not None:
            sub += f" — Arbiter/FastAPI {per['ratio']['items_per_s']:.2f}x"
        ax.set_title(sub, fontsize=10)
        ax.set_ylabel("items/s (higher is better)")
        ax.margins(y=0.15)
        ax = axes[1][col]
        pcts = ["p50_ms", "p90_ms", "p99_ms"]
        width = 0.8 / max(1, len(names))
        lowest = min([max(per[n][p], 1e-3) for n in names for p in pcts] or [1.0])
        for i, n in enumerate(names):
            xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(pcts))]
            ys = [max(per[n][p], 1e-3) for p in pcts]
            bars = ax.bar(xs, ys, width, label=LABEL[n], color=colors[n])
            for b, v in zip(bars, ys):
                ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, v), ha="center",
                            va="bottom", fontsize=8)
        ax.set_xticks(range(len(pcts)))
        ax.set_xticklabels(["p50", "p90", "p99"])
        ax.set_yscale("log")
        ax.set_ylim(bottom=10 ** math.floor(math.log10(lowest) - 0.3))
        ax.margins(y=0.15)
        ax.set_ylabel("request latency, ms (log; lower is better)")
        ax.legend(fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _loadavg() -> Optional[float]:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def machine_info() -> Dict[str, Any]:
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:
        nproc = os.cpu_count() or 0
    info: Dict[str, Any] = {"nproc": nproc, "cpu_count": os.cpu_count(), "cpu_model": model,
                            "kernel": platform.release(), "python": platform.python_version(),
                            "loadavg_1m": _loadavg()}
    for mod in ("fastapi", "uvicorn", "pydantic", "uvloop", "httptools"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - optional, informational only
            info[mod] = None
    return info


# --------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Arbiter vs FastAPI lexical /v1/score benchmark.")
    p.add_argument("--arbiter", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--arbiter-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `arbiter serve` (repeatable), e.g. --config=FILE")
    p.add_argument("--loadgen", type=Path, default=REPO / "build" / "arbiter-loadgen")
    p.add_argument("--python", default=sys.executable, help="interpreter for the FastAPI server")
    p.add_argument("--fastapi-port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--only", choices=SERVERS, help="benchmark one server only")
    p.add_argument("--scenarios", default="single,batch", help="comma list of single,batch")
    p.add_argument("--duration-s", type=float, default=10.0, help="measured seconds per run")
    p.add_argument("--warmup-s", type=float, default=2.0, help="unmeasured seconds per run")
    p.add_argument("--pause-s", type=float, default=1.0, help="idle gap between runs")
    p.add_argument("--repeats", type=int, default=1, help="runs per server and scenario")
    p.add_argument("--single-connections", type=int, default=32)
    p.add_argument("--batch-connections", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--single-bodies", type=int, default=512,
                   help="distinct single-item bodies the loadgen cycles through")
    p.add_argument("--batch-bodies", type=int, default=8,
                   help="distinct batch bodies the loadgen cycles through")
    p.add_argument("--loadgen-threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--startup-timeout-s", type=float, default=30.0)
    p.add_argument("--no-plot", action="store_true")
    a = p.parse_args()
    a.scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    bad = [s for s in a.scenarios if s not in SCENARIOS]
    if bad or not a.scenarios:
        p.error(f"--scenarios takes a comma list of {', '.join(SCENARIOS)}")
    if a.repeats < 1 or a.duration_s <= 0 or a.warmup_s < 0:
        p.error("--repeats must be >= 1, --duration-s > 0, --warmup-s >= 0")
    return a


def main() -> int:
    args = parse_args()
    servers = [args.only] if args.only else list(SERVERS)
    conns = {"single": args.single_connections, "batch": args.batch_connections}
    items_per_req = {"single": 1, "batch": args.batch_size}

    info = machine_info()
    command = shlex.join([sys.executable, *sys.argv])
    log(f"machine: nproc={info['nproc']} cpu_count={info['cpu_count']} "
        f"cpu='{info['cpu_model']}' kernel={info['kernel']} python={info['python']}")
    log(f"command: {command}")
    load1 = info["loadavg_1m"]
    if load1 is not None and load1 > 0.5 * max(1, info["nproc"]):
        log(f"warning: load average is {load1:.2f} on {info['nproc']} CPUs before starting; "
            "other work on this machine will make the numbers noisy")

    if not args.loadgen.exists():
        log(f"error: {args.loadgen} not found; build it first "
            "(cmake --build build --target arbiter-loadgen)")
        return 2
    if "arbiter" in servers and not args.arbiter.exists():
        log(f"error: {args.arbiter} not found; build the project first, "
            "or pass --only fastapi")
        return 2
    if "arbiter" in servers:
        try:
            ver = subprocess.run([str(args.arbiter), "--version"], capture_output=True,
                                 text=True, timeout=10)
            info["arbiter_version"] = (ver.stdout.strip() or ver.stderr.strip()).splitlines()[0]
        except (OSError, subprocess.TimeoutExpired, IndexError):
            info["arbiter_version"] = None
        log(f"arbiter: {args.arbiter} ({info['arbiter_version']})")

    args.out.mkdir(parents=True, exist_ok=True)
    bodies_dir = args.out / "bodies"
    bodies_dir.mkdir(exist_ok=True)
    bodies = make_bodies(args.seed, args.single_bodies, args.batch_bodies, args.batch_size)
    body_files = {}
    for sc in args.scenarios:
        body_files[sc] = bodies_dir / f"{sc}.jsonl"
        write_body_lines(body_files[sc], bodies[sc])
    log(f"bodies: {args.single_bodies} single-item and {args.batch_bodies} x {args.batch_size}"
        f"-item (seed {args.seed}) in {bodies_dir}")

    # SIGTERM to us should still stop the servers: turn it into an exception.
    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)

    started: Dict[str, Server] = {}
    runs: List[Dict] = []
    try:
        # Start both servers up front; they idle while the other one is measured.
        for name in servers:
            if name == "arbiter":
                started[name] = start_arbiter(args.arbiter, args.arbiter_arg, args.out,
                                              args.startup_timeout_s)
            else:
                started[name] = start_fastapi(args.python, args.fastapi_port, args.out,
                                              args.startup_timeout_s)

        # Correctness first: every server must return difflib's scores for one batch.
        check_body = bodies["batch"][0] if bodies["batch"] else bodies["single"][0]
        expected = reference_scores(check_body)
        checks = {}
        for name, srv in started.items():
            checks[name] = check_server(srv, check_body, expected, args.startup_timeout_s)
            c = checks[name]
            note = "ok" if c["mismatches_over_1e-9"] == 0 and c["not_ok"] == 0 else "MISMATCH"
            log(f"check {LABEL[name]}: {c['items']} items, max |score - difflib| = "
                f"{c['max_abs_diff_vs_difflib']:.3g}, {c['mismatches_over_1e-9']} mismatches, "
                f"{c['not_ok']} not ok -> {note}")

        plan = [(rep, sc, name) for rep in range(args.repeats) for sc in args.scenarios
                for name in servers]
        eta = len(plan) * (args.duration_s + args.warmup_s + args.pause_s)
        log(f"running {len(plan)} load runs of {args.warmup_s:g}s warm-up + {args.duration_s:g}s "
            f"(about {eta:.0f}s); loadgen threads={args.loadgen_threads}")
        for i, (rep, sc, name) in enumerate(plan, 1):
            srv = started[name]
            if srv.proc is None or srv.proc.poll() is not None:
                raise RuntimeError(f"{LABEL[name]} is no longer running\n" + srv.log_tail())
            log(f"[{i}/{len(plan)}] {LABEL[name]:7s} {sc:6s} x{items_per_req[sc]:<4d} "
                f"{conns[sc]:3d} conns, repeat {rep + 1}/{args.repeats} ...")
            r = run_loadgen(args.loadgen, srv.url or "", body_files[sc], items_per_req[sc],
                            conns[sc], args)
            r.update({"server": name, "scenario": sc, "repeat": rep,
                      "loadavg_1m_after": _loadavg()})
            runs.append(r)
            log(f"        {r['items_per_s']:>12,.0f} items/s  {r['req_per_s']:>10,.0f} req/s  "
                f"p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  "
                f"429 {r['status'].get('429', 0)}  errors {r['errors']}")
            if i < len(plan):
                time.sleep(args.pause_s)

        # Did anything get answered from a cache during the runs? (informational)
        for name, srv in started.items():
            after = check_server(srv, check_body, expected, args.startup_timeout_s)
            checks[name]["cached_after_load"] = after["cached"]
    finally:
        for srv in started.values():
            srv.stop()

    summary: Dict[str, Dict[str, Any]] = {}
    for sc in args.scenarios:
        per: Dict[str, Any] = {}
        for name in servers:
            mine = [r for r in runs if r["scenario"] == sc and r["server"] == name]
            if mine:
                per[name] = summarize(mine)
        if "arbiter" in per and "fastapi" in per:
            a, f = per["arbiter"], per["fastapi"]
            per["ratio"] = {k: ratio(a[k], f[k]) for k in
                            ("items_per_s", "req_per_s", "p50_ms", "p90_ms", "p99_ms")}
        summary[sc] = per

    table = markdown_table(summary, conns, servers)
    log("")
    log(table)
    log("")
    log("items/s: successfully scored items per second (higher is better); latency: per request,"
        " successful responses only; ratio = Arbiter / FastAPI (>1 is better for items/s, "
        "<1 is better for latency). Medians over repeats.")

    result = {
        "machine": info, "command": command,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "connections": conns, "items_per_request": items_per_req,
        "checks": checks, "summary": summary, "runs": runs, "table": table,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    json_path = args.out / "score_bench.json"
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    log(f"results: {json_path}")
    if not args.no_plot:
        png = args.out / "score_bench.png"
        title = (f"POST /v1/score, lexical — {info['nproc']} CPUs ({info['cpu_model']}), "
                 f"{args.duration_s:g}s per run")
        if plot(summary, servers, conns, png, title):
            log(f"plot: {png}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); servers stopped")
        sys.exit(130)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        log(f"error: {e}")
        sys.exit(1)
