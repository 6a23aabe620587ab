#!/usr/bin/env python3
"""Generates tests/backends/fixtures/cpu_reward_cases.json, the reference values the C++ CPU
rewards are checked against.

- "ratio": difflib.SequenceMatcher(None, a, b).ratio() for hand-written and seeded random pairs
  of strings (code points, as Python str), including long texts where the autojunk heuristic
  (len(b) >= 200) changes the result.
- "normalize": the SQuAD v1.1 evaluation script's normalize_answer(text) for a corpus of answers.
- "exact_match": exact_match_score(prediction, reference) as 0.0 / 1.0.

Deterministic (fixed seed, stdlib only). Run from anywhere:
    python3 tests/backends/make_cpu_reward_fixtures.py
"""

import difflib
import json
import random
import re
import string
import sys
from pathlib import Path

SEED = 20240611
OUT = Path(__file__).resolve().parent / "fixtures" / "cpu_reward_cases.json"


# --- SQuAD v1.1 evaluate-v1.1.py ----------------------------------------------------------------

def normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def exact_match_score(prediction, ground_truth):
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def ratio(a, b):
    return difflib.SequenceMatcher(None, a, b).ratio()


# --- Alphabets and text generators --------------------------------------------------------------

WORDS = ("the a an of and to in is was for on that with as by at from it this be are or "
         "answer question model reward paris tower river number value city year first "
         "because therefore however result equals four seven twelve").split()
GREEK_WORDS = "ο η το και να είναι στο της του με για από λόγος απάντηση ΟΔΟΣ Σοφία".split()
CJK_WORDS = ["答案", "问题", "北京", "东京", "模型", "的", "是", "在", "了", "一个", "中国", "数字"]

ALPHABETS = {
    "ascii_small": "ab ",
    "ascii_letters": string.ascii_letters + "     ",
    "ascii_printable": string.printable[:-5],
    "digits": string.digits + " .,-",
    "latin_accents": "aeiouàáâãäåèéêëìíîïòóôõöùúûüçñßÆæØø ",
    "greek": "αβγδεζηθικλμνξοπρσςτυφχψωΑΒΓΔΣΩ ",
    "cyrillic": "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГД ",
    "cjk": "".join(chr(c) for c in range(0x4E00, 0x4E00 + 60)) + "，。",
    "emoji": "".join(chr(c) for c in range(0x1F600, 0x1F600 + 40)) + " 👍🏽❤️",
    "combining": "aeo\u0301\u0300\u0308\u0327 n\u0303",
    "mixed": "abc xyz 123 éü αβ жз 中文 😀 \t\n",
}


def random_text(rng, length):
    kind = rng.random()
    if kind < 0.35:
        # Word-based text: realistic, repeated tokens, popular spaces once long enough.
        vocab = rng.choice([WORDS, WORDS, GREEK_WORDS, CJK_WORDS, WORDS + GREEK_WORDS + CJK_WORDS])
        sep = "" if vocab is CJK_WORDS else " "
        out = ""
        while len(out) < length:
            out += rng.choice(vocab) + sep
        return out[:length]
    alphabet = rng.choice(list(ALPHABETS.values()))
    return "".join(rng.choice(alphabet) for _ in range(length))


def perturb(rng, text):
    """A noisy copy: deletions, insertions, substitutions, and sometimes a moved chunk."""
    rate = rng.choice([0.0, 0.01, 0.05, 0.1, 0.3])
    pool = text or "xyz"
    out = []
    for ch in text:
        r = rng.random()
        if r < rate / 3:
            continue
        if r < 2 * rate / 3:
            out.append(rng.choice(pool))
            continue
        out.append(ch)
        if r < rate:
            out.append(rng.choice(pool))
    result = "".join(out)
    if len(result) > 10 and rng.random() < 0.3:
        i = rng.randrange(len(result))
        j = rng.randrange(i, min(len(result), i + 50) + 1)
        chunk, rest = result[i:j], result[:i] + result[j:]
        k = rng.randrange(len(rest) + 1)
        result = rest[:k] + chunk + rest[k:]
    return result


def random_length(rng):
    r = rng.random()
    if r < 0.45:
        return rng.randint(0, 60)
    if r < 0.8:
        return rng.randint(60, 320)
    return rng.randint(320, 1500)


# --- Corpora --------------------------------------------------------------------------------------

def hand_written_pairs():
    lorem = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
             "incididunt ut labore et dolore magna aliqua. ")
    long_words = " ".join(WORDS * 8)                      # > 1000 code points, popular tokens
    pairs = [
        ("", ""),
        ("", "abc"),
        ("abc", ""),
        ("abc", "abc"),
        ("a", "a"),
        ("a", "b"),
        ("The answer is 4.", "4"),
        ("4", "The answer is 4."),
        ("The quick brown fox jumps over the lazy dog.",
         "The quick brown dog jumps over the lazy fox."),
        ("abcd", "bcda"),
        ("private Thread currentThread;", "private volatile Thread currentThread;"),
        ("qabxcd", "abycdf"),
        ("abxcd", "abcd"),
        ("   leading and trailing   ", "leading and trailing"),
        ("tab\tseparated\tvalues", "tab separated values"),
        ("line one\nline two\n\nline three", "line one line two line three"),
        ("3.14159", "3.14"),
        ("1234567890", "0987654321"),
        ("42", "42.0"),
        ("café", "cafe"),
        ("cafe\u0301", "café"),
        ("naïve résumé", "naive resume"),
        ("Καλημέρα κόσμε", "Καλησπέρα κόσμε"),
        ("ΟΔΟΣ", "οδος"),
        ("北京是中国的首都", "中国的首都是北京"),
        ("東京タワー", "東京スカイツリー"),
        ("😀😃😄😁", "😀😄😁😆"),
        ("👍🏽 thumbs", "👍 thumbs"),
        ("e\u0301e\u0301e\u0301", "\u00e9\u00e9\u00e9"),
        ("a" * 300, "a" * 300),                         # all popular; extension still matches
        ("a" * 300, "a" * 299 + "b"),
        ("a" * 300, "b" + "a" * 299),
        ("a" * 150, "a" * 150),                         # below 200: no autojunk
        ("a" * 199, "a" * 199),
        ("a" * 200, "a" * 200),
        ("x" * 10 + "aaa", "aaa" + "x" * 196),          # len(b) == 199
        ("x" * 10 + "aaa", "aaa" + "x" * 197),          # len(b) == 200
        ("b" + "a" * 250 + "c", "b" + "a" * 250 + "c"),  # extension over popular elements
        ("xbyaaaaaaaaaaaaz", "b" + "a" * 250 + "z"),
        (lorem * 3, lorem * 3),
        (lorem * 3, (lorem * 3).replace("dolor", "dolour")),
        (lorem * 10, lorem * 9 + "The end."),
        (long_words, long_words[::-1]),
        (long_words, long_words.replace(" the ", " THE ")),
        (long_words[:1100], long_words[50:1150]),
        ("ab" * 600, "ba" * 600),
        ("abc " * 300, "abd " * 300),
        ("    ", "  "),
        (" " * 250, " " * 250 + "x"),
        ("a b c d e f g", "a  b  c  d  e  f  g"),
    ]
    # Popularity threshold: with len(b) == 300, ntest == 4; 'q' occurs 4 (kept) vs 5 (popular).
    filler = "".join(chr(0x4E00 + (i % 200)) for i in range(292))
    pairs.append(("qqqq" + filler[:20], "qqqq" + filler + "zzzz"))
    pairs.append(("qqqqq" + filler[:20], "qqqqq" + filler[:291] + "zzzz"))
    return pairs


def normalize_corpus(rng):
    texts = [
        "", " ", "A", "a", "An", "an", "The", "the", "THE", "a-an-the", "a an the",
        "The Eiffel Tower", "the eiffel tower", "an apple", "An Apple a day", "theatre",
        "anthem", "Athens", "thereafter the", "a.", "(a)", "the_end", "the-end", "the, end",
        "Tom's answer", "don't", "U.S.A.", "U.S. Army", "$1,000,000", "3.14", "50%",
        "1/2", "#1 hit", "e-mail", "«the» answer", "“The” answer", "‘a’ letter",
        "¿Qué es?", "¡Hola!", "—the dash—", "the…", "l'été", "ÉCOLE", "École Normale",
        "Ärger über Öl", "STRASSE", "Straße", "İstanbul", "ISTANBUL", "ΟΔΟΣ", "Σοφία",
        "ΑΣ.Β", "ΑΣ.", "Σ", "ΌΣΟΣ ΟΔΟΣ", "Κόσμε", "Москва", "МОСКВА", "北京", "北京 the 北京",
        "the北京", "東京タワー", "😀 the 😀", "the😀", "tab\tthe\tseparated", "new\nline\n",
        "carriage\r\nreturn", "  many   spaces  ", "nbsp\u00a0the\u00a0space",
        "ideographic\u3000space", "line\u2028separator", "para\u2029sep", "fs\x1cgs\x1drs\x1eus\x1f",
        "next\x85line", "zero\u200bwidth", "thin\u2009space", "a\u0301 combining", "the\u0301",
        "ａ fullwidth", "Ⓐ circled", "the ½ answer", "an ⅷ", "the²", "A1", "a_1", "ａｎ",
        "The Answer Is 4.", "4", "four", "The answer is (B).", "B", "b)", "The the the",
        "a a a a", "an an", "thethe", "K\u212a kelvin", "ǅ titlecase", "ﬁ ligature",
        "\ufffd replacement", "x" * 40 + " the " + "y" * 40,
    ]
    pieces = ["the", "The", "a", "A", "an", "AN", " ", "  ", "\t", "\n", ".", ",", "-", "'",
              "\"", "(", ")", "«", "»", "é", "É", "Σ", "ß", "北", "😀", "theatre", "answer",
              "Paris", "42", "_", "\u00a0", "\u0301"]
    for _ in range(40):
        texts.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))))
    return texts


def exact_match_pairs():
    return [
        ("The Eiffel Tower", "Eiffel Tower"),
        ("the eiffel tower.", "Eiffel Tower"),
        ("Eiffel Tower", "The Eiffel Towers"),
        ("An apple", "apple"),
        ("theatre", "atre"),
        ("4", "The answer is 4."),
        ("4", "4."),
        ("$4", "4"),
        ("four", "4"),
        ("ÉCOLE", "école"),
        ("ECOLE", "école"),
        ("Straße", "STRASSE"),
        ("«Paris»", "Paris"),
        ("\"Paris\"", "Paris"),
        ("Paris\n", "  paris "),
        ("New  York", "new york"),
        ("New\u00a0York", "new york"),
        ("New-York", "newyork"),
        ("New-York", "new york"),
        ("a-an-the", "aanthe"),
        ("A", ""),
        ("the", " "),
        ("ΟΔΟΣ", "οδος"),
        ("ΟΔΟΣ", "οδοσ"),
        ("İstanbul", "istanbul"),
        ("北京", "北京"),
        ("北京。", "北京"),
        ("😀", "😀!"),
        ("", ""),
        ("U.S.A.", "usa"),
    ]


def main():
    rng = random.Random(SEED)

    pairs = hand_written_pairs()
    for _ in range(150):
        a = random_text(rng, random_length(rng))
        r = rng.random()
        if r < 0.5:
            b = perturb(rng, a)
        elif r < 0.6:
            b = a
        else:
            b = random_text(rng, random_length(rng))
        if rng.random() < 0.5:
            a, b = b, a
        pairs.append((a, b))

    texts = normalize_corpus(rng)
    data = {
        "generator": "tests/backends/make_cpu_reward_fixtures.py",
        "python": sys.version.split()[0],
        "ratio": [{"a": a, "b": b, "ratio": ratio(a, b)} for a, b in pairs],
        "normalize": [{"text": t, "normalized": normalize_answer(t)} for t in texts],
        "exact_match": [
            {"prediction": p, "reference": g, "score": 1.0 if exact_match_score(p, g) else 0.0}
            for p, g in exact_match_pairs()
        ],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): {len(data['ratio'])} ratio cases, "
          f"{len(data['normalize'])} normalize cases, {len(data['exact_match'])} exact-match pairs")


if __name__ == "__main__":
    main()
