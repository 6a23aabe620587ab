#!/usr/bin/env python3
"""Trainer traffic: the request shapes trainers really send, through Arbiter, against
rate-limited providers whose limits are configured or not.

Three arbiter-fake-provider processes serve the `judge` reward (different limits, latencies and
error rates; the same three as bench/grpo_step.py). The same judge items are scored, each run
against freshly started providers, in every combination of

- how the items arrive: `batch` (one `/v1/score` request holding every item) or one item per
  request, all sent at once, through `/v1/score`, OpenRLHF's `/get_reward` or slime's
  `/remote_rm` (what verl, OpenRLHF >= 0.9.1 and slime do);
- whether Arbiter's `[[sources]]` carry the providers' limits (`configured`) or nothing
  (`unconfigured`: what `LLM_JUDGE_SERVER_URL` gives; Arbiter must learn them from headers and
  429s);

plus a naive asyncio client (a semaphore of 60, round robin, exponential backoff, Retry-After
ignored: bench/grpo_step.py's) against the same providers, a token-limited provider
(30,000 TPM enforced per second, ~175-token judge prompts), and a provider that states 3,000
RPM in its headers but takes 4 calls at once, answering the fifth 429 with Retry-After: 1
(`max_concurrency = 4` configured, or nothing). Per run it prints the makespan over
the analytic lower bound, the attempts and 429s the providers counted, the 429s Arbiter itself
answered, and items failed or scored wrong.

    python3 bench/trainer_traffic.py                       # everything, about 5 minutes
    python3 bench/trainer_traffic.py --shapes batch,score --limits unconfigured --no-naive
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grpo_step as g  # noqa: E402  (shared items, providers, lower bound and naive client)

REPO = g.REPO
SHAPES = ("batch", "score", "get_reward", "remote_rm")
LIMITS = ("configured", "unconfigured")
SHAPE_LABEL = {"batch": "one /v1/score of N", "score": "N x /v1/score (1 item)",
               "get_reward": "N x /get_reward (1 item)", "remote_rm": "N x /remote_rm (1 item)"}
TPM_PROVIDER = ("--tpm 30000 --burst-seconds 1 --latency-median-ms 300 --latency-p99-ms 900 "
                "--seed 404")
CAPPED_PROVIDER = ("--rpm 3000 --burst-seconds 1 --max-concurrency 4 --latency-median-ms 300 "
                   "--latency-p99-ms 400 --seed 505")
CAPPED_CALLS = 4
# Sentences that pad a problem statement until its judge prompt is token-heavy.
_CONTEXT = ("Read the whole question carefully before answering and show each step of the "
            "reasoning so that a reader can check it line by line without guessing what was "
            "meant by any of the quantities involved in the problem statement").split()


def pad_problems(items: List[Dict[str, Any]], words: int) -> None:
    """Lengthens each problem so that its judge prompt holds at least `words` words."""
    for it in items:
        k = 0
        while len(g.judge_prompt(it).split()) < words:
            it["problem"] += " " + _CONTEXT[k % len(_CONTEXT)]
            k += 1


def prompt_tokens(item: Dict[str, Any]) -> int:
    """What the fake provider counts for a judge call's prompt: its whitespace words."""
    return len(g.judge_prompt(item).split())


def tpm_lower_bound(items: List[Dict[str, Any]], tpm: float, burst_s: float, max_tokens: int,
                    latency_s: float) -> float:
    """The smallest T by which a tpm bucket (burst_s seconds of it, full at the start) has
    admitted every call, plus one latency."""
    need = sum(prompt_tokens(it) + max_tokens for it in items)
    rate = tpm / 60.0
    return max(0.0, (need - rate * burst_s) / rate) + latency_s


def capped_lower_bound(n: int, median_s: float, p99_s: float) -> float:
    """n calls, `CAPPED_CALLS` at a time, each taking the provider's mean latency (lognormal
    through its median and p99)."""
    sigma = math.log(p99_s / median_s) / 2.326 if p99_s > median_s else 0.0
    return n / CAPPED_CALLS * median_s * math.exp(sigma * sigma / 2.0)


def config_toml(providers: Dict[str, g.Child], settings: Dict[str, Dict[str, float]],
                configured: bool, args: argparse.Namespace) -> str:
    lines = [
        "# Written by bench/trainer_traffic.py.",
        "[server]", "port = 0", "",
        "[scheduler]",
        f"default_deadline_ms = {args.deadline_ms}",
        f"max_deadline_ms = {args.deadline_ms}", "",
        "[protocols]", 'reward = "judge"', "",
        "[rewards.judge]", 'kind = "judge"',
        "[rewards.judge.options]", f"max_tokens = {args.max_tokens}",
    ]
    for name, child in providers.items():
        s = settings[name]
        lines += ["", "[[sources]]", f"name = {json.dumps('provider-' + name)}",
                  'kind = "openai"', f"url = {json.dumps(child.url)}",
                  'capabilities = ["chat"]', f"model = {json.dumps(args.model)}",
                  f"timeout_ms = {args.source_timeout_ms}"]
        if configured:
            burst_ms = min(60000, max(1, round(s["burst_seconds"] * 1000)))
            if s["rpm"] > 0:
                lines.append(f"requests_per_minute = {round(s['rpm'])}")
            if s["tpm"] > 0:
                lines.append(f"tokens_per_minute = {round(s['tpm'])}")
            lines.append(f"burst_ms = {burst_ms}")
            if s.get("max_concurrency", 0) > 0:
                lines.append(f"max_concurrency = {round(s['max_concurrency'])}")
    return "\n".join(lines) + "\n"


def bodies(shape: str, items: List[Dict[str, Any]], args: argparse.Namespace) -> List[Dict]:
    """(path, body, item indices) of every request of `shape`."""
    def score_item(it: Dict[str, Any]) -> Dict[str, Any]:
        return {"reward": "judge", "solution_str": it["candidate"],
                "ground_truth": it["reference"], "extra_info": {"problem": it["problem"]}}

    if shape == "batch":
        return [{"path": "/v1/score", "idx": list(range(len(items))),
                 "body": {"items": [score_item(it) for it in items],
                          "deadline_ms": args.deadline_ms}}]
    out = []
    for i, it in enumerate(items):
        if shape == "score":
            body = {"items": [score_item(it)]}
        elif shape == "get_reward":
            prompt = it["problem"] + "\n"
            body = {"query": [prompt + it["candidate"]], "prompts": [prompt],
                    "labels": [it["reference"]]}
        else:
            body = {"prompt": it["problem"], "response": it["candidate"], "label": it["reference"]}
        out.append({"path": "/" + shape if shape != "score" else "/v1/score", "idx": [i],
                    "body": body})
    return out


def scores_of(shape: str, answer: Any, n: int) -> List[Optional[float]]:
    if shape in ("batch", "score"):
        results = answer.get("results") or []
        return [float(r["score"]) if r.get("status") in ("ok", "fallback")
                and isinstance(r.get("score"), (int, float)) else None for r in results][:n]
    if shape == "get_reward":
        failed = (answer.get("extra_logs") or {}).get("arbiter_failed") or [0.0] * n
        return [None if f else float(v) for v, f in zip(answer["rewards"], failed)]
    return [float(answer if not isinstance(answer, dict) else answer["reward"])]


async def run_requests(shape: str, items: List[Dict[str, Any]], url: str,
                       args: argparse.Namespace) -> Dict[str, Any]:
    """Sends every request at once; a 429/503 from Arbiter is sent again after Retry-After."""
    import aiohttp

    scores: List[Optional[float]] = [None] * len(items)
    done_at: List[float] = []
    refused = {"429": 0, "503": 0}
    retry_after: List[float] = []
    errors: List[str] = []
    t0 = time.monotonic()

    async def send(session: aiohttp.ClientSession, req: Dict) -> None:
        for _ in range(args.resends + 1):
            try:
                async with session.post(url + req["path"], json=req["body"]) as resp:
                    text = await resp.text()
                    if resp.status in (429, 503):
                        refused[str(resp.status)] += 1
                        wait = float(resp.headers.get("Retry-After", "1") or 1)
                        retry_after.append(wait)
                        await asyncio.sleep(min(wait, 30.0))
                        continue
                    if resp.status != 200:
                        errors.append(f"HTTP {resp.status}: {text[:200]}")
                        break
                    got = scores_of(shape, json.loads(text), len(req["idx"]))
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as e:
                errors.append(f"{type(e).__name__}: {e}")
                break
            for i, s in zip(req["idx"], got):
                scores[i] = s
            done_at.append(time.monotonic() - t0)
            break

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=args.deadline_ms / 1000.0 + 120.0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(send(session, r) for r in bodies(shape, items, args)))
    return {"makespan_s": max(done_at) if done_at else time.monotonic() - t0, "scores": scores,
            "arbiter_429": refused["429"], "arbiter_503": refused["503"],
            "max_retry_after_s": max(retry_after) if retry_after else 0.0,
            "request_errors": errors[:10], "request_error_count": len(errors)}


def summary(label: str, raw: Dict[str, Any], stats: Dict[str, Dict], items: List[Dict],
            t_lb: float) -> Dict[str, Any]:
    attempts = sum(s.get("requests_total", 0) for s in stats.values())
    limited = sum(s.get("rate_limited_total", 0) for s in stats.values())
    failed = sum(1 for s in raw["scores"] if s is None)
    wrong = sum(1 for s, it in zip(raw["scores"], items)
                if s is not None and abs(s - it["expected"]) > 5e-4)
    return {"run": label, "makespan_s": raw["makespan_s"],
            "x_lower_bound": raw["makespan_s"] / t_lb if t_lb > 0 else None,
            "attempts": attempts, "provider_429": limited,
            "provider_429_pct": 100.0 * limited / attempts if attempts else 0.0,
            "arbiter_429": raw.get("arbiter_429", 0), "arbiter_503": raw.get("arbiter_503", 0),
            "max_retry_after_s": raw.get("max_retry_after_s", 0.0),
            "failed": failed, "wrong": wrong, "request_errors": raw.get("request_errors", []),
            "provider_stats": stats}


def run_arbiter(shape: str, configured: bool, items: List[Dict], specs: Dict[str, List[str]],
                settings: Dict[str, Dict[str, float]], t_lb: float,
                args: argparse.Namespace, tag: str) -> Dict[str, Any]:
    label = f"{tag}{SHAPE_LABEL[shape]}, limits {'configured' if configured else 'not configured'}"
    g.log(f"== {label}")
    children = g.Children()
    try:
        providers = g.start_providers(args.fake_provider_bin, specs, args.model, args.out,
                                      children, 30.0, "traffic")
        cfg = args.out / "trainer_traffic.toml"
        cfg.write_text(config_toml(providers, settings, configured, args))
        arbiter = children.add(g.Child("Arbiter", [str(args.arbiter_bin), "serve", "--config",
                                                   str(cfg), "--port", "0"],
                                       args.out / "trainer_traffic-arbiter.log"))
        url = arbiter.wait_listening(30.0)
        raw = asyncio.run(run_requests(shape, items, url, args))
        arbiter.stop()
        stats = g.fetch_stats(providers)
    finally:
        children.stop_all()
    s = summary(label, raw, stats, items, t_lb)
    g.log(f"   makespan {s['makespan_s']:.2f}s ({g.fmt(s['x_lower_bound'])}x), "
          f"{s['attempts']} attempts, {s['provider_429']} provider 429s, "
          f"{s['arbiter_429']} Arbiter 429s, {s['failed']} failed, {s['wrong']} wrong"
          + (f"; errors: {s['request_errors'][:2]}" if s["request_errors"] else ""))
    return s


def run_naive(items: List[Dict], specs: Dict[str, List[str]], t_lb: float,
              args: argparse.Namespace) -> Dict[str, Any]:
    label = "naive asyncio client (60 at once, backoff, no Retry-After)"
    g.log(f"== {label}")
    children = g.Children()
    try:
        providers = g.start_providers(args.fake_provider_bin, specs, args.model, args.out,
                                      children, 30.0, "traffic-naive")
        naive = argparse.Namespace(seed=args.seed, naive_concurrency=60, naive_attempts=6,
                                   naive_backoff_base_s=1.0, naive_backoff_max_s=32.0,
                                   naive_jitter_s=1.0, naive_timeout_s=60.0, model=args.model,
                                   progress_s=3600.0)
        raw = asyncio.run(g.run_naive(items, [c.url or "" for c in providers.values()], naive))
        stats = g.fetch_stats(providers)
    finally:
        children.stop_all()
    s = summary(label, raw, stats, items, t_lb)
    g.log(f"   makespan {s['makespan_s']:.2f}s, {s['provider_429']} provider 429s, "
          f"{s['failed']} failed")
    return s


def table(rows: List[Dict[str, Any]]) -> str:
    out = ["| how the items arrive | makespan s | × lower bound | attempts | 429s at providers "
           "| 429 % | 429s from Arbiter | items failed | wrong scores |",
           "|---|---|---|---|---|---|---|---|---|"]
    for s in rows:
        out.append(f"| {s['run']} | {s['makespan_s']:.2f} | {g.fmt(s['x_lower_bound'])}x "
                   f"| {s['attempts']} | {s['provider_429']} | {s['provider_429_pct']:.1f} "
                   f"| {s['arbiter_429']} | {s['failed']} | {s['wrong']} |")
    return "\n".join(out)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--arbiter-bin", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--fake-provider-bin", type=Path,
                   default=REPO / "build" / "arbiter-fake-provider")
    p.add_argument("--items", type=int, default=600, help="judge items per run")
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    p.add_argument("--limits", default=",".join(LIMITS), help="configured, unconfigured or both")
    p.add_argument("--no-naive", action="store_true", help="skip the naive client's run")
    p.add_argument("--no-tpm", action="store_true", help="skip the token-limited provider")
    p.add_argument("--no-capped", action="store_true",
                   help="skip the provider capping calls in flight")
    p.add_argument("--capped-items", type=int, default=200)
    p.add_argument("--tpm-items", type=int, default=60)
    p.add_argument("--tpm-prompt-words", type=int, default=175,
                   help="judge prompt length in the token-limited runs")
    p.add_argument("--max-tokens", type=int, default=64, help="the judge's max_tokens")
    p.add_argument("--deadline-ms", type=int, default=120000,
                   help="the requests' deadline (scheduler.default_deadline_ms)")
    p.add_argument("--source-timeout-ms", type=int, default=30000)
    p.add_argument("--resends", type=int, default=20,
                   help="times a request Arbiter answered 429/503 is sent again")
    p.add_argument("--model", default="fake-judge")
    p.add_argument("--seed", type=int, default=20251123)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    a = p.parse_args(argv)
    a.shapes = [s for s in a.shapes.split(",") if s]
    a.limits = [s for s in a.limits.split(",") if s]
    for s in a.shapes:
        if s not in SHAPES:
            p.error(f"--shapes: unknown shape {s!r}")
    for s in a.limits:
        if s not in LIMITS:
            p.error(f"--limits: unknown value {s!r}")
    return a


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    info = g.machine_info()
    command = shlex.join([sys.executable, *(sys.argv if argv is None else ["trainer_traffic.py", *argv])])
    g.log(f"machine: nproc={info['nproc']} cpu='{info['cpu_model']}' load={info['loadavg_1m']}")
    g.log(f"command: {command}")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))

    samples = 8
    items = g.make_items(-(-args.items // samples), samples, args.seed, False, 0.0)
    items = items[:args.items]
    g.check_items(items)
    specs = {name: shlex.split(flags) for name, flags in g.DEFAULT_PROVIDERS.items()}
    settings = {name: g.provider_settings(flags) for name, flags in specs.items()}
    t_lb = g.lower_bound(list(settings.values()), len(items))
    g.log(f"{len(items)} judge items, 3 providers (600/1200/1800 RPM per second, 300/800/150 ms, "
          f"0/2/5 % errors); lower bound {t_lb:.2f} s")

    rows: List[Dict[str, Any]] = []
    for limits in args.limits:
        for shape in args.shapes:
            rows.append(run_arbiter(shape, limits == "configured", items, specs, settings, t_lb,
                                    args, ""))
    if not args.no_naive:
        rows.append(run_naive(items, specs, t_lb, args))

    tpm_rows: List[Dict[str, Any]] = []
    if not args.no_tpm:
        tpm_items = g.make_items(-(-args.tpm_items // samples), samples, args.seed + 7,
                                 False, 0.0)[:args.tpm_items]
        pad_problems(tpm_items, args.tpm_prompt_words)
        g.check_items(tpm_items)
        tpm_specs = {"t": shlex.split(TPM_PROVIDER)}
        tpm_settings = {"t": g.provider_settings(tpm_specs["t"])}
        s = tpm_settings["t"]
        tpm_lb = tpm_lower_bound(tpm_items, s["tpm"], s["burst_seconds"], args.max_tokens,
                                 s["latency_median_s"])
        words = sum(prompt_tokens(it) for it in tpm_items) / len(tpm_items)
        g.log(f"token-limited provider: {len(tpm_items)} items, {words:.0f}-word prompts + "
              f"{args.max_tokens} max_tokens, 30,000 TPM per second; lower bound {tpm_lb:.2f} s")
        for limits in args.limits:
            for shape in ("batch", "score"):
                if shape in args.shapes:
                    tpm_rows.append(run_arbiter(shape, limits == "configured", tpm_items,
                                                tpm_specs, tpm_settings, tpm_lb, args, "TPM: "))

    capped_rows: List[Dict[str, Any]] = []
    if not args.no_capped:
        capped_items = g.make_items(-(-args.capped_items // samples), samples, args.seed + 11,
                                    False, 0.0)[:args.capped_items]
        g.check_items(capped_items)
        capped_specs = {"c": shlex.split(CAPPED_PROVIDER)}
        capped_settings = {"c": dict(g.provider_settings(capped_specs["c"]),
                                     max_concurrency=CAPPED_CALLS)}
        s = capped_settings["c"]
        capped_lb = capped_lower_bound(len(capped_items), s["latency_median_s"],
                                       s["latency_p99_s"])
        g.log(f"provider capping calls in flight: {len(capped_items)} items, "
              f"{CAPPED_CALLS} at once, 3,000 RPM stated; lower bound {capped_lb:.2f} s")
        for limits in args.limits:
            for shape in ("batch", "score"):
                if shape in args.shapes:
                    capped_rows.append(run_arbiter(shape, limits == "configured", capped_items,
                                                   capped_specs, capped_settings, capped_lb,
                                                   args, "capped: "))

    g.log("")
    g.log(f"{len(items)} judge items, lower bound {t_lb:.2f} s:")
    g.log(table(rows))
    if tpm_rows:
        g.log("")
        g.log("token-limited provider (30,000 TPM, one-second burst):")
        g.log(table(tpm_rows))
    if capped_rows:
        g.log("")
        g.log(f"provider taking {CAPPED_CALLS} calls at once (3,000 RPM stated in its headers):")
        g.log(table(capped_rows))
    result = {"machine": info, "command": command, "lower_bound_s": t_lb, "runs": rows,
              "tpm_runs": tpm_rows, "capped_runs": capped_rows, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    path = args.out / "trainer_traffic.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    g.log(f"results: {path}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        g.log("interrupted; child processes stopped")
        sys.exit(130)
    except g.StartError as e:
        g.log(f"error: a child process failed to start: {e}")
        sys.exit(3)
