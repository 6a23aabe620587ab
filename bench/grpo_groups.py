#!/usr/bin/env python3
"""GRPO groups: group completion time with group-aware ordering vs plain FIFO, in one run.

A GRPO advantage needs every rollout of a prompt, so a trainer waits for a group until its
slowest member is scored. This benchmark sends P prompts x G rollouts of judge items to
Arbiter, one item per POST /v1/score with the item's `group`, the way trainers that score
rollouts as they finish send them (slime's per-sample `remote_rm`, verl's async reward loop),
against two rate-limited fake providers with spread-out latencies. Each shape runs twice, each
time with fresh providers and a fresh Arbiter that differ only in `scheduler.group_order`
(true: a group's members are ordered by the group's first arrival; false: plain FIFO by each
item's own arrival). Same items, same arrival times.

Arrival shapes:
- stream:W: prompt i's rollouts start at i x W / P (W from --windows-s); each arrives after a lognormal
  generation time (median --gen-median-s, sigma --gen-sigma, capped at --gen-max-s), so a
  group's members arrive spread out, interleaved with other groups' (asynchronous RL);
- step: every item of the step at once, in a shuffled order (concurrent single-item senders).

Group completion time: from the group's first member sent to its last member answered (what
a trainer waits for a prompt's advantage); "after last rollout": from the group's last member
sent to its last answer (the part the reward service adds). The makespan: from the first item
sent to the last answered.

The gain depends on the shape. When every item arrives at once, the group finishing last
finishes at the makespan whatever the order, so group-aware ordering improves the median
group, not the p99. When rollouts stream in faster than the providers allow (96 x 8 items
over 12, 16 or 24 s plus generation times, against 30 calls/s: about 1.9, 1.5 and 1.0 times
the capacity), FIFO leaves a group's late members behind newer groups' first ones, and
group-aware ordering cuts the p99 the more, the longer the queue. Beside each measurement the
table gives the p99 each ordering reaches on an ideal service with the same send times
(`ideal_p99`: one server at the providers' combined rate, no provider latency), so a shape's
ceiling for the ratio is plain beside what the real service kept of it, and the p99 a plain
dispatcher reaches on a model of the providers with their latencies (`latency_model_p99`,
the mean of --model-draws draws, 32 by default: one draw's p99 spreads over seconds): a
group waits for the slowest of its members' calls, an item FIFO leaves behind for one call,
so the latency spread takes more from group-aware ordering than from FIFO. Prints a markdown
table, writes OUT/grpo_groups.json and, with matplotlib, OUT/grpo_groups.png (CDF of group
completion).

    python3 bench/grpo_groups.py                      # needs build/arbiter, arbiter-fake-provider
    python3 bench/grpo_groups.py --shapes stream --prompts 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grpo_step  # noqa: E402  (the items, the child processes and the config come from there)
from grpo_step import Child, Children, StartError, log  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SHAPES = ("stream", "step")
MODES = ("group", "fifo")
LABEL = {"group": "group-aware", "fifo": "FIFO"}

DEFAULT_PROVIDERS = {
    "a": "--rpm 900 --burst-seconds 1 --latency-median-ms 300 --latency-p99-ms 1500 --seed 11",
    "b": "--rpm 900 --burst-seconds 1 --latency-median-ms 600 --latency-p99-ms 3000 --seed 22",
}


def arrivals(shape: str, items: List[Dict[str, Any]], args: argparse.Namespace) -> List[float]:
    """Each item's send time in seconds after the start, the same for both modes. `shape` is
    "step" or "stream:WINDOW" (the prompts' rollouts start over WINDOW seconds)."""
    rng = random.Random(args.seed + 1)
    if shape == "step":
        order = list(range(len(items)))
        rng.shuffle(order)
        # All at once, in a shuffled order: 1 ms apart keeps the order on the wire.
        out = [0.0] * len(items)
        for rank, i in enumerate(order):
            out[i] = rank * 0.001
        return out
    mu = math.log(args.gen_median_s)
    out = []
    for it in items:
        start = it["group"] * float(shape.split(":")[1]) / args.prompts
        out.append(start + min(args.gen_max_s, rng.lognormvariate(mu, args.gen_sigma)))
    return out


async def send_all(items: List[Dict[str, Any]], sends: List[float], url: str,
                   args: argparse.Namespace) -> Dict[str, Any]:
    import aiohttp

    sent: List[Optional[float]] = [None] * len(items)
    answered: List[Optional[float]] = [None] * len(items)
    status: List[str] = ["lost"] * len(items)
    errors: List[str] = []
    t0 = time.monotonic()

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        await asyncio.sleep(max(0.0, t0 + sends[i] - time.monotonic()))
        it = items[i]
        body = {"items": [{"reward": "judge", "solution_str": it["candidate"],
                           "ground_truth": it["reference"], "group": f"prompt-{it['group']}",
                           "extra_info": {"problem": it["problem"]}}],
                "deadline_ms": args.deadline_ms}
        sent[i] = time.monotonic() - t0
        try:
            async with session.post(f"{url}/v1/score", json=body) as resp:
                text = await resp.text()
                if resp.status != 200:
                    errors.append(f"HTTP {resp.status}: {text[:200]}")
                    status[i] = f"http_{resp.status}"
                    return
                status[i] = json.loads(text)["results"][0]["status"]
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, KeyError) as e:
            errors.append(f"{type(e).__name__}: {e}")
            return
        answered[i] = time.monotonic() - t0

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=args.deadline_ms / 1000.0 + 60.0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(one(session, i) for i in range(len(items))))
    return {"sent": sent, "answered": answered, "status": status, "errors": errors}


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(items: List[Dict[str, Any]], raw: Dict[str, Any]) -> Dict[str, Any]:
    groups: Dict[int, List[int]] = {}
    for i, it in enumerate(items):
        groups.setdefault(it["group"], []).append(i)
    completion = []
    waits = []
    for members in groups.values():
        if any(raw["answered"][i] is None for i in members):
            continue  # a group with a lost member never completes
        first = min(raw["sent"][i] for i in members)
        last = max(raw["answered"][i] for i in members)
        completion.append(last - first)
        waits.append(last - max(raw["sent"][i] for i in members))
    done = [t for t in raw["answered"] if t is not None]
    sent = [t for t in raw["sent"] if t is not None]
    statuses: Dict[str, int] = {}
    for s in raw["status"]:
        statuses[s] = statuses.get(s, 0) + 1
    return {"groups": len(groups), "complete_groups": len(completion),
            "group_p50_s": percentile(completion, 0.5), "group_p99_s": percentile(completion, 0.99),
            "group_mean_s": sum(completion) / len(completion) if completion else float("nan"),
            "wait_p50_s": percentile(waits, 0.5), "wait_p99_s": percentile(waits, 0.99),
            "makespan_s": (max(done) - min(sent)) if done and sent else float("nan"),
            "statuses": statuses, "errors": raw["errors"][:10], "completion_s": sorted(completion)}


def send_order(items: List[Dict[str, Any]],
               sends: List[float]) -> "tuple[List[int], Dict[int, float]]":
    """The items' indices by send time, and each group's first send."""
    order = sorted(range(len(items)), key=lambda k: sends[k])
    first: Dict[int, float] = {}
    for i in order:
        first.setdefault(items[i]["group"], sends[i])
    return order, first


def ideal_p99(items: List[Dict[str, Any]], sends: List[float], rate: float,
              group_order: bool) -> float:
    """The group p99 an ordering reaches on an ideal service with the same send times: one
    server that answers `rate` items/s (the providers' combined limit) with no provider
    latency, taking the queued item of the oldest group first (group_order) or the oldest item
    (FIFO). Not a measurement: it is the shape's ceiling for the ratio of the two."""
    import heapq

    order, first = send_order(items, sends)
    queue: List[Any] = []
    done: Dict[int, float] = {}
    now, k = 0.0, 0
    while k < len(order) or queue:
        if not queue and now < sends[order[k]]:
            now = sends[order[k]]
        while k < len(order) and sends[order[k]] <= now:
            i = order[k]
            g = items[i]["group"]
            heapq.heappush(queue, (first[g] if group_order else sends[i], sends[i], i))
            k += 1
        _, _, i = heapq.heappop(queue)
        now += 1.0 / rate
        g = items[i]["group"]
        done[g] = max(done.get(g, 0.0), now)
    return percentile([done[g] - first[g] for g in first], 0.99)


def latency_model_p99(items: List[Dict[str, Any]], sends: List[float],
                      settings: Sequence[Dict[str, float]], group_order: bool, seed: int,
                      step_s: float = 0.001) -> float:
    """The group p99 an ordering reaches on a model of the benchmark's providers: each paces
    its calls with a token bucket (rpm / 60 a second, `burst_seconds` of them at once, full at
    the start), and each call takes a latency drawn from the provider's lognormal (its median
    and p99), as the fake provider draws it. Queued items go in order (the oldest group's
    first, or the oldest item's) to the provider with a token that answers fastest at the
    median. A plain dispatcher: no hedging, no holding work for the faster provider, no
    overhead. Not a measurement: beside the ideal service (`ideal_p99`, no latency at all) it
    shows what the providers' latency spread takes from the ratio, since a group waits for the
    slowest of its members' calls, while an item FIFO leaves behind waits for one call."""
    import bisect

    rng = random.Random(seed)
    provs = sorted(({"rate": s["rpm"] / 60.0, "cap": max(1.0, s["rpm"] * s["burst_seconds"] / 60.0),
                     "median": s["latency_median_s"],
                     "sigma": math.log(s["latency_p99_s"] / s["latency_median_s"]) / 2.326
                     if s["latency_median_s"] > 0 and s["latency_p99_s"] > s["latency_median_s"]
                     else 0.0} for s in settings if s["rpm"] > 0), key=lambda p: p["median"])
    for p in provs:
        p["tokens"] = p["cap"]
    order, first = send_order(items, sends)
    queue: List[Any] = []
    done: Dict[int, float] = {}
    now, k, left = 0.0, 0, len(items)
    while left > 0:
        while k < len(order) and sends[order[k]] <= now:
            i = order[k]
            g = items[i]["group"]
            bisect.insort(queue, (first[g] if group_order else sends[i], sends[i], i))
            k += 1
        for p in provs:
            p["tokens"] = min(p["cap"], p["tokens"] + p["rate"] * step_s)
            while queue and p["tokens"] >= 1.0:
                _, _, i = queue.pop(0)
                p["tokens"] -= 1.0
                latency = p["median"] * math.exp(rng.gauss(0.0, p["sigma"]))
                g = items[i]["group"]
                done[g] = max(done.get(g, 0.0), now + latency)
                left -= 1
        now += step_s
    return percentile([done[g] - first[g] for g in first], 0.99)


def run_once(shape: str, mode: str, items: List[Dict[str, Any]], sends: List[float],
             specs: Dict[str, List[str]], settings: Dict[str, Dict[str, float]],
             args: argparse.Namespace) -> Dict[str, Any]:
    log(f"=== {shape} / {LABEL[mode]}: fresh providers and Arbiter ===")
    children = Children()
    tag = f"groups-{shape.replace(':', '-')}-{mode}"
    try:
        providers = grpo_step.start_providers(args.fake_provider_bin, specs, args.model,
                                              args.out, children, args.startup_timeout_s, tag)
        cfg_path = args.out / f"{tag}.toml"
        cfg_path.write_text(grpo_step.arbiter_config_toml(providers, settings, args))
        env = dict(os.environ, ARBITER_SCHEDULER_GROUP_ORDER="true" if mode == "group" else "false")
        arbiter = children.add(Child(
            f"Arbiter ({LABEL[mode]})", [str(args.arbiter_bin), "serve", "--config", str(cfg_path),
                                         "--port", "0"], args.out / f"{tag}-arbiter.log", env))
        url = arbiter.wait_listening(args.startup_timeout_s)
        raw = asyncio.run(send_all(items, sends, url, args))
    finally:
        children.stop_all()
    summary = summarize(items, raw)
    log(f"  group p50 {summary['group_p50_s']:.2f}s, p99 {summary['group_p99_s']:.2f}s, "
        f"makespan {summary['makespan_s']:.2f}s, statuses {summary['statuses']}")
    for err in summary["errors"][:3]:
        log(f"  error: {err}")
    return summary


def model_cell(by_mode: Dict[str, float], mode: str) -> str:
    """A model's p99 for `mode`, and for group-aware the ratio FIFO / group-aware after it."""
    if mode not in by_mode:
        return ""
    cell = f"{by_mode[mode]:.2f}"
    if mode == "group" and "fifo" in by_mode:
        cell += f" ({by_mode['fifo'] / by_mode['group']:.2f}×)"
    return cell


def markdown_table(results: Dict[str, Dict[str, Dict[str, Any]]],
                   ideal: Dict[str, Dict[str, float]],
                   latency_model: Optional[Dict[str, Dict[str, float]]] = None) -> str:
    """`ideal`: per shape, each ordering's group p99 on the ideal service (`ideal_p99`);
    `latency_model`: the mean over latency draws of `latency_model_p99`."""
    latency_model = latency_model or {}
    lines = ["| arrivals | ordering | group p50 (s) | group p99 (s) | group mean (s) "
             "| after last rollout p50 / p99 (s) | makespan (s) | p99 FIFO / group-aware "
             "| makespan group-aware / FIFO | ideal order's p99 (s) and ratio "
             "| plain dispatch with the providers' latencies: p99 (s) and ratio "
             "| failed or lost |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for shape, by_mode in results.items():
        g, f = by_mode.get("group"), by_mode.get("fifo")
        for mode, s in by_mode.items():
            ratio = mspan = ""
            if mode == "group" and g and f:
                ratio = f"**{f['group_p99_s'] / g['group_p99_s']:.2f}×**"
                mspan = f"{g['makespan_s'] / f['makespan_s']:.3f}"
            bad = sum(n for k, n in s["statuses"].items() if k not in ("ok", "fallback"))
            lines.append(f"| {shape} | {LABEL[mode]} | {s['group_p50_s']:.2f} | "
                         f"{s['group_p99_s']:.2f} | {s['group_mean_s']:.2f} | "
                         f"{s['wait_p50_s']:.2f} / {s['wait_p99_s']:.2f} | "
                         f"{s['makespan_s']:.2f} | {ratio} | {mspan} | "
                         f"{model_cell(ideal.get(shape, {}), mode)} | "
                         f"{model_cell(latency_model.get(shape, {}), mode)} | {bad} |")
    return "\n".join(lines)


def plot(results: Dict[str, Dict[str, Dict[str, Any]]], path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("  (matplotlib not installed: no plot)")
        return
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (shape, by_mode) in zip(axes[0], results.items()):
        for mode, s in by_mode.items():
            xs = s["completion_s"]
            ax.plot(xs, [(k + 1) / len(xs) for k in range(len(xs))], label=LABEL[mode])
        ax.set_title(f"{shape} s" if shape.startswith("stream") else "whole step at once")
        ax.set_xlabel("group completion time (s)")
        ax.set_ylabel("share of groups complete")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    log(f"  plot: {path}")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: stream, step")
    p.add_argument("--prompts", type=int, default=96, help="groups (P)")
    p.add_argument("--samples", type=int, default=8, help="rollouts per prompt (G)")
    p.add_argument("--windows-s", default="12,16,24",
                   help="stream: the prompts' rollouts start over each of these windows (s), "
                        "one stream shape each; shorter: more overload")
    p.add_argument("--gen-median-s", type=float, default=1.0, help="stream: generation time median")
    p.add_argument("--gen-sigma", type=float, default=0.8, help="stream: lognormal sigma")
    p.add_argument("--gen-max-s", type=float, default=8.0, help="stream: generation time cap")
    p.add_argument("--seed", type=int, default=20261125)
    p.add_argument("--model", default="fake-judge")
    p.add_argument("--deadline-ms", type=int, default=300000)
    p.add_argument("--source-max-concurrency", type=int, default=64)
    p.add_argument("--source-timeout-ms", type=int, default=30000)
    for name, spec in DEFAULT_PROVIDERS.items():
        p.add_argument(f"--provider-{name}", default=spec, metavar="FLAGS",
                       help=f"arbiter-fake-provider flags of provider {name}")
    p.add_argument("--arbiter-bin", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--fake-provider-bin", type=Path, default=REPO / "build" / "arbiter-fake-provider")
    p.add_argument("--model-draws", type=int, default=32,
                   help="latency draws the plain-dispatch model averages (0: no model column)")
    p.add_argument("--startup-timeout-s", type=float, default=30.0)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    for s in shapes:
        if s not in SHAPES:
            p.error(f"--shapes: unknown shape {s!r} (one of {', '.join(SHAPES)})")
    try:
        windows = [float(w) for w in args.windows_s.split(",") if w]
    except ValueError:
        p.error(f"--windows-s: expected numbers, got {args.windows_s!r}")
    if any(w <= 0 for w in windows):
        p.error("--windows-s: windows must be positive")
    args.shapes = [f"stream:{w:g}" for w in windows if "stream" in shapes] + \
        (["step"] if "step" in shapes else [])
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if grpo_step.missing_binary(args.arbiter_bin, args.fake_provider_bin):
        return 2
    specs = {name: getattr(args, f"provider_{name}").split() for name in DEFAULT_PROVIDERS}
    settings = {name: grpo_step.provider_settings(spec) for name, spec in specs.items()}
    items = grpo_step.make_items(args.prompts, args.samples, args.seed, False, 0.0)
    results: Dict[str, Dict[str, Dict[str, Any]]] = {}
    ideal: Dict[str, Dict[str, float]] = {}
    latency_model: Dict[str, Dict[str, float]] = {}
    rate = sum(s["rpm"] for s in settings.values()) / 60.0
    limited = all(s["rpm"] > 0 for s in settings.values())
    try:
        for shape in args.shapes:
            sends = arrivals(shape, items, args)
            results[shape] = {}
            if rate > 0:  # providers without a request limit have no ideal rate to model
                ideal[shape] = {m: ideal_p99(items, sends, rate, m == "group") for m in MODES}
            if limited and args.model_draws > 0:
                latency_model[shape] = {
                    m: sum(latency_model_p99(items, sends, list(settings.values()), m == "group",
                                             args.seed + d) for d in range(args.model_draws))
                    / args.model_draws for m in MODES}
            for mode in MODES:
                results[shape][mode] = run_once(shape, mode, items, sends, specs, settings, args)
    except StartError as e:
        log(f"error: {e}")
        return 2
    log("")
    log(f"{args.prompts} prompts x {args.samples} rollouts = {len(items)} judge items, one per "
        f"request; providers' combined limit {rate:g} calls/s; "
        f"{time.strftime('%Y-%m-%d')}, {grpo_step.machine_info()['nproc']} cores")
    log("")
    log(markdown_table(results, ideal, latency_model))
    (args.out / "grpo_groups.json").write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()}, "machine": grpo_step.machine_info(),
         "results": results, "ideal_order_p99_s": ideal,
         "latency_model_p99_s": latency_model}, indent=1))
    plot(results, args.out / "grpo_groups.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
