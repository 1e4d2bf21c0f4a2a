#!/usr/bin/python3
"""`ffn embed` on long inputs (issue 31, item 12), run by ctest:
  - --input-file - reads standard input, and its output is written window by
    window (16 x --batch texts) in input order while standard input is still
    open: a reader gets the first window before the last line is written;
  - windows change no result: the rows equal, bit for bit, those of one window
    over all texts (a text's embedding does not depend on its batch), and the
    printed lines are those rows as %.7g;
  - without a terminal, progress goes to stderr as plain lines at most every
    FFN_PROGRESS_SECONDS (default 5 s: nothing for a short job);
  - what a model directory leaves unsaid (here its pooling) is one note line;
  - --prompt-name / --prompt put a prompt before each text; an unknown name
    and --no-truncate on a long text exit 2 before any output; a cut text is
    counted in a note;
  - --compute bf16 (every projection's operands in bf16) stays within cosine
    0.9999 of fp32 on the 40 texts (measured worst 0.99997 on 2,000 texts,
    bench/results/2026-12-07-xeon-amx-bf16-embed.md; a projection computed
    wrongly is far below), with one window or two the same bits; --compute
    bf16 with --dtype int8 and an unknown --compute exit 2 before any output.

    /usr/bin/python3 tests/tools/test_embed_cli.py FFN_BINARY
Exits 77 (skipped) without numpy or without the model (scripts/setup.sh installs it).
"""
import json
import os
import subprocess
import time
import sys
import tempfile
import threading

try:
    import numpy as np
except ImportError:
    print("SKIPPED: no numpy in this Python")
    sys.exit(77)

FFN = sys.argv[1]
model = os.environ.get("FFN_MODEL_DIR", os.path.expanduser("~/.cache/ffn/all-MiniLM-L6-v2"))
if not os.path.isfile(os.path.join(model, "model.safetensors")):
    print(f"SKIPPED: no model at {model} (scripts/setup.sh installs all-MiniLM-L6-v2)")
    sys.exit(77)

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def lines_of(e):
    return [" ".join("%.7g" % v for v in row) for row in e]


def main(tmp):
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches".split()
    # 40 texts of 1..15 words in an order unlike their lengths: sorting by length
    # inside a window must not reorder the output.
    texts = [" ".join(words[(i * 7) % len(words):][: 1 + (i * 11) % 15]) or "x" for i in range(40)]
    src = os.path.join(tmp, "texts.txt")
    with open(src, "w") as f:
        f.write("\n".join(texts) + "\n")
    one, win = os.path.join(tmp, "one.npy"), os.path.join(tmp, "win.npy")
    r1 = subprocess.run([FFN, "embed", "--input-file", src, "--batch", "64", "--output", one], capture_output=True, text=True)
    t2 = time.monotonic()
    r2 = subprocess.run([FFN, "embed", "--input-file", src, "--batch", "2", "--output", win], capture_output=True, text=True)
    t2 = time.monotonic() - t2
    check(r1.returncode == 0 and r2.returncode == 0, f"embed --output ({r1.stderr.strip()} {r2.stderr.strip()})")
    e_one, e_win = np.load(one), np.load(win)
    check(e_one.shape == (40, 384) and np.array_equal(e_one, e_win),
          "2 windows (32 + 8 texts at --batch 2) give the bits of one window over all 40 texts")
    # --compute bf16: close to fp32, not equal to it, the same bits in windows.
    b_one, b_win = os.path.join(tmp, "b_one.npy"), os.path.join(tmp, "b_win.npy")
    rb1 = subprocess.run([FFN, "embed", "--input-file", src, "--compute", "bf16", "--batch", "64", "--output", b_one],
                         capture_output=True, text=True)
    rb2 = subprocess.run([FFN, "embed", "--input-file", src, "--compute", "bf16", "--batch", "2", "--output", b_win],
                         capture_output=True, text=True)
    if rb1.returncode == 0 and rb2.returncode == 0:
        b, bw = np.load(b_one), np.load(b_win)
        cos = (b * e_one).sum(1) / np.linalg.norm(b, axis=1) / np.linalg.norm(e_one, axis=1)
        print(f"  --compute bf16 against fp32: worst cosine {cos.min():.6f}")
        check(cos.min() >= 0.9999 and not np.array_equal(b, e_one) and np.array_equal(b, bw),
              f"--compute bf16: worst cosine {cos.min():.6f} against fp32 (>= 0.9999), windows the same bits")
    else:
        check(False, f"embed --compute bf16 ({rb1.stderr.strip()} {rb2.stderr.strip()})")
    for bad, want in ((["--compute", "bf16", "--dtype", "int8"], "--compute bf16"), (["--compute", "fp16"], "--compute")):
        out = os.path.join(tmp, "bad.npy")
        r = subprocess.run([FFN, "embed", "--input-file", src, *bad, "--output", out], capture_output=True, text=True)
        check(r.returncode == 2 and want in r.stderr and len(r.stderr.strip().splitlines()) == 1
              and not os.path.exists(out), f"{' '.join(bad)}: one line naming {want}, exit 2, no output ({r.stderr!r})")
    # "Short" is under FFN_PROGRESS_SECONDS' default of 5 s: on a loaded machine
    # the same job may take longer, and then its progress lines are right.
    if t2 < 4.0:
        check(r2.stderr == "", f"a short job without a terminal prints no progress: {r2.stderr!r}")
    else:
        print(f"not checked: a short job prints no progress (this one took {t2:.1f} s; the machine is loaded)")

    # Standard input, streamed: the first window (32 texts at --batch 2) comes
    # back while standard input is still open.
    p = subprocess.Popen([FFN, "embed", "--input-file", "-", "--batch", "2"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdin.write("\n".join(texts[:32]) + "\n")
    p.stdin.flush()
    got = []
    reader = threading.Thread(target=lambda: got.extend(p.stdout.readline() for _ in range(32)))
    reader.start()
    reader.join(timeout=120)  # the model loads in a few seconds; 120 s is far beyond that
    streamed = not reader.is_alive()
    check(streamed, f"the first window is written before standard input ends ({len(got)} of 32 lines)")
    if not streamed:
        p.kill()
        return
    p.stdin.write("\n".join(texts[32:]) + "\n")
    p.stdin.close()
    rest = p.stdout.read().splitlines()
    err = p.stderr.read()
    p.wait()
    printed = [g.rstrip("\n") for g in got] + rest
    check(p.returncode == 0, f"--input-file - exits 0 ({err.strip()})")
    check(printed == lines_of(e_one), f"the printed lines are the rows in input order ({len(printed)} lines)")

    # Progress lines without a terminal (interval 0 here: every batch).
    env = dict(os.environ, FFN_PROGRESS_SECONDS="0")
    r = subprocess.run([FFN, "embed", "--input-file", src, "--batch", "8", "--output", os.path.join(tmp, "p.npy")],
                       capture_output=True, text=True, env=env)
    lines = r.stderr.splitlines()
    check(r.returncode == 0 and any(l.startswith("ffn embed: 8/40 texts") for l in lines)
          and any(l.startswith("ffn embed: 40/40 texts") for l in lines) and lines[-1].startswith("ffn embed: done, 40 texts"),
          f"progress lines on stderr: {lines}")
    check("\r" not in r.stderr and "\033" not in r.stderr, "no terminal control characters in a log")

    # What a model directory leaves unsaid is noted on stderr (issue 31, item 8):
    # a copy without 1_Pooling/config.json (the other files linked).
    copy_dir = os.path.join(tmp, "model")
    os.mkdir(copy_dir)
    for name in os.listdir(model):
        if name != "1_Pooling":
            os.symlink(os.path.join(model, name), os.path.join(copy_dir, name))
    r = subprocess.run([FFN, "embed", "--model", copy_dir, "hello"], capture_output=True, text=True)
    check(r.returncode == 0 and r.stderr == f"ffn: note: {copy_dir}/1_Pooling/config.json: not found; assumed mean pooling\n",
          f"a missing pooling config is noted: {r.stderr!r}")
    r = subprocess.run([FFN, "embed", "--model", model, "hello"], capture_output=True, text=True)
    check(r.returncode == 0 and r.stderr == "", f"the installed model: nothing noted ({r.stderr!r})")

    # Prompts and truncation (issue 64) on the tiny models of tests/data/pooling:
    # --prompt-name gives the embedding of the prompt's text put before the
    # text; an unknown name and --no-truncate on a long text are refused
    # before any output (exit 2, nothing written); a cut text is counted.
    pooling = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "pooling", "mean_prompts")
    out = os.path.join(tmp, "prompted.npy")
    named = subprocess.run([FFN, "embed", "--model", pooling, "--prompt-name", "query", "a dog"],
                           capture_output=True, text=True)
    given = subprocess.run([FFN, "embed", "--model", pooling, "--prompt", "query: ", "a dog"],
                           capture_output=True, text=True)
    default = subprocess.run([FFN, "embed", "--model", pooling, "a dog"], capture_output=True, text=True)
    check(named.returncode == 0 and named.stdout == given.stdout and named.stdout != default.stdout,
          f"--prompt-name query is --prompt 'query: ', and not the default passage prompt ({named.stderr!r})")
    r = subprocess.run([FFN, "embed", "--model", pooling, "--prompt-name", "nope", "a dog", "--output", out],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "prompt name 'nope': the model has only passage, query" in r.stderr
          and not os.path.exists(out), f"an unknown prompt name: exit 2, no output ({r.stderr!r})")
    long_text = "one two three four five six seven eight nine ten one two three"
    r = subprocess.run([FFN, "embed", "--model", pooling, "short", long_text, "--no-truncate", "--output", out],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "text 1 with its prompt: more than the model's 12 tokens" in r.stderr
          and not os.path.exists(out), f"--no-truncate refuses a long text before any work ({r.stderr!r})")
    r = subprocess.run([FFN, "embed", "--model", pooling, "short", long_text], capture_output=True, text=True)
    check(r.returncode == 0 and r.stderr == "ffn: note: 1 of 2 texts were longer than the model's 12 tokens and "
          "were cut (--no-truncate refuses them)\n", f"a cut text is counted ({r.stderr!r})")

    # ffn rerank (issue 64) on the tiny cross-encoder of tests/data/cross_encoder:
    # --json is text-embeddings-inference's shape, best first, --top-k cuts
    # it; a sentence-embedding directory is refused with exit 2.
    ce = os.path.join(os.path.dirname(pooling), "..", "cross_encoder", "logits")
    docs = ["The cat sat on the red book.", "a dog runs fast", "the cat"]
    r = subprocess.run([FFN, "rerank", "--model", ce, "--query", "where is the cat", *docs, "--json"],
                       capture_output=True, text=True)
    ranked = json.loads(r.stdout) if r.returncode == 0 else []
    check(r.returncode == 0 and sorted(x["index"] for x in ranked) == [0, 1, 2]
          and all(a["score"] >= b["score"] for a, b in zip(ranked, ranked[1:]))
          and all(x["text"] == docs[x["index"]] for x in ranked), f"rerank --json: ranked, best first ({r.stderr!r})")
    top = subprocess.run([FFN, "rerank", "--model", ce, "--query", "where is the cat", *docs, "--json", "--top-k", "1"],
                         capture_output=True, text=True)
    check(top.returncode == 0 and ranked and json.loads(top.stdout) == ranked[:1], "rerank --top-k 1: the best only")
    r = subprocess.run([FFN, "rerank", "--model", pooling, "--query", "q", "a"], capture_output=True, text=True)
    check(r.returncode == 2 and "a cross-encoder here is a [\"BertForSequenceClassification\"]" in r.stderr,
          f"rerank with an embedding model: exit 2, named ({r.stderr!r})")

    # The other families (issue 64) through the CLI: MPNet's, XLM-R's and ModernBERT's tiny
    # models embed as sentence-transformers does (the golden's first two
    # sentences, within 1e-5), written to --output as [2, dim].
    data = os.path.join(os.path.dirname(pooling), "..")
    for family in ("mpnet", "xlmr", "modernbert"):
        d = os.path.join(data, family, "tiny")
        with open(os.path.join(d, "golden.safetensors"), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
            texts = json.loads(header["__metadata__"]["sentences"])[:2]
            info = header["default"]
            f.seek(8 + n + info["data_offsets"][0])
            want = np.frombuffer(f.read(info["data_offsets"][1] - info["data_offsets"][0]),
                                 dtype=np.float32).reshape(info["shape"])[:2]
        out = os.path.join(tmp, family + ".npy")
        r = subprocess.run([FFN, "embed", "--model", d, *texts, "--output", out], capture_output=True, text=True)
        if r.returncode == 2 and "built without libsentencepiece" in r.stderr:
            print(f"SKIPPED: ffn embed on {family}: {r.stderr.strip()}")
            continue
        got = np.load(out) if r.returncode == 0 else None
        check(got is not None and got.shape == want.shape and np.abs(got - want).max() <= 1e-5,
              f"ffn embed --model {family}/tiny: sentence-transformers' embeddings ({r.stderr.strip()!r})")


with tempfile.TemporaryDirectory(prefix="ffn-embed-cli-") as tmp:
    main(tmp)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
