#!/usr/bin/env python3
"""What `server.abandon_on_hang_up` saves and what it costs, on and off side by side, one run.

1. A trainer's timeout. A step's request of --items judge items goes to a provider with a rate
   limit Arbiter knows (--rpm, requests per minute, one second of burst); the trainer gives up
   on it after --timeout-s and closes its connection, and at once sends the next step's request
   (other items). Reported: the next step's latency, the calls the provider answered in all,
   and those made for the abandoned step after the hang-up. Off, the abandoned step's queue
   goes to the provider first; on, it is dropped.
2. A client that times out and sends the same items again (the Python client's retry), while
   another client's --items other items arrive in between: the retry's latency and the other
   client's. Off, the retry joins the abandoned request's calls (coalescing, the cache); on,
   the calls dropped at the hang-up are queued again at their old places, ahead of the other
   client's.
3. The cost: one lexical item per request over --connections connections (arbiter-loadgen),
   --repeats times on and off, alternating, each on a fresh server. The watch starts only for
   requests in flight over 50 ms, so these never pay for one.

Prints markdown tables and writes OUT/hang_up.json. About two minutes with the defaults.

    python3 bench/hang_up.py    # after building build/arbiter, arbiter-fake-provider and
                                # arbiter-loadgen
"""
import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "support"))
import score_bench  # noqa: E402  run_loadgen, log, machine_info
from arbiter_testing import Provider, source_toml, start_server  # noqa: E402


def judge_items(n, step):
    return [{"reward": "judge", "solution_str": f"step {step} answer {k}", "ground_truth": "4",
             "extra_info": {"problem": "2 + 2?"}} for k in range(n)]


def config(on, routing="", rest=""):
    return (f"[server]\nabandon_on_hang_up = {'true' if on else 'false'}\n\n"
            f"[routing]\nhedge = false\n{routing}\n" + rest)


def judge_setup(args, tmp, on):
    """A provider limited to --rpm (Arbiter is told) and an Arbiter with the switch `on`."""
    provider = Provider("--rpm", str(args.rpm), "--burst-seconds", "1", "--latency-median-ms",
                        "100", "--latency-p99-ms", "150")
    server = start_server(tmp, config(on, rest=source_toml("judge", provider.url,
                                                           requests_per_minute=args.rpm,
                                                           burst_ms=1000)))
    return provider, server


def send_and_time_out(args, server, items):
    """Sends `items` in one request and closes the connection --timeout-s later, unanswered."""
    body = json.dumps({"items": items, "deadline_ms": 600000}).encode()
    first = socket.create_connection((server.host, server.port), timeout=10)
    first.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(args.timeout_s)
    first.close()


def trainer_timeout(args, tmp, on):
    provider, server = judge_setup(args, tmp, on)
    try:
        send_and_time_out(args, server, judge_items(args.items, 1))
        at_hang_up = provider.stats()["requests_total"]
        start = time.monotonic()
        status, _, answer = server.score({"items": judge_items(args.items, 2),
                                          "deadline_ms": 600000})
        took = time.monotonic() - start
        ok = sum(r["status"] == "ok" for r in answer.get("results", []))
        # Let whatever is still going (off: the abandoned step) finish, then count.
        while provider.stats()["in_flight"] > 0 or time.monotonic() - start < took + 1.0:
            time.sleep(0.2)
        calls = provider.stats()["requests_total"]
        return {"on": on, "next_step_s": took, "next_step_status": status, "next_step_ok": ok,
                "calls_before_hang_up": at_hang_up, "calls_total": calls,
                "calls_for_abandoned_after_hang_up": calls - at_hang_up - args.items}
    finally:
        server.kill()
        provider.kill()


def timeout_and_retry(args, tmp, on):
    provider, server = judge_setup(args, tmp, on)
    try:
        mine = judge_items(args.items, 1)
        send_and_time_out(args, server, mine)
        took = {}

        def score(name, items):
            start = time.monotonic()
            status, _, answer = server.score({"items": items, "deadline_ms": 600000})
            ok = sum(r["status"] == "ok" for r in answer.get("results", []))
            took[name] = (time.monotonic() - start, status, ok)

        other = threading.Thread(target=score, args=("other", judge_items(args.items, 2)))
        other.start()
        time.sleep(0.5)  # the Python client's first backoff is 0.25 to 0.5 s
        score("retry", mine)
        other.join()
        while provider.stats()["in_flight"] > 0:
            time.sleep(0.2)
        return {"on": on, "retry_s": took["retry"][0], "retry_ok": took["retry"][2],
                "other_s": took["other"][0], "other_ok": took["other"][2],
                "calls_total": provider.stats()["requests_total"]}
    finally:
        server.kill()
        provider.kill()


def single_items(args, tmp, on, body_file):
    server = start_server(tmp, config(on, routing="cache_capacity = 0\n"))
    try:
        ns = argparse.Namespace(duration_s=args.duration_s, warmup_s=1,
                                loadgen_threads=args.loadgen_threads)
        return score_bench.run_loadgen(args.loadgen, server.url + "/v1/score", body_file, 1,
                                       args.connections, ns)
    finally:
        server.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=100)
    p.add_argument("--rpm", type=int, default=600)
    p.add_argument("--timeout-s", type=float, default=2.0)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--duration-s", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--loadgen-threads", type=int, default=1)
    p.add_argument("--loadgen", type=Path, default=REPO / "build" / "arbiter-loadgen")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--skip-cost", action="store_true",
                   help="stop after the two judge scenarios (no JSON written)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="arbiter_hang_up_"))

    timeout_runs = [trainer_timeout(args, tmp, on) for on in (False, True)]
    print(f"\n## A trainer's timeout: {args.items} judge items, provider limit {args.rpm} "
          f"requests/min (known to Arbiter), the client hangs up after {args.timeout_s:g} s and "
          f"sends the next step's {args.items} items\n")
    print("| abandon_on_hang_up | next step's latency s | its items ok | provider calls "
          "before the hang-up | after it, for the abandoned step | provider calls in all |")
    print("|---|---|---|---|---|---|")
    for r in timeout_runs:
        print(f"| {'on' if r['on'] else 'off'} | {r['next_step_s']:.1f} | "
              f"{r['next_step_ok']}/{args.items} | {r['calls_before_hang_up']} | "
              f"{r['calls_for_abandoned_after_hang_up']} | {r['calls_total']} |")

    retry_runs = [timeout_and_retry(args, tmp, on) for on in (False, True)]
    print(f"\n## A client that times out after {args.timeout_s:g} s and sends its {args.items} "
          f"judge items again 0.5 s later; another client's {args.items} items arrive in "
          f"between\n")
    print("| abandon_on_hang_up | the retry's latency s | its items ok | the other client's "
          "latency s | its items ok | provider calls in all |")
    print("|---|---|---|---|---|---|")
    for r in retry_runs:
        print(f"| {'on' if r['on'] else 'off'} | {r['retry_s']:.1f} | {r['retry_ok']}/"
              f"{args.items} | {r['other_s']:.1f} | {r['other_ok']}/{args.items} | "
              f"{r['calls_total']} |")
    if args.skip_cost:
        return 0

    body_file = tmp / "single.jsonl"
    with body_file.open("w") as f:
        for i in range(20000):
            f.write(json.dumps({"items": [{"reward": "lexical",
                                           "solution_str": f"the answer is {i} apples",
                                           "ground_truth": f"answer {i % 97} apples"}]}) + "\n")
    single = {True: [], False: []}
    for _ in range(args.repeats):
        for on in (True, False):
            single[on].append(single_items(args, tmp, on, body_file))
    med = {on: {k: statistics.median(r[k] for r in runs)
                for k in ("items_per_s", "p50_ms", "p99_ms")} for on, runs in single.items()}
    print(f"\n## The cost: one lexical item per request, {args.connections} connections, "
          f"{args.duration_s} s per run, median of {args.repeats} (on and off alternating)\n")
    print("| abandon_on_hang_up | items/s | p50 ms | p99 ms | errors |")
    print("|---|---|---|---|---|")
    for on in (True, False):
        errors = sum(sum(n for code, n in r["status"].items() if code != "200")
                     for r in single[on])
        print(f"| {'on' if on else 'off'} | {med[on]['items_per_s']:.0f} | "
              f"{med[on]['p50_ms']:.2f} | {med[on]['p99_ms']:.2f} | {errors} |")
    print(f"\non/off items/s: {med[True]['items_per_s'] / med[False]['items_per_s']:.3f}")
    (args.out / "hang_up.json").write_text(json.dumps(
        {"machine": score_bench.machine_info(), "args": {k: str(v) for k, v in vars(args).items()},
         "trainer_timeout": timeout_runs, "timeout_and_retry": retry_runs,
         "single_items": {str(k): v for k, v in single.items()}},
        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
