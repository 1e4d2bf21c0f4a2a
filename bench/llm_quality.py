#!/usr/bin/env python3
"""How close native compute (the GGUF's Q4_1/Q8_0 blocks × 16-bit activations)
stays to fp32 compute (every matrix dequantized to float32) on SmolLM2:
top-1 agreement of the next-token logits and perplexity, over a few
thousand tokens of varied text (prose, Markdown tables and commands, C++).

The text is cut into windows of 512 tokens (each from an empty context);
every position's logits come from `ffn generate --max-new-tokens 0
--logits` in both modes. Perplexity: exp of the mean negative log-likelihood
of each next token (the window's first token is not predicted).

    /usr/bin/python3 bench/llm_quality.py [--model M.gguf] [--files README.md,...] [--windows-per-file 2] [--json F]
                                 [--ffn build/bin/ffn]

Standard library and numpy only (Debian's /usr/bin/python3 has numpy; the python3 on PATH may not).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FFN = os.path.join(ROOT, "build", "bin", "ffn")
MODEL = os.environ.get("FFN_SMOLLM2_GGUF", os.path.expanduser("~/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
FILES = ["README.md", "docs/design.md", "tools/generate_cmd.cpp", "docs/cli.md"]
WINDOW = 512


def ids_of(model, path):
    """The file's ids (one text: lines are joined by the newline token)."""
    r = subprocess.run([FFN, "tokenize", "--model", model, "--input-file", path], capture_output=True, text=True,
                       check=True)
    nl = [int(x) for x in subprocess.run([FFN, "tokenize", "--model", model, "\n"], capture_output=True, text=True,
                                         check=True).stdout.split()]
    out = []
    for line in r.stdout.split("\n")[:-1]:
        out += [int(x) for x in line.split()] + nl
    return out


def measure(model, files, per_file, threads=0):
    windows = []
    for f in files:
        ids = ids_of(model, os.path.join(ROOT, f))
        for k in range(per_file):
            if (k + 1) * WINDOW <= len(ids):
                windows.append((f, ids[k * WINDOW:(k + 1) * WINDOW]))
    agree, total, nll = 0, 0, {"fp32": 0.0, "native": 0.0}
    per = []
    with tempfile.TemporaryDirectory() as tmp:
        for f, w in windows:
            logits = {}
            for mode in ("fp32", "native"):
                out = os.path.join(tmp, mode + ".npy")
                subprocess.run([FFN, "generate", "--compute", mode, "--model", model, "--ids", " ".join(map(str, w)),
                                "--max-new-tokens", "0", "--logits", out, "--threads", str(threads)], check=True)
                z = np.load(out).astype(np.float64)
                m = z.max(axis=1, keepdims=True)
                lse = np.log(np.exp(z - m).sum(axis=1)) + m[:, 0]
                nll[mode] += float((lse[:-1] - z[np.arange(len(w) - 1), w[1:]]).sum())
                logits[mode] = z
            same = int((logits["fp32"].argmax(axis=1) == logits["native"].argmax(axis=1)).sum())
            agree += same
            total += len(w)
            per.append({"file": f, "top1_agreement": same / len(w)})
    predicted = sum(len(w) - 1 for _, w in windows)
    ppl = {k: float(np.exp(v / predicted)) for k, v in nll.items()}
    return {"tokens": total, "windows": len(windows), "top1_agreement": agree / total, "ppl_fp32": ppl["fp32"],
            "ppl_native": ppl["native"], "ppl_ratio": ppl["native"] / ppl["fp32"], "per_window": per}


def main():
    global FFN
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--ffn", default=FFN, help="the program (default: build/bin/ffn)")
    ap.add_argument("--files", default=",".join(FILES))
    ap.add_argument("--windows-per-file", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        sys.exit(f"{a.model}: missing (scripts/setup.sh installs it)")
    FFN = a.ffn
    r = measure(a.model, a.files.split(","), a.windows_per_file)
    print(json.dumps({k: v for k, v in r.items() if k != "per_window"}))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
