#!/usr/bin/env python3
"""Writes two tiny random-weight DeBERTa-v2 sequence classifiers and Hugging Face's logits for
them into tests/backends/models/fixtures/tiny_deberta_v2{,_alt}/ (config.json,
model.safetensors, expected.json). The C++ golden test (deberta_classifier_test.cpp) feeds the
same ids to the native forward and compares logits (max abs error <= 1e-4).

- tiny_deberta_v2: the deberta-v2-xlarge-mnli shape in miniature — log-bucketed relative
  positions (buckets 8, max_relative_positions 16, so long inputs hit the clamp), shared
  attention keys, p2c|c2p, layer-normed relative embeddings, the conv layer (kernel 3, gelu),
  token types, labels CONTRADICTION/NEUTRAL/ENTAILMENT.
- tiny_deberta_v2_alt: the other branches — no buckets, separate pos_key_proj/pos_query_proj,
  c2p|p2c given as a string, no rel-embedding norm, absolute positions added to the input,
  embedding_size != hidden_size (embed_proj), no conv, no token types, tanh pooler, labels
  entailment first in lower case.

Weights are drawn with a fixed seed and a larger spread than HF's init (std 0.02 would give
nearly input-independent logits). Run once, then commit the folders:
    python3 tests/backends/models/make_deberta_fixture.py
"""
import json
from pathlib import Path

import torch
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

HERE = Path(__file__).resolve().parent / "fixtures"

VARIANTS = {
    "tiny_deberta_v2": dict(
        vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
        relative_attention=True, position_buckets=8, max_relative_positions=16,
        share_att_key=True, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
        position_biased_input=False, conv_kernel_size=3, conv_act="gelu", layer_norm_eps=1e-7,
        hidden_act="gelu", num_labels=3,
        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2}),
    "tiny_deberta_v2_alt": dict(
        vocab_size=128, hidden_size=24, embedding_size=16, num_hidden_layers=2,
        num_attention_heads=3, intermediate_size=48, max_position_embeddings=64,
        type_vocab_size=0, relative_attention=True, max_relative_positions=12,
        share_att_key=False, pos_att_type="c2p|p2c", position_biased_input=True,
        layer_norm_eps=1e-7, hidden_act="gelu", pooler_hidden_act="tanh", num_labels=3,
        id2label={0: "entailment", 1: "neutral", 2: "contradiction"},
        label2id={"entailment": 0, "neutral": 1, "contradiction": 2}),
}


def cases(gen):
    """Token sequences [CLS] A [SEP] (B [SEP]) with type ids 0 for A, 1 for B."""
    def pair(a_len, b_len):
        a = torch.randint(5, 128, (a_len,), generator=gen).tolist()
        ids, types = [1] + a + [2], [0] * (a_len + 2)
        if b_len:
            b = torch.randint(5, 128, (b_len,), generator=gen).tolist()
            ids += b + [2]
            types += [1] * (b_len + 1)
        return ids, types
    out = [([1], [0]), pair(1, 0), pair(3, 2), pair(6, 9), pair(12, 7), pair(20, 27), pair(30, 31)]
    return out


def main():
    for name, kwargs in VARIANTS.items():
        torch.manual_seed(1234)
        model = DebertaV2ForSequenceClassification(DebertaV2Config(**kwargs)).eval()
        gen = torch.Generator().manual_seed(99)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                noise = torch.randn(p.shape, generator=gen)
                if "LayerNorm.weight" in pname:
                    p.copy_(1.0 + 0.1 * noise)
                else:
                    p.copy_(0.2 * noise)
        folder = HERE / name
        model.save_pretrained(folder, safe_serialization=True)
        rows = []
        with torch.no_grad():
            for ids, types in cases(gen):
                logits = model(input_ids=torch.tensor([ids]),
                               token_type_ids=torch.tensor([types]),
                               attention_mask=torch.ones(1, len(ids), dtype=torch.long)).logits[0]
                rows.append({"ids": ids, "type_ids": types,
                             "logits": [float(x) for x in logits],
                             "probabilities": [float(x) for x in torch.softmax(logits, -1)]})
        (folder / "expected.json").write_text(json.dumps({"cases": rows}) + "\n")
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"wrote {folder} ({len(rows)} cases, {size} bytes)")


if __name__ == "__main__":
    main()
