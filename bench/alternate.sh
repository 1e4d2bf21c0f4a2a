#!/usr/bin/env bash
# Speed of two ffn programs side by side: `ffn bench --json` for each case,
# alternating the binaries round after round (so drift on a shared machine
# hits both), then each case's median over the rounds of each binary's
# per-call median and the ratio new/old. For moves that must not change speed
# (CONTRIBUTING.md) and for before/after figures.
#   bench/alternate.sh OLD_FFN NEW_FFN [ROUNDS=5] [THREADS=2]
# Cases: fp32, int8 weights and bf16 compute, T = 8 and 4096, 512 -> 2048 ReLU, no norm, 10 calls each;
# or CASES='case 1;case 2;...', each a list of `ffn bench` options (e.g. the activations:
# CASES='--activation relu --d-model 384 --d-ff 1536 --tokens 2048;--activation gelu ...').
set -euo pipefail
old=$1 new=$2 rounds=${3:-5} threads=${4:-2}
# bf16 compute without AVX512_BF16 or AMX runs the portable kernel (12 s a
# call at T = 4096 on an AVX2 machine): there it is measured at T = 256.
cases=("--dtype fp32 --tokens 8" "--dtype fp32 --tokens 4096" "--dtype int8 --tokens 8" "--dtype int8 --tokens 4096"
       "--compute bf16 --tokens 8")
if grep -qw avx512_bf16 /proc/cpuinfo; then cases+=("--compute bf16 --tokens 4096"); else cases+=("--compute bf16 --tokens 256"); fi
if [ -n "${CASES:-}" ]; then IFS=';' read -r -a cases <<<"$CASES"; fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 0; r < rounds; ++r)); do
  for c in "${cases[@]}"; do
    for side in old new; do
      bin=$old; [ $side = new ] && bin=$new
      # shellcheck disable=SC2086
      t=$(OMP_WAIT_POLICY=PASSIVE "$bin" bench --norm none --threads "$threads" --repeats 10 --warmup 2 --json --yes $c |
          python3 -c 'import json, sys; print(json.load(sys.stdin)["median_s"])')
      printf '%s\t%s\t%s\n' "$c" "$side" "$t" >>"$out"
    done
  done
done
python3 - "$out" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
cases = list(dict.fromkeys(r[0] for r in rows))
w = max(32, max(len(c) for c in cases))
print(f"{'case':{w}} {'old median':>12} {'new median':>12} {'new/old':>8}  (per-call medians, rounds' range)")
for c in cases:
    o = [float(r[2]) for r in rows if r[0] == c and r[1] == "old"]
    n = [float(r[2]) for r in rows if r[0] == c and r[1] == "new"]
    mo, mn = statistics.median(o), statistics.median(n)
    def fmt(v): return f"{v * 1e6:.0f} us" if v < 1e-2 else f"{v * 1e3:.2f} ms"
    print(f"{c:{w}} {fmt(mo):>12} {fmt(mn):>12} {mn / mo:8.3f}  old {fmt(min(o))}-{fmt(max(o))}, new {fmt(min(n))}-{fmt(max(n))}")
PY
