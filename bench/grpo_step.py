#!/usr/bin/env python3
"""The "GRPO step" benchmark: one step's judge calls through Arbiter vs a naive async client.

A GRPO step scores 128 prompts x 8 sampled responses = 1024 items with an LLM judge. The judge
is served by three rate-limited providers (arbiter-fake-provider processes with different
limits, latencies and error rates). The same 1024 items are scored twice, each time against
freshly started providers (full buckets, zeroed counters):

- arbiter: `arbiter serve` with the three providers as `[[sources]]`; the items are POSTed to
  `/v1/score` as one request per prompt group (128 concurrent requests of 8 items).
- naive:   what today's async batch reward managers do: asyncio + aiohttp, a semaphore of 60
  calls, round robin over the three providers per attempt, exponential backoff with jitter
  (1 s doubling to 32 s) on 429 / 5xx / connection errors, 6 attempts, Retry-After ignored.

Per run it reports the makespan (first send to last answer), the attempts and 429s the
providers saw (their `GET /stats`), items lost, scores that differ from the Jaccard the fake
judge computes, and the makespan relative to an analytic lower bound. Prints a markdown
table, writes OUT/grpo_step.json and OUT/grpo_step.png (completed items vs time), and stops
every child process however the run ends.

    python3 bench/grpo_step.py                        # both runs (needs build/arbiter)
    python3 bench/grpo_step.py --only naive           # the baseline alone
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import platform
import queue
import random
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
RUNS = ("arbiter", "naive")
LABEL = {"arbiter": "Arbiter", "naive": "naive asyncio"}

# The three providers; each string is passed to arbiter-fake-provider as is (after --port 0).
DEFAULT_PROVIDERS = {
    "a": "--rpm 600 --burst-seconds 1 --latency-median-ms 300 --latency-p99-ms 900 "
         "--error-rate-500 0.00 --seed 101",
    "b": "--rpm 1200 --burst-seconds 1 --latency-median-ms 800 --latency-p99-ms 2500 "
         "--error-rate-500 0.02 --seed 202",
    "c": "--rpm 1800 --burst-seconds 1 --latency-median-ms 150 --latency-p99-ms 500 "
         "--error-rate-503 0.05 --seed 303",
}

# Arbiter's `default` judge template (backends/rewards/judge_template.cpp), copied so that the
# naive client sends the same text.
JUDGE_TEMPLATE = (
    "Rate how similar a candidate solution is to a reference solution for the problem below: "
    "do they reach the same result, by equally sound means?\n"
    "Give a value between 0 and 1 with 3 decimals, where 0.000 means unrelated or wrong and "
    "1.000 means equivalent.\n"
    "Output exactly ONE line, in this format and nothing else:\n"
    "REWARD: <number between 0 and 1 with 3 decimals>\n"
    "\n"
    "Problem:\n"
    "{PROBLEM}\n"
    "\n"
    "Reference:\n"
    "{REFERENCE_SOLUTION}\n"
    "\n"
    "Candidate:\n"
    "{CANDIDATE_SOLUTION}"
)

REWARD_RE = re.compile(r"REWARD:\s*([-+]?\d+(?:\.\d+)?)")


def log(msg: str) -> None:
    print(msg, flush=True)


class StartError(RuntimeError):
    """A child process did not start."""


def missing_binary(*binaries: Optional[Path]) -> bool:
    """Whether one of `binaries` (None: not asked for) is not there; logs which, and how to
    build it."""
    for binary in binaries:
        if binary is not None and not binary.exists():
            log(f"{binary} not found; build it first (scripts/setup.sh or cmake --build build)")
            return True
    return False


def write_results(args: argparse.Namespace, name: str, rows: List[Dict[str, Any]],
                  table: str) -> None:
    """Writes OUT/NAME.json: the arguments, the rows and their markdown table."""
    path = args.out / f"{name}.json"
    path.write_text(json.dumps(
        {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
         "rows": rows, "table": table}, indent=2))
    log(f"  results: {path}")


# --------------------------------------------------------------------------------------------
# Judge items


_NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun"]
_THINGS = ["apples", "marbles", "books", "coins", "stamps", "pencils", "cards", "shells"]
_ADD = "Adding them gives {a} + {b} = {s}"
_MUL = "Multiplying gives {a} times {b} = {p}"
_DIV = "Dividing {p} by {b} leaves {a}"
_SUB = "Subtracting {b} from {s} gives {a}"
# (problem, the key of its answer, the step that computes it)
_PROBLEMS = [
    ("{n} has {a} {t} and buys {b} more. How many {t} does {n} have now?", "s", _ADD),
    ("{n} packs {a} boxes with {b} {t} each. How many {t} are packed in total?", "p", _MUL),
    ("A train travels {a} km per hour for {b} hours. How far does it travel?", "p", _MUL),
    ("{n} shares {p} {t} equally among {b} friends. How many does each friend get?", "a", _DIV),
    ("A rectangle is {a} cm long and {b} cm wide. What is its perimeter?", "q",
     "The perimeter is 2 times ({a} + {b}) = {q}"),
    ("What is the sum of the first {a} positive integers?", "t2",
     "Using the formula n (n + 1) / 2 with n = {a} gives {t2}"),
    ("{n} had {s} {t} and gave away {b}. How many {t} are left?", "a", _SUB),
    ("Solve for x: x + {b} = {s}.", "a", _SUB),
]
_STEPS = [
    "We start from the numbers given in the problem",
    "First we note that {a} and {b} are the two quantities",
    _ADD, _MUL, _DIV, _SUB,
    "We check the result by substituting it back",
    "Each step keeps the units consistent",
    "So the quantity we want follows directly",
]
_WRONG = [
    "I think the answer is probably {w}",
    "Guessing from the pattern the result should be {w}",
    "The numbers suggest {w} after rounding",
    "Counting again I get {w}",
]
_FILLER = ("so then thus because we note that it follows hence clearly the value of each "
           "term and both sides again carefully").split()


def _numbers(rng: random.Random) -> Dict[str, Any]:
    a, b = rng.randint(2, 60), rng.randint(2, 30)
    return {"a": a, "b": b, "s": a + b, "p": a * b, "q": 2 * (a + b), "t2": a * (a + 1) // 2,
            "n": rng.choice(_NAMES), "t": rng.choice(_THINGS)}


def _mutate(text: str, rng: random.Random, strength: float) -> str:
    """Drops, replaces and inserts words with total probability `strength`."""
    out: List[str] = []
    for w in text.split():
        r = rng.random()
        if r < strength / 3:
            continue
        if r < 2 * strength / 3:
            out.append(rng.choice(_FILLER))
        elif r < strength:
            out.extend([w, rng.choice(_FILLER)])
        else:
            out.append(w)
    return " ".join(out) or text


def _candidate(reference: str, n: Dict[str, Any], answer: int, rng: random.Random) -> str:
    """A sampled response: a near copy, a loose paraphrase, a wrong attempt or a short guess."""
    r = rng.random()
    if r < 0.35:
        return _mutate(reference, rng, 0.15)
    if r < 0.65:
        return _mutate(reference, rng, 0.45)
    wrong = answer + rng.choice([-3, -1, 1, 2, 7, 10])
    if r < 0.9:
        steps = rng.sample(_STEPS, rng.randint(1, 3))
        text = ". ".join(s.format(**n) for s in steps) + ". " + rng.choice(_WRONG).format(w=wrong)
        return _mutate(text, rng, 0.2)
    return f"The answer is {wrong}."


def make_items(prompts: int, samples: int, seed: int, duplicates: bool,
               duplicate_rate: float) -> List[Dict[str, Any]]:
    """prompts x samples judge items, grouped by prompt (items [g*samples, (g+1)*samples)).

    Every (candidate, reference) pair is distinct unless `duplicates` is set; then each
    sample after the first repeats an earlier sample of its group with `duplicate_rate`.
    """
    rng = random.Random(seed)
    items: List[Dict[str, Any]] = []
    seen = set()
    for g in range(prompts):
        n = _numbers(rng)
        template, key, step = rng.choice(_PROBLEMS)
        problem = f"[{g + 1}] " + template.format(**n)
        answer = n[key]
        steps = [s for s in rng.sample(_STEPS, rng.randint(1, 3)) if s != step] + [step]
        reference = ". ".join(s.format(**n) for s in steps) + f". The answer is {answer}."
        group: List[str] = []
        for _ in range(samples):
            if duplicates and group and rng.random() < duplicate_rate:
                cand = rng.choice(group)
            else:
                cand = _candidate(reference, n, answer, rng)
                tries = 0
                while (cand, reference) in seen:
                    tries += 1
                    cand = _candidate(reference, n, answer, rng) if tries < 20 else \
                        f"{cand} {rng.choice(_FILLER)} {tries}"
            seen.add((cand, reference))
            group.append(cand)
            items.append({"group": g, "problem": problem, "reference": reference,
                          "candidate": cand})
    for it in items:
        it["expected"] = expected_score(it["candidate"], it["reference"])
    return items


def judge_prompt(item: Dict[str, Any]) -> str:
    # str.replace, not str.format: the texts may hold braces.
    return (JUDGE_TEMPLATE.replace("{PROBLEM}", item["problem"])
            .replace("{REFERENCE_SOLUTION}", item["reference"])
            .replace("{CANDIDATE_SOLUTION}", item["candidate"]))


_WORD = re.compile(rb"[A-Za-z0-9]+")


def _word_set(text: str) -> set:
    # rules.cpp `tokenize`: lower-cased ASCII alphanumeric runs, on the UTF-8 bytes.
    return {w.lower() for w in _WORD.findall(text.encode("utf-8"))}


def _sections(prompt: str) -> Tuple[Optional[str], Optional[str]]:
    """rules.cpp `find_sections`: text after the last Reference: / Candidate: labels."""
    low = prompt.lower()
    ref, cand = low.rfind("reference:"), low.rfind("candidate:")

    def section(start: int, other: int) -> str:
        end = other if other != -1 and other > start else len(prompt)
        return prompt[start + 10:end].strip(" \t\r\n")

    return (section(ref, cand) if ref != -1 else None,
            section(cand, ref) if cand != -1 else None)


def expected_score(candidate: str, reference: str) -> float:
    """The fake judge's reward for this item: Jaccard of the word sets, 3 decimals."""
    ref, cand = _sections(judge_prompt({"problem": "", "reference": reference,
                                        "candidate": candidate}))
    if ref is None or cand is None:  # cannot happen with the template; keeps the rule whole
        raise ValueError("judge prompt without Reference:/Candidate: sections")
    a, b = _word_set(cand), _word_set(ref)
    jac = 1.0 if not a and not b else len(a & b) / len(a | b)
    return float(f"{jac:.3f}")


def check_items(items: List[Dict[str, Any]]) -> None:
    """The texts must not hold the judge's labels, or the sections would shift."""
    for it in items:
        for field in ("problem", "reference", "candidate"):
            low = it[field].lower()
            if "reference:" in low or "candidate:" in low:
                raise ValueError(f"generated {field} holds a judge label: {it[field]!r}")
        ref, cand = _sections(judge_prompt(it))
        if (ref, cand) != (it["reference"].strip(), it["candidate"].strip()):
            raise ValueError(f"judge prompt sections do not round-trip for {it!r}")


# --------------------------------------------------------------------------------------------
# Provider settings and the lower bound


def provider_settings(args: Sequence[str]) -> Dict[str, float]:
    """The fake-provider flags the lower bound and Arbiter's config need."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--rpm", type=float, default=0.0)
    p.add_argument("--tpm", type=float, default=0.0)
    p.add_argument("--burst-seconds", type=float, default=60.0)
    p.add_argument("--latency-median-ms", type=float, default=0.0)
    p.add_argument("--latency-p99-ms", type=float, default=0.0)
    for kind in ("500", "503", "timeout", "reset", "malformed"):
        p.add_argument(f"--error-rate-{kind}", type=float, default=0.0)
    ns, _ = p.parse_known_args(list(args))
    error_rate = (ns.error_rate_500 + ns.error_rate_503 + ns.error_rate_timeout
                  + ns.error_rate_reset + ns.error_rate_malformed)
    return {"rpm": ns.rpm, "tpm": ns.tpm, "burst_seconds": ns.burst_seconds,
            "latency_median_s": ns.latency_median_ms / 1000.0,
            "latency_p99_s": ns.latency_p99_ms / 1000.0, "error_rate": error_rate}


def capacity_curve(settings: Sequence[Dict[str, float]], t: float) -> float:
    """Σ_i (1 − e_i) · (b_i + r_i · max(0, t − L_i)): the successes the providers can deliver
    by t.

    r_i = rpm_i / 60 per second, b_i = rpm_i · burst_i / 60 (the initial burst; at least one
    request, as in the fake provider), e_i = the provider's total error rate, L_i = its median
    latency. An unlimited provider (rpm 0) has infinite capacity.
    """
    total = 0.0
    for s in settings:
        ok = 1.0 - s["error_rate"]
        if ok <= 0:
            continue
        if s["rpm"] <= 0:
            return math.inf
        r = s["rpm"] / 60.0
        b = max(1.0, s["rpm"] * s["burst_seconds"] / 60.0)
        total += ok * (b + r * max(0.0, t - s["latency_median_s"]))
    return total


def lower_bound(settings: Sequence[Dict[str, float]], n: int) -> float:
    """The smallest T with capacity_curve(T) ≥ n (piecewise linear, non-decreasing in T);
    inf when the providers can never deliver n successes."""
    if capacity_curve(settings, 0.0) >= n:
        return 0.0
    knots = sorted({0.0, *(s["latency_median_s"] for s in settings)})
    for k, t0 in enumerate(knots):
        f0 = capacity_curve(settings, t0)
        if f0 >= n:
            return t0
        # Slope on [t0, next knot): the providers whose latency has passed.
        slope = sum((1.0 - s["error_rate"]) * s["rpm"] / 60.0 for s in settings
                    if s["latency_median_s"] <= t0 and s["error_rate"] < 1.0)
        t1 = knots[k + 1] if k + 1 < len(knots) else math.inf
        if slope > 0 and t0 + (n - f0) / slope <= t1:
            return t0 + (n - f0) / slope
    return math.inf


# --------------------------------------------------------------------------------------------
# Child processes


class Child:
    """A process we started: log file, first stdout line, clean shutdown."""

    def __init__(self, label: str, cmd: List[str], log_path: Path, env: Optional[Dict] = None):
        self.label = label
        self.cmd = cmd
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.url: Optional[str] = None
        log(f"starting {label}: {shlex.join(cmd)}")
        try:
            self.proc: Optional[subprocess.Popen] = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log,
                start_new_session=True, env=env)
        except OSError as e:
            self._log.close()
            raise StartError(f"{label}: cannot run {cmd[0]}: {e}") from None

    def log_tail(self, n: int = 15) -> str:
        try:
            self._log.flush()
            lines = self.log_path.read_text(errors="replace").splitlines()
            return "\n".join("    " + line for line in lines[-n:])
        except (OSError, ValueError):
            return ""

    def wait_listening(self, timeout: float) -> str:
        """Waits for `listening on http://HOST:PORT` on stdout; returns the base URL."""
        assert self.proc is not None and self.proc.stdout is not None
        lines: "queue.Queue[Optional[bytes]]" = queue.Queue()
        out = self.proc.stdout

        def pump() -> None:  # first line to us, the rest to the log, so the pipe never fills
            first = True
            for line in out:
                if first:
                    lines.put(line)
                    first = False
                elif not self._log.closed:
                    self._log.write(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        try:
            first = lines.get(timeout=timeout)
        except queue.Empty:
            raise StartError(f"{self.label} printed nothing on stdout within {timeout:.0f}s\n"
                             + self.log_tail()) from None
        if first is None:
            raise StartError(f"{self.label} exited (status {self.proc.wait()}) before "
                             f"listening; its log ({self.log_path}):\n" + self.log_tail())
        text = first.decode(errors="replace").strip()
        m = re.search(r"listening on (https?)://(\[[^\]]+\]|[^\s:/]+):(\d+)", text)
        if not m:
            raise StartError(f"unexpected first line from {self.label}: {text!r}")
        host = m.group(2)
        if host in ("0.0.0.0", "[::]", "::"):
            host = "127.0.0.1"
        self.url = f"{m.group(1)}://{host}:{m.group(3)}"
        log(f"  {self.label}: {text}")
        return self.url

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log(f"  {self.label} still running after {timeout:.0f}s; sending SIGKILL")
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            rc = self.proc.returncode
            if rc not in (0, -signal.SIGTERM):
                how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"status {rc}"
                log(f"  {self.label} exited ({how}); log: {self.log_path}")
            self.proc = None
        if not self._log.closed:
            self._log.close()


class Children:
    """Every child of the current run, stopped together (newest first)."""

    def __init__(self) -> None:
        self.items: List[Child] = []

    def add(self, child: Child) -> Child:
        self.items.append(child)
        return child

    def stop_all(self) -> None:
        while self.items:
            self.items.pop().stop()


def start_providers(binary: Path, specs: Dict[str, List[str]], model: str, out: Path,
                    children: Children, timeout: float, run: str) -> Dict[str, Child]:
    if not binary.exists():
        raise StartError(f"{binary} not found; build it: cmake --build build "
                         "--target arbiter-fake-provider")
    started = {}
    for name, extra in specs.items():
        cmd = [str(binary), "--port", "0", "--model", model, *extra]
        child = children.add(Child(f"provider-{name}", cmd, out / f"{run}-provider-{name}.log"))
        try:
            child.wait_listening(timeout)
        except StartError as e:
            if "--burst-seconds" in child.log_tail():
                raise StartError(f"{e}\n  (this arbiter-fake-provider predates --burst-seconds; "
                                 "rebuild it)") from None
            raise
        started[name] = child
    return started


def arbiter_config_toml(providers: Dict[str, Child], settings: Dict[str, Dict[str, float]],
                        args: argparse.Namespace) -> str:
    """Arbiter's configuration: the three providers as [[sources]] serving the judge.

    In the format config/load.cpp reads (docs/configuration.md): `[rewards.NAME] kind`
    tables, integer `requests_per_minute`, the burst as `burst_ms` (1..60000).
    """
    lines = [
        "# Written by bench/grpo_step.py: three fake providers serving the `judge` reward.",
        "[server]",
        "port = 0",
        "",
        "[scheduler]",
        f"default_deadline_ms = {args.deadline_ms}",
        f"max_deadline_ms = {args.deadline_ms}",
        "",
        "# `judge` is a built-in kind (capability \"chat\"); named here to be explicit.",
        "[rewards.judge]",
        'kind = "judge"',
    ]
    for name, child in providers.items():
        s = settings[name]
        burst_ms = min(60000, max(1, round(s["burst_seconds"] * 1000)))
        if burst_ms != s["burst_seconds"] * 1000:
            log(f"  note: provider {name}: burst {s['burst_seconds']:g} s written as "
                f"burst_ms = {burst_ms} (Arbiter takes 1..60000)")
        lines += [
            "",
            "[[sources]]",
            f"name = {json.dumps('provider-' + name)}",
            'kind = "openai"',
            f"url = {json.dumps(child.url)}",
            'capabilities = ["chat"]',
            f"model = {json.dumps(args.model)}",
            f"requests_per_minute = {round(s['rpm'])}",
            f"burst_ms = {burst_ms}",
            f"max_concurrency = {args.source_max_concurrency}",
            f"timeout_ms = {args.source_timeout_ms}",
        ]
        if s["tpm"] > 0:
            lines.append(f"tokens_per_minute = {round(s['tpm'])}")
    return "\n".join(lines) + "\n"


async def provider_stats(session: Any, providers: Dict[str, Child]) -> Dict[str, Dict]:
    out = {}
    for name, child in providers.items():
        async with session.get(f"{child.url}/stats") as resp:
            out[name] = await resp.json(content_type=None)
    return out


def fetch_stats(providers: Dict[str, Child]) -> Dict[str, Dict]:
    import aiohttp

    async def go() -> Dict[str, Dict]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            return await provider_stats(session, providers)

    return asyncio.run(go())


# --------------------------------------------------------------------------------------------
# The two clients


class Progress:
    """Completion times of items, and a line every few seconds while a run goes on."""

    def __init__(self, total: int, label: str) -> None:
        self.total = total
        self.label = label
        self.t0 = 0.0
        self.done: List[float] = []  # seconds after t0, one per item scored
        self.resolved = 0            # scored or given up

    def start(self) -> None:
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def scored(self, n: int = 1) -> None:
        t = self.now()
        self.done.extend([t] * n)

    async def report(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            log(f"  {self.label}: {self.now():6.1f}s  {len(self.done):5d}/{self.total} scored, "
                f"{self.resolved - len(self.done)} lost")


async def run_naive(items: List[Dict[str, Any]], urls: List[str],
                    args: argparse.Namespace) -> Dict[str, Any]:
    """Semaphore, round robin per attempt, exponential backoff with jitter, Retry-After ignored."""
    import aiohttp

    rng = random.Random(args.seed + 1)
    sem = asyncio.Semaphore(args.naive_concurrency)
    rr = itertools.count()
    prog = Progress(len(items), LABEL["naive"])
    scores: List[Optional[float]] = [None] * len(items)
    attempts = [0] * len(items)
    errors: List[Optional[str]] = [None] * len(items)
    seen = {"429": 0, "5xx": 0, "other_status": 0, "connection": 0, "timeout": 0,
            "malformed": 0}

    async def attempt(session: aiohttp.ClientSession, url: str, body: Dict) -> Tuple[str, Any]:
        """One call: ("ok", score), ("retry", why) or ("fatal", why)."""
        try:
            async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
                text = await resp.text()
                if resp.status == 429:
                    seen["429"] += 1
                    return "retry", "HTTP 429"
                if resp.status >= 500:
                    seen["5xx"] += 1
                    return "retry", f"HTTP {resp.status}"
                if resp.status != 200:
                    seen["other_status"] += 1
                    return "fatal", f"HTTP {resp.status}: {text[:200]}"
                try:
                    content = json.loads(text)["choices"][0]["message"]["content"]
                    found = REWARD_RE.findall(content or "")
                    return "ok", float(found[-1])
                except (ValueError, KeyError, IndexError, TypeError):
                    seen["malformed"] += 1
                    return "retry", "malformed reply"
        except asyncio.TimeoutError:
            seen["timeout"] += 1
            return "retry", "timeout"
        except (aiohttp.ClientError, OSError) as e:
            seen["connection"] += 1
            return "retry", f"{type(e).__name__}: {e}"

    async def score(session: aiohttp.ClientSession, i: int) -> None:
        # What Arbiter's openai source sends (backends/remote/remote_codec.cpp).
        body = {"model": args.model, "temperature": 0.0, "max_tokens": 1024,
                "messages": [{"role": "user", "content": judge_prompt(items[i])}]}
        for k in range(1, args.naive_attempts + 1):
            async with sem:
                url = urls[next(rr) % len(urls)]
                attempts[i] += 1
                outcome, value = await attempt(session, url, body)
            if outcome == "ok":
                scores[i] = value
                prog.scored()
                break
            errors[i] = value
            if outcome == "fatal" or k == args.naive_attempts:
                break
            # 1 s doubling to 32 s, plus up to --naive-jitter-s (tenacity's
            # wait_exponential_jitter); the semaphore is not held while waiting.
            delay = min(args.naive_backoff_max_s, args.naive_backoff_base_s * 2 ** (k - 1)
                        + rng.uniform(0, args.naive_jitter_s))
            await asyncio.sleep(delay)
        prog.resolved += 1

    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=args.naive_timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        reporter = asyncio.create_task(prog.report(args.progress_s))
        prog.start()
        try:
            await asyncio.gather(*(score(session, i) for i in range(len(items))))
        finally:
            reporter.cancel()
        makespan = prog.now()
    return {"makespan_s": makespan, "scores": scores, "timeline_s": sorted(prog.done),
            "client_attempts": sum(attempts), "client_attempts_per_item": attempts,
            "client_outcomes": seen, "errors": errors}


async def run_arbiter(items: List[Dict[str, Any]], url: str,
                      args: argparse.Namespace) -> Dict[str, Any]:
    """All groups at once, one POST /v1/score per group (trainers send groups)."""
    import aiohttp

    per = args.arbiter_request_items or args.samples
    chunks = [list(range(s, min(s + per, len(items)))) for s in range(0, len(items), per)]
    prog = Progress(len(items), "Arbiter")
    scores: List[Optional[float]] = [None] * len(items)
    results: List[Optional[Dict]] = [None] * len(items)
    request_errors: List[str] = []
    resends = {"count": 0}

    async def send(session: aiohttp.ClientSession, idx: List[int]) -> None:
        body = {"items": [{"reward": "judge", "solution_str": items[i]["candidate"],
                           "ground_truth": items[i]["reference"],
                           "extra_info": {"problem": items[i]["problem"]}} for i in idx],
                "deadline_ms": args.deadline_ms}
        for _ in range(args.arbiter_resends + 1):
            try:
                async with session.post(f"{url}/v1/score", json=body) as resp:
                    text = await resp.text()
                    if resp.status in (429, 503):  # admission control: retry when it says
                        resends["count"] += 1
                        wait = float(resp.headers.get("Retry-After", "1") or 1)
                        await asyncio.sleep(max(0.0, min(wait, 30.0)))
                        continue
                    if resp.status != 200:
                        request_errors.append(f"HTTP {resp.status}: {text[:300]}")
                        break
                    answer = json.loads(text)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as e:
                request_errors.append(f"{type(e).__name__}: {e}")
                break
            got = answer.get("results") if isinstance(answer, dict) else None
            if not isinstance(got, list) or len(got) != len(idx):
                request_errors.append(f"{len(got or [])} results for {len(idx)} items: "
                                      f"{text[:300]}")
                break
            for i, r in zip(idx, got):
                results[i] = r
                s = r.get("score")
                if r.get("status") in ("ok", "fallback") and isinstance(s, (int, float)):
                    scores[i] = float(s)
            prog.scored(sum(1 for i in idx if scores[i] is not None))
            break
        else:
            request_errors.append(f"still refused after {args.arbiter_resends} resends")
        prog.resolved += len(idx)

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=args.deadline_ms / 1000.0 + 60.0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        reporter = asyncio.create_task(prog.report(args.progress_s))
        prog.start()
        try:
            await asyncio.gather(*(send(session, c) for c in chunks))
        finally:
            reporter.cancel()
        makespan = prog.now()
    sources: Dict[str, int] = {}
    codes: Dict[str, int] = {}
    statuses: Dict[str, int] = {}
    for r in results:
        if r is None:
            continue
        statuses[str(r.get("status"))] = statuses.get(str(r.get("status")), 0) + 1
        src = str(r.get("source"))
        sources[src] = sources.get(src, 0) + 1
        err = r.get("error")
        if isinstance(err, dict):
            codes[str(err.get("code"))] = codes.get(str(err.get("code")), 0) + 1
    reported = [r.get("attempts") for r in results if r is not None]
    return {"makespan_s": makespan, "scores": scores, "timeline_s": sorted(prog.done),
            "requests": len(chunks), "items_per_request": per, "resends": resends["count"],
            "request_errors": request_errors[:20], "request_error_count": len(request_errors),
            "statuses": statuses, "sources": sources, "error_codes": codes,
            "arbiter_reported_attempts": sum(a for a in reported if isinstance(a, int)),
            "cached": sum(1 for r in results if r is not None and r.get("cached") is True)}


# --------------------------------------------------------------------------------------------
# One run: fresh providers, the client, the counters


def summarize(run: str, raw: Dict[str, Any], stats: Dict[str, Dict], items: List[Dict],
              t_lb: float) -> Dict[str, Any]:
    attempts = sum(s.get("requests_total", 0) for s in stats.values())
    limited = sum(s.get("rate_limited_total", 0) for s in stats.values())
    scores = raw["scores"]
    failed = sum(1 for s in scores if s is None)
    wrong = [i for i, s in enumerate(scores)
             if s is not None and abs(s - items[i]["expected"]) > 1e-9]
    makespan = raw["makespan_s"]
    return {
        "run": run, "makespan_s": makespan,
        "x_lower_bound": makespan / t_lb if t_lb and math.isfinite(t_lb) else None,
        "attempts": attempts, "rate_limited": limited,
        "rate_limited_pct": 100.0 * limited / attempts if attempts else 0.0,
        "failed": failed, "scored": len(scores) - failed, "wrong_scores": len(wrong),
        "wrong_examples": [{"item": i, "score": scores[i], "expected": items[i]["expected"]}
                           for i in wrong[:10]],
        "attempts_per_item": attempts / len(items) if items else 0.0,
        "provider_stats": stats,
    }


def run_once(run: str, items: List[Dict[str, Any]], specs: Dict[str, List[str]],
             settings: Dict[str, Dict[str, float]], t_lb: float,
             args: argparse.Namespace) -> Dict[str, Any]:
    log("")
    log(f"=== {LABEL[run]} run: fresh providers ===")
    children = Children()
    try:
        providers = start_providers(args.fake_provider_bin, specs, args.model, args.out,
                                    children, args.startup_timeout_s, run)
        if run == "arbiter":
            cfg_path = args.out / "grpo_step_arbiter.toml"
            cfg_path.write_text(arbiter_config_toml(providers, settings, args))
            log(f"  config: {cfg_path}")
            if not args.arbiter_bin.exists():
                raise StartError(f"{args.arbiter_bin} not found; build it (cmake --build build "
                                 "--target arbiter) or run --only naive")
            arbiter = children.add(Child(
                "Arbiter", [str(args.arbiter_bin), "serve", "--config", str(cfg_path),
                            "--port", "0"], args.out / "arbiter-run.log"))
            try:
                url = arbiter.wait_listening(args.startup_timeout_s)
            except StartError as e:
                raise StartError(f"{e}\n  (config: {cfg_path})") from None
            log(f"  POSTing {len(items)} items to {url}/v1/score")
            raw = asyncio.run(run_arbiter(items, url, args))
            log(f"  item statuses {raw['statuses']}, sources {raw['sources']}, "
                f"error codes {raw['error_codes']}, {raw['resends']} resends after 429/503")
            for err in raw["request_errors"][:5]:
                log(f"  request error: {err}")
            # Stop Arbiter before reading the providers' counters, so every attempt it made
            # (hedges and retries still in flight included) has landed.
            arbiter.stop()  # idempotent: stop_all() below finds it stopped
        else:
            urls = [c.url or "" for c in providers.values()]
            log(f"  {len(items)} items, semaphore {args.naive_concurrency}, round robin over "
                f"{len(urls)} providers, {args.naive_attempts} attempts")
            raw = asyncio.run(run_naive(items, urls, args))
        stats = fetch_stats(providers)
    finally:
        children.stop_all()
    summary = summarize(run, raw, stats, items, t_lb)
    summary["client"] = {k: v for k, v in raw.items() if k not in ("scores",)}
    summary["scores"] = raw["scores"]
    log(f"  {LABEL[run]}: makespan {summary['makespan_s']:.2f}s, {summary['attempts']} attempts, "
        f"{summary['rate_limited']} x 429, {summary['failed']} failed, "
        f"{summary['wrong_scores']} wrong")
    return summary


# --------------------------------------------------------------------------------------------
# Reporting


def fmt(v: Optional[float], digits: int = 2, suffix: str = "") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    return f"{v:,.{digits}f}{suffix}"


def markdown_table(summaries: Dict[str, Dict]) -> str:
    rows = ["| run | makespan s | ×lower bound | attempts | 429s | 429 % | failed | wrong scores |",
            "|---|---|---|---|---|---|---|---|"]
    for run in RUNS:
        s = summaries.get(run)
        if s is None:
            continue
        rows.append(f"| {LABEL[run]} | {fmt(s['makespan_s'])} "
                    f"| {fmt(s['x_lower_bound'], 2, 'x')} | {s['attempts']:,} "
                    f"| {s['rate_limited']:,} | {fmt(s['rate_limited_pct'], 1)} "
                    f"| {s['failed']} | {s['wrong_scores']} |")
    return "\n".join(rows)


def plot(summaries: Dict[str, Dict], settings: List[Dict[str, float]], n: int, distinct: int,
         t_lb: float, path: Path, title: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("note: matplotlib is not installed; skipping the plot "
            "(pip install -r bench/requirements.txt)")
        return False
    colors = {"arbiter": "#1f77b4", "naive": "#ff7f0e"}
    fig, ax = plt.subplots(figsize=(9, 5.5))
    t_end = max([s["makespan_s"] for s in summaries.values()]
                + ([t_lb] if math.isfinite(t_lb) else [])) * 1.05 or 1.0
    for run in RUNS:
        s = summaries.get(run)
        if s is None:
            continue
        times = s["client"]["timeline_s"]
        xs = [0.0] + [t for t in times for _ in (0, 1)]
        ys = [0] + [v for k in range(len(times)) for v in (k, k + 1)]
        xs.append(s["makespan_s"])
        ys.append(len(times))
        ax.plot(xs, ys, color=colors[run], lw=1.8,
                label=f"{LABEL[run]}: {len(times)} scored, makespan {s['makespan_s']:.1f}s")
    if math.isfinite(t_lb):
        grid = [t_end * k / 400 for k in range(401)]
        ax.plot(grid, [min(distinct, capacity_curve(settings, t)) for t in grid], color="gray",
                ls="--", lw=1.2, label=f"ideal (rate-limit capacity), lower bound {t_lb:.1f}s")
        ax.axvline(t_lb, color="gray", ls=":", lw=1)
    ax.axhline(n, color="black", lw=0.6)
    ax.set_xlim(0, t_end)
    ax.set_ylim(0, n * 1.05)
    ax.set_xlabel("seconds since the first request")
    ax.set_ylabel("items scored")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower right", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


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
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    info = {"nproc": nproc, "cpu_model": model, "kernel": platform.release(),
            "python": platform.python_version(), "loadavg_1m": load}
    try:
        import aiohttp
        info["aiohttp"] = aiohttp.__version__
    except ImportError:
        info["aiohttp"] = None
    return info


# --------------------------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="GRPO step benchmark: 1024 judge items through Arbiter vs a naive "
                    "asyncio client, against three rate-limited fake providers.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--only", choices=RUNS, help="run one side only (default: both)")
    p.add_argument("--arbiter-bin", type=Path, default=REPO / "build" / "arbiter",
                   help="the arbiter binary")
    p.add_argument("--fake-provider-bin", type=Path,
                   default=REPO / "build" / "arbiter-fake-provider",
                   help="the arbiter-fake-provider binary (with --burst-seconds)")
    for name, spec in DEFAULT_PROVIDERS.items():
        p.add_argument(f"--provider-{name}", default=spec, metavar="FLAGS",
                       help=f"arbiter-fake-provider flags of provider {name.upper()}")
    p.add_argument("--model", default="fake-judge", help="judge model name (sources and calls)")
    p.add_argument("--prompts", type=int, default=128, help="prompts (groups) in the step")
    p.add_argument("--samples", type=int, default=8, help="responses per prompt (group size)")
    p.add_argument("--duplicates", action="store_true",
                   help="let responses repeat within a group (caching then helps Arbiter)")
    p.add_argument("--duplicate-rate", type=float, default=0.25,
                   help="with --duplicates: chance that a response repeats an earlier one")
    p.add_argument("--seed", type=int, default=20250507, help="seed of the generated items")
    p.add_argument("--deadline-ms", type=int, default=600000,
                   help="deadline_ms of each /v1/score request (and the config's maximum)")
    p.add_argument("--arbiter-request-items", type=int, default=0,
                   help="items per /v1/score request (0: --samples, one request per group)")
    p.add_argument("--arbiter-resends", type=int, default=20,
                   help="times a request answered 429/503 by Arbiter is sent again")
    p.add_argument("--source-max-concurrency", type=int, default=64,
                   help="max_concurrency of each [[sources]] table")
    p.add_argument("--source-timeout-ms", type=int, default=30000,
                   help="timeout_ms of each [[sources]] table")
    p.add_argument("--naive-concurrency", type=int, default=60,
                   help="naive client: calls in flight at once (its semaphore)")
    p.add_argument("--naive-attempts", type=int, default=6,
                   help="naive client: attempts per item, the first included")
    p.add_argument("--naive-backoff-base-s", type=float, default=1.0,
                   help="naive client: wait after the first failure; doubles after each")
    p.add_argument("--naive-backoff-max-s", type=float, default=32.0,
                   help="naive client: the longest wait")
    p.add_argument("--naive-jitter-s", type=float, default=1.0,
                   help="naive client: uniform random seconds added to each wait")
    p.add_argument("--naive-timeout-s", type=float, default=60.0, help="per attempt")
    p.add_argument("--startup-timeout-s", type=float, default=30.0,
                   help="how long a child may take to print its listening line")
    p.add_argument("--progress-s", type=float, default=5.0, help="progress line interval")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results",
                   help="where the JSON, the plot, the config and the logs go")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    a = p.parse_args(argv)
    if a.prompts < 1 or a.samples < 1:
        p.error("--prompts and --samples must be >= 1")
    if a.naive_concurrency < 1 or a.naive_attempts < 1:
        p.error("--naive-concurrency and --naive-attempts must be >= 1")
    if not 0 <= a.duplicate_rate <= 1:
        p.error("--duplicate-rate must be in [0, 1]")
    if a.deadline_ms < 1 or a.arbiter_request_items < 0:
        p.error("--deadline-ms must be >= 1 and --arbiter-request-items >= 0")
    a.specs = {}
    for name in DEFAULT_PROVIDERS:
        flags = shlex.split(getattr(a, f"provider_{name}"))
        if any(f == "--port" or f.startswith("--port=") or f == "--model" for f in flags):
            p.error(f"--provider-{name}: --port and --model are set by the benchmark")
        a.specs[name] = flags
    return a


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        import aiohttp  # noqa: F401 - fail early with a useful message
    except ImportError:
        log("error: aiohttp is not installed (pip install -r bench/requirements.txt)")
        return 2
    runs = [args.only] if args.only else list(RUNS)
    info = machine_info()
    command = shlex.join([sys.executable, *(sys.argv if argv is None else ["grpo_step.py", *argv])])
    log(f"machine: nproc={info['nproc']} cpu='{info['cpu_model']}' kernel={info['kernel']} "
        f"python={info['python']} load={info['loadavg_1m']}")
    log(f"command: {command}")

    items = make_items(args.prompts, args.samples, args.seed, args.duplicates,
                       args.duplicate_rate)
    check_items(items)
    n = len(items)
    distinct = len({(it["candidate"], it["reference"]) for it in items})
    settings = {name: provider_settings(flags) for name, flags in args.specs.items()}
    # Distinct items: identical ones need only one judge call (with --duplicates).
    t_lb = lower_bound(list(settings.values()), distinct)
    log(f"items: {args.prompts} prompts x {args.samples} responses = {n} ({distinct} distinct, "
        f"seed {args.seed})")
    for name, s in settings.items():
        log(f"provider {name.upper()}: {s['rpm']:g} rpm ({s['rpm'] / 60:g}/s, burst "
            f"{max(1.0, s['rpm'] * s['burst_seconds'] / 60):g}), median latency "
            f"{s['latency_median_s'] * 1000:g} ms, error rate {s['error_rate']:g}")
    log(f"lower bound: {fmt(t_lb)} s (smallest T with sum (1-e)(b + r max(0, T-L)) >= "
        f"{distinct})")
    args.out.mkdir(parents=True, exist_ok=True)

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    # Ctrl-C too, even when started with SIGINT ignored (a background job of a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)

    summaries: Dict[str, Dict] = {}
    for run in runs:
        summaries[run] = run_once(run, items, args.specs, settings, t_lb, args)

    table = markdown_table(summaries)
    log("")
    log(f"lower bound T_lb = {fmt(t_lb)} s for {distinct} distinct items")
    log(table)
    ratio = None
    if "arbiter" in summaries and "naive" in summaries and summaries["arbiter"]["makespan_s"] > 0:
        ratio = summaries["naive"]["makespan_s"] / summaries["arbiter"]["makespan_s"]
        log(f"naive/Arbiter makespan: {ratio:.2f}x")
    log("")
    log("makespan: first request sent to last item answered (scored or given up); attempts and "
        "429s: what the providers counted (GET /stats); failed: items without a score; wrong: "
        "scores that differ from the fake judge's Jaccard.")

    result = {
        "machine": info, "command": command,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "items": {"count": n, "distinct": distinct, "prompts": args.prompts,
                  "samples": args.samples, "duplicates": args.duplicates},
        "providers": {name: {"flags": args.specs[name], **settings[name]} for name in settings},
        "lower_bound_s": t_lb if math.isfinite(t_lb) else None,
        "runs": summaries, "naive_over_arbiter_makespan": ratio, "table": table,
        "judge_template": JUDGE_TEMPLATE,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    json_path = args.out / "grpo_step.json"
    json_path.write_text(json.dumps(result, indent=1) + "\n")
    log(f"results: {json_path}")
    if not args.no_plot:
        png = args.out / "grpo_step.png"
        rpms = ", ".join(f"{s['rpm']:g}" for s in settings.values())
        bursts = ", ".join(f"{s['burst_seconds']:g}" for s in settings.values())
        title = f"GRPO step: {n} judge items, 3 providers ({rpms} rpm, burst {bursts} s)"
        if plot(summaries, list(settings.values()), n, distinct, t_lb, png, title):
            log(f"plot: {png}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        log(f"interrupted ({e or 'Ctrl-C'}); child processes stopped")
        sys.exit(130)
    except StartError as e:
        log(f"error: a child process failed to start: {e}")
        sys.exit(3)
    except (RuntimeError, OSError, ValueError) as e:
        log(f"error: {e}")
        sys.exit(1)
