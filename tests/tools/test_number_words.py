#!/usr/bin/env python3
"""`ffn demo number-words` (the translation demo's data) against the
num2words package: French as num2words writes it
(the traditional spelling: "soixante et onze", "quatre-vingts", "deux
cents", "deux cent mille"), English as num2words writes it without its
British "and" and commas ("three hundred seventy-one").

The numbers: every one below 2000, every multiple of 1000, every thousands
group with each of the endings where French changes form (0, 1, 11, 21, 71,
80, 81, 91, 100, 180, 200, 280, 999) and 20,000 random ones: every
three-digit group both as thousands and as the last group, and each rule
at both places (num2words takes ~0.1 ms a number; all 10^6 would take ~4
minutes here, ×3 under the sanitizers' runs).

Usage: test_number_words.py FFN_BINARY  (skipped, exit 77, without num2words)
"""
import subprocess
import sys

try:
    from num2words import num2words
except ImportError:
    print(f"SKIPPED: {sys.executable} cannot import num2words (scripts/setup.sh installs it in .venv)")
    sys.exit(77)


def english(n):
    return num2words(n, lang="en").replace(",", "").replace(" and ", " ")


def main():
    ffn = sys.argv[1]
    import random
    rng = random.Random(0)
    numbers = set(range(2000)) | {1000 * t for t in range(1000)}
    numbers |= {1000 * t + e for t in range(1000) for e in (0, 1, 11, 21, 71, 80, 81, 91, 100, 180, 200, 280, 999)}
    numbers |= {rng.randrange(1000000) for _ in range(20000)}
    numbers = sorted(numbers)
    out = subprocess.run([ffn, "demo", "number-words", *map(str, numbers)], capture_output=True, text=True,
                         check=True).stdout
    lines = out.splitlines()
    assert len(lines) == len(numbers), len(lines)
    bad = []
    for n, line in zip(numbers, lines):
        num, en, fr = line.split("\t")
        assert int(num) == n, line
        if en != english(n) or fr != num2words(n, lang="fr"):
            bad.append((n, en, english(n), fr, num2words(n, lang="fr")))
    for b in bad[:10]:
        print("differs:", b)
    assert not bad, f"{len(bad)} numbers differ from num2words"
    total = subprocess.run([ffn, "demo", "number-words", "--all"], capture_output=True, text=True, check=True).stdout
    assert total.count("\n") == 1000000 and total.startswith("0\tzero\tzéro\n"), total[:40]
    # Refusals: one line, exit 2.
    for args, needle in ((["1000000"], "outside 0..999999"), ([], "give numbers"), (["-1"], "outside 0..999999")):
        r = subprocess.run([ffn, "demo", "number-words", *args], capture_output=True, text=True)
        assert r.returncode == 2 and needle in r.stderr and r.stderr.count("\n") == 1, (args, r.returncode, r.stderr)
    print(f"{len(numbers)} numbers: English and French equal num2words'")


if __name__ == "__main__":
    main()
