#!/usr/bin/env python3
"""Token pacing on long prompts: how close Arbiter keeps a tokens-per-minute limit busy.

Judge items with long rollouts (about --rollout-tokens tokens each) go to a fake
OpenAI-compatible chat provider that enforces a tokens-per-minute limit the way OpenAI does.
A call costs its prompt tokens plus max_tokens. The cost is drawn from a bucket that holds one
minute of tokens and refills continuously. When the bucket cannot hold a call, the provider
answers 429 with retry-after-ms. Every answer carries x-ratelimit-* headers, and every success
its `usage`. The provider counts tokens per script, roughly as a BPE tokenizer does: an English
word about 4 letters a token, CJK about 1.25 tokens a character, punctuation in code and LaTeX
1 token per 2 characters, an emoji 3. Arbiter cannot count tokens: it estimates a prompt from
its bytes and words, and learns the provider's ratio to that estimate from `usage`
(`prompt_token_ratio` in /info).

Each scenario runs a fresh provider and a fresh `arbiter serve`, one after the other:
- english: every rollout in English; the limit is in the configuration (tokens_per_minute);
- mixed: English, CJK, code, LaTeX and emoji in turn; the limit is in the configuration;
- mixed-unconfigured: the same items; no limit is configured, Arbiter learns it from headers.

The items go as a trainer sends them: 8 items per POST /v1/score, 8 requests in flight, each
naming its training step (`step`). The makespan runs from the first request sent to the last
answered. The ideal makespan is what the limit allows: the tokens the provider charged for the
items (each item once), less the minute of tokens the bucket holds at the start, over the rate,
plus one provider latency. Prints a markdown table and writes OUT/token_pacing.json.

    python3 bench/token_pacing.py                    # needs build/arbiter; about 3 minutes
    python3 bench/token_pacing.py --scenarios mixed --items 100 --arbiter /tmp/arbiter
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures as cf
import http.client
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = ("english", "cjk", "code", "latex", "emoji")
SCENARIOS = {  # name: (scripts, limit in the configuration, label in the table)
    "english": (("english",), True, "english, TPM configured"),
    "mixed": (SCRIPTS, True, "mixed, TPM configured"),
    "mixed-unconfigured": (SCRIPTS, False, "mixed, TPM learned from headers"),
}
LATENCY_MS = 300.0   # the provider's answer time
BURST_S = 60.0       # the provider's bucket holds this many seconds of the limit
MAX_TOKENS = 512     # the judge's max_tokens, charged with every call
GROUP = 8            # items per request
IN_FLIGHT = 8        # requests in flight
DEADLINE_MS = 600000


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# -------------------------------------------------------------------------- token counting

_WORD = re.compile(r"[A-Za-z]+")
_DIGITS = re.compile(r"[0-9]+")


def _cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x3040 <= cp <= 0x30FF
            or 0xAC00 <= cp <= 0xD7AF or 0xF900 <= cp <= 0xFAFF or 0x20000 <= cp <= 0x2FFFF)


def _emoji(cp):
    return 0x1F000 <= cp <= 0x1FAFF or 0x2600 <= cp <= 0x27BF


def count_tokens(text):
    """About a BPE tokenizer's count. An English word: 1 token per 4 letters (at least 1).
    Digits: 1 per 3. A run of ASCII punctuation: 1 per 2 characters. Spaces: free; a run of
    newlines: 1. CJK: 1 per character, 2 for every fourth code point. An emoji: 3. ZWJ, VS16
    and other non-ASCII characters: 1 each."""
    n = 0
    i = 0
    end = len(text)
    while i < end:
        c = text[i]
        o = ord(c)
        if o < 128:
            if c.isalpha():
                m = _WORD.match(text, i)
                n += max(1, math.ceil((m.end() - i) / 4))
                i = m.end()
            elif c.isdigit():
                m = _DIGITS.match(text, i)
                n += math.ceil((m.end() - i) / 3)
                i = m.end()
            elif c in " \t":
                i += 1
            elif c in "\r\n":
                while i < end and text[i] in "\r\n":
                    i += 1
                n += 1
            else:  # punctuation merges in pairs ("}}{" is 2, "_{" is 1), as BPE merges do
                j = i
                while (j < end and ord(text[j]) < 128 and not text[j].isalnum()
                       and text[j] not in " \t\r\n"):
                    j += 1
                n += (j - i + 1) // 2
                i = j
            continue
        if _cjk(o):
            n += 2 if o % 4 == 0 else 1
        elif _emoji(o):
            n += 3
        else:
            n += 1
        i += 1
    return n


def count_messages(messages):
    """OpenAI's chat count: 3 tokens per message and 3 priming the reply."""
    n = 3
    for m in messages:
        n += 3
        content = m.get("content")
        if isinstance(content, str):
            n += count_tokens(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    n += count_tokens(part["text"])
        n += count_tokens(m.get("role", "")) - 1
    return n


# ------------------------------------------------------------------------- the fake provider

class Bucket:
    """Tokens: capacity per_min * burst_s / 60, refilled continuously."""

    def __init__(self, per_min, burst_s):
        self.per_min = per_min
        self.cap = max(1.0, per_min * burst_s / 60.0)
        self.level = self.cap
        self.t = time.monotonic()

    def refill(self):
        now = time.monotonic()
        self.level = min(self.cap, self.level + (now - self.t) * self.per_min / 60.0)
        self.t = now

    def wait_for(self, amount):
        return max(0.0, (amount - self.level) / (self.per_min / 60.0))

    def reset_s(self):
        return (self.cap - self.level) / (self.per_min / 60.0)


def go_duration(s):
    """A duration as OpenAI writes it in x-ratelimit-reset-*: 120ms, 6.5s, 1m2s."""
    if s < 1:
        return f"{int(round(s * 1000))}ms"
    if s < 60:
        return f"{s:.3f}".rstrip("0").rstrip(".") + "s"
    m = int(s // 60)
    return f"{m}m{s - 60 * m:.0f}s"


class Provider:
    def __init__(self, tpm, latency_ms):
        self.tpm = tpm
        self.latency_s = latency_ms / 1000.0
        self.tok = Bucket(tpm, BURST_S)
        self.stats = {"requests": 0, "ok": 0, "rate_limited": 0, "too_large": 0,
                      "prompt_tokens_total": 0, "charged_tokens_total": 0,
                      "in_flight": 0, "max_in_flight": 0}
        self.items = {}  # ITEM-<id> tag in the prompt -> its tokens, bytes and 429s

    def headers(self):
        return [("x-ratelimit-limit-tokens", str(self.tpm)),
                ("x-ratelimit-remaining-tokens", str(int(max(0, self.tok.level)))),
                ("x-ratelimit-reset-tokens", go_duration(self.tok.reset_s()))]

    def error(self, message):
        return {"error": {"message": message, "type": "tokens", "param": None,
                          "code": "rate_limit_exceeded"}}

    async def chat(self, body):
        self.tok.refill()
        msgs = body.get("messages") or []
        prompt_tokens = count_messages(msgs)
        n = int(body.get("n") or 1)
        charged = prompt_tokens + (body.get("max_tokens") or
                                   body.get("max_completion_tokens") or 16) * n
        text = " ".join(m["content"] for m in msgs if isinstance(m.get("content"), str))
        tag = re.search(r"ITEM-(\d+)", text)
        rec = self.items.setdefault(tag.group(1) if tag else "?", {
            "prompt_tokens": prompt_tokens, "charged": charged, "bytes": len(text.encode()),
            "429s": 0})
        self.stats["requests"] += 1
        model = body.get("model") or "fake"
        if charged > self.tok.cap:
            self.stats["too_large"] += 1
            rec["429s"] += 1
            return 429, self.headers(), self.error(
                f"Request too large for {model} on tokens per min (TPM): Limit {self.tpm}, "
                f"Requested {charged}. The input or output tokens must be reduced in order to "
                f"run successfully.")
        wait = self.tok.wait_for(charged)
        if wait > 0:
            self.stats["rate_limited"] += 1
            rec["429s"] += 1
            used = int(self.tok.cap - self.tok.level)
            h = self.headers() + [("retry-after", str(max(1, math.ceil(wait)))),
                                  ("retry-after-ms", str(int(math.ceil(wait * 1000))))]
            return 429, h, self.error(
                f"Rate limit reached for {model} on tokens per min (TPM): Limit {self.tpm}, "
                f"Used {used}, Requested {charged}. Please try again in {wait:.3f}s.")
        self.tok.level -= charged
        hdrs = self.headers()
        self.stats["in_flight"] += 1
        self.stats["max_in_flight"] = max(self.stats["max_in_flight"], self.stats["in_flight"])
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            self.stats["in_flight"] -= 1
        completion = 6
        self.stats["ok"] += 1
        self.stats["prompt_tokens_total"] += prompt_tokens
        self.stats["charged_tokens_total"] += charged
        choices = [{"index": k, "message": {"role": "assistant", "content": "REWARD: 0.500"},
                    "finish_reason": "stop"} for k in range(n)]
        return 200, hdrs, {"id": "x", "object": "chat.completion", "created": int(time.time()),
                           "model": model, "choices": choices,
                           "usage": {"prompt_tokens": prompt_tokens,
                                     "completion_tokens": completion * n,
                                     "total_tokens": prompt_tokens + completion * n}}

    async def handle(self, reader, writer):
        reasons = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}
        try:
            while True:
                line = await reader.readline()
                parts = line.decode("latin1").split()
                if len(parts) < 2:
                    return
                method, path = parts[0], parts[1].split("?")[0]
                length = 0
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin1").partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v.strip())
                body = await reader.readexactly(length) if length else b""
                hdrs = []
                if method == "GET" and path == "/stats":
                    status, obj = 200, dict(self.stats, items=self.items)
                elif method == "POST" and path == "/v1/chat/completions":
                    try:
                        req = json.loads(body)
                    except ValueError:
                        status, obj = 400, {"error": {"message": "bad json"}}
                    else:
                        status, hdrs, obj = await self.chat(req)
                else:
                    status, obj = 404, {"error": {"message": "not found"}}
                data = json.dumps(obj).encode()
                head = (f"HTTP/1.1 {status} {reasons[status]}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n")
                head += "".join(f"{k}: {v}\r\n" for k, v in hdrs) + "\r\n"
                writer.write(head.encode() + data)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def serve_provider(tpm, latency_ms):
    provider = Provider(tpm, latency_ms)
    server = await asyncio.start_server(provider.handle, "127.0.0.1", 0)
    print(f"listening on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


# ------------------------------------------------------------------------------- the items

WORDS = ("the of and to in is that for it as with was on be by this are or from at which but "
         "an have not we can all one there their if has more when will so would about function "
         "solution integral derivative theorem therefore consider following compute equation "
         "polynomial coefficient sequence probability triangle hypotenuse remainder modular "
         "arithmetic induction contradiction assumption").split()
EMOJI = [chr(c) for c in range(0x1F600, 0x1F64F)] + [chr(c) for c in range(0x1F300, 0x1F3FF)]
IDENTS = ["x", "y", "i", "j", "arr", "dp", "mod", "res", "n", "k", "memo", "graph", "node"]


def piece(script, rng):
    """One sentence, line or formula of `script`."""
    if script == "english":
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))).capitalize() + ". "
    if script == "cjk":
        def han(k):
            return "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(k))
        return han(rng.randint(10, 30)) + "，" + han(rng.randint(5, 15)) + "。"
    if script == "code":
        a, b, c = (rng.choice(IDENTS) for _ in range(3))
        return rng.choice([
            f"    for {a} in range(len({b})):\n",
            f"        {a}[{b}] = ({c}[{b} - 1] + {a}[{b}]) % {rng.randint(2, 10**9)}\n",
            f"    if {a} >= {b} and not {c}: return {{'{a}': {b}, \"{c}\": [{a}, {b}]}}\n",
            f"def solve_{a}({b}, {c}=None) -> int:\n",
            f"    {a} = {{k: v for k, v in {b}.items() if v != {c}}}  # {a}\n",
        ])
    if script == "latex":
        i, j = rng.randint(1, 9), rng.randint(1, 9)
        return rng.choice([
            f"$\\frac{{a_{{{i}}}^{{{j}}}}}{{b_{{{j}}}}} + \\sum_{{k={i}}}^{{n}} "
            f"\\binom{{n}}{{k}} x^{{k}}$ ",
            f"\\[\\int_{{0}}^{{\\pi}} \\sin^{{{i}}}(\\theta)\\,d\\theta = \\sqrt{{{j}}}\\]\n",
            f"$$\\left(\\prod_{{p\\mid n}} (1-p^{{-{i}}})\\right) \\cdot "
            f"\\mathbb{{E}}[X_{{{j}}}] \\le {i}{j}$$\n",
        ])
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5)))
    return words + " " + "".join(rng.choice(EMOJI) for _ in range(rng.randint(3, 8))) + " "


def text_of(script, rng, tokens):
    """Text of `script` that the provider counts as about `tokens` tokens."""
    out, n = [], 0
    while n < tokens:
        s = piece(script, rng)
        out.append(s)
        n += count_tokens(s)
    return "".join(out)


def make_items(scripts, count, rollout_tokens, seed):
    """Judge items, the scripts in turn; each problem is tagged ITEM-<i> for the provider."""
    rng = random.Random(seed)
    items = []
    for i in range(count):
        script = scripts[i % len(scripts)]
        rollout = text_of(script, rng, rollout_tokens)
        problem = f"ITEM-{i} " + text_of(script, rng, 300)
        reference = text_of(script, rng, 500)
        items.append({"reward": "judge", "solution_str": rollout, "ground_truth": reference,
                      "extra_info": {"problem": problem, "max_tokens": MAX_TOKENS},
                      "group": f"g{i // GROUP}", "_script": script})
    return items


# ------------------------------------------------------------------------------- the run

LISTENING = re.compile(r"listening on http://([^\s:]+):(\d+)")


def start(name, cmd, log_path, env=None):
    """Starts `cmd`, whose first stdout line is `listening on http://HOST:PORT`; returns
    (process, host, port). The rest of its stdout is read and dropped."""
    with open(log_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    line = proc.stdout.readline()
    m = LISTENING.search(line)
    if not m:
        stop(proc)
        tail = Path(log_path).read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{name} did not start: first line {line!r}\n{tail}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, m.group(1), int(m.group(2))


def stop(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def call(host, port, method, path, body=None, timeout=60.0):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, None if body is None else json.dumps(body),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def send_all(host, port, items, step):
    """Each group's items in one POST /v1/score naming `step`, IN_FLIGHT at a time. Returns
    each item's status (and error message, if any) and the makespan."""
    groups = {}
    for it in items:
        groups.setdefault(it["group"], []).append(it)

    def one(members):
        body = {"items": [{k: v for k, v in it.items() if not k.startswith("_")}
                          for it in members], "deadline_ms": DEADLINE_MS, "step": step}
        try:
            status, answer = call(host, port, "POST", "/v1/score", body,
                                  timeout=DEADLINE_MS / 1000 + 60)
        except (OSError, ValueError, http.client.HTTPException) as e:
            return [("lost", f"{type(e).__name__}: {e}")] * len(members)
        if status != 200:
            return [(f"http_{status}", json.dumps(answer)[:200])] * len(members)
        return [(r["status"], (r.get("error") or {}).get("message") or r.get("fallback_reason"))
                for r in answer["results"]]

    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(IN_FLIGHT) as pool:
        answers = list(pool.map(one, groups.values()))
    return [a for group in answers for a in group], time.monotonic() - t0


def run_scenario(name, items, args, tmp):
    scripts, configured, label = SCENARIOS[name]
    log(f"=== {label}: fresh provider and Arbiter ===")
    procs = []
    try:
        prov, phost, pport = start(
            "the provider", [sys.executable, str(Path(__file__).resolve()), "--serve-provider",
                             "--tpm", str(args.tpm), "--latency-ms", str(LATENCY_MS)],
            tmp / f"{name}-provider.log")
        procs.append(prov)
        config = ["[[sources]]", 'name = "judge"', 'kind = "openai"',
                  f'url = "http://{phost}:{pport}"', 'capabilities = ["chat"]',
                  'model = "gpt-4o"', f"max_tokens = {MAX_TOKENS}", "timeout_ms = 60000"]
        if configured:
            config.append(f"tokens_per_minute = {args.tpm}")
        cfg = tmp / f"{name}.toml"
        cfg.write_text("\n".join(config) + "\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
        env.update(ARBITER_DEFAULT_EMBEDDER_DIR="",
                   ARBITER_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
        arb, ahost, aport = start(
            "arbiter", [str(args.arbiter), "serve", "--host", "127.0.0.1", "--port", "0",
                        "--config", str(cfg)], tmp / f"{name}-arbiter.log", env)
        procs.append(arb)
        answers, makespan = send_all(ahost, aport, items, f"token-pacing-{name}")
        _, info = call(ahost, aport, "GET", "/info")
        _, pstats = call(phost, pport, "GET", "/stats")
    finally:
        for p in reversed(procs):
            stop(p)

    statuses, reasons = {}, {}
    for status, why in answers:
        statuses[status] = statuses.get(status, 0) + 1
        if status != "ok":
            reasons[f"{status}: {why}"[:200]] = reasons.get(f"{status}: {why}"[:200], 0) + 1
    per_item = pstats.pop("items")
    charged = sum(v["charged"] for k, v in per_item.items() if k.isdigit())
    rate = args.tpm / 60.0
    ideal = max(0.0, (charged - args.tpm * BURST_S / 60.0) / rate) + LATENCY_MS / 1000.0
    by_script = {}
    for k, v in per_item.items():
        if k.isdigit():
            s = by_script.setdefault(items[int(k)]["_script"],
                                     {"items": 0, "prompt_tokens": 0, "bytes": 0, "429s": 0})
            s["items"] += 1
            s["prompt_tokens"] += v["prompt_tokens"]
            s["bytes"] += v["bytes"]
            s["429s"] += v["429s"]
    source = next((s for s in info.get("sources", []) if s.get("name") == "judge"), {})
    result = {
        "scenario": name, "label": label, "scripts": list(scripts), "tpm_configured": configured,
        "items": len(items), "ok": statuses.get("ok", 0),
        "failed": len(items) - statuses.get("ok", 0),
        "provider_429s": pstats["rate_limited"] + pstats["too_large"],
        "makespan_s": makespan, "ideal_s": ideal, "charged_tokens": charged,
        "prompt_token_ratio": source.get("prompt_token_ratio"),
        "learned_tokens_per_minute": source.get("tokens_per_minute"),
        "statuses": statuses, "failure_reasons": reasons, "provider": pstats,
        "by_script": by_script, "source_info": source,
    }
    log(f"  makespan {makespan:.1f} s, ideal {ideal:.1f} s, statuses {statuses}, provider 429s "
        f"{result['provider_429s']}, prompt_token_ratio {result['prompt_token_ratio']}")
    for why, n in list(reasons.items())[:3]:
        log(f"  {n} x {why}")
    return result


def markdown_table(results):
    lines = ["| scenario | items | ok | failed | provider 429s | makespan s | ideal s "
             "| makespan ÷ ideal | learned prompt_token_ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        ratio = r["prompt_token_ratio"]
        lines.append(f"| {r['label']} | {r['items']} | {r['ok']} | {r['failed']} | "
                     f"{r['provider_429s']} | {r['makespan_s']:.1f} | {r['ideal_s']:.1f} | "
                     f"{r['makespan_s'] / r['ideal_s']:.3f} | "
                     f"{'' if ratio is None else f'{ratio:.3f}'} |")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", type=int, default=200, help="judge items per scenario")
    p.add_argument("--tpm", type=int, default=1_000_000, help="the provider's tokens per minute")
    p.add_argument("--rollout-tokens", type=int, default=8000,
                   help="tokens of each rollout, as the provider counts them")
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help=f"comma-separated, run in this order: {', '.join(SCENARIOS)}")
    p.add_argument("--arbiter", type=Path, default=REPO / "build" / "arbiter",
                   help="the arbiter binary to measure (default: build/arbiter)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results",
                   help="writes token_pacing.json and each server's log here")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--serve-provider", action="store_true",
                   help="run only the fake provider, limited to --tpm (the benchmark "
                        "starts it so)")
    p.add_argument("--latency-ms", type=float, default=LATENCY_MS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    for s in args.scenarios:
        if s not in SCENARIOS:
            p.error(f"--scenarios: unknown scenario {s!r} (one of {', '.join(SCENARIOS)})")
    if args.items < 1 or args.tpm < 1 or args.rollout_tokens < 1:
        p.error("--items, --tpm and --rollout-tokens must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.serve_provider:
        asyncio.run(serve_provider(args.tpm, args.latency_ms))
        return 0
    if not args.arbiter.exists():
        log(f"{args.arbiter} not found; build it first (scripts/setup.sh or cmake --build build)")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="token_pacing-", dir=args.out))
    item_sets = {}
    results = []
    try:
        for name in args.scenarios:
            scripts = SCENARIOS[name][0]
            if scripts not in item_sets:
                item_sets[scripts] = make_items(scripts, args.items, args.rollout_tokens,
                                                args.seed)
            results.append(run_scenario(name, item_sets[scripts], args, tmp))
    except RuntimeError as e:
        log(f"error: {e}")
        return 2
    log(f"  logs: {tmp}")
    print(f"\n{args.items} judge items of about {args.rollout_tokens} tokens per scenario, "
          f"{GROUP} per request, {IN_FLIGHT} requests in flight; provider limit {args.tpm:,} "
          f"tokens/min, latency {LATENCY_MS:g} ms; {args.arbiter}; "
          f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores\n")
    print(markdown_table(results))
    out = args.out / "token_pacing.json"
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                               "results": results}, indent=1, ensure_ascii=False))
    log(f"  results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
