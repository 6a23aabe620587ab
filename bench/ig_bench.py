#!/usr/bin/env python3
"""ΔIG throughput: Arbiter's `info_gain` on local models next to the Python IG service design it
replaces, on the same tiny random-weight Qwen3 generator and DeBERTa-v3 NLI model, in one run.

- python: the seed IG service's worker (shared/reference/models.md): items one after another;
  per item, transformers `generate` of N samples in one call for the prompt with context
  and for the one without, the mean log-likelihood of each sample's tokens (cut at the stop
  strings), then the DeBERTa entailment of every (sample, answer) pair in both directions,
  batched with padding, and ΔIG = IG_with − IG_without (the soft estimator).
- arbiter: `arbiter serve` with the two model folders as `[[models]]`, every item sent at once
  as its own `POST /compute_info_gain` request (what a trainer's reward workers do).

Both decode greedily (temperature 0: the N samples of a side are the same text), so the ΔIG
values must agree; the table gives items/s, per-item p50/p99 latency, the ratio, and the
largest ΔIG difference. Needs build/arbiter and `pip install torch transformers`.

    python3 bench/ig_bench.py --items 32 --samples 10 --max-new-tokens 16
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))

import arbiter_testing  # noqa: E402
from generate_bench import silence_end_tokens  # noqa: E402

FIXTURES = REPO / "tests" / "backends" / "models" / "fixtures"
NLI = FIXTURES / "tiny_deberta_nli"
TOKENIZER = REPO / "tests" / "backends" / "tokenizers" / "fixtures" / "tiny_bpe" / "tokenizer.json"
END_TOKENS = ("<|endoftext|>", "<|im_end|>")  # where Arbiter's generator stops
BRIEF = "Answer the following question as briefly as possible.\n"
STOP = ["\n\n\n\n", "\n\n\n", "\n\n", "\n", "Question:", "Context:"]
WORDS = ("the capital of france is paris city river mountain number one two three year born "
         "wrote book ocean sun moon star planet earth water fire tree house car road").split()


def make_lm(folder: Path, **shape) -> Path:
    """A tiny random-weight Qwen3 (2 layers, hidden 64, 512 positions; `shape` overrides its
    Qwen3Config fields) with the tokenizers fixture's byte-level BPE, made once with
    transformers (under --tmp)."""
    import shutil

    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    marker = folder / "made"
    if marker.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    torch.manual_seed(0)
    fields = dict(vocab_size=705, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=512, tie_word_embeddings=True)
    config = Qwen3Config(**{**fields, **shape})
    model = Qwen3ForCausalLM(config).eval()
    silence_end_tokens(model, TOKENIZER)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").unlink(missing_ok=True)
    shutil.copy(TOKENIZER, folder / "tokenizer.json")
    marker.write_text("")
    return folder


def make_items(n: int, seed: int) -> list:
    rng = random.Random(seed)
    items = []
    for i in range(n):
        q = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 8))) + f" {i}"
        ctx = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 30))) + "."
        answers = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
                   for _ in range(rng.randint(1, 2))]
        items.append({"question": q, "context": ctx, "answers": answers})
    return items


class PythonIG:
    """The IG service's worker, in process, on transformers."""

    def __init__(self, lm: Path, samples: int, max_new_tokens: int, threads: int,
                 device: str = "cpu"):
        import torch
        from transformers import (AutoModelForCausalLM, AutoModelForSequenceClassification,
                                  PreTrainedTokenizerFast)
        torch.set_num_threads(threads)
        self.torch = torch
        self.n = samples
        self.max_new = max_new_tokens
        self.lm_tok = PreTrainedTokenizerFast(tokenizer_file=str(lm / "tokenizer.json"))
        self.device = device
        self.lm = AutoModelForCausalLM.from_pretrained(lm).eval().to(device)
        self.end_ids = [i for i in (self.lm_tok.convert_tokens_to_ids(t) for t in END_TOKENS)
                        if i is not None and i != self.lm_tok.unk_token_id]
        self.nli_tok = PreTrainedTokenizerFast(tokenizer_file=str(NLI / "tokenizer.json"))
        self.nli_tok.pad_token = "[PAD]"
        self.nli = AutoModelForSequenceClassification.from_pretrained(NLI).eval().to(device)
        labels = {v.lower(): int(k) for k, v in self.nli.config.id2label.items()}
        self.entail = labels["entailment"]

    def side(self, question: str, context: str | None) -> list:
        torch = self.torch
        prompt = BRIEF + (f"Context: {context}\n" if context is not None else "") \
            + f"Question: {question}\nAnswer:"
        # The service asks for N samples in one call (`num_return_sequences`); greedy decoding
        # takes them as N rows of the same prompt.
        ids = torch.tensor([self.lm_tok.encode(prompt, add_special_tokens=False)],
                           device=self.device).repeat(self.n, 1)
        out = self.lm.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=self.max_new, output_logits=True,
                               return_dict_in_generate=True, pad_token_id=0,
                               eos_token_id=self.end_ids or None)
        logprobs = torch.stack([torch.log_softmax(l.float(), -1) for l in out.logits], 1).cpu()
        samples = []
        for r in range(self.n):
            generated = out.sequences[r, ids.shape[1]:].tolist()
            # An end token ends the sample and is not part of its text (nor are the pads after).
            ends = [t for t, tok in enumerate(generated) if tok in self.end_ids]
            tokens = generated[:ends[0]] if ends else generated
            text = self.lm_tok.decode(tokens)
            cut = min((text.find(s) for s in STOP if s in text), default=-1)
            kept = len(tokens)
            if cut >= 0:
                text = text[:cut]
                kept = 0
                while kept < len(tokens) and len(self.lm_tok.decode(tokens[:kept])) < cut:
                    kept += 1
            counted = max(kept, 1)
            # At least the first token's log-probability (an end token at once counts itself).
            lp = [logprobs[r, t, generated[t]].item() for t in range(counted)]
            samples.append({"text": text.strip(), "mean": sum(lp) / counted})
        return samples

    def entailment(self, premises: list, hypotheses: list) -> list:
        torch = self.torch
        out = []
        for s in range(0, len(premises), 256):  # IG_COMPUTATION_CHUNK_SIZE of the launch script
            enc = self.nli_tok(premises[s:s + 256], hypotheses[s:s + 256], padding=True,
                               truncation=True, max_length=128, return_tensors="pt").to(self.device)
            with torch.no_grad():
                probs = torch.softmax(self.nli(**enc).logits.float(), -1)
            out += probs[:, self.entail].tolist()
        return out

    def ig(self, samples: list, question: str, answers: list) -> float:
        q = question if question.endswith("?") else question + "?"
        means = [s["mean"] for s in samples]
        top = max(means)
        z = top + math.log(sum(math.exp(m - top) for m in means))
        w = [math.exp(m - z) for m in means]
        pairs = [(f"{q} {s['text']}", f"{q} {a}") for a in answers for s in samples]
        e1 = self.entailment([p for p, _ in pairs], [h for _, h in pairs])
        e2 = self.entailment([h for _, h in pairs], [p for p, _ in pairs])
        best = -1.0
        for k, _ in enumerate(answers):
            rows = range(k * len(samples), (k + 1) * len(samples))
            best = max(best, sum(w[r % len(samples)] * max(e1[r], e2[r]) for r in rows))
        return best

    def score(self, item: dict) -> float:
        with self.torch.no_grad():
            with_ctx = self.side(item["question"], item["context"])
            without = self.side(item["question"], None)
        return (self.ig(with_ctx, item["question"], item["answers"])
                - self.ig(without, item["question"], item["answers"]))


def run_python(items: list, args: argparse.Namespace) -> dict:
    ig = PythonIG(args.lm, args.samples, args.max_new_tokens, args.threads,
                  getattr(args, "device", "cpu"))
    ig.score(items[0])  # warm-up
    latencies, scores = [], []
    start = time.perf_counter()
    for item in items:
        t = time.perf_counter()
        scores.append(ig.score(item))
        latencies.append(time.perf_counter() - t)
    return {"seconds": time.perf_counter() - start, "latencies": latencies, "scores": scores}


def run_arbiter(items: list, args: argparse.Namespace, binary: str | None = None) -> dict:
    device = getattr(args, "device", "cpu")
    # f32 on every device, so that the two sides' greedy samples and ΔIG values agree.
    placed = f'device = "{device}"\ndtype = "f32"\n'
    config = (f'[[models]]\nname = "tiny-lm"\nkind = "generator"\npath = "{args.lm}"\n{placed}'
              f'[[models]]\nname = "tiny-nli"\nkind = "nli"\npath = "{NLI}"\n{placed}')
    tmp = Path(args.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    arbiter_testing.ARBITER_BIN = str(binary or arbiter_testing.ARBITER_BIN)
    server = arbiter_testing.start_server(tmp, config)
    options = {"num_samples": args.samples, "temperature": 0, "max_new_tokens": args.max_new_tokens}

    def one(item: dict) -> tuple:
        t = time.perf_counter()
        status, _, body = server.request("POST", "/compute_info_gain",
                                         {"items": [item], "options": options,
                                          "deadline_ms": 600000})
        assert status == 200 and body["errors"] == [None], body
        return time.perf_counter() - t, body["scores"][0]

    try:
        one(items[0])  # warm-up
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(items)) as pool:
            done = list(pool.map(one, items))
        seconds = time.perf_counter() - start
    finally:
        server.stop()
    return {"seconds": seconds, "latencies": [d[0] for d in done], "scores": [d[1] for d in done]}


def pct(values: list, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=32)
    p.add_argument("--samples", type=int, default=10, help="N per side")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=0, help="torch threads of the Python side "
                   "(0: torch's default)")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--device", default="cpu", help="both sides' device (cpu, cuda); f32 on each")
    p.add_argument("--tmp", default="/tmp/arbiter_ig_bench")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--baseline", type=Path, help="another arbiter binary (e.g. an older build) "
                   "measured in the same run, on the same items")
    args = p.parse_args()
    if args.threads == 0:
        import torch
        args.threads = torch.get_num_threads()
    items = make_items(args.items, args.seed)
    args.lm = make_lm(Path(args.tmp) / "tiny_qwen3")
    arbiter = run_arbiter(items, args)
    baseline = run_arbiter(items, args, str(args.baseline)) if args.baseline else None
    python = run_python(items, args)
    diff = max(abs(a - b) for a, b in zip(arbiter["scores"], python["scores"]))
    print(f"{args.items} items, N = {args.samples} per side, {args.max_new_tokens} new tokens, "
          f"greedy; tiny Qwen3 (2 layers x 64) and tiny DeBERTa-v3 NLI; max |ΔIG arbiter - python| = "
          f"{diff:.2e}\n")
    print("| run | seconds | items/s | p50 ms per item | p99 ms per item | × python items/s |")
    print("|---|---|---|---|---|---|")
    runs = [("python IG service design", python), ("arbiter", arbiter)]
    if baseline is not None:
        runs.insert(1, (f"arbiter baseline ({args.baseline})", baseline))
        diff = max(diff, max(abs(a - b) for a, b in zip(baseline["scores"], python["scores"])))
    for name, r in runs:
        print(f"| {name} | {r['seconds']:.2f} | {args.items / r['seconds']:.1f} | "
              f"{pct(r['latencies'], 0.5) * 1000:.0f} | {pct(r['latencies'], 0.99) * 1000:.0f} | "
              f"{python['seconds'] / r['seconds']:.2f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "ig_bench.json"
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                               "max_abs_diff": diff, "python": python, "arbiter": arbiter,
                               "baseline": baseline},
                              indent=1))
    print(f"results: {out}")
    return 0 if diff < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
