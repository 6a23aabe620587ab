#!/usr/bin/env python3
"""ΔIG samples that end at their stop strings: two Arbiter binaries side by side in one run
(`--baseline`, e.g. one built before a local generator stopped decoding at a stop string), on
the same items, with the same seeds.

`info_gain` on local models only: ig_bench.py's tiny random-weight Qwen3 (512 positions) and the
tiny DeBERTa-v3 NLI fixture. Each item is its own `POST /v1/score` request with a seed,
sampled at temperature 1, N samples per side and `max_new_tokens` (ΔIG's default 128); all
items are sent at once. `batch_calls = false`, so that every call decodes alone and the same
seed draws the same tokens on both binaries: the scores must be identical, and only the
tokens decoded past a stop string (which the text never kept) may differ. The table gives
seconds, items/s and the completion tokens the step accounted.

    python3 bench/ig_stops.py --baseline /tmp/old/arbiter
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "bench"))

import arbiter_testing  # noqa: E402
from ig_bench import NLI, make_items, make_lm  # noqa: E402


def run(binary: Path, lm: Path, items: list, args: argparse.Namespace, tag: str) -> dict:
    arbiter_testing.ARBITER_BIN = str(binary)
    config = (f'[[models]]\nname = "tiny-lm"\nkind = "generator"\npath = "{lm}"\n'
              f'batch_calls = false\n'
              f'[[models]]\nname = "tiny-nli"\nkind = "nli"\npath = "{NLI}"\n')
    tmp = Path(args.tmp) / tag
    tmp.mkdir(parents=True, exist_ok=True)
    server = arbiter_testing.start_server(tmp, config)

    def one(k: int) -> float:
        item = items[k]
        body = {"step": tag, "items": [{
            "reward": "info_gain", "solution_str": item["context"],
            "ground_truth": item["answers"],
            "extra_info": {"question": item["question"], "num_samples": args.samples,
                           "max_new_tokens": args.max_new_tokens, "temperature": 1.0,
                           "seed": 1000 + k}}], "deadline_ms": 600000}
        status, _, reply = server.request("POST", "/v1/score", body)
        assert status == 200 and reply["results"][0]["status"] == "ok", reply
        return reply["scores"][0]

    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(items)) as pool:
            scores = list(pool.map(one, range(len(items))))
        seconds = time.perf_counter() - start
        status, _, step = server.request("GET", f"/v1/steps/{tag}")
        assert status == 200, step
    finally:
        server.stop()
    tokens = step["totals"]["completion_tokens"]
    return {"seconds": seconds, "scores": scores, "completion_tokens": tokens}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", type=Path, required=True)
    p.add_argument("--arbiter", type=Path, default=REPO / "build" / "arbiter")
    p.add_argument("--items", type=int, default=16)
    p.add_argument("--samples", type=int, default=16, help="N per side")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--tmp", default="/tmp/arbiter_ig_stops")
    args = p.parse_args()
    items = make_items(args.items, 5)
    lm = make_lm(Path(args.tmp) / "tiny_qwen3")
    rows = {name: run(binary, lm, items, args, name)
            for name, binary in (("baseline", args.baseline), ("arbiter", args.arbiter))}
    diff = max(abs(a - b) for a, b in zip(rows["baseline"]["scores"], rows["arbiter"]["scores"]))
    # NLI passes batched differently round probabilities differently (~1e-7).
    same = diff < 1e-5
    print(f"{args.items} info_gain items, N = {args.samples} per side, max_new_tokens "
          f"{args.max_new_tokens}, temperature 1, seeded; max |score difference| {diff:.1e}\n")
    print("| binary | seconds | items/s | completion tokens |")
    print("|---|---:|---:|---:|")
    for name in ("baseline", "arbiter"):
        r = rows[name]
        print(f"| {name} | {r['seconds']:.2f} | {args.items / r['seconds']:.2f} | "
              f"{r['completion_tokens']:,} |")
    b, a = rows["baseline"], rows["arbiter"]
    print(f"\narbiter ÷ baseline items/s: {b['seconds'] / a['seconds']:.2f}×; completion tokens "
          f"{a['completion_tokens'] / max(b['completion_tokens'], 1):.2f}×")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
