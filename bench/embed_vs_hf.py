#!/usr/bin/env python3
"""`ffn embed` against sentence-transformers (or transformers) on the same
threads and the same text, in one run.

    .venv/bin/python bench/embed_vs_hf.py [--ffn build/bin/ffn] [--threads 2] [--rounds 3]

Throughput: 1,000 synthetic sentences of 20-120 tokens (written by
bench/hf_embed.py --write-sentences, so both sides read the same text),
batch 32: texts per second, the median over --rounds alternating rounds (each
round's own figure is a median of 3 runs after a warm-up). Latency: one
16-token sentence, one call at a time (ffn: `ffn bench --embed --text`,
median of 50 calls; the reference: hf_embed.py --mode latency, the same).
Prints a Markdown table. Run it on an idle machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument("--ffn", default=os.path.join(here, "..", "build", "bin", "ffn"))
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--sentences", type=int, default=1000)
a = p.parse_args()
hf = [sys.executable, os.path.join(here, "hf_embed.py"), "--threads", str(a.threads), "--json"]


def last_json(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][-1])


with tempfile.TemporaryDirectory() as d:
    lines = os.path.join(d, "sentences.txt")
    tp_ref, tp_ffn, lat_ref, lat_ffn = [], [], [], []
    impl = text = None
    for r in range(a.rounds):
        j = last_json(hf + ["--sentences", str(a.sentences), "--write-sentences", lines])
        tp_ref.append(j["sentences_per_s"])
        impl = j.get("impl", impl)
        f = last_json([a.ffn, "bench", "--embed", "--input-file", lines, "--threads", str(a.threads), "--repeats", "3",
                       "--warmup", "1", "--json"])
        tp_ffn.append(f["texts_per_s"])
        j = last_json(hf + ["--mode", "latency"])
        text = j["text"]
        lat_ref.append(j["median_ms"])
        f = last_json([a.ffn, "bench", "--embed", "--text", text, "--threads", str(a.threads), "--repeats", "50",
                       "--warmup", "5", "--json"])
        lat_ffn.append(f["median_s"] * 1e3)

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"CPU: {cpu}; {a.threads} threads; reference: {impl}; medians of {a.rounds} alternating rounds\n")
print("| case | ffn embed | reference | ffn speed-up |")
print("|---|---|---|---|")
t_f, t_r = statistics.median(tp_ffn), statistics.median(tp_ref)
print(f"| {a.sentences} sentences, 20-120 tokens, batch 32 | {t_f:.1f} texts/s | {t_r:.1f} texts/s | {t_f / t_r:.2f}x |")
l_f, l_r = statistics.median(lat_ffn), statistics.median(lat_ref)
print(f"| one 16-token sentence | {l_f:.2f} ms | {l_r:.2f} ms | {l_r / l_f:.2f}x |")
print(f"\n16-token sentence: {text!r}")
