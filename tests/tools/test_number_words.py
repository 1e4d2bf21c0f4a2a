#!/usr/bin/env python3
"""`ffn demo number-words --all` (the translation demo's data) against the
num2words package on every number 0..999,999: French as num2words writes it
(the traditional spelling: "soixante et onze", "quatre-vingts", "deux
cents", "deux cent mille"), English as num2words writes it without its
British "and" and commas ("three hundred seventy-one").

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
    out = subprocess.run([ffn, "demo", "number-words", "--all"], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert len(lines) == 1000000, len(lines)
    bad = []
    for n, line in enumerate(lines):
        num, en, fr = line.split("\t")
        assert int(num) == n, line
        if en != english(n) or fr != num2words(n, lang="fr"):
            bad.append((n, en, english(n), fr, num2words(n, lang="fr")))
    for b in bad[:10]:
        print("differs:", b)
    assert not bad, f"{len(bad)} numbers differ from num2words"
    # Refusals: one line, exit 2.
    for args, needle in ((["1000000"], "outside 0..999999"), ([], "give numbers"), (["-1"], "outside 0..999999")):
        r = subprocess.run([ffn, "demo", "number-words", *args], capture_output=True, text=True)
        assert r.returncode == 2 and needle in r.stderr and r.stderr.count("\n") == 1, (args, r.returncode, r.stderr)
    print("1,000,000 numbers: English and French equal num2words'")


if __name__ == "__main__":
    main()
