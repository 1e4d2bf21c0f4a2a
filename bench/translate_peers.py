#!/usr/bin/env python3
"""ffn translate against CTranslate2 and transformers on one MarianMT model of
opus-mt-en-fr's size (bench/make_opus_size_marian.py), the same source ids and
a fixed number of new tokens (the model never generates EOS), 2 threads.
Each engine runs in its own process, in alternating rounds; the table shows
medians over rounds, the ratios to ffn fp32 (of the medians, and the median
of the rounds' own ratios) and each peer against ffn at its precision (fp32
or int8; median of the rounds' ratios, > 1: ffn is faster), per case:

  greedy-b1     one 20-token source, 30 new tokens: ms per generated token
  greedy-b32    32 sources of 10-40 tokens, 30 new tokens each: target tokens/s
  beam4-b32     the same with beam search, 4 beams

    bench/translate_peers.py [--rounds 3] [--engines ffn,ffn-int8,ct2,ct2-int8,hf]
                             [--cases greedy-b1,greedy-b32,beam4-b32]
                             [--wait-policy passive|active|default]

Every engine runs with OMP_WAIT_POLICY=PASSIVE unless --wait-policy says
otherwise ('default' leaves it unset: each runtime's own). transformers runs
on Debian's torch, which calls the system's libblas.so.3: with only libblas3
(the reference BLAS) installed it is ~30x slower than with OpenBLAS
(`apt-get install libopenblas0-pthread`); check before quoting it.

Needs: the model in ~/.cache/ffn/bench/marian-opus-size (made if missing, with
.venv's transformers), its CTranslate2 conversions (made if missing, with the
peers venv's ct2-transformers-converter), build/bin/ffn. The peers venv is
bench/embed_peers.py's (run it once, e.g. with --quick); the converter's
MarianTokenizer also needs sentencepiece there, which this script installs
(pinned, --no-deps) when missing.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CACHE = os.path.expanduser("~/.cache/ffn/bench")
MODEL = os.path.join(CACHE, "marian-opus-size")
PEERS = os.path.expanduser("~/.cache/ffn/peers-venv/bin/python")
VENV = os.path.join(ROOT, ".venv", "bin", "python")
FFN = os.path.join(ROOT, "build", "bin", "ffn")
NEW = 30
SENTENCEPIECE = "sentencepiece==0.2.0"  # the version scripts/setup.sh puts in .venv

CT2_RUNNER = r"""
import json, statistics, sys, time
import ctranslate2
model, compute, beams, path, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
vocab = json.load(open(model + "/shared_vocabulary.json"))
srcs = [[vocab[int(t)] if int(t) else "</s>" for t in line.split()] for line in open(path)]
tr = ctranslate2.Translator(model, device="cpu", compute_type=compute, inter_threads=1, intra_threads=2)
times = []
for r in range(repeats + 1):
    t0 = time.perf_counter()
    out = tr.translate_batch(srcs, beam_size=beams, max_decoding_length=%d, max_batch_size=32)
    t = time.perf_counter() - t0
    if r: times.append(t)
tokens = sum(len(o.hypotheses[0]) for o in out)
print(json.dumps({"median_s": statistics.median(times), "tokens": tokens}))
""" % NEW

HF_RUNNER = r"""
import json, statistics, sys, time
import torch
import transformers.generation.utils as gu
gu.is_fsdp_managed_module = lambda module: False
from transformers import MarianMTModel
torch.set_num_threads(2)
model, beams, path, repeats = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
m = MarianMTModel.from_pretrained(model).eval()
srcs = [[int(t) for t in line.split()] for line in open(path)]
S = max(map(len, srcs))
pad = m.config.pad_token_id
ids = torch.tensor([s + [pad] * (S - len(s)) for s in srcs])
mask = torch.tensor([[1] * len(s) + [0] * (S - len(s)) for s in srcs])
times = []
with torch.no_grad():
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        out = m.generate(input_ids=ids, attention_mask=mask, num_beams=beams, do_sample=False, max_new_tokens=%d)
        t = time.perf_counter() - t0
        if r: times.append(t)
tokens = int(out.shape[0]) * (int(out.shape[1]) - 1)
print(json.dumps({"median_s": statistics.median(times), "tokens": tokens}))
""" % NEW


def sources(path, n, lo, hi, seed):
    r = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            L = r.randint(lo, hi)
            f.write(" ".join(str(r.randint(2, 59000)) for _ in range(L - 1)) + " 0\n")


def run(engine, beams, path, repeats, wait_policy):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if wait_policy != "default":
        env["OMP_WAIT_POLICY"] = wait_policy.upper()
    if engine.startswith("ffn"):
        cmd = [FFN, "bench", "--translate", "--model", MODEL, "--input-file", path, "--beams", str(beams),
               "--max-new-tokens", str(NEW), "--threads", "2", "--repeats", str(repeats), "--warmup", "1", "--json",
               "--dtype", "int8" if engine.endswith("int8") else "fp32"]
        out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
        return {"median_s": out["median_s"], "tokens": out["target_tokens"],
                "share_projection": out["share_projection"]}
    if engine.startswith("ct2"):
        m = MODEL + ("-ct2-int8" if engine.endswith("int8") else "-ct2-float32")
        cmd = [PEERS, "-c", CT2_RUNNER, m, "int8" if engine.endswith("int8") else "float32", str(beams), path,
               str(repeats)]
    else:
        cmd = [VENV, "-c", HF_RUNNER, MODEL, str(beams), path, str(repeats)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.strip().split("\n")[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engines", default="ffn,ffn-int8,ct2,ct2-int8,hf")
    ap.add_argument("--cases", default="greedy-b1,greedy-b32,beam4-b32")
    ap.add_argument("--wait-policy", default="passive", choices=["passive", "active", "default"],
                    help="OMP_WAIT_POLICY of every engine (default: passive, so a busy core does not "
                         "slow a spinning thread; 'default' leaves it unset: each runtime's own)")
    args = ap.parse_args()
    if not os.path.isdir(MODEL):
        subprocess.run([VENV, os.path.join(ROOT, "bench", "make_opus_size_marian.py"), MODEL], check=True)
    if not os.path.exists(PEERS):
        sys.exit("translate_peers: no peers venv at ~/.cache/ffn/peers-venv; "
                 "make it with `/usr/bin/python3 bench/embed_peers.py --quick`")
    if subprocess.run([PEERS, "-c", "import sentencepiece"], capture_output=True).returncode != 0:
        subprocess.run([PEERS, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                        SENTENCEPIECE], check=True)
    for q in ("float32", "int8"):
        if not os.path.isdir(f"{MODEL}-ct2-{q}"):
            subprocess.run([os.path.join(os.path.dirname(PEERS), "ct2-transformers-converter"), "--model", MODEL,
                            "--output_dir", f"{MODEL}-ct2-{q}", "--quantization", q], check=True)
    p1, p32 = os.path.join(CACHE, "src-b1.txt"), os.path.join(CACHE, "src-b32.txt")
    sources(p1, 1, 20, 20, 1)
    sources(p32, 32, 10, 40, 2)
    cases = [c for c in [("greedy-b1", 1, p1), ("greedy-b32", 1, p32), ("beam4-b32", 4, p32)]
             if c[0] in args.cases.split(",")]
    engines = args.engines.split(",")
    results = {(c, e): [] for c, _, _ in cases for e in engines}
    extra = {}
    for r in range(args.rounds):
        for c, beams, path in cases:
            for e in engines:
                out = run(e, beams, path, args.repeats, args.wait_policy)
                results[(c, e)].append(out["median_s"] / out["tokens"])
                if "share_projection" in out:
                    extra[(c, e)] = out["share_projection"]
                print(f"round {r} {c:10s} {e:9s} {1e3 * out['median_s'] / out['tokens']:8.3f} ms/token "
                      f"({out['tokens']} tokens)", file=sys.stderr)
    # Ratios two ways: of the medians, and the median of each round's ratio
    # (engines of one round run minutes apart, so a slow spell of this
    # shared machine moves both sides of a round's ratio together).
    print(f"| case | engine | ms per target token | target tokens/s | vs ffn fp32 (time, medians) "
          f"| vs ffn fp32 (median of per-round ratios) | vs its ffn peer (median of per-round ratios) "
          f"| projection share |")
    print("|---|---|---|---|---|---|---|---|")
    for c, _, _ in cases:
        base = statistics.median(results[(c, "ffn")]) if "ffn" in engines else None
        for e in engines:
            t = statistics.median(results[(c, e)])
            ratio = f"{t / base:.2f}x" if base else ""
            rounds = f"{statistics.median(a / b for a, b in zip(results[(c, e)], results[(c, 'ffn')])):.2f}x" \
                if base else ""
            peer = "ffn-int8" if e.endswith("int8") else "ffn"
            vs_peer = f"{statistics.median(a / b for a, b in zip(results[(c, e)], results[(c, peer)])):.2f}x" \
                if peer in engines and not e.startswith("ffn") else ""
            share = f"{100 * extra[(c, e)]:.0f}%" if (c, e) in extra else ""
            print(f"| {c} | {e} | {1e3 * t:.3f} | {1 / t:.1f} | {ratio} | {rounds} | {vs_peer} | {share} |")


if __name__ == "__main__":
    main()
