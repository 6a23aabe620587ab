#!/usr/bin/env python3
"""The golden corpus of verl's rule rewards: generated model outputs scored by verl 0.9.1's own
functions (verl/utils/reward_score/{gsm8k,math_reward,math_dapo,search_r1_like_qa_em}.py).

    pip install verl==0.9.1 --no-deps        # the oracle; `import verl` needs ray, so the four
                                             # modules are loaded by path (they import only re)
    python3 tests/backends/make_rule_reward_corpus.py            # the committed fixture
    python3 tests/backends/make_rule_reward_corpus.py --seed 7 --per-function 100000 \\
        --out /tmp/fresh.jsonl                                   # an offline run; then
    ARBITER_RULE_CORPUS=/tmp/fresh.jsonl build/tests/backends_tests --gtest_filter='VerlRules.*'
    python3 tests/backends/make_rule_reward_corpus.py --check http://127.0.0.1:8080 --seed 7

Each JSON line: fn (the Arbiter reward), data_source (a verl name that dispatches to fn),
solution_str, ground_truth (as verl receives it), options (keyword arguments of the function,
which Arbiter takes in extra_info), expected (score; math_dapo also acc and pred).

The outputs mix correct, wrong and malformed answers: several boxes, nested braces, \\frac,
\\dfrac and shorthand fractions, units, "Answer:" lines in any case and spacing, "####"
markers, <answer> tags, long texts cut at 300 characters, and Unicode that Python's str
treats its own way (final sigma, U+0130, superscripts, Arabic-Indic digits, U+001C..U+001F
and other separators). Deterministic for a given --seed.
"""
import argparse
import contextlib
import importlib.util
import io
import json
import random
import sys
import urllib.request
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parent / "fixtures" / "rule_reward_cases.jsonl"
SEED = 20261123

DATA_SOURCES = {
    "gsm8k": ["openai/gsm8k"],
    "math": ["lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"],
    "math_dapo": ["math_dapo", "math", "math_dapo_reasoning", "aime2024", "aime2025"],
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
    functions = {}
    for fn, module in MODULES.items():
        path = root / "utils" / "reward_score" / f"{module}.py"
        spec = importlib.util.spec_from_file_location(f"verl_rule_{module}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        functions[fn] = mod.compute_score
    return functions


def expected_of(fn, function, case):
    # search_r1 prints at random and math_reward prints the exceptions it swallows.
    with contextlib.redirect_stdout(io.StringIO()):
        result = function(case["solution_str"], case["ground_truth"], **case["options"])
    if isinstance(result, dict):
        return {"score": float(result["score"]), "acc": bool(result["acc"]),
                "pred": result["pred"]}
    return {"score": float(result)}


# ---- building blocks ---------------------------------------------------------------------

WORDS = ["the", "answer", "is", "so", "we", "get", "total", "a", "an", "of", "Step", "Thus",
         "therefore", "Let", "x", "be", "number", "apples", "cost", "café", "naïve", "ΟΔΟΣ",
         "İstanbul", "答案", "数学", "🙂", "Ω", "straße", "ﬁne", "ǅ", "Σ"]
ODD = ["\u00a0", "\u2003", "\u3000", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u2028", "\t",
       "\n", "\r", "\u200b", "\u0301", "²", "³", "¹", "٣", "٤", "１", "２", "①", "½", "\ufeff"]
UNITS = ["", "\\text{ cm}", "\\text{ dollars}", " dollars", "\\%", "%", "^\\circ", "^{\\circ}",
         " units", "\\text{m}", "\\mbox{ inches}", " mph", "\\text{and}", "\\;"]


def number(rng):
    kind = rng.random()
    if kind < 0.4:
        return str(rng.randint(0, 999))
    if kind < 0.55:
        return f"{rng.randint(1, 99)},{rng.randint(0, 999):03d}"
    if kind < 0.7:
        return f"{rng.choice(['', '-'])}{rng.randint(0, 50)}.{rng.randint(0, 99)}"
    if kind < 0.8:
        return "-" + str(rng.randint(1, 500))
    if kind < 0.9:
        return rng.choice(["0.5", ".5", "0", "-0", "007", "1e3", "1_000", "3.", "."])
    return "".join(rng.choice("0123456789²٣１") for _ in range(rng.randint(1, 4)))


def latex(rng, depth=0):
    kind = rng.random()
    n = lambda: str(rng.randint(1, 20))  # noqa: E731
    if kind < 0.2:
        return number(rng)
    if kind < 0.35:
        return f"\\{rng.choice(['frac', 'dfrac', 'tfrac'])}{{{n()}}}{{{n()}}}"
    if kind < 0.45:
        return f"\\frac{rng.choice(['12', '1b', 'ab', '1{2}', '3', ''])}"
    if kind < 0.52:
        return f"{n()}/{n()}"
    if kind < 0.6:
        return f"\\sqrt{rng.choice(['2', '{3}', 'x', ''])}"
    if kind < 0.66:
        return f"{rng.choice(['x', 'k', 'ab', 'y='])} = {number(rng)}"
    if kind < 0.72:
        return f"\\left( {n()}, {n()} \\right)"
    if kind < 0.78:
        return f"{number(rng)}{rng.choice(UNITS)}"
    if kind < 0.83 and depth < 3:
        return f"{{{latex(rng, depth + 1)}}}"
    if kind < 0.87:
        return f"\\text{{{rng.choice(['yes', 'no', ' cm', 'Paris'])}}}"
    if kind < 0.9:
        return f"\\textbf{{{number(rng)}}}"
    if kind < 0.93:
        return f"\\overline{{{n()}}}"
    if kind < 0.96:
        return f"${number(rng)}$"
    return rng.choice(["\\pi", "2\\pi", "\\infty", "\\{1,2\\}", "a \\text{ and } b", "\\!1"])


def filler(rng, words=(0, 30)):
    out = []
    for _ in range(rng.randint(*words)):
        out.append(rng.choice(WORDS) if rng.random() > 0.1 else rng.choice(ODD))
        if rng.random() < 0.15:
            out.append(number(rng))
    return " ".join(out)


def mutate(rng, text):
    """Truncation, odd characters, repetition: what sampled outputs do."""
    r = rng.random()
    if r < 0.08 and text:
        return text[:rng.randint(0, len(text))]
    if r < 0.14:
        i = rng.randint(0, len(text))
        return text[:i] + rng.choice(ODD) + text[i:]
    if r < 0.18:
        return text * rng.randint(2, 4)
    if r < 0.22:
        return filler(rng, (60, 120)) + text  # long: the answer may survive the 300 cut or not
    return text


def surface(rng, answer):
    """The same answer written another way, or a different one."""
    r = rng.random()
    if r < 0.45:
        return answer
    if r < 0.6:
        return answer.replace("dfrac", "frac").replace(" ", "")
    if r < 0.7:
        return " " + answer + rng.choice(UNITS)
    if r < 0.8:
        return answer.replace(",", "")
    return latex(rng)


# ---- per function --------------------------------------------------------------------------

def gsm8k_case(rng):
    answer = number(rng)
    marker = rng.choice(["#### "] * 6 + ["####", "#### $", "####  ", "### "])
    body = filler(rng) + f" {marker}{answer}" + rng.choice(["", ".", " ", "\n", " dollars"])
    if rng.random() < 0.1:
        body += f" #### {number(rng)}"
    solution = mutate(rng, body)
    truth = answer.replace(",", "") if rng.random() < 0.6 else number(rng)
    options = {}
    if rng.random() < 0.4:
        options["method"] = rng.choice(["strict", "flexible"])
        if rng.random() < 0.5:
            options["format_score"] = rng.choice([0.0, 0.1, 0.5, -1.0])
        if rng.random() < 0.5:
            options["score"] = rng.choice([1.0, 2.0, 0.25])
    return solution, truth, options


def boxed(rng, content):
    return rng.choice([f"\\boxed{{{content}}}", f"\\boxed{{{content}}}", f"\\fbox{{{content}}}",
                       f"\\boxed {content}$", f"\\boxed{{{content}", f"$\\boxed{{{content}}}$"])


def math_case(rng):
    answer = latex(rng)
    parts = [filler(rng)]
    for _ in range(rng.randint(0, 2)):
        parts.append(boxed(rng, latex(rng)))
    parts.append(boxed(rng, answer))
    if rng.random() < 0.2:
        parts.append(filler(rng, (0, 8)))
    solution = mutate(rng, " ".join(parts))
    return solution, surface(rng, answer), {}


def math_dapo_case(rng):
    answer = latex(rng)
    parts = [filler(rng)]
    r = rng.random()
    line = rng.choice(["Answer: ", "answer:", "ANSWER :", "Final Answer:\n", "Answer\x1c: ",
                       "Answer:\u3000", "The answer is: ", "Answer : $"])
    if r < 0.55:
        parts.append(line + answer + rng.choice(["", "$", ".", "\n", " dollars"]))
    elif r < 0.85:
        parts.append(boxed(rng, answer))
    else:
        parts.append(line + latex(rng))
        parts.append(boxed(rng, answer))
    if rng.random() < 0.15:
        parts.append(filler(rng, (0, 6)))
    solution = mutate(rng, "\n".join(parts))
    options = {"strict_box_verify": True} if rng.random() < 0.2 else {}
    return solution, surface(rng, answer), options


ENTITIES = ["Paris", "the Eiffel Tower", "An Apple", "New York City", "Ōsaka", "ΟΔΥΣΣΕΥΣ",
            "İzmir", "Jean-Paul Sartre", "1984", "a tale of two cities", "Straße", "北京", "R&B",
            "U.S.A.", "the The", ""]


def search_r1_case(rng):
    answer = rng.choice(ENTITIES)
    said = rng.choice([answer, answer.lower(), answer.upper(), f" {answer}! ", f"the {answer}",
                       rng.choice(ENTITIES), f"{answer}\u00a0", f"\x1c{answer}\x1f"])
    parts = [filler(rng, (0, 12))]
    r = rng.random()
    if r < 0.6:
        parts.append(f"<answer>{said}</answer>")
    elif r < 0.7:
        parts.append(f"<answer>{rng.choice(ENTITIES)}</answer><answer>{said}</answer>")
    elif r < 0.78:
        parts.append(f"<answer>{said}")
    elif r < 0.86:
        parts.append(f"<answer>{said}</answer>" + "</answer>" * rng.randint(8, 12))
    elif r < 0.92:
        parts.append("<answer>" * rng.randint(1, 12) + f"{said}</answer>")
    else:
        parts.append(f"<answer>\n{said}\n</answer>")
    solution = mutate(rng, " ".join(parts))
    targets = [answer] + [rng.choice(ENTITIES) for _ in range(rng.randint(0, 2))]
    rng.shuffle(targets)
    truth = {"target": targets if rng.random() < 0.8 else targets[0]}
    options = {}
    if rng.random() < 0.3:
        options = {"format_score": rng.choice([0.0, 0.1, 0.2]), "score": rng.choice([1.0, 2.0])}
    return solution, truth, options


MAKERS = {"gsm8k": gsm8k_case, "math": math_case, "math_dapo": math_dapo_case,
          "search_r1_qa_em": search_r1_case}


def reasoning(rng, chars):
    """About `chars` characters of step-by-step text, as a model writes before its answer."""
    out, n = [], 0
    target = rng.randint(chars // 2, chars * 3 // 2)
    while n < target:
        step = f"Step {len(out) + 1}: {filler(rng, (8, 24))}.\n"
        out.append(step)
        n += len(step)
    return "".join(out)


def generate(functions, seed, per_function, reasoning_chars=0):
    """Cases with verl's results; `reasoning_chars` > 0 puts about that much reasoning text
    before each output (the benchmark's realistic lengths)."""
    rng = random.Random(seed)
    for fn, make in MAKERS.items():
        for _ in range(per_function):
            solution, truth, options = make(rng)
            if reasoning_chars:
                solution = reasoning(rng, reasoning_chars) + solution
            case = {"fn": fn, "data_source": rng.choice(DATA_SOURCES[fn]),
                    "solution_str": solution, "ground_truth": truth, "options": options}
            case["expected"] = expected_of(fn, functions[fn], case)
            yield case


def check(url, cases, batch=256):
    """Scores `cases` through URL/v1/score; returns the mismatches per function."""
    totals, bad, shown = {}, {}, 0
    cases = list(cases)
    for start in range(0, len(cases), batch):
        chunk = cases[start:start + batch]
        items = []
        for c in chunk:
            item = {"solution_str": c["solution_str"], "ground_truth": c["ground_truth"]}
            if c["options"]:
                item.update(reward=c["fn"], extra_info=c["options"])
            else:
                item["data_source"] = c["data_source"]
            items.append(item)
        request = urllib.request.Request(
            url.rstrip("/") + "/v1/score", data=json.dumps({"items": items}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as reply:
            results = json.load(reply)["results"]
        for c, r in zip(chunk, results):
            got = {"score": r["score"], **(r.get("extra") or {})}
            totals[c["fn"]] = totals.get(c["fn"], 0) + 1
            if got != c["expected"]:
                bad[c["fn"]] = bad.get(c["fn"], 0) + 1
                if shown < 20:
                    shown += 1
                    print("MISMATCH", json.dumps(c, ensure_ascii=False), "got", got)
    for fn in MAKERS:
        print(f"{fn}: {totals.get(fn, 0)} cases, {bad.get(fn, 0)} mismatches")
    return sum(bad.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--per-function", type=int, default=1500)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--verl-dir", help="verl's package folder (default: the installed one)")
    parser.add_argument("--check", metavar="URL",
                        help="score the generated cases through a running Arbiter instead")
    args = parser.parse_args()
    functions = load_functions(verl_dir(args.verl_dir))
    cases = generate(functions, args.seed, args.per_function)
    if args.check:
        sys.exit(1 if check(args.check, cases) else 0)
    counts = {}
    with args.out.open("w", encoding="utf-8") as f:
        for case in cases:
            f.write(json.dumps(case, ensure_ascii=False, sort_keys=True) + "\n")
            key = (case["fn"], case["expected"]["score"])
            counts[key] = counts.get(key, 0) + 1
    for (fn, score), n in sorted(counts.items()):
        print(f"{fn:16} score {score:6}: {n}", file=sys.stderr)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
