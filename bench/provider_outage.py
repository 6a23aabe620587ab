#!/usr/bin/env python3
"""The only provider goes down and comes back: how soon is scoring back? Arbiter against a
script that calls the provider itself, in one run.

One OpenAI-compatible provider serves the judge, nothing configured about it. A trainer sends
one judge item per request, --concurrency at once, each sender starting its next item when
its last one is answered (after --pause-s when it failed), for --before-s + --outage-s +
--after-s seconds. The provider answers every call with 503 from --before-s to
--before-s + --outage-s after it starts (arbiter-fake-provider --outage). Setups, each
against a fresh provider:

- `direct`: what a reward script does without Arbiter: each item is one chat call to the
  provider, retried up to --attempts times after a failure with a full jitter backoff of up
  to 0.5 s;
- `arbiter`: the same items through Arbiter (POST /v1/score, one item each) with one
  `[[sources]]` entry and every other setting at its default;
- `baseline` (with --baseline-bin): `arbiter`'s run on another build, side by side.

The table gives, per setup, the items scored and failed, the seconds from the provider's
return to the first item scored after it (`back after`), the items scored in the --after-s
seconds after the return, and Arbiter's ejections. While the provider is down the breaker
ejects it; a probe call then tests it every `routing.breaker_ejection_ms` (docs/
architecture.md, `circuit_breaker.*`). Printed as markdown and written to
OUT/provider_outage.json.

    python3 bench/provider_outage.py                    # needs build/arbiter, arbiter-fake-provider
    python3 bench/provider_outage.py --outage-s 120 --baseline-bin /tmp/arbiter-old
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_step import (Child, Children, StartError, log, missing_binary,  # noqa: E402
                       write_results)

REPO = Path(__file__).resolve().parent.parent
SETUPS = ("direct", "arbiter", "baseline")

# (sent, answered, ok): seconds since the provider started.
Record = Tuple[float, float, bool]


def provider_start(url: str) -> float:
    """When the provider started, on this process's `time.monotonic()` clock: its outage
    windows count from then. Its /stats `uptime_s` is read on the same monotonic clock, so a
    slow start-up line does not shift the windows."""
    before = time.monotonic()
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as resp:
        uptime = float(json.loads(resp.read())["uptime_s"])
    return before - uptime


def provider_cmd(args: argparse.Namespace) -> List[str]:
    start = args.before_s
    return [str(args.fake_provider_bin), "--port", "0", "--model", args.model,
            "--outage", f"{start:g}:{start + args.outage_s:g}", "--latency-median-ms",
            f"{args.latency_median_ms:g}", "--latency-p99-ms", f"{args.latency_p99_ms:g}",
            "--seed", str(args.seed), "--threads", "2"]


def arbiter_toml(provider_url: str, args: argparse.Namespace) -> str:
    return "\n".join([
        "# Written by bench/provider_outage.py: one provider serving the judge, defaults.",
        "[server]", "port = 0", "", "[scheduler]", f"default_deadline_ms = {args.deadline_ms}",
        "", "[[sources]]", 'name = "provider"', 'kind = "openai"',
        f"url = {json.dumps(provider_url)}", 'capabilities = ["chat"]',
        f"model = {json.dumps(args.model)}"]) + "\n"


def item(i: int) -> Dict[str, Any]:
    return {"reward": "judge", "solution_str": f"The answer is {i % 97}.",
            "ground_truth": str(i % 89), "extra_info": {"problem": f"What is {i} mod 97?"}}


async def send(url: str, direct: bool, t0: float, args: argparse.Namespace) -> List[Record]:
    """Sends items until --before-s + --outage-s + --after-s after `t0` (the provider's start)
    and returns one record per item."""
    import aiohttp

    rng = random.Random(args.seed)
    records: List[Record] = []
    stop = t0 + args.before_s + args.outage_s + args.after_s

    async def call_direct(session: aiohttp.ClientSession, it: Dict[str, Any]) -> bool:
        body = {"model": args.model, "temperature": 0, "max_tokens": 8, "messages": [
            {"role": "user", "content": f"Problem: {it['extra_info']['problem']}\nReference: "
                                        f"{it['ground_truth']}\nAnswer: {it['solution_str']}"}]}
        for attempt in range(args.attempts):
            try:
                async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
                    text = await resp.text()
                    if resp.status == 200 and "choices" in json.loads(text):
                        return True
                    if 400 <= resp.status < 500:
                        return False
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
                pass
            if attempt + 1 < args.attempts:
                await asyncio.sleep(rng.uniform(0.0, 0.5))
        return False

    async def call_arbiter(session: aiohttp.ClientSession, it: Dict[str, Any]) -> bool:
        try:
            async with session.post(f"{url}/v1/score",
                                    json={"items": [it], "deadline_ms": args.deadline_ms}) as r:
                text = await r.text()
                return r.status == 200 and json.loads(text)["results"][0]["status"] == "ok"
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, KeyError):
            return False

    async def sender(session: aiohttp.ClientSession, first: int) -> None:
        i = first
        while time.monotonic() < stop:
            sent = time.monotonic() - t0
            it = item(i)
            ok = await (call_direct(session, it) if direct else call_arbiter(session, it))
            records.append((sent, time.monotonic() - t0, ok))
            if not ok:
                await asyncio.sleep(args.pause_s)
            i += args.concurrency

    timeout = aiohttp.ClientTimeout(total=args.deadline_ms / 1000.0 + 30.0)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as session:
        await asyncio.gather(*(sender(session, w) for w in range(args.concurrency)))
    return records


def summarize(records: List[Record], args: argparse.Namespace) -> Dict[str, Any]:
    """What the table shows of one setup's records."""
    back = args.before_s + args.outage_s
    first_ok = min((done for _, done, ok in records if ok and done >= back), default=None)
    return {"ok": sum(1 for r in records if r[2]), "failed": sum(1 for r in records if not r[2]),
            "back_after_s": None if first_ok is None else first_ok - back,
            "ok_after_return": sum(1 for _, done, ok in records
                                   if ok and back <= done < back + args.after_s),
            "failed_sent_after_return": sum(1 for sent, _, ok in records
                                            if not ok and sent >= back)}


def run_once(setup: str, args: argparse.Namespace) -> Dict[str, Any]:
    log(f"=== provider down {args.outage_s:g} s / {setup} ===")
    tag = f"outage-{args.outage_s:g}-{setup}"
    children = Children()
    arbiter: Optional[Child] = None
    try:
        provider = children.add(Child("provider", provider_cmd(args),
                                      args.out / f"{tag}-provider.log"))
        provider_url = provider.wait_listening(args.startup_timeout_s)
        t0 = provider_start(provider_url)
        url = provider_url
        if setup != "direct":
            cfg = args.out / f"{tag}.toml"
            cfg.write_text(arbiter_toml(provider_url, args))
            binary = args.baseline_bin if setup == "baseline" else args.arbiter_bin
            arbiter = children.add(Child("Arbiter", [str(binary), "serve", "--config",
                                                     str(cfg), "--port", "0"],
                                         args.out / f"{tag}-arbiter.log"))
            url = arbiter.wait_listening(args.startup_timeout_s)
        records = asyncio.run(send(url, setup == "direct", t0, args))
    finally:
        children.stop_all()
    row: Dict[str, Any] = {"setup": setup, "outage_s": args.outage_s, **summarize(records, args)}
    row["ejections"] = None
    if arbiter is not None:
        row["ejections"] = arbiter.log_path.read_text(errors="replace").count("' ejected for ")
    log(f"  {row}")
    return row


def markdown_table(rows: List[Dict[str, Any]], after_s: float) -> str:
    lines = [f"| provider down (s) | setup | ok | failed | back after (s) | ok in {after_s:g} s "
             "after | failed, sent after | ejections |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        back = "never" if r["back_after_s"] is None else f"{r['back_after_s']:.1f}"
        ej = "" if r["ejections"] is None else str(r["ejections"])
        lines.append(f"| {r['outage_s']:g} | {r['setup']} | {r['ok']} | {r['failed']} | {back} "
                     f"| {r['ok_after_return']} | {r['failed_sent_after_return']} | {ej} |")
    return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--outage-s", type=float, default=60.0, help="how long the provider is down")
    p.add_argument("--before-s", type=float, default=10.0,
                   help="seconds from the provider's start to its outage")
    p.add_argument("--after-s", type=float, default=30.0,
                   help="seconds of traffic after the provider is back")
    p.add_argument("--setups", default="direct,arbiter",
                   help=f"comma-separated, of: {', '.join(SETUPS)}")
    p.add_argument("--concurrency", type=int, default=32, help="requests out at once")
    p.add_argument("--attempts", type=int, default=3, help="the script's attempts per item")
    p.add_argument("--pause-s", type=float, default=0.2,
                   help="a sender's pause after an item failed")
    p.add_argument("--latency-median-ms", type=float, default=200.0)
    p.add_argument("--latency-p99-ms", type=float, default=400.0)
    p.add_argument("--deadline-ms", type=int, default=30000)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--model", default="fake-judge")
    p.add_argument("--arbiter-bin", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--fake-provider-bin", type=Path, default=REPO / "build" / "arbiter-fake-provider")
    p.add_argument("--baseline-bin", type=Path, default=None,
                   help="another build of arbiter, run as the `baseline` setup")
    p.add_argument("--startup-timeout-s", type=float, default=60.0)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    for s in setups:
        if s not in SETUPS:
            p.error(f"--setups: unknown setup {s!r} (of: {', '.join(SETUPS)})")
    if args.baseline_bin is not None and "baseline" not in setups:
        setups.append("baseline")
    if "baseline" in setups and args.baseline_bin is None:
        p.error("--setups: baseline needs --baseline-bin")
    args.setups = setups
    if args.outage_s <= 0 or args.before_s <= 0 or args.after_s <= 0:
        p.error("--outage-s, --before-s and --after-s must be positive")
    if args.concurrency < 1 or args.attempts < 1 or args.pause_s < 0:
        p.error("--concurrency and --attempts must be positive, --pause-s not negative")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if missing_binary(args.arbiter_bin, args.fake_provider_bin, args.baseline_bin):
        return 2
    rows = []
    try:
        for setup in args.setups:
            rows.append(run_once(setup, args))
    except StartError as e:
        log(f"error: {e}")
        return 1
    table = markdown_table(rows, args.after_s)
    print(table)
    write_results(args, "provider_outage", rows, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
