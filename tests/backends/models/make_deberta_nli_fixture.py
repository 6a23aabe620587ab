#!/usr/bin/env python3
"""Writes a tiny DeBERTa-v3-style NLI model with its own SentencePiece tokenizer into
tests/backends/models/fixtures/tiny_deberta_nli/, with Hugging Face's ids and probabilities:

- spm.model: a small Unigram SentencePiece model trained here with DeBERTa-v3's layout
  ([PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3; NFKC normalization; digits split).
- tokenizer.json: what transformers' DebertaV2Converter makes of spm.model (Strip,
  Precompiled, collapse spaces; Metaspace; Unigram; [CLS] A [SEP] B [SEP]), plus [MASK] as the
  last id — the file a DeBERTa-v3 model folder ships.
- config.json, model.safetensors: a random-weight DebertaV2ForSequenceClassification of that
  vocabulary (log-bucketed relative positions, conv layer, labels in cross-encoder's order:
  contradiction, entailment, neutral).
- expected.json: `tokenizer_cases` (text, optional pair and max_length, ids and type ids from the
  `tokenizers` library reading tokenizer.json, longest-first truncation) and `nli_cases`
  (premise, hypothesis, ids, logits and probabilities from transformers).

The C++ tests (tokenizers_tests, models_tests) read spm.model through Debian's libsentencepiece
and must give the same ids and probabilities. Needs sentencepiece, protobuf, tokenizers,
transformers and torch (pip). Run once, then commit the folder:
    python3 tests/backends/models/make_deberta_nli_fixture.py
"""
import json
import random
import tempfile
from pathlib import Path

import sentencepiece as spm
import torch
from tokenizers import AddedToken, Tokenizer
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification
from transformers.convert_slow_tokenizer import DebertaV2Converter

OUT = Path(__file__).resolve().parent / "fixtures" / "tiny_deberta_nli"

WORDS = ("the a cat dog sat on mat is was blue red green sky capital of france paris berlin "
         "germany answer question because therefore not never always some many people city "
         "river mountain number one two three year born died wrote book ocean sun moon star "
         "planet earth water fire tree house car road").split()
EXTRA = ["Café naïve résumé — “quotes” 1234 5678 3.14", "東京は日本の首都です。",
         "emoji 😀 🎉 ok", "Straße ÅÄÖ éè", "tabs\tand   spaces", "한국어 텍스트", "العربية"]


def train_spm(folder: Path) -> Path:
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))).capitalize()
             + rng.choice([".", "?", "!", ","]) for _ in range(3000)]
    lines += EXTRA * 20
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(lines), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "spm"), vocab_size=220,
        model_type="unigram", pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]",
        bos_piece="[CLS]", eos_piece="[SEP]", unk_piece="[UNK]", character_coverage=0.9995,
        split_digits=True, normalization_rule_name="nmt_nfkc", num_threads=1,
        minloglevel=2)
    return folder / "spm.model"


class SlowDeberta:
    """What DebertaV2Converter reads from transformers' slow tokenizer."""

    def __init__(self, vocab_file):
        self.vocab_file = str(vocab_file)
        self.split_by_punct = False
        self.do_lower_case = False
        self.add_prefix_space = True
        self.legacy = True
        self._sp = spm.SentencePieceProcessor(model_file=self.vocab_file)

    def convert_tokens_to_ids(self, token):
        return self._sp.piece_to_id(token)


def tokenizer_cases():
    long_text = " ".join(WORDS) * 3
    singles = ["The cat sat on the mat.", "", " ", "   leading and trailing   ",
               "tabs\tand\nnew\r\nlines", "whitespace     runs  here", "Café naïve résumé",
               "ＡＢＣ ﬁ ① full-width and ligatures", "e\u0301 combining", "\u00a0nbsp\u2003em",
               "Straße ÅÄÖ", "東京は日本の首都です。", "한국어 텍스트", "العربية", "😀 🎉 👩‍👩‍👧",
               "numbers 12,345.67 and 2024-01-31", "``quoted'' text", "don't stop",
               "[CLS] special [SEP] tokens [MASK] inside", "a[SEP]b", "unknown ∰ ⌘ glyphs",
               "x" * 40, long_text]
    cases = [{"text": t} for t in singles]
    cases += [{"text": long_text, "max_length": 32}, {"text": "short", "max_length": 4}]
    pairs = [("Paris is the capital of France.", "France has a capital."),
             ("A dog sat on the mat.", "No animal is on the mat."),
             ("東京は日本の首都です。", "Tokyo 😀"), ("", "empty premise"),
             ("  spaces  ", "\ttab"), (long_text, "The sky is blue.")]
    cases += [{"text": a, "pair": b} for a, b in pairs]
    cases += [{"text": long_text, "pair": "The sky is blue.", "max_length": 24},
              {"text": "The sky is blue.", "pair": long_text, "max_length": 25},
              {"text": long_text, "pair": long_text, "max_length": 31}]
    return cases


NLI_PAIRS = [
    ("Paris is the capital of France.", "Paris is in France."),
    ("A dog sat on the mat.", "No animal is on the mat."),
    ("The river was blue.", "The river was red."),
    ("Some people wrote a book in one year.", "A book was written."),
    ("東京は日本の首都です。", "Tokyo is the capital of Japan 😀"),
    ("", "The premise is empty."),
    (" ".join(WORDS) * 4, "A long premise is truncated."),
]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model_file = train_spm(Path(tmp))
        (OUT / "spm.model").write_bytes(model_file.read_bytes())
    sp = spm.SentencePieceProcessor(model_file=str(OUT / "spm.model"))
    tok = DebertaV2Converter(SlowDeberta(OUT / "spm.model")).converted()
    tok.add_special_tokens([AddedToken("[MASK]", special=True, normalized=False)])
    tok.save(str(OUT / "tokenizer.json"))
    tok = Tokenizer.from_file(str(OUT / "tokenizer.json"))
    vocab_size = tok.get_vocab_size()
    assert tok.token_to_id("[MASK]") == sp.get_piece_size() == vocab_size - 1

    rows = []
    for case in tokenizer_cases():
        if "max_length" in case:
            tok.enable_truncation(case["max_length"])
        else:
            tok.no_truncation()
        enc = tok.encode(case["text"], case.get("pair"))
        rows.append({**case, "ids": enc.ids, "type_ids": enc.type_ids})
    tok.no_truncation()

    max_tokens = 128
    config = DebertaV2Config(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=max_tokens, type_vocab_size=0,
        relative_attention=True, position_buckets=16, max_relative_positions=32,
        share_att_key=True, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
        position_biased_input=False, layer_norm_eps=1e-7, hidden_act="gelu", num_labels=3,
        pad_token_id=0, id2label={0: "contradiction", 1: "entailment", 2: "neutral"},
        label2id={"contradiction": 0, "entailment": 1, "neutral": 2})
    torch.manual_seed(1234)
    model = DebertaV2ForSequenceClassification(config).eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.1 * noise if "LayerNorm.weight" in name else 0.2 * noise)
    model.save_pretrained(OUT, safe_serialization=True)

    tok.enable_truncation(max_tokens)
    nli = []
    with torch.no_grad():
        for premise, hypothesis in NLI_PAIRS:
            enc = tok.encode(premise, hypothesis)
            logits = model(input_ids=torch.tensor([enc.ids]),
                           token_type_ids=torch.tensor([enc.type_ids]),
                           attention_mask=torch.ones(1, len(enc.ids), dtype=torch.long)).logits[0]
            nli.append({"premise": premise, "hypothesis": hypothesis, "ids": enc.ids,
                        "logits": [float(x) for x in logits],
                        "probabilities": [float(x) for x in torch.softmax(logits, -1)]})
    (OUT / "expected.json").write_text(
        json.dumps({"tokenizer_cases": rows, "nli_cases": nli}, ensure_ascii=False, indent=1)
        + "\n", encoding="utf-8")
    size = sum(f.stat().st_size for f in OUT.iterdir())
    print(f"wrote {OUT} ({len(rows)} tokenizer cases, {len(nli)} NLI cases, {size} bytes)")


if __name__ == "__main__":
    main()
