#!/usr/bin/python3
"""One encoder layer, ffn against PyTorch on the same threads, in one run.

    /usr/bin/python3 bench/encoder_vs_torch.py [--ffn build/bin/ffn] [--threads 2] [--rounds 3]

Alternates `ffn bench --encoder` and bench/torch_encoder.py for --rounds
rounds at each case and prints a Markdown table of the medians (the median
over rounds of each round's median of 10 calls) and their ratio:
  - B=8, S=128, d=512, h=8, d_ff=2048, relu, post-LN (the issue's shape):
    inference (PyTorch in torch.inference_mode(), its fused fast path) and
    forward+backward (PyTorch autograd);
  - attention alone at S = 128, 1024, 4096 (ffn's tiled forward: GFLOP/s and
    % of the measured FMA peak, from `ffn bench --encoder`);
  - peak RSS of `ffn encode` at B=1, S=4096 against PyTorch's increase
    over its own baseline for one inference call.
Run it on an idle machine (no build or test at the same time).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument("--ffn", default=os.path.join(here, "..", "build", "bin", "ffn"))
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=3)
a = p.parse_args()


def last_json(out):
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON in: " + out)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return last_json(r.stdout)


shape = ["--batch", "8", "--seq", "128"]
threads = ["--threads", str(a.threads)]
rows = []
for mode, ffn_flag, torch_mode in (("inference", [], "inference"), ("forward+backward", ["--backward"], "train")):
    ours, theirs, cpu = [], [], ""
    for _ in range(a.rounds):
        j = run([a.ffn, "bench", "--encoder", *shape, *threads, "--repeats", "10", "--json", *ffn_flag])
        ours.append(j["median_s"])
        cpu = j["cpu"]
        t = run(["/usr/bin/python3", os.path.join(here, "torch_encoder.py"), *shape, *threads, "--repeats", "10",
                 "--mode", torch_mode, "--json"])
        theirs.append(t["median_s"])
    o, t = statistics.median(ours), statistics.median(theirs)
    rows.append((f"encoder layer {mode}, B=8 S=128", o, t))

print(f"CPU: {cpu}; {a.threads} threads; medians of {a.rounds} alternating rounds of 10 calls each\n")
print("| case | ffn | PyTorch 1.13 | ffn speed-up |")
print("|---|---|---|---|")
for name, o, t in rows:
    print(f"| {name} | {o * 1e3:.2f} ms | {t * 1e3:.2f} ms | {t / o:.2f}x |")

print("\n| attention alone (forward) | median | GFLOP/s | % of peak |")
print("|---|---|---|---|")
for S, B in ((128, 8), (1024, 1), (4096, 1)):
    res = [run([a.ffn, "bench", "--encoder", "--batch", str(B), "--seq", str(S), *threads, "--repeats", "5",
                "--json"]) for _ in range(a.rounds)]
    med = statistics.median(r["attention_median_s"] for r in res)
    g = statistics.median(r["attention_gflops"] for r in res)
    pk = statistics.median(r["attention_percent_of_peak"] for r in res)
    print(f"| B={B} S={S}, d=512, 8 heads | {med * 1e3:.2f} ms | {g:.0f} | {pk:.0f}% |")

with tempfile.TemporaryDirectory() as d:
    w, x, y = (os.path.join(d, n) for n in ("w.safetensors", "x.npy", "y.npy"))
    subprocess.run([a.ffn, "init", "--encoder", "--output", w], check=True)
    import numpy as np
    np.save(x, np.random.default_rng(0).standard_normal((1, 4096, 512), dtype=np.float32))
    r = subprocess.run(["/usr/bin/time", "-f", "%M", a.ffn, "encode", "--weights", w, "--input", x, "--output", y,
                        *threads], capture_output=True, text=True, check=True)
    ours_mib = int(r.stderr.strip().splitlines()[-1]) / 1024
    sizes = [os.path.getsize(f) / 2**20 for f in (x, y, w)]
t = subprocess.run(["/usr/bin/python3", os.path.join(here, "torch_encoder.py"), "--batch", "1", "--seq", "4096",
                    "--rss", *threads], capture_output=True, text=True, check=True).stdout.strip()
print(f"\npeak RSS of `ffn encode` at B=1, S=4096: {ours_mib:.1f} MiB; input {sizes[0]:.1f} + output {sizes[1]:.1f} "
      f"+ weights {sizes[2]:.1f} + 64 = {sum(sizes) + 64:.1f} MiB allowed")
print(f"PyTorch: {t}")
