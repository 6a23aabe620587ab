#!/usr/bin/env python3
"""Generation throughput: Arbiter's native Qwen3 decoder (libtorch, a `[[models]]` generator
behind /v1/chat/completions) next to Hugging Face transformers' `generate` on the same random
weights, in one run on the same machine.

The model is Qwen3-0.6B-shaped in width (hidden 1024, 16 heads, 8 KV heads, head_dim 128,
intermediate 3072, vocabulary 151936, tied embeddings) with `--layers` layers (28 is the real
depth; fewer keep a CPU run short), random weights made here with transformers and saved as
safetensors (f32). Prompts are ChatML-rendered texts, tokenized by the tokenizers fixture's tiny
byte-level BPE (token ids below 705, so the same ids reach both sides); both decode greedily
for `--new-tokens` tokens per prompt: one prompt at a time, then all at once (Arbiter: the
requests sent together, so the worker decodes them in one left-padded batch; transformers: one
left-padded `generate` call). The table gives generated tokens, seconds and tokens/s per run,
the ratio to transformers one prompt at a time on one thread, and Arbiter's ratio to the same
shape on transformers at its default thread count (one at a time; one batch). Needs build/arbiter,
`pip install torch transformers tokenizers`; writes the model under $TMPDIR/arbiter_gen_bench.

    python3 bench/generate_bench.py --layers 4 --prompts 4 --new-tokens 32
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))

from arbiter_testing import start_server  # noqa: E402

TOKENIZER = REPO / "tests" / "backends" / "tokenizers" / "fixtures" / "tiny_bpe" / "tokenizer.json"
WORDS = "the reward model scores each sampled answer against the reference solution".split()


def silence_end_tokens(model, tokenizer_file: Path):
    """Zeroes the (tied) embeddings of the end tokens Arbiter's generator stops at: random
    weights would make greedy decoding pick one now and then; zero, they score 0 against the
    random others, so every sample runs its full length on both sides."""
    import torch
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file))
    with torch.no_grad():
        for t in ("<|endoftext|>", "<|im_end|>"):
            i = tok.convert_tokens_to_ids(t)
            if i is not None and i != tok.unk_token_id:
                model.model.embed_tokens.weight[i].zero_()


def make_model(folder: Path, layers: int, dtype=None, silence_ends: bool = False):
    """The Qwen3-0.6B-width model with `layers` layers (random, seed 0) in `folder`, in
    `dtype` (default f32), its end tokens silenced when asked; made once per variant."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    marker = folder / f"layers-{layers}-{dtype or 'f32'}{'-silent' if silence_ends else ''}"
    if marker.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                         num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=8,
                         head_dim=128, max_position_embeddings=4096, rope_theta=1e6,
                         rms_norm_eps=1e-6, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(config).eval()
    if dtype is not None:
        model = model.to(dtype)
    if silence_ends:
        silence_end_tokens(model, TOKENIZER)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").unlink(missing_ok=True)
    shutil.copy(TOKENIZER, folder / "tokenizer.json")
    marker.write_text("")
    return folder


def chatml(text):
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=32)
    args = p.parse_args()

    import torch
    from tokenizers import Tokenizer
    from transformers import Qwen3ForCausalLM

    folder = Path(os.environ.get("TMPDIR", "/tmp")) / "arbiter_gen_bench"
    make_model(folder, args.layers)
    texts = [" ".join(WORDS[(i + k) % len(WORDS)] for k in range(40)) for i in range(args.prompts)]
    tok = Tokenizer.from_file(str(TOKENIZER))
    prompt_ids = [tok.encode(chatml(t), add_special_tokens=False).ids for t in texts]
    end_ids = [tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")]

    rows = []
    server = start_server(folder, f'[[models]]\nname = "bench"\nkind = "generator"\npath = "{folder}"\n')
    try:
        def ask(text):
            status, _, body = server.request("POST", "/v1/chat/completions", {
                "model": "bench", "messages": [{"role": "user", "content": text}],
                "max_tokens": args.new_tokens, "temperature": 0.0})
            assert status == 200, body
            return body["usage"]["completion_tokens"]

        ask(texts[0])  # warm-up
        start = time.perf_counter()
        generated = sum(ask(t) for t in texts)
        rows.append(("arbiter, one at a time", time.perf_counter() - start, generated))
        from concurrent.futures import ThreadPoolExecutor
        start = time.perf_counter()
        with ThreadPoolExecutor(len(texts)) as pool:
            generated = sum(pool.map(ask, texts))
        rows.append(("arbiter, all at once", time.perf_counter() - start, generated))
    finally:
        server.stop()

    model = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    for threads in (1, torch.get_num_threads()):
        torch.set_num_threads(threads)
        with torch.no_grad():
            model.generate(torch.tensor([prompt_ids[0]]), max_new_tokens=2, do_sample=False)
            start = time.perf_counter()
            generated = 0
            for ids in prompt_ids:
                out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                     max_new_tokens=args.new_tokens, do_sample=False,
                                     eos_token_id=end_ids, pad_token_id=0)
                generated += out.shape[1] - len(ids)
        rows.append((f"transformers-{threads}, one at a time", time.perf_counter() - start,
                     generated))
    # All prompts in one left-padded batch (transformers stops a row at its end token).
    longest = max(map(len, prompt_ids))
    ids = torch.tensor([[0] * (longest - len(x)) + x for x in prompt_ids])
    mask = torch.tensor([[0] * (longest - len(x)) + [1] * len(x) for x in prompt_ids])
    with torch.no_grad():
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_tokens=args.new_tokens,
                             do_sample=False, eos_token_id=end_ids, pad_token_id=0)
        generated = 0
        for row in out[:, longest:].tolist():
            ends = [k for k, t in enumerate(row) if t in end_ids]
            generated += ends[0] + 1 if ends else len(row)
    rows.append((f"transformers-{torch.get_num_threads()}, one batch",
                 time.perf_counter() - start, generated))

    def rate(row):
        return row[2] / row[1]
    base = rate(rows[2])
    # The same shape on transformers at its default thread count: one at a time for Arbiter's
    # one-at-a-time run, the batched generate for Arbiter's concurrent calls.
    peers = {0: rows[3], 1: rows[4]}
    print(f"Qwen3 width 0.6B, {args.layers} layers, random f32 weights; {args.prompts} prompts of "
          f"~{sum(map(len, prompt_ids)) // len(prompt_ids)} tokens, greedy, up to "
          f"{args.new_tokens} new tokens each\n")
    print("| run | generated tokens | seconds | tokens/s | × transformers-1 | × transformers, same shape |")
    print("|---|---|---|---|---|---|")
    for k, row in enumerate(rows):
        name, seconds, generated = row
        same = f"{rate(row) / rate(peers[k]):.2f}" if k in peers else ""
        print(f"| {name} | {generated} | {seconds:.2f} | {rate(row):.1f} | {rate(row) / base:.2f} | "
              f"{same} |")
    (REPO / "bench" / "results" / "generate_bench.json").write_text(
        json.dumps({"args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
