#!/usr/bin/env python3
"""NLI throughput: Arbiter's native DeBERTa-v2/v3 classifier (a `[[models]]` NLI model behind
TEI's `POST /predict`) next to transformers' DebertaV2ForSequenceClassification on the same
random weights, in one run on the same machine.

The model is DeBERTa-v3-xsmall-shaped (hidden 384, 12 layers, 6 heads, intermediate 1536,
relative positions with 256 log buckets) with random weights made here with transformers, and
the tokenizer fixture's own SentencePiece model (tests/backends/models/fixtures/tiny_deberta_nli).
The pairs are ΔIG-like: a question and a sampled answer each side, 10 to 60 words. Both sides
take them in batches of `--batch` pairs: transformers with `padding=True` (what the IG service
does), Arbiter as one /predict request each, `--concurrency` in flight. The table gives pairs/s
and the ratio, and the largest difference between the two sides' entailment probabilities.
Needs build/arbiter and `pip install torch transformers`.

    python3 bench/nli_bench.py --pairs 512 --batch 64
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))

from arbiter_testing import start_server  # noqa: E402

FIXTURE = REPO / "tests" / "backends" / "models" / "fixtures" / "tiny_deberta_nli"
WORDS = ("the a cat dog sat on mat is was blue red green sky capital of france paris berlin "
         "germany answer question because therefore not never always some many people city "
         "river mountain number one two three year born died wrote book ocean sun").split()


def make_model(folder: Path, layers: int) -> Path:
    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification
    marker = folder / f"layers-{layers}"
    if marker.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    base = json.loads((FIXTURE / "config.json").read_text())
    base.update(hidden_size=384, intermediate_size=1536, num_hidden_layers=layers,
                num_attention_heads=6, pooler_hidden_size=384, max_position_embeddings=512,
                max_relative_positions=-1, position_buckets=256)
    for key in ("architectures", "transformers_version", "dtype"):
        base.pop(key, None)
    torch.manual_seed(0)
    model = DebertaV2ForSequenceClassification(DebertaV2Config(**base)).eval()
    model.save_pretrained(folder, safe_serialization=True)
    for name in ("spm.model", "tokenizer.json"):
        shutil.copy(FIXTURE / name, folder / name)
    marker.write_text("")
    return folder


def make_pairs(n: int, seed: int) -> list:
    rng = random.Random(seed)

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    return [(f"{text(5, 10)}? {text(5, 50)}", f"{text(5, 10)}? {text(1, 5)}") for _ in range(n)]


def run_transformers(folder: Path, pairs: list, batch: int, threads: int) -> tuple:
    import torch
    from transformers import AutoModelForSequenceClassification, PreTrainedTokenizerFast
    torch.set_num_threads(threads)
    tok = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    tok.pad_token = "[PAD]"
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    entail = {v.lower(): int(k) for k, v in model.config.id2label.items()}["entailment"]

    def run(chunk: list) -> list:
        enc = tok([p for p, _ in chunk], [h for _, h in chunk], padding=True, truncation=True,
                  max_length=512, return_tensors="pt")
        with torch.no_grad():
            return torch.softmax(model(**enc).logits.float(), -1)[:, entail].tolist()

    run(pairs[:batch])  # warm-up
    start = time.perf_counter()
    out = []
    for s in range(0, len(pairs), batch):
        out += run(pairs[s:s + batch])
    return time.perf_counter() - start, out


def run_arbiter(folder: Path, pairs: list, batch: int, concurrency: int, tmp: Path) -> tuple:
    config = f'[[models]]\nname = "nli"\nkind = "nli"\npath = "{folder}"\nmax_batch_items = {batch}\n'
    server = start_server(tmp, config)
    chunks = [pairs[s:s + batch] for s in range(0, len(pairs), batch)]

    def one(chunk: list) -> list:
        status, _, body = server.request("POST", "/predict",
                                         {"inputs": [[p, h] for p, h in chunk]})
        assert status == 200, body
        return [next(c["score"] for c in pair if c["label"].lower() == "entailment")
                for pair in body]

    try:
        one(chunks[0])  # warm-up
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            parts = list(pool.map(one, chunks))
        seconds = time.perf_counter() - start
    finally:
        server.stop()
    return seconds, [p for part in parts for p in part]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--tmp", type=Path, default=Path("/tmp/arbiter_nli_bench"))
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    import torch
    threads = args.threads or torch.get_num_threads()
    folder = make_model(args.tmp / "deberta", args.layers)
    pairs = make_pairs(args.pairs, 3)
    arbiter_s, arbiter_p = run_arbiter(folder, pairs, args.batch, args.concurrency, args.tmp)
    hf_s, hf_p = run_transformers(folder, pairs, args.batch, threads)
    diff = max(abs(a - b) for a, b in zip(arbiter_p, hf_p))
    print(f"{args.pairs} pairs, batch {args.batch}, DeBERTa-v3 {args.layers}x384 random weights, "
          f"transformers with {threads} threads; max |P(entail) arbiter - transformers| = "
          f"{diff:.2e}\n")
    print("| run | seconds | pairs/s | × transformers |")
    print("|---|---|---|---|")
    for name, secs in (("transformers (padding=True)", hf_s), ("arbiter /predict", arbiter_s)):
        print(f"| {name} | {secs:.2f} | {args.pairs / secs:.0f} | {hf_s / secs:.2f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "nli_bench.json"
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                               "max_abs_diff": diff, "transformers_s": hf_s,
                               "arbiter_s": arbiter_s}, indent=1))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
