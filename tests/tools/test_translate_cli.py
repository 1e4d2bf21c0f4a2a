#!/usr/bin/env python3
"""`ffn translate` against what transformers made of the same inputs
(tests/data/marian_text/cases.json and tests/data/marian/cases.json, written
by scripts/make_marian_text_golden.py and make_marian_golden.py): text in and
text out, --ids, positional inputs, --input-file (a file and standard input),
--output, --batch (results in input order), --dtype int8, sampling under a seed
whatever --batch; bad input gets one
line, exit 2 and no output file. Standard library only.

    python3 tests/tools/test_translate_cli.py FFN_BINARY DATA_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

FFN, DATA = sys.argv[1], sys.argv[2]
TEXT, IDS = os.path.join(DATA, "marian_text"), os.path.join(DATA, "marian", "swish_shared")
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def ffn(*args, stdin=None):
    return subprocess.run([FFN, "translate", *args], capture_output=True, text=True, input=stdin)


def refused(r, words, path=None):
    return (r.returncode == 2 and r.stderr.count("\n") == 1 and all(w in r.stderr for w in words)
            and (path is None or not os.path.exists(path)))


def main():
    text = json.load(open(os.path.join(TEXT, "cases.json"), encoding="utf-8"))
    ids = json.load(open(os.path.join(DATA, "marian", "cases.json")))["models"]["swish_shared"]
    inputs = text["translated_texts"]
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda n: os.path.join(tmp, n)  # noqa: E731
        r = ffn("--model", TEXT, "--beams", "1", *inputs)
        check(r.returncode == 0 and r.stdout.split("\n")[:-1] == text["greedy_text"],
              f"greedy text out equals transformers' batch_decode ({r.stderr.strip()})")
        # Line-by-line inputs: the texts without a newline of their own.
        one_line = [i for i, t in enumerate(inputs) if "\n" not in t]
        with open(p("in.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(inputs[i] for i in one_line) + "\n")
        r = ffn("--model", TEXT, "--input-file", p("in.txt"), "--batch", "3", "--output", p("out.txt"))
        got = open(p("out.txt"), encoding="utf-8").read().split("\n")[:-1] if r.returncode == 0 else None
        check(got == [text["beam_text"][i] for i in one_line],
              f"beam (the generation config's 3) via --input-file, --batch 3, --output")
        r = ffn("--model", TEXT, "--input-file", "-", "--beams", "1",
                stdin="\n".join(inputs[i] for i in one_line) + "\n")
        check(r.returncode == 0 and r.stdout.split("\n")[:-1] == [text["greedy_text"][i] for i in one_line],
              "standard input")
        # Sampling: input i draws from its own stream whatever --batch; another seed, other tokens.
        sample = lambda *more: ffn("--model", TEXT, "--temperature", "1.2", "--top-k", "40", "--seed", "5",  # noqa: E731
                                   "--max-new-tokens", "10", *inputs[:4], *more)
        a, b, c = sample(), sample("--batch", "1"), sample("--seed", "6")
        check(a.returncode == 0 and a.stdout == b.stdout and a.stdout != c.stdout and a.stdout.count("\n") == 4,
              f"--temperature: the same tokens in any --batch under one seed, others under another ({a.stderr.strip()})")
        check(refused(ffn("--model", TEXT, "--temperature", "-1", "x"), ["--temperature: expected a finite value >= 0"]),
              "a negative temperature is refused")
        src = "\n".join(" ".join(map(str, s)) for s in ids["sources"]) + "\n"
        r = ffn("--model", IDS, "--ids", "--input-file", "-", "--beams", "1", stdin=src)
        want = "\n".join(" ".join(map(str, g)) for g in ids["greedy"]) + "\n"
        check(r.returncode == 0 and r.stdout == want, "--ids greedy equals transformers' generate")
        r = ffn("--model", IDS, "--ids", "--input-file", "-", "--batch", "2", stdin=src)
        want = "\n".join(" ".join(map(str, g)) for g in ids["beam"]) + "\n"
        check(r.returncode == 0 and r.stdout == want, "--ids beam, --batch 2: results in input order")
        r = ffn("--model", TEXT, "--dtype", "int8", *inputs[:3])
        check(r.returncode == 0 and len(r.stdout.split("\n")) == 4, f"--dtype int8 runs ({r.stderr.strip()})")

        r = ffn("--model", IDS, "--ids", "5 6 x", "--output", p("never.txt"))
        check(refused(r, ["input 1: 'x' is not a token id"], p("never.txt")), f"a bad id: {r.stderr.strip()}")
        with open(p("bad.txt"), "w") as f:
            f.write("5 6 0\n5 61 0\n")
        r = ffn("--model", IDS, "--ids", "--input-file", p("bad.txt"), "--output", p("never.txt"))
        check(refused(r, ["bad.txt: line 2: token id 61 is outside the vocabulary of 61"], p("never.txt")),
              f"an id out of range, named by line: {r.stderr.strip()}")
        r = ffn("--model", IDS, "--ids", "5 0", "--max-new-tokens", "65", "--output", p("never.txt"))
        check(refused(r, ["--max-new-tokens 65 is past the model's 64 positions"], p("never.txt")),
              f"--max-new-tokens past the positions: {r.stderr.strip()}")
        r = ffn("--model", IDS, "hello")
        check(refused(r, ["source.spm: missing", "--ids"]), f"text for a model without a tokenizer: {r.stderr.strip()}")
        r = ffn("--model", p("nothing"), "--ids", "5 0")
        check(refused(r, ["not a directory"]), f"a missing model: {r.stderr.strip()}")
        r = ffn("--model", TEXT, "x", "--output", p("missing/out.txt"))
        check(refused(r, ["missing", "does not exist"]), f"output in a missing directory: {r.stderr.strip()}")
        r = ffn("--model", TEXT, "--input-file", p("in.txt"), "--output", p("in.txt"))
        check(refused(r, ["--output"]) and open(p("in.txt"), encoding="utf-8").read().startswith(inputs[0]),
              f"--output naming the input file: {r.stderr.strip()}")
        r = ffn("--model", TEXT)
        check(refused(r, ["--input-file"]), f"no input: {r.stderr.strip()}")
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
