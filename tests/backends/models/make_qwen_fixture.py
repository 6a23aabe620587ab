#!/usr/bin/env python3
"""Writes tiny random-weight Qwen3 and Qwen2 causal LMs (a few layers, hidden 32) and the
outputs Hugging Face `transformers` computes for them, for the native decoder's golden tests
(qwen_decoder_test.cpp): logits at every position of a few sequences, greedy generations, and
Qwen3-Embedding-style vectors (final-norm hidden state of the last token, L2-normalized).

    pip install torch transformers
    python3 tests/backends/models/make_qwen_fixture.py
"""
import json
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

OUT = Path(__file__).resolve().parent / "fixtures"
SEQUENCES = [[5], [1, 2, 3, 4, 5, 6, 7], [100, 7, 42, 42, 9, 0, 127, 64, 3, 88, 17, 23]]
PROMPTS = [[3, 14, 15, 92], [65], [8, 9, 7, 9, 3, 2, 3, 8, 4, 6]]


def make(name, config_cls, model_cls, vocab=128, tokenizer=None, **extra):
    torch.manual_seed(1234)
    config = config_cls(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, **extra)
    model = model_cls(config).eval()
    # Random init leaves small norms at 1; spread them so that a wrong norm shows.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").unlink(missing_ok=True)
    if tokenizer is not None:
        # A generator for the worker and end-to-end tests: the tokenizers fixture's tiny BPE
        # (vocabulary 705 with its added tokens), no expected outputs.
        (folder / "tokenizer.json").write_bytes(Path(tokenizer).read_bytes())
        print(f"wrote {folder}")
        return
    cases = {"logits": [], "greedy": [], "embed": []}
    with torch.no_grad():
        for ids in SEQUENCES:
            logits = model(torch.tensor([ids])).logits[0]
            cases["logits"].append({"ids": ids,
                                    "logits": [[round(float(x), 6) for x in row] for row in logits]})
        for ids in PROMPTS:
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 max_new_tokens=8, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)
            cases["greedy"].append({"ids": ids, "tokens": out[0, len(ids):].tolist()})
        for ids in SEQUENCES:
            hidden = model.model(torch.tensor([ids])).last_hidden_state[0, -1]
            vector = torch.nn.functional.normalize(hidden, dim=0)
            cases["embed"].append({"ids": ids, "vector": [round(float(x), 7) for x in vector]})
    (folder / "expected.json").write_text(json.dumps(cases) + "\n")
    print(f"wrote {folder}")


def main():
    make("tiny_qwen3", Qwen3Config, Qwen3ForCausalLM, head_dim=16)  # head_dim ≠ hidden / heads
    make("tiny_qwen2", Qwen2Config, Qwen2ForCausalLM)
    bpe = Path(__file__).resolve().parents[1] / "tokenizers" / "fixtures" / "tiny_bpe" / "tokenizer.json"
    make("tiny_qwen3_lm", Qwen3Config, Qwen3ForCausalLM, vocab=705, tokenizer=bpe, head_dim=16)


if __name__ == "__main__":
    main()
