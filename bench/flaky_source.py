#!/usr/bin/env python3
"""One flaky provider: Arbiter against a script that calls the provider itself, in one run.

The setup most users start with: one OpenAI-compatible provider, nothing configured about it,
and a trainer sending one judge item per request, many at once. The provider fails a share of
its calls (--error-rates, one row group each) with --fault: HTTP 500 (the default) or 503, a
call that never answers (`timeout`), a reset connection (`reset`) or a cut-off body
(`malformed`). For each share, three runs, each
against a fresh fake provider with the same seed:

- `direct`: what a reward script does without Arbiter: each item is one chat call to the
  provider, retried up to --attempts times after a 5xx, an unreadable answer, a broken
  connection or --script-timeout-s without an answer, with a full jitter backoff of up to
  0.5 s;
- `arbiter`: the same items through Arbiter (POST /v1/score, one item each) with one
  `[[sources]]` entry and every other setting at its default;
- `arbiter, no breaker`: the same with `routing.breaker_consecutive_failures = 0` and
  `routing.breaker_failure_ratio = 0`, the reference for what ejections cost;
- `baseline` (with --baseline-bin): `arbiter`'s run on another build, side by side.

Arbiter retries an item at most 3 times by default (`routing.max_attempts`), like the script.
Ejecting the only source stops all judge work, so a degraded provider should be ejected only
when it fails most calls (docs/architecture.md, `circuit_breaker.*`). The table gives items
ok and failed, the wall time and its ratio to the script's, the ejections Arbiter logged and
the calls the provider saw; it is printed as markdown and written to OUT/flaky_source.json.

    python3 bench/flaky_source.py                       # needs build/arbiter, arbiter-fake-provider
    python3 bench/flaky_source.py --error-rates 0.3 --items 300
    python3 bench/flaky_source.py --baseline-bin /tmp/arbiter-old
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_step import (Child, Children, StartError, log, missing_binary,  # noqa: E402
                       write_results)

REPO = Path(__file__).resolve().parent.parent
SETUPS = ("direct", "arbiter", "arbiter, no breaker", "baseline")


def provider_cmd(args: argparse.Namespace, error_rate: float) -> List[str]:
    return [str(args.fake_provider_bin), "--port", "0", "--model", args.model,
            f"--error-rate-{args.fault}", f"{error_rate:g}", "--latency-median-ms",
            f"{args.latency_median_ms:g}", "--latency-p99-ms", f"{args.latency_p99_ms:g}",
            "--seed", str(args.seed), "--threads", "2"]


def arbiter_toml(provider_url: str, breaker: bool, args: argparse.Namespace) -> str:
    lines = ["# Written by bench/flaky_source.py: one provider serving the judge, defaults.",
             "[server]", "port = 0", "", "[scheduler]",
             f"default_deadline_ms = {args.deadline_ms}", ""]
    if not breaker:
        lines += ["[routing]", "breaker_consecutive_failures = 0", "breaker_failure_ratio = 0",
                  ""]
    lines += ["[[sources]]", 'name = "provider"', 'kind = "openai"',
              f"url = {json.dumps(provider_url)}", 'capabilities = ["chat"]',
              f"model = {json.dumps(args.model)}"]
    return "\n".join(lines) + "\n"


def item(i: int) -> Dict[str, Any]:
    return {"reward": "judge", "solution_str": f"The answer is {i % 97}.",
            "ground_truth": str(i % 89), "extra_info": {"problem": f"What is {i} mod 97?"}}


async def run_direct(url: str, args: argparse.Namespace) -> Dict[str, int]:
    import aiohttp

    rng = random.Random(args.seed)
    counts = {"ok": 0, "failed": 0}
    gate = asyncio.Semaphore(args.concurrency)

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        it = item(i)
        body = {"model": args.model, "temperature": 0, "max_tokens": 8, "messages": [
            {"role": "user", "content": f"Problem: {it['extra_info']['problem']}\nReference: "
                                        f"{it['ground_truth']}\nAnswer: {it['solution_str']}"}]}
        async with gate:
            for attempt in range(args.attempts):
                try:
                    async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
                        text = await resp.text()
                        if resp.status == 200 and "choices" in json.loads(text):
                            counts["ok"] += 1
                            return
                        if 400 <= resp.status < 500:
                            break
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
                    pass
                if attempt + 1 < args.attempts:
                    await asyncio.sleep(rng.uniform(0.0, 0.5))
        counts["failed"] += 1

    timeout = aiohttp.ClientTimeout(total=args.script_timeout_s)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as session:
        await asyncio.gather(*(one(session, i) for i in range(args.items)))
    return counts


async def run_arbiter(url: str, args: argparse.Namespace) -> Dict[str, int]:
    import aiohttp

    counts: Dict[str, int] = {"ok": 0, "failed": 0}
    gate = asyncio.Semaphore(args.concurrency)

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        async with gate:
            body = {"items": [item(i)], "deadline_ms": args.deadline_ms}
            try:
                async with session.post(f"{url}/v1/score", json=body) as resp:
                    text = await resp.text()
                    ok = resp.status == 200 and json.loads(text)["results"][0]["status"] == "ok"
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, KeyError):
                ok = False
        counts["ok" if ok else "failed"] += 1

    timeout = aiohttp.ClientTimeout(total=args.deadline_ms / 1000.0 + 30.0)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as session:
        await asyncio.gather(*(one(session, i) for i in range(args.items)))
    return counts


async def provider_calls(url: str) -> int:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.get(f"{url}/stats") as resp:
            return int((await resp.json(content_type=None))["requests_total"])


def run_once(error_rate: float, setup: str, args: argparse.Namespace) -> Dict[str, Any]:
    log(f"=== {error_rate:.0%} of calls fail ({args.fault}) / {setup} ===")
    tag = f"flaky-{args.fault}-{error_rate:g}-{setup.replace(', ', '-').replace(' ', '-')}"
    children = Children()
    arbiter: Optional[Child] = None
    try:
        provider = children.add(Child("provider", provider_cmd(args, error_rate),
                                      args.out / f"{tag}-provider.log"))
        provider_url = provider.wait_listening(args.startup_timeout_s)
        binary = args.baseline_bin if setup == "baseline" else args.arbiter_bin
        if setup == "direct":
            t0 = time.monotonic()
            counts = asyncio.run(run_direct(provider_url, args))
        else:
            cfg = args.out / f"{tag}.toml"
            cfg.write_text(arbiter_toml(provider_url, setup != "arbiter, no breaker", args))
            arbiter = children.add(Child("Arbiter", [str(binary), "serve", "--config",
                                                     str(cfg), "--port", "0"],
                                         args.out / f"{tag}-arbiter.log"))
            url = arbiter.wait_listening(args.startup_timeout_s)
            t0 = time.monotonic()
            counts = asyncio.run(run_arbiter(url, args))
        wall = time.monotonic() - t0
        calls = asyncio.run(provider_calls(provider_url))
    finally:
        children.stop_all()
    ejections = None
    if arbiter is not None:
        ejections = arbiter.log_path.read_text(errors="replace").count("' ejected for ")
    row = {"error_rate": error_rate, "fault": args.fault, "setup": setup, "ok": counts["ok"],
           "failed": counts["failed"], "wall_s": wall, "ejections": ejections,
           "provider_calls": calls}
    log(f"  ok {row['ok']}, failed {row['failed']}, wall {wall:.1f}s, ejections {ejections}, "
        f"provider calls {calls}")
    return row


def markdown_table(rows: List[Dict[str, Any]]) -> str:
    lines = ["| provider fails | setup | ok | failed | wall (s) | wall / direct | ejections "
             "| provider calls |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    direct = {r["error_rate"]: r["wall_s"] for r in rows if r["setup"] == "direct"}
    for r in rows:
        base = direct.get(r["error_rate"])
        ratio = f"{r['wall_s'] / base:.2f}×" if base else ""
        ej = "" if r["ejections"] is None else str(r["ejections"])
        lines.append(f"| {r['error_rate']:.0%} {r.get('fault', '500')} | {r['setup']} | {r['ok']} | {r['failed']} | "
                     f"{r['wall_s']:.1f} | {ratio} | {ej} | {r['provider_calls']} |")
    return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--error-rates", default="0.1,0.3,0.4",
                   help="comma-separated shares of calls the provider fails with HTTP 500")
    p.add_argument("--setups", default=",".join(SETUPS[:3]),
                   help=f"comma-separated, of: {', '.join(SETUPS)}")
    p.add_argument("--fault", default="500",
                   choices=("500", "503", "timeout", "reset", "malformed"),
                   help="how the provider fails a call (arbiter-fake-provider --error-rate-*)")
    p.add_argument("--script-timeout-s", type=float, default=30.0,
                   help="the script's wait for one call's answer")
    p.add_argument("--items", type=int, default=600, help="judge items, one per request")
    p.add_argument("--concurrency", type=int, default=32, help="requests out at once")
    p.add_argument("--attempts", type=int, default=3, help="the script's attempts per item")
    p.add_argument("--latency-median-ms", type=float, default=300.0)
    p.add_argument("--latency-p99-ms", type=float, default=900.0)
    p.add_argument("--deadline-ms", type=int, default=30000)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--model", default="fake-judge")
    p.add_argument("--arbiter-bin", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--fake-provider-bin", type=Path, default=REPO / "build" / "arbiter-fake-provider")
    p.add_argument("--baseline-bin", type=Path, default=None,
                   help="another build of arbiter, run as the `baseline` setup")
    p.add_argument("--startup-timeout-s", type=float, default=30.0)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    try:
        args.error_rates = [float(x) for x in args.error_rates.split(",") if x]
    except ValueError:
        p.error(f"--error-rates: expected numbers, got {args.error_rates!r}")
    if not args.error_rates or any(not 0.0 <= x <= 1.0 for x in args.error_rates):
        p.error("--error-rates: shares between 0 and 1")
    args.setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    # "arbiter, no breaker" holds a comma: put it back together.
    joined: List[str] = []
    for s in args.setups:
        if s == "no breaker" and joined and joined[-1] == "arbiter":
            joined[-1] = "arbiter, no breaker"
        else:
            joined.append(s)
    for s in joined:
        if s not in SETUPS:
            p.error(f"--setups: unknown setup {s!r} (of: {', '.join(SETUPS)})")
    if args.baseline_bin is not None and "baseline" not in joined:
        joined.append("baseline")
    if "baseline" in joined and args.baseline_bin is None:
        p.error("--setups: baseline needs --baseline-bin")
    args.setups = joined
    if args.items < 1 or args.concurrency < 1 or args.attempts < 1:
        p.error("--items, --concurrency and --attempts must be positive")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if missing_binary(args.arbiter_bin, args.fake_provider_bin, args.baseline_bin):
        return 2
    rows = []
    try:
        for rate in args.error_rates:
            for setup in args.setups:
                rows.append(run_once(rate, setup, args))
    except StartError as e:
        log(f"error: {e}")
        return 1
    table = markdown_table(rows)
    print(table)
    write_results(args, "flaky_source", rows, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
