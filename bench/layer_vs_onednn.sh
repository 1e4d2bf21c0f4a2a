#!/usr/bin/env bash
# The FFN layer against oneDNN at every T, both shapes of issue 34
# (384 -> 1536 as in all-MiniLM-L6-v2, 512 -> 2048 as in the paper), ReLU,
# biases, no norm, fp32 and int8 weights: `ffn bench` beside `ffn_peers run`
# (onednn, onednn_s8), each call in its own process, the implementations
# alternating case by case for ROUNDS rounds; the table gives the median over
# rounds of each process's per-call median, and ffn's speed-up.
#   bench/layer_vs_onednn.sh [ROUNDS=3] [THREADS=2]
# Needs build/bin/ffn_peers (built when libdnnl-dev is installed: bench/compare_peers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} threads=${2:-2}
[ -x build/bin/ffn_peers ] || { echo "layer_vs_onednn: build/bin/ffn_peers not built (bench/compare_peers.sh installs oneDNN)" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
median() { python3 -c 'import json, sys; print(json.loads([l for l in sys.stdin if l.startswith("{")][-1])["median_s"])'; }
for ((r = 0; r < rounds; ++r)); do
  for shape in "384 1536" "512 2048"; do
    read -r d f <<<"$shape"
    for T in 1 8 64 512 4096; do
      rep=20; ((T >= 512)) && rep=10
      for dt in fp32 int8; do
        impl=onednn; [ $dt = int8 ] && impl=onednn_s8
        t_ffn=$(build/bin/ffn bench --norm none --activation relu --d-model "$d" --d-ff "$f" --tokens "$T" \
                  --threads "$threads" --dtype $dt --repeats $rep --warmup 3 --json --yes | median)
        t_dnn=$(build/bin/ffn_peers run --impl $impl --d-model "$d" --d-ff "$f" --tokens "$T" --threads "$threads" \
                  --repeats $rep --warmup 3 --json | median)
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$d" "$f" "$T" "$dt" "$t_ffn" "$t_dnn" >>"$out"
      done
    done
  done
done
python3 - "$out" "$threads" "$rounds" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
keys = list(dict.fromkeys(tuple(r[:4]) for r in rows))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"{cpu}; {sys.argv[2]} threads; ReLU, biases, no norm; median over {sys.argv[3]} alternating rounds\n")
print("| shape | T | dtype | ffn | oneDNN | ffn speed-up |")
print("|---|---|---|---|---|---|")
fmt = lambda v: f"{v * 1e6:.1f} µs" if v < 1e-3 else f"{v * 1e3:.3f} ms"
for k in keys:
    f = statistics.median(float(r[4]) for r in rows if tuple(r[:4]) == k)
    o = statistics.median(float(r[5]) for r in rows if tuple(r[:4]) == k)
    print(f"| {k[0]} → {k[1]} | {k[2]} | {k[3]} | {fmt(f)} | {fmt(o)} | {o / f:.2f}× |")
PY
