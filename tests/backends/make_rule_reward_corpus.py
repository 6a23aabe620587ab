#!/usr/bin/env python3
"""The golden corpus of verl's rule rewards: generated model outputs scored by verl 0.9.1's own
functions (verl/utils/reward_score/{gsm8k,math_reward,math_dapo,search_r1_like_qa_em}.py).

    pip install verl==0.9.1 --no-deps        # the oracle; `import verl` needs ray, so the four
                                             # modules are loaded by path (they import only
                                             # re, random, string and typing)
    python3 tests/backends/make_rule_reward_corpus.py            # the committed fixture
    python3 tests/backends/make_rule_reward_corpus.py --seed 7 --per-function 25000 \\
        --out /tmp/fresh.jsonl                                   # an offline run (100,000)
    ARBITER_RULE_CORPUS=/tmp/fresh.jsonl build/tests/backends_tests --gtest_filter='VerlRules.*'
    python3 tests/backends/make_rule_reward_corpus.py --check http://127.0.0.1:8080 \\
        --seed 7 --per-function 25000                            # the same through a server

Each JSON line: fn (the Arbiter reward), data_source (a verl name that dispatches to fn),
solution_str, ground_truth (as verl receives it), options (keyword arguments of the function,
which Arbiter takes in extra_info), expected (score; math_dapo also acc and pred).

About half of each function's cases score "correct", most of them with the answer and the
ground truth written differently, so that every normalisation step decides the outcome. The
rest are wrong or malformed: several or unclosed boxes, nested braces, \\fbox, "\\boxed "
with a space, shorthand \\frac12 and \\sqrt3, units, "Answer:" lines in any case and spacing,
"####" markers that almost match, <answer> tags (none, several, unclosed, more than ten),
answers that straddle the 300-character cut (and math_dapo's 100-character box window) in
multi-byte text, and Unicode that Python's str treats its own way: final sigma, U+0130,
U+212A, superscript and Arabic-Indic digits, U+001C..U+001F, U+0085 and U+3000 as
whitespace, combining marks next to articles. Deterministic for a given --seed.

--unicode-15 adds characters that Unicode 15.0 assigned (Python 3.12+ knows them, 3.11 does
not): the oracle's answer then depends on the Python that runs this script.
"""
import argparse
import contextlib
import importlib.util
import io
import json
import random
import sys
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parent / "fixtures" / "rule_reward_cases.jsonl"
SEED = 20261123
CORRECT_SHARE = 0.5  # of each function's cases, where the function can score correct at all
ATTEMPTS = 8  # tries at the wanted outcome before a case is kept as it came out

DATA_SOURCES = {
    "gsm8k": ["openai/gsm8k"],
    "math": ["lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"],
    "math_dapo": ["math_dapo", "math", "math_dapo_reasoning", "aime2024", "aime2025", "aime25"],
    "search_r1_qa_em": ["searchR1_nq", "searchR1_triviaqa", "searchR1_popqa",
                        "searchR1_hotpotqa", "searchR1_2wikimultihopqa", "searchR1_musique",
                        "searchR1_bamboogle"],
}
MODULES = {"gsm8k": "gsm8k", "math": "math_reward", "math_dapo": "math_dapo",
           "search_r1_qa_em": "search_r1_like_qa_em"}


def verl_dir(given):
    if given:
        return Path(given)
    spec = importlib.util.find_spec("verl")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        sys.exit("verl is not installed: pip install verl==0.9.1 --no-deps (or --verl-dir)")
    return Path(list(spec.submodule_search_locations)[0])


def load_functions(root):
    """The four compute_score functions, each module loaded from its file."""
    functions = {}
    for fn, module in MODULES.items():
        path = Path(root) / "utils" / "reward_score" / f"{module}.py"
        if not path.is_file():
            sys.exit(f"{path} not found: --verl-dir must name verl's package folder")
        spec = importlib.util.spec_from_file_location(f"verl_rule_{module}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        functions[fn] = mod.compute_score
    return functions


def normalized(result):
    """compute_score's result as the corpus records it: float(res), or math_dapo's dict."""
    if isinstance(result, dict):
        return {"score": float(result["score"]), "acc": bool(result["acc"]),
                "pred": result["pred"]}
    return {"score": float(result)}


def expected_of(function, case):
    # search_r1 prints at random and math_reward prints the exceptions it swallows.
    with contextlib.redirect_stdout(io.StringIO()):
        result = function(case["solution_str"], case["ground_truth"], **case["options"])
    return normalized(result)


def is_correct(fn, options, expected):
    score = expected["score"]
    if fn == "math_dapo":
        return expected["acc"]
    if fn == "math":
        return score == 1.0
    full = options.get("score", 1.0)
    if fn == "search_r1_qa_em":
        return score in (full, full / 4) and score != options.get("format_score", 0.0)
    return score == full and score != options.get("format_score", 0.0)


# ---- characters ------------------------------------------------------------------------------

# Python's str.isspace() (and so re's \s, str.split(), str.strip()): more than ASCII.
SPACES = ["\u00a0", "\u2003", "\u3000", "\u2009", "\u202f", "\u1680", "\t", "\x0b", "\x0c",
          "\r", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u2028", "\u2029"]
# Look like spaces, are not to Python: U+200B, U+180E (Cf since Unicode 6.3), U+FEFF, U+2060.
NOT_SPACES = ["\u200b", "\u180e", "\ufeff", "\u2060"]
# str.isdigit() is true for all of these but the last three; int() reads only the decimals.
DIGITS = ["²", "³", "¹", "⁰", "₅", "٣", "۴", "१", "１", "①", "⑴", "🄁", "𝟙", "፩", "½", "Ⅻ", "〇"]
MARKS = ["\u0301", "\u0308", "\u0327", "\u20dd", "\u0345"]  # combining (Mn, Me)
# Letters whose lower() or case-insensitive matching is not ASCII's.
CASED = ["\u0130", "\u0131", "\u212a", "\u212b", "\u2126", "\u01c5", "\u01c8", "\u1e9e", "ß",
         "\u017f", "\ufb01", "\u24b6", "\U0001f130", "\u2167", "ª", "º", "\u02b0", "µ",
         "\u03f4", "\u13a0", "\u1c90", "\U00010400", "Σ", "ΑΣ", "ΟΔΟΣ", "Σ\u0301", "ΑΣ\u0301Α"]
WORLD = ["café", "naïve", "Ōsaka", "Zürich", "İstanbul", "ΟΔΟΣ", "Σοφία", "答案", "北京",
         "数学", "東京", "🙂", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷", "straße", "Ελλάδα", "Москва",
         "עברית", "العربية", "한국어", "ﬁne", "ǅemal", "∞", "≤", "×", "→"]
# Unicode 15.0 assignments (Cn to Python 3.11): Kawi and Nag Mundari digits (Nd), Kawi and
# CJK Extension H letters (Lo), Latin small letters (Ll), Arabic and Kawi marks (Mn).
UNICODE_15 = ["\U00011f50", "\U00011f53", "\U0001e4f1", "\U00011f04", "\U00031350",
              "\U0001df25", "\U00010efd", "\U00011f00"]

WORDS = ["the", "answer", "is", "so", "we", "get", "total", "a", "an", "of", "Step", "Thus",
         "therefore", "Let", "x", "be", "number", "apples", "cost", "each", "and", "then",
         "which", "gives", "sum", "left", "more", "than", "half", "twice", "per", "hour"]


class Gen:
    """The seeded random source and the text pieces every function's cases draw on."""

    def __init__(self, seed, unicode_15=False):
        self.rng = random.Random(seed)
        self.odd = SPACES + NOT_SPACES + DIGITS + MARKS + CASED + WORLD + ["\n"]
        self.u15 = UNICODE_15 if unicode_15 else []  # beside articles, digits and sigmas
        self.odd = self.odd + self.u15 * 3

    def __getattr__(self, name):  # rng.random(), rng.choice(), ... as g.random(), ...
        return getattr(self.rng, name)

    def p(self, probability):
        return self.rng.random() < probability

    def word(self):
        r = self.rng.random()
        if r < 0.78:
            return self.rng.choice(WORDS)
        if r < 0.88:
            return str(self.rng.randint(0, 500))
        return self.rng.choice(self.odd)

    def sentence(self, lo=3, hi=14):
        text = " ".join(self.word() for _ in range(self.rng.randint(lo, hi)))
        if self.p(0.3):
            a, b = self.rng.randint(1, 99), self.rng.randint(1, 99)
            text += self.rng.choice([f" ${a} + {b} = {a + b}$", f" $\\frac{{{a}}}{{{b}}}$",
                                     f" {a} \\times {b} = {a * b}", f" ({a}/{b})",
                                     f" \\({a}^2 = {a * a}\\)", f" {a},{b:03d} dollars"])
        return text + self.rng.choice([".", ".", ",", "!", ":", "", "。"])

    def reasoning(self, chars):
        """About `chars` code points of step-by-step text, as a model writes before answering."""
        out, n = [], 0
        target = self.rng.randint(chars // 2, chars * 3 // 2)
        while n < target:
            step = (f"Step {len(out) + 1}: " if self.p(0.6) else "") + self.sentence() + "\n"
            out.append(step)
            n += len(step)
        return "".join(out)

    def prefix(self):
        """The text before the answer: none, a line, a paragraph, or more than the cut."""
        r = self.rng.random()
        if r < 0.25:
            return ""
        if r < 0.68:
            return self.sentence() + self.rng.choice([" ", "\n", "\n\n"])
        if r < 0.96:
            return self.reasoning(self.rng.randint(100, 300))
        return self.reasoning(self.rng.randint(500, 1000))

    def pad(self, n, pool=None):
        """Exactly `n` code points of text with no digit, brace, '$', '#', '<' or '=' in it:
        filler that moves an answer across a cut without being an answer itself."""
        pool = pool or ["é", "中", "🙂", "ΟΔΟΣ", " ", "a", "text", "\u3000", "ß", "\u0301",
                        "ok", "\n", "İ", "。"]
        out, size = [], 0
        while size < n:
            piece = self.rng.choice(pool)[: n - size]
            out.append(piece)
            size += len(piece)
        return "".join(out)

    def across(self, head, limit):
        """`head` then filler, as long as a cut of the last `limit` code points lands just
        before `head`, on it or inside it (an answer that straddles the cut)."""
        offset = self.rng.randint(-3, len(head) + 1)
        rest = self.pad(max(0, limit - len(head) + offset))
        return self.pad(self.rng.randint(5, 40)) + head + rest

    def sprinkle(self, text, n=1):
        """`n` odd characters put at random places of `text`."""
        for _ in range(n):
            i = self.rng.randint(0, len(text))
            text = text[:i] + self.rng.choice(self.odd) + text[i:]
        return text

    def mutate(self, text):
        """What sampled outputs do to an answer: truncation, a stray character, repetition."""
        r = self.rng.random()
        if r < 0.05 and text:
            return text[: self.rng.randint(0, len(text))]
        if r < 0.12:
            return self.sprinkle(text, self.rng.randint(1, 3))
        if r < 0.14:
            return text * self.rng.randint(2, 3)
        return text


# ---- answers and their surface forms -----------------------------------------------------------

def plain_number(g):
    r = g.random()
    if r < 0.5:
        return str(g.randint(0, 999))
    if r < 0.65:
        return str(g.randint(1000, 999999))
    if r < 0.78:
        return "-" + str(g.randint(1, 500))
    if r < 0.92:
        return f"{g.randint(0, 99)}.{g.choice(['5', '25', '75', '05', '125', '0'])}"
    return g.choice(["0", "0.5", "100", "1000000", "12.50", "-0.5", "007", "3.14159"])


def with_commas(number):
    """1234567 -> 1,234,567 (the integer part only)."""
    sign, rest = ("-", number[1:]) if number.startswith("-") else ("", number)
    whole, dot, frac = rest.partition(".")
    if not whole.isdigit():
        return number
    groups = []
    while len(whole) > 3:
        groups.insert(0, whole[-3:])
        whole = whole[:-3]
    groups.insert(0, whole)
    return sign + ",".join(groups) + dot + frac


def latex_value(g, depth=0):
    """A MATH-style ground truth, in its dataset's own spelling."""
    n = lambda lo=1, hi=20: str(g.randint(lo, hi))  # noqa: E731
    r = g.random()
    if r < 0.22:
        return plain_number(g)
    if r < 0.32:
        return f"\\frac{{{n(1, 9)}}}{{{n(2, 9)}}}"
    if r < 0.4:
        return f"\\frac{{{n()}}}{{{n(2, 30)}}}"
    if r < 0.47:
        return f"-\\frac{{{n()}}}{{{n(2, 9)}}}"
    if r < 0.55:
        return f"{g.choice(['', n(2, 9)])}\\sqrt{{{n(2, 50)}}}"
    if r < 0.6:
        return f"\\frac{{{n()}\\sqrt{{{n(2, 9)}}}}}{{{n(2, 9)}}}"
    if r < 0.66:
        return f"({n(-9, 9)},{n(-9, 9)})"
    if r < 0.7:
        return f"\\left( {n()}, {n()} \\right)"
    if r < 0.74:
        return f"{n()}\\pi"
    if r < 0.78:
        return f"x^2 + {n()}x + {n()}"
    if r < 0.82:
        return f"\\text{{({g.choice('ABCDE')})}}"
    if r < 0.85:
        return f"{n(1, 359)}^\\circ"
    if r < 0.88:
        return f"{n()}\\%"
    if r < 0.9:
        return f"\\${n()}.{g.randint(0, 99):02d}"
    if r < 0.92:
        return g.choice(["\\infty", "\\emptyset", "\\{1,2,3\\}", "[0, 1)", "(-\\infty, 3]",
                         "\\text{even}", "\\text{Evelyn}",
                         "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"])
    if r < 0.94 and depth < 2:
        return f"{{{latex_value(g, depth + 1)}}}"
    if r < 0.96:
        return f"{n()},{g.randint(0, 999):03d}"
    return g.choice(DIGITS + g.u15) + g.choice(["", str(g.randint(0, 9)), ",5"])


def frac_parts(value):
    """(a, b) of a "\\frac{a}{b}" value, else None."""
    if value.startswith("\\frac{") and value.endswith("}") and value.count("{") == 2:
        a, _, b = value[6:-1].partition("}{")
        return a, b
    return None


def frac_shorthand(value):
    """\\frac{1}{2} -> \\frac12 (one-character parts only)."""
    parts = frac_parts(value)
    if parts and len(parts[0]) == 1 and len(parts[1]) == 1:
        return "\\frac" + parts[0] + parts[1]
    return value


def sqrt_shorthand(value):
    """\\sqrt{3} -> \\sqrt3 (a one-character radicand only)."""
    head, sep, rest = value.partition("\\sqrt{")
    if sep and len(rest) >= 2 and rest[1] == "}":
        return head + "\\sqrt" + rest[0] + rest[2:]
    return value


def math_variant(g, value):
    """`value` rewritten the ways models write it; most are equal under strip_string."""
    out = value
    for _ in range(g.randint(0, 3)):
        r = g.random()
        parts = frac_parts(out)
        if parts and r < 0.4:
            a, b = parts
            out = g.choice([f"\\dfrac{{{a}}}{{{b}}}", f"\\tfrac{{{a}}}{{{b}}}", f"{a}/{b}",
                            f"\\dfrac{a}{b}", f"\\tfrac{a}{{{b}}}", f"\\frac {a}{b}",
                            f"\\frac{a}{b}", f"\\frac{a}{{{b}}}", f"\\frac{{{a}}}{b}",
                            f"{a} / {b}", f" \\frac {{{a}}}{{{b}}}", f"\\frac{{{a}}}{{{b}}}."])
            if (a, b) == ("1", "2"):
                out = g.choice([out, "0.5", ".5", "\\frac12", "{.5}"])
        elif r < 0.3:
            out = sqrt_shorthand(out)
        elif r < 0.35:
            out = out.replace("\\frac", g.choice(["\\dfrac", "\\tfrac", "\\frac"]))
        elif r < 0.45:
            out = g.choice(["x = ", "k=", "y =", "ab = ", "abc = ", "x=y="]) + out
        elif r < 0.58:
            out += g.choice(["\\text{ cm}", "\\text{ dollars}", "\\text{ units}", "\\%",
                             "\\\\%", "^\\circ", "^{\\circ}", " \\text{ m}^2",
                             "\\text{ cm} \\text{ m}",
                             " cm", "\\mbox{ cm}", "\\text{cm}", "%", "\\!"])
        elif r < 0.66:
            out = "\\$" + out if g.p(0.5) else out.replace("{", "\\left{", 1)
        elif r < 0.74:
            out = out.replace(" ", "") if " " in out else " ".join(out)
        elif r < 0.8:
            out = out.replace("(", "\\left(").replace(")", "\\right)")
        elif r < 0.86:
            i = g.randint(0, len(out))
            out = out[:i] + g.choice(["\n", "\\!", " ", "\\\\", "\\,"]) + out[i:]
        elif r < 0.9:
            out = out.replace(",", "") if "," in out else with_commas(out)
        elif r < 0.94:
            out = "." + out.split(".", 1)[1] if out.startswith("0.") else out.replace("{0.", "{.")
        elif r < 0.97:
            out = g.choice(["\\textbf{{{}}}", "\\overline{{{}}}", "\\mathbf{{{}}}",
                            "\\text{{{}}}", "${}$"]).format(out)
        else:
            out = g.sprinkle(out)
    if "\\frac" in out and g.p(0.4):  # what models write most
        out = frac_shorthand(out) if g.p(0.3) else \
            out.replace("\\frac", g.choice(["\\dfrac", "\\dfrac", "\\tfrac"]))
    return out


def dapo_variant(g, value):
    """`value` rewritten; most forms are equal under normalize_final_answer."""
    out = value
    for _ in range(g.randint(0, 3)):
        r = g.random()
        if r < 0.15:
            out = with_commas(out) if g.p(0.7) else out.replace(",", "")
        elif r < 0.3:
            out = g.choice(["${}$", "\\({}\\)", "$ {} $", "${}$.", "\\boxed{{{}}}",
                            "$\\boxed{{{}}}$", "\\text{{{}}}", "\\textbf{{{}}}",
                            "\\overline{{{}}}", "{{{}}}", "\"{}\""]).format(out)
        elif r < 0.45:
            out += g.choice([" dollars", " cm", " degrees", "^\\circ", "^{\\circ}", " units",
                             " meters", " square units", " ways", " students", "\\%", "%",
                             " \\text{cm}", "\\text{ cm}", "\\mbox{ km}", " mph", "\\;",
                             "\\text{s}", " points", " tissue", " minutes."])
        elif r < 0.55:
            out = g.choice(["x = ", "x=", "n = ", "The answer = ", "a = b = ", "\\$",
                            "an ", "a ", "\\ "]) + out
        elif r < 0.6:
            out = frac_shorthand(out)
        elif r < 0.65:
            out = out.replace("\\frac", g.choice(["\\dfrac", "frac", "\\tfrac", "\\frac"]))
        elif r < 0.69:
            out = sqrt_shorthand(out)
        elif r < 0.73:
            out = " ".join(out)
        elif r < 0.82:
            out = g.choice(["", " ", "\u00a0", "\u3000", "\t"]) + out + \
                g.choice(["", " ", ".", " .", "\u2003", "\x1f"])
        elif r < 0.9:
            out = out.replace("\\left", "").replace("\\right", "") if "\\left" in out \
                else out.replace("(", "\\left(").replace(")", "\\right)")
        else:
            out = g.sprinkle(out)
    if "\\frac{" in out and g.p(0.4):
        out = frac_shorthand(out) if g.p(0.5) else out.replace("\\frac", "\\dfrac")
    if "\\sqrt{" in out and g.p(0.3):
        out = sqrt_shorthand(out)
    return out


# ---- gsm8k -------------------------------------------------------------------------------------

GSM8K_MARKERS = ["#### "] * 10 + ["####", "####  ", "#### $", "### ", "##### ", "＃＃＃＃ ",
                                  "#### -", "#### \u00a0", "####\t"]


def gsm8k_case(g, want):
    truth = plain_number(g) if g.p(0.85) else g.choice(["1,000", "72.0", "", "-0", "+5", ".5"])
    options = {}
    if g.p(0.5):
        r = g.random()
        if r < 0.7:
            options["method"] = g.choice(["strict", "flexible"])
        if g.p(0.5):
            options["format_score"] = g.choice([0.0, 0.1, 0.2, -1.0, 0, 0.05])
        if g.p(0.5):
            options["score"] = g.choice([1.0, 2.0, 1.5, 1, 3])
        if not options:
            options["method"] = "flexible"
    flexible = options.get("method") == "flexible"
    if want:
        said = g.choice([truth, truth, with_commas(truth), truth + ".", truth + ".00"])
    else:
        said = g.choice([plain_number(g), str(g.randint(0, 20)), truth + "0", "-" + truth,
                         g.choice(DIGITS) + truth, truth.replace("0", "٠"), "$" + truth,
                         truth[:-1] or "0"])
    marker = g.choice(GSM8K_MARKERS)
    tail = g.choice(["", "", "", ".", "\n", " dollars", " dollars.", ",", "!", " (done)",
                     "\n\n", " #### ", "$", " %"])
    if flexible and g.p(0.5):
        answer = g.choice([f"The answer is {said}{tail}", f"So she has {said} apples left.",
                           f"{said}", f"Total: {said} dollars, in {g.randint(2, 9)} boxes.",
                           f"$\\boxed{{{said}}}$", f"= {said}"])
    else:
        answer = f"{marker}{said}{tail}"
    if g.p(0.08):  # an earlier marker that the last one overrides (or not, past the cut)
        answer = f"#### {plain_number(g)}\n" + g.sentence() + "\n" + answer
    text = g.prefix() + answer
    r = g.random()
    if r < 0.12:
        text = g.across(answer, 300)
    elif r < 0.16:
        text = g.reasoning(400) + answer + "\n" + g.sentence()  # numbers after the marker
    return g.mutate(text), truth, options


# ---- math (math_reward) ------------------------------------------------------------------------

def math_box(g, content):
    return g.choice([f"\\boxed{{{content}}}"] * 6 + [
        f"$\\boxed{{{content}}}$", f"\\[\\boxed{{{content}}}\\]", f"\\boxed {content}$",
        f"\\boxed {content}", f"$\\boxed {content}$.", f"\\boxed {{{content}}}",
        f"\\fbox{{{content}}}", f"\\boxed{{{content}", f"\\boxed{{{content}}}}}",
        f"\\boxed{{\\boxed{{{content}}}}}", f"\\boxed{{{{{content}}}}}", f"\\boxed\n{{{content}}}",
        f"\\boxed{{{content}}} \\fbox{{0}}", f"\\boxedx{{{content}}}",
        f"\\boxed{{ {content} }}", f"\\(\\boxed{{{content}}}\\)"])


def math_case(g, want):
    truth = latex_value(g) if g.p(0.99) else g.choice(["", " ", "\\text{ cm}", "\\frac"])
    if g.p(0.005):  # int() refuses more than 4300 digits: fix_a_slash_b keeps the text
        digits = "7" * g.choice([4299, 4300, 4301])
        truth, content = f"\\frac{{{digits}}}{{3}}", f"{digits}/3"
    else:
        content = math_variant(g, truth) if want or g.p(0.3) else latex_value(g)
    parts = [g.prefix()]
    for _ in range(g.choice([0, 0, 0, 1, 2])):  # earlier boxes the last one overrides
        parts.append(f"First \\boxed{{{latex_value(g)}}}, ")
    box = math_box(g, content)
    parts.append(g.choice(["The answer is ", "So ", "Therefore $", "", "Final answer: "]) + box)
    if g.p(0.2):
        parts.append(g.choice([" $x$", "$.", " (the \\$ sign)", "\n" + g.sentence(),
                               " \\boxed 3", " with \\fbox{2}"]))
    text = "".join(parts)
    if g.p(0.04):
        truth = math_box(g, truth)  # a ground truth with its own box is compared as text
    return g.mutate(text), truth, {}


# ---- math_dapo ---------------------------------------------------------------------------------

ANSWER_LINES = ["Answer: ", "Answer: ", "Answer: ", "Answer:", "answer: ", "ANSWER: ",
                "Answer : ", "aNsWeR:\t", "Final Answer: ", "The final answer: ", "Anſwer: ",
                "Answer:\n", "Answer:\u3000", "Answer\u00a0:\u00a0", "Answer\x1c:\x1f",
                "Answer\x85: ", "Answer\u2028:", "Answer\u200b: ", "Answer\u180e: ",
                "**Answer:** ", "Answer:  \n", "Answer:: ", "Ａｎｓｗｅｒ: ", "answer :  "]


def math_dapo_case(g, want):
    if g.p(0.55):
        truth = str(g.randint(0, 999)) if g.p(0.8) else plain_number(g)  # AIME-like integers
    elif g.p(0.15):
        truth = f"\\frac{{{g.randint(1, 9)}}}{{{g.randint(2, 9)}}}"
    elif g.p(0.98):
        truth = latex_value(g)
    else:
        truth = g.choice(["", " ", "dollars", "[INVALID]", "\\boxed{5}"])
    options = {"strict_box_verify": g.p(0.5)} if g.p(0.5) else {}
    strict = options.get("strict_box_verify", False)
    said = dapo_variant(g, truth) if want or g.p(0.3) else latex_value(g)
    line = g.choice(ANSWER_LINES)
    r = g.random()
    if strict or r < 0.25:
        said_box = truth if want and (strict or g.p(0.5)) else said
        answer = g.choice(["", "So ", "$", "Hence "]) + f"\\boxed{{{said_box}}}" + \
            g.choice(["", "$", ".", "$.", " ", "\n", "}"])
        if g.p(0.3):
            answer = f"\\boxed{{{latex_value(g)}}} then " + answer
    elif r < 0.8:
        answer = line + said + g.choice(["", "", "$", ".", "\n", " dollars", "\n\n", " \n"])
    elif r < 0.9:
        answer = f"{line}{latex_value(g)}\n" + g.sentence() + f"\n{line}{said}"
    else:
        answer = f"{line}{said}\n\\boxed{{{truth if g.p(0.5) else latex_value(g)}}}"
    if g.p(0.05):
        answer = g.choice(["Answer: [INVALID]\n\\boxed{" + truth + "}", "Answer:\n\n",
                           "Answer:   \n", "\\boxed{}", "Answer: $" + said + "$ and $2$"])
    text = g.prefix() + answer
    r = g.random()
    if r < 0.1:
        text = g.across(answer, 300)
    elif r < 0.18 and "\\boxed{" in answer:
        text = g.prefix() + g.across(answer, 100)
    return g.mutate(text), truth, options


# ---- search_r1_qa_em ---------------------------------------------------------------------------

ENTITIES = ["Paris", "the Eiffel Tower", "An Apple a Day", "New York City", "Ōsaka", "ΟΔΟΣ",
            "ΟΔΥΣΣΕΥΣ", "Σίσυφος", "İzmir", "Jean-Paul Sartre", "1984", "a tale of two cities",
            "Straße", "北京", "R&B", "U.S.A.", "the The", "The Beatles", "Kelvin", "Ångström",
            "Zürich", "José Martí", "ǅemal Bijedić", "Ꭰ", "Ⅷ", "Mr. Smith's", "21st century",
            "a", "an", "the", "Anne", "Theodore", "C3PO", "two-thirds", "café au lait",
            "Tōkyō", "Москва", "Ελλάδα", "naïve art", "42", "½", "²", "🙂 smile"]


def qa_variant(g, entity):
    """`entity` as a model might answer it; most forms normalise to the same text."""
    r = g.random()
    if r < 0.15:
        return entity
    if r < 0.27:
        return entity.lower()
    if r < 0.37:
        return entity.upper()
    if r < 0.44:
        return entity.title()
    if r < 0.54:
        return g.choice(["the ", "The ", "a ", "An ", "THE "]) + entity
    if r < 0.64:
        return entity + g.choice([".", "!", "?", ",", "'", "\"", " .", "...", ")"])
    if r < 0.74:
        return g.choice(SPACES + [" ", "  ", "\n"]) + entity + g.choice(SPACES + [" ", "\n"])
    if r < 0.8:
        return entity.replace(" ", g.choice(SPACES + ["  ", " - ", "_"]))
    if r < 0.85:
        return entity.replace("K", "\u212a").replace("Å", "\u212b").replace("s", "\u017f")
    if r < 0.9:
        return entity + g.choice(MARKS)
    if r < 0.95:
        return g.choice(["a", "the", "an", "ΑΣ"]) \
            + g.choice(MARKS + NOT_SPACES + ["_", "²", "·"] + g.u15) + " " + entity
    return g.sprinkle(entity)


def search_r1_case(g, want):
    targets = [g.choice(ENTITIES) for _ in range(g.choice([1, 1, 2, 3]))]
    main = g.choice(targets)
    said = qa_variant(g, main) if want or g.p(0.3) else g.choice(ENTITIES)
    r = g.random()
    if r < 0.5:
        tags = f"<answer>{said}</answer>"
    elif r < 0.6:
        tags = f"<answer>{g.choice(ENTITIES)}</answer> wait. <answer>{said}</answer>"
    elif r < 0.66:
        tags = f"<answer>{said}"  # unclosed
    elif r < 0.72:
        tags = f"<answer>{said}</answer>" + "</answer>" * g.randint(8, 12)
    elif r < 0.78:
        tags = "<answer>" * g.randint(2, 12) + f"{said}</answer>"
    elif r < 0.83:
        tags = f"<answer>\n{said}\n</answer>"
    elif r < 0.87:
        tags = f"<Answer>{said}</Answer>" if g.p(0.5) else f"<answer >{said}</answer>"
    elif r < 0.92:
        tags = f"<answer>{said}</answer>" + f" <answer>{g.choice(ENTITIES)}</answer>" * \
            g.randint(9, 11) + f" <answer>{said}</answer>"
    else:
        tags = f"<answer>{said}</answer>" + g.choice(["<answer>", "</answer>", " </answer"])
    think = g.choice(["", "<think>" + g.sentence() + "</think>\n",
                      "<search>" + g.sentence(2, 5) + "</search>\n<information>"
                      + g.sentence(5, 20) + "</information>\n"])
    text = g.mutate(g.prefix() + think + tags) if g.p(0.5) else think + tags
    if g.p(0.15):
        truth = {"target": main}
    else:
        if g.p(0.1):
            targets.append(qa_variant(g, main))  # a second spelling of the same answer
        g.shuffle(targets)
        truth = {"target": targets}
    options = {}
    if g.p(0.55):
        options = {"format_score": g.choice([0.0, 0.1, 0.2, 0]),
                   "score": g.choice([1.0, 2.0, 0.5, 1])}
        if g.p(0.3):
            del options[g.choice(["format_score", "score"])]
    return text, truth, options


MAKERS = {"gsm8k": gsm8k_case, "math": math_case, "math_dapo": math_dapo_case,
          "search_r1_qa_em": search_r1_case}


def generate(functions, seed, per_function, reasoning_chars=0, unicode_15=False):
    """Cases with verl's results, `per_function` of each function in turn. About half of each
    function's cases are drawn until verl scores them correct, the rest until it does not.
    `reasoning_chars` > 0 puts about that much reasoning text before each output (the
    benchmark's realistic lengths)."""
    g = Gen(seed, unicode_15)
    for fn, make in MAKERS.items():
        for _ in range(per_function):
            want = g.p(CORRECT_SHARE)
            for _ in range(ATTEMPTS):
                solution, truth, options = make(g, want)
                if reasoning_chars:
                    solution = g.reasoning(reasoning_chars) + solution
                case = {"fn": fn, "data_source": g.choice(DATA_SOURCES[fn]),
                        "solution_str": solution, "ground_truth": truth, "options": options}
                case["expected"] = expected_of(functions[fn], case)
                if is_correct(fn, options, case["expected"]) == want:
                    break
            yield case


# ---- --check: the cases through a running Arbiter -----------------------------------------------

def item_of(case):
    """The /v1/score item: data_source alone for verl's defaults, else the reward named with
    its options in extra_info."""
    item = {"solution_str": case["solution_str"], "ground_truth": case["ground_truth"]}
    if case["options"]:
        item.update(reward=case["fn"], extra_info=case["options"])
    else:
        item["data_source"] = case["data_source"]
    return item


def got_of(fn, result):
    """A /v1/score result in the corpus's `expected` form (math_dapo's extra merged in)."""
    got = {"score": result.get("score")}
    extra = result.get("extra")
    if fn == "math_dapo":
        got.update(extra if isinstance(extra, dict) else {"extra": extra})
    elif extra not in (None, {}):
        got["extra"] = extra
    if result.get("status", "ok") != "ok":
        got["status"] = result.get("status")
        got["error"] = result.get("error")
    return got


def post(url, items, timeout):
    """(results, None), or (None, why) when the server did not answer 200 with a result per
    item."""
    body = json.dumps({"items": items}, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            results = json.load(reply).get("results")
    except urllib.error.HTTPError as e:
        return None, f"HTTP {e.code}: {e.read()[:2000].decode('utf-8', 'replace')}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        return None, f"{type(e).__name__}: {e}"
    if not isinstance(results, list) or len(results) != len(items):
        return None, f"{len(results or [])} results for {len(items)} items"
    return results, None


def check(url, cases, batch=256, timeout=120.0):
    """Scores `cases` through URL/v1/score in batches; prints the first 20 mismatches in full
    and the totals per function. Returns the number of mismatches."""
    endpoint = url.rstrip("/") + "/v1/score"
    totals = {fn: 0 for fn in MAKERS}
    bad = {fn: 0 for fn in MAKERS}
    shown = 0

    def score(chunk):
        nonlocal shown
        results, why = post(endpoint, [item_of(c) for c in chunk], timeout)
        for i, c in enumerate(chunk):
            totals[c["fn"]] += 1
            got = got_of(c["fn"], results[i]) if results else {"request": why}
            if got != c["expected"]:
                bad[c["fn"]] += 1
                if shown < 20:
                    shown += 1
                    print(f"MISMATCH {c['fn']}: {json.dumps(c, ensure_ascii=False)}\n"
                          f"  got {json.dumps(got, ensure_ascii=False)}")
        if results is None and shown < 20:
            shown += 1
            print(f"batch of {len(chunk)} failed: {why}")

    chunk = []
    for case in cases:
        chunk.append(case)
        if len(chunk) == batch:
            score(chunk)
            chunk = []
    if chunk:
        score(chunk)
    for fn in MAKERS:
        print(f"{fn}: {totals[fn]} cases, {bad[fn]} mismatches")
    total_bad = sum(bad.values())
    print(f"total: {sum(totals.values())} cases, {total_bad} mismatches")
    return total_bad


# ---- summary -----------------------------------------------------------------------------------

def summarize(cases, out=sys.stderr):
    """Per function: cases, how many score correct, the scores, and what the outputs hold."""
    stats = {}
    for c in cases:
        s = stats.setdefault(c["fn"], {"cases": 0, "correct": 0, "options": 0, "scores": {},
                                       "over_300": 0, "non_ascii": 0, "chars": 0})
        s["cases"] += 1
        s["correct"] += is_correct(c["fn"], c["options"], c["expected"])
        s["options"] += bool(c["options"])
        score = c["expected"]["score"]
        s["scores"][score] = s["scores"].get(score, 0) + 1
        s["over_300"] += len(c["solution_str"]) > 300
        s["non_ascii"] += not c["solution_str"].isascii()
        s["chars"] += len(c["solution_str"])
    for fn, s in stats.items():
        n = s["cases"]
        scores = ", ".join(f"{k:g}: {v}" for k, v in sorted(s["scores"].items()))
        print(f"{fn:16} {n} cases, {s['correct']} correct ({100 * s['correct'] / n:.0f} %), "
              f"{s['options']} with options, {s['over_300']} over 300 code points, "
              f"{s['non_ascii']} non-ASCII, {s['chars'] / n:.0f} code points on average; "
              f"scores {{{scores}}}", file=out)
    return stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--per-function", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--verl-dir", help="verl's package folder (default: the installed one)")
    parser.add_argument("--unicode-15", action="store_true",
                        help="also use characters Unicode 15.0 assigned (see above)")
    parser.add_argument("--check", metavar="URL",
                        help="score the generated cases through a running Arbiter at URL "
                             "instead of writing them; exit status 1 on any mismatch")
    parser.add_argument("--batch", type=int, default=256, help="items per request for --check")
    args = parser.parse_args()
    functions = load_functions(verl_dir(args.verl_dir))
    cases = generate(functions, args.seed, args.per_function, unicode_15=args.unicode_15)
    if args.check:
        sys.exit(1 if check(args.check, cases, args.batch) else 0)
    written = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8", newline="\n") as f:
        for case in cases:
            f.write(json.dumps(case, ensure_ascii=False, sort_keys=True,
                               separators=(",", ":")) + "\n")
            written.append(case)
    summarize(written)
    print(f"wrote {len(written)} cases, {args.out.stat().st_size} bytes, to {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
