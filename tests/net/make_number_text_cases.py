#!/usr/bin/env python3
"""Generates tests/net/fixtures/number_text_cases.json: for JSON number tokens, the text
Python's `str(json.loads(token))` gives, which net/number_text.cpp must reproduce (a number
given as a ground truth or a label becomes that text).

Each case is [token, expected]: `expected` is null when json.loads refuses the token or reads
something other than a number. Tokens: hand-picked edge cases (ints of any length, "-0",
1E400, the double range's ends, the repr thresholds 1e-4 and 1e16), repr() of doubles drawn
from random bit patterns, random decimal tokens with up to 25 significant digits (so rounding
matters) and random exponents, and ints of up to 40 digits.

Deterministic (fixed seed, stdlib only). Run from anywhere:
    python3 tests/net/make_number_text_cases.py
"""

import json
import math
import random
import struct
import sys
from pathlib import Path

SEED = 20251015
OUT = Path(__file__).resolve().parent / "fixtures" / "number_text_cases.json"

HAND_PICKED = [
    # ints: every digit kept, "-0" is 0
    "0", "-0", "1", "-1", "72", "007", "9007199254740993", "18446744073709551616",
    "123456789012345678901234567890", "-98765432109876543210987654321",
    # floats: repr
    "1.0", "-0.0", "0.0", "100.0", "1e2", "1E2", "1e+2", "1e05", "0.1", "0.30000000000000004",
    "1.5", "-2.25", "3.14159", "72.0", "0.5e1",
    # repr's switch to scientific notation: decimal exponent < -4 or >= 16
    "0.0001", "0.00001", "1e-4", "1e-5", "0.000123", "1.0e-4", "9.999e-5",
    "1e15", "1e16", "9999999999999998.0", "1e17", "12345678901234567e0",
    "123456789012345678.0", "1.5e300", "1e22", "1e23",
    # the ends of the double range
    "1.7976931348623157e308", "1.7976931348623158e308", "1.8e308", "1E400", "-1e400",
    "1e99999999999999999999", "2.2250738585072014e-308", "4.9406564584124654e-324",
    "5e-324", "3e-324", "2.5e-324", "2e-324", "1e-400", "-1e-400", "0e999999999999",
    # long mantissas: correct rounding
    "1.00000000000000000000000000001", "9007199254740993.0", "0.1000000000000000055511151231257827",
    # surrounding whitespace (simdjson's raw tokens carry what follows them)
    " 7 ", "1.5\n", "\t-3\r",
    # not JSON numbers
    "", "-", "+1", "01", "1.", ".5", "1e", "1e+", "- 1", "1_0", "0x10", "NaN", "Infinity",
    "-Infinity", "1.5.2", "1e5e5", "true", "null", "\"1\"",
]


def refuse_constant(name):
    raise ValueError(f"{name} is not JSON")  # json.loads's NaN/Infinity extension


def expected(token):
    try:
        value = json.loads(token, parse_constant=refuse_constant)
    except ValueError:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return str(value)


def random_tokens(rng):
    tokens = []
    for _ in range(500):
        x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(x):
            tokens.append(repr(x))
    for _ in range(400):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
        digits = digits.lstrip("0") or "0"
        fraction = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 20)))
        exponent = rng.randint(-340, 320)
        sign = rng.choice(["", "-"])
        tokens.append(f"{sign}{digits}.{fraction}e{exponent}")
        tokens.append(f"{digits}E{rng.choice(['+', '-', ''])}{abs(exponent)}")
    for _ in range(150):
        x = rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-25, 25)
        tokens += [repr(x), "%.17g" % x, "%.5e" % x, "%.3f" % x]
    for _ in range(150):
        digits = str(rng.randint(1, 9)) + "".join(
            rng.choice("0123456789") for _ in range(rng.randint(0, 39)))
        tokens.append(rng.choice(["", "-"]) + digits)
    return tokens


def main():
    rng = random.Random(SEED)
    tokens = HAND_PICKED + random_tokens(rng)
    cases = [[t, expected(t)] for t in tokens]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write('{"python": %s, "cases": [\n' % json.dumps(sys.version.split()[0]))
        f.write(",\n".join(json.dumps(c) for c in cases))
        f.write("\n]}\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
